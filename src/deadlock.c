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
 * Each look takes one snapshot of the lock table (GetLockStatusData: every
 * lock-manager partition lock once), not one pg_blocking_pids per process
 * of each chain; pg_blocking_pids is asked only about a process that may
 * be queued behind another waiter (a soft block, whose queue order the
 * snapshot lacks).  A look allocates in a context emptied after it.
 *
 * If, with those holders' permits held for good, the waiter's permits can
 * never fit, the wait is a deadlock and ends with 40P01, as a lock
 * deadlock does; the abort then frees the waiter's locks.  "Fit" follows
 * I11 of src/redsem.lua: a waiter below a reserve's class never gets the
 * reserved permits, and the stuck permits count against what the reserve
 * leaves it except those the class may hold inside the reserve.  Before
 * that, Redis is asked (reserve, then list and limit) whether those
 * holders really hold (the hold table may remember a slot a failover
 * lost) and what the reserve is; any doubt is no deadlock.  A waiter kept
 * out only by a waiter ahead that can never fit is not told: that one may
 * give up (its wait limit is its own), and whether it will is not known
 * here; such a wait ends at its own limit.
 *
 * Holders on other servers cannot wait for this server's locks (a replica
 * takes no row locks), so the server's own holders are all that matter.
 * Needs the hold table (shared_preload_libraries); without it nothing is
 * checked.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/array.h"
#include "utils/fmgrprotos.h"
#include "utils/memutils.h"

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

/* True if the two lock instances are of the same locked object */
static bool
same_object(const LockInstanceData *a, const LockInstanceData *b)
{
	return memcmp(&a->locktag, &b->locktag, sizeof(LOCKTAG)) == 0;
}

/* Add pid to the list of count pids in out (max entries), unless there */
static void
add_pid(int *out, int *count, int max, int pid)
{
	for (int i = 0; i < *count; i++)
		if (out[i] == pid)
			return;
	if (*count < max)
		out[(*count)++] = pid;
}

/*
 * The processes that block pid's lock wait, as pg_blocking_pids has them,
 * into out (at most max); how many.  The hard blockers (holders of a
 * conflicting mode) come from the look's one snapshot of the lock table;
 * only when another waiter for the same object wants a conflicting mode
 * (it may be ahead in the queue: a soft block, whose order the snapshot
 * does not tell) is pg_blocking_pids asked, which sweeps the lock table
 * again.  Fast-path entries never conflict with a lock waited for (the
 * waiter moved them into the table first), as pg_blocking_pids assumes.
 */
static int
blockers_of(const LockData *locks, int pid, int *out, int max)
{
	int			count = 0;
	bool		soft = false;

	for (int i = 0; i < locks->nelements; i++)
	{
		const LockInstanceData *w = &locks->locks[i];
		LOCKMASK	conflicts;

		if (w->waitLockMode == NoLock || (w->pid != pid && w->leaderPid != pid))
			continue;
		conflicts = GetLockTagsMethodTable(&w->locktag)->conflictTab[w->waitLockMode];
		for (int j = 0; j < locks->nelements; j++)
		{
			const LockInstanceData *o = &locks->locks[j];

			if (o->fastpath || o->leaderPid == w->leaderPid || !same_object(w, o))
				continue;
			if (conflicts & o->holdMask)
				add_pid(out, &count, max, o->pid);
			else if (o->waitLockMode != NoLock &&
					 (conflicts & LOCKBIT_ON(o->waitLockMode)))
				soft = true;
		}
	}
	if (soft)
	{
		ArrayType  *arr = DatumGetArrayTypeP(DirectFunctionCall1(pg_blocking_pids,
																 Int32GetDatum(pid)));
		Datum	   *elems;
		bool	   *nulls;
		int			n;

		deconstruct_array(arr, INT4OID, sizeof(int32), true, TYPALIGN_INT,
						  &elems, &nulls, &n);
		for (int i = 0; i < n; i++)
			add_pid(out, &count, max, DatumGetInt32(elems[i]));
	}
	return count;
}

/*
 * True if process pid waits, directly or along a chain of lock waits, for
 * a lock this backend holds, as the snapshot locks (and pg_blocking_pids,
 * for soft blocks) tell.
 */
