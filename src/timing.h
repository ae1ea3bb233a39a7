/*
 * timing.h
 *		Every timing constant of redsem that interacts with another, with
 *		how they fit together.
 *
 * A holder's slot lives until its deadline in Redis (now + lease).  The
 * keeper refreshes every live hold when a third of its lease has passed
 * (KEEPER_REFRESH_FRACTION), so two refreshes may fail or come late before
 * the lease runs out.  Whenever it refreshes, it also takes the holds due
 * within half of their third (KEEPER_BATCH_EARLY_DIVISOR), so holds taken
 * at different moments fall into step and go to Redis in one batch, at the
 * cost of refreshing some of them a little early.  It sleeps at most KEEPER_MAX_SLEEP_MS, and a backend
 * wakes it at once when a new hold is due before that.  REDSEM_MIN_LEASE_MS
 * is the shortest lease it can keep that way with room for scheduling
 * delays (a third of it, 333 ms, is far above a loopback round trip and a
 * keeper wake-up): shorter leases are refused.
 *
 * A waiter looks again at least once in its own promotion window
 * (min(lease, WAIT_RECHECK_MS), WAIT_RECHECK_MS being PROMOTION_WINDOW_MS),
 * and its place in line lives WAIT_PLACE_TTL_MS (three of the longest
 * re-checks) from its last look: a dead waiter's place goes by itself.
 * When it is promoted, it holds for window = min(lease,
 * PROMOTION_WINDOW_MS) until it confirms (src/redsem.lua), so a waiter that
 * died in line costs the line at most that window: the waiter left at the
 * head of the line by a promotion looked last before it, so it looks again
 * by the time the window ends (when its lease is no shorter than that of
 * the promoted one) and is told when (no nudge is needed).  A re-check
 * as long as PROMOTION_WINDOW_MS whatever the lease cost the line up to
 * 5 s for each dead waiter with 2-s leases.  A live
 * waiter whose wake-up came within a third of the window of its last look
 * (PROMOTION_CONFIRM_FRACTION) leaves the confirmation to the keeper, which
 * refreshes it as a hold whose lease is the window (due after a third of
 * it, with two thirds left for retries, as for any lease); otherwise, or
 * without a keeper, it confirms itself, one round trip after its wake-up.
 * A waiter sleeps on its wake and nudge lists with BLPOP, whose timeout
 * Redis serves at its next timer tick: up to 1000/hz ms late (100 ms at
 * the default hz of 10).  On a semaphore with a stored rate, the end of a
 * nap is when the rate lets the waiter in, so it spends the last
 * REDIS_TICK_SLACK_MS of a nap in its own process instead (a wake-up
 * pushed meanwhile is seen at the look that follows): rates keep their
 * pace for any hz of 4 or more.  For the same reason a BLPOP's (and a
 * WAIT's) reply is given REDIS_TICK_SLACK_MS past its own timeout and
 * redsem.command_timeout before the call gives up on it: with a short
 * command timeout (below 100 ms) a wait that ran out was reported as a
 * Redis that did not answer (08006) instead of as not obtained (55P03).
 * A call that may be cancelled gives Redis at least REDIS_ANSWER_FLOOR_MS
 * to answer from when its request was written, whatever is left of its
 * deadline then: a backend stalled before it sent (stopped, starved of
 * CPU, swapping) would otherwise find its deadline over at its first look
 * and blame a Redis that answered at once (08006, or a ride for a
 * waiter).  It is far above a loopback round trip, and short beside any
 * command timeout that leaves room for one.  A call that may not be
 * cancelled (a commit, abort or exit callback's, REDSEM_XACT_CLEANUP_MS)
 * and the keeper's calls (KEEPER_NODE_MIN_BUDGET_MS and the rest of its
 * budgets) keep their own bounds.  Every key of a
 * semaphore outlives its latest deadline by GRACE_MS (src/redsem.lua);
 * these two live in the script, and are repeated here as comments only.
 *
 *   GRACE_MS             1000 ms  (src/redsem.lua)
 *   PROMOTION_WINDOW_MS  5000 ms  (src/redsem.lua)
 *   RENEW_SLACK_MS      60000 ms  (src/redsem.lua: a renewal of the keys'
 *                                  TTL covers up to this much more, so most
 *                                  calls need none)
 *
 * With redsem.grant_replicas, a grant waits for its replicas (WAIT, up to
 * redsem.grant_replica_timeout) before acquire returns it, and nobody
 * refreshes it meanwhile.  It is returned only with as much of its lease
 * left as the keeper counts on when it refreshes a hold on time: two
 * thirds (lease - lease / KEEPER_REFRESH_FRACTION), time counted from when
 * the granting request was sent (on redsem's clock, as every time here).
 * The keeper, woken at once, finds it due and refreshes it with two tries'
 * room left, as any hold.  A grant back with less is refreshed by the
 * acquire itself first, and that refresh waits for the replicas too (the
 * replicas' copy of the grant may have less than a third of its lease
 * left: a failover before the refresh reached them would end it early), so
 * that a slow replica costs the caller a round trip and a wait, not its
 * place in line; if the refresh finds the slot gone, or it and its wait
 * took more than a third of the lease, the grant is given back and the
 * caller queues again within its wait.
 *
 * Callbacks at commit, abort and session exit never wait long for Redis:
 * REDSEM_XACT_CLEANUP_MS and REDSEM_EXIT_CLEANUP_MS (REDSEM_XACT_CLEANUP_MS
 * too for an exit that is a FATAL error, such as pg_terminate_backend's:
 * whoever ended the session may wait for it to go).  What they could not
 * release is handed to the keeper, which retries (per hold, with
 * back-off from KEEPER_RETRY_MIN_MS doubling up to KEEPER_RETRY_MAX_MS,
 * whether Redis refused the release or the connection failed under it) and
 * gives up once the hold would have ended by itself anyway.  A refresh
 * that failed is tried again within half the time its lease has left, at
 * the latest (KEEPER_RETRY_LAST_MS at least): a back-off past the lease's
 * end would stop a holder the next try might have kept.  So is one that
 * connection trouble left unanswered (the batch's share of the time ran
 * out, the connection broke), with the back-off counted over the batches
 * in a row that met it and a round (KEEPER_MAX_SLEEP_MS) at most: a
 * stall that ends before a holder's stop moment (below: two thirds of the
 * lease after its last refresh, less L / REDSEM_CLOCK_RATE_DIVISOR and
 * REDSEM_STOP_ACT_MS, some 1.1 s for 2-s leases and 0.46 s for 1-s ones)
 * stops no holder (t/132: 0.8-s stalls, 2-s leases).
 *
 * Releases at the end of a statement or transaction are sent without
 * waiting for the reply (unless redsem.await_release), which the session
 * reads on its next call: the keeper leaves such a hold alone (it neither
 * refreshes nor releases it) until redsem.command_timeout plus
 * KEEPER_SENT_RELEASE_SETTLE_MS after it was sent, and then releases it
 * once more, in case the first never reached Redis (a connection that
 * broke under it): a slot is then free at most that long after a lost
 * release, not when its lease runs out.  A release given twice is a no-op
 * the second time.
 *
 * An acquire that got no answer may still reach Redis after the release
 * that gave it back: a network path that heals delivers what the old
 * connection had sent (TCP retransmits it for up to some 15 minutes, even
 * after the socket is closed), while the release went on a new one.  So
 * the keeper releases such a hold (and one whose acquire rode through a
 * request that got no answer) again, once its session gave it up, every
 * KEEPER_UNSURE_LOOK_MS or a KEEPER_UNSURE_AGE_DIVISOR-th of the time since
 * its last request if longer (some 40 releases over a watch, not 480: a
 * failover rides many acquires through), until KEEPER_UNSURE_MAX_MS after
 * that request: a late grant is given back within seconds (a minute or two
 * if it comes many minutes late), not when its lease (up to
 * redsem.max_lease) runs out.
 *
 * In a Redis Cluster, the keeper gives each node a share of a batch's time:
 * a third of the shortest lease time left among the live holds the batch
 * refreshes (KEEPER_NODE_MIN_BUDGET_MS at least, redsem.command_timeout at
 * most), and sends to the nodes that failed last.  A node's commands of the
 * whole batch go in one write, their replies read in one round trip (and a
 * redirected command in one more, with the others sent to the same node),
 * so the share holds a node's round trip and the time its scripts run,
 * which grows with the semaphores it serves (2000 of them took some 75 ms
 * a round here) rather than a round trip each: with one command per round
 * trip, a share of some 600 ms covered 60 semaphores on a node 10 ms away.
 * A hung node then delays
 * the refreshes of the other nodes' holds by at most that share once, and
 * not at all afterwards, while they still have two thirds of it left.  With
 * one Redis (or a Sentinel primary) the whole batch gets that share: a
 * primary that hangs is given up in time for the next round, a second
 * later, to reach the primary the sentinels name next.  The share comes
 * only from holds a refresh can still save: releases (of orphans, or sent
 * again after a session's unread release) and holds whose lease has
 * already run out never shorten it, since with
 * KEEPER_NODE_MIN_BUDGET_MS for all a Redis one round trip away that took
 * longer (or needed a reconnection, with AUTH) would fail the live holds'
 * refreshes beside them round after round.  A batch of only such items
 * gets a third of the shortest lease time left among the live holds the
 * keeper keeps (their refreshes come later), or redsem.command_timeout if
 * there are none.
 *
 * The fleet index (redsem_semaphores, src/fleet.c): the keeper notes the
 * semaphores its server's sessions hold or wait on every FLEET_TOUCH_MS,
 * as used for FLEET_TTL_MS; entries not noted again within that are
 * dropped.  FLEET_TTL_MS is six touches: a keeper whose touches fail (the
 * index's node down, a failover) for most of a minute does not make its
 * semaphores vanish from the view.  A touch comes after the round's
 * refreshes, and its budget is reckoned like a batch's share: a third of
 * the shortest lease time left among the holds the keeper keeps, as the
 * round's refreshes left them (one whose lease has run out, not yet known
 * lost, does not count), and of REDSEM_MIN_LEASE_MS (a hold taken
 * during the touch, of the least lease, is refreshed only after it:
 * FLEET_TOUCH_MIN_BUDGET_MS at least, redsem.command_timeout at most).  A
 * touch then fits wherever a refresh does: a Redis 150 ms away gets some
 * 300 ms, and the indexes of every key prefix are touched in one pipeline,
 * one round trip (in a Cluster one per node, in turn, each node within
 * half the budget).  A pipeline of two or more commands that runs out of
 * its budget drops the connection (only one command's reply can be left
 * owed), and one met by a failover fails, as a touch may: the next, 10 s
 * later, goes on.  A backend that asks the keeper to wake while it works (a new
 * hold) counts its request in shared memory as well as setting the latch,
 * since the keeper's own Redis waits reset its latch: the keeper looks
 * again at once instead of sleeping when a request came.  A hung index
 * node delays the next round by at most that budget, once per touch: the
 * refreshes due meanwhile come that much late, with two thirds of the time
 * they had left still to run (a hold whose refresh failed and waits for
 * its retry makes the budget small).  A touch that runs out of its budget
 * (of one command: one prefix) does not drop the keeper's connection at
 * once: its reply is left owed,
 * read and dropped before the connection's next use if it came by then
 * (if not, Redis is slow to answer, and the connection is dropped then
 * rather than make the next round's refreshes wait behind it).  A touch
 * also tells whether Redis may evict keys (a maxmemory and another policy than noeviction);
 * the keeper then logs a WARNING, again every FLEET_EVICTION_LOG_MS while
 * it lasts.  In a Cluster the touch also asks the other nodes of its
 * semaphores, within the same budget: a hung one costs no more than a hung
 * index node.  The keeper's count of its holds' leases in their
 * generations (KEEPER_GEN_KEEP_MS) is a round of its own, never behind a
 * touch, with a budget reckoned the same way: each round adds one such
 * part to the refreshes, whose time then stays as bounded.  It sends its
 * raises in one pipeline (one round trip; in a Cluster one per node,
 * nodes that failed recently last, each within half the budget, so a hung
 * one costs the others half of it at most).  A try that raised some but
 * not all goes on with the rest a round of KEEPER_MAX_SLEEP_MS later, the
 * rounds between left to the statement queues' reads and the adaptive
 * limits' ticks; one that raised none, FLEET_TOUCH_MS later.
 *
 * A holder runs only while its slot is surely its own (src/stop.c).  Every
 * time is read on redsem's clock (src/clock.h), which no change of the
 * wall clock moves.  A slot Redis granted or refreshed for a lease L by a
 * request sent at t (by this server's clock) ends in Redis no earlier than
 * t + L by Redis's clock: Redis counted from when the request came, later
 * than t.  Two things can make that end come sooner as this server sees
 * it: Redis's clock running faster than ours, which
 * REDSEM_CLOCK_RATE_DIVISOR bounds at 1% (hardware clocks differ by a few
 * parts in 100,000, and NTP slews by at most 500 ppm: a bound twenty times
 * that), and the time a stop takes to act once decided (the keeper's
 * wake-up, a signal, the backend's next CHECK_FOR_INTERRUPTS, the abort),
 * REDSEM_STOP_ACT_MS.  So the hold is valid until
 * t + L - L / REDSEM_CLOCK_RATE_DIVISOR - REDSEM_STOP_ACT_MS
 * (redsem_valid_until): for the least lease, 1000 ms, that is 790 ms, well
 * after the keeper's refresh at 333 ms and its retry 250 ms later.  At that
 * moment, unless a later refresh was confirmed, the keeper stops the holder
 * (redsem.on_slot_lost), and it wakes for it: its Redis calls end by then
 * (a batch's and a touch's deadline is at most the earliest such moment).
 * A backend also looks at its own holds when it starts a statement and
 * before it commits, so a keeper that died does not leave a holder running
 * past that moment beyond its next statement; and while it holds a slot to
 * stop, its watchdog (src/watchdog.c) looks every REDSEM_WATCHDOG_MS and
 * stops it at that moment if the keeper has not (a keeper stalled, alive
 * but not running, is never restarted): at most REDSEM_WATCHDOG_MS late,
 * within REDSEM_STOP_ACT_MS, the rest left to the signal and the abort.  A refresh that finds the
 * slot gone stops the holder at once.  A cancelled holder whose statement
 * still runs REDSEM_STOP_ESCALATE_MS after the cancel, without taking the
 * slot again (it caught the cancel), is terminated (src/escalate.c): long
 * enough for a handler to log and ask again, short beside any lease.  A
 * session that tells a stop itself just after the keeper signalled it
 * waits for that signal to come in until REDSEM_SIGNAL_IN_MS after it was
 * sent (it has most often come already: a signal to a process running on
 * another CPU takes microseconds), and drops it: its own error is that
 * cancel (src/stop.c).
 *
 * Through Redis Sentinel, a call that finds the named primary unreachable,
 * or still a replica, asks the sentinels again every SENTINEL_RETRY_MS
 * until its deadline (redsem.command_timeout), so a failover shorter than
 * that is waited out rather than failed; it gives up at once when the next
 * ask could not begin before the deadline (a callback's
 * REDSEM_XACT_CLEANUP_MS is shorter than SENTINEL_RETRY_MS: a cancel would
 * otherwise wait it out for nothing).  An acquire that waits rides
 * through what is left: a call that failed as a failover makes it fail (a
 * connection that broke or went silent, a replica now, too few replicas
 * for a grant; through Sentinel or in a Cluster also no connection) is
 * tried again after ACQUIRE_RIDE_PAUSE_MS, a look at its place
 * first (the request may have reached Redis: a line that survived keeps
 * its order), for as long as its wait lasts, at most ACQUIRE_RIDE_MAX_MS
 * of a wait without end (a statement queue's) from the ride's first
 * failure (a failure with none before it for two commands' time, a
 * grant's WAIT, a pause and ACQUIRE_RIDE_GAP_MS begins a ride, logged and
 * counted as such: a ride's tries, a look then an ask or a grant, fail at
 * most that far apart); each try finds the primary anew,
 * and once it rides, the calls of a wait end ACQUIRE_CALL_SLACK_MS after
 * it at the latest (its last look, which gives its place up, needs a
 * round trip).  One that does not wait rides only a connection that broke, within
 * one redsem.command_timeout; a statement queue's with on_redis_error=run
 * only a connection that broke, with one more try (after the pause) per
 * ride.  A backend logs that it rides at most every
 * ACQUIRE_RIDE_LOG_EVERY_MS.  The keeper's refreshes fail while a failover
 * runs and are retried with the back-off above: holds survive a
 * failover that ends within two thirds of their lease.
 *
 * A failure to connect names redsem.connect_timeout as its bound unless the
 * call had less than that left by more than CONNECT_CUT_SLACK_MS: the
 * broker's opener (and a call's loop of tries) works to one deadline
 * computed at its start, a few milliseconds before each try begins.
 */
