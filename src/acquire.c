/*
 * acquire.c
 *		Taking a slot: ask once, wait in line if asked to, drop a grant that
 *		came too late, raise the limit errors, count the outcome.
 *
 * The SQL functions (sqlfuncs.c) raise on any Redis failure; the statement
 * queues (queue.c) may ask for failures to be returned instead (elevel
 * below ERROR), to run a statement without a slot.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "acquire.h"
#include "bounds.h"
#include "clock.h"
#include "cluster.h"
#include "deadlock.h"
#include "gen.h"
#include "guc.h"
#include "sentinel.h"
#include "sockwait.h"
#include "shmem.h"
#include "timing.h"

static int64 known_gen_us(const char *name);

/*
 * A new holder id: the server incarnation, process id, a sequence number
 * and random bits drawn once per process.  The random bits tell apart two
 * processes of one incarnation that had the same process id (one may have
 * left holds to the keeper); the sequence tells apart one process's ids.
 * (A draw per id cost each acquire a system call and some 10 us of
 * OpenSSL, for nothing more: ids are not secrets, a slot is its session's.)
 */
static void
make_id(char *buf, size_t len)
{
	static uint32 seq = 0;
	static uint32 rnd = 0;
	static int	rnd_pid = 0;

	if (rnd_pid != MyProcPid)
	{
		if (!pg_strong_random(&rnd, sizeof(rnd)))
			rnd = (uint32) GetCurrentTimestamp();
		rnd_pid = MyProcPid;
	}
	snprintf(buf, len, "%016llx.%d.%u.%08x",
			 (unsigned long long) redsem_incarnation(), MyProcPid, ++seq, rnd);
}

/* Milliseconds since when */
static int64
ms_since(TimestampTz when)
{
	return TimestampDifferenceMilliseconds(when, redsem_now());
}

/* Milliseconds left until deadline (or a long nap when there is none) */
static int64
ms_left(TimestampTz deadline)
{
	if (deadline == DT_NOEND)
		return PG_INT32_MAX;
	return TimestampDifferenceMilliseconds(redsem_now(), deadline);
}

/*
 * The longest a ride's failures come apart: a try is a look (a command's
 * time), then the ask or a grant's WAIT (a command's time and the
 * replicas'), after a pause; a failure later than that begins a new ride.
 */
static int64
ride_gap_ms(void)
{
	return 2 * (int64) redsem_command_timeout_ms + ACQUIRE_RIDE_PAUSE_MS + ACQUIRE_RIDE_GAP_MS +
		(redsem_grant_replicas > 0 ? redsem_grant_replica_timeout_ms : 0);
}

/* True while this acquire rides a failover: a failure came within a ride's gap */
static bool
riding(const AcquireArgs *args)
{
	return args->rides > 0 &&
		!TimestampDifferenceExceeds(args->ride_last, redsem_now(), (int) Min(ride_gap_ms(), INT_MAX));
}

/*
 * A Redis call of this acquire: interruptible; a failure is returned, not
 * raised, so that a failover can be ridden through (ride_on), and raised
 * at args->elevel only when the acquire ends in it (acquire_slot)
 */
static void
acquire_call(const AcquireArgs *args, RedisCall *call)
{
	RedisCall	sql = REDIS_SQL_CALL;

	*call = sql;
	call->elevel = DEBUG1;
	/*
	 * a ride counts one Redis error in redsem_stats, not one per try (a
	 * later ride's first failure is counted by ride_on)
	 */
	call->uncounted = args->rides > 0;
}

/*
 * A Redis call of this acquire's asking and waiting (not of settling a
 * grant, which has its replicas' time).  Once it rides a failover, each
 * ends ACQUIRE_CALL_SLACK_MS after the wait at the latest, so that a try
 * the failover keeps unanswered (a connection to a primary that is gone, a
 * sentinel asked again and again) cannot hold the caller a command's time
 * past its wait.  Before, a call keeps a command's time, as any call (a
 * far Redis may take longer to connect to than a short wait); so does one
 * that does not wait: its wait is none.
 */
static void
wait_call(const AcquireArgs *args, RedisCall *call)
{
	acquire_call(args, call);
	if (riding(args) && args->wait_ms > 0 && args->deadline != DT_NOEND)
		call->end_by = TimestampTzPlusMilliseconds(Max(args->deadline, redsem_now()),
												   ACQUIRE_CALL_SLACK_MS);
}

/*
 * True if connect failure o is of a Redis that was there and went away: it
 * found nothing serving at the address (no_server: stopped, restarting, cut
 * off; not a refusal of our settings), and this acquire had a place in
 * line, or rides a connection that broke, one that went silent (a frozen
 * server or path) or a server not serving yet (LOADING, as a restarted one
 * is)
 */
static bool
went_away(const AcquireArgs *args, const RedisOutcome *o)
{
	return o->no_server &&
		(args->waited ||
		 (riding(args) && (args->ride_cause == RS_LOST || args->ride_cause == RS_UNAVAILABLE ||
						   args->ride_cause == RS_TIMED_OUT)));
}

/*
 * True if a failure is one a failover causes, for this acquire.  For one
 * that waits: a connection that broke or went silent (a frozen server or
 * network path comes back as a failover does: the caller keeps its wait),
 * a server that cannot serve (a replica now, loading, no primary), too few
 * replicas for a grant, where Redis can fail over (Sentinel, a Cluster),
 * no connection, and, once it had a place in line or rides, a Redis with
 * no room for another client (maxclients).  For one that does not wait: only a connection that
 * broke (a stale one, to the old primary: each call already follows the
 * sentinels for a command's time).  A new connection closed before it was
 * answered (behind a proxy whose Redis is down) is a refused connect, not a
 * stale one (no_server).  A single Redis that is down fails its
 * callers at once, as it did, unless it went away under them (restarted):
 * a caller in line, or riding a connection that broke, rides finding
 * nothing at its address too (went_away), within the wait.
 * A statement queue whose failures run the
 * statement unqueued (elevel below ERROR: on_redis_error=run) tries once
 * more after a connection that broke (once per break: not within a ride),
 * and no more: a broker restarted (its links closed, Redis untouched) or
 * a connection Redis closed is served by a new one, while a Redis that is
 * down fails that try too (a refused connect at once; one that hangs
 * within redsem.connect_timeout).
 */
