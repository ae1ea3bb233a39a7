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
 * BLPOP again.  A waiter that joins with lists the BLPOP out does not name
 * ends it at once with CLIENT UNBLOCK (on another connection of the
 * target), so that the next one names them too (timing.h).
 *
 * A waiter answered (its wake-up, or a nil at its own timeout: the broker
 * keeps that timer) stays in the pool as a ghost for BROKER_POOL_GHOST_MS:
 * its lists are still named, and an element popped from them meanwhile is
 * kept (its stash) and handed over when the waiter's next BLPOP names the
 * same lists, as Redis would have handed it from the list.  So a waiter
 * that looks again (a nil, wait_check, BLPOP again) costs Redis no new
 * BLPOP, and nothing popped for it is lost; a stash not taken within
 * BROKER_POOL_GHOST_MS goes with its ghost, as a backend's own BLPOP answer
 * is lost when the backend dies with it unread.
 *
 * Why every guarantee holds: who is promoted, and in which order, is
 * decided by the script, which pushes to the promoted waiter's own list
 * (I3-I6); the broker only carries the news.  The list is the record until
 * a BLPOP pops it: a wake-up pushed before its waiter is named waits there
 * for the next BLPOP.  One popped and not handed over (a waiter that left)
 * is the case of a backend dying with its BLPOP's answer unread: the
 * promotion stays in Redis, and is confirmed by the waiter's next look
 * (wait_check or give_up, I6) or runs out with its window.
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "broker_wait.h"
#include "clock.h"
#include "cluster.h"
#include "timing.h"

/* A waiter in a pool (a member), or one answered lately (a ghost) */
typedef struct PoolMember
{
	int			client;			/* a member's client; -1: a ghost */
	uint32		generation;		/* the client's, when it joined */
	char	   *keys[2];		/* its wake and nudge lists */
	TimestampTz deadline;		/* a member's BLPOP timeout; DT_NOEND: none */
	TimestampTz ghost_since;	/* a ghost's answer */
	bool		armed;			/* named by the pool's BLPOP out */
	redisReply *stash[2];		/* a ghost's: popped from keys[j], not handed over */
} PoolMember;

