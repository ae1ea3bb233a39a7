/*
 * hold.c
 *		This session's holds, their scopes, ownership, and releasing them on
 *		time.
 *
 * Slots are owned: only the session that took a slot can release or refresh
 * it (through its entry here), and the keeper on its behalf; administrators
 * force-release with redsem_force_release.
 *
 * Every acquire registers its holder id here, and in the keeper's shared
 * table, *before* asking Redis, so a reply lost to an interrupt or a crash
 * can never leak a slot: the entry is pending until Redis answers, and an
 * abort releases whatever is still pending.
 *
 * Transaction-scoped holds end at commit or rollback of the top-level
 * transaction (or of the subtransaction they were taken in, if that rolls
 * back).  Session-scoped holds end with redsem_release, redsem_release_all
 * or the session.  The callbacks never raise (an ERROR at commit would be a
 * PANIC): they give Redis a short budget, catch any error, and leave what
 * they could not release on the list, marked ENDING and handed to the
 * keeper; the next redsem call of the session retries it, and the lease is
 * the final backstop.
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "nodes/parsenodes.h"
#include "storage/ipc.h"
#include "tcop/utility.h"
#include "utils/elog.h"
#include "utils/guc.h"
#include "utils/backend_status.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "clock.h"
#include "conn.h"
#include "escalate.h"
#include "guc.h"
#include "hold.h"
#include "hooks.h"
#include "link.h"
#include "script.h"
#include "shmem.h"
#include "sqlargs.h"
#include "stop.h"
#include "textenc.h"
#include "timing.h"
#include "watchdog.h"

/* redsem.max_holds_per_session */
int			redsem_max_holds_per_session = 1000;

typedef enum HoldState
{
	HOLD_PENDING,				/* asked Redis, no answer yet, or in line */
	HOLD_HELD,					/* Redis confirmed the slot */
	HOLD_ENDING					/* its scope ended; Redis has not yet
								 * confirmed the release */
} HoldState;

struct Hold
{
	char	   *prefix;			/* redsem.key_prefix when it was taken */
	char	   *name;
	char	   *id;
	HoldScope	scope;
	HoldState	state;
	bool		was_held;		/* ENDING: it had been granted */
	bool		stop_reported;	/* its loss was told (hold_check_stopped) */
	bool		warned_unconfirmed; /* policy warn: told its lease went
									 * unconfirmed */
	SlotLostPolicy on_lost;		/* redsem.on_slot_lost when it was taken */
	bool		spans_xacts;	/* a statement's slot kept across the
								 * commits and rollbacks of a procedure */
	SubTransactionId subxid;	/* subtransaction that took it */
	int64		lease_ms;
	int			permits;
	int64		ticket;
	TimestampTz acquired_at;
	TimestampTz refreshed_at;	/* last lease confirmation we know of */
	int			shared_slot;	/* entry in the keeper's table, or -1 */
	uint64		target;			/* redis_target_signature() when taken */
	uint64		writes_at_begin;	/* redis_writes_started() when taken */
	/* on the sent list: what the reply to its release said, once read */
	bool		reply_in;
	bool		unsure;			/* its acquire got no answer (it may reach
								 * Redis late: keeper.c) */
	bool		release_ok;		/* Redis took the release */
	bool		live_at_release;	/* ... of a live slot */
};

/* redsem.await_release */
bool		redsem_await_release = false;

static List *holds = NIL;		/* Hold *, in TopMemoryContext */

/*
 * Holds whose release went to Redis without waiting for the reply (ENDING,
 * no longer on holds; in TopMemoryContext).  The reply is read before the
 * connection's next use, noted on the hold by release_reply_in, and swept
 * up by settle_sent: counted and freed, or put back on holds for a retry.
 */
static List *sent = NIL;
static bool callbacks_registered = false;

/*
 * The losses of the current transaction's own slots (and its statements'),
 * each with the subtransaction that took the slot: such a transaction must
 * not commit, even once the error that told of it was caught and the hold
 * itself released.  A rollback of that subtransaction takes the work done
 * under the slot with it, and its doom too.  (Doom *, in TopMemoryContext.)
 */
typedef struct Doom
{
	SubTransactionId subxid;
	StoppedHold told;			/* told.name: its own copy */
} Doom;

static List *dooms = NIL;

/* The stops counter as this session last looked at its holds */
static uint64 stops_seen = 0;
/* ... and of its watchdog's stops (watchdog_fires) */
static int	fires_seen = 0;

/* When this session's first hold still good runs past its valid_until */
static TimestampTz next_look = 0;
static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * The last few slots of this session that ended without its knowing how
 * ("name\0id", in TopMemoryContext): told lost, or given back by the keeper
 * after the session's own release failed.  Its redsem_release of one (a
 * retry) returns false without the WARNING for a slot never held.
 */
#define ENDED_KEPT 8
static char *ended_slots[ENDED_KEPT];
static int	ended_next = 0;

/* Remember that slot (name, id) of this session ended that way (above) */
static void
remember_ended(const char *name, const char *id)
{
	size_t		nlen = strlen(name) + 1;
	char	   *entry;

	/* (also called from the transaction callbacks: no ERROR, even for OOM) */
	entry = MemoryContextAllocExtended(TopMemoryContext, nlen + strlen(id) + 1,
									   MCXT_ALLOC_NO_OOM);
	if (entry == NULL)
		return;
	memcpy(entry, name, nlen);
	strcpy(entry + nlen, id);
	if (ended_slots[ended_next] != NULL)
		pfree(ended_slots[ended_next]);
	ended_slots[ended_next] = entry;
	ended_next = (ended_next + 1) % ENDED_KEPT;
}

/* Forget the slots that ended so (DISCARD ALL: the next client's session) */
static void
forget_ended(void)
{
	for (int i = 0; i < ENDED_KEPT; i++)
	{
		if (ended_slots[i] != NULL)
			pfree(ended_slots[i]);
		ended_slots[i] = NULL;
	}
}

/* True (and forgotten) if (name, id) is a slot of this session that ended so */
bool
hold_take_ended(const char *name, const char *id)
{
	for (int i = 0; i < ENDED_KEPT; i++)
	{
		char	   *e = ended_slots[i];

		if (e != NULL && strcmp(e, name) == 0 && strcmp(e + strlen(e) + 1, id) == 0)
		{
			pfree(e);
			ended_slots[i] = NULL;
			return true;
		}
	}
	return false;
}

