/*
 * keeper.c
 *		The keeper: a background worker that keeps the leases of live
 *		backends fresh and frees the slots of dead ones.
 *
 * Every cycle it walks the hold table (shmem.c): it refreshes each live
 * hold whose lease is a third used up, and releases each hold whose
 * backend is gone or gave up on releasing it, including, after a
 * crash-restart, every hold of the backends that died (the table outlives
 * the crash).  The walk only decides; the Redis work of the whole cycle is
 * sent at its end in pipelined batches (sem_keep_batch: the refreshes of
 * one semaphore in one script call, up to 256 calls per round trip), then
 * each hold takes its own answer.
 *
 * A failure stays with its hold.  A hold whose command fails (a key of the
 * wrong type, an ACL that denies it, a malformed reply, even an unexpected
 * ERROR) is marked, shown in redsem_held(), logged at a limited rate with
 * its semaphore's name, and retried with back-off, while the keeper goes
 * on with the others.  Only when the connection itself is gone (Redis down,
 * refusing us, a replica now) does it stop the cycle, log that once, and
 * try again a second later.
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "clock.h"
#include "cluster.h"
#include "compat.h"
#include "adaptive.h"
#include "batch.h"
#include "conn.h"
#include "escalate.h"
#include "fleet.h"
#include "guc.h"
#include "keeper.h"
#include "link.h"
#include "queue_caps.h"
#include "queue_fleet.h"
#include "script.h"
#include "sentinel.h"
#include "shmem.h"
#include "stop.h"
#include "timing.h"

PGDLLEXPORT void redsem_keeper_main(Datum main_arg);

/* Per-hold log lines allowed per KEEPER_LOG_EVERY_MS, over all holds */
#define KEEPER_HOLD_LINES_PER_WINDOW	10

/* An orphan is dropped this long after it would have ended by itself */
#define KEEPER_ORPHAN_SLACK_MS			10000

typedef struct KeeperState
{
	TimestampTz trouble_logged_at;	/* connection trouble */
	int			trouble_suppressed;
	TimestampTz window_start;	/* per-hold lines */
	int			window_lines;
	int			window_suppressed;
	int			released_after_crash;
	int			found_elsewhere;	/* holds found under the keeper's settings
									 * that were taken under others, not
									 * said yet */
	TimestampTz found_logged_at;
	TimestampTz look_logged_at; /* a failed look */
	bool		succeeded;		/* a command succeeded this cycle */
	int			trouble_rounds; /* batches in a row that met connection
								 * trouble */
} KeeperState;


/*
 * The Redis work one cycle decided on: one item per hold to refresh or
 * release, sent together at the end of the cycle (sem_keep_batch).
 */
typedef struct KeeperBatch
{
	SemKeepItem *items;
	const HoldCopy **owners;	/* the hold of each item */
	int			n;
} KeeperBatch;

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

/*
 * Copy the in-use holds out of the table.  Backends that add a hold while
 * we work see keeper_wakes_at at its end of time and wake us.
 */
static int
snapshot_holds(HoldCopy **out)
{
	static HoldCopy *buffer = NULL;

	if (buffer == NULL)
		buffer = MemoryContextAlloc(TopMemoryContext,
									sizeof(HoldCopy) * shared_hold_capacity());
	*out = buffer;
	return shared_hold_copy_for_keeper(buffer);
}

/* Milliseconds from now until when, at least 1 */
static int64
ms_until(TimestampTz now, TimestampTz when)
{
	return Max(TimestampDifferenceMilliseconds(now, when), 1);
}

/* The back-off before the next try after failures failed tries */
static int64
backoff_ms(int failures)
{
	int64		ms = KEEPER_RETRY_MIN_MS;

	for (int i = 1; i < failures && ms < KEEPER_RETRY_MAX_MS; i++)
		ms *= 2;
	return Min(ms, KEEPER_RETRY_MAX_MS);
}

