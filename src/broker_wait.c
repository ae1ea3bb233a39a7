/*
 * broker_wait.c
 *		Waits without a connection each: the broker's wait pools.
 *
 * A waiter waits with BLPOP of its own wake and nudge lists
 * (sem_wait_for_wake).  In direct mode that BLPOP blocks the backend's own
 * connection.  Behind the broker, a waiter joins the wait pool of its
 * target (and, on a Cluster node, of its keys' hash slot: a command's keys
 * must share one there), and one BLPOP on the pool's one connection names
 * the lists of every waiter in it.  Redis answers that BLPOP with the first
 * list that has an element, popped; the broker hands the answer to the
 * waiter whose list it is, as its own BLPOP's answer, and sends the pool's
 * BLPOP again for the waiters left.  A waiter that joins while the BLPOP is
 * out ends it with CLIENT UNBLOCK (on another connection of the target), so
 * that the next one names it too.
 *
 * Each waiter's BLPOP keeps direct mode's meaning exactly: it is answered
 * with what Redis popped from its lists, or with a nil once its timeout has
 * come and a BLPOP that did not pop them has ended (the pool's BLPOP ends
 * at the earliest timeout of the waiters it names), never with a nil while
 * a BLPOP naming its lists is out: so the broker holds no wake-up of its
 * own, and the lists in Redis stay the only record.  A waiter that leaves
 * (its link closes) while named has its element popped and dropped if one
 * comes before the BLPOP is sent again without it, as when a backend dies
 * with its own BLPOP's answer unread: the promotion stays in Redis, and
 * runs out with its window.
 *
 * Cost: the BLPOP names every waiter, so Redis's work to send it again
 * grows with them.  It is sent again after each wake-up it carries (the
 * workload's own rate), and for joins, leaves and timeouts no sooner than
 * BROKER_POOL_SPACING_US per waiter named after the last one (timing.h):
 * bounded Redis time per second, whatever the number of waiters.
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "broker_cluster.h"
#include "broker_wait.h"
#include "clock.h"
#include "cluster.h"
#include "timing.h"

/* A waiter in a pool: a client whose BLPOP is in it */
typedef struct PoolMember
{
	int			client;
	uint32		generation;		/* the client's, when it joined */
	char	   *keys[2];		/* its wake and nudge lists */
	TimestampTz deadline;		/* its BLPOP's timeout; DT_NOEND: none */
	bool		armed;			/* named by the pool's BLPOP out */
} PoolMember;

/* The waiters of one target (and slot) and the connection they share */
typedef struct WaitPool
{
	int			target;			/* -1: a free entry */
	uint32		gen;			/* bumped each time the entry is taken */
	int			slot;			/* its keys' hash slot on a Cluster node, else -1 */
	int			upstream;		/* its connection, -1: none */
	uint32		up_gen;			/* ... that connection's gen */
	long long	client_id;		/* its CLIENT ID; -1: not known yet; 0: none */
	bool		blpop_out;		/* its BLPOP is sent, not answered yet */
	TimestampTz sent_at;		/* ... when */
	int			named;			/* ... how many waiters it names */
	bool		stale;			/* ... a waiter it names left */
	bool		unblock_out;	/* a CLIENT UNBLOCK of it is sent ... */
	int			unblock_up;		/* ... on this connection */
	uint32		unblock_gen;	/* ... (its gen) */
	PoolMember *members;		/* in the order they joined */
	int			n_members;
	int			cap;
} WaitPool;

static WaitPool *pools;
static int	n_pools;

/* The hash slot a waiter's pool is for: -1 but on a Cluster node */
static int
pool_slot(const Client *c, const redisReply *cmd)
{
	if (!targets[c->target].cluster)
		return -1;
	return cluster_key_slot(cmd->element[1]->str, cmd->element[1]->len);
}

