/*
 * shmem.h
 *		State shared by the backends of one server (with
 *		shared_preload_libraries): the table of holds the keeper keeps
 *		alive, the server's identity, and per-semaphore statistics.
 *
 * shmem.c alone touches this memory (RedsemShared, the hold table, the
 * statistics hash); everybody else goes through the functions below.
 * Which lock guards what:
 *   holds_lock   every field of every SharedHold, hold_hint, holds_in_use,
 *                the role counts (role_holds), keeper_trouble_since and
 *                keeper_trouble
 *   stats_lock   which semaphores the statistics hash holds (found and
 *                added under it), stats_names and stats_full_logged; their
 *                counters are atomics, added with the lock held shared
 *   atomics      keeper_target (written by the keeper alone), keeper_wakes
 *                (wake-ups asked of the keeper), primary_moves, statistics
 *                counters
 *   primary_mutex (a spinlock) primary_target and primary_named: the
 *                Sentinel primary the keeper last heard named
 *   none         incarnation (written by the postmaster before any backend
 *                starts); keeper_pid, keeper_latch and keeper_wakes_at
 *                (written by the keeper alone, read by backends unlocked: a
 *                stale value costs one needless wake-up, or one the keeper
 *                finds counted in keeper_wakes; and the keeper never sleeps
 *                longer than KEEPER_MAX_SLEEP_MS)
 */
#ifndef REDSEM_SHMEM_H
#define REDSEM_SHMEM_H

#include "port/atomics.h"

#include "datatype/timestamp.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

#include "bounds.h"
#include "clock.h"

/* Room for a primary's "host:port" (a host name of 255 bytes, "[", "]:port") */
#define SHARED_PRIMARY_LEN	272

/* Where an acquire stands */
typedef enum HoldPhase
{
	PHASE_PENDING,				/* asked Redis, no answer yet */
	PHASE_WAITING,				/* in line */
	PHASE_HELD,					/* Redis granted the slot */
	PHASE_RELEASING				/* its release was sent; the backend reads
								 * the reply on its next call */
} HoldPhase;

/* Why a holder's slot is no longer surely its own (SharedHold.stop) */
typedef enum StopReason
{
	STOP_NONE,
	STOP_GONE,					/* a refresh found the slot gone */
	STOP_FORCED,				/* ... released by an administrator */
	STOP_UNCONFIRMED			/* its lease went unconfirmed too long
								 * (shared_hold_valid_until) */
} StopReason;

/* What becomes of a holder whose slot is lost (redsem.on_slot_lost) */
typedef enum SlotLostPolicy
{
	SLOT_LOST_CANCEL,
	SLOT_LOST_TERMINATE,
	SLOT_LOST_WARN
} SlotLostPolicy;

/*
 * One entry of the hold table.  Plain data only: the table outlives a
 * crash-restart (see shmem.c), so nothing in it may point anywhere.
 */