/* Log connection trouble, at most once per KEEPER_LOG_EVERY_MS */
static void
report_trouble(KeeperState *st, const char *text)
{
	TimestampTz now = redsem_now();

	shared_keeper_trouble_note(text, now);

	if (st->trouble_logged_at != 0 &&
		!TimestampDifferenceExceeds(st->trouble_logged_at, now, KEEPER_LOG_EVERY_MS))
	{
		st->trouble_suppressed++;
		return;
	}
	ereport(LOG,
			(errmsg("redsem keeper: %s", text),
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
	if (shared_keeper_has_trouble())
		shared_keeper_trouble_clear();
	if (st->trouble_logged_at == 0)
		return;
	if (cluster_enabled())
		ereport(LOG, (errmsg("redsem keeper: every Redis Cluster node it needs answers again")));
	else
		ereport(LOG, (errmsg("redsem keeper: Redis at %s answers again",
							 redis_target_description())));
	st->trouble_logged_at = 0;
	st->trouble_suppressed = 0;
}

/*
 * Once the per-hold lines' window is over, say how many it left out (a
 * stop's line among them: none would count it otherwise)
 */
static void
report_lines_left_out(KeeperState *st, TimestampTz now)
{
	if (st->window_suppressed == 0 ||
		!TimestampDifferenceExceeds(st->window_start, now, KEEPER_LOG_EVERY_MS))
		return;
	ereport(LOG,
			(errmsg_plural("redsem keeper left out %d line about single slots in the last %d s",
						   "redsem keeper left out %d lines about single slots in the last %d s",
						   st->window_suppressed, st->window_suppressed,
						   KEEPER_LOG_EVERY_MS / 1000),
			 errhint("redsem_server_holds() shows each slot's trouble, and the view redsem_stats counts the slots lost.")));
	st->window_suppressed = 0;
}

/* True if one more per-hold log line fits in the current window */
static bool
hold_line_allowed(KeeperState *st, TimestampTz now)
{
	if (TimestampDifferenceExceeds(st->window_start, now, KEEPER_LOG_EVERY_MS))
	{
		report_lines_left_out(st, now);
		st->window_start = now;
		st->window_lines = 0;
	}
	if (st->window_lines >= KEEPER_HOLD_LINES_PER_WINDOW)
	{
		st->window_suppressed++;
		return false;
	}
	st->window_lines++;
	return true;
}

/*
 * ms until the next try after failures failed ones: the back-off, but by
 * half the time hold c's lease has left at the latest (a back-off past the
 * lease's end would stop a holder that the next try might have kept)
 */
static int64
retry_in_lease_ms(const HoldCopy *c, int failures, TimestampTz now)
{
	int64		retry = backoff_ms(failures);
	TimestampTz valid_until = shared_hold_valid_until(&c->hold);

	if (valid_until != DT_NOEND && valid_until > now)
		retry = Min(retry, Max(TimestampDifferenceMilliseconds(now, valid_until) / 2,
							   KEEPER_RETRY_LAST_MS));
	return retry;
}

/*
 * A command for one hold failed: mark the hold, schedule its retry, and
 * log it (first failure, then at most every KEEPER_LOG_EVERY_MS per hold).
 * Returns the ms until its retry.
 */
static int64
hold_failed(KeeperState *st, const HoldCopy *c, const char *what,
			const char *text)
{
	TimestampTz now = redsem_now();
	int			failures = c->hold.failures + 1;
	int64		retry = retry_in_lease_ms(c, failures, now);
	bool		log_it;

	log_it = (c->hold.logged_at == 0 ||
			  TimestampDifferenceExceeds(c->hold.logged_at, now, KEEPER_LOG_EVERY_MS)) &&
		hold_line_allowed(st, now);
	shared_hold_note_failure(c->slot, c->hold.id, failures,
							 TimestampTzPlusMilliseconds(now, retry), text,
							 log_it ? now : 0);
	if (log_it)
	{
		ereport(LOG,
				(errmsg("redsem keeper could not %s the slot of semaphore \"%s\" held by process %d",
						what, c->hold.name, c->hold.pid),
				 errdetail("%s", text),
				 errhint("The keeper tries again in " INT64_FORMAT " ms (failure %d)%s.",
						 retry, failures,
						 st->window_suppressed > 0 ?
						 psprintf("; %d similar line(s) about other holds were suppressed",
								  st->window_suppressed) : "")));
		st->window_suppressed = 0;
	}
	return retry;
}

/*
 * A look for a hold taken under other settings failed (outcome o): tried
 * again after the back-off; said once per KEEPER_LOG_EVERY_MS for all
 * such holds (not in the per-hold lines' budget, which stops' lines need)
 */
static int64
look_failed(KeeperState *st, const HoldCopy *c, const RedisOutcome *o)
{
	TimestampTz now = redsem_now();
	int			failures = c->hold.failures + 1;
	int64		retry = retry_in_lease_ms(c, failures, now);

	shared_hold_note_failure(c->slot, c->hold.id, failures,
							 TimestampTzPlusMilliseconds(now, retry),
							 redis_outcome_text(o), 0);
	if (st->look_logged_at != 0 &&
		!TimestampDifferenceExceeds(st->look_logged_at, now, KEEPER_LOG_EVERY_MS))
		return retry;
	ereport(LOG,
			(errmsg("redsem keeper could not look for slots taken under other connection settings on the Redis its own settings name"),
			 errdetail("%s", redis_outcome_text(o)),
			 errhint("It tries again, with back-off, until each slot's lease ends.")));
	st->look_logged_at = now;
	return retry;
}

/*
 * Record a refresh: a new lease (> 0), a slot found gone (0), or one an
 * administrator released (-1); true if the slot was lost (not given back
 * by its backend meanwhile: shared_hold_note_refresh)
 */
static bool
note_refresh(const HoldCopy *c, int64 lease, TimestampTz sent)
{
	return shared_hold_note_refresh(c->slot, c->hold.id, lease, sent);
}

/* Flag whether a hold was taken under another Redis target than ours */
static void
note_unkept(const HoldCopy *c, bool unkept)
{
	shared_hold_set_unkept(c->slot, c->hold.id, unkept);
}

/* A keeper call: interruptible (SIGTERM), within redsem.command_timeout */
static void
keeper_call(RedisCall *call)
{
	redis_call_init(call, DT_NOEND, true, 0);
}

/* True if the hold's backend is gone or asked us to release it */
static bool
is_orphan(const SharedHold *h)
{
	return h->abandoned || h->pid == 0 || BackendPidGetProc(h->pid) == NULL;
}

/*
 * When an orphan would have ended by itself: its lease, or its place in
 * line plus a promotion window, from its last confirmation.
 */
static TimestampTz
orphan_end(const SharedHold *h)
{
	int64		life = Max(h->lease_ms, WAIT_PLACE_TTL_MS + PROMOTION_WINDOW_MS);

	return TimestampTzPlusMilliseconds(h->refreshed_at,
									   life + redsem_command_timeout_ms +
									   KEEPER_ORPHAN_SLACK_MS);
}

/*
 * Queue a refresh or release of hold c for the end of the cycle (elsewhere:
 * c was taken under other connection settings than target's)
 */
static void
queue_for_redis(KeeperBatch *batch, const HoldCopy *c, bool release,
				bool elsewhere)
{
	SemKeepItem *it = &batch->items[batch->n];

	memset(it, 0, sizeof(*it));
	it->prefix = c->hold.prefix;
	it->name = c->hold.name;
	it->id = c->hold.id;
	it->lease_ms = c->hold.lease_ms;
	it->release = release;
	it->elsewhere = elsewhere;
	batch->owners[batch->n++] = c;
}

/*
 * True if a hold taken under other connection settings is worth looking
 * for on the Redis that target names: the keeper has not found it missing
 * there yet.  Settings that changed without changing the data (a sentinel
 * added to the list, another node of the Cluster as the seed, a host name
 * for its address) reach the hold, and the refresh or release that finds
 * it there moves it to target; its id is unique, so no other Redis has it.
 */
static bool
worth_looking(const HoldCopy *c, uint64 target)
{
	return c->hold.not_found_under != target;
}

/*
 * A live hold taken under other settings: refreshed on target's Redis,
 * once, to see whether that is where it lives; ms until the next look
 */
static int64
look_elsewhere(KeeperBatch *batch, const HoldCopy *c, TimestampTz now,
			   uint64 target)
{
	/* (past it, the holder is being stopped: a found slot would outlive it) */
	if (!worth_looking(c, target) || now >= shared_hold_valid_until(&c->hold))
		return KEEPER_MAX_SLEEP_MS;
	if (c->hold.retry_at > now)
		return ms_until(now, c->hold.retry_at);
	queue_for_redis(batch, c, false, true);
	return KEEPER_MAX_SLEEP_MS;
}

/*
 * Until when an orphan whose acquire got no answer is released again, in
 * case that acquire reaches Redis late (timing.h): a late grant starts a
 * lease of its own, so not the orphan's end
 */
static TimestampTz
unsure_end(const SharedHold *h)
{
	return TimestampTzPlusMilliseconds(Max(h->acquired_at, h->refreshed_at),
									   KEEPER_UNSURE_MAX_MS);
}

/* Release an orphaned hold and stop tracking it; ms until the next look */
static int64
release_orphan(KeeperBatch *batch, const HoldCopy *c, TimestampTz now,
			   uint64 target)
{
	bool		reachable = (c->hold.target == target);

	/* (an unsure one whose release never got through may live its lease) */
	if (now > (c->hold.unsure ? Max(unsure_end(&c->hold), orphan_end(&c->hold)) :
			   orphan_end(&c->hold)))
	{
		/* it has ended by itself in Redis; nothing is left to release */
		shared_hold_remove(c->slot, c->hold.id);
		return KEEPER_MAX_SLEEP_MS;
	}
	if (!reachable && !worth_looking(c, target))
		return KEEPER_MAX_SLEEP_MS;
	if (c->hold.retry_at > now)
		return ms_until(now, c->hold.retry_at);
	queue_for_redis(batch, c, true, !reachable);
	return KEEPER_MAX_SLEEP_MS;
}

/*
 * A hold whose backend sent its release without waiting for the reply (it
 * reads the reply on its next call, which may be long in coming): left
 * alone while the reply may still be on its way, then released once more
 * (a release of a slot already given back changes nothing), in case the
 * first never reached Redis; ms until the next look.
 */
static int64
settle_sent_release(KeeperBatch *batch, const HoldCopy *c, TimestampTz now,
					uint64 target)
{
	TimestampTz due = TimestampTzPlusMilliseconds(c->hold.refreshed_at,
												  redsem_command_timeout_ms +
												  KEEPER_SENT_RELEASE_SETTLE_MS);

	if (now < due)
		return ms_until(now, due);
	return release_orphan(batch, c, now, target);
}

/*
 * Refresh a live hold whose lease (or, while it is an unconfirmed
 * promotion, whose window) is a third used up, or soon will be (see
 * KEEPER_BATCH_EARLY_DIVISOR), or that an administrator force-released
 * (refresh_now: to find it so at once); ms until it is next due.
 */
static int64
refresh_if_due(KeeperBatch *batch, const HoldCopy *c, TimestampTz now)
{
	int64		third = Max(shared_hold_kept_ms(&c->hold) / KEEPER_REFRESH_FRACTION, 1);
	TimestampTz due = TimestampTzPlusMilliseconds(c->hold.refreshed_at, third);
	int64		early = third / KEEPER_BATCH_EARLY_DIVISOR;

	if (due > TimestampTzPlusMilliseconds(now, early) && !c->hold.refresh_now)
		return ms_until(now, due);
	if (c->hold.retry_at > now)
		return ms_until(now, c->hold.retry_at);
	queue_for_redis(batch, c, false, false);
	return third;
}

/* Everything the keeper decides for one hold; ms until it needs a look again */
static int64
keep_one(KeeperBatch *batch, const HoldCopy *c, uint64 target)
{
	TimestampTz now = redsem_now();
	bool		reachable = (c->hold.target == target);

	if (is_orphan(&c->hold))
		return release_orphan(batch, c, now, target);
	if (c->hold.phase == PHASE_RELEASING)
		return settle_sent_release(batch, c, now, target);
	if (c->hold.unkept != !reachable)
		note_unkept(c, !reachable);
	if (c->hold.phase != PHASE_HELD || c->hold.lost)
		return KEEPER_MAX_SLEEP_MS;
	if (!reachable)
		return look_elsewhere(batch, c, now, target);
	return refresh_if_due(batch, c, now);
}

/*
 * True if a released orphan whose acquire got no answer, found live, was
 * granted late: not a slot its session held (an acquire that rode through
 * a request without answer and was granted is given back as any orphan
 * the first time, then watched)
 */
static bool
granted_late(const SharedHold *h)
{
	return h->watching || !h->granted;
}

/* Log that the keeper gave back a slot granted late (granted_late) */
static void
log_late_grant(const HoldCopy *c)
{
	if (c->hold.crash_asked)
		ereport(LOG,
				(errmsg("redsem keeper released a slot of semaphore \"%s\" granted late to an acquire that was under way when the server restarted after a crash",
						c->hold.name),
				 errdetail("The acquire reached Redis after the restart had given it up.")));
	else if (c->hold.granted)
		ereport(LOG,
				(errmsg("redsem keeper released a slot of semaphore \"%s\" granted late again to the id of a slot already given back",
						c->hold.name),
				 errdetail("A request of its acquire that got no answer (one it rode through) reached Redis after the slot was given back.")));
	else
		ereport(LOG,
				(errmsg("redsem keeper released a slot of semaphore \"%s\" granted late to an acquire that had failed",
						c->hold.name),
				 errdetail("Redis granted it after its session had given the acquire up without an answer: a connection that broke or a network path that held the request, or a place in line whose give-up Redis refused (an ACL, a password change) and that was promoted later.")));
}

/*
 * A released orphan whose acquire got no answer: looked at again later
 * while that acquire may still reach Redis; true if so
 */
static bool
watch_unsure(const HoldCopy *c)
{
	TimestampTz now = redsem_now();
	int64		age;

	if (!c->hold.unsure || now >= unsure_end(&c->hold))
		return false;
	/* (less often as it ages: a delivery held long is rare) */
	age = TimestampDifferenceMilliseconds(Max(c->hold.acquired_at,
											  c->hold.refreshed_at), now);
	shared_hold_look_again(c->slot, c->hold.id,
						   TimestampTzPlusMilliseconds(now, Max(KEEPER_UNSURE_LOOK_MS,
																age / KEEPER_UNSURE_AGE_DIVISOR)));
	return true;
}

/*
 * A released orphan: count it (a sent release whose backend lives is
 * counted by that backend; a watched one was counted when first released;
 * a failed acquire, or a place in line, never had a slot to count)
 * and stop tracking it, unless it is to be watched for a late grant; one
 * found granted late is logged, not counted, and watched no more
 */
static void
orphan_released(KeeperState *st, const HoldCopy *c, bool live)
{
	bool		late = live && c->hold.unsure && granted_late(&c->hold);

	if (late)
		log_late_grant(c);
	else if (!c->hold.watching && c->hold.granted)
	{
		if (c->hold.phase == PHASE_HELD ||
			(c->hold.phase == PHASE_RELEASING && is_orphan(&c->hold)))
			stats_count(c->hold.prefix, c->hold.name,
						live ? STAT_RELEASED : STAT_EXPIRED, 1);
		if (c->hold.pid == 0 && live)
			st->released_after_crash++;
	}
	if (!late && watch_unsure(c))
		return;
	shared_hold_remove(c->slot, c->hold.id);
}

/* A refreshed hold: note it, or log that its slot was found gone */
static int64
hold_refreshed(const HoldCopy *c, int64 lease, TimestampTz sent)
{
	int64		since = TimestampDifferenceMilliseconds(c->hold.refreshed_at, sent);

	/* (not lost: its backend's own release reached Redis first) */
	if (!note_refresh(c, lease, sent) || lease > 0)
		return lease > 0 ? Max(c->hold.lease_ms / KEEPER_REFRESH_FRACTION, 1) : KEEPER_MAX_SLEEP_MS;
	stats_count(c->hold.prefix, c->hold.name, STAT_LOST, 1);
	if (lease < 0)
	{
		ereport(LOG,
				(errmsg("redsem keeper found the slot of semaphore \"%s\" held by process %d force-released by an administrator",
						c->hold.name, c->hold.pid)));
		return KEEPER_MAX_SLEEP_MS;
	}
	/* an unconfirmed promotion lived its window, not its lease */
	ereport(LOG,
			(errmsg("redsem keeper found the slot of semaphore \"%s\" held by process %d already gone",
					c->hold.name, c->hold.pid),
			 c->hold.confirm_ms > 0 && since >= c->hold.confirm_ms ?
			 errdetail("It was promoted from the line and not confirmed within its promotion window of " INT64_FORMAT " ms; its last look in line was " INT64_FORMAT " ms ago.",
					   c->hold.confirm_ms, since) :
			 c->hold.confirm_ms > 0 ?
			 errdetail("It was promoted from the line, and Redis no longer had it though its promotion window of " INT64_FORMAT " ms had " INT64_FORMAT " ms left: Redis lost it (a restart without persistence, a failover that lost writes, FLUSHALL or an eviction), or an administrator freed it with redsem_force_release(..., holder_gone => true).",
					   c->hold.confirm_ms, c->hold.confirm_ms - since) :
			 since < c->hold.lease_ms ?
			 errdetail("Redis no longer had it though its lease of " INT64_FORMAT " ms had " INT64_FORMAT " ms left: Redis lost it (a restart without persistence, a failover that lost writes, FLUSHALL or an eviction), or an administrator freed it with redsem_force_release(..., holder_gone => true).",
					   c->hold.lease_ms, c->hold.lease_ms - since) :
			 errdetail("Its lease of " INT64_FORMAT " ms ran out before it could be refreshed; it was last confirmed " INT64_FORMAT " ms ago.",
					   c->hold.lease_ms, since)));
	return KEEPER_MAX_SLEEP_MS;
}

/*
 * A release that connection trouble kept from Redis (reported once for the
 * cycle, not logged per hold): tried again after the hold's back-off, so an
 * orphan whose release cannot get through is not resent at every round;
 * ms until its retry.
 */
static int64
release_put_off(const HoldCopy *c, const RedisOutcome *o)
{
	int			failures = c->hold.failures + 1;
	int64		retry = backoff_ms(failures);

	shared_hold_note_failure(c->slot, c->hold.id, failures,
							 TimestampTzPlusMilliseconds(redsem_now(), retry),
							 redis_outcome_text(o), 0);
	return retry;
}

/*
 * Whether the Redis of target has a hold taken under other settings (its
 * look, it, answered): if so (a lease, an administrator's release, a live
 * release), the hold is target's from now on and the answer counts as any
 * other; if not, the hold stays unkept and ends with its lease, and is not
 * looked for there again.
 */
static bool
found_here(KeeperState *st, const HoldCopy *c, const SemKeepItem *it,
		   uint64 target)
{
	if (it->value == 0)
	{
		shared_hold_not_found_under(c->slot, c->hold.id, target);
		return false;
	}
	shared_hold_move_target(c->slot, c->hold.id, target);
	st->found_elsewhere++;
	return true;
}

/* True for an outcome that is the connection's trouble, not the hold's */
static bool
connection_trouble(const RedisOutcome *o)
{
	return o->status == RS_LOST || o->status == RS_UNAVAILABLE ||
		o->status == RS_OUT_OF_MEMORY;
}

/*
 * The first connection trouble Redis answered an item of the batch with (a
 * replica now, LOADING, BUSY: the pipeline itself went through), or NULL
 */
static const RedisOutcome *
batch_trouble(const KeeperBatch *batch)
{
	for (int i = 0; i < batch->n; i++)
		if (connection_trouble(&batch->items[i].outcome))
			return &batch->items[i].outcome;
	return NULL;
}

/*
 * ms until a refresh that connection trouble left unanswered is tried
 * again: the back-off of the batches in a row that met it, by half the
 * time the hold's lease has left at the latest (a stall that ends before
 * the holder must be stopped must not stop it), and a round at most
 */
static int64
trouble_retry_ms(const KeeperState *st, const HoldCopy *c)
{
	int64		retry = retry_in_lease_ms(c, Max(st->trouble_rounds, 1), redsem_now());

	return Min(retry, KEEPER_MAX_SLEEP_MS);
}

/*
 * What Redis said about one queued hold; ms until it needs a look again.
 * Connection trouble (the item was not answered, or the server cannot
 * serve us) is reported once for the cycle, not held against the hold,
 * and the refresh is tried again soon (trouble_retry_ms).
 */
static int64
apply_result(KeeperState *st, const HoldCopy *c, const SemKeepItem *it,
			 uint64 target, TimestampTz sent)
{
	const RedisOutcome *o = &it->outcome;

	if (connection_trouble(o))
		return it->release ? release_put_off(c, o) : trouble_retry_ms(st, c);
	if (o->status != RS_OK && it->elsewhere)
		return look_failed(st, c, o);	/* (tried again) */
	if (o->status != RS_OK)
		return hold_failed(st, c, it->release ? "release" : "refresh",
						   redis_outcome_text(o));
	st->succeeded = true;
	if (it->elsewhere && !found_here(st, c, it, target))
		return KEEPER_MAX_SLEEP_MS;
	if (it->release)
	{
		orphan_released(st, c, it->value == 1);
		return KEEPER_MAX_SLEEP_MS;
	}
	return hold_refreshed(c, it->value, sent);
}

/*
 * Run step (keep_one for hold c, or apply_result for item it) with any
 * ERROR confined to the hold: caught, marked on it, retried with back-off.
 */
static int64
guarded(KeeperState *st, KeeperBatch *batch, const HoldCopy *c, uint64 target,
		const SemKeepItem *it, TimestampTz sent)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;
	int64		next = KEEPER_MAX_SLEEP_MS;

	PG_TRY();
	{
		next = it ? apply_result(st, c, it, target, sent) : keep_one(batch, c, target);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		InterruptHoldoffCount = holdoff;	/* errfinish() zeroed it */
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		LWLockReleaseAll();
		next = hold_failed(st, c, "look after", edata->message);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	return next;
}

/*
 * When a hold the keeper can still save ends (its lease, as last
 * refreshed): held, not lost, taken on target, its backend alive; else 0
 */
static TimestampTz
savable_end(const SharedHold *h, uint64 target)
{
	if (h->phase != PHASE_HELD || h->lost || h->target != target ||
		is_orphan(h))
		return 0;
	return TimestampTzPlusMilliseconds(h->refreshed_at, shared_hold_kept_ms(h));
}

/* The lease time a hold the keeper can still save has left by now, or -1 */
static int64
savable_left_ms(const SharedHold *h, uint64 target, TimestampTz now)
{
	TimestampTz end = savable_end(h, target);

	return end > now ? TimestampDifferenceMilliseconds(now, end) : -1;
}

/*
 * A share of the keeper's time: a third of shortest (the least lease time
 * left that it must fit in), at least floor_ms, at most
 * redsem.command_timeout
 */
static int
share_of(int64 shortest, int floor_ms)
{
	return (int) Max(Min(shortest / KEEPER_REFRESH_FRACTION, redsem_command_timeout_ms),
					 floor_ms);
}

/*
 * How long one Redis node may take of a batch: a third of the shortest
 * lease time left among the holds whose refresh it carries and can still
 * save (at least KEEPER_NODE_MIN_BUDGET_MS, at most
 * redsem.command_timeout), so a Cluster node that hangs delays the others'
 * refreshes by far less than their leases have left (nodes that failed go
 * last in the next batches, conn.c), and a Sentinel primary that hangs is
 * given up in time to reach the new one.  Releases and holds that can no
 * longer be saved never shorten it (src/timing.h): a batch of only those
 * gets a third of the shortest lease time left among the live holds the
 * keeper keeps (due later), or redsem.command_timeout if it keeps none.
 */
static int
node_budget_ms(const KeeperBatch *batch, const HoldCopy *holds, int n,
			   uint64 target, TimestampTz now)
{
	int64		shortest = -1;

	for (int i = 0; i < batch->n; i++)
	{
		int64		left;

		if (batch->items[i].release)
			continue;
		left = savable_left_ms(&batch->owners[i]->hold, target, now);
		if (left >= 0 && (shortest < 0 || left < shortest))
			shortest = left;
	}
	if (shortest < 0)
		for (int i = 0; i < n; i++)
		{
			int64		left = savable_left_ms(&holds[i].hold, target, now);

			if (left >= 0 && (shortest < 0 || left < shortest))
				shortest = left;
		}
	if (shortest < 0)
		return redsem_command_timeout_ms;
	return share_of(shortest, KEEPER_NODE_MIN_BUDGET_MS);
}

/*
 * In a PG_CATCH of the keeper: put the error's message into buf and clear
 * the error state (memory context, holdoff count, LWLocks as they were), so
 * that the keeper goes on.  cxt and holdoff are what they were at PG_TRY.
 */
static void
keeper_swallow_error(MemoryContext cxt, uint32 holdoff, char *buf, size_t len)
{
	ErrorData  *edata;

	InterruptHoldoffCount = holdoff;
	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	LWLockReleaseAll();
	strlcpy(buf, edata->message ? edata->message : "(no message)", len);
	FreeErrorData(edata);
}

/* When the keeper asks the sentinels next where the primary is */
static TimestampTz sentinels_next_ask = 0;

/* Wake the backends of holds in line or being asked for (so they look again) */
static void
wake_waiters(const HoldCopy *holds, int n)
{
	for (int i = 0; i < n; i++)
	{
		PGPROC	   *proc;

		if (holds[i].hold.phase != PHASE_WAITING && holds[i].hold.phase != PHASE_PENDING)
			continue;
		proc = BackendPidGetProc(holds[i].hold.pid);
		if (proc != NULL)
			SetLatch(&proc->procLatch);
	}
}

/*
 * Through Redis Sentinel: every SENTINEL_RECHECK_MS while this server holds
 * or waits for slots, and in direct mode always, ask the sentinels where the
 * primary is, and note it in shared memory.  A planned failover (SENTINEL
 * FAILOVER) leaves the old primary a primary, taking writes, until the
 * sentinels demote it about 10 s later: the keeper would refresh its holds
 * there while the new
 * primary lets them expire and admits newcomers, and waiters would wait in
 * the old primary's line.  Once the sentinels name another primary, every
 * link to the old one is stale (conn.c's link_left_behind: the keeper's
 * own, before this round's refreshes, and the backends' in direct mode),
 * and the waiters are woken so that their waits leave it
 * (read_left_behind).  The first primary it hears named is such a cue too
 * (links compare, and leave it if theirs is another): a link opened before
 * (its own at its start, a session's) may lead to one replaced since.  In
 * direct mode a session's link outlives its holds: one linked before the
 * failover, idle since, would take a slot on the old primary while a
 * session linked after it takes the same one on the new primary; so an
 * idle server asks too (one short connection to a sentinel a second).  The
 * broker asks for its own links while it keeps their target
 * (broker_loop.c: sentinels_to_ask).
 */
static void
recheck_sentinels(const HoldCopy *holds, int n)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;
	TimestampTz now = redsem_now();
	RedisCall	call;
	volatile bool named = false;
	SentinelNaming naming;

	if (!sentinel_enabled() || now < sentinels_next_ask ||
		(n == 0 && redsem_connection_mode == REDSEM_CONNECTION_BROKER))
		return;
	sentinels_next_ask = TimestampTzPlusMilliseconds(now, SENTINEL_RECHECK_MS);
	keeper_call(&call);
	call.deadline = TimestampTzPlusMilliseconds(now, Min(redsem_connect_timeout_ms,
														 KEEPER_SENTINEL_ASK_MS));
	PG_TRY();
	{
		named = sentinel_ask_primary(&call, call.deadline);
	}
	PG_CATCH();
	{
		char		why[256];

		keeper_swallow_error(cxt, holdoff, why, sizeof(why));
	}
	PG_END_TRY();
	if (!named)
		return;
	naming = shared_sentinel_named(redis_target_signature(), sentinel_last_primary());
	if (naming == SENTINEL_MOVED)
		ereport(LOG,
				(errmsg("redsem keeper: the sentinels now name %s the primary; its connections and waiters leave the one before",
						sentinel_last_primary())));
	if (naming != SENTINEL_SAME)
		wake_waiters(holds, n);
}

/*
 * Send the cycle's queued work in pipelined batches.  Returns false on
 * connection trouble, reported once.  An ERROR here (out of memory, say)
 * is caught: the items then count as not answered.
 */
static bool
send_batch(KeeperState *st, KeeperBatch *batch, const HoldCopy *holds, int n,
		   uint64 target, TimestampTz valid_until)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;
	RedisCall	call;
	SemBatchCost cost = {0, 0};
	TimestampTz start = redsem_now();
	volatile bool ok = false;

	if (batch->n == 0)
		return true;
	keeper_call(&call);
	call.node_budget_ms = node_budget_ms(batch, holds, n, target, start);
	/*
	 * One Redis (or a Sentinel primary): a primary that hangs must not hold
	 * the keeper past the holds' leases either; the next round (a second
	 * later) asks the sentinels again and reaches a new primary
	 */
	if (!cluster_enabled())
		call.deadline = TimestampTzPlusMilliseconds(start, call.node_budget_ms);
	/* and never past the moment a holder must be stopped (src/timing.h) */
	if (valid_until != DT_NOEND)
		call.deadline = Min(call.deadline == DT_NOEND ?
							TimestampTzPlusMilliseconds(start, redsem_command_timeout_ms) :
							call.deadline, valid_until);
	PG_TRY();
	{
		ok = sem_keep_batch(&call, batch->items, batch->n, &cost);
		if (!ok)
			report_trouble(st, redis_outcome_text(&call.outcome));
	}
	PG_CATCH();
	{
		char		why[256];

		keeper_swallow_error(cxt, holdoff, why, sizeof(why));
		report_trouble(st, why);
		for (int i = 0; i < batch->n; i++)
			batch->items[i].outcome.status = RS_LOST;
	}
	PG_END_TRY();
	elog(DEBUG1, "redsem keeper: %d hold(s) refreshed or released with %d command(s) in %d round trip(s), %ld ms",
		 batch->n, cost.commands, cost.round_trips,
		 TimestampDifferenceMilliseconds(start, redsem_now()));
	return ok;
}