static bool never_sent(Hold *hold);

/*
 * Stop the keeper tracking a hold, or, if its acquire got no answer and
 * may reach Redis late, have the keeper release it again for a while
 */
static void
untrack(Hold *hold)
{
	if (hold->unsure && !never_sent(hold))
		shared_hold_watch_unsure(hold->shared_slot, hold->id,
								 TimestampTzPlusMilliseconds(redsem_now(),
															 KEEPER_UNSURE_LOOK_MS));
	else
		shared_hold_remove(hold->shared_slot, hold->id);
}

/* Free one entry, and stop the keeper tracking it */
static void
hold_free(Hold *hold)
{
	/* (an ENDING one was unwatched then: its slot may be another's since) */
	if (hold->state != HOLD_ENDING)
		watchdog_unwatch(hold->shared_slot);
	if (hold->stop_reported)
		remember_ended(hold->name, hold->id);
	untrack(hold);
	pfree(hold->prefix);
	pfree(hold->name);
	pfree(hold->id);
	pfree(hold);
}

/* Drop an entry from the list and free it */
static void
hold_drop(Hold *hold)
{
	holds = list_delete_ptr(holds, hold);
	hold_free(hold);
}

/* Count the end of a hold that had been granted */
static void
count_end(Hold *hold, bool was_live)
{
	if (hold->was_held)
		stats_count(hold->prefix, hold->name, was_live ? STAT_RELEASED : STAT_EXPIRED, 1);
}

/* Mark a hold as ending: its scope is over, only the release remains */
static void
mark_ending(Hold *hold)
{
	if (hold->state == HOLD_ENDING)
		return;
	hold->was_held = (hold->state == HOLD_HELD);
	hold->state = HOLD_ENDING;
	watchdog_unwatch(hold->shared_slot);
	shared_hold_set_ending(hold->shared_slot, hold->id);
}

/*
 * True if the keeper already released a hold handed to it (its entry in
 * the keeper's table is gone): nothing is left to do, nor to count.
 */
static bool
keeper_took_it(Hold *hold)
{
	SharedHold	copy;

	/* (or released it and only watches it now for a late grant) */
	return hold->shared_slot >= 0 &&
		(!shared_hold_read(hold->shared_slot, hold->id, &copy) || copy.watching);
}

/*
 * True if a hold was handed to the keeper, which is running on the Redis
 * the hold was taken on: it retries the release with back-off, so a
 * statement of the session need not wait for a Redis node that did not
 * answer the first time.
 */
static bool
keeper_has_it(Hold *hold)
{
	SharedHold	copy;

	/* the kill(0) of shared_keeper_is_active only for a hold handed over */
	return hold->shared_slot >= 0 &&
		shared_hold_read(hold->shared_slot, hold->id, &copy) && copy.abandoned &&
		shared_keeper_reaches_target(copy.target);
}

/*
 * True if nothing was written to Redis since the hold was taken: its
 * request never left this process (no connection could be made), so Redis
 * has nothing of it to release.
 */
static bool
never_sent(Hold *hold)
{
	return hold->writes_at_begin == redis_writes_started();
}

/* Append hold to *list, in TopMemoryContext */
static void
list_keep(List **list, Hold *hold)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	*list = lappend(*list, hold);
	MemoryContextSwitchTo(old);
}

/*
 * The reply to a release sent without waiting (a RedisReplyHandler): note
 * it on the hold for settle_sent, and tell the keeper to forget the hold,
 * or to release it if Redis did not say it took the release.
 */
static void
release_reply_in(void *arg, struct redisReply *reply,
				 const RedisOutcome *outcome)
{
	Hold	   *hold = (Hold *) arg;

	hold->release_ok = reply != NULL &&
		sem_release_reply(reply, &hold->live_at_release);
	hold->reply_in = true;
	if (hold->release_ok)
		untrack(hold);
	else
		shared_hold_abandon(hold->shared_slot, hold->id);
}

/*
 * Sweep up the sent releases whose replies came: those Redis took are
 * counted and freed; the others go back on holds, ENDING (and handed to
 * the keeper), for the next call to retry like any failed release.
 */
static void
settle_sent(void)
{
	ListCell   *lc;

	foreach(lc, sent)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (!hold->reply_in)
			continue;
		sent = foreach_delete_current(sent, lc);
		if (hold->release_ok)
		{
			count_end(hold, hold->live_at_release);
			hold_free(hold);
			continue;
		}
		hold->reply_in = false;
		list_keep(&holds, hold);
	}
}

/*
 * Send the release of an ENDING hold without waiting for the reply, and
 * move the hold to the sent list (the caller takes it off holds); false if
 * it could not be sent.  The keeper's table says RELEASING first, so the
 * keeper neither refreshes it meanwhile nor releases it while the reply
 * may still come.
 */
static bool
send_release(Hold *hold, TimestampTz deadline, bool interruptible)
{
	RedisCall	call;
	volatile bool sent_ok = false;

	redis_call_init(&call, deadline, interruptible, 0);
	call.uncounted = !hold->was_held;	/* its acquire's error counted */
	shared_hold_set_phase(hold->shared_slot, hold->id, PHASE_RELEASING,
						  hold->ticket, redsem_now(), 0, false);
	hold->reply_in = false;
	/* on the list before the handler may be called; off it if not sent */
	list_keep(&sent, hold);
	PG_TRY();
	{
		sent_ok = sem_release_deferred(&call, hold->prefix, hold->name,
									   hold->id, release_reply_in, hold);
	}
	PG_CATCH();
	{
		sent = list_delete_ptr(sent, hold);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!sent_ok)
		sent = list_delete_ptr(sent, hold);
	return sent_ok;
}

/* Release an ENDING hold and wait for the reply; false if Redis did not */
static bool
release_now(Hold *hold, TimestampTz deadline, bool interruptible)
{
	RedisCall	call;
	bool		live;

	redis_call_init(&call, deadline, interruptible, 0);
	call.uncounted = !hold->was_held;	/* its acquire's error counted */
	if (!sem_release(&call, hold->prefix, hold->name, hold->id, &live))
		return false;
	count_end(hold, live);
	return true;
}

/*
 * True if the connection settings now name the Redis the hold lives on: the
 * ones it was taken under, or ones the keeper found it under since (either
 * reaches it: a session may set its settings back)
 */
static bool
on_current_target(const Hold *hold)
{
	uint64		now = redis_target_signature();

	return hold->target == now ||
		shared_hold_target(hold->shared_slot, hold->id) == now;
}