#ifndef REDSEM_TIMING_H
#define REDSEM_TIMING_H

#define REDSEM_MIN_LEASE_MS			1000
#define REDSEM_MAX_LEASE_MS			(INT64CONST(24) * 3600 * 1000)
#define REDSEM_MAX_WAIT_MS			(INT64CONST(24) * 3600 * 1000)

#define PROMOTION_WINDOW_MS			5000
#define PROMOTION_CONFIRM_FRACTION	3
#define WAIT_RECHECK_MS				PROMOTION_WINDOW_MS
#define WAIT_PLACE_TTL_MS			(3 * WAIT_RECHECK_MS)
#define REDIS_TICK_SLACK_MS			250
#define REDIS_ANSWER_FLOOR_MS		250

#define REDSEM_XACT_CLEANUP_MS		50
#define REDSEM_EXIT_CLEANUP_MS		1000

#define KEEPER_REFRESH_FRACTION		3
#define KEEPER_BATCH_EARLY_DIVISOR	2
#define KEEPER_MAX_SLEEP_MS			1000
#define KEEPER_RETRY_MIN_MS			250
#define KEEPER_RETRY_MAX_MS			30000
#define KEEPER_RETRY_LAST_MS			50
#define KEEPER_LOG_EVERY_MS			30000
#define KEEPER_NODE_MIN_BUDGET_MS	100
#define KEEPER_SENT_RELEASE_SETTLE_MS	1000
#define KEEPER_UNSURE_LOOK_MS		2000
#define KEEPER_UNSURE_AGE_DIVISOR	8
#define KEEPER_UNSURE_MAX_MS		(16 * 60 * 1000)

