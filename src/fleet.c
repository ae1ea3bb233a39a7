/*
 * fleet.c
 *		One view of the fleet.  redsem_semaphores() lists every semaphore
 *		in use under the key prefix, from any server, as Redis sees it now.
 *		Redis is never scanned (no KEYS, no SCAN): an index key per prefix
 *		(<prefix>index, see "THE INDEX" in redsem.lua) holds the names that
 *		every server's keeper notes for the holds and places in line of its
 *		sessions (fleet_touch_index), and those with a stored limit.  The
 *		view reads the index, then asks each semaphore: one round trip per
 *		semaphore, at most max_semaphores of them.  Both also say whether
 *		Redis may evict keys: in a Cluster, every node that serves one of
 *		their semaphores is asked, not only the index's (nodes_evicting).
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "bounds.h"
#include "clock.h"
#include "cluster.h"
#include "conn.h"
#include "fleet.h"
#include "script.h"
#include "textenc.h"
#include "timing.h"

PG_FUNCTION_INFO_V1(redsem_semaphores);

#define SEMAPHORES_COLUMNS	15

/* A (prefix, name) pair to note in the index */
typedef struct IndexEntry
{
	const char *prefix;
	const char *name;
} IndexEntry;

/* Order entries by prefix, then name */
static int
entry_cmp(const void *a, const void *b)
{
	const IndexEntry *x = (const IndexEntry *) a;
	const IndexEntry *y = (const IndexEntry *) b;
	int			c = strcmp(x->prefix, y->prefix);

	return c != 0 ? c : strcmp(x->name, y->name);
}

/* A semaphore's uses (acquires and waits) as the last touch counted them */
typedef struct UseSeen
{
	char		prefix[REDSEM_MAX_PREFIX_BYTES + 1];
	char		name[REDSEM_MAX_NAME_BYTES + 1];
	int64		uses;
} UseSeen;

static UseSeen *uses_seen = NULL;
static int	nuses_seen = -1;	/* -1: not counted yet */

/*
 * The semaphores this server's sessions took or waited on since the last
 * touch, from the statistics (a hold shorter than the time between two
 * touches is no hold at either): their entries go at out, *m more.  The
 * first count is only noted: what came before the keeper is not recent.
 */
static void
recently_used(IndexEntry *out, int *m, int max)
{
	SemStats   *st;
	int			n = stats_snapshot(&st);
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	UseSeen    *now = palloc0(sizeof(UseSeen) * Max(n, 1));

	MemoryContextSwitchTo(old);
	for (int i = 0; i < n; i++)
	{
		int64		uses = st[i].counters[STAT_ACQUIRED] + st[i].counters[STAT_WAITED];
		int64		before = 0;

		strlcpy(now[i].prefix, st[i].prefix, sizeof(now[i].prefix));
		strlcpy(now[i].name, st[i].name, sizeof(now[i].name));
		now[i].uses = uses;
		if (nuses_seen < 0 || st[i].name[0] == '\0' || *m >= max)
			continue;
		for (int k = 0; k < nuses_seen; k++)
			if (strcmp(uses_seen[k].name, st[i].name) == 0 &&
				strcmp(uses_seen[k].prefix, st[i].prefix) == 0)
				before = uses_seen[k].uses;
		if (uses == before)
			continue;
		out[*m].prefix = pstrdup(st[i].prefix);
		out[*m].name = pstrdup(st[i].name);
		(*m)++;
	}
	if (uses_seen)
		pfree(uses_seen);
	uses_seen = now;
	nuses_seen = n;
}

/*
 * The distinct (prefix, name) pairs of the holds the keeper keeps and of
 * the semaphores used since the last touch (out has room for n +
 * redsem_max_tracked_semaphores)
 */
static int
collect_entries(const HoldCopy *holds, int n, uint64 target, IndexEntry *out)
{
	int			m = 0,
				k = 0;

	for (int i = 0; i < n; i++)
	{
		const SharedHold *h = &holds[i].hold;

		if (h->abandoned || h->lost || h->target != target)
			continue;
		out[m].prefix = h->prefix;
		out[m].name = h->name;
		m++;
	}
	recently_used(out, &m, n + redsem_max_tracked_semaphores);
	if (m == 0)
		return 0;
	qsort(out, m, sizeof(IndexEntry), entry_cmp);
	for (int i = 1; i < m; i++)
		if (entry_cmp(&out[i], &out[k]) != 0)
			out[++k] = out[i];
	return k + 1;
}

