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
 * out ends it at once with CLIENT UNBLOCK (on the target's shared
 * connection), so that the next BLPOP names it too (timing.h).
 *
 * Why every guarantee holds: who is promoted, and in which order, is
 * decided by the script, which pushes to the promoted waiter's own list
 * (I3-I6); the broker only carries the news.  The list stays the record: a
 * wake-up pushed before its waiter is named by a BLPOP waits in it for the
 * next one.  The broker answers a waiter's timeout itself (a nil, as
 * Redis's BLPOP would); a wake-up popped after its waiter was answered or
 * left is dropped, as a backend's own BLPOP answer is lost when the backend
 * dies with it unread: the promotion stays in Redis, and the waiter's next
 * look (wait_check or give_up) confirms it (I6), or its window runs out.
 */
#include "postgres.h"

#include "utils/memutils.h"

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
	int			target;
	int			slot;			/* its keys' hash slot on a Cluster node, else -1 */
	int			upstream;		/* its connection, -1: none */
	uint32		up_gen;			/* ... that connection's gen */
	long long	client_id;		/* its CLIENT ID; -1: not known yet; 0: none */
	bool		blpop_out;		/* its BLPOP is sent, not answered yet */
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
	WaitPool   *p;

	for (int i = 0; i < n_pools; i++)
		if (pools[i].target == c->target && pools[i].slot == slot)
			return i;
	pools = pools ? repalloc(pools, sizeof(WaitPool) * (n_pools + 1)) :
		MemoryContextAlloc(broker_cxt, sizeof(WaitPool));
	p = &pools[n_pools];
	memset(p, 0, sizeof(WaitPool));
	p->target = c->target;
	p->slot = slot;
	p->upstream = -1;
	return n_pools++;
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

/* Put client c, whose BLPOP is cmd (two lists and a timeout), in pool i */
void
broker_pool_join(int i, Client *c, const redisReply *cmd)
{
	WaitPool   *p = &pools[i];
	PoolMember *m;
	double		secs = strtod(cmd->element[3]->str, NULL);

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

/* Take member k out of pool p */
static void
remove_member(WaitPool *p, int k)
{
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
			broker_encode_reply(c, r);
		else
			broker_out_append(c, "*-1\r\n", 5);
		c->outstanding--;
		c->in_pool = false;
		c->process = true;
	}
	remove_member(p, k);
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

/* The member of pool p one of whose lists is key, or -1 */
static int
find_member(const WaitPool *p, const redisReply *key)
{
	for (int k = 0; k < p->n_members; k++)
		for (int j = 0; j < 2; j++)
			if (strlen(p->members[k].keys[j]) == key->len &&
				memcmp(p->members[k].keys[j], key->str, key->len) == 0)
				return k;
	return -1;
}

/*
 * Pool p's BLPOP was answered: a wake-up goes to the waiter whose list it
 * came from (dropped if it left: see the top); an error (MOVED, a refusal)
 * to every waiter the BLPOP named, as from its own; a nil (the pool's
 * cycle, or CLIENT UNBLOCK) to nobody
 */
static void
pool_answered(WaitPool *p, const redisReply *reply)
{
	p->blpop_out = false;
	if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
		reply->element[0]->type == REDIS_REPLY_STRING)
	{
		int			k = find_member(p, reply->element[0]);

		if (k >= 0)
			answer_member(p, k, reply);
	}
	else if (reply->type == REDIS_REPLY_ERROR)
	{
		for (int k = 0; k < p->n_members;)
		{
			if (p->members[k].armed)
				answer_member(p, k, reply);
			else
				k++;
		}
	}
	for (int k = 0; k < p->n_members; k++)
		p->members[k].armed = false;
}

/* A reply to a command of a pool's own (pend names the pool) */
void
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
			if (reply->type == REDIS_REPLY_ERROR)
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
		if (pools[i].upstream == u->index && pools[i].up_gen == u->gen)
			return pools[i].n_members;
	return 0;
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

		if (p->upstream != u->index || p->up_gen != u->gen)
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

/* Send pool i's BLPOP, naming every waiter in it */
static void
send_blpop(int i, Upstream *u)
{
	WaitPool   *p = &pools[i];
	int			argc = 2 + 2 * p->n_members;
	const char **argv = palloc(sizeof(char *) * argc);
	int			cycle_ms = p->client_id > 0 ? BROKER_POOL_CYCLE_MS : BROKER_POOL_POLL_MS;
	char		secs[32];

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

/* End pool i's BLPOP out with CLIENT UNBLOCK, on its target's shared connection */
static void
send_unblock(int i)
{
	WaitPool   *p = &pools[i];
	int			shared = targets[p->target].shared;
	char		id[32];
	const char *argv[3] = {"CLIENT", "UNBLOCK", id};
	Upstream   *s;

	if (shared < 0 || upstreams[shared]->ctx == NULL)
		return;					/* (the cycle ends it) */
	s = upstreams[shared];
	snprintf(id, sizeof(id), "%lld", p->client_id);
	if (!broker_send_own(s, 3, argv, PEND_POOL_UNBLOCK, i, broker_command_deadline(0)))
		return;
	p->unblock_out = true;
	p->unblock_up = s->index;
	p->unblock_gen = s->gen;
}

/* True if pool p has a waiter its BLPOP out does not name */
static bool
has_unarmed(const WaitPool *p)
{
	for (int k = 0; k < p->n_members; k++)
		if (!p->members[k].armed)
			return true;
	return false;
}

/*
 * Send each pool's BLPOP where none is out and it has waiters; end the
 * one out where it leaves out a waiter that joined since
 */
void
broker_pool_kick(void)
{
	for (int i = 0; i < n_pools; i++)
	{
		WaitPool   *p = &pools[i];
		Upstream   *u = pool_upstream(p);

		if (u == NULL || p->n_members == 0)
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

/* Answer every waiter whose own BLPOP timeout has come (a nil) */
void
broker_pool_check(TimestampTz now)
{
	for (int i = 0; i < n_pools; i++)
		for (int k = 0; k < pools[i].n_members;)
		{
			if (pools[i].members[k].deadline <= now)
				answer_member(&pools[i], k, NULL);
			else
				k++;
		}
}

/* The earlier of until and every waiter's timeout */
TimestampTz
broker_pool_next_deadline(TimestampTz until)
{
	for (int i = 0; i < n_pools; i++)
		for (int k = 0; k < pools[i].n_members; k++)
			until = Min(until, pools[i].members[k].deadline);
	return until;
}