/*
 * Release the ENDING holds, each with a call that ends by deadline and
 * reports no Redis failure: sent without waiting for the reply if defer,
 * else waited for (and then the replies of releases sent earlier are read
 * first).  Those Redis did not take stay ENDING, handed to the keeper.
 * Interruptible calls serve cancel and timeouts: an interrupt unwinds
 * through here and leaves the rest ENDING, for later.
 */
static void
release_ending(TimestampTz deadline, bool interruptible, bool defer)
{
	bool		reachable = !in_error_recursion_trouble();
	bool		taken;
	ListCell   *lc;

	if (!defer && sent != NIL && reachable)
		redis_settle_deferred(deadline, interruptible);
	settle_sent();
	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (hold->state != HOLD_ENDING)
			continue;
		taken = keeper_took_it(hold);
		if (taken || never_sent(hold))
		{
			/* (its release failed before: a retry of it is not told off) */
			if (taken && !hold->stop_reported)
				remember_ended(hold->name, hold->id);
			holds = foreach_delete_current(holds, lc);
			hold_free(hold);
			continue;
		}
		if (interruptible && keeper_has_it(hold))
			continue;			/* a dead node must not cost this call too */
		if (!on_current_target(hold))
		{
			/* the settings name another Redis now: never release it there */
			shared_hold_abandon(hold->shared_slot, hold->id);
			continue;
		}
		if (reachable && defer && send_release(hold, deadline, interruptible))
		{
			holds = foreach_delete_current(holds, lc);
			continue;
		}
		if (reachable && !defer && release_now(hold, deadline, interruptible))
		{
			holds = foreach_delete_current(holds, lc);
			hold_free(hold);
			continue;
		}
		/* once Redis failed us, don't spend the budget again */
		reachable = false;
		shared_hold_abandon(hold->shared_slot, hold->id);
	}
	/* replies of releases sent earlier read meanwhile, or in by now: counted */
	if (!defer && !in_error_recursion_trouble())
		redis_poll_deferred();
	settle_sent();
}

/* Hand every ENDING hold to the keeper (allocates nothing) */
static void
abandon_ending(void)
{
	ListCell   *lc;

	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (hold->state == HOLD_ENDING)
			shared_hold_abandon(hold->shared_slot, hold->id);
	}
}

/*
 * release_ending, serving cancel and timeouts: an interrupt hands what is
 * left to the keeper (and to the session's next call) before it unwinds.
 */
static void
release_ending_interruptible(TimestampTz deadline, bool defer)
{
	PG_TRY();
	{
		release_ending(deadline, true, defer);
	}
	PG_CATCH();
	{
		abandon_ending();
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/*
 * Release the ENDING holds by until, from a callback: any error is caught
 * and becomes a WARNING, and what was not released is left to the keeper
 * and to the session's next call.
 */
static void
release_ending_until(TimestampTz until, bool defer, const char *when)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;
	uint32		cancel_holdoff = QueryCancelHoldoffCount;
	bool		exiting = proc_exit_inprogress;

	/*
	 * While the process exits, errstart() turns every ERROR into a FATAL
	 * that no PG_TRY can catch; for the duration of our own work, let an
	 * ERROR be an ERROR, so that it is caught below like any other.
	 */
	proc_exit_inprogress = false;
	PG_TRY();
	{
		redsem_fault("callback");
		release_ending(until, false, defer);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* errfinish() zeroed the hold-off counts that our caller relies on */
		proc_exit_inprogress = exiting;
		InterruptHoldoffCount = holdoff;
		QueryCancelHoldoffCount = cancel_holdoff;
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		abandon_ending();
		ereport(WARNING,
				(errmsg("redsem could not release slots %s", when),
				 errdetail_internal("%s", edata->message),
				 errhint("The keeper releases them; without it they end with their lease.")));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	proc_exit_inprogress = exiting;
}

/* Release the ENDING holds within ms milliseconds, from a callback (as above) */
static void
release_ending_guarded(int ms, bool defer, const char *when)
{
	release_ending_until(TimestampTzPlusMilliseconds(redsem_now(), ms), defer, when);
}

/*
 * Holds that end with the top-level transaction, however it ends: not the
 * slot of a CALL or DO whose procedure commits or rolls back on its own
 * (it ends with the statement)
 */
static bool
ends_with_xact(Hold *hold, SubTransactionId subxid)
{
	return hold->scope == HOLD_XACT ||
		(hold->scope == HOLD_STATEMENT && !hold->spans_xacts) ||
		hold->state == HOLD_PENDING;
}

/* Holds that end when subtransaction subxid rolls back */
static bool
ends_with_subxact(Hold *hold, SubTransactionId subxid)
{
	return hold->subxid == subxid && ends_with_xact(hold, subxid);
}

/* Mark the holds matching the filter ENDING; true if there were any */
static bool
mark_matching(bool (*match) (Hold *, SubTransactionId), SubTransactionId subxid)
{
	ListCell   *lc;
	bool		any = false;

	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (hold->state != HOLD_ENDING && match(hold, subxid))
		{
			mark_ending(hold);
			any = true;
		}
	}
	return any;
}

/* Forget the dooms of subtransaction subxid (every one: Invalid) */
static void
dooms_forget(SubTransactionId subxid)
{
	ListCell   *lc;

	foreach(lc, dooms)
	{
		Doom	   *d = (Doom *) lfirst(lc);

		if (subxid != InvalidSubTransactionId && d->subxid != subxid)
			continue;
		dooms = foreach_delete_current(dooms, lc);
		pfree((char *) d->told.name);
		pfree(d);
	}
}

/* Refuse to end the transaction well if one of its own slots was lost */
static void
dooms_refuse(void)
{
	StoppedHold *told;
	ListCell   *lc;
	int			n = 0;

	if (dooms == NIL)
		return;
	told = palloc(sizeof(StoppedHold) * list_length(dooms));
	foreach(lc, dooms)
		told[n++] = ((Doom *) lfirst(lc))->told;
	stop_report(told, n);
}

/* End transaction-scoped holds with the transaction; refuse PREPARE */
static void
xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			dooms_refuse();
			foreach(lc, holds)
			{
				Hold	   *hold = (Hold *) lfirst(lc);

				if (hold->scope == HOLD_XACT && hold->state != HOLD_ENDING)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that holds a transaction-scoped redsem slot"),
							 errdetail("The transaction holds a slot of semaphore \"%s\".", hold->name),
							 errhint("Release it with redsem_release before PREPARE TRANSACTION, or use redsem_acquire.")));
			}
			break;
		case XACT_EVENT_PRE_COMMIT:
			/* still in time to abort: work done under a lost slot */
			hold_check_stopped(true);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			dooms_forget(InvalidSubTransactionId);
			if (mark_matching(ends_with_xact, InvalidSubTransactionId))
				release_ending_guarded(REDSEM_XACT_CLEANUP_MS, !redsem_await_release,
									   "at the end of the transaction");
			/* (an ERROR's recovery disabled every timeout just before) */
			if (event == XACT_EVENT_ABORT)
				watchdog_arm();
			break;
		default:
			break;
	}
}