static bool
blocked_by_me(const LockData *locks, int pid)
{
	int			chain[DEADLOCK_MAX_CHAIN];
	int			n = 0;

	if (!waits_for_lock(pid))
		return false;
	chain[n++] = pid;
	for (int k = 0; k < n; k++)
	{
		int			blockers[DEADLOCK_MAX_CHAIN];
		int			count = blockers_of(locks, chain[k], blockers,
										DEADLOCK_MAX_CHAIN);

		for (int i = 0; i < count; i++)
		{
			if (blockers[i] == MyProcPid)
				return true;
			if (waits_for_lock(blockers[i]))
				add_pid(chain, &n, DEADLOCK_MAX_CHAIN, blockers[i]);
		}
	}
	return false;
}

/* The holders of semaphore name on this server: how many, into h */
static int
local_holders(const char *name, LocalHolder *h)
{
	const char *prefix = redsem_prefix_or_setting(NULL);

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
 * The holders in h (n of them) that wait, directly or not, for this
 * backend's locks: blocked[i] set for each, from one snapshot of the lock
 * table.  Their permits.
 */
static int64
mark_blocked(const LocalHolder *h, int n, bool *blocked)
{
	LockData   *locks = NULL;
	int64		stuck = 0;

	for (int i = 0; i < n; i++)
	{
		blocked[i] = false;
		if (h[i].pid == MyProcPid || !waits_for_lock(h[i].pid))
			continue;
		if (locks == NULL)
			locks = GetLockStatusData();
		blocked[i] = blocked_by_me(locks, h[i].pid);
		stuck += blocked[i] ? h[i].permits : 0;
	}
	return stuck;
}

/*
 * The permits that a member of priority prio can ever be granted while the
 * stuck permits stay held (I11 of src/redsem.lua): all but them for the
 * reserve's class (or without a reserve); for a caller below it, what the
 * reserve leaves (limit - k), less the stuck permits that count against
 * that: the class's count only beyond the reserve, and since the class of a
 * holder is not known here, as many of the stuck permits as the class
 * holds (up to k) are taken to be the class's, which errs towards room.
 */
static int64
room_for(const SemReserve *res, int64 limit, int64 stuck, int prio)
{
	int64		k;

	if (res->permits <= 0 || prio >= res->min_priority)
		return limit - stuck;
	k = Min(res->permits, Max(limit - 1, 0));
	return (limit - k) - (stuck - Min(Min(stuck, res->held), k));
}

/* What a look found: why the wait cannot end */
typedef struct DeadlockFound
{
	int			pid;			/* a stuck holder */
	int64		stuck;			/* the permits held that way */
	int64		limit;			/* the limit in effect */
	int64		reserve_for;	/* the reserve left the waiter too little: its
								 * priority; or -1 */
} DeadlockFound;

/*
 * The permits of the holders in h (n) marked in blocked that Redis lists
 * among the members m (nm) as holders: only a real slot can block us.  *pid:
 * one of them.
 */
static int64
confirmed_stuck(const LocalHolder *h, const bool *blocked, int n,
				const SemMember *m, int nm, int *pid)
{
	int64		stuck = 0;

	for (int i = 0; i < n; i++)
		for (int j = 0; blocked[i] && j < nm; j++)
			if (!m[j].waiting && strcmp(m[j].id, h[i].id) == 0)
			{
				stuck += m[j].permits;
				*pid = h[i].pid;
				break;
			}
	return stuck;
}

/*
 * True if waiter w's wait cannot end (*found says why): the holders that
 * wait for our locks leave too little room for its permits, a reserve
 * counted.  Any doubt is a no: Redis failing, the waiter no longer in
 * line, a stuck holder no longer stuck on a second look at the lock table.
 * A waiter ahead that can never fit beside the stuck holders is no proof:
 * it may give up (its wait limit is its own), and then this one fits; nor
 * is one on this server whose own look will end its wait.  Redis is asked
 * the reserve first (one cheap call), and the members and limit only when
 * the room it leaves, by the limit last seen, is too small.  Allocates in
 * the current context.
 */
static bool
find_deadlock(const DeadlockWait *w, DeadlockFound *found)
{
	LocalHolder *h = palloc(sizeof(LocalHolder) * DEADLOCK_MAX_HOLDERS);
	bool	   *blocked = palloc(sizeof(bool) * DEADLOCK_MAX_HOLDERS);
	int			n = local_holders(w->name, h);
	RedisCall	call = REDIS_SQL_CALL;
	SemMember  *m;
	int			nm;
	SemReserve	res;
	SemLimit	lim;
	int64		local_stuck;
	int64		room;
	bool		in_line = false;

	memset(found, 0, sizeof(*found));
	found->reserve_for = -1;
	if ((local_stuck = mark_blocked(h, n, blocked)) == 0)
		return false;
	call.elevel = LOG;
	if (!sem_reserve(&call, w->name, &res))
		return false;
	/* room left however many of them Redis confirms: nothing to ask more */
	if (w->limit > 0 && w->permits <= room_for(&res, w->limit, local_stuck, w->priority))
		return false;
	if (!sem_list(&call, w->name, &m, &nm) ||
		!sem_limit(&call, w->name, &lim) || lim.in_effect <= 0)
		return false;
	found->limit = lim.in_effect;
	found->stuck = confirmed_stuck(h, blocked, n, m, nm, &found->pid);
	for (int j = 0; j < nm && !in_line; j++)
		in_line = m[j].waiting && strcmp(m[j].id, w->id) == 0;
	if (found->stuck == 0 || !in_line)
		return false;
	room = room_for(&res, found->limit, found->stuck, w->priority);
	if (w->permits <= room)
		return false;
	found->reserve_for = room < found->limit - found->stuck ? res.min_priority : -1;
	/* a second look at the lock table: still stuck, all of them? */
	(void) mark_blocked(h, n, blocked);
	return confirmed_stuck(h, blocked, n, m, nm, &found->pid) == found->stuck;
}

/* How every DETAIL of a deadlock begins: pid, stuck permits, limit */
#define STUCK_HOLDER	"Process %d holds a slot of it and waits for a lock held by this transaction; " \
	INT64_FORMAT " of its " INT64_FORMAT

/* The DETAIL of a deadlock found: who is stuck, and what keeps us out */
static char *
deadlock_detail(const DeadlockFound *f)
{
	if (f->reserve_for >= 0)
		return psprintf(STUCK_HOLDER " permits are held that way, and a reserve (redsem_set_reserve) keeps others for priority " INT64_FORMAT " and up.",
						f->pid, f->stuck, f->limit, f->reserve_for);
	if (f->limit == 1)
		return psprintf(STUCK_HOLDER " permit is held that way.", f->pid, f->stuck, f->limit);
	return psprintf(STUCK_HOLDER " permits are held that way.", f->pid, f->stuck, f->limit);
}

/*
 * Raise 40P01 if waiter w's wait cannot end: the permits that this
 * server's holders hold while waiting, directly or not, for this backend's
 * locks (and that Redis confirms) leave too few for its permits, a reserve
 * counted.  Each look allocates in a context of
 * its own, emptied after it (and before the next, after an error).  Any
 * wait that it cannot tell ends as a deadlock goes on.
 */
void
deadlock_check(const DeadlockWait *w)
{
	static MemoryContext look_context = NULL;
	MemoryContext old;
	DeadlockFound f;
	volatile bool deadlock = false;

	if (w->limit <= 0)
		return;
	if (look_context == NULL)
		look_context = AllocSetContextCreate(TopMemoryContext,
											 "redsem deadlock look",
											 ALLOCSET_DEFAULT_SIZES);
	MemoryContextReset(look_context);
	old = MemoryContextSwitchTo(look_context);
	PG_TRY();
	{
		deadlock = find_deadlock(w, &f);
	}
	PG_FINALLY();
	{
		/* (a caller that catches an error must not go on in this context) */
		MemoryContextSwitchTo(old);
	}
	PG_END_TRY();
	MemoryContextReset(look_context);
	if (!deadlock)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected while waiting for a slot of redsem semaphore \"%s\"", w->name),
			 errdetail_internal("%s", deadlock_detail(&f)),
			 errhint("Take redsem slots before the locks their holders need, or give the wait a limit.")));
}
