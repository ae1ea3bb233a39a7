-- redsem: every semaphore operation, run atomically inside Redis.
--
-- This is the body of a Redis function library (Redis 7+, Valkey).  The C
-- side (src/script.c) loads it as library "redsem_<hash of this text>"
-- with one function of the same name, dispatch, registered without flags:
-- Redis then refuses it as a whole on a read-only replica (READONLY) or
-- above maxmemory (OOM), instead of stopping it half-way; and one named
-- "<library>_keep", dispatch for the operations that only keep what is
-- held or waited for or give it back (refresh, release, give-up, a
-- waiter's look) or only read (marked keep: dispatch), registered
-- allow-oom: Redis runs those above maxmemory too.  Each operation
-- is one FCALL with the operation name first among the arguments, naming
-- one key, the semaphore's owner (<base>owner), and its generation key
-- second (KEYS[2]: a server names it in every semaphore operation); the
-- semaphore's other keys below are <base> and their name, made by begin()
-- (a key named costs Redis and the script as much as an argument:
-- bench/instructions.sh).  In a Redis Cluster a call names all six in the
-- order below, and the generation key seventh: the Cluster checks only the
-- keys a call names, and while a slot migrates, a semaphore whose keys are
-- split between two nodes must get TRYAGAIN, not run on the half one node
-- has.  The index operations name the index alone.  A library's functions are made once, when it loads, so
-- a call pays only for the operation: all per-call state is set up anew by
-- begin().  All time comes from redis.call('TIME'); the caller's clock is
-- never used.
--
-- owner            ZSET  id -> ticket       every member: a waiter's ticket
--                                           (its arrival), a holder's grant
--                                           ticket (its fencing token)
-- timeout          ZSET  id -> deadline ms  when the member ends unless
--                                           renewed (lease or keepalive)
-- ticket           STRING                   the last ticket handed out
-- info             HASH  id -> "lease_ms|limit|since_ms|priority|tenant|
--                                           origin" (tenant '': none)
-- waiting          ZSET  id -> place        the members still in line, in
--                                           line order: ticket less
--                                           priority x AGING_US (I4)
-- state            HASH  limit   the stored limit (set_limit), if any
--                        cur     the limit in effect while there are
--                                members and no stored limit
--                        xh, xw  permits beyond one per member, of the
--                                holders and of the waiters
--                        p:<id>  a member's permits, when more than one
--                        era     the replication id of the primary that
--                                last let somebody wait (I9)
--                        rt, rb  a stored rate (set_rate): one admission
--                                every rt microseconds, rb at once
--                        rs      the rate as it was given ('10/min')
--                        tat     the rate's clock (I10), microseconds
--                        rk, rp  a stored reserve (set_reserve): rk
--                                permits kept for priority rp and up
--                                (rp absent: 0, like every 0 here)
--                        hh      permits held by the reserve's class
--                        h:<id>  "1": the holder is of that class (I11)
--                        tl      "1" while a waiter has a tenant: the
--                                line is then kept per tenant too (I12)
--                        tt      permits held by holders with a tenant
--                        wt      "1" while weights stores a weight
--                        gu      until when a grace stops the line
--                                period (I15): when it ends (ms)
--                        fz      the holders force-released and
--                                still counted (I17), if any
--                        f:<id>  "1": an administrator released that
--                                holder, which still counts (I17)
--                        ad      an adaptive limit's bounds (I16),
--                                "lo|hi"; limit is then the one the
--                                controller set last
--                        am      its controller's memory (adapt_memory)
--                        as, an  the hold times (ms) and the number of
--                                the releases since it last stepped on
--                                some (too few are kept: adapt_tick)
--                        ac      the longest hold time a release adds
--                                to as (ADAPT.CLAMP times the mean)
--                        x       "1": xh, xw, era, rt, rk, wt, gu or ad
--                                is there (I13)
-- KEYS[2] gen     STRING                   (optional) the generation of
--                                           this Redis's semaphores (in
--                                           a Cluster: of the owner's slot):
--                                           "<f><us>:<lmax>:<until>:
--                                           <lprev>:<rot>:<ul>:<ue>:
--                                           <era>" (gen_parts): f 'g'
--                                           while a grace period (I15)
--                                           lasts until ms <until>; us:
--                                           when it was made, its
--                                           identity; era: the
--                                           replication id of the
--                                           primary it was last checked
--                                           on.  No TTL: one key
--                                           per prefix, or per Cluster
--                                           slot in use, gone only when
--                                           Redis forgets.  A server's
--                                           semaphore calls name it;
--                                           acquire and gen_raise
--                                           write it.
-- <base>wake:<id>  LIST                     a waiter's wake-up: its ticket,
--                                           pushed when it is promoted
-- <base>nudge:<id> LIST                     "n0": look again at once (the
--                                           waiter was turned away: I4, I9)
-- <base>removed:<id> STRING                 "1": an administrator removed
--                                           the member (a waiter, or a
--                                           holder force-released or
--                                           released as gone); its next
--                                           look answers 'removed' and
--                                           deletes it (TTL: two minutes
--                                           and GRACE_MS)
-- <base>rline      ZSET  id -> place        with a stored reserve, the
--                                           waiters of its class, as in
--                                           waiting (I11)
-- <base>tline:<t>  ZSET  id -> place        while any waiter has a tenant
--                                           (tl): the waiters of
--                                           tenant t (t '': of none), as
--                                           in waiting (I12)
-- <base>tenant     HASH  h:<t>  permits held by tenant t (I12; "0"
--                               may stay while t waits: ZERO)
--                        g:<t>  tenant t's record while it waits: its
--                               turn, then, if its last grant while
--                               it waited is not that, "," and the
--                               grant (nothing if none); us, 65 digits
--                               each (WIDE)
--                                           (per tenant, out of the state:
--                                           the state's one read per call
--                                           stays as cheap with 100
--                                           tenants as with none)
-- <base>tq         ZSET  "<turn>t" -> held/weight   then: each tenant
--                                           with waiters, by its held
--                                           permits per weight, then its
--                                           turn (65 digits, so that ties
--                                           sort by turn: I12; and WIDE)
-- (WIDE: Redis keeps a small hash or sorted set as one packed list that
-- every access scans from the start, and switches to a hash table (and a
-- skip list) for good once a value is longer than 64 bytes.  With 100
-- tenants waiting, those scans of tq and tenant made a hand-off cost 1.5x
-- one without tenants (bench/lua_loop.sh): turns and last grants are
-- written 65 digits wide, so that both keys switch as soon as a tenant
-- waits, and cost the same with 10 tenants waiting or 1,000.  The script
-- keeps them as that text, never as numbers: printing a number, or
-- reading one back, costs more than a command does.)
-- (ZERO: a waiting tenant whose held permits fall to 0 keeps "0", instead
-- of the field being deleted and soon written again; it goes with the
-- tenant's last waiter.)
-- <base>apress     HASH  server -> "pressure|tag|ms"   an adaptive
--                                           limit's servers as they last
--                                           reported (adapt_tick, I16)
-- <base>weights    HASH  tenant -> weight   stored weights (set_weight),
--                                           1 when absent: configuration,
--                                           without a TTL (the state's wt
--                                           says it exists: no call looks
--                                           for weights that are not there)
-- (<base> is KEYS[1] without "owner": same hash tag, same Cluster slot.
-- owner to waiting are laid out as in redsem 0.1.0, which knows no state:
-- its servers see every member taking one permit.)
--
-- INVARIANTS.  They hold whenever a call of this script returns, error
-- replies included.  (A command Redis itself fails, e.g. WRONGTYPE on a key
-- that another program wrote, aborts the script: that is a key conflict
-- and the caller reports it as such.  Redis keeps what the script wrote
-- before, so I14 has every call find a conflict before its first write,
-- or leave only leftovers of the member it names, e.g. a deadline in
-- timeout of an id no longer in owner, which break I1 until that member's
-- give-back or expiry.  Every path acts then only on the member a call
-- names: a release learns that id is a member from the write that takes it
-- out of owner, before anything shared goes.)
--
--  I1 Members.  A member is in owner, timeout and info.  It is a waiter
--     while it is in waiting, and a holder otherwise.  It takes p:<id>
--     permits (1 when absent); xh and xw sum the permits beyond the first
--     of the holders and of the waiters.  So the holders take
--     (members - waiters) + xh permits.
--  I2 Nobody expired.  No member's deadline has passed: every operation
--     first drops the members whose deadline is due (O(log N + dropped)),
--     but a release that leaves others and nobody waiting (fast_release),
--     which leaves them to the next operation: that one drops them before
--     anybody is admitted or promoted, listed or counted.
--  I3 Holders fit.  A member becomes a holder only while the permits of
--     the holders plus its own are at most the limit in effect.  So the
--     holders never take more permits than the limit was when the latest
--     of them came in: lowering the limit evicts nobody and admits nobody
--     until the holders fit under it.
--  I4 First come, first served, by priority.  Nobody comes in past anybody
--     waiting: a newcomer is admitted only if all members' permits plus its
--     own fit, or if its place would be first in line and its permits fit
--     beside the holders' (or into a reserve: I11).  A waiter's place in
--     line is its ticket less its priority times AGING_US: it stands as if
--     it had come AGING_US earlier per level, so a later caller of higher
--     priority q passes a waiter of priority p only if it came less than
--     (q - p) x AGING_US after it (aging: nobody is passed for ever).
--     Promotion takes waiters in line order and stops at the first that
--     does not fit, even if smaller requests behind it would (a waiter that
--     could never fit, the limit having been lowered below its permits, is
--     dropped and told to look again).  So the first waiter does not fit.
--  I5 Key lifetime.  Every key above carries a TTL of at least the latest
--     deadline from now plus GRACE_MS, so Redis never drops the data of a
--     live member.  Once its last member is gone, a semaphore leaves
--     nothing behind but its ticket, and that only for GRACE_MS (owner,
--     timeout, info and waiting are empty then, so Redis has deleted them;
--     the state goes at once); if its last deadline passes with nobody
--     calling, at most GRACE_MS plus one lease (a minute at most) later.
--     The generation key (KEYS[2], I15) is not a semaphore's: it has no
--     TTL (one per prefix, or per Cluster slot in use); <base>apress (I16)
--     has its own, 4 x ADAPT.FRESH_MS from the last tick; a member's
--     wake, nudge and removed keys theirs (not the deadline's: they speak
--     to a member that may be gone).  The one exception is a state
--     holding a stored limit, rate, reserve or
--     wt: that is configuration, kept without a TTL, and emptied of
--     everything else (but the rate's clock) once the semaphore has no
--     member.
--  I6 Promotion window.  A promoted waiter holds for min(lease,
--     PROMOTION_WINDOW_MS) until it confirms (wait_check, give_up, or a
--     refresh: its server's keeper sends one for a waiter that took its
--     wake-up in good time, src/acquire.c); then its full lease starts.  A
--     waiter that died in line costs the line seconds, not a lease; one
--     paused past its window finds it lost.  Nobody is nudged when a
--     promotion leaves a new head of the line: every waiter looks again
--     within its own window of its last look (src/timing.h), which came
--     before the promotion, and is then told when the window ends, so a
--     promoted waiter that never confirms is noticed when its window ends
--     (by a waiter whose lease is no shorter; by any within
--     PROMOTION_WINDOW_MS).  A wake or nudge list lives as long as the place or window it
--     is about; a promoted waiter that took its wake-up has confirmed as
--     far as I9 is concerned (its session is alive).
--  I7 Tickets rise.  A ticket is larger than every earlier ticket of the
--     semaphore, and at least Redis's clock in microseconds, so tickets
--     keep rising even after the keys expired.  A caller gets one when it
--     asks and, if it waits, a new one when it is promoted: a holder's
--     ticket is from its grant, so holders' tickets rise in grant order
--     whatever the line's order, and are fencing tokens.
--  I8 One limit.  While a semaphore has members, the limit in effect is
--     the stored limit, or else the one its first member passed (cur).  A
--     caller that passes another limit is refused, and one that passes
--     none needs a stored limit: callers cannot mix limits and break each
--     other's bound.  Changing the stored limit changes the limit in
--     effect at once.
--  I9 One era.  Waiting belongs to the primary it was queued on.  A
--     failover (or a restart) gives the primary a new replication id; the
--     first caller that would wait, or is waiting, on a semaphore whose
--     era is another turns every waiter away (nudged to look again at once:
--     a live one queues again) and drops every promoted member that has not
--     confirmed: they were queued or promoted on the old primary, whose
--     later writes (their sessions' releases, give-ups and confirms) the
--     new one never saw, and would block the line for their window or
--     place.  Confirmed holders stay: dropping them could admit too many.
--     A call that is admitted at once pays nothing for this.  Only callers
--     that ask settle an era (acquire and wait_check with "settle"): those
--     whose grants wait for replicas (redsem.grant_replicas), so that the
--     old primary, which lost its replica, grants nothing more.  Without
--     that, the old primary may grant for a while after the promotion, and
--     the inherited line is what keeps the new one from granting beside it.
-- I10 Rate.  With a stored rate (one admission every T = rt us, a burst
--     of B = rb), a caller becomes a holder (admitted or promoted) only
--     if the rate lets it in as well as the limit: now >= tat - (B - 1) T,
--     and then tat = max(tat, now) + T (the generic cell rate algorithm).
--     So over any span of W us at most B + W / T callers are admitted,
--     whatever the rate was before (tat is kept across changes).  A
--     waiter the rate alone keeps out (it is first in line and fits) is
--     told when the rate will let it in, and looks again then: its reply
--     says so, and a promotion that stops at it for the rate posts it a
--     nudge with that wait (I6's lists).  Every call first promotes if the
--     rate lets somebody in (I2's housekeeping), so the line moves even if
--     nobody else calls.  The rate counts admissions, not permits.  A
--     stored rate is configuration, like a stored limit (I5).
-- I11 Reserve.  With a stored reserve (rk permits for priority rp and up;
--     under a limit L, k = min(rk, L - 1) of them, so that the rest is
--     never empty), the callers of priority rp and up are its class.  The
--     holders of the class (h:<id>, their permits hh) use the reserve
--     first; everybody else fits only in what is left of the other L - k
--     permits: a caller below rp becomes a holder only if, with it, the
--     holders below rp plus the class's permits beyond k are at most
--     L - k.  The class fits in all of L (I3).  A caller of the class may
--     pass waiters below rp into the reserve (its class then holds at
--     most k): it stands in line order only among its class (rline, the
--     same places as waiting), and nobody is passed otherwise.  Promotion
--     takes the line in order (I4); when the first waiter does not fit
--     (below rp, or, with tenants, of the class but behind another of it
--     in rline), the first of rline is promoted while it fits in the
--     reserve.  So the first waiter does not fit (its class's share), and
--     the first of rline does not fit in the reserve unless it is the
--     first waiter.  A holder keeps the class it came in with when the
--     reserve changes; removing the reserve forgets the classes.  A
--     stored reserve is configuration (I5).
-- I12 Tenants.  A caller may name a tenant; the callers that name none
--     count as one more tenant, '', of weight 1.  A tenant's held permits
--     are h:<t> in tenant (for '': all the holders' permits less tt).  The line is
--     served tenant by tenant: the first waiter is the first of the
--     tenant with waiters that holds the fewest permits per weight (ties:
--     the earlier turn: the later of its first waiter's place and its
--     last grant while it waited, so tied tenants take turns); within a
--     tenant, line order (I4).  "The first
--     waiter" in I4 and I11 means that one, and a newcomer stands first
--     only if it would be it.  While no waiter has a tenant (no tl) that
--     is simply the first of waiting, and no tenant line is kept; once
--     one has, each tenant's waiters are in tline:<t>, and tq holds one
--     entry per tenant with waiters, scored by its held permits per
--     weight, named by its turn and the tenant (tenant keeps the record
--     of each, g:<t>: its turn, and its last grant while it waited, which
--     a newcomer standing first in its line needs).  A tenant
--     alone in line gets every permit that fits (borrowing): shares are
--     decided only among tenants that wait.  Weights are configuration:
--     the weights key has no TTL (I5).
-- I13 One read.  The state has its field x ("1") exactly while it has
--     any of xh, xw, era, rt, rk, wt, gu, ad or fz (EXTRA), so that a call reads
--     limit, cur, tl, tt and x alone unless x is there: the write that
--     sets the first EXTRA field sets x, the one that deletes the last
--     deletes x (or the whole state goes).  (A
--     state without x is read as having none of them: a key conflict, or
--     a server of an earlier version writing to the same Redis, could make
--     that wrong, which is why every server of a fleet moves to a new
--     version together.)
-- I14 Nothing half-written.  A key of another program's type where the
--     script keeps one of its own (a key conflict) stops a call before it
--     writes anything: the general path reads every such key it may write
--     first (probe: owner, timeout, waiting, info, ticket, and as they are
--     in use rline, weights, tenant, tq, the line of tenant '' and, for an
--     acquire, its tenant's; a ZCARD for each sorted set, which refuses a
--     set too); a fast path reads each key before it writes it, or leaves
--     only what the member's give-back (a release) tidies; wake:, nudge:
--     keys are written over whatever is there.  Not covered:
--     the line of any other tenant, which a promotion, an expiry or a
--     give-up may write after other writes (probing every tenant's line
--     would cost a command per tenant waiting); and KEYS[2], which an
--     acquire reads and may write first of all (I15): a conflict after it
--     leaves a generation, which is the semaphores' as much as before (a
--     string there that is not one is left alone, and there is then none;
--     promotion reads it after writes, and takes a key of another type
--     there for none: gen_sync).
-- I15 Grace.  When Redis forgets (a restart without persistence,
--     FLUSHALL), holders elsewhere still run under slots it no longer
--     knows, until their keepers find them gone and stop them (src/stop.c),
--     at the latest when their leases would have ended.  So no caller is
--     admitted to a semaphore of a generation before every lease that a
--     caller who knew an earlier generation knew of (the longer of its
--     lmax and lprev), counted from when the new generation was made, is
--     over: a caller whose known generation is not the one there (another
--     us, or none there; an acquire, or a keeper's gen_raise) sets that
--     grace (until), and keeps it at least as long as the one it knew of;
--     until it ends an acquire waits in line or is told busy, no fast path
--     runs, and promotion stops (the state's gu says until when: a call
--     that names KEYS[2] makes gu agree with the generation's grace before
--     it promotes, gen_sync, so a line that was already there when the
--     grace began stops too, and only such a call may pass gu); then the
--     line moves in its order.  A
--     caller that knew none (a server new to this Redis, or in a Cluster
--     to that slot) starts no grace: a fresh Redis admits at once.  A new
--     generation carries the lease it was made for over in lprev (so a
--     second forgetting during a grace gets as long a one), lmax counts
--     the leases asked for by callers that hold or wait (a refresh that
--     lengthens a lease raises it first: gen_raise), and every
--     GEN_WINDOW_MS lprev takes lmax (during a grace, at least what is
--     left of it) and lmax starts anew (each keeper raises lmax to the
--     leases of its holds and waits every minute: a
--     slot kept for days still counts, and a lease nobody holds or waits
--     for any more stops counting within two windows).  A failover can
--     forget too: a promoted replica lacks the grants its primary had not
--     yet sent it.  So the
--     generation also notes, in ue, until when the lease of the latest
--     grant that waited for no replica (redsem.grant_replicas 0), or of a
--     refresh that lengthened one, may run (servers pass 'g' once a
--     quarter lease after they last saw it, and it moves on when half a
--     lease or less of it is left: a write per half lease), in ul the
--     longest such lease since ue last passed, and in era the primary it
--     was last checked on.  Each connection has the first acquire it
--     sends to a slot check it (INFO replication): on another primary
--     than era (promoted, a slot moved, a restart from a snapshot), if
--     there were such grants (ul), a grace as long as ul starts now, for
--     the grants the primary before may have had alone; and a caller who
--     saw a later ue than the one there (ue never goes back) proves that
--     writes were lost, and starts one too.  Grants that waited for a
--     replica need none: Sentinel and Cluster promote a replica that is
--     at least as far along.  Only acquire and gen_raise write KEYS[2]
--     (promotion reads it), and acquire's replies carry
--     the text when the caller did not know it, so that servers learn it;
--     without KEYS[2] (one key) nothing of this runs.
-- I16 Adaptive.  An adaptive limit (set_adapt: ad) is a stored limit
--     (I8, I5) that the controller moves: I3 holds as for any (lowering
--     it evicts nobody), and it always stays within its bounds.  Every
--     release of a holder (not a forced one, an expiry or a give-up) adds
--     its hold time by Redis's clock, now less its grant's since, to as
--     and an; the keeper of each server whose sessions use it (told by
--     its index touch: X4) ticks the semaphore once a second
--     (adapt_tick) with its pressure, and the first tick of an interval
--     runs adapt_step once on what the interval gathered, then empties
--     it (unless too few for a step, which are kept for the next; those
--     kept before a pause of the controller are dropped: adapt_fresh).  So
--     the fleet has one limit, moved at most once an interval, by at most
--     a stride, never out of [lo, hi]; with nothing gathered only
--     a server's pressure or new bounds move it; a server that stops
--     ticking stops counting after ADAPT.FRESH_MS.  A limit stored by hand
--     (set_limit) ends it, where it is; a keeper's compare-and-set of a
--     statement queue's cap (set_limit N if=M) leaves it alone.
-- I17 Forced.  An administrator's release of a holder (release id
--     forced) takes nothing away at once: the holder still counts, so
--     nobody is admitted beside a holder that may still run (but for
--     release id gone: the administrator says it no longer runs).  The
--     state marks it (f:<id>: as long-lived as the member, as the state
--     is) and
--     fz counts such holders.  Its refresh answers -1
--     and renews nothing (its server then stops it); its confirmation of
--     a promotion (wait_check, give_up) removes it and answers removed (a
--     waiter still waiting has run nothing; it must not queue again: a
--     marker, <base>removed:<id>, says so to a look that comes after the
--     member went).  It goes as any holder: its
--     own release once stopped, or its deadline, which its server's
--     stop comes before (I2).  remove() deletes the mark and counts fz
--     down; while fz is 0 no call looks for a mark.  A waiter released
--     so leaves the line at once.
--
-- THE INDEX.  One more key per prefix, <prefix>index (its own Cluster
-- slot), is a ZSET name -> until (ms, Redis's clock): the semaphores
-- somebody uses, for redsem_semaphores().  It is not part of any
-- semaphore's state and no semaphore operation touches it: keepers note
-- the names their servers hold or wait on (index_touch, every
-- INDEX_TOUCH_MS, until = now + ttl) and a stored limit pins its name
-- (until = inf).  In a Cluster, keepers and redsem_semaphores() also ask
-- each other node that serves their semaphores whether it may evict keys
-- (index_policy, sent with a semaphore's key, which it does not read).
--  X1 Bounded.  Entries whose until has passed are dropped at every
--     index operation that reads the index (touch, pin, list), so the
--     index holds the semaphores used within the last ttl plus the pinned
--     ones; without a pin the key itself expires ttl after the last touch.
--  X2 Only up.  A touch never lowers an until (a pin stays pinned).
--  X3 The statement queues' definitions, <prefix>{queues} (a HASH), are
--     written only by their own operations (queue_put, queue_drop,
--     queues_restore), each leaving the field '~' and no TTL (queue_open
--     and queue_open_done write only notes, '!' fields, below): '~' is gone
--     only when Redis forgot the hash; '#' counts the changes and never
--     goes down but when Redis goes back (then a server's newer copy
--     replaces it).  At most QUEUE_MAX queues; a text is opaque here (each
--     server parses it).  No change is made on definitions gone or stored
--     back while a server seen lately has a newer copy.  The servers that
--     read them are listed in <prefix>{queues}:servers and :seen, gone a
--     read's ttl after their last read.  A field '!<name>' is no queue's:
--     it notes the open limit a drop left on that queue's semaphore, due
--     for removal at its value (ms), until a keeper removed it.
--  X4 Adaptive marks.  An adaptive semaphore (I16) has a mark in the
--     index, ADAPTIVE_MARK and its name, scored -inf: X1 keeps it (a mark,
--     like a pin, keeps the key), index_list leaves it out, and
--     index_touch answers which of the names it was given are marked, so
--     that each keeper learns which of its semaphores to tick without a
--     call of its own.  adapt_note alone writes marks.
--
-- ORDER.  Lua's < on two strings collates them by Redis's locale (strcoll:
-- Redis takes LC_COLLATE from its environment, en_US.UTF-8 under many a
-- service manager), where a sorted set orders its members by bytes.  So the
-- script compares with < only strings of digits of one width (turns, WIDE),
-- which every locale orders as bytes, and anything else through
-- bytes_before().  (Under en_US 'a' < 'B', though "B" sorts before "a".)
--
-- Every semaphore operation runs through dispatch(): arguments are checked, the
-- state is read, then housekeeping() (I2, I4) runs, then the operation,
-- then finish() writes the state back and restores lifetimes (I5).  No
-- operation can return around it, except through a fast path (FAST PATHS,
-- below) that takes only calls needing none of those steps.
-- Index operations (the index key alone) run through run_index().
--
-- The timing constants are explained together with the C side's in
-- src/timing.h.

local GRACE_MS = 1000
local GRACE_TEXT = '1000'           -- (GRACE_MS as text: no conversion per call)
local PROMOTION_WINDOW_MS = 5000
-- I15: the longest lease (a day: REDSEM_MAX_LEASE_MS), the bound of a
-- generation's numbers; and the window after which a generation's lmax
-- starts anew (five minutes: GEN_WINDOW_MS in src/gen.h; src/timing.h
-- says why)
local GEN_KEEP_MS = 86400000
local GEN_WINDOW_MS = 300000
-- I15: an acquire's generation flags, as src/gen.c writes them (a table
-- look, cheaper than a pattern, for every acquire)
local GEN_FLAGS = {[''] = true, e = true, u = true, g = true, eu = true, eg = true, ug = true,
    eug = true}
local RENEW_SLACK_MS = 60000
-- A waiter's head start per level of priority (I4), and the levels allowed
local AGING_US = 1000000
local PRIORITY_MAX = 100
-- The most arguments one command is given from a long list (call_chunked).
local CHUNK = 1000

-- Per call, set by begin(): the keys, Redis's clock (NOW_TEXT: its ms as
-- a string), the state as read (S)
-- and the fields to write back (W; false: delete); the tenants' weights
-- read so far (with S.wt); the fields of the tenant hash as this call sees them (TF,
-- false: none) and those to write back (TW).
local K_OWNER, K_TIMEOUT, K_TICKET, K_INFO, K_WAITING, K_STATE, K_GEN, BASE
local NOW_MS, NOW_US, NOW_TEXT, NOW_US_TEXT, NOW_WIDE
local S, W, WEIGHTS, TF, TW

-- What this call did, for finish() (I5): the latest deadline it set, whether
-- it may have created a key (which then has no TTL yet), whether it removed
-- a member, whether it added the first member, a holder (FRESH: every key
-- is new and every deadline is this call's).  MEMBERS: how many members owner has,
-- once counted (nil: not counted since the last change it did not follow);
-- WAITERS: likewise, how many waiting has.
-- NEW_KEYS: the lines (rline, tline:, tq) this call may have created.
-- GONE, GONE_TENANT: the id a release or give-up names and its tenant, as
-- probe() read them with tenants in use (nil: not read), for remove().
local NEW_DL, CREATED, REMOVED, FRESH, MEMBERS, WAITERS, NEW_KEYS, GONE, GONE_TENANT
-- An acquire's generation (I15): whether its reply must tell it (nil: no
-- KEYS[2], or the caller knows it), and until when its grace period lasts
-- (nil: none); GEN_SYNC: the state's gu was made to agree with KEYS[2] in
-- this call (only then may promotion pass a gu: gen_sync).
local GEN, GRACE, GEN_SYNC

-- CONTENTS.  After the constants and the per-call state above, the script
-- is in sections, each one do ... end block (its body not indented), in
-- this order.  Lua 5.1 allows a function, the main chunk too, at most 200
-- locals active at once, and FUNCTION LOAD fails past that: so a
-- section's own helpers are locals of its block, gone at its end, and
-- only the names other sections use are declared here, each assigned by
-- its section's function name(...).  Calls stay calls of upvalues, as
-- cheap as those of a local function (no table lookup).  A new name goes
-- into its section, and here only if another section uses it:
-- t/005_lua_locals.pl counts the locals.  (A function may call a name of
-- any section; a table made at load, such as an entry of OPS, takes the
-- value a name has then: only a name of a section above it.)
--  1 BASICS: counts of members and waiters, texts, writes, keys
local member_count, waiter_count, follow_waiters, is_empty, held_permits, int,
    now_us_text, set, wake_key, nudge_key, removed_key, call_chunked
--  2 MEMBERS: a member's info and permits (I1), the limit in effect (I8)
local parse_info, tenant_of_info, make_info, is_member, is_waiting,
    permits_of, count_permits, limit_in_effect
--  3 RATE (I10)
local rate_open, rate_take, rate_wait_ms
--  4 RESERVE (I11)
local rline_key, of_class, fits_class, fits_reserve, class_max, note_class
--  5 TENANTS (I12): the tenant hash, tq, the lines per tenant
local tline_key, tq_key, weights_key, tenant_key, tfield, weight_of,
    tenant_held, tq_tenant, bytes_before, rescore, note_tenant, enqueue,
    dequeue, first_waiter, from_tq, would_be_first
--  6 DEADLINES, TICKETS, DEPARTURES: deadlines (I5), tickets (I7), remove()
local note_deadline, set_deadline, remove, next_ticket, turn_away
--  7 PROMOTION: I3, I4, I6, and the housekeeping every call does first (I2)
local promote, any_due, housekeeping
--  8 THE STATE: read first (I13), written back last by finish() (I5)
local stored, read_state, lifetime, note_counts, finish
--  9 ARGUMENTS: the checkers of the operations' arguments
local id_arg, count_arg, priority_arg, tenant_arg, weight_arg, limit_arg,
    read_id, read_none
-- (10 to 14) The operations, each put into OPS after its function: read,
-- which checks ARGV (a) and returns true and run's arguments (nil if they
-- are malformed); run; and, for some, a fast path (fast: given the same
-- arguments, the reply, or nil to leave the call to run).  The arguments
-- travel as values, never in a closure made per call: that cost 5,000
-- instructions a call (bench/README.md).
local OPS = {}
-- 10 ACQUIRE AND WAIT: acquire, wait_check, give_up; what a waiter is told;
-- the generation (I15)
local gen_sync
-- 11 RELEASE AND REFRESH: release, refresh, refresh_many, token
-- 12 LIST, LIMIT, SUMMARY: list, limit, summary, set_limit
-- 13 CONFIGURATION: set_rate, rate, set_reserve, reserve, set_weight,
-- tenants
-- 14 ADAPTIVE LIMITS (I16): set_adapt, adapt, adapt_tick, and the
-- controller, adapt_step
local adapt_step, adapt_memory, adapt_text, adapt_brief, adapt_end, adapt_most
-- 15 FAST PATHS: the commonest calls, tried before the general path
local fast_acquire, fast_release
-- 16 THE INDEX (X1, X2): its operations, in INDEX_OPS, and the statement
-- queues' definitions (X3), there too
local INDEX_OPS
-- 17 A CALL: begin(), probe() (I14), run_op(), dispatch(): the only way in
local dispatch

do -- 1 BASICS -------------------------------------------------------------

-- How many members the semaphore has (counted once, then followed).
function member_count()
    if MEMBERS == nil then MEMBERS = redis.call('ZCARD', K_OWNER) end
    return MEMBERS
end

-- How many members wait (counted once, then followed: remove, promote and
-- op_acquire are the only writes to waiting).
function waiter_count()
    if WAITERS == nil then WAITERS = redis.call('ZCARD', K_WAITING) end
    return WAITERS
end

-- WAITERS follows a write to waiting that added (1) or took out (-1) n ids.
function follow_waiters(n)
    if WAITERS then WAITERS = WAITERS + n end
end

-- True if the semaphore has no member left.
function is_empty()
    return member_count() == 0
end

-- The permits the holders take (I1), and how many members wait.
function held_permits()
    local waiters = waiter_count()
    return member_count() - waiters + S.xh, waiters
end

-- Integers as exact decimal strings: tostring() would print 1e+15, and
-- '%d' (a C long) is four times cheaper than '%.0f'.
function int(n)
    return string.format('%d', n)
end

-- Redis's clock in microseconds as text (made once per call).
function now_us_text()
    NOW_US_TEXT = NOW_US_TEXT or int(NOW_US)
    return NOW_US_TEXT
end

function set(field, value)
    S[field] = value
    W[field] = value
end

function wake_key(id)
    return BASE .. 'wake:' .. id
end

function nudge_key(id)
    return BASE .. 'nudge:' .. id
end

function removed_key(id)
    return BASE .. 'removed:' .. id
end

-- Run cmd on key with the arguments in list, at most CHUNK of them per
-- command (a multiple of step): unpack() fails past Lua's C stack (about
-- 8,000 values), and an expiry of that many members taking several
-- permits each would then stop the call half-way, breaking I1.
function call_chunked(cmd, key, list, step)
    local n = #list
    for first = 1, n, CHUNK do
        local last = math.min(first + CHUNK - 1, n)
        last = last - (last - first + 1) % step
        redis.call(cmd, key, unpack(list, first, last))
    end
end

end -- 1 BASICS

do -- 2 MEMBERS ------------------------------------------------------------

-- Split an info value into its fields: lease, limit, since, origin,
-- priority, tenant ('': none).
function parse_info(v)
    if not v then return nil end
    local lease, maxh, since, prio, tenant, origin =
        string.match(v, '^(%d+)|(%d+)|(%d+)|(%-?%d+)|([^|]*)|(.*)$')
    return tonumber(lease), tonumber(maxh), tonumber(since), origin, tonumber(prio), tenant
end

-- The tenant field of an info value alone ('': none), without the others'
-- conversions.
function tenant_of_info(v)
    return v and string.match(v, '^[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)|') or ''
end

function make_info(lease, maxh, since, origin, prio, tenant)
    return string.format('%d|%d|%d|%d|%s|%s', lease, maxh, since, prio, tenant, origin)
end

function is_member(id)
    return redis.call('ZSCORE', K_OWNER, id) ~= false
end

function is_waiting(id)
    return redis.call('ZSCORE', K_WAITING, id) ~= false
end

-- A member's permits (I1): one unless the state says more.
function permits_of(id)
    if S.xh + S.xw == 0 then return 1 end
    if W['p:' .. id] ~= nil then return tonumber(W['p:' .. id]) or 1 end
    local v = redis.call('HGET', K_STATE, 'p:' .. id)
    local p = tonumber(v)
    if v and not (p and p >= 1 and p <= 2^53 and p % 1 == 0) then
        S.bad = S.bad or 'p:<id>'       -- (as state_count: nobody promoted)
        return 1
    end
    return p or 1
end

-- Count p permits in (+1) or out (-1) of the holders' or waiters' excess.
function count_permits(waiting, p, sign)
    local field = waiting and 'xw' or 'xh'
    if p > 1 then set(field, math.max(S[field] + sign * (p - 1), 0)) end
end

-- The limit in effect (I8), or nil; members: whether there are any.
function limit_in_effect(members)
    if S.limit then return S.limit end
    if members then return S.cur end
    return nil
end

end -- 2 MEMBERS

do -- 3 RATE ---------------------------------------------------------------

-- I10: the earliest time (us) the rate lets the next caller in (or the
-- past, if it lets one in now).
local function rate_opens()
    return (S.tat or 0) - ((S.rb or 1) - 1) * S.rt
end

-- I10: true if the rate, if any, lets one more caller in now.
function rate_open()
    return not S.rt or NOW_US >= rate_opens()
end

-- I10: a caller is let in: the next comes T later (a burst less one).
function rate_take()
    if S.rt then set('tat', math.max(S.tat or 0, NOW_US) + S.rt) end
end

-- I10: ms until the rate lets the next caller in (0: it does now).
function rate_wait_ms()
    return math.max(math.ceil((rate_opens() - NOW_US) / 1000), 0)
end

end -- 3 RATE

do -- 4 RESERVE ------------------------------------------------------------

-- I11: the line of the reserve's class.
function rline_key()
    return BASE .. 'rline'
end

-- I11: the permits the reserve keeps under limit (never all of them).
local function reserved(limit)
    return math.min(S.rk or 0, math.max(limit - 1, 0))
end

-- I11: true if a caller of priority prio is of the reserve's class.
function of_class(prio)
    if not S.rk then return false end
    return prio >= S.rp
end

-- I3, I11: true if p more permits of a caller of priority prio fit beside
-- the held permits under limit: all of it for the reserve's class; for
-- anybody else what the reserve leaves, where the class counts only with
-- its permits beyond the reserve.
function fits_class(held, p, prio, limit)
    if held + p > limit then return false end
    if not S.rk or of_class(prio) then return true end
    local k = reserved(limit)
    return held - S.hh + math.max(S.hh - k, 0) + p <= limit - k
end

-- I11: true if p more permits of the reserve's class fit in the reserve.
function fits_reserve(held, p, limit)
    return held + p <= limit and S.hh + p <= reserved(limit)
end

-- I11: the most permits a caller of priority prio can ever be granted.
function class_max(prio, limit)
    if not S.rk or of_class(prio) then return limit end
    return limit - reserved(limit)
end

-- I11: id, of priority prio, became a holder of p permits: note its class.
function note_class(id, p, prio)
    if of_class(prio) then
        set('h:' .. id, 1)
        set('hh', S.hh + p)
    end
end

end -- 4 RESERVE

do -- 5 TENANTS ------------------------------------------------------------

-- I12: the line of tenant t ('': the callers without one), and the
-- tenants with waiters.
function tline_key(t)
    return BASE .. 'tline:' .. t
end

function tq_key()
    return BASE .. 'tq'
end

function weights_key()
    return BASE .. 'weights'
end

function tenant_key()
    return BASE .. 'tenant'
end

-- I12: a field of the tenant hash as this call sees it (nil: none).  A
-- tenant's two fields are read together, once.
function tfield(f)
    if TF[f] == nil then
        local t = string.sub(f, 3)
        local h, g = 'h:' .. t, 'g:' .. t
        local v = redis.call('HMGET', tenant_key(), h, g)
        if TF[h] == nil then TF[h] = tonumber(v[1]) or false end
        if TF[g] == nil then TF[g] = v[2] or false end     -- (its record, as text)
        if v[1] or v[2] then TF[true] = true end    -- (it exists: it has a TTL)
    end
    return TF[f] or nil
end

-- I12: set a field of the tenant hash (nil or 0: none), written back by
-- finish().
local function tset(f, v)
    if v == 0 then v = nil end
    TF[f], TW[f] = v or false, v or false
end

-- I12: a tenant's weight: 1 unless one is stored (read once per call,
-- and only if any is: wt).
function weight_of(t)
    if t == '' or not S.wt then return 1 end
    local w = WEIGHTS[t]
    if not w then
        w = tonumber(redis.call('HGET', weights_key(), t)) or 1
        WEIGHTS[t] = w
    end
    return w
end

-- I12: the permits tenant t holds ('': the holders without a tenant).
function tenant_held(t)
    if t == '' then return held_permits() - S.tt end
    return tfield('h:' .. t) or 0
end

-- Small whole numbers as text, each formatted once (tq_score).
local SMALL = {}

-- I12: a tenant's rank in tq: held permits per weight (exact to the bit;
-- '%d' when whole, as '%.17g' would print it, at a third of the cost).
local function tq_score(t)
    local r = tenant_held(t) / weight_of(t)
    if r % 1 ~= 0 then return string.format('%.17g', r) end
    local text = SMALL[r]
    if not text then
        text = int(r)
        if r < 1000 then SMALL[r] = text end
    end
    return text
end

-- I12: tenant t waits: a held count of it that falls to 0 now is written
-- as '0' instead of deleted (ZERO; '' has no count of its own).
local function keep_zero(t)
    local f = 'h:' .. t
    if TW[f] == false and t ~= '' then TF[f], TW[f] = 0, '0' end
end

-- The zeros that make n digits 65 wide, each made once (wide).
local ZEROS = {}

-- I12: a whole, positive number of microseconds (a place, a grant; a
-- number, or its text) as a turn: its digits, 65 wide (WIDE), so that
-- turns compare as text.  Text of 16 characters (a place as Redis prints
-- a score, from 2001 to 2286) is digits already: only a shorter one (from
-- 7.2 on, Redis prints a round number such as 1e+15 so) is read and
-- printed again.
local function wide(v)
    if type(v) ~= 'string' or #v ~= 16 then v = int(tonumber(v)) end
    local z = ZEROS[#v]
    if not z then
        z = string.rep('0', 65 - #v)
        ZEROS[#v] = z
    end
    return z .. v
end

-- Redis's clock as a turn (made once per call).
local function now_wide()
    NOW_WIDE = NOW_WIDE or wide(now_us_text())
    return NOW_WIDE
end

-- I12: a tenant's entry in tq: its turn, then its name (WIDE).
local function tq_member(turn, t)
    return turn .. t
end

-- I12: the tenant of an entry in tq.
function tq_tenant(q)
    return string.sub(q, 66)
end

-- True if string a sorts before b in a sorted set: by bytes, whatever the
-- locale (ORDER).
function bytes_before(a, b)
    for i = 1, math.min(#a, #b) do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then return x < y end
    end
    return #a < #b
end

-- I12: true if tq's entry of turn and tenant t sorts before entry q (of
-- the same score): the earlier turn, then the name, by bytes (ORDER).
local function tq_before(turn, t, q)
    local other = string.sub(q, 1, 65)
    if turn ~= other then return turn < other end
    return bytes_before(t, tq_tenant(q))
end

-- I12: the place of the first of tenant t's line, as a turn (nil: none),
-- and its id.
local function tline_head(t)
    local h = redis.call('ZRANGE', tline_key(t), '0', '0', 'WITHSCORES')
    return h[2] and wide(h[2]), h[1]
end

-- I12: tenant t's turn: the later of its first waiter's place (head) and
-- its last grant while it waited (nil without a head; both turns).
local function turn_of(head, last)
    return head and (last and last > head and last or head)
end

-- I12: a waiting tenant's record, g:<t>: its turn, and its last grant
-- while it waited (false: none) if that is not its turn.
local function make_record(turn, last)
    if last == turn then return turn end
    return turn .. ',' .. (last or '')
end

-- I12: a record's turn and last grant (false: none).
local function read_record(v)
    if #v == 65 then return v, v end
    local last = string.sub(v, 67)
    return string.sub(v, 1, 65), last ~= '' and last
end

-- I12: tenant t's new turn when its line is as it was (true: the same as
-- old; nil: it does not wait).  A grant makes it the later of now and its
-- first waiter's place, which is now unless a place is later than now
-- (a negative priority): only then is it looked up.
local function same_line_turn(t, old, granted)
    if not old then return nil end
    if not granted then return old end
    if old <= now_wide() then return now_wide() end
    return turn_of(tline_head(t), now_wide())
end

-- I12: set tenant t's entry in tq and its record from its line and its
-- held permits (granted: it was granted a permit now, its new last
-- grant).  known: the place of its first waiter now, if the caller knows
-- it (false: it has none; true: its line is as it was; nil: look).  was:
-- its turn in tq, if the caller read it there (then a grant needs nothing
-- of its record).  Places and turns as wide text.  (The new entry comes
-- first: tq emptied for a moment would be made anew without a TTL.)
-- True if it waits.
local function requeue(t, granted, known, was)
    local old, last = was, nil
    if not (was and granted) then
        local rec = tfield('g:' .. t)
        if rec then old, last = read_record(rec) end
    end
    if granted then last = now_wide() end
    local turn
    if known == true then
        turn = same_line_turn(t, old, granted)
    else
        if known == nil then known = tline_head(t) end
        turn = turn_of(known or nil, last)
    end
    if turn then
        redis.call('ZADD', tq_key(), tq_score(t), tq_member(turn, t))
        local rec = make_record(turn, last)
        if rec ~= TF['g:' .. t] then tset('g:' .. t, rec) end
        keep_zero(t)
    else
        if old then tset('g:' .. t, nil) end
        if TF['h:' .. t] == 0 then tset('h:' .. t, nil) end
    end
    if old and old ~= turn then redis.call('ZREM', tq_key(), tq_member(old, t)) end
    return turn ~= nil
end

-- I12: tenant t's held permits changed (granted: it was granted one): so
-- does its rank, if it waits.  True if it does.
function rescore(t, granted)
    return S.tl and requeue(t, granted, true)
end

-- I12: tenant t ('': none) holds dp permits more (or fewer).
function note_tenant(t, dp)
    if t == '' then return end
    tset('h:' .. t, math.max(tenant_held(t) + dp, 0))
    set('tt', math.max(S.tt + dp, 0))
end

-- I12: a tenant's line made now gets a TTL at once, as long as the
-- timeout key's (GRACE_MS if that is new too; finish() gives it the one
-- it needs): should another program's key of the wrong type stop the call
-- later, the line still goes by itself.
local function made_line(k)
    NEW_KEYS[#NEW_KEYS + 1] = k
    local pttl = redis.call('PTTL', K_TIMEOUT)
    redis.call('PEXPIRE', k, int(pttl > 0 and pttl or GRACE_MS))
end

-- I12: id, of tenant t, joined waiting at place (text): into its tenant's line,
-- if lines are kept per tenant; the first waiter with a tenant starts
-- them, the line so far becoming tenant ''s.
function enqueue(id, place, t)
    if not S.tl then
        if t == '' then return end
        -- (probe() has read every key the lines need: I14)
        set('tl', 1)
        local line, add = redis.call('ZRANGE', K_WAITING, '0', '-1', 'WITHSCORES'), {}
        for i = 1, #line, 2 do
            if line[i] ~= id then
                add[#add + 1] = line[i + 1]
                add[#add + 1] = line[i]
            end
        end
        if #add > 0 then
            call_chunked('ZADD', tline_key(''), add, 2)
            NEW_KEYS[#NEW_KEYS + 1] = tline_key('')
            requeue('', false)
        end
        NEW_KEYS[#NEW_KEYS + 1] = tq_key()
    end
    local k = tline_key(t)
    redis.call('ZADD', k, place, id)
    -- (behind its tenant's first waiter, it changes nothing in tq: a
    -- tenant's rank is its held permits, and its turn; its line's head is
    -- looked at first, without scores, as a score costs a number
    -- conversion: a constant cost, where ZRANK scans a short line)
    if redis.call('ZRANGE', k, '0', '0')[1] ~= id then return end
    -- (a tenant has a record while it waits: without one, its line is new)
    if not tfield('g:' .. t) then made_line(k) end
    requeue(t, false, wide(place))
end

-- I12: with no tenant's line left (tq holds at most the line of those
-- naming none), the line is no longer kept per tenant.
local function end_lines()
    local q = redis.call('ZRANGE', tq_key(), '0', '1')
    if q[2] or (q[1] and tq_tenant(q[1]) ~= '') then return end
    tset('g:', nil)
    redis.call('DEL', tq_key(), tline_key(''))
    set('tl', false)
end

-- I12: id, of tenant t, left waiting (granted: promoted, else gone); the
-- last waiter with a tenant ends the lines per tenant.  (A waiter that
-- was not first and got nothing leaves tq as it was; only a first
-- waiter's leaving can empty its tenant's line; a grant to another moves
-- its tenant's turn.)  was: its tenant's turn in tq, if the caller knows
-- that id is the first of its tenant's line; after: then, the place of
-- the waiter behind it, as a turn (false: none).
function dequeue(id, t, granted, was, after)
    if not S.tl then return end
    local k = tline_key(t)
    local first = was ~= nil or redis.call('ZRANGE', k, '0', '0')[1] == id
    redis.call('ZREM', k, id)
    local known = true              -- (not first: its line's head stays)
    if was ~= nil then known = after elseif first then known = nil end
    if (granted or first) and not requeue(t, granted, known, was) and t ~= '' then
        end_lines()
    end
end

-- I4, I12: the first waiter's id (nil if none); with lines kept per
-- tenant, also its tenant, the place of the waiter behind it there, as a
-- turn (false: none), and its tenant's entry in tq and score.
function first_waiter()
    if not S.tl then
        return redis.call('ZRANGE', K_WAITING, '0', '0')[1], nil
    end
    local q = redis.call('ZRANGE', tq_key(), '0', '0', 'WITHSCORES')
    if not q[1] then return nil, nil end
    local t = tq_tenant(q[1])
    local h = redis.call('ZRANGE', tline_key(t), '0', '1', 'WITHSCORES')
    return h[1], t, h[4] and wide(h[4]) or false, q[1], tonumber(q[2])
end

-- I12: tenant t's turn, as its entry q in tq, scored score, names it;
-- and its held permits (its score times its weight), taken instead of a
-- read of the tenant hash when its first waiter is promoted (I12 keeps
-- them equal; the hash exists: it keeps t's record).  '' has no count of
-- its own (tenant_held), so none is noted for it.
function from_tq(t, q, score)
    local h = 'h:' .. t
    if TF[h] == nil and t ~= '' then TF[h] = math.floor(score * weight_of(t) + 0.5) end
    TF[true] = true
    return string.sub(q, 1, 65)
end

-- I4, I12: true if a newcomer of tenant t at place would be the first
-- waiter: first of its tenant's line, and its tenant first of those that
-- wait (fewest held permits per weight, then the earliest turn: for a
-- tenant without waiters, the newcomer's place).
function would_be_first(place, t)
    if not S.tl then
        local h = redis.call('ZRANGE', K_WAITING, '0', '0', 'WITHSCORES')
        if not h[2] then return false end
        if t == '' then return place < tonumber(h[2]) end
        local s, hs = tonumber(tq_score(t)), tonumber(tq_score(''))
        return s < hs or (s == hs and place < tonumber(h[2]))
    end
    local q = redis.call('ZRANGE', tq_key(), '0', '0', 'WITHSCORES')
    if not q[2] then return false end
    local own = tline_head(t)
    place = wide(place)
    local turn = place
    if own then     -- its tenant waits: it must come first there
        if own <= place then return false end
        if tq_tenant(q[1]) == t then return true end
        local _, last = read_record(tfield('g:' .. t) or '')
        turn = turn_of(place, last or nil)           -- (as requeue)
    end
    local s, hs = tonumber(tq_score(t)), tonumber(q[2])
    return s < hs or (s == hs and tq_before(turn, t, q[1]))
end

end -- 5 TENANTS

do -- 6 DEADLINES, TICKETS, DEPARTURES -------------------------------------

-- Note a deadline this call set, for finish() (I5).
function note_deadline(deadline)
    if not NEW_DL or deadline > NEW_DL then NEW_DL = deadline end
end

-- Set a member's deadline (xx: only if it is one), noting it for finish().
function set_deadline(id, deadline, xx)
    if xx then
        redis.call('ZADD', K_TIMEOUT, 'XX', int(deadline), id)
    else
        redis.call('ZADD', K_TIMEOUT, int(deadline), id)
    end
    note_deadline(deadline)
end

-- Forget everything about id: true if it was a waiter, false if a holder,
-- nil if it was no member (whatever was left of it goes all the same).
function remove(id, tenant)
    local p = permits_of(id)
    local t = tenant or ''
    if id == GONE and not tenant then           -- (probe() read it)
        t = GONE_TENANT
    elseif (S.tt > 0 or S.tl) and not tenant then   -- (it may have one)
        t = tenant_of_info(redis.call('HGET', K_INFO, id))
    end
    local member = redis.call('ZREM', K_OWNER, id) == 1
    local waiting = redis.call('ZREM', K_WAITING, id) == 1
    if waiting then follow_waiters(-1) end
    if member then
        REMOVED = true
        if MEMBERS then MEMBERS = math.max(MEMBERS - 1, 0) end
        count_permits(waiting, p, -1)
        if S.fz > 0 then            -- I17: a forced holder is gone
            local f = 'f:' .. id
            local mark = W[f]
            if mark == nil then mark = redis.call('HGET', K_STATE, f) end
            if mark then
                set('fz', S.fz - 1)
                set(f, false)
            end
        end
    end
    if S.hh > 0 then                -- I11: a holder of the reserve's class
        local f = 'h:' .. id
        local class = W[f]
        if class == nil then class = redis.call('HGET', K_STATE, f) end
        if class then
            if member and not waiting then set('hh', math.max(S.hh - p, 0)) end
            set(f, false)
        end
    end
    if S.rk then redis.call('ZREM', rline_key(), id) end
    if member then                  -- I12
        if waiting then
            dequeue(id, t, false)
        else
            note_tenant(t, -p)
            rescore(t, false)
        end
    end
    if p > 1 then set('p:' .. id, false) end
    redis.call('ZREM', K_TIMEOUT, id)
    redis.call('HDEL', K_INFO, id)
    redis.call('DEL', wake_key(id), nudge_key(id))
    if member then return waiting end
    return nil
end

-- I7: the next ticket, and the last one (false if none): Redis's clock in
-- microseconds, written in the same command that reads the last ticket;
-- written again, as the last plus one, in the rare case that is not larger
-- (the clock stepped back, or two calls in one microsecond).  ttl: the
-- key's new TTL (ms, a string), or nil to keep the one it has.
function next_ticket(ttl)
    local ticket = now_us_text()
    local last
    if ttl then
        last = redis.call('SET', K_TICKET, ticket, 'PX', ttl, 'GET')
    else
        last = redis.call('SET', K_TICKET, ticket, 'KEEPTTL', 'GET')
    end
    if last and (tonumber(last) or 0) >= NOW_US then
        ticket = int((tonumber(last) or 0) + 1)
        if ttl then
            redis.call('SET', K_TICKET, ticket, 'PX', ttl)
        else
            redis.call('SET', K_TICKET, ticket, 'KEEPTTL')
        end
    end
    return ticket, last
end

-- A waiter that takes more permits than the limit now is (it was lowered)
-- would block the line for good: it leaves it, and is told to look again
-- at once (it finds itself lost, asks again and is refused).
function turn_away(id)
    local deadline = tonumber(redis.call('ZSCORE', K_TIMEOUT, id)) or NOW_MS
    remove(id)
    redis.call('RPUSH', nudge_key(id), 'n0')
    redis.call('PEXPIRE', nudge_key(id), int(math.max(deadline - NOW_MS, 0) + GRACE_MS))
end

end -- 6 DEADLINES, TICKETS, DEPARTURES

do -- 7 PROMOTION ----------------------------------------------------------

-- Replace the message on one of a waiter's lists, living as long as its
-- place (or its promotion window): its deadline, if the caller just set
-- it, or as it stands.
local function post(wk, id, message, deadline)
    deadline = deadline or tonumber(redis.call('ZSCORE', K_TIMEOUT, id))
    redis.call('DEL', wk)
    redis.call('RPUSH', wk, message)
    redis.call('PEXPIRE', wk, int(math.max(deadline - NOW_MS, 0) + GRACE_MS))
end

-- A limit lowered, made adaptive below it or cut by a reserve: every
-- waiter that can never fit now (more permits than the most its class may
-- hold), wherever it is in line, is turned away at once; promotion alone
-- meets only the first.  (With no waiter of more than one permit and no
-- reserve, none can be: every limit is 1 at least.)
local function turn_away_unfit()
    if S.xw == 0 and not S.rk then return end
    local line = redis.call('ZRANGE', K_WAITING, '0', '-1')
    for first = 1, #line, CHUNK do  -- (their info, CHUNK at a time)
        local ids = {unpack(line, first, math.min(first + CHUNK - 1, #line))}
        local infos = redis.call('HMGET', K_INFO, unpack(ids))
        for j, id in ipairs(ids) do
            local lease, maxh, _, _, prio = parse_info(infos[j])
            local limit = limit_in_effect(true) or maxh
            if lease and limit and permits_of(id) > class_max(prio or 0, adapt_most(limit)) then
                turn_away(id)
            end
        end
    end
end

-- I3, I4, I6, I7, I11, I12: turn first waiters into holders while their
-- permits fit; each gets a grant ticket (its fencing token), the
-- promotion window and a wake-up carrying the ticket.  Once a first
-- waiter does not fit (below a reserve's class, or, with tenants, of it
-- but not the first of its line), only the first of the class may still
-- come in, into the reserve.
function promote(sweep)
    if S.bad then return end        -- (counts another program wrote)
    if sweep then turn_away_unfit() end
    -- I15: a grace begun since (run_op synced a line that had one)
    if K_GEN and not GEN_SYNC and waiter_count() > 0 then gen_sync() end
    if S.gu then                    -- I15: nobody comes in before it ends
        if NOW_MS < S.gu or not GEN_SYNC then return end
        set('gu', false)
    end
    local waiters = waiter_count()  -- (a bound: the loop's own count)
    local line = K_WAITING
    while waiters > 0 do
        local head, t, after, q, score
        if line == K_WAITING then
            head, t, after, q, score = first_waiter()
        else
            head = redis.call('ZRANGE', line, '0', '0')[1]
        end
        if not head then return end
        local lease, maxh, _, origin, prio, tenant = parse_info(redis.call('HGET', K_INFO, head))
        local limit = limit_in_effect(true) or maxh
        local p = permits_of(head)
        local held = member_count() - waiters + S.xh
        prio = prio or 0
        if not lease or not is_member(head) then
            remove(head, t)         -- not a whole member (I1): drop it
            waiters = waiters - 1
        elseif p > class_max(prio, adapt_most(limit)) then
            turn_away(head)         -- can never fit: let it find out
            waiters = waiters - 1
        elseif line == K_WAITING and not fits_class(held, p, prio, limit) then
            -- I11: the class may pass it (I12: a first waiter of the class
            -- is the first of rline only while no tenant orders the line)
            if not S.rk or (of_class(prio) and not S.tl) then return end
            line = rline_key()
        elseif line ~= K_WAITING and not fits_reserve(held, p, limit) then
            return
        elseif not rate_open() then
            -- I10: it fits, but must wait for the rate: tell it when
            post(nudge_key(head), head, 'n' .. int(rate_wait_ms()))
            return
        else
            local window = math.min(lease, PROMOTION_WINDOW_MS)
            local ticket, last = next_ticket()
            if not last then CREATED = true end     -- the ticket key was gone
            rate_take()
            redis.call('ZADD', K_OWNER, 'XX', ticket, head)
            follow_waiters(-redis.call('ZREM', K_WAITING, head))
            if S.rk then redis.call('ZREM', rline_key(), head) end
            waiters = waiters - 1
            count_permits(true, p, -1)
            count_permits(false, p, 1)
            note_class(head, p, prio)
            local was = nil         -- (the first of its tenant's line)
            if q and t == tenant then was = from_tq(t, q, score) end
            note_tenant(tenant, p)
            dequeue(head, tenant, true, was, after)
            set_deadline(head, NOW_MS + window, false)
            redis.call('HSET', K_INFO, head, make_info(lease, maxh, NOW_MS, origin, prio, tenant))
            post(wake_key(head), head, ticket, NOW_MS + window)
            -- (no permit left: nobody behind it can fit)
            if limit_in_effect(true) and member_count() - waiters + S.xh >= limit then return end
        end
    end
end

-- True if a member's deadline is due (I2): then a fast path leaves the
-- call to the general one, whose housekeeping drops it.
function any_due()
    return redis.call('ZCOUNT', K_TIMEOUT, '-inf', NOW_TEXT) > 0
end

-- I2: drop every member whose deadline is due (dead: their ids, as probe()
-- read them); how many there were.
local function expire(dead)
    for i = 1, #dead do
        remove(dead[i])
    end
    return #dead
end

-- I2, I4, I10, I15: expire (due: the members probe() read as due);
-- promote if anybody left, if the rate lets somebody in, or if a grace
-- period ended (otherwise the first waiter still does not fit: every
-- other change promotes by itself).
function housekeeping(due)
    local dropped = expire(due)
    if (dropped > 0 or (S.rt and rate_open()) or (S.gu and GEN_SYNC and NOW_MS >= S.gu)) and
       not is_empty() then
        promote()
    end
end

end -- 7 PROMOTION

do -- 8 THE STATE ----------------------------------------------------------

-- The state's configuration (I5): kept without a TTL while any is stored.
local CONFIG = {'limit', 'rt', 'rb', 'rs', 'tat', 'rk', 'rp', 'wt', 'ad', 'am', 'as', 'an', 'ac'}
-- The state's fields a call reads only when x says that one may be there
-- (EXTRA: read_state), and, of those, the configuration's.
local EXTRA = {'xh', 'xw', 'era', 'rt', 'rk', 'wt', 'gu', 'ad', 'fz'}
local CONFIG_EXTRA = {'rt', 'rk', 'wt', 'ad'}

-- True if the state stores a limit, a rate, a reserve or weights (I5).
function stored()
    return not not (S.limit or S.rt or S.rk or S.wt or S.ad)
end

-- True if this call stored configuration, to be kept without a TTL (I5).
local function stored_now()
    return not not (W.limit or W.rt or W.rk or W.wt or W.ad)
end

-- The configuration fields the state has (I5), and how many.
local function config()
    local c, n = {}, 0
    for _, f in ipairs(CONFIG) do
        if S[f] and S[f] ~= 0 then c[f], n = S[f], n + 1 end
    end
    for _, f in ipairs(CONFIG_EXTRA) do
        if c[f] then c.x, n = '1', n + 1; break end
    end
    return c, n
end

-- The state rebuilt from its configuration c alone: S forgets what went
-- with the members (their counts, the limit in effect, the era, the lines).
local function keep_config(c)
    S.cur, S.xh, S.xw, S.era, S.hh, S.tl, S.tt, S.gu, S.fz = nil, 0, 0, nil, 0, false, 0, nil, 0
    S.x = c.x ~= nil
end

-- I13: the state's x among the fields to write, if it must change: there
-- while any EXTRA field is once they are written (S follows them: set()),
-- so written with the first and deleted with the last.
local function mark_extra(fields)
    local left = false
    for _, f in ipairs(EXTRA) do
        local v = S[f]
        if v and v ~= 0 then left = true; break end
    end
    if left ~= S.x then fields.x, S.x = left and '1', left end
end

-- Write fields (false or 0: delete) to hash key, new values first (a hash
-- emptied for a moment would be made anew without a TTL); how many it set.
local function write_fields(key, fields)
    local hset, hdel = {}, {}
    for field, value in pairs(fields) do
        if value and value ~= 0 then
            hset[#hset + 1] = field
            hset[#hset + 1] = type(value) == 'number' and int(value) or value
        else
            hdel[#hdel + 1] = field
        end
    end
    call_chunked('HSET', key, hset, 2)
    call_chunked('HDEL', key, hdel, 1)
    return #hset / 2
end

-- A count the state keeps (a limit, the permits of all, how many, a rate's
-- interval, burst and clock, a reserve's permits), read
-- as before (tonumber: nil if absent); one that is not a whole number from
-- 0 up that Lua counts exactly (nan, inf, -3, 1.5, text: another program
-- wrote it) names its field in S.bad, and then nobody is admitted (run_op
-- refuses an acquire, 38000; promote() promotes nobody) while what keeps
-- or gives back runs on.
-- (most <= 2^53, exact; a rate's clock, in us, may run further ahead
-- of now: max, 2^62)
local function state_count(v, field, max)
    local n = tonumber(v)
    if v and not S.bad and not (n and n >= 0 and n <= (max or 2^53) and n % 1 == 0) then
        S.bad = field
    end
    return n
end

-- Read the state: the stored limit, the limit in effect, the excesses,
-- the rate, the reserve.  A state without a TTL (it stores a limit, rate
-- or reserve) can outlive the members' keys if they expired with nobody calling (I5):
-- then only the configuration is kept.
function read_state()
    local v = redis.call('HMGET', K_STATE, 'limit', 'cur', 'tl', 'tt', 'x')
    S = {xh = 0, xw = 0, hh = 0, tl = v[3] ~= false, x = v[5] ~= false, fz = 0}
    S.limit, S.cur, S.tt = state_count(v[1], 'limit'), state_count(v[2], 'cur'), state_count(v[4], 'tt') or 0
    if S.x then                     -- (I13: EXTRA fields only if x says so)
        -- (in EXTRA's order, then the rest of an adaptive limit, I16: one
        -- call, as every operation on an adaptive semaphore needs them)
        v = redis.call('HMGET', K_STATE, 'xh', 'xw', 'era', 'rt', 'rk', 'wt', 'gu', 'ad',
                       'fz', 'am', 'as', 'an', 'ac')
        S.xh, S.xw = state_count(v[1], 'xh') or 0, state_count(v[2], 'xw') or 0
        S.era = v[3] or nil
        S.rt, S.rk, S.wt = state_count(v[4], 'rt'), state_count(v[5], 'rk'), v[6] and 1 or nil
        S.gu, S.ad, S.fz = tonumber(v[7]), v[8] or nil, state_count(v[9], 'fz') or 0
        if S.ad then
            S.am, S.as, S.an, S.ac = v[10] or nil, tonumber(v[11]) or 0, tonumber(v[12]) or 0, tonumber(v[13])
        end
    end
    if S.rt then                    -- the rest of a rate, only if there is one
        v = redis.call('HMGET', K_STATE, 'rb', 'tat', 'rs')
        S.rb, S.tat, S.rs = state_count(v[1], 'rb'), state_count(v[2], 'tat', 2^62), v[3] or nil
    end
    if S.rk then                    -- the rest of a reserve (I11)
        v = redis.call('HMGET', K_STATE, 'rp', 'hh')
        S.rp, S.hh = tonumber(v[1]) or 0, state_count(v[2], 'hh') or 0
    end
    if stored() and (S.cur or S.xh + S.xw + S.hh + S.tt + S.fz > 0 or S.tl) and
       redis.call('EXISTS', K_OWNER) == 0 then
        redis.call('DEL', K_STATE, tenant_key())
        local c = config()
        write_fields(K_STATE, c)
        keep_config(c)
    end
end

-- Write the changed state fields back.  With no member left, only the
-- configuration remains (I5).
local function store_state(empty)
    if empty then
        if not stored() then
            redis.call('DEL', K_STATE)
            return
        end
        local c, n = config()
        if redis.call('HLEN', K_STATE) > n then
            redis.call('DEL', K_STATE)
            W = c
            keep_config(c)
        end
    end
    mark_extra(W)
    write_fields(K_STATE, W)
end

-- I12: write the changed fields of the tenant hash back.  True if it may
-- have been made now (not if this call found a field in it).
local function store_tenants()
    if next(TW) == nil then return false end
    return write_fields(tenant_key(), TW) > 0 and not TF[true]
end

-- The TTL a renewal gives the keys when the latest deadline is away ms
-- from now: GRACE_MS past it, plus as much again as it is away (at most
-- RENEW_SLACK_MS), so that most calls need none.
function lifetime(away)
    return away + GRACE_MS + math.min(away, RENEW_SLACK_MS)
end

-- The TTL the keys need after this call, or nil if the one they have is
-- enough (I5): it must cover the latest deadline this call set; a key this
-- call may have created has none yet.  A renewal covers the latest
-- deadline of all (lifetime).  *have: the TTL the keys have, when it was
-- read.
local function ttl_needed()
    local need = math.max((NEW_DL or NOW_MS) - NOW_MS, 0) + GRACE_MS
    local pttl = -1
    if not CREATED then pttl = redis.call('PTTL', K_TIMEOUT) end
    if pttl >= need then return nil, pttl end
    local last = {}
    if not FRESH then last = redis.call('ZRANGE', K_TIMEOUT, '-1', '-1', 'WITHSCORES') end
    local away = math.max(math.max(tonumber(last[2] or 0), NEW_DL or 0) - NOW_MS, 0)
    return lifetime(away), pttl
end

-- The state's counts as read (a call may move one and back: a release
-- that promotes a waiter of another tenant leaves tt as it was).
local COUNTS = {'xh', 'xw', 'hh', 'tt'}
local READ = {}

-- The state's counts as read, for finish() (not needed by a fast path).
function note_counts()
    for _, f in ipairs(COUNTS) do READ[f] = S[f] end
end

-- I5: write the state back and see to the keys' lifetimes: renewed when
-- this call needs it (ttl_needed); once the last member is gone, only the
-- ticket is left, for GRACE_MS (and a waiter's nudge or removed marker,
-- each for its own TTL; owner, timeout, info and waiting are empty,
-- so Redis has deleted them: I1), and the state goes at once unless it
-- stores a limit.  The state goes with the other keys, or has no TTL while
-- it stores a limit.  A FRESH call made every key but waiting (its first
-- member holds: one that waits, kept out by a rate, clears FRESH).
function finish()
    for _, f in ipairs(COUNTS) do   -- (a count back where it was: no write)
        if W[f] ~= nil and (W[f] or 0) == READ[f] then W[f] = nil end
    end
    local touched = next(W) ~= nil
    local empty = (REMOVED or touched) and is_empty()
    local ttl, have
    store_state(empty)
    if store_tenants() then NEW_KEYS[#NEW_KEYS + 1] = tenant_key() end
    if empty then
        redis.call('PEXPIRE', K_TICKET, GRACE_TEXT)
        if stored() and stored_now() then redis.call('PERSIST', K_STATE) end
        return
    end
    if CREATED or NEW_DL or touched or #NEW_KEYS > 0 then
        ttl, have = ttl_needed()
    end
    if ttl then
        for _, k in ipairs({K_OWNER, K_TIMEOUT, K_TICKET, K_INFO, K_WAITING}) do
            if not (FRESH and k == K_WAITING) then
                redis.call('PEXPIRE', k, int(ttl))
            end
        end
        if S.rk then redis.call('PEXPIRE', rline_key(), int(ttl)) end
        if S.tt > 0 or S.tl then redis.call('PEXPIRE', tenant_key(), int(ttl)) end
        if S.tl then                -- I12: every tenant's line
            for _, q in ipairs(redis.call('ZRANGE', tq_key(), '0', '-1')) do
                redis.call('PEXPIRE', tline_key(tq_tenant(q)), int(ttl))
            end
            redis.call('PEXPIRE', tq_key(), int(ttl))
        end
    else                            -- a line made now lives as the others
        for _, k in ipairs(NEW_KEYS) do
            redis.call('PEXPIRE', k, int(math.max(have, GRACE_MS)))
        end
    end
    if stored() then
        if stored_now() then redis.call('PERSIST', K_STATE) end
    elseif ttl or touched then
        redis.call('PEXPIRE', K_STATE, int(math.max(ttl or have, GRACE_MS)))
    end
end

end -- 8 THE STATE

do -- 9 ARGUMENTS ----------------------------------------------------------

-- Argument checkers: each returns the value, or nil if malformed.
function id_arg(v)
    if type(v) == 'string' and #v <= 100 and string.find(v, '^[%w%.%-_:]+$') then
        return v
    end
end

-- Counts as read so far, text -> number (false: not a count), so that a
-- call's usual arguments (the same lease, wait and limit, call after call)
-- are not converted anew: tonumber() of a text costs as much as a command
-- (bench/README.md).  Emptied when it holds COUNTS_KEPT, so that varied
-- arguments cannot grow it; a text longer than COUNT_TEXT_MAX (a count
-- needs 13 digits) is converted each time, never kept.
local COUNTS_KEPT, COUNT_TEXT_MAX = 256, 16
local COUNT_OF, COUNTS_HELD = {}, 0

-- A count: an integer from 0 to 1e12 (nil if v is none).
function count_arg(v)
    local n = COUNT_OF[v or false]
    if n == nil then
        n = tonumber(v)
        if not (n and n >= 0 and n <= 1e12 and n % 1 == 0) then n = false end
        if type(v) == 'string' and #v <= COUNT_TEXT_MAX then
            if COUNTS_HELD >= COUNTS_KEPT then COUNT_OF, COUNTS_HELD = {}, 0 end
            COUNT_OF[v], COUNTS_HELD = n, COUNTS_HELD + 1
        end
    end
    return n or nil
end

-- A priority: an integer from -PRIORITY_MAX to PRIORITY_MAX.
function priority_arg(v)
    local n = tonumber(v)
    if n and n == math.floor(n) and math.abs(n) <= PRIORITY_MAX then return n end
end

-- A tenant: up to 64 bytes, no control character nor '|' ('': none).
function tenant_arg(v)
    if type(v) == 'string' and #v <= 64 and not string.find(v, '[%c|]') then return v end
end

-- A weight: 1 to 10000, or '' for none (false).
function weight_arg(v)
    if v == '' then return false end
    local n = count_arg(v)
    if n and n >= 1 and n <= 10000 then return n end
end

-- A limit: 1 or more, or '' for none (false).
function limit_arg(v)
    if v == '' then return false end
    local n = count_arg(v)
    if n and n >= 1 then return n end
end

-- The reader of the operations that take one id.
function read_id(a)
    local id = id_arg(a[2])
    if id then return true, id end
end

-- The reader of the operations that take nothing.
function read_none()
    return true
end

end -- 9 ARGUMENTS

do -- 10 ACQUIRE AND WAIT --------------------------------------------------

-- Milliseconds until the (pos+1)-th earliest deadline: a waiter at line
-- position pos cannot move into the window before that many members leave.
local function next_deadline_ms(pos)
    local at = int(pos)
    local r = redis.call('ZRANGE', K_TIMEOUT, at, at, 'WITHSCORES')
    if not r[2] then return -1 end
    return math.max(tonumber(r[2]) - NOW_MS, 0)
end

-- How many members must leave, less one, before a member at rank in owner
-- taking p permits fits under limit: the index of the deadline to look
-- again at.  With members taking several permits, one leaving may be
-- enough: the earliest deadline.
local function deadline_index(rank, p, limit)
    if S.xh + S.xw > 0 then return 0 end
    return math.max(rank + p - limit - 1, 0)
end

-- A member's priority (I4, I11), from its info.
local function priority_of(id)
    local _, _, _, _, prio = parse_info(redis.call('HGET', K_INFO, id))
    return prio or 0
end

-- I11: add to a busy or waiting reply what a reserve leaves a caller of
-- priority prio below its class (at n, after the rate's field or '').
local function reply_share(reply, n, prio, limit)
    if S.rk and not of_class(prio) then
        reply[n] = reply[n] or ''
        reply[n + 1] = int(class_max(prio, limit))
    end
    return reply
end

-- What a caller still in line is told: its ticket, the index of the
-- deadline that may let it in, when to look again at the latest, and the
-- limit in effect; with a stored rate, also the ms until the rate lets it
-- in if that is all that keeps it out (it is first and fits), else -1;
-- with a reserve it is not of, the permits left to it (I11).
local function waiting_reply(id, limit)
    local ahead = redis.call('ZRANK', K_WAITING, id)
    local rank = member_count() - waiter_count() + ahead
    local p = permits_of(id)
    local pos = deadline_index(rank, p, limit)
    local look = next_deadline_ms(pos)
    local ticket = redis.call('ZSCORE', K_OWNER, id)
    local prio = 0
    if S.rk then prio = priority_of(id) end
    local reply = {'waiting', ticket, int(pos), 0, int(limit)}
    if S.rt then
        local by_rate = -1
        local first = ahead == 0
        if S.tl then first = first_waiter() == id end
        if first and fits_class(rank - ahead + S.xh, p, prio, limit) then
            by_rate = rate_wait_ms()
            look = by_rate
        end
        reply[6] = int(by_rate)
    end
    if S.gu and NOW_MS < S.gu then look = S.gu - NOW_MS end    -- I15
    reply[4] = int(look)
    return reply_share(reply, 6, prio, limit)
end

-- I6: a holder confirms: its full lease starts now; its wake-up is spent.
-- One an administrator released meanwhile has run nothing: it goes (I17).
local function confirm(id)
    -- (I17: an administrator released it before it confirmed: it must not
    -- queue again)
    if S.fz > 0 and redis.call('HGET', K_STATE, 'f:' .. id) then
        remove(id)
        if not is_empty() then promote() end
        redis.call('DEL', removed_key(id))
        return {'removed'}
    end
    local lease = parse_info(redis.call('HGET', K_INFO, id))
    set_deadline(id, NOW_MS + lease, true)
    redis.call('DEL', wake_key(id))
    return {'held', redis.call('ZSCORE', K_OWNER, id), int(lease)}
end

-- The replication id of this primary, or nil if INFO is not allowed.
local function current_era()
    local ok, info = pcall(redis.call, 'INFO', 'replication')
    if not ok or type(info) ~= 'string' then return nil end
    -- (its first 64 bits tell primaries apart, and keep the generation's
    -- text, which every acquire passes, short)
    return string.match(info, 'master_replid:(%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x)')
end

-- I9: if the line was formed under another primary, turn its waiters away
-- and drop unconfirmed promotions; then the line's era is this primary's.
-- True if anybody was dropped.
local function settle_era()
    local era = current_era()
    if not era or S.era == era then return false end
    local dropped = false
    if S.era then
        for _, id in ipairs(redis.call('ZRANGE', K_WAITING, '0', '-1')) do
            turn_away(id)
            dropped = true
        end
        for _, id in ipairs(redis.call('ZRANGE', K_OWNER, '0', '-1')) do
            if redis.call('EXISTS', wake_key(id)) == 1 then
                remove(id)
                dropped = true
            end
        end
    end
    set('era', era)
    return dropped
end

-- I15, per call: KEYS[2]'s text as read (false: none), and the parts of
-- the generation the call leaves (as gen_parts names them), but for the
-- caller's own lease (and whether its grant waits for no replica).
local G_CUR, G_F, G_US, G_LMAX, G_UNTL, G_LPREV, G_ROT, G_UL, G_UE, G_ERA, G_LEASE, G_UNACKED

-- I15: a generation's parts from its text: f ('g' in a grace, else 'n'),
-- us (when it was made: its identity), lmax (the longest lease asked for
-- since rot), until (ms: the grace's end, 0 if none), lprev (the longest
-- of the window before, or carried over from a generation Redis forgot),
-- rot (ms: when this window began), ul and ue (ms: the longest lease of
-- grants that waited for no replica, and until when the latest may run),
-- era (the replication id it was last checked on, '' if none); nil if it
-- is not one of ours
-- (another program's string, or numbers out of bounds).
local function gen_parts(text)
    local f, us, lmax, untl, lprev, rot, ul, ue, era = string.match(text or '',
        '^([gn])(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(%x*)$')
    if not f or #us > 18 or #untl > 18 or #rot > 18 or #ue > 18 or #era > 40 then return nil end
    lmax, untl, lprev, rot = tonumber(lmax), tonumber(untl), tonumber(lprev), tonumber(rot)
    ul, ue = tonumber(ul), tonumber(ue)
    if math.max(lmax, lprev, ul) > GEN_KEEP_MS then return nil end
    return f, us, lmax, untl, lprev, rot, ul, ue, era
end

-- I15: make the state's gu agree with the generation's grace: a grace
-- begun since the line last moved (by another semaphore's acquire, or a
-- keeper's gen_raise) stops it too, and one that a caller that knew a
-- longer lease made longer since holds it longer; then promotion may pass
-- gu (GEN_SYNC).  Only calls that name KEYS[2] do (every semaphore call
-- from a server names it); a call that does not leaves the line to them
-- (its waiters look again when gu ends, with wait_check).
function gen_sync()
    local untl
    if GEN then
        untl = GRACE
    else
        -- (I14: promotion may read it after writes: a key of another
        -- type there is none, as another program's string is)
        local v = redis.pcall('GET', K_GEN)
        local f, _, _, u = gen_parts(type(v) == 'string' and v or nil)
        if f == 'g' then untl = math.min(u, NOW_MS + GEN_KEEP_MS) end
    end
    if untl and untl > (S.gu or NOW_MS) then set('gu', untl) end
    GEN_SYNC = true
end

-- I15: the grace a caller that knew the generation known ('': none) adds
-- to the one there (made at us, with its untl, lprev, ul and ue, which it
-- returns as they become).  A generation keeps its us for as long as Redis
-- keeps it (no TTL), so a known us that is not the one there means Redis
-- forgot since that caller looked: nobody is admitted before the longest
-- lease it knew of, counted from when the new generation was made, is
-- over, whoever made that one.  A known ue later than the one there (ue
-- never goes back) means writes were lost: the longest lease of grants
-- that waited for no replica, from now.
local function gen_knew(known, us, untl, lprev, ul, ue)
    local kf, kus, klmax, kuntl, klprev, _, kul, kue = gen_parts(known)
    if kf and kus ~= us then
        local knew = math.max(klmax, klprev)
        local made = math.min(math.floor(tonumber(us) / 1000), NOW_MS)
        untl = math.max(untl, made + knew, math.min(kuntl, NOW_MS + GEN_KEEP_MS))
        lprev, ul, ue = math.max(lprev, knew), math.max(ul, kul), math.max(ue, kue)
    elseif kf and kue > ue then
        untl = math.max(untl, NOW_MS + math.max(ul, kul))
        ul, ue = math.max(ul, kul), kue
    end
    return untl, lprev, ul, ue
end

-- I15: lprev, lmax and rot once a window that is over ends: lprev takes
-- lmax, and lmax starts anew; but while a grace lasts (until untl) lprev
-- keeps what is left of it, so that Redis forgetting again before it ends
-- gets a grace as long (servers pass texts without their grace: lprev is
-- how it is carried over).
local function gen_roll(lmax, lprev, rot, untl)
    if NOW_MS - rot < GEN_WINDOW_MS then return lprev, lmax, rot end
    if untl > NOW_MS then lmax = math.max(lmax, math.min(untl - NOW_MS, GEN_KEEP_MS)) end
    return lmax, 0, NOW_MS
end

-- I15: an acquire asking for lease ms, whose server knew the generation
-- as known ('': none); flags: 'g' if it knew a lmax below lease, a window
-- due to end, or (with 'u') an ul below lease or an ue half over, 'e' if
-- its connection has not
-- checked this generation's era yet, 'u' if its grant waits for no
-- replica.  Sets GEN (true if the reply must tell the generation:
-- with_gen), the parts (G_*) and GRACE (when the grace ends, or nil).
-- Reads KEYS[2] only.  A caller that knew nothing makes a generation
-- without grace; a later caller that knew one Redis forgot adds the grace
-- (gen_knew), as a keeper's gen_raise does.  Windows
-- of GEN_WINDOW_MS: at each, lprev takes lmax and lmax starts anew, so a
-- long lease counts for two windows at most.
local function gen_look(known, lease, flags)
    GEN, GRACE = nil, nil
    if not K_GEN then return end
    local cur = redis.call('GET', K_GEN)
    -- (the common case: as the caller knew it, so without grace (a caller
    -- passes only texts without), nothing to check or raise, as the caller
    -- reckoned (no 'g', no 'e'): the reply need not tell it)
    if cur == known and (flags == 'u' or flags == '') then return end
    local f, us, lmax, untl, lprev, rot, ul, ue, era
    if cur then
        f, us, lmax, untl, lprev, rot, ul, ue, era = gen_parts(cur)
        if not f then return end    -- not ours: left alone, no generation
        -- (Redis's clock went back: the window starts now, a grace lasts
        -- a day at most)
        if rot > NOW_MS then rot = NOW_MS - GEN_WINDOW_MS end
        untl = math.min(untl, NOW_MS + GEN_KEEP_MS)
    else                            -- forgotten (or new)
        f, us, lmax, untl, lprev, rot, ul, ue, era = 'n', now_us_text(), 0, 0, 0, NOW_MS, 0, 0, ''
    end
    untl, lprev, ul, ue = gen_knew(known, us, untl, lprev, ul, ue)
    -- another primary than the one it was checked on may lack grants that
    -- waited for no replica (there were some: ul): none is admitted before
    -- such a lease is over
    if era == '' or string.find(flags, 'e', 1, true) then
        local now_era = current_era()
        if now_era and now_era ~= era then
            if era ~= '' and ul > 0 then untl = math.max(untl, NOW_MS + ul) end
            era = now_era
        end
    end
    if untl > NOW_MS then f = 'g' else f, untl = 'n', 0 end
    lprev, lmax, rot = gen_roll(lmax, lprev, rot, untl)
    G_CUR, G_F, G_US, G_LMAX, G_UNTL, G_LPREV, G_ROT, G_UL, G_UE, G_ERA =
        cur, f, us, lmax, untl, lprev, rot, ul, ue, era
    G_LEASE, G_UNACKED = lease, string.find(flags, 'u', 1, true) ~= nil
    GEN = true
    if f == 'g' then GRACE = untl end
end

-- I15: ul and ue once a grant (or a lengthened lease) of lease ms that
-- waits for no replica is made now: ul starts anew once ue has passed.
-- ue moves on only once half a lease or less of it is left (then servers
-- that alternate do not rewrite the key at every call); the third value
-- says whether anything moved.
local function unacked(ul, ue, lease)
    if lease <= ul and ue >= NOW_MS + lease / 2 then return ul, ue, false end
    if ue < NOW_MS then ul = 0 end
    return math.max(ul, lease), math.max(ue, NOW_MS + lease), true
end

-- I15: a generation's text from its parts.
local function gen_text(f, us, lmax, untl, lprev, rot, ul, ue, era)
    return f .. us .. ':' .. int(lmax) .. ':' .. int(untl) .. ':' .. int(lprev) .. ':' ..
        int(rot) .. ':' .. int(ul) .. ':' .. int(ue) .. ':' .. era
end

-- I15: reply, told the generation at index n (the fields before it that
-- are not there: ''), once gen_look found it must be; the generation is
-- written then, without a TTL (one key per prefix, or per Cluster slot in
-- use), so a call refused for its arguments leaves no key.  Its lmax
-- (and ul and ue, for a grant that waits for no replica: unacked) counts
-- the caller's lease if it holds or waits now.  A busy reply on a Redis without a
-- generation writes one only for a grace (which later callers must
-- find), and tells none it did not write.
local function with_gen(reply, n)
    if not GEN then return reply end
    local busy = reply[1] == 'busy'
    local lmax, ul, ue, lease = G_LMAX, G_UL, G_UE, math.min(G_LEASE, GEN_KEEP_MS)
    if not busy and lease > lmax then lmax = lease end
    if not busy and G_UNACKED then ul, ue = unacked(ul, ue, lease) end
    local text = gen_text(G_F, G_US, lmax, G_UNTL, G_LPREV, G_ROT, ul, ue, G_ERA)
    if text ~= G_CUR then
        if busy and not G_CUR and not GRACE then return reply end
        redis.call('SET', K_GEN, text)
    end
    for i = 2, n - 1 do reply[i] = reply[i] or '' end
    reply[n] = text
    return reply
end

-- gen_raise lease_ms ['u'|''] [known|'']: a refresh is to lengthen a lease
-- to lease_ms (or a keeper counts the leases it keeps, every minute): the
-- lmax of its generation follows first (in a new window if the last is
-- over); with 'u' (a lease that waits for no replica), ul and ue too, as
-- for such a grant; and a caller that knew the generation known adds its
-- grace (gen_knew: a server whose keeper learns first that Redis forgot
-- must not then pass the new generation as known, without grace), making
-- one if there is none (I15).  The generation's text, or '' if there is
-- none (or it is not ours).
local function op_gen_raise(lease, unacked_lease, known)
    if not K_GEN then return '' end
    local cur = redis.call('GET', K_GEN)
    local f, us, lmax, untl, lprev, rot, ul, ue, era = gen_parts(cur)
    if not f then
        if cur or not gen_parts(known) then return '' end
        -- (made on this primary: its era, as an acquire's gen_look sets,
        -- so that a failover before any acquire still finds the ul below)
        f, us, lmax, untl, lprev, rot, ul, ue, era = 'n', now_us_text(), 0, 0, 0, NOW_MS, 0, 0,
            current_era() or ''
    end
    -- (Redis's clock went back: as gen_look)
    if rot > NOW_MS then rot = NOW_MS - GEN_WINDOW_MS end
    untl = math.min(untl, NOW_MS + GEN_KEEP_MS)
    untl, lprev, ul, ue = gen_knew(known, us, untl, lprev, ul, ue)
    if untl > NOW_MS then f = 'g' else f, untl = 'n', 0 end
    -- (a window due to end ends here too: keepers alone, with no acquire,
    -- move it on)
    lprev, lmax, rot = gen_roll(lmax, lprev, rot, untl)
    if unacked_lease then ul, ue = unacked(ul, ue, lease) end
    local text = gen_text(f, us, math.max(lmax, lease), untl, lprev, rot, ul, ue, era)
    if text ~= cur then redis.call('SET', K_GEN, text) end
    return text
end
OPS.gen_raise = {
    read = function(a)
        local lease = count_arg(a[2])
        if lease and lease >= 1 and lease <= GEN_KEEP_MS and
           (a[3] == nil or a[3] == '' or a[3] == 'u') then
            return true, lease, a[3] == 'u', a[4] or ''
        end
    end,
    run = op_gen_raise,
    fast = op_gen_raise,
}

-- acquire id max_holders|'' permits lease_ms wait(0|1) keepalive_ms origin
-- [known_generation|'' [flags: g e u|'' [settle|'' [priority [tenant]]]]]
-- (the arguments usually left at their defaults last, so that a caller
-- leaves them out: each costs as much as a key)
local function op_acquire(id, maxh, p, lease, wait, keepalive, origin, settle, priority, tenant)
    local members = member_count()
    -- I8: one limit
    local current = limit_in_effect(members > 0)
    if current and maxh and maxh ~= current then
        return {'limit', int(current), S.limit and 'stored' or 'in use'}
    end
    if not maxh and not S.limit then return {'nolimit'} end
    local limit = current or maxh
    local most = adapt_most(limit)  -- (I16)
    if p > most then return {'toolarge', int(most), S.ad and 'adaptive' or nil} end
    if p > class_max(priority, most) then
        return {'toolarge', int(class_max(priority, most)), 'reserve'}
    end
    -- I4: admitted only if everybody's permits and the caller's fit (I11:
    -- in its class's share)
    local fits = members + S.xh + S.xw + p <= limit
    if not fits and settle and settle_era() then
        members = member_count()
        fits = members + S.xh + S.xw + p <= limit
    end
    local held, waiters
    if fits and S.rk then           -- (a waiter may fit and wait: I11)
        held, waiters = held_permits()
        fits = waiters == 0 and fits_class(held, p, priority, limit)
    end
    -- I4: or it would stand first in line (priorities, I12: tenants) and
    -- fits beside the holders (its ticket is the clock, or a hair above
    -- it); I11: or first of the reserve's class, and it fits in the reserve
    -- (only if it fits beside the holders at all: a full semaphore needs
    -- no look at the line)
    if not fits then
        local place = NOW_US - priority * AGING_US
        held = held or held_permits()
        if held + p <= limit then
            fits = fits_class(held, p, priority, limit) and would_be_first(place, tenant)
            if not fits and of_class(priority) then
                local first = redis.call('ZRANGE', rline_key(), '0', '0', 'WITHSCORES')
                if not first[2] or place < tonumber(first[2]) then
                    fits = fits_reserve(held, p, limit)
                end
            end
        end
    end
    -- I10: and the rate lets it in; I15: and no grace period lasts
    local grant = fits and not GRACE and rate_open()
    if not grant and wait ~= 1 then
        local busy = {'busy', int(limit)}
        if S.rt then busy[3] = int(fits and not GRACE and rate_wait_ms() or -1) end
        return with_gen(reply_share(busy, 3, priority, limit), 5)
    end
    if not current then set('cur', limit) end
    local ticket, last = next_ticket()
    if members == 0 or not last then CREATED = true end
    -- an id that is a member already is refused here, by the same command
    -- that adds a new one (one that is refused earlier stays as it was)
    if redis.call('ZADD', K_OWNER, 'NX', ticket, id) == 0 then
        return redis.error_reply('REDSEM duplicate holder id')
    end
    FRESH, MEMBERS = members == 0, members + 1
    if p > 1 then set('p:' .. id, p) end
    count_permits(not grant, p, 1)
    if grant then
        rate_take()
        note_class(id, p, priority)
        note_tenant(tenant, p)
        local ranked = rescore(tenant, true)
        set_deadline(id, NOW_MS + lease, false)
        redis.call('HSET', K_INFO, id, make_info(lease, limit, NOW_MS, origin, priority, tenant))
        -- I12: its tenant, still waiting, now holds more: another tenant's
        -- first waiter may be the first waiter now, and fit
        if ranked then promote() end
        return with_gen({'held', ticket, int(lease)}, 4)
    end
    if GRACE and (S.gu or 0) < GRACE then set('gu', GRACE) end
    set_deadline(id, NOW_MS + keepalive, false)
    -- the line may have been empty (Redis deleted it: it has no TTL now)
    if waiter_count() == 0 then CREATED = true end
    FRESH = false                   -- (a first member may wait for a rate)
    local place = int(tonumber(ticket) - priority * AGING_US)
    follow_waiters(redis.call('ZADD', K_WAITING, place, id))
    if of_class(priority) then
        if redis.call('EXISTS', rline_key()) == 0 then NEW_KEYS[#NEW_KEYS + 1] = rline_key() end
        redis.call('ZADD', rline_key(), place, id)
    end
    enqueue(id, place, tenant)
    redis.call('HSET', K_INFO, id, make_info(lease, limit, 0, origin, priority, tenant))
    return with_gen(waiting_reply(id, limit), 8)
end
OPS.acquire = {
    read = function(a)
        local id, maxh, p = id_arg(a[2]), limit_arg(a[3]), count_arg(a[4])
        local lease, wait, keepalive = count_arg(a[5]), count_arg(a[6]), count_arg(a[7])
        local priority, tenant = 0, ''
        -- (the commonest: no priority, no tenant, as src/script.c sends them)
        if a[12] and a[12] ~= '0' then priority = priority_arg(a[12]) end
        if a[13] and a[13] ~= '' then tenant = tenant_arg(a[13]) end
        if not (id and maxh ~= nil and p and lease and wait and keepalive and a[8] and
                priority and tenant and (a[11] == nil or a[11] == '' or a[11] == 'settle') and
                (a[9] == nil or #a[9] <= 160) and (a[10] == nil or GEN_FLAGS[a[10]])) or
           p < 1 or lease < 1 or keepalive < 1 then return nil end
        return true, id, maxh or nil, p, lease, wait, keepalive, a[8], a[11] == 'settle',
               priority, tenant, a[9] or '', a[10] or ''
    end,
    run = op_acquire,
    fast = function(id, maxh, p, lease, _, _, origin, _, priority, tenant, known, flags)
        gen_look(known, lease, flags)
        if p == 1 and not GRACE then
            local reply = fast_acquire(id, maxh, lease, origin, priority, tenant)
            if reply and reply[1] == 'held' then return with_gen(reply, 4) end
            return reply
        end
    end,
}

-- What a member's look finds when it is no longer one: 'removed' once,
-- if an administrator removed it (mark_removed), else 'lost'.
local function not_member(id)
    if redis.call('DEL', removed_key(id)) == 1 then return {'removed'} end
    return {'lost'}
end

-- give_up id: leave the line, unless promotion came just in time.
local function op_give_up(id)
    if not is_member(id) then return not_member(id) end
    if not is_waiting(id) then
        if select(3, parse_info(redis.call('HGET', K_INFO, id))) ~= 0 then
            return confirm(id)
        end
        -- (never promoted, yet out of the line: another program deleted or
        -- evicted it; it leaves as the waiter it was counted as, I1)
        redis.call('ZADD', K_WAITING, 0, id)
        follow_waiters(1)
    end
    remove(id)
    if not is_empty() then promote() end
    return {'gone'}
end
OPS.give_up = {read = read_id, run = op_give_up, keep = true}

-- wait_check id keepalive_ms [settle]: keep a place in line alive, or
-- confirm the slot it was promoted to.
local function op_wait_check(id, keepalive, settle)
    if not is_member(id) then return not_member(id) end
    if not is_waiting(id) then
        -- (promoted: confirmed; out of a lost line: it queues again, I4)
        local r = op_give_up(id)
        if r[1] == 'gone' then return {'lost'} end
        return r
    end
    if settle and settle_era() then
        redis.call('DEL', nudge_key(id))
        return {'lost'}
    end
    -- (I3: room that no release made, a holder another program removed by
    -- hand, lets the line move at a look; with a rate, housekeeping does)
    if not S.rt then
        promote()
        if not is_waiting(id) then
            if not is_member(id) then return not_member(id) end
            return confirm(id)
        end
    end
    local _, maxh = parse_info(redis.call('HGET', K_INFO, id))
    set_deadline(id, NOW_MS + keepalive, true)
    redis.call('DEL', nudge_key(id))    -- this look's answer supersedes it
    return waiting_reply(id, limit_in_effect(true) or maxh)
end
OPS.wait_check = {
    keep = true,
    read = function(a)
        local id, keepalive = id_arg(a[2]), count_arg(a[3])
        if not (id and keepalive) or keepalive < 1 then return nil end
        return true, id, keepalive, a[4] == 'settle'
    end,
    run = op_wait_check,
}


end -- 10 ACQUIRE AND WAIT

do -- 11 RELEASE AND REFRESH -----------------------------------------------

-- I17: true if id is a holder an administrator released, still counted.
local function is_forced(id)
    if S.fz == 0 then return false end
    local mark = W and W['f:' .. id]
    if mark == nil then mark = redis.call('HGET', K_STATE, 'f:' .. id) end
    return not not mark
end

-- I17: an administrator releases holder id: 1, or 0 if one did already.
local function force(id)
    if is_forced(id) then return 0 end
    set('f:' .. id, '1')
    set('fz', S.fz + 1)
    return 1
end

-- How long a removed member's marker lasts (ms): longer than a ride of a
-- failure (a minute) and a promotion window, so that its next look finds it.
local REMOVED_KEEP_MS = 120000

-- An administrator removed member id (a waiter, or a holder that may not
-- have confirmed its promotion yet): its next look answers 'removed', not
-- 'lost' (after which it would queue again at the back), if it comes
-- within REMOVED_KEEP_MS.
local function mark_removed(id)
    redis.call('SET', removed_key(id), '1', 'PX', int(REMOVED_KEEP_MS + GRACE_MS))
end

-- An administrator removes waiter id from the line: it is told to look
-- at once (turn_away), and its look answers 'removed' (mark_removed).
local function remove_waiter(id)
    mark_removed(id)
    turn_away(id)
    if not is_empty() then promote() end
    return 2
end

-- release id: 1 if it was a live holder, 0 otherwise; nothing of it remains.
-- release id forced (an administrator's): a waiter leaves the line, told
-- so (remove_waiter: 2); a holder is marked and still counts (I17), and
-- marked removed (mark_removed: one that had not confirmed its promotion
-- yet must not queue again, even once its window has passed).  release
-- id gone (an administrator's who knows its holder no longer runs): as
-- release id, marked or not, without a sample, and marked removed; a
-- waiter as for forced.
local function op_release(id, forced, gone)
    if (forced or gone) and is_waiting(id) then return remove_waiter(id) end
    if (forced or gone) and is_member(id) then mark_removed(id) end
    if forced and is_member(id) then return force(id) end
    local own = not forced and not gone
    local marked = own and is_forced(id)
    local since = S.ad and own and not marked and
        select(3, parse_info(redis.call('HGET', K_INFO, id)))
    local waited = remove(id)
    -- (its own release: it ran, so a removed marker of it speaks to nobody)
    if marked or (own and waited == nil) then redis.call('DEL', removed_key(id)) end
    if waited == nil then
        -- (I3: as at a look, should another program have removed it by hand)
        if not S.rt and not is_empty() then promote() end
        return 0
    end
    if since and not waited then    -- I16: how long it held, a sample
        set('as', S.as + math.min(math.max(NOW_MS - since, 0), S.ac or math.huge))
        set('an', S.an + 1)
    end
    if not is_empty() then promote() end
    if waited then return 0 end
    return 1
end
OPS.release = {
    keep = true,
    read = function(a)
        local id = id_arg(a[2])
        if id and (a[3] == nil or a[3] == 'forced' or a[3] == 'gone') then
            return true, id, a[3] == 'forced', a[3] == 'gone'
        end
    end,
    run = op_release,
    fast = function(id, forced, gone)
        if not forced and not gone then return fast_release(id) end
    end,
}

-- refresh id lease_ms(0 = as acquired): the new lease in ms, or 0 if the
-- caller holds no slot (then nothing of it remains, unless it waits), -1
-- if an administrator released it (I17: nothing renewed).
local function op_refresh(id, lease)
    if not is_member(id) then
        redis.call('DEL', wake_key(id), nudge_key(id))
        return 0
    end
    if is_waiting(id) then return 0 end
    if is_forced(id) then return -1 end
    if lease <= 0 then
        lease = parse_info(redis.call('HGET', K_INFO, id)) or 0
        if lease <= 0 then return 0 end
    end
    set_deadline(id, NOW_MS + lease, true)
    return int(lease)
end

-- refresh_many id lease_ms [id lease_ms ...]: refresh each (the keeper's
-- batch for one semaphore): the list of new leases, 0 for a lost slot, -1
-- for one an administrator released.
-- The same as op_refresh for each, with three commands for the whole batch
-- instead of three per hold: who is a member, who waits, the new deadlines.
-- (An id given twice makes the order matter: then one by one.)
-- fast: as a fast path, which answers only a batch of holders refreshed
-- by the lease given, nobody due, no rate (whose housekeeping may let a
-- waiter in), no forced holder (I17) and the keys' TTL covering every new deadline already (as
-- ttl_needed() would find it), and otherwise returns nil having written
-- nothing; its one write, timeout, is a key it read first.
local function op_refresh_many(pairs, fast)
    if fast and (S.rt or S.fz > 0 or any_due()) then return nil end
    local ids, out, renew, seen, last = {}, {}, {}, {}, 0
    for i = 1, #pairs, 2 do
        if seen[pairs[i]] then
            if fast then return nil end
            for j = 1, #pairs, 2 do
                out[#out + 1] = op_refresh(pairs[j], pairs[j + 1])
            end
            return out
        end
        seen[pairs[i]] = true
        ids[#ids + 1] = pairs[i]
    end
    local owned = redis.call('ZMSCORE', K_OWNER, unpack(ids))
    local waits = redis.call('ZMSCORE', K_WAITING, unpack(ids))
    for k, id in ipairs(ids) do
        local lease = pairs[2 * k]
        if not owned[k] or waits[k] or lease <= 0 or is_forced(id) then
            if fast then return nil end
            out[k] = op_refresh(id, lease)  -- lost, waiting, "as acquired", forced
        else
            local deadline = NOW_MS + lease
            renew[#renew + 1] = int(deadline)
            renew[#renew + 1] = id
            if deadline > last then last = deadline end
            out[k] = int(lease)
        end
    end
    if fast and redis.call('PTTL', K_TIMEOUT) < last - NOW_MS + GRACE_MS then return nil end
    if #renew > 0 then
        redis.call('ZADD', K_TIMEOUT, 'XX', unpack(renew))
        if not fast then note_deadline(last) end
    end
    return out
end
OPS.refresh = {
    keep = true,
    read = function(a)
        local id, lease = id_arg(a[2]), count_arg(a[3])
        if id and lease then return true, id, lease end
    end,
    run = op_refresh,
    fast = function(id, lease)
        local out = op_refresh_many({id, lease}, true)
        return out and out[1]
    end,
}
OPS.refresh_many = {
    keep = true,
    read = function(a)
        local pairs = {}
        if #a < 3 or #a % 2 ~= 1 or #a > 2001 then return nil end
        for i = 2, #a, 2 do
            local id, lease = id_arg(a[i]), count_arg(a[i + 1])
            if not (id and lease) then return nil end
            pairs[#pairs + 1] = id
            pairs[#pairs + 1] = lease
        end
        return true, pairs
    end,
    run = op_refresh_many,
    fast = function(pairs) return op_refresh_many(pairs, true) end,
}

-- token id: the holder's ticket, or nil.
local function op_token(id)
    if is_waiting(id) then return false end
    return redis.call('ZSCORE', K_OWNER, id)
end
OPS.token = {read = read_id, run = op_token, keep = true}

end -- 11 RELEASE AND REFRESH

do -- 12 LIST, LIMIT, SUMMARY ----------------------------------------------

-- One member as list shows it.
local function list_entry(id, ticket, waiting)
    local deadline = redis.call('ZSCORE', K_TIMEOUT, id)
    local left = -1
    if deadline then left = tonumber(deadline) - NOW_MS end
    local info = redis.call('HGET', K_INFO, id) or ''
    local age = -1
    if waiting then
        age = NOW_MS - math.floor(tonumber(ticket) / 1000)
    else
        local _, _, since = parse_info(info)
        if since and since > 0 then age = NOW_MS - since end
    end
    return {id, ticket, int(left), waiting and '1' or '0', info,
            int(permits_of(id)), int(math.max(age, -1))}
end

-- list: every member, the holders in grant order then the waiters in line
-- order, as {id, ticket, ms left, waiting, info, permits, age}: age is the
-- ms since a holder was granted its slot, or since a waiter asked (its
-- ticket, I7); -1 if unknown.  Ages, not times, so that no server's clock
-- need agree with Redis's.
local function op_list()
    local all = redis.call('ZRANGE', K_OWNER, '0', '-1', 'WITHSCORES')
    local line = redis.call('ZRANGE', K_WAITING, '0', '-1')
    local in_line, out = {}, {}
    for _, id in ipairs(line) do in_line[id] = true end
    for i = 1, #all, 2 do
        if not in_line[all[i]] then out[#out + 1] = list_entry(all[i], all[i + 1], false) end
    end
    for _, id in ipairs(line) do
        local ticket = redis.call('ZSCORE', K_OWNER, id)
        if ticket then out[#out + 1] = list_entry(id, ticket, true) end
    end
    return out
end
OPS.list = {read = read_none, run = op_list, keep = true}

-- The limits and the permits held: {stored limit or '', limit in effect
-- or '', permits held, waiters}.
local function limit_reply()
    local held, waiters = held_permits()
    local limit = limit_in_effect(member_count() > 0)
    return {S.limit and int(S.limit) or '', limit and int(limit) or '',
            int(held), int(waiters)}
end
OPS.limit = {read = read_none, run = limit_reply, keep = true}

-- The ticket of the waiter that asked first, or nil.  Not the first in
-- line (priorities and tenants reorder it): a member's ticket in owner is
-- its arrival while it waits, so either the least of the waiters' tickets,
-- or the first waiter in owner's ticket order, which is among its first
-- holders + 1: whichever reads less, O(min(holders, waiters)) (a
-- summary's cost, not a call's).
local function oldest_wait_ticket(holders, waiters)
    local by_owner = holders < waiters
    local least
    for first = 0, by_owner and holders or waiters - 1, CHUNK do
        local r, ids
        if by_owner then
            r, ids = redis.call('ZRANGE', K_OWNER, int(first), int(first + CHUNK - 1), 'WITHSCORES'), {}
            for i = 1, #r, 2 do ids[#ids + 1] = r[i] end
        else
            ids = redis.call('ZRANGE', K_WAITING, int(first), int(first + CHUNK - 1))
        end
        if #ids == 0 then break end
        local found = redis.call('ZMSCORE', by_owner and K_WAITING or K_OWNER, unpack(ids))
        for i = 1, #ids do
            if found[i] then
                if by_owner then return r[2 * i] end
                local t = tonumber(found[i])
                if not least or t < least then least = t end
            end
        end
    end
    return least
end

-- summary: {stored limit or '', limit in effect or '', permits held,
-- waiters, holders, ms since the waiter that asked first asked or -1,
-- stored rate as given or '', reserved permits or '', their priority or '',
-- tenants with waiters (I12: those naming none count as one), adaptive
-- bounds "lo|hi" or '', why the limit last moved or '', ms since it moved
-- or -1 (I16)}.
local function op_summary()
    local r = limit_reply()
    local waiters = tonumber(r[4])
    local holders = member_count() - waiters
    local ticket = waiters > 0 and oldest_wait_ticket(holders, waiters)
    local age = -1
    if ticket then age = NOW_MS - math.floor(tonumber(ticket) / 1000) end
    r[5] = int(holders)
    r[6] = int(math.max(age, -1))
    r[7] = S.rt and (S.rs or '?') or ''
    r[8] = S.rk and int(S.rk) or ''
    r[9] = S.rk and int(S.rp) or ''
    r[10] = int(S.tl and redis.call('ZCARD', tq_key()) or math.min(waiters, 1))
    r[11], r[12], r[13] = adapt_brief()
    return r
end
OPS.summary = {read = read_none, run = op_summary, keep = true}

-- set_limit max_holders|'' ['nx'|'if=N']: store a limit, or remove it
-- (the members keep it as the limit in effect); with 'nx', only if none is
-- stored (a statement queue's first use: its definition's cap); with
-- 'if=N', only if the stored one is N (0: none; a keeper making a queue's
-- cap its definition's, and not undoing a change it has not seen; it
-- leaves an adaptive limit, which moves by itself, alone but for a
-- removal: I16).  Raising it admits waiters at once (I3, I4).
local function op_set_limit(maxh, nx, was)
    if nx and S.limit then return limit_reply() end
    if was and (S.limit or 0) ~= was then return limit_reply() end
    if was and maxh and S.ad then return limit_reply() end
    local before = limit_in_effect(member_count() > 0)
    set('limit', maxh or false)
    set('cur', not maxh and before or false)
    if S.ad then adapt_end() end    -- (I16: a limit set by hand stays)
    -- (lowered: waiters that can never fit now go, wherever they wait)
    promote(maxh ~= nil and (not before or maxh < before))
    return limit_reply()
end
OPS.set_limit = {
    read = function(a)
        local maxh = limit_arg(a[2])
        local was = a[3] and string.match(a[3], '^if=(%d+)$')
        if maxh ~= nil and (a[3] == nil or (a[3] == 'nx' and maxh) or was) then
            return true, maxh or nil, a[3] == 'nx', was and tonumber(was)
        end
    end,
    run = op_set_limit,
}

end -- 12 LIST, LIMIT, SUMMARY

do -- 13 CONFIGURATION -----------------------------------------------------

-- The rate: {rate as given or '', us per admission or '', burst or '',
-- ms until the rate lets the next caller in}.
local function rate_reply()
    if not S.rt then return {'', '', '', '0'} end
    return {S.rs or '', int(S.rt), int(S.rb or 1), int(rate_wait_ms())}
end

-- set_rate us_per_admission burst text | set_rate '': store a rate, or
-- remove it (I10).  A change keeps the share of the burst spent (the
-- clock's lead over now, rescaled to the new rate), so it lets in no burst
-- the old rate had spent, and takes effect at once; removing the rate
-- drops the clock.  A rate that now lets the first waiter in admits it.
local function op_set_rate(rt, rb, rs)
    if rt and S.rt and S.tat and S.tat > NOW_US then
        set('tat', NOW_US + math.floor((S.tat - NOW_US) * rt / S.rt))
    end
    set('rt', rt or false)
    set('rb', rt and rb or false)
    set('rs', rt and rs or false)
    if not rt then set('tat', false) end
    if not is_empty() then promote() end
    return rate_reply()
end
OPS.set_rate = {
    read = function(a)
        if a[2] == '' and #a == 2 then return true, nil end
        local rt, rb = count_arg(a[2]), count_arg(a[3])
        if not (rt and rb and rt >= 1 and rb >= 1 and rb <= 1e6 and
                type(a[4]) == 'string' and #a[4] <= 64) then return nil end
        return true, rt, rb, a[4]
    end,
    run = op_set_rate,
}
OPS.rate = {read = read_none, run = rate_reply, keep = true}

-- The reserve: {permits or '', priority or '', permits its class holds}.
local function reserve_reply()
    if not S.rk then return {'', '', '0'} end
    return {int(S.rk), int(S.rp), int(S.hh)}
end

-- set_reserve permits priority | set_reserve '': store a reserve, or
-- remove it (I11).  The class's line is made anew from the waiters'
-- priorities; holders keep the class they came in with, unless the
-- reserve is removed.  A reserve that now lets a waiter in admits it.
local function op_set_reserve(rk, rp)
    redis.call('DEL', rline_key())
    if not rk and S.hh > 0 then
        for _, id in ipairs(redis.call('ZRANGE', K_OWNER, '0', '-1')) do
            set('h:' .. id, false)
        end
        set('hh', 0)
    end
    set('rk', rk or false)
    set('rp', rk and rp or false)
    if rk then
        local line, add = redis.call('ZRANGE', K_WAITING, '0', '-1', 'WITHSCORES'), {}
        for first = 1, #line, 2 * CHUNK do      -- (their info, CHUNK at a time)
            local ids = {}
            for i = first, math.min(first + 2 * CHUNK - 1, #line), 2 do ids[#ids + 1] = line[i] end
            local infos = redis.call('HMGET', K_INFO, unpack(ids))
            for j, id in ipairs(ids) do
                local _, _, _, _, prio = parse_info(infos[j])
                if (prio or 0) >= rp then
                    add[#add + 1] = line[first + 2 * j - 1]
                    add[#add + 1] = id
                end
            end
        end
        call_chunked('ZADD', rline_key(), add, 2)
        CREATED = true
    end
    if not is_empty() then promote(rk ~= nil) end
    return reserve_reply()
end
OPS.set_reserve = {
    read = function(a)
        if a[2] == '' and #a == 2 then return true, nil end
        local rk, rp = count_arg(a[2]), priority_arg(a[3])
        if not (rk and rp and rk >= 1 and rk <= 1e6) then return nil end
        return true, rk, rp
    end,
    run = op_set_reserve,
}
OPS.reserve = {read = read_none, run = reserve_reply, keep = true}

-- set_weight tenant weight|'': store a tenant's weight, or remove it (1
-- then).  Its rank among the tenants that wait changes at once, and may
-- let its first waiter in (I12).
local function op_set_weight(t, w)
    if w then
        redis.call('HSET', weights_key(), t, int(w))
    else
        redis.call('HDEL', weights_key(), t)
    end
    set('wt', redis.call('EXISTS', weights_key()) == 1 and 1 or false)
    WEIGHTS[t] = nil
    rescore(t, false)
    if not is_empty() then promote() end
    return {int(weight_of(t))}
end
OPS.set_weight = {
    read = function(a)
        local t, w = tenant_arg(a[2]), weight_arg(a[3])
        if not (t and t ~= '' and w ~= nil and #a == 3) then return nil end
        return true, t, w or nil
    end,
    run = op_set_weight,
}

-- tenants: each tenant that holds, waits or has a stored weight, as
-- {tenant ('': the callers without one, first), weight, permits held,
-- waiters}, the others by name (bytes).
local function op_tenants()
    local seen, names = {}, {}
    local function note(t)
        if t ~= '' and not seen[t] then seen[t], names[#names + 1] = true, t end
    end
    local st = redis.call('HGETALL', tenant_key())
    for i = 1, #st, 2 do
        if string.sub(st[i], 1, 2) == 'h:' then note(string.sub(st[i], 3)) end
    end
    if S.tl then
        for _, q in ipairs(redis.call('ZRANGE', tq_key(), '0', '-1')) do note(tq_tenant(q)) end
    end
    for _, t in ipairs(redis.call('HKEYS', weights_key())) do note(t) end
    table.sort(names, bytes_before)     -- (ORDER)
    local out = {}
    local held = tenant_held('')
    local line = S.tl and redis.call('ZCARD', tline_key('')) or waiter_count()
    if held > 0 or line > 0 then out[1] = {'', '1', int(held), int(line)} end
    for _, t in ipairs(names) do
        line = S.tl and redis.call('ZCARD', tline_key(t)) or 0
        out[#out + 1] = {t, int(weight_of(t)), int(tenant_held(t)), int(line)}
    end
    return out
end
OPS.tenants = {read = read_none, run = op_tenants, keep = true}

end -- 13 CONFIGURATION

do -- 14 ADAPTIVE LIMITS ---------------------------------------------------

-- ADAPTIVE LIMITS (I16).  The controller's constants, and how they
-- interact (the keeper's side is in src/timing.h, ADAPT_TICK_MS): each
-- server's keeper ticks every adaptive semaphore once an ADAPT.INTERVAL_MS,
-- and the first tick of an interval (ADAPT.JITTER_MS early at most, so that
-- one server ticking alone runs it every time) runs the controller once
-- for the fleet.  A server's pressure counts while its last tick is at most
-- ADAPT.FRESH_MS old (two intervals and a half: a server that stops
-- ticking stops counting).
--
-- THE CONTROLLER (adapt_step), once an interval.  Its signals: the mean
-- hold time of the interval's releases (s: each hold counted as at most
-- ADAPT.CLAMP times the mean, so that one hold of an hour among holds of
-- 100 ms moves it as a few slow ones would), smoothed over intervals
-- (mean: ADAPT.SMOOTH of each new one); the best recent (base: the lowest
-- mean, which at the lower bound, where the work runs as alone as the
-- bounds allow, follows the mean up by ADAPT.RELEARN of the gap an
-- interval, so that work grown slower for good is learnt); the gradient
-- g = ADAPT.TOLERANCE x base / mean, and gs, the same with this
-- interval's s for the mean; the throughput the limit gives when all of it is in
-- use, x = limit / s (Little's law); and the servers' pressure.  The
-- latency and headroom moves below need g and gs to agree (both under
-- the band, both over it): the smoothed mean lags a step in the machine
-- by an interval or two, so after a cut it would cut again on holds begun
-- under the limit before (5 -> 4 -> 3 -> 2 when the best is 3), and when
-- the machine slows it would still see room for a raise; one interval
-- alone is noise.  In order:
--   bounds    a limit out of [lo, hi] is brought into them;
--   pressure  a server at ADAPT.PRESSURE_CUT times its line: down a stride;
--   (fewer than ADAPT.MIN_SAMPLES releases: it holds still, and they are
--   kept for the next interval, so that work whose holds take longer
--   than an interval still moves it: adapt_tick);
--   latency   g and gs < ADAPT.BAND_LOW (the mean above about twice the
--             base): down to limit x the larger of them, at most a stride;
--   no gain   a raise is judged ADAPT.JUDGE intervals after it: if all of
--             the new limit was in use and x grew by less than ADAPT.GAIN
--             of the raise's share (from 4 to 5: +25%, so x must grow 6%),
--             each x from the releases pooled at its limit, from the
--             second interval at it on (one interval's dozen releases are
--             too few to tell a gain of 5% from noise, and a raise refused
--             in error is a ceiling; the first interval at a limit mixes
--             holds begun under the one before),
--             the limit goes back, and the one that did not pay is a
--             ceiling it stays under until the mean at the limit it went
--             back to falls under 1/ADAPT.CHANGE of what it was (by
--             more than a fifth: the work or the machine got faster, so
--             the knee may be higher; measured ADAPT.JUDGE intervals
--             after it went back; holds grown slower keep it, since a
--             slower machine's knee is no higher, and probing over it
--             then only adds latency), or
--             after ADAPT.CEILING_TICKS intervals at the limit under it;
--             judged at once if holds are over the latency
--             line, and then the cut goes to the lower of the two;
--             a cut for latency is a ceiling too (the limit it came from
--             was over the line: probing it again would only swing the
--             limit until the work or the machine changes), and the next
--             cut waits for an interval of holds begun under the new
--             limit (its first interval, and ADAPT.JUDGE_HOLDS mean holds:
--             holds begun before still finish slow);
--   probe     when a ceiling ends after its intervals of use
--             (ADAPT.CEILING_TICKS, doubled for each probe in a row that
--             went back, bo, up to 2^ADAPT.BACKOFF times), unless the
--             last one to end did this (dn), and all of the limit is in
--             use, no server at its line, holds under the latency line
--             and the limit above the lower bound: down 1 instead (dn
--             set; otherwise the ceiling just ends, dn cleared, and
--             headroom may probe above), judged as a raise from there
--             would be (the limit above must give ADAPT.GAIN of its share
--             more than this one): back if the limit above paid or the
--             new one is not all in use, and no server is at its line
--             (a server at it keeps the lower); else this limit stays,
--             under a ceiling at the one above; holds over the latency
--             line at the judge cut at once, as for a raise, and a cut
--             for pressure drops the probe where it is: a raise kept in error
--             (a judge on noisy pools, two limits that tie) is undone, so
--             that the limit settles at the smallest that gives the
--             throughput, not at whichever the climb happened to keep;
--   headroom  g and gs > ADAPT.BAND_HIGH (the mean under 1.67 times the base:
--             room under the twice the latency step keeps it within),
--             all of the limit in use or somebody waiting, every server
--             under its line, and no ceiling in the way: up, at most a
--             stride (and to limit x the smaller at most), then judged
--             as above.
-- Between the bands it holds still, so that an integer limit does not
-- swing with the noise of a few samples.  A stride is ADAPT.STEP of the
-- limit, 1 at least.  So the limit climbs while the work gains from it and
-- its holds stay near their best, stops at the knee where more holders
-- only queue for the same resource, and comes down when holds take more
-- than twice their best (or a server is overloaded).
-- (one table, not a local each: the main chunk's locals, t/005)
local ADAPT = {}
ADAPT.INTERVAL_MS, ADAPT.JITTER_MS, ADAPT.FRESH_MS = 1000, 100, 2500
ADAPT.TOLERANCE, ADAPT.BAND_LOW, ADAPT.BAND_HIGH = 2, 0.95, 1.2
ADAPT.STEP, ADAPT.SMOOTH, ADAPT.RELEARN = 0.25, 0.5, 0.25
ADAPT.MIN_SAMPLES, ADAPT.FLOOR_MS = 3, 0.5
ADAPT.JUDGE, ADAPT.GAIN, ADAPT.CHANGE, ADAPT.CLAMP = 3, 0.25, 1.25, 4
-- Time, for work whose holds are long: a raise is judged (and a ceiling's
-- mean measured) no sooner than ADAPT.JUDGE_HOLDS mean holds after the
-- limit moved, and releases pool at a limit from one mean hold after it
-- on, so that holds begun under the limit before are not taken for the
-- new one's.  Releases kept for want of a step are kept while the
-- controller runs (work of hours still moves it), but those kept when it
-- stopped running for longer than ADAPT.KEEP_MS (no keeper ticked: the
-- semaphore went unused) are dropped at its first run after the pause (a
-- burst of an hour ago says nothing of now); the releases since are kept.
-- A ceiling (a raise that did not pay, a limit cut for latency) also ends
-- after ADAPT.CEILING_TICKS intervals with releases at the limit under it
-- (pt): its mean may have been measured after the change that should have
-- ended it (a hog that stopped within the few intervals it takes), and
-- then it would stay for good; so a settled limit probes a neighbour
-- once a minute of use at most, the one below and the one above by turns
-- (of use: a semaphore used a few seconds now and then is not probed at
-- each burst).  Each probe that goes back to the limit it came from
-- (bo: a raise that did not pay, a probe below that did not hold)
-- confirms that limit, and the next ceiling lasts twice as long, up to
-- 2^ADAPT.BACKOFF times (8 minutes of use): a limit settled for long
-- dips or rises for 3 seconds every 8 minutes, not every minute (each
-- is a swing of a quarter at a limit of 4).  Any other move, and a
-- ceiling ended by faster holds, start again at a minute: a step change
-- shows in the mean, which ends or makes ceilings at once, never waiting
-- for a probe.
ADAPT.JUDGE_HOLDS, ADAPT.KEEP_MS, ADAPT.CEILING_TICKS, ADAPT.BACKOFF = 2, 60000, 60, 3
-- A server's pressure: 1 (x1000 as sent) is its line (redsem.adaptive_*):
-- at or above it the limit does not grow; at ADAPT.PRESSURE_CUT it comes
-- down a stride whatever the hold times say.
ADAPT.PRESSURE_CUT = 2

-- The controller's memory (the state's am), as fields: the base and the
-- smoothed mean hold (ms), why the limit last moved and when (ms), when
-- the controller last ran (ms), the last interval's mean hold and
-- releases, the pressure it saw (x1000, -1: no server), how many servers
-- reported; a raise being judged: the limit before it, x then, intervals
-- since; a ceiling, and the mean at the limit under it (or intervals
-- since it was found, while that is not measured yet, as ticks); the
-- intervals since the limit last moved, and the releases and hold time
-- pooled at it (from the second of them on); the releases kept for the
-- next run when it last ran, and their hold time; dn, 1 once a probe
-- below was taken, until a ceiling ends again (no probe below then); bo,
-- the probes in a row that went back to the limit they came from.
-- ('-': none.)
local AM = {'base', 'mean', 'why', 'moved', 'tick', 'last', 'n', 'pressure', 'servers',
            'from', 'x', 'ticks', 'ceiling', 'at', 'pt', 'pn', 'ps', 'kn', 'ks', 'dn', 'bo'}
local AM_TEXT = {why = true}
local AM_REAL = {base = true, mean = true, last = true, x = true, at = true, pn = true, ps = true,
                 ks = true}

-- The memory from its text (am).
function adapt_memory(text)
    local m, i = {}, 1
    for f in string.gmatch(text or '', '([^|]+)') do
        local k = AM[i]
        if k and f ~= '-' then m[k] = AM_TEXT[k] and f or tonumber(f) end
        i = i + 1
    end
    return m
end

-- The memory as text.
function adapt_text(m)
    local out = {}
    for i, f in ipairs(AM) do
        local v = m[f]
        if type(v) == 'number' then
            v = AM_REAL[f] and string.format('%.6g', v) or int(v)
        end
        out[i] = v or '-'
    end
    return table.concat(out, '|')
end

-- The adaptive bounds lo, hi (ad: "lo|hi"), or nil.
local function adapt_bounds()
    local lo, hi = string.match(S.ad or '', '^(%d+)|(%d+)$')
    return tonumber(lo), tonumber(hi)
end

-- The most permits one caller may take under limit: for an adaptive limit
-- its lower bound, which it never goes under (so a caller refused is
-- always refused, and one in line always fits in the end: asking what the
-- limit is now, which moves, would have it refused now and then, or
-- waiting at the head of the line for a limit that may never come), else
-- the limit.
function adapt_most(limit)
    if not S.ad then return limit end
    local lo = adapt_bounds()
    return math.min(lo or limit, limit)
end

-- The most one interval may move a limit: ADAPT.STEP of it, 1 at least.
local function adapt_stride(limit)
    return math.max(1, math.floor(limit * ADAPT.STEP))
end

-- True while fewer than holds mean holds have passed since the limit last
-- moved (now nil, as in some model tests: never; now before the move, a
-- clock that went back: never either, or the wait would last the skew).
local function adapt_young(m, now, holds)
    return now and m.moved and m.mean and now >= m.moved and now - m.moved < holds * m.mean or false
end

-- The mean hold pooled at the limit as it stands (THE CONTROLLER, no
-- gain), or this interval's (s) if too few releases were pooled yet.
local function adapt_pooled(m, s)
    local mean = (m.pn or 0) >= ADAPT.MIN_SAMPLES and (m.ps or 0) / m.pn
    if not mean or not (mean < math.huge) then return s end   -- (none; overflowed)
    return math.max(mean, ADAPT.FLOOR_MS)
end

-- A raise or a probe below judged (THE CONTROLLER, no gain, probe): the
-- limit to go back to, or nil to keep the new one; s: the mean hold at it.
local function adapt_judge(m, limit, s, saturated, pressure)
    local from, x = m.from, m.x
    m.from, m.x, m.ticks = nil, nil, nil
    if not from or not x or from == limit then return nil end
    -- (the upper of the two limits paid: gave ADAPT.GAIN of its share more)
    local upper, lower, xu, xl = limit, from, limit / s, x
    if from > limit then upper, lower, xu, xl = from, limit, x, limit / s end
    local paid = xu >= xl * (1 + ADAPT.GAIN * (upper / lower - 1))
    -- (back to from: from confirmed, bo; the new limit kept: start again)
    if from > limit then            -- (a probe below: back, or keep it)
        if pressure < 1 and (paid or not saturated) then
            m.bo = math.min((m.bo or 0) + 1, ADAPT.BACKOFF + 1)
            return from
        end
        m.ceiling, m.at, m.ticks, m.bo = from, nil, 0, nil
        return nil
    end
    if paid or not saturated then m.bo = nil; return nil end
    m.ceiling, m.at, m.ticks = limit, nil, 0
    m.bo = math.min((m.bo or 0) + 1, ADAPT.BACKOFF + 1)
    return from
end

-- The controller (THE CONTROLLER, above), once per interval: given the
-- limit, its bounds, the memory m (changed in place), the interval's
-- releases (n) and the sum of their hold times (ms), the highest pressure
-- reported (1: a server's line) and whether all of the limit was in use or
-- anybody waited, returns the new limit and why it moved (nil: it did
-- not).  By construction the limit stays in [lo, hi] and moves at most a
-- stride (a raise going back: the stride it came up by); without samples
-- only the pressure or the bounds move it.
local function adapt_decide(limit, lo, hi, m, n, sum, pressure, saturated, now)
    local within = math.min(math.max(limit, lo), hi)
    if within ~= limit then
        m.from, m.x, m.ticks, m.ceiling, m.at = nil, nil, nil, nil, nil
        return within, 'bounds'
    end
    local stride = adapt_stride(limit)
    if pressure >= ADAPT.PRESSURE_CUT then
        if m.from then m.from, m.x, m.ticks = nil, nil, nil end   -- (a ceiling's wait goes on)
        return math.max(limit - stride, lo), 'pressure'
    end
    if not (n >= ADAPT.MIN_SAMPLES and sum >= 0) then return limit, nil end
    m.pt = (m.pt or 0) + 1
    if m.pt > 1 and not adapt_young(m, now, 1) then   -- (about the last 8 intervals: 1 - 1/8;
        local keep = m.pt > 8 and 0.875 or 1   -- no local of its own, t/005)
        m.pn, m.ps = (m.pn or 0) * keep + n, (m.ps or 0) * keep + sum
    end
    local s = math.max(sum / n, ADAPT.FLOOR_MS)
    m.mean = m.mean and m.mean + ADAPT.SMOOTH * (s - m.mean) or s
    if not m.base or m.mean < m.base then
        m.base = m.mean             -- (the best recent)
    elseif limit <= lo then         -- (at the floor the mean is the work's own)
        m.base = m.base + ADAPT.RELEARN * (m.mean - m.base)
    end
    -- (the smoothed mean and this interval's must agree: over the line,
    -- or with room under it; either alone is a transient or noise)
    local g, gs = ADAPT.TOLERANCE * m.base / m.mean, ADAPT.TOLERANCE * m.base / s
    local over = g < ADAPT.BAND_LOW and gs < ADAPT.BAND_LOW
    local back                      -- (a raise that did not pay: its from)
    if m.from then                  -- a raise being judged
        m.ticks = (m.ticks or 0) + 1
        if not over and (m.ticks < ADAPT.JUDGE or adapt_young(m, now, ADAPT.JUDGE_HOLDS)) then
            return limit, nil
        end
        back = adapt_judge(m, limit, adapt_pooled(m, s), saturated, pressure)
        if back and not over then   -- (within the bounds, which may have moved)
            back = math.max(math.min(back, hi), lo)
            if back == limit then return limit, nil end
            return back, back > limit and 'probe' or 'no gain'
        end
    elseif m.ceiling and not m.at then  -- the mean under a new ceiling
        m.ticks = (m.ticks or 0) + 1
        if m.ticks > ADAPT.JUDGE and not adapt_young(m, now, ADAPT.JUDGE_HOLDS) then
            m.at, m.ticks = m.mean, nil
        end
    elseif m.ceiling and m.mean * ADAPT.CHANGE < m.at then
        m.ceiling, m.at, m.bo = nil, nil, nil   -- (the work or the machine got faster)
    end
    -- (a ceiling's intervals of use: the first going back, a climb's own
    -- no gain, leaves them at ADAPT.CEILING_TICKS; no local of its own, t/005)
    if m.ceiling and m.pt > ADAPT.CEILING_TICKS * 2 ^ math.min(math.max((m.bo or 0) - 1, 0), ADAPT.BACKOFF) then
        if not m.dn and saturated and not over and pressure < 1 and limit > lo then
            m.dn, m.from, m.x, m.ticks = 1, limit, limit / adapt_pooled(m, s), 0
            return limit - 1, 'probe'   -- is the limit below as good?
        end
        m.ceiling, m.at, m.dn = nil, nil, nil   -- or may the one above pay?)
    end
    if over then
        if m.why == 'latency' and not back and (m.pt <= 1 or adapt_young(m, now, ADAPT.JUDGE_HOLDS)) then
            return limit, nil       -- (the last cut's holds are not in yet)
        end
        -- (a value that may be NaN last: math.max and math.min skip it there)
        local down = math.max(limit - stride, lo, math.floor(limit * math.max(g, gs)))
        down = math.max(math.min(down, back or down), lo)
        if down < limit then m.ceiling, m.at, m.ticks = limit, nil, 0 end
        return down, 'latency'
    end
    if g > ADAPT.BAND_HIGH and gs > ADAPT.BAND_HIGH and saturated and pressure < 1 then
        local new = math.min(limit + stride, hi, math.max(limit + 1, math.floor(limit * math.min(g, gs))))
        if m.ceiling then new = math.min(new, m.ceiling - 1) end
        if new > limit then
            m.from, m.x, m.ticks = limit, limit / adapt_pooled(m, s), 0
            return new, 'headroom'
        end
    end
    return limit, nil
end

-- The step (adapt_decide) at now (ms; nil: time unknown, some model
-- tests), and when it moves the limit a new pool (pt, pn, ps: releases
-- pooled at one limit say nothing of another) and the time it moved.  A
-- step that leaves the limit where it is (a cut at the lower bound) is no
-- move: why is nil, and the time of the last real one stays.
function adapt_step(limit, lo, hi, m, n, sum, pressure, saturated, now)
    local new, why = adapt_decide(limit, lo, hi, m, n, sum, pressure, saturated, now)
    if new == limit then return limit, nil end
    if why == 'latency' or why == 'pressure' or why == 'bounds' then m.bo = nil end
    m.pt, m.pn, m.ps = nil, nil, nil
    m.moved, m.why = now or m.moved, why
    return new, why
end

-- An adaptive semaphore's bounds "lo|hi", why its limit last moved, and
-- ms since ('', '', -1: not adaptive), for summary.
function adapt_brief()
    if not S.ad then return '', '', '-1' end
    local m = adapt_memory(S.am)
    return S.ad, m.why or '', int(m.moved and math.max(NOW_MS - m.moved, 0) or -1)
end

-- I16: the semaphore is adaptive no more (its limit stays where it is).
function adapt_end()
    set('ad', false)
    set('am', false)
    set('as', 0)
    set('an', 0)
    set('ac', false)
end

-- adapt: {limit in effect (set_adapt: the stored limit) or '', lo or '',
-- hi or '', base us or '', mean us or '', last interval's mean hold us or
-- '', its releases, why the limit last moved or '', ms since or -1,
-- pressure x1000 or -1, servers reporting}.  Pressure and servers are the
-- last step's while it is within ADAPT.FRESH_MS (no step since: nobody
-- reports, -1 and 0).
local function adapt_reply(stored)
    local lo, hi = adapt_bounds()
    local m = S.ad and adapt_memory(S.am) or {}
    local limit = S.limit
    if not stored then limit = limit_in_effect(member_count() > 0) end
    local fresh = m.tick and NOW_MS - m.tick <= ADAPT.FRESH_MS
    local function us(v) return v and int(math.floor(v * 1000 + 0.5)) or '' end
    return {limit and int(limit) or '', lo and int(lo) or '', hi and int(hi) or '',
            us(m.base), us(m.mean), us(m.last), int(m.n or 0), m.why or '',
            int(m.moved and math.max(NOW_MS - m.moved, 0) or -1),
            int(fresh and m.pressure or -1), int(fresh and m.servers or 0)}
end
OPS.adapt = {read = read_none, run = function() return adapt_reply(false) end, keep = true}

-- set_adapt lo hi [start] | set_adapt '': make the limit adaptive within
-- [lo, hi], starting at start (else the stored limit, else the limit in
-- effect, else lo, brought into the bounds), the controller's memory
-- anew; or make it fixed where it is.  A limit raised admits waiters.
local function op_set_adapt(lo, hi, start)
    if not lo then
        if S.ad then adapt_end() end
        return adapt_reply(true)
    end
    local bounds = int(lo) .. '|' .. int(hi)
    if S.ad == bounds and not start then return adapt_reply(true) end   -- (what it learnt stays)
    local before = limit_in_effect(member_count() > 0)
    local limit = math.min(math.max(start or before or lo, lo), hi)
    set('ad', bounds)
    set('limit', limit)
    set('cur', false)
    set('am', adapt_text({why = 'set', moved = NOW_MS}))
    set('as', 0)
    set('an', 0)
    set('ac', false)
    -- (it may go below the limit before: waiters that never fit then go)
    if not is_empty() then promote(not before or lo < before) end
    return adapt_reply(true)
end
OPS.set_adapt = {
    read = function(a)
        if a[2] == '' and #a == 2 then return true, nil end
        local lo, hi, start = count_arg(a[2]), count_arg(a[3]), a[4] and count_arg(a[4])
        if lo and hi and lo >= 1 and lo <= hi and hi <= 1e6 and #a <= 4 and
           (a[4] == nil or (start and start >= 1)) then
            return true, lo, hi, start
        end
    end,
    run = op_set_adapt,
}

-- The releases to step on, of the n (sum ms of holds) gathered: after a
-- pause of the controller longer than ADAPT.KEEP_MS, without those it
-- kept when it last ran (kn, ks: stale), else all.
local function adapt_fresh(m, n, sum)
    local kn, ks = m.kn, m.ks
    if not (kn and ks and kn >= 0 and kn < ADAPT.MIN_SAMPLES and ks >= 0 and
            m.tick and NOW_MS - m.tick > ADAPT.KEEP_MS) then
        return n, sum        -- (no pause, or no kept count that can be one)
    end
    return math.max(n - kn, 0), math.max(sum - ks, 0)
end

-- adapt_tick server pressure tag: server (its name) reports its pressure
-- (x1000: 1000 is its line; tag: what presses most, 'cpu' or 'lag', '' if
-- nothing); once an interval, the controller runs (adapt_step) on the
-- releases since it last ran, with the highest pressure of the servers
-- that reported within ADAPT.FRESH_MS (the others are dropped).  {limit
-- or '', why it last moved or '', 1 if the controller ran now or 0}; a
-- semaphore not adaptive: {'', '', 0}, nothing written.
local function op_adapt_tick(server, p, tag)
    if not S.ad then return {'', '', '0'} end
    local key = BASE .. 'apress'
    redis.call('HSET', key, server, int(p) .. '|' .. tag .. '|' .. NOW_TEXT)
    redis.call('PEXPIRE', key, int(ADAPT.FRESH_MS * 4))
    local m = adapt_memory(S.am)
    if m.tick and NOW_MS - m.tick < ADAPT.INTERVAL_MS - ADAPT.JITTER_MS and m.tick <= NOW_MS then
        return {int(S.limit), m.why or '', '0'}
    end
    local worst, wtag, servers, stale = -1, '', 0, {}
    local all = redis.call('HGETALL', key)
    for i = 1, #all, 2 do
        local pv, pt, at = string.match(all[i + 1], '^(%d+)|(%a*)|(%d+)$')
        if pv and NOW_MS - tonumber(at) <= ADAPT.FRESH_MS then
            servers = servers + 1
            if tonumber(pv) > worst then worst, wtag = tonumber(pv), pt end
        else
            stale[#stale + 1] = all[i]
        end
    end
    call_chunked('HDEL', key, stale, 1)
    local lo, hi = adapt_bounds()
    local held, waiters = held_permits()
    local limit = S.limit or lo
    local sane = S.an >= 0 and S.an < math.huge and S.as >= 0 and S.as < math.huge
    if sane then
        local n, sum = adapt_fresh(m, S.an, S.as)
        if n ~= S.an then       -- (those kept before a pause dropped)
            set('an', n)
            set('as', sum)
        end
    end
    -- (a count or sum that is not a number steps on no releases: the
    -- smoothed mean never takes an infinity or a NaN)
    local new, why = adapt_step(limit, lo, hi, m, sane and S.an or 0, sane and S.as or 0,
        math.max(worst, 0) / 1000, waiters > 0 or held >= limit, NOW_MS)
    if why then
        if why == 'pressure' and wtag ~= '' then why = wtag end
        m.why = why
        set('limit', new)
        if new > limit and not is_empty() then promote() end
    end
    m.tick, m.pressure, m.servers = NOW_MS, worst, servers
    -- (too few releases for a step are kept for the next interval, so
    -- that holds longer than one still count, and noted as kept; what is
    -- not a count or a sum of holds is dropped; the view shows the
    -- releases stepped on)
    if why or not sane or S.an >= ADAPT.MIN_SAMPLES then
        m.n, m.last = sane and S.an or 0, sane and S.an > 0 and S.as / S.an or nil
        m.kn, m.ks = nil, nil
        set('as', 0)
        set('an', 0)
    else
        m.kn, m.ks = S.an, S.as
    end
    set('ac', m.mean and math.ceil(m.mean * ADAPT.CLAMP) or false)
    set('am', adapt_text(m))
    return {int(S.limit), m.why or '', '1'}
end
OPS.adapt_tick = {
    read = function(a)
        local p = count_arg(a[3])
        if id_arg(a[2]) and #a[2] <= 64 and p and p <= 1e9 and
           (a[4] == 'cpu' or a[4] == 'lag' or a[4] == '') and #a == 4 then
            return true, a[2], p, a[4]
        end
    end,
    run = op_adapt_tick,
}

end -- 14 ADAPTIVE LIMITS

do -- 15 FAST PATHS --------------------------------------------------------

-- FAST PATHS.  The commonest calls run as straight-line code: an acquire
-- of one permit granted at once (on a semaphore with no member, or beside
-- other holders), and the release of a holder of one permit with nobody
-- waiting (the last member, or one that leaves others holding); and a
-- refresh of holders with nobody due, which writes their new deadlines
-- alone (op_refresh_many, with fast: above).  In
-- Redis's Lua, dispatch()'s general steps cost more than the commands they
-- run (bench/script_cpu.sh).  A fast path runs once the state is read (S);
-- it reads what the general path would, decides, and only then writes: if
-- any condition fails, it returns nil before its first write and the
-- general path goes on from housekeeping, so for the calls it takes its
-- effect is the general path's (t/020 checks every invariant after every
-- step, both paths included).  None changes the state's limits or era, or
-- counts other than a tenant's (permits of one only, no rate, reserve or
-- line kept per tenant).  The first acquire makes
-- the keys and the last release drops them, as finish() would; the others
-- create no key (but a ticket key found gone, given the others' TTL) and
-- need no renewal (I5).  The member and waiter counts they read (MEMBERS,
-- WAITERS) serve the general path too.  Before any write, every key a fast
-- path writes has been read (or is written first, or with its TTL), so
-- that a key of another type (a key conflict, which stops the call) leaves
-- nothing without a TTL.

-- acquire of one permit on a semaphore with no member: granted (nobody
-- to wait behind); it makes the keys, with the TTL finish() gives a FRESH
-- call (I5), the ticket's set with it.  Each key gets its TTL as it is
-- made: should another program's key of the wrong type stop the call
-- half-way (a key conflict), what it made still goes by itself.
local function fast_first(id, limit, lease, origin, prio, tenant)
    local ttl = int(lifetime(lease))
    local ticket = next_ticket(ttl)
    redis.call('ZADD', K_TIMEOUT, int(NOW_MS + lease), id)
    redis.call('PEXPIRE', K_TIMEOUT, ttl)
    redis.call('ZADD', K_OWNER, ticket, id)
    redis.call('PEXPIRE', K_OWNER, ttl)
    redis.call('HSET', K_INFO, id, make_info(lease, limit, NOW_MS, origin, prio, tenant))
    redis.call('PEXPIRE', K_INFO, ttl)
    if tenant ~= '' then            -- I12: the only holder, of one permit
        redis.call('HSET', tenant_key(), 'h:' .. tenant, '1')
        redis.call('PEXPIRE', tenant_key(), ttl)
    end
    if not S.limit then
        redis.call('HSET', K_STATE, 'cur', int(limit), unpack(tenant ~= '' and {'tt', '1'} or {}))
        -- (a state storing weights only is configuration: I5)
        if not stored() then redis.call('PEXPIRE', K_STATE, ttl) end
    elseif tenant ~= '' then
        redis.call('HSET', K_STATE, 'tt', '1')
    end
    return {'held', ticket, int(lease)}
end

-- A fast path's I12 bookkeeping: tenant t ('': none) holds dp permits
-- more (or fewer), written at once (a count of 0 is no field, as
-- store_tenants and store_state leave it); a tenant hash made now lives
-- ttl ms.  (tt counts h:<t> too, so it is never less.)
local function fast_tenant(t, dp, ttl)
    if t == '' then return end
    local f = 'h:' .. t
    local th, tt = tenant_held(t) + dp, S.tt + dp
    if th > 0 then
        redis.call('HSET', tenant_key(), f, int(th))
        if S.tt == 0 then redis.call('PEXPIRE', tenant_key(), int(ttl)) end
    else
        redis.call('HDEL', tenant_key(), f)
    end
    if tt > 0 then
        redis.call('HSET', K_STATE, 'tt', int(tt))
    else
        redis.call('HDEL', K_STATE, 'tt')
    end
end

-- acquire of one permit, granted: nobody to expire, the limit in effect
-- agrees, everybody's permits and the caller's fit (I4, I8), the keys
-- outlive the new deadline.  Its first write takes the ticket (I7, as
-- next_ticket), its second refuses an id that is a member already.
function fast_acquire(id, maxh, lease, origin, prio, tenant)
    if S.xh + S.xw > 0 or S.tl or S.rt or S.rk or S.gu or not (maxh or S.limit) or
       (S.limit and maxh and maxh ~= S.limit) then
        return nil
    end
    local members = member_count()
    if members == 0 then return fast_first(id, S.limit or maxh, lease, origin, prio, tenant) end
    local limit = S.limit or S.cur
    if not limit or (maxh and maxh ~= limit) or members + 1 > limit or
       any_due() then
        return nil
    end
    local pttl = redis.call('PTTL', K_TIMEOUT)
    if pttl < lease + GRACE_MS then return nil end
    if tenant ~= '' then tenant_held(tenant) end    -- (read before any write)
    local ticket, last = next_ticket()
    if not last then redis.call('PEXPIRE', K_TICKET, int(pttl)) end   -- it was gone
    if redis.call('ZADD', K_OWNER, 'NX', ticket, id) == 0 then
        return redis.error_reply('REDSEM duplicate holder id')
    end
    redis.call('ZADD', K_TIMEOUT, int(NOW_MS + lease), id)
    redis.call('HSET', K_INFO, id, make_info(lease, limit, NOW_MS, origin, prio, tenant))
    fast_tenant(tenant, 1, pttl)
    return {'held', ticket, int(lease)}
end

-- release of the last member, a holder (nobody waits) whose deadline has
-- not passed: every key goes but the ticket, which lives GRACE_MS more
-- (I5).  A deadline alone does not prove id the one member (a script a key
-- conflict aborted may have left one behind: see INVARIANTS), so its first
-- write takes id out of owner; if it was not there, nothing changed and
-- the general path answers.  A state that stores a limit, a rate or a
-- reserve is left to the general path.
local function fast_last(id)
    if stored() or S.tl then return nil end
    local deadline = tonumber(redis.call('ZSCORE', K_TIMEOUT, id))
    if not deadline or deadline <= NOW_MS or waiter_count() > 0 or
       redis.call('ZREM', K_OWNER, id) == 0 then
        return nil
    end
    redis.call('DEL', K_TIMEOUT, K_INFO, K_STATE, wake_key(id), nudge_key(id))
    if S.tt > 0 then redis.call('DEL', tenant_key()) end
    redis.call('PEXPIRE', K_TICKET, GRACE_TEXT)
    return 1
end

-- release of a holder of one permit: nobody waiting (so nobody to
-- promote), another member left (so no key goes).  Members whose deadline
-- is due are left to the next call that may admit or promote (I2): with
-- nobody waiting, none would come in in their place now.  Its first
-- write finds whether id is a member; if not, it changed nothing, and the
-- general path answers (and tidies whatever was left of id).
-- An adaptive limit's holder (I16) leaves its hold time as a sample, as
-- op_release does: its state stores a limit, so has no TTL to see to.
function fast_release(id)
    if S.xh + S.xw > 0 or S.tl or S.rk or S.fz > 0 then return nil end
    if member_count() == 1 then
        if S.ad then return nil end -- (its sample: the general path's)
        return fast_last(id)
    end
    if MEMBERS == 0 or waiter_count() > 0 then return nil end
    local tenant, since = '', nil   -- I12: only a holder may have one then
    if S.tt > 0 or S.ad then
        local _, _, at, _, _, of = parse_info(redis.call('HGET', K_INFO, id))
        tenant, since = of or '', S.ad and at
        if tenant ~= '' then tenant_held(tenant) end    -- (read before any write)
    end
    if S.ad then                    -- (I16: an expiry is no sample; I2)
        local deadline = tonumber(redis.call('ZSCORE', K_TIMEOUT, id))
        if not deadline or deadline <= NOW_MS then return nil end
    end
    if redis.call('ZREM', K_OWNER, id) == 0 then return nil end
    fast_tenant(tenant, -1)
    redis.call('ZREM', K_TIMEOUT, id)
    redis.call('HDEL', K_INFO, id)
    redis.call('DEL', wake_key(id), nudge_key(id))
    if since then                   -- (as op_release and write_fields would)
        local sum = S.as + math.min(math.max(NOW_MS - since, 0), S.ac or math.huge)
        if sum >= 1 then
            redis.call('HSET', K_STATE, 'an', int(S.an + 1), 'as', int(sum))
        else
            redis.call('HSET', K_STATE, 'an', int(S.an + 1))
        end
    end
    return 1
end

end -- 15 FAST PATHS

do -- 16 THE INDEX ---------------------------------------------------------

-- X4: the index's mark of an adaptive semaphore (I16): "\0a:" and its
-- name, scored -inf (a name from SQL has no NUL: never a name's entry).
local ADAPTIVE_MARK = '\0a:'

-- X1: drop the entries whose until has passed (not the marks: X4); keep
-- the key's lifetime.
local function index_tidy(key, ttl)
    redis.call('ZREMRANGEBYSCORE', key, '(-inf', '(' .. int(NOW_MS))
    if redis.call('ZCOUNT', key, '+inf', '+inf') > 0 or
       redis.call('ZCOUNT', key, '-inf', '-inf') > 0 then
        redis.call('PERSIST', key)
    elseif ttl then
        local left = redis.call('PTTL', key)
        if left == -1 or left < ttl then redis.call('PEXPIRE', key, int(ttl)) end
    end
end

-- The eviction policy of this Redis if it may evict keys, redsem's too (a
-- maxmemory is set and the policy is not noeviction); else ''.  (An
-- evicted key forgets holders: the index operations, which keepers and
-- redsem_semaphores() call, report it so that servers can say so.)
local function evicting_policy()
    local ok, info = pcall(redis.call, 'INFO', 'memory')
    if not ok or type(info) ~= 'string' then return '' end
    local max = tonumber(string.match(info, '\nmaxmemory:(%d+)')) or 0
    local policy = string.match(info, '\nmaxmemory_policy:([%w%-]+)') or 'noeviction'
    if max == 0 or policy == 'noeviction' then return '' end
    return policy
end

-- index_touch ttl_ms name...: the names are used, until now + ttl (X2: GT).
-- {how many, the eviction policy if Redis may evict keys (else ''), then
-- the names given that are adaptive (X4)}.
local function op_index_touch(key, ttl, names)
    local args, marks = {}, {}
    for i, name in ipairs(names) do
        args[#args + 1] = int(NOW_MS + ttl)
        args[#args + 1] = name
        marks[i] = ADAPTIVE_MARK .. name
    end
    redis.call('ZADD', key, 'GT', unpack(args))
    index_tidy(key, ttl)
    local reply = {#names, evicting_policy()}
    if redis.call('ZCOUNT', key, '-inf', '-inf') > 0 then
        local found = redis.call('ZMSCORE', key, unpack(marks))
        for i, name in ipairs(names) do
            if found[i] then reply[#reply + 1] = name end
        end
    end
    return reply
end

-- index_pin ttl_ms name 1|0: pin a name (a stored limit), or let it go
-- (until now + ttl).
local function op_index_pin(key, ttl, name, pin)
    if pin then
        redis.call('ZADD', key, '+inf', name)
    else
        redis.call('ZADD', key, 'XX', int(NOW_MS + ttl), name)
    end
    index_tidy(key, ttl)
    return 1
end

-- index_list max from: {entries, the eviction policy as index_touch gives
-- it, max names from the from-th (0: the first)}, latest expiry first: the
-- stored settings' (+inf), then those noted last, so that names of ended
-- semaphores (kept a minute after their last note) come last.
local function op_index_list(key, max, from)
    index_tidy(key, nil)
    local names = redis.call('ZRANGE', key, '+inf', '(-inf', 'BYSCORE', 'REV', 'LIMIT', int(from), int(max))
    table.insert(names, 1, evicting_policy())
    table.insert(names, 1, redis.call('ZCOUNT', key, '(-inf', '+inf'))
    return names
end

-- index_policy: {the eviction policy as index_touch gives it}.  It reads
-- no key: in a Cluster, the key it is sent with (a semaphore's) only takes
-- it to the node to ask, one that may not hold the index.
local function op_index_policy()
    return {evicting_policy()}
end

-- A semaphore name as the index keeps it: 1 to 200 bytes.
local function name_arg(v)
    if type(v) == 'string' and #v > 0 and #v <= 200 then return v end
end

-- adapt_note name 1|0: mark semaphore name adaptive in the index (X4), or
-- no more.  1.
local function op_adapt_note(key, name, on)
    if on then
        redis.call('ZADD', key, '-inf', ADAPTIVE_MARK .. name)
    else
        redis.call('ZREM', key, ADAPTIVE_MARK .. name)
    end
    index_tidy(key, nil)
    return 1
end

-- adapt_model limit lo hi memory n sum pressure saturated [now]: the
-- controller's step (adapt_step) alone, on the values and memory (the
-- state's am text, '' for none) given, at now (ms, the model's own time;
-- left out: time unknown), for its model tests: {limit, why ('': held
-- still), the memory after}.  It reads and writes no key.
local function op_adapt_model(_, limit, lo, hi, memory, n, sum, pressure, saturated, now)
    local m = adapt_memory(memory)
    local new, why = adapt_step(limit, lo, hi, m, n, sum, pressure, saturated, now)
    return {int(new), why or '', adapt_text(m)}
end

-- The index operations, as OPS (run's first argument: the index key;
-- timeless: run reads no clock, NOW_MS).
INDEX_OPS = {
    adapt_note = {
        read = function(a)
            local name = name_arg(a[2])
            if name and (a[3] == '1' or a[3] == '0') and #a == 3 then return true, name, a[3] == '1' end
        end,
        run = op_adapt_note,
    },
    adapt_model = {
        read = function(a)
            local v = {}
            for _, i in ipairs({2, 3, 4, 6, 7, 8}) do
                v[i] = tonumber(a[i])
                if v[i] and (v[i] ~= v[i] or math.abs(v[i]) == math.huge) then v[i] = nil end
            end
            local now = a[10] and count_arg(a[10])
            if (#a == 9 or (#a == 10 and now)) and v[2] and v[3] and v[4] and v[6] and v[7] and v[8] and
               v[2] % 1 == 0 and v[3] % 1 == 0 and v[4] % 1 == 0 and v[6] % 1 == 0 and
               v[3] >= 1 and v[3] <= v[4] and v[2] >= 1 and v[6] >= 0 and v[8] >= 0 and
               #a[5] <= 400 then
                return true, v[2], v[3], v[4], a[5], v[6], v[7], v[8], a[9] == '1', now
            end
        end,
        run = op_adapt_model,
        timeless = true,            -- (reads no clock)
    },
    index_touch = {
        read = function(a)
            local ttl, names = count_arg(a[2]), {}
            if not ttl or ttl < 1 or #a < 3 or #a > 1002 then return nil end
            for i = 3, #a do
                names[#names + 1] = name_arg(a[i])
                if not names[#names] then return nil end
            end
            return true, ttl, names
        end,
        run = op_index_touch,
    },
    index_pin = {
        read = function(a)
            local ttl, name = count_arg(a[2]), name_arg(a[3])
            if ttl and ttl >= 1 and name and (a[4] == '1' or a[4] == '0') then
                return true, ttl, name, a[4] == '1'
            end
        end,
        run = op_index_pin,
    },
    index_list = {
        keep = true,
        read = function(a)
            local max, from = count_arg(a[2]), count_arg(a[3])
            if max and max >= 1 and max <= 100000 and from then return true, max, from end
        end,
        run = op_index_list,
    },
    index_policy = {
        read = function(a)
            if #a == 1 then return true end
        end,
        run = op_index_policy,
        timeless = true,            -- (reads no clock)
    },
}

-- The statement queues' fleet definitions (X3): KEYS[1], <prefix>{queues},
-- a hash: queue name -> its options' text, which the servers parse; '~'
-- is "1", or "r" once a server stored its copy back (queues_restore) and
-- nobody changed anything since; '#' counts the changes (a copy's
-- version).  '~' stays when the last queue is dropped, so that
-- definitions that are gone mean Redis forgot, never that the
-- administrators dropped every queue.  The servers that read them lately
-- are KEYS[2], <prefix>{queues}:servers (server -> "<until ms> <read ms>
-- <version of its copy> <what it says of itself>"), and KEYS[3],
-- <prefix>{queues}:seen (server -> until ms), both ending a read's ttl
-- after the last read.  '!<name>' -> ms (no queue's name begins with '!'):
-- the open limit the drop of queue <name> left on its semaphore is due
-- for removal then (queue_open); being no definition, it counts no change.
-- These operations name those three keys (dispatch checks their names),
-- and only they write them.
local QUEUE_MAX, QUEUE_TEXT_MAX, QUEUE_SERVER_MAX = 64, 2048, 4096

-- A queue's name as the servers accept it: 1 to 63 of [A-Za-z0-9_.-].
local function queue_name_arg(v)
    if type(v) == 'string' and #v <= 63 and string.find(v, '^[%w_.-]+$') then return v end
end

-- A definition's text: 1 to QUEUE_TEXT_MAX bytes (the servers check it).
local function queue_text_arg(v)
    if type(v) == 'string' and #v > 0 and #v <= QUEUE_TEXT_MAX then return v end
end

-- True if field f of the definitions is a queue's (not '~', '#' or '!...').
local function is_queue_field(f)
    return f ~= '~' and f ~= '#' and string.byte(f) ~= 33
end

-- The definitions: {1 if they are there ('~' "1"), 2 if they are a copy
-- stored back ("r"), 0 if they are gone; the version ('#', 0 if none);
-- 0; name, text, name, text...}.
local function definitions(keys)
    local all = redis.call('HGETALL', keys[1])
    local reply = {0, 0, 0}
    for i = 1, #all, 2 do
        if all[i] == '~' then
            reply[1] = all[i + 1] == 'r' and 2 or 1
        elseif all[i] == '#' then
            reply[2] = tonumber(all[i + 1]) or 0
        elseif is_queue_field(all[i]) then
            reply[#reply + 1] = all[i]
            reply[#reply + 1] = all[i + 1]
        end
    end
    return reply
end

-- The servers seen lately (KEYS[3]).
local function live_servers(keys)
    return redis.call('ZRANGEBYSCORE', keys[3], int(NOW_MS), '+inf')
end

-- The newest copy among the servers seen lately: its version (0 if none).
local function newest_copy(keys)
    local live = live_servers(keys)
    local best = 0
    if #live == 0 then return 0 end
    for _, v in ipairs(redis.call('HMGET', keys[2], unpack(live))) do
        local ver = v and tonumber(string.match(v, '^%d+ %d+ (%d+)')) or 0
        if ver > best then best = ver end
    end
    return best
end

-- queues_get: the definitions, the third element 1 if a server seen
-- lately has a newer copy than them, which it stores back within a read
-- (a change waits for it: Redis forgot, or went back).
local function op_queues_get(keys)
    local reply = definitions(keys)
    if newest_copy(keys) > reply[2] then reply[3] = 1 end
    return reply
end

-- queues_poll server ttl_ms version value: the definitions (third element
-- 0), and, if there are any, server read them now, its copy being of that
-- version (seen until now + ttl; the servers not seen since go).
local function op_queues_poll(keys, server, ttl, version, value)
    local reply = definitions(keys)
    local untl = int(NOW_MS + ttl)
    -- (no definitions: no list either, so that an unused Redis keeps no
    -- key; a server with a copy stores it back at once anyway)
    if reply[1] == 0 then return reply end
    local gone = redis.call('ZRANGEBYSCORE', keys[3], '-inf', '(' .. int(NOW_MS))
    if #gone > 0 then
        redis.call('HDEL', keys[2], unpack(gone))
        redis.call('ZREM', keys[3], unpack(gone))
    end
    -- (after this read its copy is Redis's, or, if newer, stored back)
    redis.call('HSET', keys[2], server, untl .. ' ' .. int(NOW_MS) .. ' ' ..
        int(math.max(version, reply[2])) .. ' ' .. value)
    redis.call('ZADD', keys[3], untl, server)
    redis.call('PEXPIRE', keys[2], int(ttl))
    redis.call('PEXPIRE', keys[3], int(ttl))
    return reply
end

-- queue_servers: {now ms, server, value, server, value...} of the servers
-- seen lately (value: "<until> <read> <version> <what it says of
-- itself>").
local function op_queue_servers(keys)
    local live = live_servers(keys)
    local reply = {int(NOW_MS)}
    if #live == 0 then return reply end
    local values = redis.call('HMGET', keys[2], unpack(live))
    for i, server in ipairs(live) do
        if values[i] then
            reply[#reply + 1] = server
            reply[#reply + 1] = values[i]
        end
    end
    return reply
end

-- True if a change must wait: a server seen lately has a newer copy than
-- the definitions (Redis forgot them, or went back), which it stores back
-- within a read (so that no change is made on a stale set).
local function change_must_wait(keys)
    return newest_copy(keys) > (tonumber(redis.call('HGET', keys[1], '#')) or 0)
end

-- A change: '#' counts it (first: a refused command stops the call before
-- anything is written), '~' says the definitions are the administrators'.
local function queue_changed(keys)
    redis.call('HINCRBY', keys[1], '#', 1)
    redis.call('HSET', keys[1], '~', '1')
    redis.call('PERSIST', keys[1])
end

-- queue_put name text create|alter [was]: {1} stored; {0, text now}
-- create of a queue that is there, or alter of one whose text is no longer
-- was; {0} alter of one that is not there; {-1} create of a queue beyond
-- QUEUE_MAX; {-2} nothing done: a newer copy is being stored back.
local function op_queue_put(keys, name, text, mode, was)
    if change_must_wait(keys) then return {-2} end
    local now = redis.call('HGET', keys[1], name)
    if mode == 'create' and now then return {0, now} end
    if mode == 'alter' and not now then return {0} end
    if mode == 'alter' and was and now ~= was then return {0, now} end
    if not now and (#definitions(keys) - 3) / 2 >= QUEUE_MAX then return {-1} end
    queue_changed(keys)
    redis.call('HSET', keys[1], name, text)
    return {1}
end

-- queue_drop name: {1} dropped, {0} there was no such queue, {-2} as
-- queue_put's.
local function op_queue_drop(keys, name)
    if change_must_wait(keys) then return {-2} end
    if not redis.call('HGET', keys[1], name) then return {0} end
    queue_changed(keys)
    redis.call('HDEL', keys[1], name)
    return {1}
end

-- queue_open name ms: note that the drop of queue name leaves an open
-- limit on its semaphore, due for removal in ms (a later drop's note
-- replaces it); {1}.  Definitions that are gone stay so: a hash of notes
-- alone has no '~'.
local function op_queue_open(keys, name, ms)
    redis.call('HSET', keys[1], '!' .. name, int(NOW_MS + ms))
    return {1}
end

-- queue_opens: {name, due ms, ...} of the open limits noted whose removal
-- is due.
local function op_queue_opens(keys)
    local all = redis.call('HGETALL', keys[1])
    local reply = {}
    for i = 1, #all, 2 do
        if string.byte(all[i]) == 33 and (tonumber(all[i + 1]) or 0) <= NOW_MS then
            reply[#reply + 1] = string.sub(all[i], 2)
            reply[#reply + 1] = all[i + 1]
        end
    end
    return reply
end

-- queue_open_done name ms: forget the note of name if it still says ms (a
-- later drop's stays); {1} forgotten, {0} not.
local function op_queue_open_done(keys, name, ms)
    if redis.call('HGET', keys[1], '!' .. name) ~= ms then return {0} end
    redis.call('HDEL', keys[1], '!' .. name)
    return {1}
end

-- queues_restore version name text...: a server's copy of the definitions
-- (of that version; it may hold none), stored in place of what Redis has
-- if that is gone or older (Redis forgot, or lost writes, or another
-- server stored back an older copy): {1, the queues whose definition it
-- replaced or removed...} stored, {0} not.
local function op_queues_restore(keys, version, pairs)
    local mark = redis.call('HGET', keys[1], '~')
    if mark and (tonumber(redis.call('HGET', keys[1], '#')) or 0) >= version then return {0} end
    local mine, reply = {}, {1}
    for i = 1, #pairs, 2 do mine[pairs[i]] = pairs[i + 1] end
    local all = redis.call('HGETALL', keys[1])
    for i = 1, #all, 2 do
        if is_queue_field(all[i]) then
            if mine[all[i]] ~= all[i + 1] then reply[#reply + 1] = all[i] end
            redis.call('HDEL', keys[1], all[i])
        end
    end
    pairs[#pairs + 1] = '~'
    pairs[#pairs + 1] = 'r'
    pairs[#pairs + 1] = '#'
    pairs[#pairs + 1] = int(version)
    redis.call('HSET', keys[1], unpack(pairs))
    redis.call('PERSIST', keys[1])
    return reply
end

-- The definitions' operations, as INDEX_OPS entries (queues: run gets the
-- three keys).
INDEX_OPS.queues_get = {
    keep = true,
    read = function(a)
        if #a == 1 then return true end
    end,
    run = op_queues_get,
    queues = true,
}
INDEX_OPS.queues_poll = {
    read = function(a)
        local ttl, version = count_arg(a[3]), count_arg(a[4])
        if #a == 5 and type(a[2]) == 'string' and #a[2] > 0 and #a[2] <= 300 and
            ttl and ttl >= 1000 and ttl <= 3 * 3600000 and version and
            #a[5] <= QUEUE_SERVER_MAX then
            return true, a[2], ttl, version, a[5]
        end
    end,
    run = op_queues_poll,
    queues = true,
}
INDEX_OPS.queue_servers = {
    keep = true,
    read = function(a)
        if #a == 1 then return true end
    end,
    run = op_queue_servers,
    queues = true,
}
INDEX_OPS.queue_put = {
    read = function(a)
        local name, text = queue_name_arg(a[2]), queue_text_arg(a[3])
        if (#a == 4 or (#a == 5 and a[4] == 'alter')) and name and text and
            (a[4] == 'create' or a[4] == 'alter') then
            return true, name, text, a[4], a[5]
        end
    end,
    run = op_queue_put,
    queues = true,
}
INDEX_OPS.queue_drop = {
    read = function(a)
        local name = queue_name_arg(a[2])
        if #a == 2 and name then return true, name end
    end,
    run = op_queue_drop,
    queues = true,
}
INDEX_OPS.queue_open = {
    read = function(a)
        local name, ms = queue_name_arg(a[2]), count_arg(a[3])
        if #a == 3 and name and ms and ms <= 24 * 3600000 then return true, name, ms end
    end,
    run = op_queue_open,
    queues = true,
}
INDEX_OPS.queue_opens = {
    read = function(a)
        if #a == 1 then return true end
    end,
    run = op_queue_opens,
    queues = true,
}
INDEX_OPS.queue_open_done = {
    read = function(a)
        local name = queue_name_arg(a[2])
        if #a == 3 and name and type(a[3]) == 'string' and string.find(a[3], '^%d+$') then
            return true, name, a[3]
        end
    end,
    run = op_queue_open_done,
    queues = true,
}
INDEX_OPS.queues_restore = {
    read = function(a)
        local version, pairs = count_arg(a[2]), {}
        if not version or #a < 2 or #a % 2 ~= 0 or #a > 2 + 2 * QUEUE_MAX then return nil end
        for i = 3, #a, 2 do
            if not queue_name_arg(a[i]) or not queue_text_arg(a[i + 1]) then return nil end
            pairs[#pairs + 1] = a[i]
            pairs[#pairs + 1] = a[i + 1]
        end
        return true, version, pairs
    end,
    run = op_queues_restore,
    timeless = true,
    queues = true,
}

end -- 16 THE INDEX

do -- 17 A CALL ------------------------------------------------------------

-- Zeros that pad TIME's microseconds (1 to 6 digits) to six.
local PAD = {'00000', '0000', '000', '00', '0', ''}

-- The owner key whose names begin() made last: the names (BASE, K_TIMEOUT,
-- ...) are kept for the next call on the same semaphore, since making five
-- costs an idle acquire or release about 3% (bench/instructions.sh).
-- Derived from the name alone, so names kept are never wrong; one entry,
-- because a table of many costs a call on a semaphore not in it more than
-- the names (its garbage collection: the cold row of that bench).
local NAMED

-- Start a call on these keys (the owner, and the generation or nil):
-- nothing carries over from an earlier call (but the names: NAMED).
-- (A fast path needs TF besides the state, S, which read_state makes;
-- begin_general makes the rest, and until then they are nil, so that a
-- fast path cannot use one by mistake.  The clock's texts are cut from
-- TIME's own: printing a number costs half a command; bench/README.md.)
local function begin(keys)
    if keys[3] then                 -- (all six named, in a Cluster: above)
        K_OWNER, BASE, NAMED = keys[1], string.sub(keys[1], 1, -6), nil
        K_TIMEOUT, K_TICKET, K_INFO, K_WAITING, K_STATE, K_GEN =
            keys[2], keys[3], keys[4], keys[5], keys[6], keys[7]
    else
        if keys[1] ~= NAMED then
            K_OWNER, BASE, NAMED = keys[1], string.sub(keys[1], 1, -6), keys[1]
            K_TIMEOUT, K_TICKET, K_INFO, K_WAITING, K_STATE =
                BASE .. 'timeout', BASE .. 'ticket', BASE .. 'info', BASE .. 'waiting', BASE .. 'state'
        end
        K_GEN = keys[2]
    end
    GEN, GRACE, GEN_SYNC = nil, nil, false
    local t = redis.call('TIME')
    NOW_US_TEXT, NOW_WIDE = t[1] .. PAD[#t[2]] .. t[2], nil
    NOW_US = tonumber(NOW_US_TEXT)  -- (exact: below 2^53 until the year 2255)
    NOW_MS = math.floor(NOW_US / 1000)
    NOW_TEXT = string.sub(NOW_US_TEXT, 1, -4)
    TF, MEMBERS, WAITERS = {}, nil, nil     -- (S: read_state)
    W, WEIGHTS, TW = nil, nil, nil
end

-- What only the general path needs, made once a fast path has declined.
local function begin_general()
    W, WEIGHTS, TW = {}, {}, {}
    NEW_DL, CREATED, REMOVED, FRESH, NEW_KEYS = nil, false, false, false, {}
    GONE, GONE_TENANT = nil, nil
end

-- The error reply to a call of an unknown operation (op nil), or of op
-- with malformed arguments.
local function refused(op, a)
    if not op then return redis.error_reply('REDSEM unknown operation') end
    return redis.error_reply('REDSEM bad arguments for ' .. a[1])
end

-- An index operation, once read (ok and run's arguments).
local function run_index(keys, a, op, ok, ...)
    if not ok then return refused(op, a) end
    if not op.timeless then
        local t = redis.call('TIME')
        NOW_MS = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    return op.run(op.queues and keys or keys[1], ...)
end


-- I14: read, before the general path's first write, every key it may
-- write whose type Redis checks, so that another program's key there stops
-- the call with nothing written.  Each sorted set needs a ZCARD of its own:
-- the commands that read several at once (ZINTERCARD, ZUNION, ...) take a
-- set for a sorted set, and the first write would then stop half-way
-- (t/020's conflicts put sets there).  owner's and waiting's are
-- member_count() and waiter_count(), which a fast path may have made
-- already and the call's counts then follow, and timeout's is
-- housekeeping's own read, the members due (returned).  A hash or the ticket needs a command
-- each too.  (a: the call's arguments.)
local function probe(a)
    member_count()
    local due = redis.call('ZRANGEBYSCORE', K_TIMEOUT, '-inf', NOW_TEXT)
    waiter_count()
    if S.rk or a[1] == 'set_reserve' then redis.call('ZCARD', rline_key()) end
    local t = a[1] == 'acquire' and a[13] or ''
    if S.tl or t ~= '' then         -- (the lines are kept, or may be made)
        redis.call('ZCARD', tq_key())
        redis.call('ZCARD', tline_key(''))
        if t ~= '' then redis.call('ZCARD', tline_key(t)) end
    end
    if (S.tt > 0 or S.tl) and (a[1] == 'release' or a[1] == 'give_up') then
        -- (the reads remove() will make: the member's tenant, its fields)
        GONE, GONE_TENANT = a[2], tenant_of_info(redis.call('HGET', K_INFO, a[2]))
    else
        redis.call('HLEN', K_INFO)
    end
    redis.call('STRLEN', K_TICKET)
    if GONE_TENANT and GONE_TENANT ~= '' then
        tfield('h:' .. GONE_TENANT)
    elseif S.tl or S.tt > 0 or t ~= '' then
        redis.call('HLEN', tenant_key())
    end
    if S.wt or a[1] == 'set_weight' then redis.call('HLEN', weights_key()) end
    if a[1] == 'adapt_tick' then redis.call('HLEN', BASE .. 'apress') end
    return due
end

-- An operation on a semaphore, once read (ok and run's arguments).
-- In a Cluster (all six keys named), first whether the semaphore's slot is
-- migrating, away from this node (MIGRATING) or to it (IMPORTING, the call
-- sent with ASKING): a key a call does not name (a waiter's wake key, a
-- tenant's line) that was never made, or has not moved yet, would stop the
-- script midway ("non local key"), after writes Redis keeps (I14).  So two
-- keys that never exist are asked first, before any write (one missing key
-- is allowed with ASKING, two are not), and the call answers TRYAGAIN, as
-- Redis does for a named key that has moved; the caller asks again until
-- the migration ends.
local function run_op(keys, a, op, ok, ...)
    if not ok then return refused(op, a) end
    begin(keys)
    if keys[3] then
        local r = redis.pcall('EXISTS', BASE .. 'never', BASE .. 'never2')
        if type(r) == 'table' and r.err then
            return redis.error_reply('TRYAGAIN the semaphore\'s slot is being migrated')
        end
    end
    read_state()
    if S.bad and op == OPS.acquire then
        return redis.error_reply('REDSEM the state field ' .. S.bad ..
                                 ' of this semaphore holds a value redsem did not write')
    end
    local reply = op.fast and op.fast(...) or nil
    if reply ~= nil then return reply end
    begin_general()
    if S.gu and K_GEN then gen_sync() end
    local due = probe(a)
    note_counts()
    housekeeping(due)
    reply = op.run(...)
    finish()
    return reply
end

-- The only way in (the library's function): check, read the state,
-- housekeeping, the operation, write the state back and restore lifetimes.
-- An index operation names the index key alone; a semaphore's names its
-- owner key and its generation key second, or, in a Cluster, all six of
-- its keys and the generation key seventh (above)
-- (the script trusts that the first is an owner key: checking its name
-- would cost a call as much as a key does).  keep: called through the
-- library's "<library>_keep", registered allow-oom by src/script.c, which
-- Redis runs above maxmemory too: only the operations marked keep, those
-- that keep what is held or waited for, or give it back (refresh,
-- refresh_many, release, give_up, and a waiter's look, wait_check, which
-- takes what a release let it have), and those that only read (token,
-- list, limit, summary, rate, reserve, tenants, adapt, index_list,
-- queues_get, queue_servers: their housekeeping is a look's); none adds a
-- member.  So a Redis another program filled (noeviction) costs no holder
-- its slot, a release frees memory, and a DBA can still see who holds; the
-- others take dispatch's own name, which Redis refuses as a whole above
-- maxmemory (OOM).
function dispatch(keys, a, keep)
    local op = INDEX_OPS[a[1] or false]
    if keep and not (op or OPS[a[1] or false] or {}).keep then
        return redis.error_reply('REDSEM ' .. tostring(a[1]) .. ' is not run above maxmemory')
    end
    if op then
        -- (a semaphore's owner key routes index_policy, which reads no key,
        -- to its node; the others want the index: keys are arguments too)
        if op.queues then
            if #keys ~= 3 or string.sub(keys[1], -8) ~= '{queues}' or
                keys[2] ~= keys[1] .. ':servers' or keys[3] ~= keys[1] .. ':seen' then
                return refused(op, a)
            end
        elseif #keys ~= 1 or (not op.timeless and string.find(keys[1], 'owner', -5, true)) then
            return refused(op, a)
        end
        return run_index(keys, a, op, op.read(a))
    end
    op = OPS[a[1] or false]
    if not op or (#keys ~= 1 and #keys ~= 2 and #keys ~= 6 and #keys ~= 7) then return refused(op, a) end
    return run_op(keys, a, op, op.read(a))
end

end -- 17 A CALL