#define REDSEM_CLOCK_RATE_DIVISOR	100
#define REDSEM_STOP_ACT_MS			200
#define REDSEM_WATCHDOG_MS			100
#define REDSEM_STOP_ESCALATE_MS		2000
#define REDSEM_SIGNAL_IN_MS			5

#define SENTINEL_RETRY_MS			100
#define CONNECT_CUT_SLACK_MS		100
#define ACQUIRE_RIDE_PAUSE_MS		100
#define ACQUIRE_RIDE_MAX_MS			60000
#define ACQUIRE_RIDE_GAP_MS			1000
#define ACQUIRE_CALL_SLACK_MS		500
#define ACQUIRE_RIDE_LOG_EVERY_MS	10000

#define FLEET_TOUCH_MS				10000

/*
 * The broker (broker.c, brokerlink.c).  A backend whose broker link is
 * refused (the broker is restarting) tries again every
 * BROKER_CONNECT_RETRY_MS within its connect deadline.  The supervisor
 * starts a new broker at once after one that lived BROKER_QUICK_DEATH_MS
 * or more, and otherwise waits BROKER_RESTART_BACKOFF_MS (doubled at each
 * quick death, up to BROKER_RESTART_BACKOFF_MAX_MS), so a broker that dies
 * at start does not spin.  At shutdown (SIGTERM) the broker serves on
 * while any backend is linked to it, for BROKER_STOP_LINGER_MS at most, so
 * that backends ending in the same shutdown give their slots back through
 * it; the supervisor gives it BROKER_STOP_GRACE_MS, more than that, before
 * SIGKILL.  The broker gives up on a
 * Redis connection whose oldest command is not answered within
 * redsem.command_timeout plus BROKER_TIMEOUT_MARGIN_MS (plus the command's
 * own wait: BLPOP, WAIT), which is longer than any backend waits, so a
 * backend times out first and sees its own 08006 (past that deadline it
 * first reads what already waits on the socket, once per command: a broker
 * stopped past it wakes without having read).  A connection is
 * opened by a forked opener within the asking session's
 * redsem.connect_timeout, but at most the server's or
 * BROKER_OPEN_CAP_FLOOR_MS, whichever is longer (anyone may set a longer
 * one, and the others wait for that open: a session with more time has
 * another begun; the floor, 20 times BROKER_SLOW_OPEN_MS, keeps an open
 * that was refused at once from looking as if it ran out of time, which
 * with a server's setting of 50 ms or less began one open after another
 * without a pause); the broker kills an opener still there
 * BROKER_OPEN_KILL_MARGIN_MS after that (its own deadline has passed: it
 * is stuck).  The clients that ask for a connection while an opener is
 * under way wait for that one; an opener that failed within
 * BROKER_SLOW_OPEN_MS of its own deadline ran out of time (its clients
 * whose connect timeouts are longer have another begun), one that failed
 * sooner is answered to all at once, and the next call opens anew, so a
 * Redis that comes back is used at the next call, as in direct mode.
 * A TLS connection's relay (broker_open.c) ends when the broker closes
 * the connection, and is reaped within BROKER_REAP_POLL_MS (nothing wakes
 * the broker when a child ends); one still there BROKER_RELAY_END_MS
 * later (its server frozen) is killed.
 * A side connection (for BLPOP) idle BROKER_SIDE_IDLE_MS is closed.
 * A target (a Redis server and the settings a connection is set up with)
 * that no backend has been linked for, nor used, for BROKER_TARGET_IDLE_MS
 * is ended: its connections closed, its entry freed.  So a password
 * rotated in redsem.password_file, or redsem.host moved to another Redis,
 * leaves no connection of the old settings open for longer than that
 * after their last session ends; and a server that stops using redsem
 * holds no Redis connection.  Longer than a side connection's idle time,
 * which ends first; short enough that tests can wait for it.
 * Through Redis Sentinel, the keeper asks the sentinels where the primary is
 * every SENTINEL_RECHECK_MS while its server holds or waits for slots, and
 * in direct mode always (an idle session's link outlives its holds) (at
 * most KEEPER_SENTINEL_ASK_MS, or redsem.connect_timeout if shorter, of its
 * round: its refreshes come next), and a link to a primary they no longer
 * name is left (src/keeper.c: recheck_sentinels), its waiters woken: a
 * planned failover then reaches the holds the keeper refreshes, and the
 * waits of direct mode, within that rather than at the old primary's
 * demotion, which would come after the new primary let their leases run
 * out.  A lease under about three of SENTINEL_RECHECK_MS may still run out
 * there.  Likewise the broker asks the sentinels where the primary
 * is every SENTINEL_RECHECK_MS while it keeps a target (one short
 * connection to a sentinel each time; a target no backend used for
 * BROKER_TARGET_IDLE_MS is ended), and leaves a primary they no
 * longer name: a failover reaches its callers within that, not at the old
 * primary's demotion (up to about 10 s after a SENTINEL FAILOVER) or its
 * command timeout (one that hangs).  When they refuse the password the
 * target's links carried (rotated since), its links are ended so that
 * their backends link again with their files' passwords; while they keep
 * refusing it (a file still wrong, which the backends then read again
 * just the same), no more often than every SENTINEL_REFUSED_RELINK_MS, so
 * that a wrong file costs each backend a link every 30 s, not every ask.
 * A wait pool's BLPOP (broker_wait.c: one for all of a target's waiters)
 * ends at the earliest BLPOP timeout of the waiters it names, and after
 * BROKER_POOL_CYCLE_MS at most; a waiter that joins in between is added by
 * ending it (CLIENT UNBLOCK), or, for a Redis user that may not run CLIENT
 * UNBLOCK, at the next BLPOP, which then ends every BROKER_POOL_POLL_MS.
 * Redis's work to send that BLPOP grows with the waiters it names (some
 * microseconds each), so for joins, leaves and timeouts it is ended or
 * sent no sooner than BROKER_POOL_SPACING_US per waiter its last one named
 * (a few percent of Redis's time at most, whatever their number; a
 * waiter's nil may come that much late, 20 ms for 200 waiters), while a
 * wake-up it carried sends it again at once.
 * A broker that cannot accept a link (out of file descriptors: the
 * listener stays readable, and the wait is level-triggered) stops
 * listening for BROKER_ACCEPT_PAUSE_MS, doubled while it keeps failing up
 * to BROKER_ACCEPT_PAUSE_MAX_MS (each pause makes its wait set anew),
 * instead of waking at once on and on, and says so at most every
 * BROKER_ACCEPT_LOG_MS (so too an opener it could not start); the
 * backends queued meanwhile wait in the socket's backlog, within their
 * command timeout.  A link closed within BROKER_FORK_SETTLE_MS of a fork
 * has the wait set made anew (the child may still hold the socket, which
 * the kernel then keeps reporting); later ones leave a dead entry.
 * An open that found nothing serving at a single Redis's address (stopped,
 * restarting) is not tried again for BROKER_NO_SERVER_REUSE_MS: requests
 * meanwhile get its failure at once.  Waiters ride a restart with a try
 * every ACQUIRE_RIDE_PAUSE_MS (acquire.c), so their number costs no more
 * than one opener's fork per that time; and the broker says it could not
 * connect at most every BROKER_ACCEPT_LOG_MS per Redis.
 *
 * After it handled anything, the broker polls its sockets without sleeping
 * for redsem.broker_poll (BROKER_POLL_US by default), giving the CPU to
 * whoever wants it between two polls (sched_yield): a backend's next call
 * and Redis's answer mostly come within that, and are then taken without
 * the broker being woken, which is most of what the hop through it costs
 * on a small machine (two wake-ups a call).  Idle for longer, it sleeps.
 * A TLS connection's relay process (src/redis/tls.c) polls as long after
 * bytes last moved through it, for the same reason.
 */