/* The pool a client's BLPOP (of a wake and a nudge list) goes in, made if new */
int
broker_pool_for(const Client *c, const redisReply *cmd)
{
	int			slot = pool_slot(c, cmd);
	int			i = -1;
	WaitPool   *p;

	for (int k = 0; k < n_pools; k++)
	{
		if (pools[k].target == c->target && pools[k].slot == slot)
			return k;
		if (pools[k].target < 0 && i < 0)
			i = k;
	}
	if (i < 0)
	{
		pools = pools ? repalloc(pools, sizeof(WaitPool) * (n_pools + 1)) :
			MemoryContextAlloc(broker_cxt, sizeof(WaitPool));
		memset(&pools[n_pools], 0, sizeof(WaitPool));
		i = n_pools++;
	}
	p = &pools[i];
	p->target = c->target;
	p->gen++;
	p->slot = slot;
	p->upstream = -1;
	p->client_id = -1;
	p->blpop_out = p->unblock_out = p->stale = false;
	p->n_members = 0;
	return i;
}

/* A pool's connection, or NULL if it has none (any more) */
static Upstream *
pool_upstream(const WaitPool *p)
{
	Upstream   *u;

	if (p->upstream < 0)
		return NULL;
	u = upstreams[p->upstream];
	return (u->ctx != NULL && u->pool && u->gen == p->up_gen) ? u : NULL;
}

/* True if pool i has a connection */
bool
broker_pool_usable(int i)
{
	return pool_upstream(&pools[i]) != NULL;
}

/* Queue a command of pool i's own on u */
static bool
send_own(int i, Upstream *u, int argc, const char **argv, PendKind what, int64 wait_ms)
{
	return broker_send_own(u, argc, argv, what, i, pools[i].gen,
						   broker_command_deadline(wait_ms));
}

/* Give pool i the (idle, side) connection u; ask for its CLIENT ID */
void
broker_pool_attach(int i, Upstream *u)
{
	WaitPool   *p = &pools[i];
	const char *argv[2] = {"CLIENT", "ID"};

	u->pool = true;
	p->upstream = u->index;
	p->up_gen = u->gen;
	p->blpop_out = p->unblock_out = p->stale = false;
	p->client_id = -1;
	for (int k = 0; k < p->n_members; k++)
		p->members[k].armed = false;
	if (!send_own(i, u, 2, argv, PEND_POOL_ID, 0))
		p->client_id = 0;
}

/* A copy of a key, in the broker's context */
static char *
key_copy(const redisReply *key)
{
	char	   *s = MemoryContextAlloc(broker_cxt, key->len + 1);

	memcpy(s, key->str, key->len);
	s[key->len] = '\0';
	return s;
}

/* True if s is the text of key */
static bool
key_is(const char *s, const redisReply *key)
{
	return strlen(s) == key->len && memcmp(s, key->str, key->len) == 0;
}

/* The member of pool p one of whose lists is key, or -1 */
static int
find_member(const WaitPool *p, const redisReply *key)
{
	for (int k = 0; k < p->n_members; k++)
		if (key_is(p->members[k].keys[0], key) || key_is(p->members[k].keys[1], key))
			return k;
	return -1;
}

/* Take member k out of pool p */
static void
remove_member(WaitPool *p, int k)
{
	if (p->members[k].armed)
		p->stale = true;
	pfree(p->members[k].keys[0]);
	pfree(p->members[k].keys[1]);
	memmove(&p->members[k], &p->members[k + 1],
			sizeof(PoolMember) * (p->n_members - k - 1));
	p->n_members--;
}

/* The client of a member, or NULL if it left */
static Client *
member_client(const PoolMember *m)
{
	Client	   *c = clients[m->client];

	return (c->fd >= 0 && c->generation == m->generation) ? c : NULL;
}

/*
 * Answer member k of pool p with reply r, as its own BLPOP's (NULL: its
 * timeout, a nil), and take it out
 */
static void
answer_member(WaitPool *p, int k, const redisReply *r)
{
	Client	   *c = member_client(&p->members[k]);

	if (c != NULL)
	{
		if (r != NULL)
		{
			broker_cluster_reply(c, r, true);
			broker_encode_reply(c, r);
		}
		else
			broker_out_append(c, "*-1\r\n", 5);
		c->outstanding--;
		c->in_pool = false;
		c->process = true;
	}
	p->members[k].armed = false;	/* (answered: not stale) */
	remove_member(p, k);
}

