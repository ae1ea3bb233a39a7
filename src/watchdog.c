/*
 * watchdog.c
 *		A holder stops itself when its slot is no longer surely its own and
 *		the keeper has not stopped it: the keeper may be stalled (stopped,
 *		starved of CPU, swapped out), alive, so never restarted, while the
 *		holder's lease runs out and Redis gives its slot to another.
 *
 * While a backend holds slots a policy stops (redsem.on_slot_lost cancel
 * or terminate), a timeout fires every REDSEM_WATCHDOG_MS (src/timing.h).
 * Its handler reads, without a lock, the stop_at of each of the backend's
 * entries in the hold table (their valid_until, kept up to date by every
 * change under the table's lock, src/shmem.c); for one past it, it takes
 * the stop on with a compare-and-swap, which the keeper's own stop sees
 * (so only one of them signals), and interrupts the backend as the
 * keeper would: a cancel, or for terminate a FATAL.  The session is then
 * told why as after the keeper's cancel (src/guard.c, src/hold.c), and the
 * keeper, when it runs, watches a holder that caught the cancel
 * (src/escalate.c), as after its own.  An ERROR at the top level
 * disables every timeout (PostgresMain) before the transaction's abort,
 * which arms it again (as does each statement's look at its holds).
 * Where 64-bit atomics are emulated with a spinlock (not in a signal
 * handler) there is no watchdog, and a stalled keeper's holders are
 * stopped at their next statement, as before.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "clock.h"
#include "shmem.h"
#include "timing.h"
#include "watchdog.h"

/* This backend's entries of the hold table to watch, by slot */
static volatile bool *mine = NULL;
static int	n_slots = 0;
static int	n_mine = 0;
static TimeoutId watchdog_timeout;
static bool registered = false;
/* How many times the handler took a stop on (only it writes it) */
static volatile sig_atomic_t fires = 0;

/*
 * The timeout's handler (a signal handler: atomics, flags and SetLatch
 * only; unused where there is no watchdog)
 */
pg_attribute_unused()
static void
watchdog_handler(void)
{
	int			policy;

	if (mine == NULL || n_mine == 0)
		return;
	policy = shared_hold_watchdog(mine, n_slots, redsem_now());
	if (policy < 0)
		return;
	fires = fires + 1;
	if (policy == SLOT_LOST_TERMINATE)
		ProcDiePending = true;
	else
		QueryCancelPending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}

/* Arm the timeout if entries are watched and it is not running */
void
watchdog_arm(void)
{
#ifndef PG_HAVE_ATOMIC_U64_SIMULATION
	if (n_mine == 0)
		return;
	if (!registered)
	{
		watchdog_timeout = RegisterTimeout(USER_TIMEOUT, watchdog_handler);
		registered = true;
	}
	if (!get_timeout_active(watchdog_timeout))
		enable_timeout_every(watchdog_timeout,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 REDSEM_WATCHDOG_MS),
							 REDSEM_WATCHDOG_MS);
#endif
}

/* Watch the entry in slot (a slot this backend's holder was just granted) */
void
watchdog_watch(int slot)
{
	if (slot < 0)
		return;
	if (mine == NULL)
	{
		n_slots = shared_hold_capacity();
		mine = MemoryContextAllocZero(TopMemoryContext, sizeof(bool) * Max(n_slots, 1));
	}
	if (slot >= n_slots || mine[slot])
		return;
	mine[slot] = true;
	n_mine++;
	watchdog_arm();
}

/*
 * Watch slot no more (its hold ends, before the entry may be freed and
 * taken by another backend)
 */
void
watchdog_unwatch(int slot)
{
	if (mine == NULL || slot < 0 || slot >= n_slots || !mine[slot])
		return;
	mine[slot] = false;
	if (--n_mine == 0 && registered)
		disable_timeout(watchdog_timeout, false);
}

/* How many times the handler took a stop on: a session's cue to look */
int
watchdog_fires(void)
{
	return (int) fires;
}
