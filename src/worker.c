/*
 * worker.c
 *		The keeper: a background worker that keeps the leases of live
 *		backends fresh and frees the slots of dead ones.
 *
 * Every cycle it refreshes the holds whose lease is a third used up,
 * releases holds whose backend is gone or gave up on releasing, and keeps a
 * per-incarnation index of holds in Redis ("<prefix>server:<tag>:holds").
 * After a crash-restart it releases whatever that index lists for the
 * previous incarnation.  Holder ids carry the incarnation tag, a random
 * 64-bit number drawn at every (re)start, so two servers sharing one Redis
 * never touch each other's holds.
 */
#include "postgres.h"

#include "hiredis.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "redsem.h"

PGDLLEXPORT void redsem_keeper_main(Datum main_arg);

#define KEEPER_MAX_SLEEP_MS		1000	/* look at least this often */
#define KEEPER_INDEX_MIN_GAP_MS	100		/* index rewrites at most this often */
#define KEEPER_INDEX_TTL_MS		60000	/* a dead server's index vanishes */
#define KEEPER_LOG_EVERY_MS		30000	/* Redis trouble logged this often */
#define KEEPER_INDEX_BATCH		256

typedef struct KeeperState
{
	bool		previous_cleaned;
	uint64		indexed_generation;
	TimestampTz index_written_at;
	TimestampTz trouble_logged_at;
	int			trouble_suppressed;
} KeeperState;

typedef struct HoldCopy
{
	int			slot;
	SharedHold	hold;
} HoldCopy;

/* Register the keeper (from _PG_init, when preloading) */
void
keeper_register(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "redsem");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "redsem_keeper_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "redsem keeper");
	snprintf(worker.bgw_type, BGW_MAXLEN, "redsem keeper");
	RegisterBackgroundWorker(&worker);
}

/* Redis key listing the holds of one server incarnation */
char *
incarnation_index_key(uint64 incarnation)
{
	return psprintf("%sserver:%016llx:holds",
					redsem_key_prefix ? redsem_key_prefix : "",
					(unsigned long long) incarnation);
}

/* Run one plain command, raising on a Redis error reply */
static void
simple_command(int argc, const char **argv)
{
	redisReply *reply = redis_command(argc, argv, NULL, 0);

	if (reply->type == REDIS_REPLY_ERROR)
	{
		char	   *msg = pstrdup(reply->str);

		freeReplyObject(reply);
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("Redis rejected a command of the redsem keeper"),
				 errdetail_internal("%s", msg)));
	}
	freeReplyObject(reply);
}

/* An index value: "<prefix length>:<prefix><name>" */
static char *
encode_index_entry(const SharedHold *h)
{
	return psprintf("%d:%s%s", (int) strlen(h->prefix), h->prefix, h->name);
}

/* Split an index value back into prefix and name; false if malformed */
static bool
decode_index_entry(char *entry, char **prefix, char **name)
{
	char	   *colon = strchr(entry, ':');
	long		len;

	if (colon == NULL)
		return false;
	len = strtol(entry, NULL, 10);
	if (len < 0 || len > (long) strlen(colon + 1))
		return false;
	*prefix = pnstrdup(colon + 1, len);
	*name = colon + 1 + len;
	return **name != '\0';
}

/* Release every hold listed for the incarnation before a crash-restart */
static void
release_previous_incarnation(uint64 previous)
{
	const char *argv[2] = {"HGETALL", incarnation_index_key(previous)};
	redisReply *reply = redis_command(2, argv, NULL, 0);
	List	   *pairs = NIL;
	ListCell   *lc;
	int			released = 0;

	if (reply->type == REDIS_REPLY_ARRAY)
	{
		for (size_t i = 0; i + 1 < reply->elements; i += 2)
		{
			pairs = lappend(pairs, pstrdup(reply->element[i]->str));
			pairs = lappend(pairs, pstrdup(reply->element[i + 1]->str));
		}
	}
	freeReplyObject(reply);
	for (lc = list_head(pairs); lc != NULL; lc = lnext(pairs, lnext(pairs, lc)))
	{
		const char *id = lfirst(lc);
		char	   *entry = lfirst(lnext(pairs, lc));
		char	   *prefix;
		char	   *name;

		if (!decode_index_entry(entry, &prefix, &name))
			continue;
		if (sem_release(prefix, name, id))
		{
			released++;
			stats_count(name, STAT_RELEASED, 1);
		}
	}
	argv[0] = "DEL";
	simple_command(2, argv);
	if (released > 0)
		ereport(LOG,
				(errmsg("redsem keeper released %d slot(s) held before the server restarted after a crash",
						released)));
}