static bool
failover_class(const AcquireArgs *args, const RedisOutcome *o)
{
	bool		followed = sentinel_enabled() || cluster_enabled();

	if (args->elevel < ERROR)
		return o->status == RS_LOST && !riding(args);
	/* (a new connection closed unanswered: as a refused connect) */
	if (args->wait_ms == 0)
		return o->status == RS_LOST && (!o->no_server || followed);
	if (o->status == RS_LOST && o->no_server)
		return followed || went_away(args, o);
	switch (o->status)
	{
		case RS_LOST:
		case RS_TIMED_OUT:
		case RS_UNAVAILABLE:
		case RS_NOT_REPLICATED:
			return true;
		case RS_CONNECT_FAILED:
			return followed || went_away(args, o);
		case RS_TOO_MANY_CLIENTS:
			/* (another program's storm of connections: the line survives it) */
			return args->waited || riding(args);
		default:
			return false;
	}
}

/*
 * Until when the ride that began at args->ride_from may go on: the end of
 * the wait; ACQUIRE_RIDE_MAX_MS of a wait without end (a statement
 * queue's); a command's time from the start for a caller that does not
 * wait (its ride_from stays there).
 */
static TimestampTz
ride_until(const AcquireArgs *args)
{
	if (args->wait_ms == 0)
		return TimestampTzPlusMilliseconds(args->ride_from, redsem_command_timeout_ms);
	if (args->deadline == DT_NOEND)
		return TimestampTzPlusMilliseconds(args->ride_from, ACQUIRE_RIDE_MAX_MS);
	return args->deadline;
}

/*
 * A call failed with outcome o: if a failover may be the cause and the
 * acquire has time left (ride_until), pause ACQUIRE_RIDE_PAUSE_MS and say
 * to try again (the caller then looks at its place first: the request may
 * have reached Redis); else keep the failure and say no.  A ride begins at
 * a failure that follows no other within a ride's gap (ride_gap_ms: a
 * failover an hour into a long wait rides as the first one did, is logged
 * and counted as it was).  The failure kept is the first of a ride (its
 * cause: a later try may only find the time left too short), unless a
 * later one is of another kind; so is the Redis error counted.
 */
static bool
ride_on(AcquireArgs *args, const RedisOutcome *o)
{
	static TimestampTz logged_at = 0;
	bool		new_ride = !riding(args);
	bool		rides = failover_class(args, o);
	bool		other = new_ride || (!rides && o->status != args->failure.status);
	TimestampTz now = redsem_now();

	if (other)
		args->failure = *o;
	/* (its call was not counted: the acquire had ridden before) */
	if (other && args->rides > 0)
		stats_count(NULL, args->name, STAT_REDIS_ERRORS, 1);
	if (new_ride)
		args->ride_cause = o->status;
	if (new_ride && args->wait_ms != 0)
		args->ride_from = now;
	args->ride_last = now;
	if (!rides || ms_left(ride_until(args)) <= ACQUIRE_RIDE_PAUSE_MS)
		return false;
	args->rides++;
	if (new_ride &&
		TimestampDifferenceExceeds(logged_at, redsem_now(), ACQUIRE_RIDE_LOG_EVERY_MS))
	{
		char	   *why = redis_outcome_text(o);

		logged_at = redsem_now();
		why[0] = pg_toupper((unsigned char) why[0]);
		ereport(LOG,
				(errmsg("redsem: a call for semaphore \"%s\" failed as a failover would make it fail; trying again within the wait",
						args->name),
				 errdetail_internal("%s%s", why, why[strlen(why) - 1] == '.' ? "" : ".")));
		pfree(why);
	}
	/*
	 * a primary whose grants no replica takes may have been replaced (the
	 * old one of a SENTINEL FAILOVER keeps taking writes, replica-less,
	 * until the sentinels turn it into a replica): ask them anew
	 */
	if (o->status == RS_NOT_REPLICATED && sentinel_enabled())
		redis_disconnect();
	redis_pause(ACQUIRE_RIDE_PAUSE_MS,
				TimestampTzPlusMilliseconds(redsem_now(), ACQUIRE_RIDE_PAUSE_MS), true);
	return true;
}

/*
 * False if a failure says that Redis ran nothing of the request, so that it
 * cannot be granted late: the connection was never made (refused, wrong
 * password, too many clients, no password file), or Redis refused the call
 * as a whole before running it (maxmemory under noeviction: the library's
 * function has no flags, so Redis checks this first; a replica, LOADING;
 * the ACL: NOAUTH, or NOPERM for FCALL or for the keys it names, which
 * Redis checks before the function runs).  Anything else (no answer, a
 * broken connection, an error from inside the script, which may have
 * written before it, an ACL failure in the script among them) may have
 * left a slot behind.
 */
static bool
request_may_be_pending(const RedisOutcome *o)
{
	switch (o->status)
	{
		case RS_CONNECT_FAILED:
		case RS_BAD_PASSWORD:
		case RS_PASSWORD_FILE:
		case RS_TOO_MANY_CLIENTS:
		case RS_OUT_OF_MEMORY:
		case RS_UNAVAILABLE:
			return false;
		case RS_AUTH_FAILED:
			return strstr(o->detail, "ERR The user executing the script") != NULL ||
				strstr(o->detail, "ERR ACL failure in script") != NULL;
		default:
			return true;
	}
}