#define BROKER_POLL_US					200
#define BROKER_CONNECT_RETRY_MS			10
#define BROKER_QUICK_DEATH_MS			1000
#define BROKER_RESTART_BACKOFF_MS		100
#define BROKER_RESTART_BACKOFF_MAX_MS	2000
#define BROKER_STOP_LINGER_MS			2000
#define BROKER_STOP_GRACE_MS			3000
#define BROKER_TIMEOUT_MARGIN_MS		1000
#define BROKER_SLOW_OPEN_MS				50
#define BROKER_OPEN_CAP_FLOOR_MS		1000
#define BROKER_SIDE_IDLE_MS				5000
#define BROKER_TARGET_IDLE_MS			30000
#define SENTINEL_RECHECK_MS				1000
#define KEEPER_SENTINEL_ASK_MS			250
#define SENTINEL_REFUSED_RELINK_MS		30000
#define BROKER_OPEN_KILL_MARGIN_MS		1000
#define BROKER_RELAY_END_MS				1000
#define BROKER_REAP_POLL_MS				50
#define BROKER_POOL_CYCLE_MS			5000
#define BROKER_POOL_POLL_MS				100
#define BROKER_POOL_SPACING_US			100
#define BROKER_ACCEPT_PAUSE_MS			100
#define BROKER_ACCEPT_PAUSE_MAX_MS		1000
#define BROKER_FORK_SETTLE_MS			100
#define BROKER_ACCEPT_LOG_MS			10000
#define BROKER_NO_SERVER_REUSE_MS		ACQUIRE_RIDE_PAUSE_MS