/*
 * Say that Redis may evict redsem's keys (its maxmemory-policy is policy):
 * an evicted key forgets holders, and the limit can then be exceeded
 */
static void
report_eviction(int elevel, const char *policy)
{
	ereport(elevel,
			(errcode(ERRCODE_WARNING),
			 errmsg("redsem's Redis may evict its keys (maxmemory-policy %s)", policy),
			 errdetail("An evicted key forgets its semaphore's holders: more sessions than the limit may then run at once."),
			 errhint("Set maxmemory-policy to noeviction on that Redis, or give redsem a Redis of its own.")));
}

/*
 * The keeper's report of an evicting Redis (NULL: it is not): when first
 * seen or changed, then every FLEET_EVICTION_LOG_MS while it lasts
 */
static void
keeper_note_eviction(const char *policy)
{
	static char last[65] = "";
	static TimestampTz logged_at = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (policy == NULL)
	{
		last[0] = '\0';
		return;
	}
	if (strcmp(last, policy) == 0 &&
		!TimestampDifferenceExceeds(logged_at, now, FLEET_EVICTION_LOG_MS))
		return;
	strlcpy(last, policy, sizeof(last));
	logged_at = now;
	report_eviction(WARNING, policy);
}

/*
 * Unless *evicting says so already: in a Redis Cluster, ask each node that
 * serves one of the n names of prefix (NULL: redsem.key_prefix) and not the
 * index (whose index operation answered for it) whether it may evict keys:
 * once per node known to serve a name, and once per name whose node is not
 * known yet (the call learns it); *evicting: the first policy that may.
 * False if a node could not be asked (call->outcome says why).
 */
static bool
nodes_evicting(RedisCall *call, const char *prefix, char *const *names, int n,
			   char **evicting)
{
	bool		asked[CLUSTER_MAX_NODES] = {0};
	int		   *known;
	int			node;

	if (!cluster_enabled())
		return true;
	if ((node = sem_node_of(call, prefix, NULL)) >= 0 && node < CLUSTER_MAX_NODES)
		asked[node] = true;
	known = palloc(sizeof(int) * Max(n, 1));
	sem_nodes_of(call, prefix, names, n, known);
	for (int i = 0; i < n && *evicting == NULL; i++)
	{
		/* (a node not known at first may be since: an earlier name taught it) */
		if ((node = known[i]) < 0)
			node = known[i] = sem_node_of(call, prefix, names[i]);
		if (node >= 0 && node < CLUSTER_MAX_NODES)
		{
			if (asked[node])
				continue;
			asked[node] = true;
		}
		if (!sem_node_policy(call, prefix, names[i], evicting))
			return false;
		/* (the call taught the name's node, redirected or not) */
		if (known[i] < 0 &&
			(node = sem_node_of(call, prefix, names[i])) >= 0 && node < CLUSTER_MAX_NODES)
			asked[node] = true;
	}
	pfree(known);
	return true;
}

/*
 * Split the m entries (sorted by prefix) into groups of one prefix and at
 * most FLEET_TOUCH_MAX_NAMES names (names: their names, adaptive: where
 * each group's answers go); their number
 */
static int
touch_groups(const IndexEntry *entries, int m, const char **names, bool *adaptive,
			 IndexTouch *groups)
{
	int			ngroups = 0;

	for (int i = 0; i < m; i++)
	{
		names[i] = entries[i].name;
		if (i == 0 || strcmp(entries[i].prefix, entries[i - 1].prefix) != 0 ||
			groups[ngroups - 1].n == FLEET_TOUCH_MAX_NAMES)
		{
			groups[ngroups].prefix = entries[i].prefix;
			groups[ngroups].names = names + i;
			groups[ngroups].adaptive = adaptive + i;
			groups[ngroups++].n = 0;
		}
		groups[ngroups - 1].n++;
	}
	return ngroups;
}

/*
 * Unless *evicting says so already, in a Cluster: whether the nodes of
 * each prefix's semaphores may evict keys (nodes_evicting); *unsure: set
 * if a node could not be asked that (a node that fails so is not a failed
 * touch: the index has the names)
 */
static void
touched_nodes_evicting(RedisCall *call, const IndexEntry *entries, int m,
					   char **evicting, bool *unsure)
{
	for (int first = 0, last; first < m; first = last)
	{
		char	  **names;

		for (last = first + 1; last < m &&
			 strcmp(entries[last].prefix, entries[first].prefix) == 0; last++)
			;
		names = palloc(sizeof(char *) * (last - first));
		for (int i = first; i < last; i++)
			names[i - first] = unconstify(char *, entries[i].name);
		if (!nodes_evicting(call, entries[first].prefix, names, last - first, evicting))
			*unsure = true;
	}
}