/* End holds of a rolled-back subtransaction; hand others to the parent */
static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, holds)
		{
			Hold	   *hold = (Hold *) lfirst(lc);

			if (hold->subxid == mySubid)
				hold->subxid = parentSubid;
		}
		foreach(lc, dooms)
		{
			Doom	   *d = (Doom *) lfirst(lc);

			if (d->subxid == mySubid)
				d->subxid = parentSubid;
		}
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		dooms_forget(mySubid);
		if (mark_matching(ends_with_subxact, mySubid))
			release_ending_guarded(REDSEM_XACT_CLEANUP_MS, !redsem_await_release,
								   "at the rollback of a subtransaction");
	}
}

/* Every hold */
static bool
any_hold(Hold *hold, SubTransactionId subxid)
{
	return true;
}

/*
 * Release everything the session still has, within a bounded time (a
 * transaction's when the exit is a FATAL error, code 1: a terminate, whose
 * sender may wait for it to go, a fast shutdown, an idle timeout; see
 * src/timing.h): the releases are sent without waiting, then their replies
 * read (a round trip per link for up to LINK_MAX_OWED of them), and what
 * failed is tried once more, within the same time
 */
static void
session_exit_callback(int code, Datum arg)
{
	TimestampTz until = TimestampTzPlusMilliseconds(redsem_now(), code == 0 ?
													REDSEM_EXIT_CLEANUP_MS :
													REDSEM_XACT_CLEANUP_MS);

	(void) mark_matching(any_hold, InvalidSubTransactionId);
	if (holds != NIL)
		release_ending_until(until, true, "at session exit");
	if (holds != NIL || sent != NIL)
		release_ending_until(until, false, "at session exit");
	redis_disconnect();
}

/* Register the callbacks, once per backend */
void
hold_init(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	before_shmem_exit(session_exit_callback, (Datum) 0);
	callbacks_registered = true;
}

/* How many holds are ENDING, still to be released */
static int
count_ending(void)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, holds)
		n += (((Hold *) lfirst(lc))->state == HOLD_ENDING);
	return n;
}

/*
 * DISCARD ALL: the session is handed to another client (a connection
 * pooler's server_reset_query), so everything it holds or waits for goes,
 * as its advisory locks do.  A Redis failure does not fail the DISCARD:
 * what Redis did not take is left to the keeper, with a WARNING.
 */
static void
discard_all(void)
{
	int			left;

	if (!mark_matching(any_hold, InvalidSubTransactionId))
	{
		forget_ended();
		return;
	}
	release_ending_interruptible(TimestampTzPlusMilliseconds(redsem_now(),
															 redsem_command_timeout_ms),
								 false);
	/* (after the releases: one the keeper finished is remembered there) */
	forget_ended();
	left = count_ending();
	if (left > 0)
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("DISCARD ALL could not release %d redsem slots", left),
				 errdetail("Redis did not answer in time."),
				 errhint("The keeper releases them; without it they end with their lease.")));
}

/*
 * ProcessUtility: DISCARD ALL gives back every slot and place first, while
 * the session's settings still name the Redis they were taken from (the
 * DISCARD resets them); inside a transaction block it fails as always,
 * before anything is released.
 */
static void
hold_process_utility(PlannedStmt *pstmt, const char *queryString,
					 bool readOnlyTree, ProcessUtilityContext context,
					 ParamListInfo params, QueryEnvironment *queryEnv,
					 DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (IsA(stmt, DiscardStmt) && ((DiscardStmt *) stmt)->target == DISCARD_ALL &&
		holds != NIL)
	{
		PreventInTransactionBlock(context == PROCESS_UTILITY_TOPLEVEL, "DISCARD ALL");
		discard_all();
	}
	redsem_next_utility(prev_process_utility, pstmt, queryString, readOnlyTree,
						context, params, queryEnv, dest, qc);
}

/* Install the DISCARD ALL hook (from _PG_init, preloaded or not) */
void
hold_install_hooks(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = hold_process_utility;
}

/*
 * Refuse a new slot or place in line beyond redsem.max_holds_per_session
 * (statement queues' slots, at most one per queue, do not count).
 */
static void
check_session_limit(HoldScope scope)
{
	ListCell   *lc;
	int			n = 0;

	if (scope == HOLD_STATEMENT)
		return;
	foreach(lc, holds)
		n += (((Hold *) lfirst(lc))->scope != HOLD_STATEMENT);
	if (n >= redsem_max_holds_per_session)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("this session already holds or waits for %d redsem slots", n),
				 errdetail("redsem.max_holds_per_session allows %d.",
						   redsem_max_holds_per_session),
				 errhint("Release slots with redsem_release or redsem_release_all; a superuser can raise the limit for a role or database with ALTER ROLE or ALTER DATABASE ... SET redsem.max_holds_per_session.")));
}

/*
 * Before a bounded role's acquire would be refused with releases of this
 * session still counted (sent without waiting at the end of an earlier
 * transaction, their replies not read yet: Redis has most often answered,
 * the next transaction behind a pooler just came sooner), read those
 * replies, by redsem.command_timeout, so that they count no more
 */
static void
settle_before_bound(Oid role)
{
	if (sent == NIL || !shared_role_at_bound(role))
		return;
	redis_settle_deferred(TimestampTzPlusMilliseconds(redsem_now(),
													  redsem_command_timeout_ms),
						  true);
	settle_sent();
}

/*
 * Record an acquire about to be sent to Redis, here and in the keeper's
 * table (which raises if the table is full, or if the session's login role
 * has its redsem.max_holds_per_role: nothing was asked yet).  Superusers,
 * members of redsem_admin and statement queues may take the table's
 * reserved entries, and are not bounded per role.
 */
