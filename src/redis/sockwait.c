/*
 * sockwait.c
 *		The bottom layer of the Redis client: every wait on a Redis socket
 *		(or on the eventfd of a host-name lookup) is on the socket and the
 *		process latch together, so query cancel, statement_timeout and
 *		pg_terminate_backend are served while Redis is slow or stalled.  One
 *		wait set is kept for the socket waited on last.  Nothing here knows
 *		what a Redis command is.
 */
#include "postgres.h"

#include "libpq/libpq-be.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "clock.h"
#include "compat.h"
#include "guc.h"
#include "sockwait.h"

/*
 * The wait set (latch, postmaster death, socket) of the socket we last
 * waited on, kept so that each wait is one epoll_wait rather than a new
 * epoll set.  It must be dropped before its socket is closed: a new socket
 * may get the same number.
 */
static WaitEventSet *wait_set = NULL;
static int	wait_set_fd = -1;
static int	wait_set_socket_pos = -1;
static int	wait_set_client_pos = -1;

/*
 * Set once this session's client was seen gone (its connection closed)
 * during a wait that could not end for it: its socket is not watched again.
 */
static bool client_gone = false;

/* True while the session waits in line (redis_watch_client) */
static bool client_watched = false;

/*
 * Watch the client's connection (on) or not: only a wait in line ends the
 * session when the client is gone.  Any other call goes on as PostgreSQL
 * goes on with a statement whose client left (a transaction sent whole,
 * with its COMMIT, still commits).
 */
void
redis_watch_client(bool on)
{
	client_watched = on;
}

/* The wait event shown while waiting on Redis, if not the default */
static uint32 wait_event_shown = 0;

/* Show event (0: the default) in pg_stat_activity while waiting on Redis */
void
redis_set_wait_event(uint32 event)
{
	wait_event_shown = event;
}

/* Milliseconds from now until deadline, never negative */
long
redis_ms_until(TimestampTz deadline)
{
	return TimestampDifferenceMilliseconds(redsem_now(), deadline);
}

/* Drop the cached wait set; call before closing its socket */
static void
forget_wait_set(void)
{
	if (wait_set == NULL)
		return;
	FreeWaitEventSet(wait_set);
	wait_set = NULL;
	wait_set_fd = -1;
}

/*
 * In a process just forked (the broker's opener): drop the wait set cached
 * by the parent, whose socket the child does not own
 */
void
redis_wait_forget_inherited(void)
{
	forget_wait_set();
}

/*
 * Forget the cached wait set if it waits on fd (a descriptor that is about
 * to be closed, so that its number may come back for another file)
 */
void
redis_forget_wait_fd(int fd)
{
	if (wait_set_fd == fd)
		forget_wait_set();
}

static bool watch_client(void);

/*
 * The wait set for fd, made on first use (may raise: out of memory, epoll);
 * it watches the session's client connection too (client_closed)
 */
static WaitEventSet *
wait_set_for(int fd)
{
	if (wait_set != NULL && wait_set_fd == fd)
		return wait_set;
	forget_wait_set();
	redsem_fault("wait_set");
	wait_set = redsem_create_wait_set(TopMemoryContext, 4);
	wait_set_fd = fd;
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_POSTMASTER_DEATH, PGINVALID_SOCKET, NULL, NULL);
	wait_set_socket_pos = AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, fd,
											NULL, NULL);
	wait_set_client_pos = -1;
	if (watch_client() && WaitEventSetCanReportClosed())
		wait_set_client_pos = AddWaitEventToSet(wait_set, WL_SOCKET_CLOSED,
												MyProcPort->sock, NULL, NULL);
	return wait_set;
}

/*
 * True if waits watch this session's client connection: a client backend
 * whose client has not been seen gone (not the keeper, the broker or a
 * parallel worker, which have none)
 */
static bool
watch_client(void)
{
	return MyBackendType == B_BACKEND && MyProcPort != NULL &&
		MyProcPort->sock != PGINVALID_SOCKET && !client_gone;
}