/*
 * How often the keeper makes sure that the generation of each semaphore it
 * keeps a hold of (or a wait for) counts that lease (I15 in
 * src/redsem.lua): an acquire counts its lease, but a slot its keeper
 * refreshes for longer than a window (GEN_WINDOW_MS, src/gen.h) would
 * otherwise drop out of the grace after a window or two.
 *
 * The window sets how long a lease asked for counts in the grace that
 * follows if Redis forgets: between one and two windows after it was last
 * asked for or counted here.  Five minutes: a one-hour lease asked for and
 * given back at once no longer makes every Redis restart of the next day
 * admit nobody for an hour (the window was half a day), and each server
 * looks at the generation once a window at most (GEN_LOOK_EVERY_MS), a
 * write and a longer reply.  This count runs five times a window, so that
 * two failed tries in a row still leave the lease counted; it reads (and
 * writes only when it raises) one key per generation.
 */
#define KEEPER_GEN_KEEP_MS			(60 * 1000)
/*
 * A server whose wall clock is ahead of Redis's by more than a window
 * would find its generation's window due at every acquire; it looks at
 * most this often then (gen_known: a window is also due once it is a
 * window old by redsem's clock, whatever the wall clocks say).
 */
#define GEN_LOOK_EVERY_MS			(20 * 1000)
/*
 * A grace (I15) is logged by the first process of a server that learns
 * it; in a Cluster, where each slot has its generation and so its grace,
 * each process logs one at most this often.
 */