/* Copy the in-use holds out of shared memory */
static int
snapshot_holds(HoldCopy **out, uint64 *generation)
{
	static HoldCopy *buffer = NULL;
	int			n = 0;

	if (buffer == NULL)
		buffer = MemoryContextAlloc(TopMemoryContext,
									sizeof(HoldCopy) * shared->max_holds);
	*out = buffer;
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	for (int i = 0; i < shared->max_holds; i++)
	{
		if (!shared->holds[i].in_use)
			continue;
		(*out)[n].slot = i;
		(*out)[n].hold = shared->holds[i];
		n++;
	}
	*generation = shared->generation;
	shared->index_dirty = false;
	LWLockRelease(shared->holds_lock);
	return n;
}

/* Record the outcome of a refresh, if the slot still has the same hold */
static void
note_refresh(const HoldCopy *c, bool alive, TimestampTz when)
{
	SharedHold *h;

	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(c->slot, c->hold.id)) != NULL)
	{
		if (alive)
			h->refreshed_at = when;
		else
			h->lost = true;
	}
	LWLockRelease(shared->holds_lock);
}

/* True if the hold's backend is gone or asked us to release it */
static bool
hold_is_orphaned(const SharedHold *h)
{
	return h->abandoned || BackendPidGetProc(h->pid) == NULL;
}

/* Release an orphaned hold and stop tracking it */
static void
release_orphan(const HoldCopy *c)
{
	bool		held = sem_release(c->hold.prefix, c->hold.name, c->hold.id);

	if (!c->hold.waiting)
		stats_count(c->hold.name, held ? STAT_RELEASED : STAT_EXPIRED, 1);
	shared_hold_remove(c->slot, c->hold.id);
}

/*
 * Flag whether a hold was taken under another Redis target than the
 * keeper's current one (then the keeper cannot reach it)
 */
static void
note_unkept(const HoldCopy *c, bool unkept)
{
	SharedHold *h;

	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(c->slot, c->hold.id)) != NULL)
		h->unkept = unkept;
	LWLockRelease(shared->holds_lock);
}

/* Refresh a hold whose lease is a third used up; ms until the next is due */
static int64
refresh_if_due(const HoldCopy *c, TimestampTz now)
{
	int64		third = Max(c->hold.lease_ms / 3, 1);
	TimestampTz due = TimestampTzPlusMilliseconds(c->hold.refreshed_at, third);
	bool		reachable = (c->hold.target == redis_target_signature());
	int64		lease;

	if (c->hold.unkept != !reachable)
		note_unkept(c, !reachable);
	if (c->hold.lost || c->hold.waiting || !reachable)
		return KEEPER_MAX_SLEEP_MS;
	if (due > now)
		return TimestampDifferenceMilliseconds(now, due);
	lease = sem_refresh(c->hold.prefix, c->hold.name, c->hold.id,
						c->hold.lease_ms);
	if (lease > 0)
		note_refresh(c, true, now);
	else
	{
		note_refresh(c, false, now);
		stats_count(c->hold.name, STAT_LOST, 1);
		ereport(LOG,
				(errmsg("redsem keeper found the slot of semaphore \"%s\" held by process %d already gone",
						c->hold.name, c->hold.pid),
				 errdetail("Its lease of " INT64_FORMAT " ms ran out before it could be refreshed; it was last confirmed %ld ms ago.",
						   c->hold.lease_ms,
						   TimestampDifferenceMilliseconds(c->hold.refreshed_at, now))));
	}
	return third;
}

/* Rewrite this incarnation's index of holds in Redis */
static void
write_index(HoldCopy *holds, int n)
{
	char	   *key = incarnation_index_key(shared->incarnation);
	const char *argv[2 + 2 * KEEPER_INDEX_BATCH];
	char		ttl[32];
	int			argc;

	argv[0] = "DEL";
	argv[1] = key;
	simple_command(2, argv);
	for (int i = 0; i < n; i += KEEPER_INDEX_BATCH)
	{
		argv[0] = "HSET";
		argc = 2;
		for (int j = i; j < n && j < i + KEEPER_INDEX_BATCH; j++)
		{
			argv[argc++] = holds[j].hold.id;
			argv[argc++] = encode_index_entry(&holds[j].hold);
		}
		simple_command(argc, argv);
	}
	if (n > 0)
	{
		snprintf(ttl, sizeof(ttl), "%d", KEEPER_INDEX_TTL_MS);
		argv[0] = "PEXPIRE";
		argv[2] = ttl;
		simple_command(3, argv);
	}
}