/*
 * The fleet touch's budget (src/timing.h): a third of the shortest lease
 * time left among the holds the keeper keeps and can still save (their
 * lease not run out), as this round's refreshes
 * left them (sent: when the batch went out), and of the least lease a hold
 * taken during the touch may have; at least FLEET_TOUCH_MIN_BUDGET_MS, at
 * most redsem.command_timeout
 */
static int
touch_budget_ms(const HoldCopy *holds, int n, const KeeperBatch *batch,
				uint64 target, TimestampTz sent)
{
	TimestampTz *ends = palloc0(sizeof(TimestampTz) * Max(n, 1));
	TimestampTz now = redsem_now();
	int64		shortest = (int64) redsem_command_timeout_ms * KEEPER_REFRESH_FRACTION;

	for (int i = 0; i < n; i++)
		ends[i] = savable_end(&holds[i].hold, target);
	for (int i = 0; i < batch->n; i++)
	{
		const SemKeepItem *it = &batch->items[i];
		int			k = batch->owners[i] - holds;

		if (it->release || it->outcome.status != RS_OK || ends[k] == 0)
			continue;
		/* a new lease from when the batch went out, or none (lost) */
		ends[k] = it->value > 0 ? TimestampTzPlusMilliseconds(sent, it->value) : 0;
	}
	/* a hold whose lease has run out can no longer be saved: no bound */
	for (int i = 0; i < n; i++)
		if (ends[i] > now)
			shortest = Min(shortest, TimestampDifferenceMilliseconds(now, ends[i]));
	pfree(ends);
	/* a hold taken meanwhile, of the least lease, is seen after the touch */
	shortest = Min(shortest, REDSEM_MIN_LEASE_MS);
	return share_of(shortest, FLEET_TOUCH_MIN_BUDGET_MS);
}