/*
 * Log that the index could not be touched, at most every
 * KEEPER_LOG_EVERY_MS (the next touch tries again)
 */
void
fleet_touch_failed(const char *why)
{
	static TimestampTz logged_at = 0;

	if (!redsem_once_every(&logged_at, KEEPER_LOG_EVERY_MS))
		return;
	ereport(LOG,
			(errmsg("redsem keeper could not note its semaphores in the index of redsem_semaphores(): %s", why),
			 errdetail("Leases are not affected; the view may miss this server's semaphores until a later try succeeds.")));
}

/* When the keeper's next touch of the index is due */
static TimestampTz next_touch = 0;
/* The touches asked of the keeper it has seen (shared_keeper_touches_asked) */
static uint64 touches_seen = 0;
/* The adaptive semaphores this server used at the last touch (X4) */
static FleetName *adaptive_used = NULL;
static int	nadaptive_used = 0;
/* When the keeper next raises its holds' generations (keep_generations) */
static TimestampTz next_gen_keep = 0;

/*
 * True if hold h is one whose generation the keeper keeps (keep_generations):
 * held, or in line (a wait longer than a window would be granted a lease
 * the generation no longer counts)
 */
static bool
gen_kept(const SharedHold *h, uint64 target)
{
	return !h->abandoned && !h->lost && h->target == target &&
		(h->phase == PHASE_HELD || h->phase == PHASE_WAITING);
}

/*
 * True if the keeper's raise of its holds' generations is due
 * (fleet_keep_generations): KEEPER_GEN_KEEP_MS after the last, and there
 * is a hold to count
 */
bool
fleet_gen_keep_due(const HoldCopy *holds, int n, uint64 target)
{
	if (redsem_now() < next_gen_keep)
		return false;
	for (int i = 0; i < n; i++)
		if (gen_kept(&holds[i].hold, target))
			return true;
	return false;
}

/*
 * The generations raised since the keeper's count last ended (kept_gen_key;
 * in TopMemoryContext): a try that some failed goes on with those alone at
 * the next
 */
static uint64 *gen_raised = NULL;
static int	n_gen_raised = 0;
static int	max_gen_raised = 0;

/* The key of generation slot of prefix in gen_raised (64 bits of hash) */
static uint64
kept_gen_key(const char *prefix, int slot)
{
	return hash_bytes_extended((const unsigned char *) prefix, strlen(prefix), (uint64) slot);
}

/* True if the generation of key was raised since the count last ended */
static bool
gen_was_raised(uint64 key)
{
	for (int i = 0; i < n_gen_raised; i++)
		if (gen_raised[i] == key)
			return true;
	return false;
}

/* Note that the generation of key was raised */
static void
gen_note_raised(uint64 key)
{
	if (n_gen_raised == max_gen_raised)
	{
		int			max = Max(16, max_gen_raised * 2);

		gen_raised = gen_raised == NULL
			? MemoryContextAlloc(TopMemoryContext, sizeof(uint64) * max)
			: repalloc(gen_raised, sizeof(uint64) * max);
		max_gen_raised = max;
	}
	gen_raised[n_gen_raised++] = key;
}

/*
 * Gather into g the generations this server keeps and has not raised in
 * this count, each with its longest lease (keys[k]: its key); their number
 */
static int
gens_to_raise(const HoldCopy *holds, int n, uint64 target, GenRaise *g, uint64 *keys)
{
	int			m = 0;

	for (int i = 0; i < n; i++)
	{
		const SharedHold *h = &holds[i].hold;
		uint64		key;
		int			k;

		if (!gen_kept(h, target))
			continue;
		key = kept_gen_key(h->prefix, sem_gen_slot(h->prefix, h->name));
		if (gen_was_raised(key))
			continue;
		for (k = 0; k < m && keys[k] != key; k++)
			;
		if (k == m)
		{
			g[m].prefix = h->prefix;
			g[m].name = h->name;
			g[m].lease_ms = 0;
			keys[m++] = key;
		}
		g[k].lease_ms = Max(g[k].lease_ms, h->lease_ms);
	}
	return m;
}

/*
 * Make each generation this server holds slots of count the longest of
 * those leases (gen_raise, I15), so that a slot kept alive for days still
 * sets the grace after Redis forgets: those not raised yet in this count,
 * in one pipeline (in a Cluster one per node, nodes that failed recently
 * last, each within call->node_budget_ms).  False if one failed
 * (call->outcome); *progress: one was raised.
 */