/*
 * Put client c, whose BLPOP is cmd (two lists and a timeout), in pool i.
 * A member already there with the same lists is another link of the same
 * waiter, whose old link the broker has not seen close yet: it gives way,
 * answered a nil (what is popped for those lists by the BLPOP out goes to
 * nobody: the new member is not named by it).
 */
void
broker_pool_join(int i, Client *c, const redisReply *cmd)
{
	WaitPool   *p = &pools[i];
	double		secs = strtod(cmd->element[3]->str, NULL);
	int			k = find_member(p, cmd->element[1]);
	PoolMember *m;

	if (k >= 0)
	{
		p->stale |= p->members[k].armed;
		answer_member(p, k, NULL);
	}
	if (p->n_members == p->cap)
	{
		p->cap = Max(p->cap * 2, 16);
		p->members = p->members ? repalloc(p->members, sizeof(PoolMember) * p->cap) :
			MemoryContextAlloc(broker_cxt, sizeof(PoolMember) * p->cap);
	}
	m = &p->members[p->n_members++];
	m->client = c->index;
	m->generation = c->generation;
	m->keys[0] = key_copy(cmd->element[1]);
	m->keys[1] = key_copy(cmd->element[2]);
	m->deadline = secs > 0 ?
		TimestampTzPlusMilliseconds(redsem_now(), (int64) (secs * 1000.0)) : DT_NOEND;
	m->armed = false;
	c->in_pool = true;
	c->outstanding++;
}

/* Take a client that is closing out of its pool */
void
broker_pool_leave(const Client *c)
{
	for (int i = 0; i < n_pools; i++)
		for (int k = 0; k < pools[i].n_members; k++)
			if (pools[i].members[k].client == c->index &&
				pools[i].members[k].generation == c->generation)
				remove_member(&pools[i], k--);
}

/*
 * Pool p's BLPOP was answered: a wake-up goes to the member whose list it
 * came from (dropped if it left); an error (MOVED, a refusal) to every
 * member the BLPOP named, as from its own; then every member it named
 * whose timeout has come is answered a nil
 */
static void
pool_answered(WaitPool *p, const redisReply *reply)
{
	TimestampTz now = redsem_now();

	p->blpop_out = false;
	p->stale = false;
	if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
		reply->element[0]->type == REDIS_REPLY_STRING)
	{
		int			k = find_member(p, reply->element[0]);

		if (k >= 0 && p->members[k].armed)
			answer_member(p, k, reply);
	}
	for (int k = 0; k < p->n_members;)
	{
		PoolMember *m = &p->members[k];

		if (m->armed && reply->type == REDIS_REPLY_ERROR)
			answer_member(p, k, reply);
		else if (m->armed && m->deadline <= now)
			answer_member(p, k, NULL);
		else
		{
			m->armed = false;
			k++;
		}
	}
}

/* True if an error reply says the command is not allowed or not known */
static bool
refused(const redisReply *reply)
{
	return reply->type == REDIS_REPLY_ERROR &&
		(strncmp(reply->str, "NOPERM", 6) == 0 || strncmp(reply->str, "ERR unknown", 11) == 0);
}

/*
 * A reply to a command of a pool's own (pend names the pool and its gen:
 * one for an entry freed and taken again since is ignored)
 */
void
broker_pool_reply(const Pending *pend, const redisReply *reply)
{
	WaitPool   *p = &pools[pend->client];

	if (p->target < 0 || p->gen != pend->generation)
		return;
	switch (pend->what)
	{
		case PEND_POOL_ID:
			p->client_id = reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0;
			break;
		case PEND_POOL_UNBLOCK:
			p->unblock_out = false;
			/* (a user that may not run it: the pool's BLPOP ends often instead) */
			if (refused(reply))
				p->client_id = 0;
			break;
		case PEND_POOL_WAIT:
			pool_answered(p, reply);
			break;
		case PEND_CLIENT:
			break;
	}
}

/* How many waiters are in the pool of connection u (0: not a pool's) */
int
broker_pool_members(Upstream *u)
{
	for (int i = 0; i < n_pools; i++)
		if (pools[i].target >= 0 && pools[i].upstream == u->index && pools[i].up_gen == u->gen)
			return pools[i].n_members;
	return 0;
}

