/*
 * hold.c
 *		This session's holds, their scopes, and releasing them on time.
 *
 * Every acquire registers its holder id here *before* asking Redis, so a
 * reply lost to an interrupt can never leak a slot: the entry is pending
 * until Redis answers, and an abort releases whatever is still pending.
 *
 * Transaction-scoped holds end at commit or rollback of the top-level
 * transaction (or of the subtransaction they were taken in, if that rolls
 * back).  Session-scoped holds end with redsem_release, redsem_release_all
 * or the session.  Callbacks never raise: they give Redis a short budget
 * and, if it does not answer, keep the release for later (next call,
 * session exit), with the lease as the final backstop.
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redsem.h"

typedef enum HoldState
{
	HOLD_PENDING,				/* asked Redis, no answer yet, or in line */
	HOLD_HELD					/* Redis confirmed the slot */
} HoldState;

typedef struct Hold
{
	char	   *prefix;			/* redsem.key_prefix when it was taken */
	char	   *name;
	char	   *id;
	HoldScope	scope;
	HoldState	state;
	SubTransactionId subxid;	/* subtransaction that took it */
	int64		lease_ms;
	int64		ticket;
	TimestampTz acquired_at;
	TimestampTz refreshed_at;	/* last lease confirmation we know of */
	int			shared_slot;	/* entry in the keeper's table, or -1 */
} Hold;

static List *holds = NIL;		/* Hold *, in TopMemoryContext */
static List *deferred = NIL;	/* Hold * whose release Redis did not take */
static bool callbacks_registered = false;

/* Free one entry, and stop the keeper tracking it */
static void
hold_free(Hold *hold)
{
	shared_hold_remove(hold->shared_slot, hold->id);
	pfree(hold->prefix);
	pfree(hold->name);
	pfree(hold->id);
	pfree(hold);
}

/*
 * Release holds quietly until deadline; those Redis did not take move to
 * the deferred list.
 */
static void
release_quietly(List *victims, TimestampTz deadline)
{
	ListCell   *lc;
	bool		reachable = true;

	foreach(lc, victims)
	{
		Hold	   *hold = (Hold *) lfirst(lc);
		bool		was_held;
		MemoryContext old;

		if (reachable &&
			sem_release_quiet(hold->prefix, hold->name, hold->id, deadline,
							  &was_held))
		{
			if (hold->state == HOLD_HELD)
				stats_count(hold->name, was_held ? STAT_RELEASED : STAT_EXPIRED, 1);
			hold_free(hold);
			continue;
		}
		/* once Redis failed us, don't spend the budget again */
		reachable = false;
		if (hold->state == HOLD_HELD)	/* a pending one's error was counted */
			stats_count(hold->name, STAT_REDIS_ERRORS, 1);
		shared_hold_abandon(hold->shared_slot, hold->id);
		old = MemoryContextSwitchTo(TopMemoryContext);
		deferred = lappend(deferred, hold);
		MemoryContextSwitchTo(old);
	}
}

/* Remove from holds every entry matching the filter, returning them */
static List *
take_holds(bool (*match) (Hold *, SubTransactionId), SubTransactionId subxid)
{
	List	   *taken = NIL;
	List	   *kept = NIL;
	ListCell   *lc;
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (match(hold, subxid))
			taken = lappend(taken, hold);
		else
			kept = lappend(kept, hold);
	}
	list_free(holds);
	holds = kept;
	MemoryContextSwitchTo(old);
	return taken;
}

/* Holds that end with the top-level transaction, however it ends */
static bool
ends_with_xact(Hold *hold, SubTransactionId subxid)
{
	return hold->scope == HOLD_XACT || hold->state == HOLD_PENDING;
}

/* Holds that end when subtransaction subxid rolls back */
static bool
ends_with_subxact(Hold *hold, SubTransactionId subxid)
{
	return hold->subxid == subxid &&
		(hold->scope == HOLD_XACT || hold->state == HOLD_PENDING);
}

/* Every hold */
static bool
any_hold(Hold *hold, SubTransactionId subxid)
{
	return true;
}

/* Session holds that are confirmed */
static bool
session_held(Hold *hold, SubTransactionId subxid)
{
	return hold->scope == HOLD_SESSION && hold->state == HOLD_HELD;
}

/* Release, within the transaction-end budget, the holds matching the filter */
static void
end_holds(bool (*match) (Hold *, SubTransactionId), SubTransactionId subxid)
{
	List	   *victims = take_holds(match, subxid);

	if (victims != NIL)
		release_quietly(victims,
						TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													REDSEM_XACT_CLEANUP_MS));
	list_free(victims);
}

/* End transaction-scoped holds with the transaction; refuse PREPARE */
static void
xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			foreach(lc, holds)
			{
				Hold	   *hold = (Hold *) lfirst(lc);

				if (hold->scope == HOLD_XACT)
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that holds a transaction-scoped redsem slot"),
							 errdetail("The transaction holds a slot of semaphore \"%s\".", hold->name),
							 errhint("Release it with redsem_release before PREPARE TRANSACTION, or use redsem_acquire.")));
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (holds == NIL)
				break;
			end_holds(ends_with_xact, InvalidSubTransactionId);
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
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB && holds != NIL)
	{
		end_holds(ends_with_subxact, mySubid);
	}
}