#define GEN_GRACE_LOG_MS			(10 * 1000)
/*
 * A statement queue's cap that this server's definition changed is stored
 * by the keeper (queue_caps.c) in a try of QUEUE_CAP_TRY_MS at most, and
 * after a failed try again QUEUE_CAP_RETRY_MS later, so that a Redis that
 * does not answer delays the refreshes of the keeper's cycle by that much
 * at most, once per retry (a change of definition is rare).
 */
#define QUEUE_CAP_TRY_MS			200
#define QUEUE_CAP_RETRY_MS			5000
/*
 * Each keeper reads the statement queues' definitions kept in Redis
 * (queue_fleet.c) every redsem.queue_poll_interval, QUEUE_FLEET_POLL_MS by
 * default, so a change of min_cost, max_wait and the like reaches every
 * server's next statement within it (a cap is the semaphore's stored
 * limit: at once).  Its budget is the fleet index touch's
 * (touch_budget_ms), which keeps the holds it could delay safe.  The
 * keeper wakes at least every KEEPER_MAX_SLEEP_MS, no longer than this.
 */
#define QUEUE_FLEET_POLL_MS			1000
/*
 * A read that ran out of its budget leaves its reply owed on the keeper's
 * connection (read at its next use); the next read comes after
 * QUEUE_FLEET_SLOW_POLL_MS, as the index touch's, and never in the cycle
 * of a touch, so that the keeper's refreshes do not find a reply still
 * owed and lose the connection.
 */