static bool
keep_generations(RedisCall *call, const HoldCopy *holds, int n, uint64 target,
				 bool *progress)
{
	GenRaise   *g = palloc(sizeof(GenRaise) * Max(n, 1));
	uint64	   *keys = palloc(sizeof(uint64) * Max(n, 1));
	bool	   *raised = palloc0(sizeof(bool) * Max(n, 1));
	int			m = gens_to_raise(holds, n, target, g, keys);
	bool		all = m == 0 || sem_gen_raise_many(call, m, g, raised);

	*progress = false;
	for (int k = 0; k < m; k++)
		if (raised[k])
		{
			gen_note_raised(keys[k]);
			*progress = true;
		}
	if (all)
		n_gen_raised = 0;		/* the count ended */
	return all;
}

/*
 * Log that the keeper's count of its holds' leases in their generations
 * failed, at most every KEEPER_LOG_EVERY_MS (it is tried again)
 */
void
fleet_gen_keep_failed(const char *why)
{
	static TimestampTz logged_at = 0;

	if (!redsem_once_every(&logged_at, KEEPER_LOG_EVERY_MS))
		return;
	ereport(LOG,
			(errmsg("redsem keeper could not count its holds' leases in their semaphores' generations: %s", why),
			 errdetail("Leases are not affected. It tries again; a slot kept or waited for over five minutes needs this to count in the grace that follows if Redis forgets.")));
}

/*
 * The keeper's part every KEEPER_GEN_KEEP_MS (fleet_gen_keep_due), on a
 * round of its own within budget_ms, not behind a touch of the index: on a
 * far Redis the two calls in turn did not fit one touch's budget.  A try
 * that raised some generations but not all goes on with the rest
 * KEEPER_MAX_SLEEP_MS later (the rounds between are the other parts'); one
 * that raised none goes to fleet_gen_keep_failed, and is tried again
 * FLEET_TOUCH_MS later.  A count begun over KEEPER_GEN_KEEP_MS ago, or on
 * another Redis, starts anew.  (The keeper catches an ERROR raised here.)
 */
void
fleet_keep_generations(const HoldCopy *holds, int n, uint64 target, int budget_ms)
{
	static TimestampTz count_began = 0;
	static uint64 count_target = 0;
	RedisCall	call;
	bool		progress;

	if (n_gen_raised == 0 || target != count_target ||
		TimestampDifferenceExceeds(count_began, redsem_now(), KEEPER_GEN_KEEP_MS))
	{
		n_gen_raised = 0;
		count_began = redsem_now();
		count_target = target;
	}
	/* (the next try, should this one fail or raise an ERROR) */
	next_gen_keep = TimestampTzPlusMilliseconds(redsem_now(), FLEET_TOUCH_MS);
	redis_call_init(&call, TimestampTzPlusMilliseconds(redsem_now(), budget_ms), true, 0);
	/* (in a Cluster, a hung node reached first costs the others half) */
	call.node_budget_ms = Max(budget_ms / 2, KEEPER_NODE_MIN_BUDGET_MS);
	call.owe_late_reply = true;
	/* (the keeper's upkeep, not a call of the semaphore's: redsem_stats) */
	call.uncounted = true;
	if (keep_generations(&call, holds, n, target, &progress))
	{
		next_gen_keep = TimestampTzPlusMilliseconds(redsem_now(), KEEPER_GEN_KEEP_MS);
		return;
	}
	/* (raised some: it goes on with the rest; nothing to log yet) */
	if (progress)
	{
		next_gen_keep = TimestampTzPlusMilliseconds(redsem_now(), KEEPER_MAX_SLEEP_MS);
		return;
	}
	fleet_gen_keep_failed(redis_outcome_text(&call.outcome));
}

/* True if the keeper's touch of the index is due (fleet_touch_index) */
bool
fleet_touch_due(void)
{
	return redsem_now() >= next_touch || shared_keeper_touches_asked() != touches_seen;
}