/* A part of the keeper's work over this server's holds (fleet.c) */
typedef void (*FleetPart) (const HoldCopy *holds, int n, uint64 target, int budget_ms);

/*
 * Run part within budget_ms: the fleet index's touch, or the count of the
 * holds' leases in their generations (fleet.c); an ERROR there is caught
 * and goes to failed like a Redis failure, never the keeper's end
 */
static void
run_fleet_part(FleetPart part, void (*failed) (const char *why),
			   const HoldCopy *holds, int n, uint64 target, int budget_ms)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;

	PG_TRY();
	{
		part(holds, n, target, budget_ms);
	}
	PG_CATCH();
	{
		char		why[256];

		keeper_swallow_error(cxt, holdoff, why, sizeof(why));
		failed(why);
	}
	PG_END_TRY();
}

/*
 * Run one of the keeper's parts beside its refreshes (the statement queues'
 * definitions, queue_fleet.c; the adaptive limits' reports, adaptive.c)
 * within budget_ms; an ERROR there is caught and logged as what failed,
 * never the keeper's end
 */
static void
run_part(void (*part) (int budget_ms), int budget_ms, const char *what)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;

	PG_TRY();
	{
		part(budget_ms);
	}
	PG_CATCH();
	{
		char		why[256];

		keeper_swallow_error(cxt, holdoff, why, sizeof(why));
		ereport(LOG,
				(errmsg("redsem keeper could not %s: %s", what, why)));
	}
	PG_END_TRY();
}