#define QUEUE_FLEET_SLOW_POLL_MS	FLEET_TOUCH_MS
/*
 * A keeper's read of the definitions also lists its server among those
 * that apply them (redsem_queue_servers) for QUEUE_FLEET_SERVER_TTL_MS,
 * or three reads if that is longer: ten reads at the default interval, so
 * that a keeper held up by a slow Redis for a few of them stays listed,
 * and a server that stopped reading goes within ten seconds.
 */
#define QUEUE_FLEET_SERVER_TTL_MS	10000
/*
 * Two changes of a queue at once may leave the cap of one beside the
 * definition of the other: the functions check once after each change,
 * and each keeper every QUEUE_FLEET_CAP_CHECK_MS (and when the definitions
 * changed) makes the caps its definitions' again, compare-and-set; for as
 * long (or three reads, if redsem.queue_poll_interval makes that longer,
 * as QUEUE_FLEET_SERVER_TTL_MS) it also removes the cap a late change
 * stored for a dropped queue, and then the open limit the drop left.
 */
#define QUEUE_FLEET_CAP_CHECK_MS	10000
/*
 * A change made while Redis's definitions are gone (or an older copy),
 * and a server seen within QUEUE_FLEET_SERVER_TTL_MS has a newer copy,
 * waits up to QUEUE_RESTORE_WAIT_MS for that server's keeper to store it
 * back (it reads every QUEUE_FLEET_POLL_MS), so that no change is made on
 * a stale set; then it fails, asking to try again.
 */