/* The waiters of one target (and slot) and the connection they share */
typedef struct WaitPool
{
	int			target;			/* -1: a free entry */
	int			slot;			/* its keys' hash slot on a Cluster node, else -1 */
	int			upstream;		/* its connection, -1: none */
	uint32		up_gen;			/* ... that connection's gen */
	long long	client_id;		/* its CLIENT ID; -1: not known yet; 0: none */
	bool		blpop_out;		/* its BLPOP is sent, not answered yet */
	bool		unblock_out;	/* a CLIENT UNBLOCK of it is sent ... */
	int			unblock_up;		/* ... on this connection */
	uint32		unblock_gen;	/* ... (its gen) */
	bool		poll;			/* no connection to unblock it on: poll */
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
	int			free_entry = -1;
	WaitPool   *p;

	for (int i = 0; i < n_pools; i++)
	{
		if (pools[i].target == c->target && pools[i].slot == slot)
			return i;
		if (pools[i].target < 0 && free_entry < 0)
			free_entry = i;
	}
	if (free_entry < 0)
	{
		pools = pools ? repalloc(pools, sizeof(WaitPool) * (n_pools + 1)) :
			MemoryContextAlloc(broker_cxt, sizeof(WaitPool));
		memset(&pools[n_pools], 0, sizeof(WaitPool));
		free_entry = n_pools++;
	}
	p = &pools[free_entry];
	p->target = c->target;
	p->slot = slot;
	p->upstream = -1;
	p->n_members = 0;
	return free_entry;
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

/* Give pool i the (idle, side) connection u; ask for its CLIENT ID */
void
broker_pool_attach(int i, Upstream *u)
{
	WaitPool   *p = &pools[i];
	const char *argv[2] = {"CLIENT", "ID"};

	u->pool = true;
	p->upstream = u->index;
	p->up_gen = u->gen;
	p->blpop_out = p->unblock_out = false;
	p->client_id = -1;
	for (int k = 0; k < p->n_members; k++)
		p->members[k].armed = false;
	if (!broker_send_own(u, 2, argv, PEND_POOL_ID, i, broker_command_deadline(0)))
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

/* The entry of pool p one of whose lists is key (*which: 0 or 1), or -1 */
static int
find_entry(const WaitPool *p, const redisReply *key, int *which)
{
	for (int k = 0; k < p->n_members; k++)
		for (int j = 0; j < 2; j++)
			if (key_is(p->members[k].keys[j], key))
			{
				*which = j;
				return k;
			}
	return -1;
}

/* Drop what a ghost's stash holds */
static void
drop_stash(PoolMember *m)
{
	for (int j = 0; j < 2; j++)
		if (m->stash[j] != NULL)
		{
			freeReplyObject(m->stash[j]);
			m->stash[j] = NULL;
		}
}

/* Take entry k out of pool p */
static void
remove_member(WaitPool *p, int k)
{
	drop_stash(&p->members[k]);
	pfree(p->members[k].keys[0]);
	pfree(p->members[k].keys[1]);
	memmove(&p->members[k], &p->members[k + 1],
			sizeof(PoolMember) * (p->n_members - k - 1));
	p->n_members--;
}

/* The client of a member, or NULL if it left (or is a ghost) */
static Client *
member_client(const PoolMember *m)
{
	Client	   *c;

	if (m->client < 0)
		return NULL;
	c = clients[m->client];
	return (c->fd >= 0 && c->generation == m->generation) ? c : NULL;
}

/* Make entry m a ghost (answered, or its client left) */
static void
make_ghost(PoolMember *m)
{
	m->client = -1;
	m->deadline = DT_NOEND;
	m->ghost_since = redsem_now();
}

/*
 * Answer member m with reply r, as its own BLPOP's (NULL: its timeout, a
 * nil); it stays as a ghost
 */
static void
answer_member(PoolMember *m, const redisReply *r)
{
	Client	   *c = member_client(m);

	if (c != NULL)
	{
		if (r != NULL)
			broker_encode_reply(c, r);
		else
			broker_out_append(c, "*-1\r\n", 5);
		c->outstanding--;
		c->in_pool = false;
		c->process = true;
	}
	make_ghost(m);
}

/* Grow pool p's entries for one more */
static void
grow(WaitPool *p)
{
	if (p->n_members < p->cap)
		return;
	p->cap = Max(p->cap * 2, 16);
	p->members = p->members ? repalloc(p->members, sizeof(PoolMember) * p->cap) :
		MemoryContextAlloc(broker_cxt, sizeof(PoolMember) * p->cap);
}

/*
 * Put client c, whose BLPOP is cmd (two lists and a timeout), in pool i: a
 * ghost of the same lists comes back (answered at once from its stash, if
 * it holds one), else a new entry
 */
void
broker_pool_join(int i, Client *c, const redisReply *cmd)
{
	WaitPool   *p = &pools[i];
	double		secs = strtod(cmd->element[3]->str, NULL);
	int			j = 0;
	int			k = find_entry(p, cmd->element[1], &j);
	PoolMember *m;

	if (k < 0 || p->members[k].client >= 0 || j != 0 ||
		!key_is(p->members[k].keys[1], cmd->element[2]))
	{
		grow(p);
		k = p->n_members++;
		m = &p->members[k];
		memset(m, 0, sizeof(PoolMember));
		m->keys[0] = key_copy(cmd->element[1]);
		m->keys[1] = key_copy(cmd->element[2]);
	}
	m = &p->members[k];
	m->client = c->index;
	m->generation = c->generation;
	m->deadline = secs > 0 ?
		TimestampTzPlusMilliseconds(redsem_now(), (int64) (secs * 1000.0)) : DT_NOEND;
	c->in_pool = true;
	c->outstanding++;
	/* (the wake list first, as BLPOP names it first) */
	for (j = 0; j < 2; j++)
		if (m->stash[j] != NULL)
		{
			answer_member(m, m->stash[j]);
			freeReplyObject(m->stash[j]);
			m->stash[j] = NULL;
			break;
		}
}

/* Make the entries of a client that is closing ghosts */
void
broker_pool_leave(const Client *c)
{
	for (int i = 0; i < n_pools; i++)
		for (int k = 0; k < pools[i].n_members; k++)
			if (pools[i].members[k].client == c->index &&
				pools[i].members[k].generation == c->generation)
				make_ghost(&pools[i].members[k]);
}

/*
 * Pool p's BLPOP was answered: a wake-up goes to the member whose list it
 * came from, or into a ghost's stash (true: reply kept); an error (MOVED,
 * a refusal) to every member the BLPOP named, as from its own, and every
 * entry it named goes (a ghost would only meet it again); a nil (the
 * pool's cycle, or CLIENT UNBLOCK) to nobody
 */
static bool
pool_answered(WaitPool *p, redisReply *reply)
{
	bool		kept = false;

	p->blpop_out = false;
	if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
		reply->element[0]->type == REDIS_REPLY_STRING)
	{
		int			j = 0;
		int			k = find_entry(p, reply->element[0], &j);

		if (k >= 0 && p->members[k].client >= 0)
			answer_member(&p->members[k], reply);
		else if (k >= 0 && p->members[k].stash[j] == NULL)
		{
			p->members[k].stash[j] = reply;
			kept = true;
		}
	}
	else if (reply->type == REDIS_REPLY_ERROR)
	{
		for (int k = 0; k < p->n_members;)
		{
			if (p->members[k].armed)
			{
				answer_member(&p->members[k], reply);
				remove_member(p, k);
			}
			else
				k++;
		}
	}
	for (int k = 0; k < p->n_members; k++)
		p->members[k].armed = false;
	return kept;
}

/* True if an error reply says the command is not allowed or not known */
static bool
refused(const redisReply *reply)
{
	return reply->type == REDIS_REPLY_ERROR &&
		(strncmp(reply->str, "NOPERM", 6) == 0 || strncmp(reply->str, "ERR unknown", 11) == 0);
}

/*
 * A reply to a command of a pool's own (pend names the pool); true if the
 * pool kept the reply
 */
bool
broker_pool_reply(const Pending *pend, redisReply *reply)
{
	WaitPool   *p = &pools[pend->client];

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
			return pool_answered(p, reply);
		case PEND_CLIENT:
			break;
	}
	return false;
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

/*
 * Pool connection u failed: its pool has none now, and every waiter in it
 * loses its BLPOP, as with a connection of its own: put in lost (room for
 * broker_pool_members(u)), for the caller to close (08006, and acquire
 * tries again within its wait); how many.  Its ghosts go.
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
		p->blpop_out = p->unblock_out = false;
		while (p->n_members > 0)
		{
			Client	   *c = member_client(&p->members[0]);

			if (c != NULL)
			{
				c->in_pool = false;
				lost[n++] = c;
			}
			remove_member(p, 0);
		}
	}
	return n;
}

/* Take out pool p's ghosts past BROKER_POOL_GHOST_MS, and their stashes */
static void
prune_ghosts(WaitPool *p, TimestampTz now)
{
	for (int k = 0; k < p->n_members;)
	{
		PoolMember *m = &p->members[k];

		if (m->client < 0 &&
			now - m->ghost_since >= (TimestampTz) BROKER_POOL_GHOST_MS * 1000)
			remove_member(p, k);
		else
			k++;
	}
}

/* Send pool i's BLPOP, naming every entry's lists */
static void
send_blpop(int i, Upstream *u)
{
	WaitPool   *p = &pools[i];
	int			argc;
	const char **argv;
	int			cycle_ms;
	char		secs[32];

	prune_ghosts(p, redsem_now());
	argc = 2 + 2 * p->n_members;
	argv = palloc(sizeof(char *) * argc);
	cycle_ms = (p->client_id > 0 && !p->poll) ? BROKER_POOL_CYCLE_MS : BROKER_POOL_POLL_MS;
	snprintf(secs, sizeof(secs), "%.3f", cycle_ms / 1000.0);
	argv[0] = "BLPOP";
	for (int k = 0; k < p->n_members; k++)
	{
		argv[1 + 2 * k] = p->members[k].keys[0];
		argv[2 + 2 * k] = p->members[k].keys[1];
		p->members[k].armed = true;
	}
	argv[argc - 1] = secs;
	p->blpop_out = broker_send_own(u, argc, argv, PEND_POOL_WAIT, i,
								   broker_command_deadline(cycle_ms));
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

		if (u->ctx != NULL && u->target == p->target && !u->pool && u->count == 0)
			return u;
	}
	return NULL;
}

