/*
 * deadlock.c
 *		A waiter in line whose own locks keep the slot's holders from
 *		finishing.
 *
 * PostgreSQL's deadlock detector sees only its own locks.  A session that
 * holds a row lock and then waits for a redsem slot, while the slot's
 * holder waits for that row, waits forever: the holder never releases, and
 * the waiter never gives up its lock.  Statement queues make this easy to
 * meet (the second statement of a transaction queues again while holding
 * the locks of the first).
 *
 * So a waiter whose semaphore has a holder on this server that waits for a
 * lock looks at those holders every deadlock_timeout (at least a second).
 * A holder that waits for a lock this backend holds (directly or through a
 * chain of lock waits, as pg_blocking_pids reports them) will not release.
 * If the permits left to everybody else cannot fit the waiter's, the wait
 * is a deadlock and ends with 40P01, as a lock deadlock does; the abort
 * then frees the waiter's locks.  Before that, Redis is asked whether those
 * holders really hold (the hold table may remember a slot a failover lost).
 *
 * Holders on other servers cannot wait for this server's locks (a replica
 * takes no row locks), so the server's own holders are all that matter.
 * Needs the hold table (shared_preload_libraries); without it nothing is
 * checked.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/array.h"
#include "utils/fmgrprotos.h"

#include "deadlock.h"
#include "guc.h"
#include "script.h"
#include "shmem.h"

/* Holders looked at, and processes followed along a chain of lock waits */
#define DEADLOCK_MAX_HOLDERS	256
#define DEADLOCK_MAX_CHAIN		64

/* How often a waiter looks: deadlock_timeout, at least a second */
int64
deadlock_check_interval_ms(void)
{
	return Max(DeadlockTimeout, 1000);
}

/* True if process pid waits for a heavyweight lock right now (a hint) */
static bool
waits_for_lock(int pid)
{
	PGPROC	   *proc = BackendPidGetProc(pid);

	return proc != NULL && proc->waitLock != NULL;
}

/* The processes that block pid's lock wait, as pg_blocking_pids has them */
static ArrayType *
blockers_of(int pid)
{
	return DatumGetArrayTypeP(DirectFunctionCall1(pg_blocking_pids,
												  Int32GetDatum(pid)));
}

/*
 * True if process pid waits, directly or along a chain of lock waits, for
 * a lock this backend holds.
 */
static bool
blocked_by_me(int pid)
{
	int			chain[DEADLOCK_MAX_CHAIN];
	int			n = 0;

	if (!waits_for_lock(pid))
		return false;
	chain[n++] = pid;
	for (int k = 0; k < n; k++)
	{
		ArrayType  *arr = blockers_of(chain[k]);
		Datum	   *elems;
		bool	   *nulls;
		int			count;

		deconstruct_array(arr, INT4OID, sizeof(int32), true, TYPALIGN_INT,
						  &elems, &nulls, &count);
		for (int i = 0; i < count; i++)
		{
			int			blocker = DatumGetInt32(elems[i]);
			bool		seen = false;

			if (blocker == MyProcPid)
				return true;
			for (int j = 0; j < n && !seen; j++)
				seen = (chain[j] == blocker);
			if (!seen && n < DEADLOCK_MAX_CHAIN && waits_for_lock(blocker))
				chain[n++] = blocker;
		}
	}
	return false;
}

/* The holders of semaphore name on this server: how many, into h */
static int
local_holders(const char *name, LocalHolder *h)
{
	const char *prefix = redsem_key_prefix ? redsem_key_prefix : "";

	return shared_hold_holders(prefix, name, h, DEADLOCK_MAX_HOLDERS);
}

/*
 * True if a wait for semaphore name may be a deadlock: another holder of
 * it on this server waits for a lock.  Only such a wait is looked at every
 * deadlock_timeout; others sleep as long as usual, and are looked at once
 * a holder starts waiting for a lock.
 */
bool
deadlock_possible(const char *name)
{
	LocalHolder h[DEADLOCK_MAX_HOLDERS];
	int			n = local_holders(name, h);

	for (int i = 0; i < n; i++)
		if (h[i].pid != MyProcPid && waits_for_lock(h[i].pid))
			return true;
	return false;
}

/*
 * True if Redis confirms that id holds a slot of name: the hold table may
 * remember a slot that Redis lost (a failover, a restart), and only a real
 * one can block us.  Any doubt (Redis failing) is a no.
 */
static bool
really_holds(const char *name, const char *id)
{
	RedisCall	call = REDIS_SQL_CALL;
	int64		token = 0;

	call.elevel = LOG;
	return sem_token(&call, name, id, &token) && token > 0;
}

/*
 * Raise 40P01 if waiting for permits of semaphore name (limit in effect:
 * limit) cannot end: the permits that this server's holders hold while
 * waiting, directly or not, for this backend's locks (and that Redis
 * confirms) leave too few for ours.
 */
void
deadlock_check(const char *name, int permits, int64 limit)
{
	LocalHolder h[DEADLOCK_MAX_HOLDERS];
	int			n = local_holders(name, h);
	bool		blocked[DEADLOCK_MAX_HOLDERS];
	int64		stuck = 0;
	int			example = 0;

	for (int i = 0; i < n; i++)
	{
		blocked[i] = h[i].pid != MyProcPid && blocked_by_me(h[i].pid);
		stuck += blocked[i] ? h[i].permits : 0;
	}
	if (stuck == 0 || limit <= 0 || limit - stuck >= permits)
		return;
	/* the few that matter, confirmed one by one */
	stuck = 0;
	for (int i = 0; i < n; i++)
	{
		if (!blocked[i] || !really_holds(name, h[i].id))
			continue;
		stuck += h[i].permits;
		example = h[i].pid;
	}
	if (stuck == 0 || limit - stuck >= permits)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected while waiting for a slot of redsem semaphore \"%s\"", name),
			 errdetail_plural("Process %d holds a slot of it and waits for a lock held by this transaction; " INT64_FORMAT " of its " INT64_FORMAT " permit is held that way.",
							  "Process %d holds a slot of it and waits for a lock held by this transaction; " INT64_FORMAT " of its " INT64_FORMAT " permits are held that way.",
							  (unsigned long) limit, example, stuck, limit),
			 errhint("Take redsem slots before the locks their holders need, or give the wait a limit.")));
}