/* Keep the adaptive ones of the n entries touched (TopMemoryContext) */
static void
note_adaptive(const IndexEntry *entries, const bool *adaptive, int n)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	for (int i = 0; i < nadaptive_used; i++)
	{
		pfree(adaptive_used[i].prefix);
		pfree(adaptive_used[i].name);
	}
	if (adaptive_used == NULL)
		adaptive_used = palloc(sizeof(FleetName) * FLEET_ADAPTIVE_MAX);
	nadaptive_used = 0;
	for (int i = 0; i < n && nadaptive_used < FLEET_ADAPTIVE_MAX; i++)
	{
		if (!adaptive[i])
			continue;
		adaptive_used[nadaptive_used].prefix = pstrdup(entries[i].prefix);
		adaptive_used[nadaptive_used].name = pstrdup(entries[i].name);
		nadaptive_used++;
	}
	MemoryContextSwitchTo(old);
}

/*
 * Forget the i-th of them until the next touch: it is adaptive no more (a
 * mark left behind costs a tick per touch, not one a second)
 */
void
fleet_adaptive_drop(int i)
{
	if (i < 0 || i >= nadaptive_used)
		return;
	pfree(adaptive_used[i].prefix);
	pfree(adaptive_used[i].name);
	adaptive_used[i] = adaptive_used[--nadaptive_used];
}

/*
 * The adaptive semaphores this server's sessions held, took or waited on
 * around the keeper's last touch of the index (*n of them; X4 in
 * src/redsem.lua)
 */
const FleetName *
fleet_adaptive_used(int *n)
{
	*n = nadaptive_used;
	return adaptive_used;
}

/*
 * The keeper's part, after each round's refreshes: every FLEET_TOUCH_MS,
 * note in the index the semaphores this server's sessions hold or wait on,
 * and say in the log if Redis may evict keys (keeper_note_eviction).
 * Best effort within budget_ms (the keeper's reckoning, src/timing.h); a
 * Redis failure goes to fleet_touch_failed, and a reply that comes too
 * late is read before the connection's next use, which keeps the
 * connection.  (The keeper catches an ERROR raised here.)
 */
void
fleet_touch_index(const HoldCopy *holds, int n, uint64 target, int budget_ms)
{
	TimestampTz now = redsem_now();
	IndexEntry *entries;
	int			m;
	RedisCall	call;
	bool		ok = true;
	bool		unsure = false;
	char	   *evicting = NULL;
	bool	   *adaptive;
	const char **names;
	IndexTouch *groups;
	bool	   *touched;
	int			ngroups;

	if (!fleet_touch_due())
		return;
	next_touch = TimestampTzPlusMilliseconds(now, FLEET_TOUCH_MS);
	touches_seen = shared_keeper_touches_asked();
	entries = palloc(sizeof(IndexEntry) * (n + redsem_max_tracked_semaphores + 1));
	if ((m = collect_entries(holds, n, target, entries)) == 0)
	{
		note_adaptive(entries, NULL, 0);
		return;
	}
	adaptive = palloc0(sizeof(bool) * m);
	names = palloc(sizeof(char *) * m);
	groups = palloc(sizeof(IndexTouch) * m);
	touched = palloc(sizeof(bool) * m);
	ngroups = touch_groups(entries, m, names, adaptive, groups);
	redis_call_init(&call, TimestampTzPlusMilliseconds(now, budget_ms), true, 0);
	call.owe_late_reply = true;
	/* (in a Cluster, a hung index node reached first costs the others half) */
	call.node_budget_ms = Max(budget_ms / 2, KEEPER_NODE_MIN_BUDGET_MS);
	/* (every prefix's touch in one round trip: a far Redis fits the budget) */
	ok = sem_index_touch_many(&call, ngroups, groups, FLEET_TTL_MS, &evicting, touched);
	if (ok)
		touched_nodes_evicting(&call, entries, m, &evicting, &unsure);
	/* (a failed touch keeps the list it had: ticks go on) */
	if (ok)
		note_adaptive(entries, adaptive, m);
	if (!ok)
		fleet_touch_failed(redis_outcome_text(&call.outcome));
	else if (evicting || !unsure)
		keeper_note_eviction(evicting);
}