/* Log that the keeper stopped a holder (within the per-hold line budget) */
static void
log_stop(KeeperState *st, const StopNotice *sn, const char *done)
{
	if (!hold_line_allowed(st, redsem_now()))
		return;
	ereport(LOG,
			(errmsg("redsem keeper %s process %d: the slot of semaphore \"%s\" was lost",
					done, sn->pid, sn->name),
			 errdetail("%s%s", stop_reason_detail((StopReason) sn->reason, sn->kept_ms,
												  sn->window, sn->unconfirmed_ms, NULL),
					   sn->late_ms > 0 ?
					   psprintf(" The stop came " INT64_FORMAT " ms after the slot could no longer be counted on.",
								sn->late_ms) : "")));
}

/*
 * Stop a holder as its policy says: cancel its statement (its session is
 * told why, src/guard.c) or end its session.  A backend gone meanwhile is
 * left alone: its exit releases what it held.  One its watchdog stopped
 * (src/watchdog.c) is only watched, if it lives; one whose session told the
 * stop itself, at a statement's start, asked to be watched
 * (src/escalate.c) and is not signalled, also if it tells the stop between
 * this listing and the signal.
 */
static void
stop_holder(KeeperState *st, const StopNotice *sn)
{
	if (sn->self)
	{
		/*
		 * (the keeper late: its session logged the error; the keeper's log
		 * line budget is kept for its own stops)
		 */
		if (!sn->told && sn->policy != SLOT_LOST_TERMINATE &&
			BackendPidGetProc(sn->pid) != NULL)
			(void) escalate_watch(sn->pid, sn->name, redsem_now(), false);
		return;
	}
	if (BackendPidGetProc(sn->pid) == NULL)
		return;
	if (sn->policy == SLOT_LOST_TERMINATE)
	{
		if (shared_hold_signal(sn, SIGTERM))
			log_stop(st, sn, "terminated");
	}
	else
	{
		/* (armed before the signal: the statement watched is the one cancelled) */
		bool		armed = escalate_watch(sn->pid, sn->name, redsem_now(), true);

		/* (not sent: the watch it replaced, if any, is put back) */
		if (shared_hold_signal(sn, SIGINT))
			log_stop(st, sn, "cancelled the statement of");
		else if (armed)
			escalate_unwatch(sn->pid, sn->name);
	}
}