/* Keep why a call failed (it was not raised); false */
static bool
call_failed(AcquireArgs *args, const RedisCall *call)
{
	args->failure = call->outcome;
	return false;
}

/*
 * Keep why the last call of a ride failed, unless the ride would have
 * ridden it: then the ride's own failure stays (its cause, as ride_on
 * keeps it); false
 */
static bool
last_call_failed(AcquireArgs *args, const RedisCall *call)
{
	if (!riding(args) || !failover_class(args, &call->outcome))
		args->failure = call->outcome;
	return false;
}

/*
 * Remember the limit in effect, the rate's verdict and a grace period (I15)
 * that a reply told
 */
static void
note_limit(AcquireArgs *args, const SemResult *r)
{
	if (r->limit > 0)
		args->limit_seen = r->limit;
	if (r->gen[0] == 'g')
		args->grace_seen = true;
	if (r->state == SEM_BUSY || r->state == SEM_WAITING)
	{
		args->rate_seen = r->has_rate;
		args->rate_ms = r->rate_ms;
		args->share_seen = r->share;
	}
}

/*
 * A wake-up (ticket) that came soon after the look that left us in line
 * (sent at looked): the promotion came after that look, so the slot is ours
 * for at least the rest of the window, and the keeper confirms it in time
 * (src/timing.h).  The hold is handed to the keeper first, then the time is
 * checked again: a pause of this backend after the hand-over costs it
 * nothing, one before it means confirming here.  False when we must
 * confirm it ourselves.
 */
static bool
promoted_in_time(const AcquireArgs *args, Hold *hold, int64 ticket,
				 TimestampTz looked, SemResult *r)
{
	int64		window = Min(args->lease_ms, PROMOTION_WINDOW_MS);
	int64		in_time = window / PROMOTION_CONFIRM_FRACTION;

	/* a grant that must reach replicas is confirmed (and settled) by us */
	if (redsem_grant_replicas > 0 || ms_since(looked) >= in_time ||
		!hold_keeper_can_confirm(hold))
		return false;
	hold_mark_promoted(hold, ticket, window, looked);
	if (ms_since(looked) >= in_time)
		return false;
	memset(r, 0, sizeof(*r));
	r->state = SEM_HELD;
	r->ticket = ticket;
	r->ms = window;
	r->confirm_ms = window;
	return true;
}

/*
 * Sleep up to nap ms on the caller's wake and nudge lists (*ticket and
 * *nudge_ms as sem_wait_for_wake).  On a semaphore with a rate, the last
 * REDIS_TICK_SLACK_MS are slept here, not in a BLPOP that Redis would end
 * late (src/timing.h).  False if Redis failed.
 */
static bool
nap_for_wake(AcquireArgs *args, RedisCall *call, const char *id, int64 nap,
			 int64 *ticket, int64 *nudge_ms)
{
	TimestampTz until = TimestampTzPlusMilliseconds(redsem_now(), nap);
	int64		on_redis = args->rate_seen ? nap - REDIS_TICK_SLACK_MS : nap;

	*ticket = 0;
	*nudge_ms = -1;
	if (on_redis > 0 &&
		!sem_wait_for_wake(call, args->name, id, on_redis, ticket, nudge_ms))
		return false;
	if (args->rate_seen && *ticket == 0 && *nudge_ms < 0)
		redis_pause((int) Min(ms_left(until), INT_MAX), until, true);
	return true;
}

/*
 * How long a waiter may go without a look: its own promotion window (src/timing.h)
 */
static int64
wait_recheck_ms(const AcquireArgs *args)
{
	return Max(Min(args->lease_ms, WAIT_RECHECK_MS), 1);
}

/*
 * Wait in line until promoted (and confirmed, or handed to the keeper to
 * confirm) or deadline.  Sleeps on the caller's wake list (a release that
 * promotes it pushes to it), waking early only to keep its place alive or
 * when a lease ahead of it is due to run out; then it looks with
 * wait_check, which also confirms a promotion.  *sent is when the request
 * that answered was sent (for a promotion the keeper confirms, the look
 * before it).  A call that fails as a failover would is tried again within
 * the wait (ride_on), looking at its place first.  False if Redis failed
 * (args->failure).
 */
