/*
 * batch.c
 *		The keeper's batches: many refreshes and releases in few round
 *		trips.  Refreshes of one semaphore go together into one refresh_many
 *		call (housekeeping and key lifetimes once for all of them), releases
 *		one call each, and the calls are pipelined: up to
 *		KEEP_PIPELINE_DEPTH commands per round trip; in a Redis Cluster,
 *		the whole batch in one pipeline, which conn.c sends to each node in
 *		one write (one round trip per node, within the node's share of the
 *		batch).  Never raises for a Redis failure: each item keeps its own
 *		outcome.
 */
#include "postgres.h"

#include "hiredis.h"

#include "batch.h"
#include "cluster.h"
#include "conn.h"
#include "fcall.h"
#include "link.h"
#include "report.h"
#include "shmem.h"

/* ids per refresh_many call, commands per round trip */
#define KEEP_IDS_PER_CALL		128
#define KEEP_PIPELINE_DEPTH		256
/* loads of the library after "Function not found", per batch: one per node missing it */
#define KEEP_LOAD_PASSES		8

/* One command of a batch: the items it carries */
typedef struct KeepCommand
{
	int			first;			/* index into the sorted order */
	int			count;
	bool		release;
	const char **argv;
	int			argc;
} KeepCommand;

static SemKeepItem *sort_items;

/* qsort order: refreshes before releases, then by prefix and name */
static int
keep_item_cmp(const void *a, const void *b)
{
	const SemKeepItem *x = &sort_items[*(const int *) a];
	const SemKeepItem *y = &sort_items[*(const int *) b];
	int			c;

	if (x->release != y->release)
		return x->release ? 1 : -1;
	if ((c = strcmp(x->prefix, y->prefix)) != 0)
		return c;
	if ((c = strcmp(x->name, y->name)) != 0)
		return c;
	return *(const int *) a - *(const int *) b;
}

/* True if items i and j (in sorted order) can share one refresh_many call */
static bool
same_refresh_group(const SemKeepItem *items, const int *order, int i, int j)
{
	const SemKeepItem *x = &items[order[i]];
	const SemKeepItem *y = &items[order[j]];

	return !x->release && !y->release && strcmp(x->prefix, y->prefix) == 0 &&
		strcmp(x->name, y->name) == 0;
}

/* The FCALL argv of a command over order[first .. first+count-1] */
static void
build_keep_command(const SemKeepItem *items, const int *order, KeepCommand *kc)
{
	const SemKeepItem *head = &items[order[kc->first]];
	int			max = 3 + SCRIPT_NKEYS_MAX + 1 + 2 * kc->count;

	kc->argv = palloc(sizeof(char *) * max);
	kc->argc = fcall_head(kc->argv, head->prefix, head->name,
						  kc->release ? "release" : "refresh_many");
	for (int i = 0; i < kc->count; i++)
	{
		const SemKeepItem *it = &items[order[kc->first + i]];

		kc->argv[kc->argc++] = it->id;
		if (!kc->release)
			kc->argv[kc->argc++] = psprintf(INT64_FORMAT, it->lease_ms);
	}
}

/* Split the sorted items into commands; returns how many */
static int
plan_keep_commands(const SemKeepItem *items, const int *order, int n,
				   KeepCommand *cmds)
{
	int			ncmds = 0;

	for (int i = 0; i < n;)
	{
		KeepCommand *kc = &cmds[ncmds++];

		kc->first = i;
		kc->release = items[order[i]].release;
		kc->count = 1;
		while (!kc->release && i + kc->count < n && kc->count < KEEP_IDS_PER_CALL &&
			   same_refresh_group(items, order, i, i + kc->count))
			kc->count++;
		build_keep_command(items, order, kc);
		i += kc->count;
	}
	return ncmds;
}

/* Give every item of a command the same failure */
static void
fail_keep_command(SemKeepItem *items, const int *order, const KeepCommand *kc,
				  RedisStatus status, const char *detail)
{
	for (int i = 0; i < kc->count; i++)
	{
		SemKeepItem *it = &items[order[kc->first + i]];

		it->outcome.timeout_ms = 0;
		(void) redis_note(&it->outcome, status, "%s", detail);
		stats_count(it->prefix, it->name, STAT_REDIS_ERRORS, 1);
	}
}

/*
 * Take one command's reply apart into its items.  Returns false if the
 * library was missing: the command must be sent again.
 */
static bool
absorb_keep_reply(SemKeepItem *items, const int *order, const KeepCommand *kc,
				  const redisReply *reply)
{
	RedisOutcome o;

	(void) redis_reply_outcome(reply, &o);
	if (o.status == RS_NOSCRIPT)
		return false;
	if (o.status != RS_OK)
	{
		fail_keep_command(items, order, kc, o.status, o.detail);
		return true;
	}
	for (int i = 0; i < kc->count; i++)
	{
		SemKeepItem *it = &items[order[kc->first + i]];
		const redisReply *e = kc->release ? reply : reply_element(reply, i);
		bool		ok;

		ok = (kc->release || (reply->type == REDIS_REPLY_ARRAY &&
							  reply->elements == (size_t) kc->count)) &&
			reply_int64(e, &it->value) && it->value >= (kc->release ? 0 : -1) &&
			(!kc->release || it->value <= 1);
		memset(&it->outcome, 0, sizeof(it->outcome));
		if (!ok)
		{
			(void) redis_note(&it->outcome, RS_MALFORMED,
							  "%s answered a reply of type %d for semaphore \"%s\"",
							  kc->release ? "release" : "refresh_many", reply->type,
							  it->name);
			stats_count(it->prefix, it->name, STAT_REDIS_ERRORS, 1);
		}
	}
	return true;
}