/*
 * Stop the holders whose slots are lost or past their valid_until
 * (src/timing.h); returns the next valid_until of those still good
 * (DT_NOEND if none), by which the keeper must look again
 */
static TimestampTz
stop_lost_holders(KeeperState *st)
{
	StopNotice	notices[64];
	TimestampTz earliest;
	int			n;

	do
	{
		n = shared_hold_stops_due(redsem_now(), notices, lengthof(notices),
								  &earliest);
		for (int i = 0; i < n; i++)
			stop_holder(st, &notices[i]);
	} while (n == lengthof(notices));
	/* (the keeper looks at least every KEEPER_MAX_SLEEP_MS: its watches' wake) */
	escalate_look(redsem_now());
	return earliest;
}

/* ms from now until when (DT_NOEND: max), at least 1 and at most max */
static int64
ms_until_capped(TimestampTz when, int64 max)
{
	if (when == DT_NOEND)
		return max;
	return Min(ms_until(redsem_now(), when), max);
}

/*
 * Say how many slots taken under other connection settings were found on
 * the Redis the keeper's name, at most once per KEEPER_LOG_EVERY_MS
 */
static void
report_found_elsewhere(KeeperState *st)
{
	TimestampTz now = redsem_now();

	if (st->found_elsewhere == 0 ||
		(st->found_logged_at != 0 &&
		 !TimestampDifferenceExceeds(st->found_logged_at, now, KEEPER_LOG_EVERY_MS)))
		return;
	ereport(LOG,
			(errmsg_plural("redsem keeper found %d slot taken under other connection settings than its own on the Redis its own settings name, and looks after it there",
						   "redsem keeper found %d slots taken under other connection settings than its own on the Redis its own settings name, and looks after them there",
						   st->found_elsewhere, st->found_elsewhere),
			 errdetail("Both settings reach the same Redis data (for example, a sentinel was added to the list, or a host name was written for its address).")));
	st->found_elsewhere = 0;
	st->found_logged_at = now;
}