static bool
wait_turns(AcquireArgs *args, Hold *hold, const char *id, SemResult *r,
		   TimestampTz *sent, TimestampTz deadline, MemoryContext turn)
{
	TimestampTz checked = *sent;
	bool		look_now = false;	/* a call failed: look before napping */
	int64		recheck = wait_recheck_ms(args);

	/*
	 * the generation its place was taken under, for forgot_since_start (read
	 * here, not by every acquire: only a waiter's line can be lost)
	 */
	if (args->gen_us == 0)
		args->gen_us = known_gen_us(args->name);
	for (;;)
	{
		RedisCall	call;
		int64		left;
		int64		nap;
		bool		look;
		int64		ticket;
		int64		nudge_ms;
		TimestampTz napped_at;

		/* what the last turn allocated (key names, replies' copies) goes */
		MemoryContextReset(turn);
		left = ms_left(deadline);
		wait_call(args, &call);
		if (left <= 0)
		{
			*sent = redsem_now();
			return sem_give_up(&call, args->name, id, r) || last_call_failed(args, &call);
		}
		if (!look_now)
		{
			nap = Min(left, recheck - ms_since(checked));
			if (r->ms >= 0)
				nap = Min(nap, r->ms + 1);
			/*
			 * look for a deadlock after the nap, if one is possible (a wait
			 * that ends by itself before the look would come needs none)
			 */
			look = left > deadlock_check_interval_ms() + DEADLOCK_CHECK_MARGIN_MS &&
				deadlock_possible(args->name);
			if (look)
				nap = Min(nap, deadlock_check_interval_ms());
			nap = Max(nap, 1);
			napped_at = redsem_now();
			if (!nap_for_wake(args, &call, id, nap, &ticket, &nudge_ms))
			{
				if (!ride_on(args, &call.outcome))
					return false;
				look_now = true;
				continue;
			}
			if (ticket == 0 && nudge_ms < 0 && look)
			{
				/* our own look for a deadlock, nothing from Redis */
				DeadlockWait dw = {args->name, id, args->permits, args->priority,
				args->tenant, args->limit_seen};

				deadlock_check(&dw);
				if (r->ms >= 0)
					r->ms = Max(r->ms - ms_since(napped_at), 0);
				if (ms_since(checked) < recheck && r->ms != 0)
					continue;
			}
			/*
			 * (a wake-up ticket not above our own place's is of a promotion
			 * before that place, since taken back: I7 makes a promotion's
			 * ticket rise above the waiter's; look again instead)
			 */
			if (ticket > 0 && r->state == SEM_WAITING && ticket <= r->ticket)
				ticket = 0;
			if (ticket > 0 && promoted_in_time(args, hold, ticket, checked, r))
			{
				*sent = checked;
				return true;
			}
			if (nudge_ms >= 0 && ms_since(checked) < recheck)
			{
				/* a promotion ahead of us: sleep until its window ends */
				r->ms = nudge_ms;
				continue;
			}
		}
		look_now = false;
		*sent = checked = redsem_now();
		if (!sem_wait_check(&call, args->name, id, r))
		{
			if (!ride_on(args, &call.outcome))
				return false;
			look_now = true;
			continue;
		}
		note_limit(args, r);
		if (r->state == SEM_HELD || r->state == SEM_REMOVED)
			return true;
		if (r->state == SEM_LOST)
		{
			/*
			 * our place expired, our promotion window passed, the limit
			 * fell below our permits, or a failover lost the line: queue
			 * again, unless the wait is over (a slow path answered late)
			 */
			if (ms_left(deadline) <= 0)
				return true;
			args->line_lost = true;
			*sent = redsem_now();
			if (!sem_acquire(&call, args->name, id, args->max_holders,
							 args->permits, args->lease_ms, true,
							 args->priority, args->tenant, r))
			{
				if (!ride_on(args, &call.outcome))
					return false;
				look_now = true;
				continue;
			}
			note_limit(args, r);
			if (r->state != SEM_WAITING)
				return true;
		}
		hold_mark_waiting(hold, *sent);
	}
}

/*
 * wait_turns in a memory context of its own, emptied at each turn: a wait
 * of hours (a turn every second while the deadlock check looks) must not
 * grow its caller's context.  Nothing a turn allocates outlives the wait
 * (the result and a failure's text are kept inline), so the context goes
 * with it; after an ERROR, with the caller's context.
 */
static bool
wait_in_line(AcquireArgs *args, Hold *hold, const char *id,
			 SemResult *r, TimestampTz *sent, TimestampTz deadline)
{
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext turn = AllocSetContextCreate(caller, "redsem wait in line",
											   ALLOCSET_SMALL_SIZES);
	volatile bool ok = false;

	MemoryContextSwitchTo(turn);
	redis_watch_client(true);	/* (a waiter whose client is gone ends) */
	PG_TRY();
	{
		ok = wait_turns(args, hold, id, r, sent, deadline, turn);
	}
	PG_FINALLY();
	{
		redis_watch_client(false);
		MemoryContextSwitchTo(caller);
	}
	PG_END_TRY();
	MemoryContextDelete(turn);
	return ok;
}

/* wait_in_line, showing args->wait_event (if any) meanwhile */
static bool
wait_in_line_shown(AcquireArgs *args, Hold *hold, const char *id,
				   SemResult *r, TimestampTz *sent, TimestampTz deadline)
{
	volatile bool ok = false;

	if (args->wait_event == 0)
		return wait_in_line(args, hold, id, r, sent, deadline);
	redis_set_wait_event(args->wait_event);
	PG_TRY();
	{
		ok = wait_in_line(args, hold, id, r, sent, deadline);
	}
	PG_FINALLY();
	{
		redis_set_wait_event(0);
	}
	PG_END_TRY();
	return ok;
}

/*
 * True if a grant is still good: its lease started no earlier than the
 * request was sent, so it has not run out unless the answer took longer
 * than the lease to reach us (the backend was paused, or starved).
 */
static bool
grant_is_live(const SemResult *r, TimestampTz sent)
{
	return r->state == SEM_HELD &&
		TimestampDifferenceMilliseconds(sent, redsem_now()) < r->ms;
}

/*
 * With redsem.grant_replicas set, a grant is used only once that many of
 * Redis's replicas have it, so that a failover right after it does not
 * forget it.  False (the failure kept, raised at ERROR) if they did not
 * acknowledge it within redsem.grant_replica_timeout: the hold stays
 * pending and is given back at the end of the transaction.
 */