Hold *
hold_begin(const char *name, const char *id, HoldScope scope, int64 lease_ms,
		   int permits)
{
	const char *prefix = redsem_prefix_or_setting(NULL);
	uint64		target;
	int			slot;
	bool		privileged;
	MemoryContext old;
	Hold	   *hold;

	check_session_limit(scope);
	escalate_note_try(name, false);
	target = redis_target_signature();
	privileged = scope == HOLD_STATEMENT || redsem_is_admin();
	if (!privileged)
		settle_before_bound(GetSessionUserId());
	slot = shared_hold_register(prefix, name, id, target, (uint8) scope,
								lease_ms, permits, privileged,
								GetSessionUserId(), !privileged,
								(SlotLostPolicy) redsem_on_slot_lost);
	/* (a hold taken from now on is looked at in time: see hold_mark_held) */
	old = MemoryContextSwitchTo(TopMemoryContext);
	hold = palloc0(sizeof(Hold));
	hold->prefix = pstrdup(prefix);
	hold->name = pstrdup(name);
	hold->id = pstrdup(id);
	hold->scope = scope;
	hold->state = HOLD_PENDING;
	hold->subxid = GetCurrentSubTransactionId();
	hold->lease_ms = lease_ms;
	hold->permits = permits;
	hold->shared_slot = slot;
	hold->target = target;
	hold->writes_at_begin = redis_writes_started();
	hold->on_lost = (SlotLostPolicy) redsem_on_slot_lost;
	holds = lappend(holds, hold);
	MemoryContextSwitchTo(old);
	return hold;
}

/* The acquire got no answer: Redis may still take it, late */
void
hold_mark_unsure(Hold *hold)
{
	hold->unsure = true;
	shared_hold_set_unsure(hold->shared_slot, hold->id);
}

/* The acquire is in line (or re-checked its place at checked_at) */
void
hold_mark_waiting(Hold *hold, TimestampTz checked_at)
{
	shared_hold_set_phase(hold->shared_slot, hold->id, PHASE_WAITING, 0,
						  checked_at, 0, false);
}

/*
 * True if the keeper would confirm a promotion of this hold in time: it
 * runs without trouble, tracks the hold, and refreshes holds on the Redis
 * this one was taken on.
 */
bool
hold_keeper_can_confirm(Hold *hold)
{
	SharedHold	copy;

	return hold->shared_slot >= 0 &&
		shared_hold_read(hold->shared_slot, hold->id, &copy) &&
		shared_keeper_keeps_target(copy.target);
}

/*
 * A wake-up said the acquire was promoted: the keeper is to confirm it
 * within window_ms of at (before the acquire returns, so that a pause of
 * this backend from now on cannot cost it the slot).
 */
void
hold_mark_promoted(Hold *hold, int64 ticket, int64 window_ms, TimestampTz at)
{
	shared_hold_set_phase(hold->shared_slot, hold->id, PHASE_HELD, ticket,
						  at, window_ms, false);
}

/*
 * Redis granted the slot, with a lease (or, for a promotion nobody
 * confirmed yet, a window of confirm_ms) that started no earlier than
 * confirmed_at (when the granting request was sent).
 */
void
hold_mark_held(Hold *hold, int64 ticket, int64 lease_ms,
			   TimestampTz confirmed_at, int64 confirm_ms)
{
	hold->state = HOLD_HELD;
	hold->ticket = ticket;
	hold->lease_ms = lease_ms;
	hold->acquired_at = hold->refreshed_at = confirmed_at;
	/* the session's next look at its holds comes in time for this one */
	next_look = Min(next_look,
					redsem_valid_until(confirmed_at, confirm_ms > 0 ? confirm_ms : lease_ms));
	shared_hold_set_phase(hold->shared_slot, hold->id, PHASE_HELD, ticket,
						  confirmed_at, confirm_ms, true);
	if (hold->on_lost != SLOT_LOST_WARN)
		watchdog_watch(hold->shared_slot);
	escalate_note_try(hold->name, true);
}


/*
 * Whether hold has been stopped, as of now (by redsem's clock): by the
 * keeper, or now past its valid_until (which this marks, should the keeper
 * be gone; with policy warn it is only told, once, and kept).  Fills what
 * the report needs.
 */
static bool
hold_stopped(Hold *hold, TimestampTz now, StoppedHold *out)
{
	SharedHold	copy;
	TimestampTz valid_until;
	TimestampTz refreshed = hold->refreshed_at;
	int64		kept = hold->lease_ms;

	out->name = hold->name;
	out->policy = hold->on_lost;
	out->in_xact = (hold->scope != HOLD_SESSION);
	out->statement = (hold->scope == HOLD_STATEMENT);
	out->reason = STOP_NONE;
	out->cancel_coming = false;
	out->keeper_sent_at = 0;
	out->trouble[0] = '\0';
	out->window = false;
	if (hold->shared_slot >= 0)
	{
		if (!shared_hold_read(hold->shared_slot, hold->id, &copy))
			return false;
		if (copy.failures > 0)
			strlcpy(out->trouble, copy.trouble, sizeof(out->trouble));
		refreshed = copy.refreshed_at;
		kept = shared_hold_kept_ms(&copy);
		out->window = copy.confirm_ms > 0;
		out->reason = (StopReason) copy.stop;
		/* (its watchdog took the stop on: its cancel is pending here) */
		out->cancel_coming = pg_atomic_read_u64(&copy.stop_at) == SHARED_STOP_CLAIMED &&
			!copy.told;
	}
	/* (not preloaded: nobody refreshed it since it was granted) */
	valid_until = redsem_valid_until(refreshed, kept);
	out->kept_ms = kept;
	/* (one found gone: up to when it was, which tells whether lease was left) */
	out->unconfirmed_ms = TimestampDifferenceMilliseconds(refreshed,
														  out->reason == STOP_GONE ? copy.stopped_at : now);
	/* (its watchdog took the stop on: stopped, though a refresh came since) */
	if (hold->shared_slot >= 0 && pg_atomic_read_u64(&copy.stop_at) == SHARED_STOP_CLAIMED)
		valid_until = Min(valid_until, now);
	if (out->reason == STOP_NONE && now >= valid_until)
	{
		if (out->policy == SLOT_LOST_WARN)
		{
			if (hold->warned_unconfirmed)
				return false;
			hold->warned_unconfirmed = true;
			out->reason = STOP_UNCONFIRMED;
			return true;
		}
		(void) shared_hold_stop(hold->shared_slot, hold->id, STOP_UNCONFIRMED, now);
		out->reason = STOP_UNCONFIRMED;
	}
	if (out->reason == STOP_NONE)
		next_look = Min(next_look, valid_until);
	return out->reason != STOP_NONE;
}

