/*
 * sqlfuncs.c
 *		SQL-callable functions that take and give back slots: argument
 *		checks, scopes, waiting in line, ownership.
 */
#include "postgres.h"

#include "access/parallel.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "acquire.h"
#include "bounds.h"
#include "compat.h"
#include "guc.h"
#include "hold.h"
#include "script.h"
#include "shmem.h"
#include "sqlargs.h"
#include "timing.h"

PG_FUNCTION_INFO_V1(redsem_acquire);
PG_FUNCTION_INFO_V1(redsem_acquire_xact);
PG_FUNCTION_INFO_V1(redsem_guard);
PG_FUNCTION_INFO_V1(redsem_release);
PG_FUNCTION_INFO_V1(redsem_refresh);
PG_FUNCTION_INFO_V1(redsem_release_all);
PG_FUNCTION_INFO_V1(redsem_force_release);

/*
 * Slots live as long as the process that took them: a parallel worker's
 * would end with the worker, before the query that asked for it.
 */
static void
refuse_in_parallel_worker(void)
{
	if (IsParallelWorker())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("cannot take or give back redsem slots in a parallel worker"),
				 errdetail("A slot taken by a parallel worker would end when the worker exits, before the query that asked for it."),
				 errhint("Declare the function that calls redsem PARALLEL RESTRICTED or PARALLEL UNSAFE.")));
}

/* An interval in microseconds (a month counts as 30 days) */
static int64
interval_us(Interval *iv, bool *overflow)
{
	int64		days = (int64) iv->month * DAYS_PER_MONTH + iv->day;

	*overflow = (days > 100000 || days < -100000);
	if (*overflow)
		return 0;
	return days * USECS_PER_DAY + iv->time;
}

/*
 * A duration argument in whole milliseconds; the interval itself must lie
 * between min_ms and max_ms (checked to the microsecond).
 */
static int64
duration_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
			 int64 min_ms, int64 max_ms)
{
	bool		overflow;
	int64		us;

	us = interval_us(PG_GETARG_INTERVAL_P(argno), &overflow);
	if (overflow || us < min_ms * 1000 || us > max_ms * 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" is out of range", argname),
				 errdetail("\"%s\" must be between %s and 24 hours.", argname,
						   min_ms == 0 ? "0" : "1 second")));
	return us / 1000;
}

/*
 * The lease argument: from REDSEM_MIN_LEASE_MS, the shortest the keeper
 * keeps, to redsem.max_lease (which bounds the grace after Redis forgets)
 */
static int64
lease_arg(FunctionCallInfo fcinfo, int argno)
{
	int64		ms;

	StaticAssertStmt(REDSEM_MIN_LEASE_MS == 1000, "the error detail says 1 second");
	ms = duration_arg(fcinfo, argno, "lease", REDSEM_MIN_LEASE_MS,
					  REDSEM_MAX_LEASE_MS);
	if (ms > redsem_max_lease_ms)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"lease\" is longer than redsem.max_lease"),
				 errdetail("The lease is " INT64_FORMAT " ms; redsem.max_lease is %d ms.",
						   ms, redsem_max_lease_ms),
				 errhint("After Redis forgets, everybody waits as long as the longest lease asked for. A superuser can raise redsem.max_lease, for a role or database too.")));
	return ms;
}

/* The priority argument: NULL is 0; -100 to 100 */
static int
priority_arg(FunctionCallInfo fcinfo, int argno)
{
	int			priority = PG_ARGISNULL(argno) ? 0 : PG_GETARG_INT32(argno);

	if (priority < -REDSEM_MAX_PRIORITY || priority > REDSEM_MAX_PRIORITY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"priority\" is out of range"),
				 errdetail("\"priority\" must be between %d and %d; it is %d.",
						   -REDSEM_MAX_PRIORITY, REDSEM_MAX_PRIORITY, priority)));
	if (priority > redsem_max_priority)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("priority %d is above this session's redsem.max_priority of %d",
						priority, redsem_max_priority),
				 errhint("Ask for %d or less, or ask an administrator to raise redsem.max_priority for your role.",
						 redsem_max_priority)));
	return priority;
}

/*
 * Read and check the arguments shared by the acquire functions.  0.1.0's
 * SQL definitions have no permits argument: one permit.
 */