static bool
grant_replicated(AcquireArgs *args)
{
	RedisCall	call;
	int			acked = 0;
	uint64		opens = redis_link_opens();

	if (redsem_grant_replicas == 0)
		return true;
	acquire_call(args, &call);
	if (!sem_wait_replicas(&call, args->name, redsem_grant_replicas,
						   redsem_grant_replica_timeout_ms, &acked))
		return call_failed(args, &call);
	/*
	 * A WAIT on a link opened since the grant (the one that carried it
	 * closed) counts the replicas of a connection that wrote nothing: it
	 * says nothing of the grant
	 */
	if (redis_link_opens() != opens)
	{
		(void) redis_note(&call.outcome, RS_NOT_REPLICATED,
						  "the connection that carried the grant closed before its replicas were asked (WAIT)");
		(void) sem_call_failed(&call, args->name);
		return call_failed(args, &call);
	}
	if (acked >= redsem_grant_replicas)
		return true;
	(void) redis_note(&call.outcome, RS_NOT_REPLICATED,
					  "%d of the %d replicas (redsem.grant_replicas) acknowledged the grant within %d ms (redsem.grant_replica_timeout)",
					  acked, redsem_grant_replicas, redsem_grant_replica_timeout_ms);
	(void) sem_call_failed(&call, args->name);
	return call_failed(args, &call);
}

/*
 * The least lease a grant that waited for replicas must have left when
 * acquire returns it: what the keeper counts on when it refreshes a hold
 * on time, with two tries left (src/timing.h)
 */
static int64
grant_lease_needed_ms(int64 lease_ms)
{
	return lease_ms - lease_ms / KEEPER_REFRESH_FRACTION;
}

/*
 * A grant back from its WAIT with less lease left than the keeper counts
 * on (grant_lease_needed_ms), or whose answer came after its valid time
 * (confirm_slow_grant): refresh it here, one round trip, so that the
 * keeper takes it over like a hold it refreshed on time.  *sent and r->ms
 * become the refresh's, *left what is left of its lease now; r->state is
 * SEM_LOST if the slot was gone by then.  False if Redis failed.
 */
static bool
refresh_late_grant(AcquireArgs *args, const char *id, SemResult *r,
				   TimestampTz *sent, int64 *left)
{
	RedisCall	call;
	int64		lease = 0;

	acquire_call(args, &call);
	*sent = redsem_now();
	if (!sem_refresh(&call, NULL, args->name, id, args->lease_ms, &lease))
		return call_failed(args, &call);
	*left = lease - ms_since(*sent);
	if (lease <= 0)
	{
		r->state = SEM_LOST;
		return true;
	}
	r->ms = lease;
	ereport(DEBUG1,
			(errmsg("redsem: a slot of semaphore \"%s\" was granted with too little lease left for the keeper; refreshed (" INT64_FORMAT " ms left)",
					args->name, *left)));
	return true;
}

/* True if a bounded wait is over (a caller that does not wait has none) */
static bool
bounded_wait_over(const AcquireArgs *args)
{
	return args->wait_ms > 0 && args->deadline != DT_NOEND &&
		ms_left(args->deadline) <= 0;
}

/*
 * True if a bounded wait has less left than the last give-back's round
 * trip took (not one that opened a connection first: its time says
 * nothing of the path's): another try as slow would be answered only
 * after the wait (a path to Redis that stays slow would otherwise overrun
 * the wait by a try's round trips).  A caller that does not wait makes its
 * one try in full.  (A late grant is still refreshed within the wait: one
 * slow reply, a stall of Redis, says little of the next.)
 */
static bool
no_time_for_another(const AcquireArgs *args)
{
	if (args->wait_ms <= 0 || args->deadline == DT_NOEND || args->try_rt_ms < 0)
		return false;
	return ms_left(args->deadline) < args->try_rt_ms;
}

/* What becomes of a grant (settle_grant) */
typedef enum GrantFate
{
	GRANT_USABLE,				/* return it */
	GRANT_FAILED,				/* Redis failed: the failure kept */
	GRANT_STALE					/* give it back, queue again */
} GrantFate;

/*
 * A grant whose answer took so long (Redis or the path to it stalled) that
 * its valid time had passed when it came (src/timing.h): returned as it
 * is, its session would be told at its next statement that the slot was
 * lost.  It is refreshed first, and used if that confirms it in time; else
 * it is given back and the acquire queues again.
 */
static GrantFate
confirm_slow_grant(AcquireArgs *args, const char *id, SemResult *r,
				   TimestampTz *sent, const char **why)
{
	int64		left;

	/* (a promotion the keeper confirms came in time: promoted_in_time) */
	if (r->confirm_ms > 0 || redsem_now() < redsem_valid_until(*sent, r->ms))
		return GRANT_USABLE;
	/* (past a bounded wait: given back, not refreshed) */
	*why = "past its valid time, and the wait was over";
	if (bounded_wait_over(args))
		return GRANT_STALE;
	if (!refresh_late_grant(args, id, r, sent, &left))
		return GRANT_FAILED;
	if (r->state == SEM_HELD && redsem_now() < redsem_valid_until(*sent, r->ms))
		return GRANT_USABLE;
	*why = r->state == SEM_HELD ?
		"past its valid time, and its refresh came too late as well" :
		"past its valid time, and its refresh found it gone";
	return GRANT_STALE;
}

/*
 * With redsem.grant_replicas, a grant goes to its WAIT (grant_replicated)
 * and is used only with enough lease left for the keeper to keep it
 * (grant_lease_needed_ms): nobody refreshes it while the WAIT runs, so one
 * back late is refreshed here first.  The time is counted from when the
 * granting request was sent (*sent), on redsem's clock.  The refresh waits for the replicas as the grant did.  Stale: it
 * ran out, or the refresh found it gone, or the refresh and its wait took
 * more than the keeper's margin.
 */