#define QUEUE_RESTORE_WAIT_MS		3000
/*
 * A change of a queue by SQL asks this server's keeper to read the
 * definitions at once and waits up to QUEUE_READ_BACK_WAIT_MS for it (a
 * keeper busy with a far Redis may take its budget), so that the server
 * applies the change when the function returns.
 */
#define QUEUE_READ_BACK_WAIT_MS		3000
/*
 * A statement of a queue with on_redis_error=run that found Redis unusable
 * runs without a slot, and so do the session's next statements of such a
 * queue for QUEUE_UNQUEUED_SPELL_MS, without trying Redis: a Redis that
 * does not answer would otherwise cost each of them redsem.connect_timeout
 * first.  Short beside an outage, long beside a statement.
 */
#define QUEUE_UNQUEUED_SPELL_MS		5000
#define FLEET_TTL_MS				60000
#define FLEET_TOUCH_MIN_BUDGET_MS	KEEPER_NODE_MIN_BUDGET_MS
#define FLEET_EVICTION_LOG_MS		(10 * 60 * 1000)

/* Leases longer than this get a NOTICE when no keeper runs */
#define REDSEM_UNKEPT_LEASE_NOTICE_MS	(INT64CONST(5) * 60 * 1000)

/*
 * Adaptive limits (I16 in src/redsem.lua).  Each keeper ticks every
 * adaptive semaphore of its prefix every ADAPT_TICK_MS; the script runs its
 * controller at the first tick of each ADAPT.INTERVAL_MS (1000 ms, less
 * ADAPT.JITTER_MS of 100 ms, so that one server ticking alone runs it every
 * time), and forgets a server's pressure ADAPT.FRESH_MS (2500 ms: two
 * missed ticks and a half) after its last tick.  So while any server that
 * uses it is alive the controller runs about once a second (at most once
 * every 900 ms), and a server that stops ticking stops counting within
 * three seconds.  A keeper ticks the adaptive semaphores its sessions held
 * or waited on at its last touch of the index (every FLEET_TOUCH_MS, or at
 * once when an administrator makes one adaptive on this server), at most
 * FLEET_ADAPTIVE_MAX of them, and wakes for its ticks only while there
 * are some; it smooths its runnable count over ticks
 * (ADAPT_RUNNABLE_SMOOTH of each new sample: a burst shorter than a tick or
 * two is not pressure).
 *
 *   ADAPT.INTERVAL_MS  1000 ms  (src/redsem.lua)
 *   ADAPT.JITTER_MS     100 ms  (src/redsem.lua)
 *   ADAPT.FRESH_MS     2500 ms  (src/redsem.lua)
 */
#define ADAPT_TICK_MS				1000
#define ADAPT_RUNNABLE_SMOOTH		0.5
/* A standby's received positions kept for its lag (one a tick; halved when full) */
#define ADAPT_LAG_SAMPLES			64

#endif							/* REDSEM_TIMING_H */