/* One pass over the holds; returns how long to sleep */
static long
keeper_cycle(KeeperState *st)
{
	HoldCopy   *holds;
	int			n = snapshot_holds(&holds);
	uint64		target = redis_target_signature();
	int64		sleep_ms = KEEPER_MAX_SLEEP_MS;
	KeeperBatch batch;
	TimestampTz sent;
	TimestampTz valid_until;
	bool		redis_ok;
	const RedisOutcome *trouble;

	shared_keeper_set_target(target);
	recheck_sentinels(holds, n);
	valid_until = stop_lost_holders(st);
	st->released_after_crash = 0;
	st->succeeded = false;
	batch.items = palloc(sizeof(SemKeepItem) * Max(n, 1));
	batch.owners = palloc(sizeof(HoldCopy *) * Max(n, 1));
	batch.n = 0;
	for (int i = 0; i < n; i++)
	{
		/* not inside Min(): the macro would run it twice */
		int64		next = guarded(st, &batch, &holds[i], target, NULL, 0);

		sleep_ms = Min(sleep_ms, next);
	}
	sent = redsem_now();
	redis_ok = send_batch(st, &batch, holds, n, target, valid_until);
	/* (trouble in the answers is logged as a failed batch's is) */
	trouble = redis_ok ? batch_trouble(&batch) : NULL;
	if (trouble != NULL)
		report_trouble(st, redis_outcome_text(trouble));
	st->trouble_rounds = (!redis_ok || trouble != NULL) ? st->trouble_rounds + 1 : 0;
	for (int i = 0; i < batch.n; i++)
	{
		int64		next = guarded(st, &batch, batch.owners[i], target,
								   &batch.items[i], sent);

		sleep_ms = Min(sleep_ms, next);
	}
	if (st->succeeded && redis_ok && trouble == NULL)
		report_recovery(st);
	valid_until = stop_lost_holders(st);
	if (fleet_touch_due())
	{
		run_fleet_part(fleet_touch_index, fleet_touch_failed, holds, n, target,
					   (int) ms_until_capped(valid_until,
											 touch_budget_ms(holds, n, &batch, target, sent)));
		valid_until = stop_lost_holders(st);
	}
	/* (not behind a touch: a late reply it left owed would cost the link) */
	else if (fleet_gen_keep_due(holds, n, target))
	{
		run_fleet_part(fleet_keep_generations, fleet_gen_keep_failed, holds, n, target,
					   (int) ms_until_capped(valid_until,
											 touch_budget_ms(holds, n, &batch, target, sent)));
		valid_until = stop_lost_holders(st);
	}
	else if (queue_fleet_poll_due())
	{
		run_part(queue_fleet_poll, (int) ms_until_capped(valid_until,
														 touch_budget_ms(holds, n, &batch, target, sent)),
				 "read the statement queue definitions");
		valid_until = stop_lost_holders(st);
	}
	else if (adaptive_tick_due())
	{
		run_part(adaptive_keeper_tick, (int) ms_until_capped(valid_until,
															 touch_budget_ms(holds, n, &batch, target, sent)),
				 "report to the adaptive limits");
		valid_until = stop_lost_holders(st);
	}
	sleep_ms = Min(sleep_ms, queue_poll_interval_ms);
	sleep_ms = Min(sleep_ms, adaptive_ms_until_tick());
	/* (a read a change asked for, that a touch put off, comes next) */
	if (queue_fleet_read_asked())
		sleep_ms = Min(sleep_ms, KEEPER_RETRY_MIN_MS);
	sleep_ms = Min(sleep_ms, ms_until_capped(valid_until, sleep_ms));
	report_found_elsewhere(st);
	report_lines_left_out(st, redsem_now());
	if (st->released_after_crash > 0)
		ereport(LOG,
				(errmsg("redsem keeper released %d slot(s) held before the server restarted after a crash",
						st->released_after_crash)));
	return (long) Max(sleep_ms, 1);
}