static GrantFate
settle_grant(AcquireArgs *args, const char *id, SemResult *r,
			 TimestampTz *sent, const char **why)
{
	int64		left;

	*why = "its lease had run out when the answer came";
	if (!grant_is_live(r, *sent))
		return GRANT_STALE;
	if (redsem_grant_replicas == 0)
		return confirm_slow_grant(args, id, r, sent, why);
	if (!grant_replicated(args))
		return GRANT_FAILED;
	left = r->ms - ms_since(*sent);
	if (left >= grant_lease_needed_ms(args->lease_ms))
		return GRANT_USABLE;
	/* a grant whose lease ran out during the WAIT is not refreshed */
	*why = "its lease ran out while its replicas were asked";
	if (left <= 0)
		return GRANT_STALE;
	if (!refresh_late_grant(args, id, r, sent, &left))
		return GRANT_FAILED;
	*why = "its refresh, after its replicas were asked, found it gone";
	if (r->state != SEM_HELD)
		return GRANT_STALE;
	*why = "too little of its lease was left once its replicas had it";
	/* the replicas learn the refresh too: a failover must not undo it */
	if (!grant_replicated(args))
		return GRANT_FAILED;
	if (r->ms - ms_since(*sent) >= grant_lease_needed_ms(args->lease_ms))
		return GRANT_USABLE;
	return GRANT_STALE;
}

/* Give back a grant that came too late to be used (why: its DEBUG line says) */
static bool
drop_stale_grant(AcquireArgs *args, const char *id, const char *why)
{
	RedisCall	call;
	bool		live;

	acquire_call(args, &call);
	if (!sem_release(&call, NULL, args->name, id, &live))
		return call_failed(args, &call);
	ereport(DEBUG1,
			(errmsg("redsem: a slot of semaphore \"%s\" was granted too late to be counted on (%s); it was given back",
					args->name, why)));
	return true;
}

/*
 * Say once per session that nobody keeps its leases alive: without
 * shared_preload_libraries, for any lease (a slot held past its lease is
 * taken beside it); with it, while the keeper is being restarted, only for
 * leases that would outlive a dead session by long.
 */
static void
notice_unkept_lease(int64 lease_ms)
{
	static bool warned = false;

	/* the common case first: it needs no look at the keeper (a syscall) */
	if (warned ||
		(redsem_preloaded && lease_ms <= REDSEM_UNKEPT_LEASE_NOTICE_MS) ||
		shared_keeper_is_active())
		return;
	if (!redsem_preloaded)
	{
		warned = true;
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("redsem is not in shared_preload_libraries: nothing keeps this session's leases alive"),
				 errdetail("A slot held longer than its lease (this one: " INT64_FORMAT " s) can be taken by another session beside it, and the slot of a session that dies stays taken until its lease ends.",
						   lease_ms / 1000),
				 errhint("Add redsem to shared_preload_libraries and restart the server, or refresh the lease with redsem_refresh before it ends.")));
		return;
	}
	warned = true;
	ereport(NOTICE,
			(errmsg("redsem keeper is not running: a slot with a lease of " INT64_FORMAT " s stays taken that long if its session dies",
					lease_ms / 1000),
			 errhint("The keeper is restarted by the server; check the server log for why it stopped.")));
}

/* Count the outcome of an acquire in the statistics */
static void
count_acquire(const AcquireArgs *args, AcquireResult result,
			  TimestampTz started)
{
	if (result == ACQUIRE_FAILED)
		return;					/* counted as a Redis error already */
	if (result == ACQUIRE_GRANTED)
	{
		stats_count(NULL, args->name, STAT_ACQUIRED, 1);
		stats_count(NULL, args->name, STAT_ACQUIRED_PERMITS, args->permits);
	}
	else if (args->waited)
		stats_count(NULL, args->name, STAT_WAIT_TIMEOUTS, 1);
	else
		stats_count(NULL, args->name, STAT_REFUSED, 1);
	if (args->waited)
		stats_count_wait(NULL, args->name,
						 TimestampDifferenceMilliseconds(started, redsem_now()));
}

/*
 * Ask Redis for a slot or a place in line; after a failed call (asked: the
 * request may have reached Redis), look at our place first and ask anew
 * only if Redis has none, and a bounded wait is not over (r->state stays
 * SEM_LOST: not granted).  False if the call failed (the call's outcome).
 */
static bool
ask(AcquireArgs *args, RedisCall *call, const char *id, bool asked,
	SemResult *r)
{
	if (asked)
	{
		if (!sem_wait_check(call, args->name, id, r))
			return false;
		if (r->state != SEM_LOST)
			return true;
		/* (its wait went by riding the failure: a wait that timed out) */
		if (bounded_wait_over(args))
		{
			args->waited = true;
			return true;
		}
	}
	return sem_acquire(call, args->name, id, args->max_holders,
					   args->permits, args->lease_ms, args->wait_ms != 0,
					   args->priority, args->tenant, r);
}

/*
 * Ask for a slot (or a place in line) until one is granted in time, no
 * slot comes within the wait, or the wait is over.  *sent is when the
 * granting request was sent.  A call that fails as a failover would is
 * tried again while its ride allows (ride_on).
 */