/* End pool i's BLPOP out with CLIENT UNBLOCK, on another connection */
static void
send_unblock(int i)
{
	WaitPool   *p = &pools[i];
	Upstream   *s = unblock_upstream(p);
	char		id[32];
	const char *argv[3] = {"CLIENT", "UNBLOCK", id};

	p->poll = (s == NULL);		/* (none: the next BLPOP ends soon instead) */
	if (s == NULL)
		return;
	snprintf(id, sizeof(id), "%lld", p->client_id);
	if (!broker_send_own(s, 3, argv, PEND_POOL_UNBLOCK, i, broker_command_deadline(0)))
		return;
	p->unblock_out = true;
	p->unblock_up = s->index;
	p->unblock_gen = s->gen;
}

/* True if pool p has a member its BLPOP out does not name */
static bool
has_unarmed(const WaitPool *p)
{
	for (int k = 0; k < p->n_members; k++)
		if (p->members[k].client >= 0 && !p->members[k].armed)
			return true;
	return false;
}

/* How many members (not ghosts) pool p has */
static int
live_members(const WaitPool *p)
{
	int			n = 0;

	for (int k = 0; k < p->n_members; k++)
		n += p->members[k].client >= 0;
	return n;
}

/*
 * Send each pool's BLPOP where none is out and it has members; end the one
 * out where it leaves out a member that joined since; free a pool with
 * neither entries nor a connection
 */