static void
acquire_args(FunctionCallInfo fcinfo, AcquireArgs *args)
{
	memset(args, 0, sizeof(*args));
	args->elevel = ERROR;
	args->wait_event = redsem_slot_wait_event();
	args->name = name_arg(fcinfo, 0);
	refuse_queue_semaphore(args->name);
	args->max_holders = PG_ARGISNULL(1) ? 0 : count_arg(fcinfo, 1, "max_holders");
	args->permits = PG_NARGS() > 4 ? count_arg(fcinfo, 4, "permits") : 1;
	if (args->max_holders > 0 && args->permits > args->max_holders)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot take %d permits of a semaphore with a limit of %d",
						args->permits, args->max_holders),
				 errdetail("\"permits\" must not exceed \"max_holders\".")));
	if (PG_ARGISNULL(2))
		reject_null("lease");
	args->lease_ms = lease_arg(fcinfo, 2);
	if (PG_ARGISNULL(3))
		args->wait_ms = -1;
	else
		args->wait_ms = duration_arg(fcinfo, 3, "wait", 0, REDSEM_MAX_WAIT_MS);
	args->priority = PG_NARGS() > 5 ? priority_arg(fcinfo, 5) : 0;
	args->tenant = PG_NARGS() > 6 ? tenant_arg(fcinfo, 6) : NULL;
}

/*
 * The acquire functions' common body.  Returns the holder id, or NULL if
 * no slot came within the wait.
 */
static char *
acquire_common(FunctionCallInfo fcinfo, HoldScope scope, AcquireArgs *args)
{
	char	   *id = NULL;
	Hold	   *hold;

	acquire_args(fcinfo, args);
	refuse_in_parallel_worker();
	if (acquire_slot(args, scope, &id, &hold) != ACQUIRE_GRANTED)
		return NULL;
	return id;
}

/* Return a cstring as text, or SQL NULL */
static Datum
text_or_null(FunctionCallInfo fcinfo, char *s)
{
	if (s == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(s));
}

/* redsem_acquire(name, max_holders, lease, wait): session-scoped slot */
Datum
redsem_acquire(PG_FUNCTION_ARGS)
{
	AcquireArgs args;

	return text_or_null(fcinfo, acquire_common(fcinfo, HOLD_SESSION, &args));
}

/* redsem_acquire_xact(name, max_holders, lease, wait): until transaction end */
Datum
redsem_acquire_xact(PG_FUNCTION_ARGS)
{
	AcquireArgs args;

	return text_or_null(fcinfo, acquire_common(fcinfo, HOLD_XACT, &args));
}

/* Describe a wait in milliseconds for a message */
static char *
describe_wait(int64 ms)
{
	if (ms % 1000 == 0)
		return psprintf(INT64_FORMAT " s", ms / 1000);
	return psprintf(INT64_FORMAT " ms", ms);
}

/*
 * redsem_guard(name, max_holders, lease, wait): a transaction-scoped slot,
 * or ERROR 55P03, so a function can start with a single PERFORM.
 */
Datum
redsem_guard(PG_FUNCTION_ARGS)
{
	AcquireArgs args;
	char	   *id = acquire_common(fcinfo, HOLD_XACT, &args);

	if (id == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not obtain a slot of semaphore \"%s\" (limit " INT64_FORMAT ") after waiting %s",
						args.name, args.limit_seen, describe_wait(args.wait_ms)),
				 args.grace_seen ?
				 errdetail("%s", ACQUIRE_GRACE_DETAIL) :
				 args.rate_ms >= 0 && args.wait_ms == 0 ?
				 errdetail("A slot was free, but the semaphore's rate (redsem_set_rate) lets the next caller in only " INT64_FORMAT " ms from now.",
						   args.rate_ms) :
				 args.rate_seen ?
				 errdetail("No slot came free within the wait that the semaphore's rate (redsem_set_rate) would let this caller take.") :
				 args.share_seen >= 0 ?
				 errdetail("The semaphore keeps a reserve (redsem_set_reserve) for higher priorities: callers of priority %d share " INT64_FORMAT " of its permits, and not enough of those came free within the wait.",
						   args.priority, args.share_seen) :
				 args.permits == 1 ?
				 errdetail("All " INT64_FORMAT " slots stayed taken for the whole wait.", args.limit_seen) :
				 errdetail("%d of the " INT64_FORMAT " permits never came free together within the wait.",
						   args.permits, args.limit_seen),
				 errhint("Retry later, or pass a longer \"wait\".")));
	PG_RETURN_TEXT_P(cstring_to_text(id));
}