/*
 * The first of this session's slots stopped under policy terminate, for the
 * words of the FATAL that ends the session (src/guard.c), and *others, how
 * many more; false if none.  Reads only (a report is under way): it marks,
 * tells and gives up nothing.
 */
bool
hold_terminated(StoppedHold *out, int *others)
{
	TimestampTz now = redsem_now();
	bool		found = false;
	ListCell   *lc;

	*others = 0;
	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);
		SharedHold	copy;
		StopReason	why;

		if (hold->state != HOLD_HELD || hold->on_lost != SLOT_LOST_TERMINATE ||
			hold->shared_slot < 0 || !shared_hold_read(hold->shared_slot, hold->id, &copy))
			continue;
		why = (StopReason) copy.stop;
		if (why == STOP_NONE &&
			(pg_atomic_read_u64(&copy.stop_at) == SHARED_STOP_CLAIMED ||
			 now >= redsem_valid_until(copy.refreshed_at, shared_hold_kept_ms(&copy))))
			why = STOP_UNCONFIRMED;
		if (why == STOP_NONE)
			continue;
		if (found)
		{
			(*others)++;
			continue;
		}
		found = true;
		out->name = hold->name;
		out->reason = why;
		out->policy = SLOT_LOST_TERMINATE;
		out->in_xact = (hold->scope != HOLD_SESSION);
		out->statement = (hold->scope == HOLD_STATEMENT);
		out->kept_ms = shared_hold_kept_ms(&copy);
		out->window = copy.confirm_ms > 0;
		out->unconfirmed_ms = TimestampDifferenceMilliseconds(copy.refreshed_at,
															  why == STOP_GONE ? copy.stopped_at : now);
		strlcpy(out->trouble, copy.failures > 0 ? copy.trouble : "", sizeof(out->trouble));
	}
	return found;
}

/*
 * A stopped hold is told once; one of the session's own scope is then given
 * up (the keeper releases it, if Redis still has it), so the session goes
 * on without it; a transaction's or statement's goes with the abort, and
 * its transaction cannot commit (hold_check_stopped at COMMIT).  With
 * policy warn it stays, as it was (an unconfirmed lease may yet be
 * confirmed: only a lost slot is told, once).  The keeper is told that the
 * session told it (it then watches whether code caught the error and runs
 * on, src/escalate.c, instead of signalling); told->cancel_coming is set
 * if its cancel was sent before (it is this stop's: hold_check_stopped
 * drops it).
 */
static void
hold_stop_told(Hold *hold, StoppedHold *told)
{
	TimestampTz sent;

	if (told->policy == SLOT_LOST_WARN && told->reason == STOP_UNCONFIRMED)
		return;
	hold->stop_reported = true;
	if (told->policy == SLOT_LOST_WARN)
		return;
	/* (the keeper signals it no more; a signal sent before is on its way) */
	/* (not asked for a watch: the keeper's cancel and its watch, as before) */
	if (hold->shared_slot >= 0 &&
		(told->policy == SLOT_LOST_TERMINATE ||
		 escalate_note_told(hold->name,
							MyBEEntry ? MyBEEntry->st_activity_start_timestamp : 0)))
	{
		sent = shared_hold_told(hold->shared_slot, hold->id);
		/* (woken once told: its next pass arms the watch, signals nothing) */
		shared_keeper_wake();
		/* (a SIGTERM of policy terminate is not dropped: the session ends) */
		if (sent != 0 && told->policy == SLOT_LOST_CANCEL)
		{
			told->cancel_coming = true;
			told->keeper_sent_at = sent;
		}
	}
	if (hold->scope != HOLD_SESSION)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		Doom	   *d = palloc(sizeof(Doom));

		d->subxid = hold->subxid;
		d->told = *told;
		d->told.name = pstrdup(told->name);
		dooms = lappend(dooms, d);
		MemoryContextSwitchTo(old);
		return;
	}
	mark_ending(hold);
	shared_hold_abandon(hold->shared_slot, hold->id);
}

/*
 * True if a look at this session's holds is due: a holder was stopped on
 * this server since the last look, or one of ours may have run past its
 * valid_until (always, at COMMIT)
 */
bool
hold_stop_look_due(bool at_commit)
{
	return holds != NIL &&
		(at_commit || shared_stops_made() != stops_seen ||
		 watchdog_fires() != fires_seen || redsem_now() >= next_look);
}

/*
 * Tell this session of the slots it lost (stop.c: an ERROR, FATAL or
 * WARNING, as redsem.on_slot_lost said when each was taken), once each.
 * Called when a statement starts, when one was cancelled (to say why), and
 * before a commit (at_commit: only the transaction's and statements' own
 * slots, whose loss is told again, so that work done under a lost slot
 * never commits; a session's slot lost while the session was idle is told
 * at its next statement: the work before was done under it).
 */
void
hold_check_stopped(bool at_commit)
{
	TimestampTz now;
	StoppedHold *stopped;
	Hold	  **which;
	ListCell   *lc;
	int			n = 0;
	bool		cancel_coming = false;
	TimestampTz keeper_sent_at = 0;

	/* (an ERROR at the top level disabled the watchdog's timeout) */
	watchdog_arm();
	if (at_commit)
		dooms_refuse();
	if (!hold_stop_look_due(at_commit))
		return;
	now = redsem_now();
	if (!at_commit)
	{
		/* (a look at commit skips the session's slots: it moves neither) */
		stops_seen = shared_stops_made();
		fires_seen = watchdog_fires();
		next_look = DT_NOEND;
	}
	stopped = palloc(sizeof(StoppedHold) * list_length(holds));
	which = palloc(sizeof(Hold *) * list_length(holds));
	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (hold->state != HOLD_HELD || hold->stop_reported ||
			(at_commit && hold->scope == HOLD_SESSION))
			continue;
		if (hold_stopped(hold, now, &stopped[n]))
			which[n++] = hold;
	}
	/* told (and given up) before the report raises */
	for (int i = 0; i < n; i++)
	{
		hold_stop_told(which[i], &stopped[i]);
		cancel_coming = cancel_coming || stopped[i].cancel_coming;
		keeper_sent_at = Max(keeper_sent_at, stopped[i].keeper_sent_at);
	}
	/* (once for all: one cancel is pending, however many signals came) */
	if (cancel_coming)
		stop_absorb_cancel(keeper_sent_at);
	stop_report(stopped, n);
	pfree(stopped);
	pfree(which);
}