void
broker_pool_kick(void)
{
	for (int i = 0; i < n_pools; i++)
	{
		WaitPool   *p = &pools[i];
		Upstream   *u;

		if (p->target < 0)
			continue;
		u = pool_upstream(p);
		if (u == NULL && !p->blpop_out)
			prune_ghosts(p, redsem_now());
		if (u == NULL && p->n_members == 0)
		{
			p->target = -1;		/* (free; its index may name it again) */
			continue;
		}
		if (u == NULL || live_members(p) == 0)
			continue;
		/* (a CLIENT UNBLOCK whose connection failed since is not coming back) */
		if (p->unblock_out &&
			(upstreams[p->unblock_up]->ctx == NULL ||
			 upstreams[p->unblock_up]->gen != p->unblock_gen))
			p->unblock_out = false;
		if (!p->blpop_out)
			send_blpop(i, u);
		else if (!p->unblock_out && p->client_id > 0 && has_unarmed(p))
			send_unblock(i);
	}
}

/* Answer every member whose own BLPOP timeout has come (a nil) */
void
broker_pool_check(TimestampTz now)
{
	for (int i = 0; i < n_pools; i++)
		for (int k = 0; k < pools[i].n_members; k++)
		{
			PoolMember *m = &pools[i].members[k];

			if (m->client >= 0 && m->deadline <= now)
				answer_member(m, NULL);
		}
}

/* The earlier of until and every member's timeout */
TimestampTz
broker_pool_next_deadline(TimestampTz until)
{
	for (int i = 0; i < n_pools; i++)
		for (int k = 0; k < pools[i].n_members; k++)
			if (pools[i].members[k].client >= 0)
				until = Min(until, pools[i].members[k].deadline);
	return until;
}