/* True if a wait pool is target t's */
bool
broker_pool_of(int t)
{
	for (int i = 0; i < n_pools; i++)
		if (pools[i].target == t)
			return true;
	return false;
}

/*
 * Pool connection u failed: its pool has none now, and every waiter in it
 * loses its BLPOP, as with a connection of its own: put in lost (room for
 * broker_pool_members(u)), for the caller to close (08006, and acquire
 * tries again within its wait); how many
 */
int
broker_pool_fail(Upstream *u, Client **lost)
{
	int			n = 0;

	for (int i = 0; i < n_pools; i++)
	{
		WaitPool   *p = &pools[i];

		if (p->target < 0 || p->upstream != u->index || p->up_gen != u->gen)
			continue;
		p->upstream = -1;
		p->blpop_out = p->unblock_out = p->stale = false;
		while (p->n_members > 0)
		{
			Client	   *c = member_client(&p->members[0]);

			if (c != NULL)
			{
				c->in_pool = false;
				lost[n++] = c;
			}
			p->members[0].armed = false;
			remove_member(p, 0);
		}
	}
	return n;
}

/* The earliest timeout of pool p's members (DT_NOEND: none) */
static TimestampTz
earliest_deadline(const WaitPool *p)
{
	TimestampTz d = DT_NOEND;

	for (int k = 0; k < p->n_members; k++)
		d = Min(d, p->members[k].deadline);
	return d;
}

/*
 * When pool p's BLPOP may next be ended or sent for a join, a leave or a
 * timeout: BROKER_POOL_SPACING_US per waiter its last one named after it
 * was sent
 */
static TimestampTz
next_allowed(const WaitPool *p)
{
	return p->sent_at + (TimestampTz) p->named * BROKER_POOL_SPACING_US;
}

/*
 * The timeout (ms) of pool p's BLPOP sent now: its members' earliest, but
 * no sooner than the spacing allows, and the cycle at most
 */
static int64
blpop_timeout_ms(const WaitPool *p, TimestampTz now)
{
	int64		cycle = p->client_id > 0 ? BROKER_POOL_CYCLE_MS : BROKER_POOL_POLL_MS;
	int64		spacing = ((int64) p->n_members * BROKER_POOL_SPACING_US + 999) / 1000;
	TimestampTz d = earliest_deadline(p);
	int64		ms = d == DT_NOEND ? cycle : (d - now + 999) / 1000;

	return Max(Min(Max(ms, spacing), Max(cycle, spacing)), 1);
}

/* Send pool i's BLPOP, naming every member's lists */
static void
send_blpop(int i, Upstream *u, TimestampTz now)
{
	WaitPool   *p = &pools[i];
	int			argc = 2 + 2 * p->n_members;
	const char **argv = palloc(sizeof(char *) * argc);
	int64		timeout_ms = blpop_timeout_ms(p, now);
	char		secs[32];

	snprintf(secs, sizeof(secs), "%.3f", timeout_ms / 1000.0);
	argv[0] = "BLPOP";
	for (int k = 0; k < p->n_members; k++)
	{
		argv[1 + 2 * k] = p->members[k].keys[0];
		argv[2 + 2 * k] = p->members[k].keys[1];
		p->members[k].armed = true;
	}
	argv[argc - 1] = secs;
	p->blpop_out = send_own(i, u, argc, argv, PEND_POOL_WAIT, timeout_ms);
	p->sent_at = now;
	p->named = p->n_members;
	p->stale = false;
	pfree(argv);
}

/*
 * A connection of pool p's target to send its CLIENT UNBLOCK on: the
 * shared one, or an idle side one (not behind a blocking command); NULL if
 * none
 */
static Upstream *
unblock_upstream(const WaitPool *p)
{
	int			shared = targets[p->target].shared;

	if (shared >= 0 && upstreams[shared]->ctx != NULL)
		return upstreams[shared];
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];

		if (u->ctx != NULL && u->target == p->target && !u->pool && !u->retired &&
			u->count == 0)
			return u;
	}
	return NULL;
}