/*
 * The client closed its connection during a wait (killed, or gave up).  A
 * waiter in line (end) must not keep its place, and take its turn, for a
 * session nobody will read: end the session as PostgreSQL does when
 * client_connection_check_interval finds the client gone (FATAL "connection
 * to client lost"; the exit callback gives the place back).  Either way the
 * client is not watched again, so that no wait wakes on it again and again
 * (a later wait in line ends at once: redis_wait_socket).
 */
static void
client_closed(bool end)
{
	client_gone = true;
	forget_wait_set();
	if (!end)
		return;
	ClientConnectionLost = true;
	InterruptPending = true;
	CHECK_FOR_INTERRUPTS();
}

/* Set once a wait that cannot be cancelled saw the postmaster die */
static bool postmaster_gone = false;

/*
 * The postmaster died during a wait: exit now if the wait may be cancelled,
 * else remember it, so that every wait and retry from now on ends as if its
 * deadline had passed (the commit, abort or exit callback then gives up).
 */
static void
postmaster_died(bool interruptible)
{
	if (interruptible)
		proc_exit(1);
	postmaster_gone = true;
}

/*
 * Wait until the socket is ready for io_events, the latch is set or the
 * deadline passes.  Returns the WL_* events that fired.  When interruptible,
 * CHECK_FOR_INTERRUPTS may throw; otherwise postmaster death ends the wait
 * as a timeout, and so every later wait (see redis_past).
 */
int
redis_wait_socket(int fd, int io_events, TimestampTz deadline, bool interruptible)
{
	WaitEventSet *set;
	WaitEvent	event;
	int			rc;

	if (client_gone && client_watched && interruptible)
		client_closed(true);
	set = wait_set_for(fd);
	ModifyWaitEvent(set, wait_set_socket_pos, io_events, NULL);
	/*
	 * (once the deadline has passed, a last look for no time: a process
	 * stopped past it during the wait, SIGSTOP or a starved CPU, comes back
	 * with none of what came meanwhile, as epoll_wait ends with EINTR and
	 * the wait then finds its time over)
	 */
	if (WaitEventSetWait(set, redis_ms_until(deadline), &event, 1,
						 wait_event_shown ? wait_event_shown : redsem_wait_event()) == 0 &&
		(!redis_past(deadline) ||
		 WaitEventSetWait(set, 0, &event, 1,
						  wait_event_shown ? wait_event_shown : redsem_wait_event()) == 0))
		return WL_TIMEOUT;
	if (event.pos == wait_set_client_pos)
	{
		client_closed(interruptible && client_watched);
		return 0;				/* (the caller waits again) */
	}
	rc = event.events;
	if (rc & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		if (interruptible)
			CHECK_FOR_INTERRUPTS();
	}
	if (rc & WL_POSTMASTER_DEATH)
		postmaster_died(interruptible);
	if (postmaster_gone)
		rc |= WL_TIMEOUT;
	return rc;
}

/*
 * True once the deadline has passed, or once a wait that cannot be
 * cancelled saw the postmaster die: the death event fires at once on every
 * wait after that, so each wait would return straight away and the caller
 * would spin on the CPU until its deadline.
 */
bool
redis_past(TimestampTz deadline)
{
	return postmaster_gone || redsem_now() >= deadline;
}

/*
 * Pause ms before trying again, and return true; or return false at once if
 * the next try could not begin before deadline (a pause to the deadline
 * would only spend what is left of it: a commit, abort or exit callback's
 * 50 ms, which a cancel waits for)
 */
bool
redis_pause_to_retry(int ms, TimestampTz deadline, bool interruptible)
{
	if (redis_ms_until(deadline) <= ms)
		return false;
	redis_pause(ms, deadline, interruptible);
	return !redis_past(deadline);
}

/*
 * Wait ms (or until deadline) on the latch alone: between attempts while a
 * failover runs.  Cancel is served if the call is interruptible.
 */
void
redis_pause(int ms, TimestampTz deadline, bool interruptible)
{
	long		left = Min(ms, redis_ms_until(deadline));

	if (left <= 0)
		return;
	if (WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_POSTMASTER_DEATH,
				  left, wait_event_shown ? wait_event_shown : redsem_wait_event())
		& WL_POSTMASTER_DEATH)
		postmaster_died(interruptible);
	ResetLatch(MyLatch);
	if (interruptible)
		CHECK_FOR_INTERRUPTS();
}