/* Drop an entry that Redis no longer knows about */
void
hold_forget(Hold *hold)
{
	hold_drop(hold);
}

/* This session's entry for (name, id), or NULL */
static Hold *
find_hold(const char *name, const char *id)
{
	ListCell   *lc;

	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (strcmp(hold->id, id) == 0 && strcmp(hold->name, name) == 0)
			return hold;
	}
	return NULL;
}

/* True if id is one of this session's holds (of any semaphore) */
bool
hold_is_own(const char *id)
{
	ListCell   *lc;

	foreach(lc, holds)
	{
		if (strcmp(((Hold *) lfirst(lc))->id, id) == 0)
			return true;
	}
	return false;
}

/*
 * Keep a statement's slot across the transactions of its procedure (on),
 * or let it end with the transaction again (off).
 */
void
hold_span_xacts(const char *name, const char *id, bool on)
{
	Hold	   *hold = find_hold(name, id);

	if (hold != NULL)
		hold->spans_xacts = on;
}

/*
 * Release one of this session's holds at the end of a statement (a
 * statement queue's slot at ExecutorEnd), sent without waiting for the
 * reply unless redsem.await_release.  Cancel and timeouts are served
 * (an ERROR then, the release handed to the keeper); a Redis failure is
 * not raised: the keeper and the session's next call retry.  While the
 * transaction aborts, the abort releases it instead.
 */
void
hold_release_quietly(const char *name, const char *id)
{
	Hold	   *hold = find_hold(name, id);

	if (hold == NULL)
		return;
	hold->spans_xacts = false;
	if (!IsTransactionState())
		return;
	mark_ending(hold);
	release_ending_interruptible(TimestampTzPlusMilliseconds(redsem_now(),
															 redsem_command_timeout_ms),
								 !redsem_await_release);
}

/* Error context of a release the session asked for */
static void
release_error_context(void *arg)
{
	const Hold *hold = (const Hold *) arg;

	errcontext("giving back slot %s of redsem semaphore \"%s\": no longer this session's; %s",
			   hold->id, hold->name,
			   shared_keeper_is_active() ? "the keeper gives it back once Redis answers" :
			   "the session's next call tries again, and its lease is not kept alive");
}

/*
 * Give back the ENDING hold, raising if Redis cannot be asked.  Then the
 * release is not undone: every ENDING hold is handed to the keeper (and to
 * the session's next call), so a caller that catches the error and goes on
 * does not keep the slot.  *held says whether it was live.
 */
static void
release_or_hand_over(Hold *hold, bool *held)
{
	RedisCall	call = REDIS_SQL_CALL;
	ErrorContextCallback context;

	context.callback = release_error_context;
	context.arg = hold;
	context.previous = error_context_stack;
	error_context_stack = &context;
	PG_TRY();
	{
		(void) sem_release(&call, hold->prefix, hold->name, hold->id, held);
	}
	PG_CATCH();
	{
		abandon_ending();
		PG_RE_THROW();
	}
	PG_END_TRY();
	error_context_stack = context.previous;
	count_end(hold, *held);
	hold_drop(hold);
}

/*
 * Refuse to release or refresh a hold on another Redis than the settings
 * name now: asking the current one would say "not held" and the session
 * would forget a slot that still counts where it was taken.
 */
static void
refuse_other_target(const Hold *hold, const char *what)
{
	if (on_current_target(hold))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cannot %s a slot of redsem semaphore \"%s\" taken on another Redis", what, hold->name),
			 errdetail("The slot was taken under other Redis connection settings (host, port, socket, database, user, Sentinel, Cluster or TLS) than the current ones."),
			 errhint("Set the connection settings back to %s it. Otherwise it ends with its lease, or when this session ends if the keeper reaches that Redis.", what)));
}

/*
 * Raise 42501 if (name, id) is the slot a statement queue took for the
 * session's running statement: given back from SQL (redsem_release), the
 * statement would run on outside its queue, beside the next one let in.
 * It is given back when the statement ends; administrators can force it.
 */
void
hold_refuse_statement_slot(const char *name, const char *id, bool release)
{
	Hold	   *hold = find_hold(name, id);

	/* (one whose release failed is the statement's no longer: tried again) */
	if (hold == NULL || hold->scope != HOLD_STATEMENT || hold->state == HOLD_ENDING)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 release ?
			 errmsg("permission denied to release the slot of statement queue semaphore \"%s\" held by a running statement", name) :
			 errmsg("permission denied to refresh the slot of statement queue semaphore \"%s\" held by a running statement", name),
			 errdetail("A statement queue's slot belongs to the statement that took it and is given back when that statement ends."),
			 errhint("Administrators can use redsem_force_release.")));
}

/*
 * redsem_release: release one of this session's slots.  Returns false if
 * (name, id) is not this session's; else *held says whether it was live.
 * A release that failed before (ENDING) is tried again.  A slot on another
 * Redis than the settings name now is refused (an ERROR, the slot kept).
 */
bool
hold_release_id(const char *name, const char *id, bool *held)
{
	Hold	   *hold = find_hold(name, id);

	if (hold == NULL || hold->state == HOLD_PENDING)
		return false;
	/* (given back by the keeper: nothing left, as a retry finds, false) */
	if (hold->state == HOLD_ENDING && (keeper_took_it(hold) || never_sent(hold)))
	{
		*held = false;
		hold_drop(hold);
		return true;
	}
	refuse_other_target(hold, "release");
	mark_ending(hold);
	release_or_hand_over(hold, held);
	return true;
}

/*
 * redsem_refresh: extend one of this session's leases.  Returns false if
 * (name, id) is not this session's live hold; else *new_lease_ms is the
 * new lease, or 0 if the slot was lost.
 */