/* The WARNING for a release or refresh of a slot this session does not hold */
static void
warn_not_own(const char *name, const char *id, const char *what)
{
	ereport(WARNING,
			(errmsg("this session holds no such slot of semaphore \"%s\"", name),
			 errdetail("Holder id \"%s\" is not a slot of this session; nothing was %s.", id, what),
			 errhint("Only the session that took a slot can release or refresh it; administrators can use redsem_force_release.")));
}

/* redsem_release(name, id): true if this session's slot was live */
Datum
redsem_release(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	char	   *id = id_arg(fcinfo, 1);
	bool		held = false;

	refuse_in_parallel_worker();
	hold_init();
	hold_flush_deferred();
	hold_refuse_statement_slot(name, id, true);
	/* (one it lost, or whose failed release the keeper finished: false) */
	if (!hold_release_id(name, id, &held) && !hold_take_ended(name, id))
		warn_not_own(name, id, "released");
	PG_RETURN_BOOL(held);
}

/* redsem_refresh(name, id, lease): extend a lease; false if already lost */
Datum
redsem_refresh(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	char	   *id = id_arg(fcinfo, 1);
	int64		lease_ms = 0;
	int64		new_lease_ms = 0;

	if (!PG_ARGISNULL(2))
		lease_ms = lease_arg(fcinfo, 2);
	refuse_in_parallel_worker();
	hold_init();
	hold_flush_deferred();
	hold_refuse_statement_slot(name, id, false);
	if (!hold_refresh_id(name, id, lease_ms, &new_lease_ms))
		warn_not_own(name, id, "refreshed");
	PG_RETURN_BOOL(new_lease_ms > 0);
}

/* redsem_release_all(): release the session's session-scoped slots */
Datum
redsem_release_all(PG_FUNCTION_ARGS)
{
	refuse_in_parallel_worker();
	hold_init();
	hold_flush_deferred();
	PG_RETURN_INT32(hold_release_session());
}

/*
 * holder_gone of a slot whose holder runs on this server is refused: it is
 * not gone, and freeing its slot at once would let the next one run beside it
 */
static void
refuse_holder_here(const char *name, const char *id)
{
	int			pid = shared_hold_holder_pid(name, id);

	if (pid != 0 && pid != MyProcPid && BackendPidGetProc(pid) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("the holder of slot \"%s\" of semaphore \"%s\" runs on this server", id, name),
				 errdetail("It is process %d; holder_gone => true frees a slot at once only for a holder that no longer runs.", pid),
				 errhint("Leave holder_gone out to have it stopped first, or end it with pg_terminate_backend(%d).", pid)));
}

/*
 * redsem_force_release(name, id, holder_gone): release anybody's slot or
 * place in line (superusers and members of redsem_admin: require_admin);
 * the slot still counts until its holder is stopped, unless holder_gone
 * (I17).  Logged.
 */
Datum
redsem_force_release(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *id;
	bool		holder_gone;
	RedisCall	call = REDIS_SQL_CALL;
	bool		held = false;
	bool		waiting = false;

	require_admin_for("force-release a slot of a redsem semaphore", fcinfo);
	name = name_arg(fcinfo, 0);
	id = id_arg(fcinfo, 1);
	holder_gone = PG_NARGS() > 2 && !PG_ARGISNULL(2) && PG_GETARG_BOOL(2);
	refuse_in_parallel_worker();
	hold_init();
	if (!hold_release_id(name, id, &held))
	{
		if (holder_gone)
			refuse_holder_here(name, id);
		(void) sem_force_release(&call, name, id, holder_gone, &held, &waiting);
		hold_forget_id(name, id);
		/* (a holder on this server is stopped now; elsewhere, at its refresh) */
		if (held && !holder_gone)
			(void) shared_hold_refresh_now(name, id);
	}
	if (held)
		ereport(LOG,
				(errmsg("redsem: slot \"%s\" of semaphore \"%s\" force-released by role \"%s\"%s",
						id, name, GetUserNameFromId(GetUserId(), false),
						holder_gone ? ", its holder said to be gone: freed at once" : "")));
	if (waiting)
		ereport(LOG,
				(errmsg("redsem: place in line \"%s\" of semaphore \"%s\" given up by role \"%s\": its waiter is told",
						id, name, GetUserNameFromId(GetUserId(), false))));
	PG_RETURN_BOOL(held);
}