typedef struct SharedHold
{
	bool		in_use;
	uint8		scope;			/* its HoldScope (hold.h) */
	bool		abandoned;		/* its backend is gone or could not release
								 * it: the keeper must */
	bool		lost;			/* the keeper found the slot gone */
	bool		ending;			/* its backend is giving it back: a refresh
								 * that finds it gone met that release */
	bool		forced;			/* ... released by an administrator */
	bool		unkept;			/* taken under another Redis target */
	bool		role_counted;	/* counts toward its role's
								 * redsem.max_holds_per_role */
	bool		watch_counted;	/* a watched failed acquire counted among
								 * its role's watches (shmem.c) */
	uint8		phase;			/* HoldPhase */
	uint8		on_lost;		/* SlotLostPolicy, when it was taken */
	uint8		stop;			/* StopReason */
	bool		stop_signalled; /* the keeper took on stopping its backend */
	bool		told;			/* its session told the stop itself: the
								 * keeper signals it no more, only watches */
	bool		returned;		/* the acquire returned the slot: work may
								 * run under it (only then is it stopped) */
	bool		refresh_now;	/* the keeper refreshes it at once (an
								 * administrator force-released it) */
	bool		unsure;			/* its acquire got no answer and was given
								 * back: the keeper releases it again if
								 * the acquire reaches Redis late */
	bool		watching;		/* ... and released once since: only
								 * watched now (redsem_server_holds) */
	bool		crash_asked;	/* ... asked or waited when its server
								 * crash-restarted (no session failed it) */
	bool		granted;		/* its acquire returned the slot once: the
								 * session had it, not only a place in line */
	int			pid;
	Oid			role;			/* the session's login role */
	int			watch_bound;	/* how many failed acquires of its role the
								 * keeper may watch (0: no bound) */
	int			permits;
	int64		lease_ms;
	int64		confirm_ms;		/* promoted, not yet confirmed: Redis keeps
								 * the slot this long from refreshed_at
								 * (0: confirmed, the lease applies) */
	int64		ticket;
	TimestampTz acquired_at;
	TimestampTz refreshed_at;	/* when the last request that Redis
								 * confirmed the lease (or the place in
								 * line) with was sent, by redsem's clock */
	TimestampTz stopped_at;		/* when stop was decided */
	TimestampTz signal_sent_at; /* when the keeper signalled its backend
								 * for it (shared_hold_signal), 0: not */
	uint64		target;			/* redis_target_signature() at acquire, or
								 * the one the keeper found it under since */
	uint64		not_found_under;	/* a signature the keeper looked for it
									 * under and found no trace of it (0:
									 * none) */
	int			failures;		/* keeper's failed tries in a row */
	TimestampTz retry_at;		/* keeper's next try after a failure */
	TimestampTz logged_at;		/* keeper's last log line about it */
	char		trouble[160];	/* why the keeper's last try failed */
	pg_atomic_uint64 stop_at;	/* read without the lock by its backend's
								 * watchdog (hold.c): the valid_until of a
								 * slot to stop when it passes, 0 if none,
								 * SHARED_STOP_CLAIMED once the backend or
								 * the keeper took the stop on */
	char		prefix[REDSEM_MAX_PREFIX_BYTES + 1];
	char		name[REDSEM_MAX_NAME_BYTES + 1];
	char		id[REDSEM_MAX_ID_BYTES + 1];
} SharedHold;

/* SharedHold.stop_at of a stop its backend or the keeper took on */
#define SHARED_STOP_CLAIMED	1

/* How long Redis keeps a hold from its last confirmation: window or lease */
static inline int64
shared_hold_kept_ms(const SharedHold *h)
{
	return h->confirm_ms > 0 ? h->confirm_ms : h->lease_ms;
}

/*
 * Until when a held slot is surely this holder's, by redsem's clock
 * (src/timing.h): what Redis last confirmed, counted from when that request
 * was sent, less the margin for clock rates and for a stop to act
 */
static inline TimestampTz
shared_hold_valid_until(const SharedHold *h)
{
	return redsem_valid_until(h->refreshed_at, shared_hold_kept_ms(h));
}

/* A holder the keeper is to stop (shared_hold_stops_due) */
typedef struct StopNotice
{
	bool		self;			/* its backend's watchdog stopped it, or its
								 * session told the stop: not signalled */
	int			slot;
	int			pid;
	bool		told;			/* its session told the stop (it asked the
								 * keeper to watch it, src/escalate.c) */
	uint8		policy;			/* SlotLostPolicy */
	uint8		reason;			/* StopReason */
	int64		kept_ms;		/* the lease (or window) it had */
	bool		window;			/* kept_ms is a promotion window */
	int64		unconfirmed_ms; /* from its last confirmed request to the
								 * stop */
	int64		late_ms;		/* past its valid_until at the stop */
	char		name[REDSEM_MAX_NAME_BYTES + 1];
	char		id[REDSEM_MAX_ID_BYTES + 1];
} StopNotice;

/* A copy of one entry of the hold table, with its slot (the keeper's view) */
typedef struct HoldCopy
{
	int			slot;
	SharedHold	hold;
} HoldCopy;

/* The longest keeper trouble text kept (with its terminator) */
#define KEEPER_TROUBLE_LEN	160