/* Milliseconds until the index may be rewritten again */
static long
index_gap_left_ms(const KeeperState *st)
{
	TimestampTz next = TimestampTzPlusMilliseconds(st->index_written_at,
												   KEEPER_INDEX_MIN_GAP_MS);

	return TimestampDifferenceMilliseconds(GetCurrentTimestamp(), next);
}

/* One pass over the holds; returns how long to sleep */
static long
keeper_cycle(KeeperState *st)
{
	TimestampTz now = GetCurrentTimestamp();
	HoldCopy   *holds;
	uint64		generation;
	int			n = snapshot_holds(&holds, &generation);
	int64		sleep_ms = KEEPER_MAX_SLEEP_MS;
	int			live = 0;

	for (int i = 0; i < n; i++)
	{
		int64		next_due;

		if (hold_is_orphaned(&holds[i].hold))
		{
			release_orphan(&holds[i]);
			continue;
		}
		next_due = refresh_if_due(&holds[i], now);
		sleep_ms = Min(sleep_ms, next_due);
		holds[live++] = holds[i];
	}

	if (generation != st->indexed_generation ||
		TimestampDifferenceExceeds(st->index_written_at, now, KEEPER_INDEX_TTL_MS / 3))
	{
		if (TimestampDifferenceExceeds(st->index_written_at, now, KEEPER_INDEX_MIN_GAP_MS))
		{
			write_index(holds, live);
			st->indexed_generation = generation;
			st->index_written_at = now;
		}
		else
			sleep_ms = Min(sleep_ms, KEEPER_INDEX_MIN_GAP_MS);
	}
	return (long) Max(sleep_ms, 1);
}

/* Log Redis trouble, at most once per KEEPER_LOG_EVERY_MS */
static void
report_trouble(KeeperState *st, ErrorData *edata)
{
	TimestampTz now = GetCurrentTimestamp();

	if (st->trouble_logged_at != 0 &&
		!TimestampDifferenceExceeds(st->trouble_logged_at, now, KEEPER_LOG_EVERY_MS))
	{
		st->trouble_suppressed++;
		return;
	}
	ereport(LOG,
			(errmsg("redsem keeper: %s", edata->message),
			 st->trouble_suppressed > 0 ?
			 errdetail("%d similar message(s) suppressed since the last one.",
					   st->trouble_suppressed) : 0));
	st->trouble_logged_at = now;
	st->trouble_suppressed = 0;
}

/* Say once that Redis answers again after trouble was logged */
static void
report_recovery(KeeperState *st)
{
	if (st->trouble_logged_at == 0)
		return;
	ereport(LOG, (errmsg("redsem keeper: Redis at %s answers again",
						 redis_target_description())));
	st->trouble_logged_at = 0;
	st->trouble_suppressed = 0;
}

/* Forget our pid and latch when we exit */
static void
keeper_detach(int code, Datum arg)
{
	shared->keeper_latch = NULL;
	shared->keeper_pid = 0;
}

/* The keeper's main loop */
void
redsem_keeper_main(Datum main_arg)
{
	KeeperState st;
	MemoryContext cycle_context;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	memset(&st, 0, sizeof(st));
	st.indexed_generation = PG_UINT64_MAX;
	st.previous_cleaned = (shared->previous_incarnation == 0);
	shared->keeper_latch = MyLatch;
	shared->keeper_pid = MyProcPid;
	on_shmem_exit(keeper_detach, (Datum) 0);
	cycle_context = AllocSetContextCreate(TopMemoryContext, "redsem keeper",
										  ALLOCSET_DEFAULT_SIZES);
	/* hashing the script (script.c) needs a resource owner */
	CurrentResourceOwner = ResourceOwnerCreate(NULL, "redsem keeper");

	for (;;)
	{
		long		sleep_ms = KEEPER_MAX_SLEEP_MS;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextSwitchTo(cycle_context);
		PG_TRY();
		{
			if (!st.previous_cleaned)
			{
				release_previous_incarnation(shared->previous_incarnation);
				st.previous_cleaned = true;
			}
			sleep_ms = keeper_cycle(&st);
			report_recovery(&st);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cycle_context);
			edata = CopyErrorData();
			FlushErrorState();
			LWLockReleaseAll();
			report_trouble(&st, edata);
		}
		PG_END_TRY();
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(cycle_context);

		/*
		 * A wake-up that arrived while we waited on Redis was consumed by
		 * that wait, so look at the flag too: holds changed since our last
		 * snapshot mean another cycle as soon as the index may be rewritten
		 * (not at once: on a busy server that would spin).
		 */
		if (shared->index_dirty)
			sleep_ms = Min(sleep_ms, index_gap_left_ms(&st));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}