static AcquireResult
take_slot(AcquireArgs *args, Hold *hold, const char *id,
		  TimestampTz deadline, SemResult *r, TimestampTz *sent)
{
	bool		asked = false;

	for (;;)
	{
		RedisCall	call;
		TimestampTz dropping;
		uint64		opens;
		const char *why;

		wait_call(args, &call);
		*sent = redsem_now();
		if (!ask(args, &call, id, asked, r))
		{
			asked = true;
			if (ride_on(args, &call.outcome))
				continue;
			return ACQUIRE_FAILED;
		}
		asked = true;
		note_limit(args, r);
		if (r->state == SEM_HELD || r->state == SEM_WAITING)
			args->reached = true;
		if (r->state == SEM_WAITING)
		{
			args->waited = true;
			hold_mark_waiting(hold, *sent);
			if (!wait_in_line_shown(args, hold, id, r, sent, deadline))
				return ACQUIRE_FAILED;
		}
		if (r->state != SEM_HELD)
			return ACQUIRE_NOT_GRANTED;
		switch (settle_grant(args, id, r, sent, &why))
		{
			case GRANT_USABLE:
				return ACQUIRE_GRANTED;
			case GRANT_FAILED:
				/* its replicas, or the primary, failed: look, and again */
				if (ride_on(args, &args->failure))
					continue;
				return ACQUIRE_FAILED;
			case GRANT_STALE:
				break;
		}
		dropping = redsem_now();
		opens = redis_link_opens();
		if (!drop_stale_grant(args, id, why))
		{
			if (ride_on(args, &args->failure))
				continue;
			return ACQUIRE_FAILED;
		}
		args->try_rt_ms = redis_link_opens() == opens ? ms_since(dropping) : -1;
		if (args->wait_ms == 0 || ms_left(deadline) <= 0 ||
			no_time_for_another(args))
		{
			/* (a caller that waited: its wait timed out, not refused) */
			args->waited = args->waited || args->wait_ms != 0;
			r->state = SEM_LOST;
			return ACQUIRE_NOT_GRANTED;
		}
		asked = false;
	}
}

/*
 * Raise the error for a waiter an administrator removed from the line (a
 * statement queue's in the words of its other errors)
 */
static void
refuse_removed(const AcquireArgs *args)
{
	const char *queue = redsem_queue_of_semaphore(args->name);

	if (queue != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("statement could not enter redsem queue \"%s\": an administrator removed it from the line",
						queue),
				 errdetail("redsem_force_release gave up its place in line; it was not queued again.")));
	ereport(ERROR,
			(errcode(ERRCODE_QUERY_CANCELED),
			 errmsg("canceling the wait for semaphore \"%s\": an administrator removed this session from its line", args->name),
			 errdetail("redsem_force_release gave up its place in line; it was not queued again.")));
}

/* Raise the error for a request refused because of the semaphore's limit */
static void
refuse_limit(const AcquireArgs *args, const SemResult *r)
{
	if (r->state == SEM_NO_LIMIT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("semaphore \"%s\" has no stored limit", args->name),
				 errhint("Pass \"max_holders\", or store a limit with redsem_set_limit or redsem_set_adaptive_limit.")));
	if (r->state == SEM_TOO_LARGE && r->reserve)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot take %d permits of semaphore \"%s\" at priority %d",
						args->permits, args->name, args->priority),
				 errdetail("The semaphore keeps a reserve (redsem_set_reserve) for higher priorities: callers of this priority can hold at most " INT64_FORMAT " of its permits.",
						   r->limit)));
	if (r->state == SEM_TOO_LARGE && r->adaptive)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot take %d permits of semaphore \"%s\", whose adaptive limit may go down to " INT64_FORMAT,
						args->permits, args->name, r->limit),
				 errdetail("\"permits\" must not exceed the lower bound of an adaptive limit (\"min_holders\" of redsem_set_adaptive_limit).")));
	if (r->state == SEM_TOO_LARGE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot take %d permits of semaphore \"%s\" with a limit of " INT64_FORMAT,
						args->permits, args->name, r->limit),
				 errdetail("\"permits\" must not exceed the limit in effect.")));
	if (r->stored)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("semaphore \"%s\" has a stored limit of " INT64_FORMAT ", not %d",
						args->name, r->limit, args->max_holders),
				 errdetail("Callers of one semaphore must agree on its limit, and it was stored with redsem_set_limit."),
				 errhint("Leave out \"max_holders\" (or pass NULL) to use the stored limit.")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("semaphore \"%s\" is in use with a limit of " INT64_FORMAT ", not %d",
					args->name, r->limit, args->max_holders),
			 errdetail("Callers of one semaphore must agree on its limit: its holders and waiters took it with a limit of " INT64_FORMAT ".",
					   r->limit),
			 errhint("Pass the same \"max_holders\" everywhere, or store the limit with redsem_set_limit and leave \"max_holders\" out.")));
}

/*
 * Store args->default_limit as the semaphore's limit unless one was stored
 * meanwhile (a statement queue's first use); false with the failure kept
 */
static bool
store_default_limit(AcquireArgs *args)
{
	RedisCall	call;
	SemLimit	limit;

	redis_call_init(&call, DT_NOEND, true, LOG);
	if (sem_set_limit(&call, args->name, args->default_limit, true, &limit))
		return true;
	return call_failed(args, &call);
}

/* The us of the generation of name's slot this server knows (0: none) */
static int64
known_gen_us(const char *name)
{
	char		text[GEN_TEXT_LEN];

	gen_known_text(NULL, sem_gen_slot(NULL, name), text);
	return text[0] != '\0' ? strtoi64(text + 1, NULL, 10) : 0;
}

/*
 * True if Redis forgot the generation of args->name's slot since the
 * acquire began to wait: asked (gen_raise notes the one there, making a
 * new one with its grace if Redis forgot), it is not the one this server
 * knew then.  Its place expiring (a stalled waiter) or its promotion window
 * passing also loses a line, and must not undo an administrator's removal
 * of the limit meanwhile.  Without a generation known then it cannot tell:
 * false.
 */
static bool
forgot_since_start(AcquireArgs *args)
{
	RedisCall	call;

	if (args->gen_us == 0)
		return false;
	acquire_call(args, &call);
	if (!sem_gen_raise(&call, NULL, args->name, args->lease_ms, false))
		return false;
	return known_gen_us(args->name) != args->gen_us;
}

/*
 * True if the semaphore's stored limit was lost while the acquire waited
 * under it: it was told one (it gave none: each reply of its own was under
 * a stored limit); it rides a failure now (a call of it failed as a
 * restart makes calls fail, within a ride's gap: not a blip of long ago,
 * or an administrator's removal of the limit since would be undone), or
 * its line was lost under it while it waited and Redis forgot since it
 * began (FLUSHALL, which breaks no connection: an administrator's removal
 * of the limit leaves the line);
 * and Redis now has no limit (a restart without persistence forgets the
 * stored limits with the rest)
 */