bool
hold_refresh_id(const char *name, const char *id, int64 lease_ms,
				int64 *new_lease_ms)
{
	Hold	   *hold = find_hold(name, id);
	RedisCall	call = REDIS_SQL_CALL;
	TimestampTz sent;

	if (hold == NULL || hold->state != HOLD_HELD)
		return false;
	refuse_other_target(hold, "refresh");
	sent = redsem_now();
	(void) sem_refresh(&call, hold->prefix, name, id, lease_ms, new_lease_ms);
	if (*new_lease_ms < 0)
		ereport(NOTICE,
				(errmsg("slot %s of redsem semaphore \"%s\" was force-released by an administrator",
						id, text_for_message(name))));
	if (*new_lease_ms > 0)
	{
		hold->refreshed_at = sent;
		hold->lease_ms = *new_lease_ms;
		shared_hold_refreshed(hold->shared_slot, hold->id, *new_lease_ms, sent);
	}
	else if (*new_lease_ms < 0 && hold->shared_slot >= 0)
	{
		/*
		 * Force-released, it still counts until given back: stopped and
		 * ended as when the keeper finds it so (src/redsem.lua: I17)
		 */
		(void) shared_hold_note_refresh(hold->shared_slot, hold->id, -1, sent);
		shared_keeper_wake();
	}
	else
	{
		stats_count(hold->prefix, name, STAT_LOST, 1);
		hold_drop(hold);
	}
	return true;
}

/* Forget this session's entry for (name, id), if any (force-released) */
void
hold_forget_id(const char *name, const char *id)
{
	Hold	   *hold = find_hold(name, id);

	if (hold != NULL)
		hold_drop(hold);
}

/* Why the keeper does not keep a hold alive, or NULL if it does */
static char *
keeper_error(const SharedHold *tracked, bool tracked_ok)
{
	char		trouble[KEEPER_TROUBLE_LEN];
	TimestampTz since;

	if (!tracked_ok || !shared_keeper_is_active())
		return pstrdup("the keeper is not running");
	if (tracked->unkept && tracked->failures > 0)
		return psprintf("taken under other Redis connection settings than the keeper's, whose look for it failed: %s",
						tracked->trouble);
	if (tracked->unkept)
		return pstrdup("taken under other Redis connection settings than the keeper's");
	if (tracked->lost && tracked->forced)
		return pstrdup("the slot was lost: an administrator force-released it (redsem_force_release)");
	if (tracked->lost)
		return pstrdup("the slot was lost: Redis no longer had it when the keeper refreshed it (its lease had run out, or Redis lost its data)");
	if (tracked->failures > 0)
		return pstrdup(tracked->trouble);
	since = shared_keeper_trouble_copy(trouble, sizeof(trouble));
	if (since != 0 && since >= tracked->refreshed_at)
		return pstrdup(trouble);
	return NULL;
}

/* The session's confirmed holds, for redsem_held(); returns the count */
int
hold_snapshot(HeldInfo **out)
{
	ListCell   *lc;
	int			n = 0;

	*out = palloc0(sizeof(HeldInfo) * Max(list_length(holds), 1));
	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);
		HeldInfo   *info = &(*out)[n];
		SharedHold	tracked;
		bool		tracked_ok;
		TimestampTz refreshed = hold->refreshed_at;

		if (hold->state != HOLD_HELD)
			continue;
		tracked_ok = shared_hold_read(hold->shared_slot, hold->id, &tracked);
		info->name = pstrdup(hold->name);
		info->id = pstrdup(hold->id);
		info->scope = hold->scope == HOLD_XACT ? "transaction" :
			hold->scope == HOLD_STATEMENT ? "statement" : "session";
		info->acquired_at = redsem_wall_time(hold->acquired_at);
		info->lease_ms = hold->lease_ms;
		info->ticket = hold->ticket;
		info->permits = hold->permits;
		if (tracked_ok)
			refreshed = Max(refreshed, tracked.refreshed_at);
		info->keeper_error = keeper_error(&tracked, tracked_ok);
		info->kept_alive = (info->keeper_error == NULL);
		/* a promotion the keeper has not confirmed yet lives its window */
		info->expires_at = redsem_wall_time(TimestampTzPlusMilliseconds(refreshed,
																		tracked_ok ? shared_hold_kept_ms(&tracked) :
																		hold->lease_ms));
		n++;
	}
	return n;
}

/*
 * Release every confirmed session-scoped hold; returns how many were live.
 * Those on another Redis than the settings name now are kept, with a
 * WARNING.
 */
int
hold_release_session(void)
{
	List	   *victims = NIL;
	ListCell   *lc;
	int			released = 0;
	int			elsewhere = 0;

	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (hold->scope != HOLD_SESSION || hold->state != HOLD_HELD)
			continue;
		if (!on_current_target(hold))
		{
			elsewhere++;
			continue;
		}
		mark_ending(hold);
		victims = lappend(victims, hold);
	}
	if (elsewhere > 0)
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg_plural("%d redsem slot was taken on another Redis and is kept",
							   "%d redsem slots were taken on another Redis and are kept",
							   elsewhere, elsewhere),
				 errdetail("They were taken under other Redis connection settings than the current ones."),
				 errhint("Set the connection settings back and call redsem_release_all() again. Otherwise they end with their lease, or when this session ends if the keeper reaches that Redis.")));
	/* a failure raises, and hands every one not yet released to the keeper */
	foreach(lc, victims)
	{
		bool		live;

		release_or_hand_over((Hold *) lfirst(lc), &live);
		released += live;
	}
	list_free(victims);
	return released;
}

/*
 * At the start of an SQL call: take in the replies to releases sent
 * without waiting that have come, and retry releases that a callback could
 * not complete (Redis failures are left to the keeper and the next call,
 * but cancel and timeouts are served: an ERROR then, the releases still
 * pending).
 */
void
hold_flush_deferred(void)
{
	if (sent != NIL)
		redis_poll_deferred();
	settle_sent();
	if (count_ending() > 0)
		release_ending_interruptible(TimestampTzPlusMilliseconds(redsem_now(),
																 redsem_command_timeout_ms),
									 false);
}

/* Define the per-session bound on holds */
void
hold_define_gucs(void)
{
	DefineCustomIntVariable("redsem.max_holds_per_session",
							"Maximum number of slots (and places in line) one session may hold at once.",
							"Statement queues' slots do not count.  Set per role or database with ALTER ROLE/DATABASE ... SET.",
							&redsem_max_holds_per_session, 1000, 1, 1000000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("redsem.await_release",
							 "Wait for Redis to confirm the releases at the end of a statement or transaction.",
							 "Off: they are sent without waiting, and the reply is read on the session's next call.",
							 &redsem_await_release, false,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
}