typedef enum StatField
{
	STAT_ACQUIRED,
	STAT_REFUSED,
	STAT_WAITED,
	STAT_WAIT_TIMEOUTS,
	STAT_WAIT_TIME_MS,
	STAT_RELEASED,
	STAT_EXPIRED,
	STAT_LOST,
	STAT_REDIS_ERRORS,
	STAT_ACQUIRED_PERMITS,		/* added in 0.2.0: last, see observe.c */
	STAT_BYPASSED,				/* statement queues: below min_cost */
	STAT_UNQUEUED,				/* statement queues: ran without a slot */
	STAT_WAITS_LE_1MS,			/* waits, by how long they took (each wait */
	STAT_WAITS_LE_10MS,			/* counted in one bucket; see */
	STAT_WAITS_LE_100MS,		/* stats_count_wait) */
	STAT_WAITS_LE_1S,
	STAT_WAITS_LE_10S,
	STAT_WAITS_OVER_10S,
	STAT_WAIT_MAX_MS,			/* the longest wait (a maximum, not a sum) */
	STAT_NFIELDS
} StatField;

/* A semaphore's statistics, as stats_snapshot() copies them */
typedef struct SemStats
{
	char		prefix[REDSEM_MAX_PREFIX_BYTES + 1];	/* the key prefix */
	char		name[REDSEM_MAX_NAME_BYTES + 1];	/* "": the others */
	int64		counters[STAT_NFIELDS];
} SemStats;

extern int	redsem_max_tracked_holds;
extern int	redsem_max_tracked_semaphores;
extern int	redsem_reserved_holds;
extern int	redsem_max_holds_per_role;

extern void shmem_init(void);
extern uint64 redsem_incarnation(void);
extern bool shmem_ready(void);
extern bool shared_keeper_is_active(void);
extern void shared_keeper_set_target(uint64 target);
extern bool shared_keeper_keeps_target(uint64 target);
extern bool shared_keeper_reaches_target(uint64 target);
extern void shared_keeper_attach(Latch *latch, int pid);
extern void shared_keeper_detach(void);
extern bool shared_keeper_set_wake_time(TimestampTz when);
extern void shared_keeper_wake(void);
extern void shared_keeper_ask_touch(void);
extern uint64 shared_keeper_touches_asked(void);
extern bool shared_keeper_has_trouble(void);
extern void shared_keeper_trouble_note(const char *text, TimestampTz now);
extern void shared_keeper_trouble_clear(void);
extern TimestampTz shared_keeper_trouble_copy(char *buf, size_t len);
extern int	shared_hold_copy_for_keeper(HoldCopy *buf);
extern int	shared_hold_capacity(void);
extern void shared_hold_note_failure(int slot, const char *id, int failures,
									 TimestampTz retry_at, const char *text,
									 TimestampTz logged_at);
extern void shared_hold_set_ending(int slot, const char *id);
extern bool shared_hold_note_refresh(int slot, const char *id, int64 lease,
									 TimestampTz sent);
extern void shared_hold_set_unkept(int slot, const char *id, bool unkept);
extern void shared_hold_move_target(int slot, const char *id, uint64 target);
extern void shared_hold_not_found_under(int slot, const char *id, uint64 target);
extern uint64 shared_hold_target(int slot, const char *id);

extern bool shared_role_at_bound(Oid role);
extern int	shared_hold_register(const char *prefix, const char *name,
								 const char *id, uint64 target, uint8 scope,
								 int64 lease_ms, int permits,
								 bool may_use_reserve, Oid role,
								 bool role_bounded, SlotLostPolicy on_lost);
/* A holder of a semaphore on this server (shared_hold_holders) */
typedef struct LocalHolder
{
	int			pid;
	int			permits;
	char		id[REDSEM_MAX_ID_BYTES + 1];
} LocalHolder;

extern int	shared_hold_snapshot(SharedHold **out);
extern int	shared_hold_holders(const char *prefix, const char *name,
								LocalHolder *out, int max);