/* Release everything the session still has, within a bounded time */
static void
session_exit_callback(int code, Datum arg)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   REDSEM_EXIT_CLEANUP_MS);
	List	   *victims = take_holds(any_hold, InvalidSubTransactionId);
	List	   *retry = deferred;

	deferred = NIL;
	victims = list_concat(victims, retry);
	if (victims != NIL)
		release_quietly(victims, deadline);
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

/* Record an acquire about to be sent to Redis; returns its entry */
void *
hold_begin(const char *name, const char *id, HoldScope scope, int64 lease_ms)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	Hold	   *hold = palloc0(sizeof(Hold));

	hold->prefix = pstrdup(redsem_key_prefix ? redsem_key_prefix : "");
	hold->name = pstrdup(name);
	hold->id = pstrdup(id);
	hold->scope = scope;
	hold->state = HOLD_PENDING;
	hold->subxid = GetCurrentSubTransactionId();
	hold->lease_ms = lease_ms;
	hold->shared_slot = -1;
	holds = lappend(holds, hold);
	MemoryContextSwitchTo(old);
	return hold;
}

/* Redis confirmed the slot */
void
hold_mark_held(void *entry, int64 ticket)
{
	Hold	   *hold = (Hold *) entry;

	hold->state = HOLD_HELD;
	hold->ticket = ticket;
	hold->acquired_at = hold->refreshed_at = GetCurrentTimestamp();
	if (hold->shared_slot >= 0)
		shared_hold_now_held(hold->shared_slot, hold->id, ticket);
	else
		hold->shared_slot = shared_hold_add(hold->prefix, hold->name, hold->id,
											hold->scope == HOLD_XACT, false,
											hold->lease_ms, ticket);
}

/*
 * The acquire joined the line: let the keeper know, so that if this
 * backend dies while waiting, its place is released rather than turning
 * into a slot nobody uses.
 */
void
hold_mark_waiting(void *entry)
{
	Hold	   *hold = (Hold *) entry;

	hold->shared_slot = shared_hold_add(hold->prefix, hold->name, hold->id,
										hold->scope == HOLD_XACT, true,
										hold->lease_ms, 0);
}

/* Drop an entry that Redis no longer knows about */
void
hold_forget(void *entry)
{
	holds = list_delete_ptr(holds, entry);
	hold_free((Hold *) entry);
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

/* redsem_release: release a slot by id, keeping the registry and stats */
bool
hold_release_id(const char *name, const char *id)
{
	Hold	   *hold = find_hold(name, id);
	bool		held = sem_release(hold ? hold->prefix : NULL, name, id);

	if (hold != NULL)
	{
		stats_count(name, held ? STAT_RELEASED : STAT_EXPIRED, 1);
		hold_forget(hold);
	}
	return held;
}

/* redsem_refresh: extend a lease by id; the new lease in ms, or 0 if lost */
int64
hold_refresh_id(const char *name, const char *id, int64 lease_ms)
{
	Hold	   *hold = find_hold(name, id);

	lease_ms = sem_refresh(hold ? hold->prefix : NULL, name, id, lease_ms);
	if (hold == NULL)
		return lease_ms;
	if (lease_ms > 0)
	{
		hold->refreshed_at = GetCurrentTimestamp();
		hold->lease_ms = lease_ms;
		shared_hold_refreshed(hold->shared_slot, hold->id, lease_ms);
	}
	else
	{
		stats_count(name, STAT_LOST, 1);
		hold_forget(hold);
	}
	return lease_ms;
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
		TimestampTz refreshed = hold->refreshed_at;

		if (hold->state != HOLD_HELD)
			continue;
		info->name = pstrdup(hold->name);
		info->id = pstrdup(hold->id);
		info->xact = (hold->scope == HOLD_XACT);
		info->acquired_at = hold->acquired_at;
		info->lease_ms = hold->lease_ms;
		info->ticket = hold->ticket;
		info->kept_alive = shared_hold_read(hold->shared_slot, hold->id, &tracked) &&
			keeper_is_active();
		if (info->kept_alive)
		{
			info->kept_alive = !tracked.unkept;
			refreshed = Max(refreshed, tracked.refreshed_at);
			info->lost = tracked.lost;
		}
		info->expires_at = TimestampTzPlusMilliseconds(refreshed, hold->lease_ms);
		n++;
	}
	return n;
}

/* Release every confirmed session-scoped hold; returns how many were live */
int
hold_release_session(void)
{
	List	   *victims = NIL;
	ListCell   *lc;
	int			released = 0;

	foreach(lc, holds)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (session_held(hold, InvalidSubTransactionId))
			victims = lappend(victims, hold);
	}
	/* each entry stays registered until Redis confirms its release */
	foreach(lc, victims)
	{
		Hold	   *hold = (Hold *) lfirst(lc);

		if (sem_release(hold->prefix, hold->name, hold->id))
		{
			released++;
			stats_count(hold->name, STAT_RELEASED, 1);
		}
		else
			stats_count(hold->name, STAT_EXPIRED, 1);
		hold_forget(hold);
	}
	list_free(victims);
	return released;
}

/* Retry releases that an earlier callback could not complete */
void
hold_flush_deferred(void)
{
	while (deferred != NIL)
	{
		Hold	   *hold = (Hold *) linitial(deferred);

		(void) sem_release(hold->prefix, hold->name, hold->id);
		deferred = list_delete_first(deferred);
		hold_free(hold);
	}
}