static bool
stored_limit_lost(AcquireArgs *args, const SemResult *r)
{
	return r->state == SEM_NO_LIMIT && args->default_limit <= 0 &&
		args->max_holders == 0 && args->limit_seen > 0 &&
		(riding(args) || (args->line_lost && forgot_since_start(args)));
}

/*
 * Store again the limit the caller was told before Redis forgot it, unless
 * one was stored meanwhile (an administrator's, or another caller's that
 * came back too): the callers in line were waiting under it, and would
 * else fail with 22023 in the middle of their wait, and every later one
 * until an administrator stores it again.  An adaptive limit comes back
 * fixed where it was (its bounds were lost with it).  False with the
 * failure kept.
 */
static bool
restore_lost_limit(AcquireArgs *args)
{
	RedisCall	call;
	SemLimit	limit;

	redis_call_init(&call, DT_NOEND, true, LOG);
	if (!sem_set_limit_if(&call, args->name, (int) args->limit_seen, 0, &limit))
		return call_failed(args, &call);
	if (limit.stored == args->limit_seen)
		ereport(LOG,
				(errmsg("redsem: semaphore \"%s\" had no stored limit after Redis forgot it; a caller waiting under it stored it again at " INT64_FORMAT,
						args->name, args->limit_seen),
				 errdetail("Redis forgot it (a restart without persistence, FLUSHALL) while the caller waited under it."),
				 errhint("An adaptive limit comes back fixed at the limit it had: call redsem_set_adaptive_limit again to make it adaptive.")));
	return true;
}

/*
 * Take a slot of args->name for scope.  On ACQUIRE_GRANTED, *id is the
 * holder id and *hold its entry.  A limit the semaphore refuses raises
 * 22023 whatever args->elevel; so does a Redis failure at ERROR.
 */
AcquireResult
acquire_slot(AcquireArgs *args, HoldScope scope, char **id, Hold **hold)
{
	char		buf[64];
	SemResult	r;
	TimestampTz started;
	TimestampTz deadline;
	TimestampTz sent;
	AcquireResult result;

	hold_init();
	hold_flush_deferred();
	notice_unkept_lease(args->lease_ms);
	args->limit_seen = args->max_holders;
	args->rate_seen = false;
	args->rate_ms = -1;
	args->share_seen = -1;
	args->grace_seen = false;
	args->waited = false;
	args->reached = false;
	args->line_lost = false;
	args->gen_us = 0;			/* (noted once it waits: wait_turns) */
	memset(&r, 0, sizeof(r));

	make_id(buf, sizeof(buf));
	*hold = hold_begin(args->name, buf, scope, args->lease_ms, args->permits);
	started = redsem_now();
	deadline = args->wait_ms < 0 ? DT_NOEND :
		TimestampTzPlusMilliseconds(started, args->wait_ms);
	/* a failover is ridden through within the wait (ride_on) */
	args->deadline = deadline;
	args->ride_from = args->ride_last = started;
	args->rides = 0;
	args->try_rt_ms = -1;
	result = take_slot(args, *hold, buf, deadline, &r, &sent);
	if (result != ACQUIRE_FAILED && r.state == SEM_NO_LIMIT && args->default_limit > 0)
		result = store_default_limit(args)
			? take_slot(args, *hold, buf, deadline, &r, &sent) : ACQUIRE_FAILED;
	else if (result != ACQUIRE_FAILED && stored_limit_lost(args, &r))
		result = restore_lost_limit(args)
			? take_slot(args, *hold, buf, deadline, &r, &sent) : ACQUIRE_FAILED;
	/* (removed again: a drop, or Redis forgot once more; queue.c asks) */
	if (result != ACQUIRE_FAILED && r.state == SEM_NO_LIMIT && args->default_limit > 0)
	{
		hold_forget(*hold);
		*hold = NULL;
		return ACQUIRE_CAP_GONE;
	}
	if (result != ACQUIRE_FAILED &&
		(r.state == SEM_OTHER_LIMIT || r.state == SEM_NO_LIMIT ||
		 r.state == SEM_TOO_LARGE))
	{
		hold_forget(*hold);
		refuse_limit(args, &r);
	}
	if (result != ACQUIRE_FAILED && r.state == SEM_REMOVED)
	{
		hold_forget(*hold);
		refuse_removed(args);
	}
	count_acquire(args, result, started);
	/*
	 * (a request that got no answer, the last or one ridden through: Redis
	 * may still take it, late; marked before the ERROR below)
	 */
	if ((result == ACQUIRE_FAILED &&
		 (args->reached || request_may_be_pending(&args->failure))) ||
		args->rides > 0)
		hold_mark_unsure(*hold);
	else if (result == ACQUIRE_FAILED)
	{
		/* Redis ran nothing of it: nothing to release, nor to watch */
		hold_forget(*hold);
		*hold = NULL;
	}
	if (result == ACQUIRE_FAILED && args->elevel >= ERROR)
		redis_report(args->elevel, &args->failure);
	if (result != ACQUIRE_GRANTED)
	{
		/*
		 * A failed request may have reached Redis: its entry stays pending,
		 * released at the end of the transaction (or by the keeper).
		 */
		if (result == ACQUIRE_NOT_GRANTED && *hold != NULL)
			hold_forget(*hold);
		*hold = NULL;
		return result;
	}
	hold_mark_held(*hold, r.ticket, args->lease_ms, sent, r.confirm_ms);
	*id = pstrdup(buf);
	return result;
}