/* One row of redsem_semaphores() */
static void
put_semaphore(ReturnSetInfo *rsinfo, const char *name, const SemSummary *s,
			  TimestampTz now)
{
	Datum		values[SEMAPHORES_COLUMNS];
	bool		nulls[SEMAPHORES_COLUMNS] = {0};

	values[0] = text_datum_from_redis(name);
	nulls[1] = s->stored_limit < 0;
	values[1] = Int32GetDatum((int32) s->stored_limit);
	nulls[2] = s->limit_in_effect < 0;
	values[2] = Int32GetDatum((int32) s->limit_in_effect);
	values[3] = Int64GetDatum(s->permits_held);
	values[4] = Int64GetDatum(s->holders);
	values[5] = Int64GetDatum(s->waiting);
	nulls[6] = s->oldest_wait_ms < 0;
	values[6] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, -s->oldest_wait_ms));
	nulls[7] = s->rate == NULL;
	values[7] = nulls[7] ? (Datum) 0 : CStringGetTextDatum(s->rate);
	nulls[8] = nulls[9] = s->reserved < 0;
	values[8] = Int32GetDatum((int32) s->reserved);
	values[9] = Int32GetDatum((int32) s->reserved_for);
	values[10] = Int64GetDatum(s->tenants_waiting);
	nulls[11] = nulls[12] = s->adaptive_min <= 0;
	values[11] = Int32GetDatum((int32) s->adaptive_min);
	values[12] = Int32GetDatum((int32) s->adaptive_max);
	nulls[13] = s->last_move == NULL;
	values[13] = nulls[13] ? (Datum) 0 : CStringGetTextDatum(s->last_move);
	nulls[14] = s->last_move_ms < 0;
	values[14] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, -s->last_move_ms));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* The fewest names of the index read at once (max_semaphores may be 1) */
#define FLEET_PAGE_MIN 100

/* A set of semaphore names, for one call */
static HTAB *
names_seen_table(void)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = REDSEM_MAX_NAME_BYTES + 1;
	ctl.entrysize = REDSEM_MAX_NAME_BYTES + 1;
	ctl.hcxt = CurrentMemoryContext;
	return hash_create("redsem names seen", 256, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/*
 * redsem_semaphores(max_semaphores): the semaphores in use under the key
 * prefix, from the index, each as Redis sees it now, at most max of them.
 * A semaphore with no member and no stored limit, rate or reserve is gone
 * and not shown.  The index keeps such a name for a minute after its last
 * note; it is read latest expiry first (stored settings, then the names
 * noted last), so ended names come last, in pages until max are shown or
 * it has no more (helper-162: the first max names, all ended, showed
 * nothing).  A name noted again between two pages moves to the front and
 * is seen twice, so a set keeps it shown once; names that expire leave
 * from the end, behind the pages read (helper-164: pages read earliest
 * expiry first skipped names; helper-165: reading it whole cost Redis
 * 137 ms for 100,000 names).
 */
Datum
redsem_semaphores(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			max = PG_ARGISNULL(0) ? 1000 : PG_GETARG_INT32(0);
	RedisCall	call = REDIS_SQL_CALL;
	int			shown = 0;
	int64		looked = 0;
	int64		total = 0;
	char	   *evicting = NULL;
	HTAB	   *seen;

	if (max < 1 || max > 100000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_semaphores must be between 1 and 100000, not %d", max)));
	InitMaterializedSRF(fcinfo, 0);
	seen = names_seen_table();
	while (shown < max)
	{
		char	  **names;
		int			count = 0;
		int			i;
		char	   *page_evicting = NULL;

		if (!sem_index_list(&call, Max(max - shown, FLEET_PAGE_MIN), looked, &names, &count, &total,
							&page_evicting))
			break;
		if (evicting == NULL)
			evicting = page_evicting;
		for (i = 0; i < count && shown < max; i++)
		{
			SemSummary	s;
			bool		found;

			CHECK_FOR_INTERRUPTS();
			(void) hash_search(seen, names[i], HASH_ENTER, &found);
			if (found)
				continue;
			(void) sem_summary(&call, names[i], &s);
			if (s.stored_limit < 0 && s.rate == NULL && s.reserved < 0 &&
				s.holders == 0 && s.waiting == 0)
				continue;
			put_semaphore(rsinfo, names[i], &s, GetCurrentTimestamp());
			shown++;
		}
		/* (after the semaphores: their nodes are known by now) */
		if (evicting == NULL)
			(void) nodes_evicting(&call, NULL, names, i, &evicting);
		looked += i;
		if (count == 0 || looked >= total)
			break;
	}
	if (evicting)
		report_eviction(WARNING, evicting);
	if (total > looked)
		ereport(NOTICE,
				(errmsg_plural("redsem_semaphores shows %d semaphore in use, and did not look at " INT64_FORMAT " more names of the index",
							   "redsem_semaphores shows %d semaphores in use, and did not look at " INT64_FORMAT " more names of the index",
							   shown, shown, total - looked),
				 errdetail("Some of those names may be of semaphores nobody uses any more (the index keeps them for a minute)."),
				 errhint("Pass a larger max_semaphores to see more.")));
	return (Datum) 0;
}