/*
 * True if pool i can take a client's BLPOP now: it has a connection, and
 * no BLPOP out, or one it can end (its CLIENT ID known, and a connection
 * of its target to send CLIENT UNBLOCK on); else the client waits on a
 * side connection of its own
 */
bool
broker_pool_can_take(int i)
{
	WaitPool   *p = &pools[i];

	if (pool_upstream(p) == NULL)
		return false;
	/* (its CLIENT ID not known yet, or none: its BLPOP ends soon by itself) */
	return !p->blpop_out || p->client_id <= 0 || unblock_upstream(p) != NULL;
}

/* End pool i's BLPOP out with CLIENT UNBLOCK, on another connection */
static void
send_unblock(int i)
{
	WaitPool   *p = &pools[i];
	Upstream   *s = unblock_upstream(p); /* (to_unblock found one) */
	char		id[32];
	const char *argv[3] = {"CLIENT", "UNBLOCK", id};

	snprintf(id, sizeof(id), "%lld", p->client_id);
	if (!send_own(i, s, 3, argv, PEND_POOL_UNBLOCK, 0))
		return;
	p->unblock_out = true;
	p->unblock_up = s->index;
	p->unblock_gen = s->gen;
}

/*
 * True if pool p's BLPOP out should be ended early, and can be: it leaves
 * out a member, or names one that left (a member's timeout ends it by
 * itself), and there is a connection to send CLIENT UNBLOCK on
 */
static bool
to_unblock(const WaitPool *p)
{
	bool		out_of_date = p->stale;

	if (!p->blpop_out || p->unblock_out || p->client_id <= 0)
		return false;
	for (int k = 0; k < p->n_members && !out_of_date; k++)
		out_of_date = !p->members[k].armed;
	return out_of_date && unblock_upstream(p) != NULL;
}

/*
 * Send each pool's BLPOP where none is out and it has members; end the one
 * out where it is out of date (no sooner than next_allowed); free a pool
 * with neither members nor a connection
 */
void
broker_pool_kick(void)
{
	TimestampTz now = redsem_now();

	for (int i = 0; i < n_pools; i++)
	{
		WaitPool   *p = &pools[i];
		Upstream   *u;

		if (p->target < 0)
			continue;
		u = pool_upstream(p);
		if (u == NULL && p->n_members == 0)
		{
			p->target = -1;		/* (free; its index may name it again) */
			continue;
		}
		if (u == NULL)
			continue;
		/* (a CLIENT UNBLOCK whose connection failed since is not coming back) */
		if (p->unblock_out &&
			(upstreams[p->unblock_up]->ctx == NULL ||
			 upstreams[p->unblock_up]->gen != p->unblock_gen))
			p->unblock_out = false;
		/* (one out that names only waiters who left is ended all the same) */
		if (!p->blpop_out && p->n_members > 0)
			send_blpop(i, u, now);
		else if (p->blpop_out && now >= next_allowed(p) && to_unblock(p))
			send_unblock(i);
	}
}

/*
 * Answer every member whose own timeout has come and that no BLPOP out
 * names (a nil; one that is named is answered when that BLPOP ends)
 */
void
broker_pool_check(TimestampTz now)
{
	for (int i = 0; i < n_pools; i++)
		for (int k = 0; k < pools[i].n_members;)
		{
			PoolMember *m = &pools[i].members[k];

			if (!m->armed && m->deadline <= now)
				answer_member(&pools[i], k, NULL);
			else
				k++;
		}
}

/*
 * The earlier of until and every moment the pools need the loop: a
 * member's timeout, and when a BLPOP out of date may be ended
 */
TimestampTz
broker_pool_next_deadline(TimestampTz until)
{
	TimestampTz now = redsem_now();

	for (int i = 0; i < n_pools; i++)
	{
		WaitPool   *p = &pools[i];

		if (p->target < 0)
			continue;
		for (int k = 0; k < p->n_members; k++)
			if (!p->members[k].armed)
				until = Min(until, p->members[k].deadline);
		if (to_unblock(p))
			until = Min(until, Max(next_allowed(p), now));
	}
	return until;
}