/* Forget our pid and latch when we exit */
static void
keeper_detach(int code, Datum arg)
{
	shared_keeper_detach();
}

/* The keeper's main loop */
void
redsem_keeper_main(Datum main_arg)
{
	KeeperState st;
	MemoryContext cycle_context;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	pqsignal(SIGPIPE, SIG_IGN);
	BackgroundWorkerUnblockSignals();

	memset(&st, 0, sizeof(st));
	redis_set_connection_purpose("keeper");
	shared_keeper_attach(MyLatch, MyProcPid);
	/* (a keeper before this one left its watches' names in the AskSlots) */
	escalate_keeper_start();
	on_shmem_exit(keeper_detach, (Datum) 0);
	cycle_context = AllocSetContextCreate(TopMemoryContext, "redsem keeper",
										  ALLOCSET_DEFAULT_SIZES);
	/* hashing the script (script.c) needs a resource owner */
	CurrentResourceOwner = ResourceOwnerCreate(NULL, "redsem keeper");

	for (;;)
	{
		long		sleep_ms;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextSwitchTo(cycle_context);
		queue_caps_apply();
		sleep_ms = keeper_cycle(&st);
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(cycle_context);

		/* a wake-up our own Redis waits swallowed: look again at once */
		if (shared_keeper_set_wake_time(TimestampTzPlusMilliseconds(redsem_now(),
																	sleep_ms)))
			SetLatch(MyLatch);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, redsem_wait_event());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}