extern void shared_hold_set_phase(int slot, const char *id, HoldPhase phase,
								  int64 ticket, TimestampTz confirmed_at,
								  int64 confirm_ms, bool returned);
extern void shared_hold_refreshed(int slot, const char *id, int64 lease_ms,
								  TimestampTz confirmed_at);
extern void shared_hold_remove(int slot, const char *id);
extern void shared_hold_abandon(int slot, const char *id);
extern void shared_hold_set_unsure(int slot, const char *id);
extern void shared_hold_watch_unsure(int slot, const char *id, TimestampTz look_at);
extern void shared_hold_look_again(int slot, const char *id, TimestampTz look_at);
extern bool shared_hold_read(int slot, const char *id, SharedHold *copy);
extern uint64 shared_stops_made(void);
/* What the keeper's latest ask of the sentinels was (shared_sentinel_named) */
typedef enum SentinelNaming
{
	SENTINEL_SAME,				/* the primary they named before */
	SENTINEL_FIRST,				/* the first they named (for this target) */
	SENTINEL_MOVED				/* another one than before */
} SentinelNaming;

extern SentinelNaming shared_sentinel_named(uint64 target, const char *primary);
extern uint64 shared_sentinel_moves(void);
extern bool shared_sentinel_named_other(uint64 target, const char *primary);
extern bool shared_hold_stop(int slot, const char *id, StopReason why,
							 TimestampTz now);
extern TimestampTz shared_hold_told(int slot, const char *id);
extern bool shared_hold_signal(const StopNotice *sn, int sig);
extern bool shared_hold_refresh_now(const char *name, const char *id);
extern int	shared_hold_holder_pid(const char *name, const char *id);
extern int	shared_hold_watchdog(const volatile bool *mine, int n, TimestampTz now);
/* What a backend has of a semaphore besides stopped entries (escalate.c) */
typedef enum HoldFreshness
{
	HOLD_FRESH_NONE,
	HOLD_FRESH_WAITING,			/* an entry not (yet) granted */
	HOLD_FRESH_GRANTED
} HoldFreshness;

extern HoldFreshness shared_hold_fresh(int pid, const char *name, TimestampTz since);
extern int	shared_hold_stops_due(TimestampTz now, StopNotice *out, int max,
								  TimestampTz *earliest);

extern void stats_count(const char *prefix, const char *name, StatField field,
						int64 delta);
extern void stats_count_wait(const char *prefix, const char *name, int64 ms);
extern int	stats_snapshot(SemStats **out);
extern void stats_reset(const char *name);

/*
 * Names with statistics beyond redsem.max_tracked_semaphores: at most this
 * many, those the function given to stats_reserve_room_for accepts
 */
#define STATS_RESERVED_ROOM		64
typedef bool (*StatsReservedFn) (const char *name);
typedef TimestampTz (*StatsViewSinceFn) (void);
extern void stats_reserve_room_for(StatsReservedFn fn, StatsViewSinceFn since);

extern void shmem_define_gucs(void);
/* A generation as this server saw it (gen.c) */
typedef struct SharedGenSeen
{
	int64		us;				/* when it was made: its identity */
	int64		lmax;			/* the longest lease of its window */
	int64		lprev;			/* ... of the window before */
	int64		rot;			/* when its window began (ms) */
	int64		ul;				/* the longest lease of grants that waited
								 * for no replica, since ue last passed */
	int64		ue;				/* until when the latest of them may run (ms) */
	TimestampTz noted;			/* when this server noted its ue (redsem's
								 * clock) */
	TimestampTz looked;			/* when this server last noted it (redsem's
								 * clock) */
	char		era[41];		/* the primary it was last checked on */
	int64		grace_until;	/* the grace it told (Redis's ms), 0: none */
} SharedGenSeen;

/* What this server saw of a slot's generation (gen.c), under signature sig */
extern bool shared_gen_read(int slot, uint64 sig, SharedGenSeen *g);
extern void shared_gen_write(int slot, uint64 sig, const SharedGenSeen *g);

#endif							/* REDSEM_SHMEM_H */