/*
 * Put the library back where command kc goes (after "Function not found"):
 * the read-only "limit" operation on its semaphore, routed by its key,
 * loads it on that node the way every other path does.
 */
static bool
load_script(RedisCall *call, const SemKeepItem *items, const int *order,
			const KeepCommand *kc)
{
	const SemKeepItem *it = &items[order[kc->first]];
	const char *argv[3 + SCRIPT_NKEYS_MAX + 1];
	redisReply *reply;
	int			argc = fcall_head(argv, it->prefix, it->name, "limit");

	if (!fcall_send(call, argc, argv, &reply))
		return call->outcome.status != RS_LOST &&
			call->outcome.status != RS_TIMED_OUT &&
			call->outcome.status != RS_UNAVAILABLE &&
			call->outcome.status != RS_OUT_OF_MEMORY;
	freeReplyObject(reply);
	return true;
}

/*
 * Send commands [from, to) as one pipeline and absorb the replies; those
 * that found the script uncached are moved to the front of retry.  Returns
 * false on connection trouble (call->outcome).
 */
static bool
send_keep_pipeline(RedisCall *call, SemKeepItem *items, const int *order,
				   KeepCommand *cmds, int from, int to, KeepCommand *retry,
				   int *nretry, SemBatchCost *cost)
{
	int			n = to - from;
	RedisCommand *rc = palloc(sizeof(RedisCommand) * n);
	redisReply **replies = palloc(sizeof(redisReply *) * n);
	bool		ok;

	for (int i = 0; i < n; i++)
	{
		rc[i].argc = cmds[from + i].argc;
		rc[i].argv = cmds[from + i].argv;
	}
	ok = redis_exec_pipeline(call, n, rc, replies);
	cost->commands += n;
	cost->round_trips += call->round_trips;
	for (int i = 0; i < n; i++)
	{
		if (replies[i] == NULL)
			continue;
		if (!absorb_keep_reply(items, order, &cmds[from + i], replies[i]))
			retry[(*nretry)++] = cmds[from + i];
		freeReplyObject(replies[i]);
	}
	pfree(rc);
	pfree(replies);
	return ok;
}

/*
 * Refresh and release many holds in few round trips.  Each item's outcome
 * says whether Redis did it (a failure stays with its items: a key of the
 * wrong type fails only the holds of that semaphore).  Returns false if
 * the connection failed (call->outcome): the items not yet answered keep
 * outcome RS_LOST.  Never raises for a Redis failure.
 */
bool
sem_keep_batch(RedisCall *call, SemKeepItem *items, int n, SemBatchCost *cost)
{
	int		   *order = palloc(sizeof(int) * Max(n, 1));
	KeepCommand *cmds = palloc(sizeof(KeepCommand) * Max(n, 1));
	KeepCommand *retry;
	KeepCommand *again;
	int			ncmds;
	int			depth;
	RedisOutcome failed = {RS_OK, 0, "", 0, false, 0};

	memset(cost, 0, sizeof(*cost));
	for (int i = 0; i < n; i++)
	{
		order[i] = i;
		items[i].value = 0;
		(void) redis_note(&items[i].outcome, RS_LOST,
						  "not sent: the connection failed earlier in the batch");
	}
	sort_items = items;
	qsort(order, n, sizeof(int), keep_item_cmp);
	sort_items = NULL;
	ncmds = plan_keep_commands(items, order, n, cmds);
	/* a Cluster node's commands of the batch go in one write (conn.c) */
	depth = cluster_enabled() ? Max(ncmds, 1) : KEEP_PIPELINE_DEPTH;
	retry = palloc(sizeof(KeepCommand) * depth);
	again = palloc(sizeof(KeepCommand) * depth);

	for (int from = 0; from < ncmds; from += depth)
	{
		int			to = Min(from + depth, ncmds);
		int			nretry = 0;
		int			nagain = 0;

		if (!send_keep_pipeline(call, items, order, cmds, from, to, retry,
								&nretry, cost))
		{
			/*
			 * In a Cluster, one node failing stops only its own commands:
			 * the others' are answered, and those that found the library
			 * missing on their node still get it loaded below
			 */
			if (!cluster_enabled())
				return false;
			if (failed.status == RS_OK)
				failed = call->outcome;
		}
		if (nretry == 0)
			continue;
		/*
		 * The library was missing (Redis restarted; in a cluster, a node
		 * that never ran it): load it where the first such command goes,
		 * send those again; one more pass for each node that still misses it.
		 */
		for (int pass = 0; nretry > 0; pass++)
		{
			if (pass == KEEP_LOAD_PASSES)
			{
				for (int i = 0; i < nretry; i++)
					fail_keep_command(items, order, &retry[i], RS_REFUSED,
									  "the redsem library was missing right after it was loaded");
				break;
			}
			nagain = 0;
			if (!load_script(call, items, order, &retry[0]) ||
				!send_keep_pipeline(call, items, order, retry, 0, nretry, again,
									&nagain, cost))
				return false;
			memcpy(retry, again, sizeof(KeepCommand) * nagain);
			nretry = nagain;
		}
	}
	if (failed.status != RS_OK)
	{
		call->outcome = failed;
		return false;
	}
	return true;
}
