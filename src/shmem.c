/*
 * shmem.c
 *		Shared state, when redsem is in shared_preload_libraries: the table
 *		of every hold on this server (for the keeper), the server's
 *		identity, and per-semaphore statistics.
 *
 * The hold table lives in its own anonymous shared mapping, made once by
 * the postmaster at start and inherited by every child.  A crash-restart
 * re-creates PostgreSQL's shared memory but not this mapping, so the holds
 * of the backends that died are still listed; the postmaster marks them
 * abandoned (a loop over plain data, no pointers followed) and the new
 * keeper releases them like any orphan.  Every acquire is registered here
 * before Redis is asked, so no slot Redis granted can be missed, however
 * soon after the grant the crash came.  The count of entries per role
 * (redsem.max_holds_per_role) lives in PostgreSQL's shared memory and is
 * counted again from the table at each (re)initialization.
 *
 * Without preloading, shared is NULL and every function here degrades to a
 * no-op (statistics functions raise 55000 instead).
 */
#include "postgres.h"

#include <signal.h>
#include <sys/mman.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "bounds.h"
#include "clock.h"
#include "guc.h"
#include "redis/cluster.h"
#include "shmem.h"
#include "timing.h"

/*
 * A slot's generation as this server last saw it (gen.c): sig 0 is none.
 * Its spinlock keeps a read from mixing two writes (an acquire reads it
 * once; writes come when Redis tells a generation the caller did not know).
 */
typedef struct SharedGen
{
	slock_t		mutex;
	uint64		sig;			/* the Redis target and prefix */
	SharedGenSeen seen;
} SharedGen;

/* The part of shared memory that a crash-restart re-creates */
typedef struct RedsemShared
{
	LWLock	   *holds_lock;
	LWLock	   *stats_lock;
	uint64		incarnation;	/* this server run, part of every holder id */
	int			hold_hint;		/* where to look first for a free entry */
	int			holds_in_use;	/* entries of the hold table in use */
	int			keeper_pid;
	Latch	   *keeper_latch;
	TimestampTz keeper_wakes_at;	/* when the sleeping keeper looks next */
	pg_atomic_uint64 keeper_wakes;	/* wake-ups asked of the keeper: one its
									 * own Redis waits swallowed (they reset
									 * its latch) is seen here */
	pg_atomic_uint64 keeper_target; /* redis_target_signature() of the
									 * keeper's last cycle: the holds it
									 * refreshes */
	pg_atomic_uint64 stops; /* holders stopped so far: a backend looks at
							 * its holds again when this moved */
	pg_atomic_uint64 touches_asked; /* early touches of the index asked of
									 * the keeper (an adaptive limit set) */
	TimestampTz keeper_trouble_since;	/* Redis unusable for the keeper
										 * since, or 0 */
	char		keeper_trouble[KEEPER_TROUBLE_LEN];
	int			stats_names;	/* statistics entries of ordinary names */
	int			stats_reserved; /* ...and of queues, in the room beyond */
	bool		stats_full_logged;	/* said that they fill the table */
	SharedGen	gens[CLUSTER_SLOTS];	/* per slot: its generation, as this
										 * server last saw it (gen.c) */
	/* through Redis Sentinel: the primary the keeper last heard named */
	slock_t		primary_mutex;
	uint64		primary_target; /* for redis_target_signature() this */
	char		primary_named[SHARED_PRIMARY_LEN];	/* "host:port" */
	pg_atomic_uint64 primary_moves; /* times it named another one */
} RedsemShared;

/*
 * A semaphore's statistics in shared memory (SemStats is their copy):
 * counters are atomics, so counting takes the statistics lock only shared
 * (to find the entry), not exclusive — a statement queue counts every
 * statement that passes by cost.
 */
typedef struct StatsKey
{
	char		prefix[REDSEM_MAX_PREFIX_BYTES + 1];	/* the key prefix */
	char		name[REDSEM_MAX_NAME_BYTES + 1];	/* "": the others */
} StatsKey;

typedef struct SharedSemStats
{
	StatsKey	key;			/* hash key: semaphores of two prefixes are
								 * two semaphores */
	bool		reserved;		/* a statement queue's, beyond the cap */
	pg_atomic_uint64 counted_at;	/* when last counted into (redsem_now) */
	pg_atomic_uint64 counters[STAT_NFIELDS];
} SharedSemStats;

/*
 * How many entries of the hold table count toward one role's bound
 * (redsem.max_holds_per_role), under holds_lock, and how many of its failed
 * acquires the keeper watches (shared_hold_watch_unsure: no more than the
 * same bound); a role with neither has no entry.  Each counted entry names
 * one role, so the hash never needs more entries than the hold table has.
 */
typedef struct RoleHolds
{
	Oid			role;			/* hash key */
	int			holds;
	int			watches;
} RoleHolds;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static RedsemShared *shared = NULL;
static SharedHold *hold_table = NULL;	/* survives crash-restarts */
static int	hold_table_size = 0;
static HTAB *stats_hash = NULL;
static HTAB *role_holds = NULL;

static SharedHold *tracked_hold(int slot, const char *id);
static bool mark_stopped(SharedHold *h, StopReason why, TimestampTz now);
static uint64 local_incarnation = 0;

/* Set by the postmaster once it has initialised shared memory once */
static bool postmaster_started_once = false;

int			redsem_max_tracked_holds = 4096;
int			redsem_max_tracked_semaphores = 1000;
int			redsem_reserved_holds = 128;
int			redsem_max_holds_per_role = -1;

/*
 * The key of the statistics entry that counts every semaphore the table had
 * no room for (no semaphore name is empty); redsem_stats shows it with a
 * NULL name.  All zeros.
 */
static const StatsKey stats_others_key;

/* Which names have room beyond redsem.max_tracked_semaphores, if any; since when that is known */
static StatsReservedFn stats_reserved_fn = NULL;
static StatsViewSinceFn stats_view_since_fn = NULL;

/*
 * Entries of the statistics hash: redsem.max_tracked_semaphores ordinary
 * names, room beyond them for STATS_RESERVED_ROOM more (statement queues:
 * so that a role that fills the table with names of its own does not
 * blank redsem_queues' counters), and the others' entry.
 */
static long
stats_table_size(void)
{
	return (long) redsem_max_tracked_semaphores + STATS_RESERVED_ROOM + 1;
}

/*
 * From _PG_init: fn tells the names that have room of their own (the
 * statement queues' semaphores; the module above says which they are),
 * and since tells since when this backend knows them
 */
void
stats_reserve_room_for(StatsReservedFn fn, StatsViewSinceFn since)
{
	stats_reserved_fn = fn;
	stats_view_since_fn = since;
}

/*
 * Under stats_lock held exclusive (or alone, at startup): a new entry for
 * key with its counters at zero, or NULL if the hash is full
 */
static SharedSemStats *
stats_new_entry(const StatsKey *key, bool reserved)
{
	bool		found;
	SharedSemStats *s = hash_search(stats_hash, key, HASH_ENTER_NULL, &found);

	if (s != NULL && !found)
	{
		s->reserved = reserved;
		pg_atomic_init_u64(&s->counted_at, 0);
		for (int f = 0; f < STAT_NFIELDS; f++)
			pg_atomic_init_u64(&s->counters[f], 0);
	}
	return s;
}

/* Ask for our shared memory and locks */
static void
redsem_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(add_size(sizeof(RedsemShared),
											 hash_estimate_size(stats_table_size(),
																sizeof(SharedSemStats))),
									hash_estimate_size(hold_table_size,
													   sizeof(RoleHolds))));
	RequestNamedLWLockTranche("redsem", 2);
}

/* A random 64-bit number, never 0 */
static uint64
random_tag(void)
{
	uint64		tag = 0;

	while (tag == 0)
	{
		if (!pg_strong_random(&tag, sizeof(tag)))
			tag = ((uint64) MyProcPid << 32) ^ (uint64) GetCurrentTimestamp();
	}
	return tag;
}

/*
 * After a crash-restart, in the postmaster: every hold still listed belonged
 * to a backend that is gone.  Hand them all to the keeper.  The entries may
 * have been half written when their backend died: terminate every string.
 * An acquire that was asking or waiting may have had a request on its way,
 * which may still reach Redis: the keeper watches it for a late grant once
 * it has released it (unsure, as for a request that got no answer).
 */
static void
abandon_previous_holds(void)
{
	for (int i = 0; i < hold_table_size; i++)
	{
		SharedHold *h = &hold_table[i];

		if (!h->in_use)
			continue;
		h->prefix[sizeof(h->prefix) - 1] = '\0';
		h->name[sizeof(h->name) - 1] = '\0';
		h->id[sizeof(h->id) - 1] = '\0';
		h->trouble[sizeof(h->trouble) - 1] = '\0';
		h->abandoned = true;
		/* (one that had failed before, watched or not, is unsure already) */
		if ((h->phase == PHASE_PENDING || h->phase == PHASE_WAITING) &&
			!h->unsure)
			h->unsure = h->crash_asked = true;
		h->pid = 0;
		pg_atomic_write_u64(&h->stop_at, 0);
		h->failures = 0;
		h->retry_at = 0;
		h->logged_at = 0;
	}
}

/*
 * How many entries of the hold table only privileged acquires may take:
 * redsem.reserved_holds, at most half of the table.
 */
static int
shared_hold_reserve(void)
{
	return Min(redsem_reserved_holds, hold_table_size / 2);
}

/*
 * Under holds_lock held exclusive (or alone, at startup): add to the counts
 * of role's held entries and watched ones, its hash entry made or removed
 * as needed.  False if there was no room for a new one (never: see
 * RoleHolds).
 */
static bool
role_count_add(Oid role, int holds, int watches)
{
	bool		found;
	RoleHolds  *r = hash_search(role_holds, &role,
								holds > 0 || watches > 0 ? HASH_ENTER_NULL : HASH_FIND,
								&found);

	if (r == NULL)
		return false;
	if (!found)
		r->holds = r->watches = 0;
	r->holds += holds;
	r->watches += watches;
	if (r->holds <= 0 && r->watches <= 0)
		hash_search(role_holds, &role, HASH_REMOVE, NULL);
	return true;
}

/* role_count_add of held entries only */
static bool
role_holds_add(Oid role, int delta)
{
	return role_count_add(role, delta, 0);
}

/* How many of role's failed acquires the keeper watches (under holds_lock) */
static int
role_watches(Oid role)
{
	RoleHolds  *r = hash_search(role_holds, &role, HASH_FIND, NULL);

	return r != NULL ? r->watches : 0;
}

/*
 * Attach to (or create) our part of PostgreSQL's shared memory.  In the
 * postmaster this runs at every (re)initialization: the counts of the hold
 * table (which outlives it) are made again from its entries.
 */
static void
redsem_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("redsem", sizeof(RedsemShared), &found);
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(Oid);
	info.entrysize = sizeof(RoleHolds);
	role_holds = ShmemInitHash("redsem holds per role",
							   hold_table_size, hold_table_size,
							   &info, HASH_ELEM | HASH_BLOBS);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche("redsem");

		memset(shared, 0, sizeof(RedsemShared));
		shared->holds_lock = &locks[0].lock;
		shared->stats_lock = &locks[1].lock;
		shared->incarnation = random_tag();
		pg_atomic_init_u64(&shared->keeper_target, 0);
		pg_atomic_init_u64(&shared->keeper_wakes, 0);
		pg_atomic_init_u64(&shared->stops, 0);
		pg_atomic_init_u64(&shared->touches_asked, 0);
		for (int i = 0; i < CLUSTER_SLOTS; i++)
			SpinLockInit(&shared->gens[i].mutex);
		SpinLockInit(&shared->primary_mutex);
		pg_atomic_init_u64(&shared->primary_moves, 0);
		if (!IsUnderPostmaster)
		{
			if (postmaster_started_once)
				abandon_previous_holds();
			postmaster_started_once = true;
		}
		for (int i = 0; i < hold_table_size; i++)
		{
			SharedHold *h = &hold_table[i];

			if (!h->in_use)
				continue;
			shared->holds_in_use++;
			if (h->role_counted && !role_holds_add(h->role, 1))
				h->role_counted = false;
			if (h->watch_counted && !role_count_add(h->role, 0, 1))
				h->watch_counted = false;
		}
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(StatsKey);
	info.entrysize = sizeof(SharedSemStats);
	stats_hash = ShmemInitHash("redsem statistics",
							   stats_table_size(), stats_table_size(),
							   &info, HASH_ELEM | HASH_BLOBS);
	if (!found)
		(void) stats_new_entry(&stats_others_key, true);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * From _PG_init, when preloading: map the hold table (in the postmaster,
 * so that every child inherits it and a crash-restart keeps it) and install
 * the shared memory hooks.
 */
void
shmem_init(void)
{
	Size		size = mul_size(redsem_max_tracked_holds, sizeof(SharedHold));
	void	   *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
						 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		ereport(FATAL,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not map %zu bytes for the redsem hold table: %m", size),
				 errhint("Lower redsem.max_tracked_holds.")));
	hold_table = (SharedHold *) p;
	hold_table_size = redsem_max_tracked_holds;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = redsem_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = redsem_shmem_startup;
}

/* This server run's identity: shared when preloaded, else per backend */
uint64
redsem_incarnation(void)
{
	if (shared != NULL)
		return shared->incarnation;
	if (local_incarnation == 0)
		local_incarnation = random_tag();
	return local_incarnation;
}

/*
 * The keeper's connection trouble, as redsem_held() shows it: note it (the
 * first time since it began, and its latest words), clear it, or copy it.
 * keeper_trouble_since and keeper_trouble are written and read under
 * holds_lock, so a reader never sees half a message.
 */
void
shared_keeper_trouble_note(const char *text, TimestampTz now)
{
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if (shared->keeper_trouble_since == 0)
		shared->keeper_trouble_since = now;
	strlcpy(shared->keeper_trouble, text, sizeof(shared->keeper_trouble));
	LWLockRelease(shared->holds_lock);
}

/* Forget the keeper's trouble (Redis answers again) */
void
shared_keeper_trouble_clear(void)
{
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	shared->keeper_trouble_since = 0;
	shared->keeper_trouble[0] = '\0';
	LWLockRelease(shared->holds_lock);
}

/* Since when the keeper has had trouble (0: none), its words into buf */
TimestampTz
shared_keeper_trouble_copy(char *buf, size_t len)
{
	TimestampTz since;

	buf[0] = '\0';
	if (shared == NULL)
		return 0;
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	since = shared->keeper_trouble_since;
	strlcpy(buf, shared->keeper_trouble, len);
	LWLockRelease(shared->holds_lock);
	return since;
}

/* True when this server has redsem's shared memory (it is preloaded) */
bool
shmem_ready(void)
{
	return shared != NULL;
}

/* The keeper starts: where to wake it, and who it is */
void
shared_keeper_attach(Latch *latch, int pid)
{
	shared->keeper_latch = latch;
	shared->keeper_pid = pid;
}

/* The keeper exits (on_shmem_exit) */
void
shared_keeper_detach(void)
{
	shared->keeper_latch = NULL;
	shared->keeper_pid = 0;
}

/* keeper_wakes as the keeper's last copy of the holds found it (the keeper's) */
static uint64 wakes_at_copy = 0;

/*
 * The keeper sleeps until when: a backend with an earlier need wakes it.
 * True if a backend asked for a wake-up since the keeper copied the holds:
 * the keeper's latch may have been reset by its own Redis waits since, so
 * it must look again instead of sleeping.  (A backend that reads the old
 * keeper_wakes_at after this adds its wake-up after our read, and sets the
 * latch after our last reset of it.)
 */
bool
shared_keeper_set_wake_time(TimestampTz when)
{
	shared->keeper_wakes_at = when;
	pg_memory_barrier();
	return pg_atomic_read_u64(&shared->keeper_wakes) != wakes_at_copy;
}

/* The keeper refreshes the holds taken on target (only the keeper writes it) */
void
shared_keeper_set_target(uint64 target)
{
	pg_atomic_write_u64(&shared->keeper_target, target);
}

/*
 * True if the keeper, running and without trouble, refreshes the holds
 * taken on target
 */
bool
shared_keeper_keeps_target(uint64 target)
{
	return shared_keeper_reaches_target(target) && !shared_keeper_has_trouble();
}

/* True if the keeper runs and works on the Redis of target (trouble or not) */
bool
shared_keeper_reaches_target(uint64 target)
{
	return shared != NULL && pg_atomic_read_u64(&shared->keeper_target) == target &&
		shared_keeper_is_active();
}

/* True while the keeper has trouble with Redis (only the keeper writes it) */
bool
shared_keeper_has_trouble(void)
{
	return shared->keeper_trouble_since != 0;
}

/*
 * Copy the in-use holds into buf (hold_table_size entries) for the keeper,
 * which is awake from now on: a backend that adds a hold meanwhile sees
 * keeper_wakes_at at its end of time and wakes it again.  Returns how many.
 */
int
shared_hold_copy_for_keeper(HoldCopy *buf)
{
	int			n = 0;

	shared->keeper_wakes_at = DT_NOEND;
	pg_memory_barrier();
	wakes_at_copy = pg_atomic_read_u64(&shared->keeper_wakes);
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	for (int i = 0; i < hold_table_size; i++)
	{
		if (!hold_table[i].in_use)
			continue;
		buf[n].slot = i;
		buf[n].hold = hold_table[i];
		n++;
	}
	LWLockRelease(shared->holds_lock);
	return n;
}

/* How many entries the hold table has (its copies' size) */
int
shared_hold_capacity(void)
{
	return hold_table_size;
}

/* The keeper failed on a hold: count, when to try again, why, logged when */
void
shared_hold_note_failure(int slot, const char *id, int failures,
						 TimestampTz retry_at, const char *text,
						 TimestampTz logged_at)
{
	SharedHold *h;

	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		h->failures = failures;
		h->retry_at = retry_at;
		strlcpy(h->trouble, text, sizeof(h->trouble));
		if (logged_at != 0)
			h->logged_at = logged_at;
	}
	LWLockRelease(shared->holds_lock);
}

static bool stoppable(const SharedHold *h);

/*
 * Under holds_lock exclusive: set h's stop_at from its state (its
 * valid_until while it is a slot to stop, else 0), unless its stop was
 * claimed (SHARED_STOP_CLAIMED stays until the hold ends or is asked for
 * anew: stopped once, stopped for good)
 */
static void
note_stop_at(SharedHold *h)
{
	uint64		want = 0;
	uint64		cur = pg_atomic_read_u64(&h->stop_at);

	if (stoppable(h) && h->stop == STOP_NONE)
		want = (uint64) Max(shared_hold_valid_until(h), SHARED_STOP_CLAIMED + 1);
	while (cur != SHARED_STOP_CLAIMED && cur != want)
		if (pg_atomic_compare_exchange_u64(&h->stop_at, &cur, want))
			break;
}

/*
 * The backend's watchdog, in a signal handler (no lock; atomics only): take
 * on the stop of each of its slots (mine: by slot) past its stop_at.  The
 * strongest policy of those it took on (SlotLostPolicy: cancel or
 * terminate), -1 if none.
 */
int
shared_hold_watchdog(const volatile bool *mine, int n, TimestampTz now)
{
	int			policy = -1;

	if (shared == NULL)
		return -1;
	for (int i = 0; i < Min(n, hold_table_size); i++)
	{
		SharedHold *h = &hold_table[i];
		uint64		at;

		if (!mine[i])
			continue;
		at = pg_atomic_read_u64(&h->stop_at);
		if (at <= SHARED_STOP_CLAIMED || now < (TimestampTz) at ||
			!pg_atomic_compare_exchange_u64(&h->stop_at, &at, SHARED_STOP_CLAIMED))
			continue;
		if (policy < 0 || h->on_lost == SLOT_LOST_TERMINATE)
			policy = h->on_lost;
	}
	return policy;
}

/*
 * The backend of a hold is giving it back (its scope ended): a refresh
 * racing that release finds the slot gone, which stops nobody
 */
void
shared_hold_set_ending(int slot, const char *id)
{
	SharedHold *h;

	if (shared == NULL || slot < 0)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		h->ending = true;
		note_stop_at(h);
	}
	LWLockRelease(shared->holds_lock);
}

/*
 * The keeper refreshed a hold: a new lease (> 0, confirmed at sent), a slot
 * found gone (0), or one an administrator released (-1); failures cleared.
 * True if the slot was lost: gone or released by an administrator, not by
 * its backend's own release, which may have reached Redis just before the
 * refresh (then the entry is ending, or no longer tracked).
 */
bool
shared_hold_note_refresh(int slot, const char *id, int64 lease,
						 TimestampTz sent)
{
	SharedHold *h;
	bool		lost = false;

	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		if (lease > 0)
		{
			h->refreshed_at = sent;
			h->confirm_ms = 0;
		}
		else if (h->ending)
			h->lost = true;		/* (its backend's own release took it) */
		else
		{
			h->lost = lost = true;
			h->forced = (lease < 0);
			mark_stopped(h, lease < 0 ? STOP_FORCED : STOP_GONE, redsem_now());
		}
		h->failures = 0;
		h->retry_at = 0;
		h->trouble[0] = '\0';
		h->refresh_now = false;
		note_stop_at(h);
	}
	LWLockRelease(shared->holds_lock);
	return lost;
}

/* Forget a hold's failed tries: they were against another Redis (h locked) */
static void
forget_failures(SharedHold *h)
{
	h->failures = 0;
	h->retry_at = 0;
	h->logged_at = 0;
	h->trouble[0] = '\0';
}

/* Flag whether a hold was taken under another Redis target than the keeper's */
void
shared_hold_set_unkept(int slot, const char *id, bool unkept)
{
	SharedHold *h;

	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL && h->unkept != unkept)
	{
		h->unkept = unkept;
		forget_failures(h);
	}
	LWLockRelease(shared->holds_lock);
}

/*
 * Note that the Redis of target has the hold (the keeper found it there):
 * it is kept from now on, and its backend releases it there
 */
void
shared_hold_move_target(int slot, const char *id, uint64 target)
{
	SharedHold *h;

	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		h->target = target;
		h->unkept = false;
		h->not_found_under = 0;
		forget_failures(h);
	}
	LWLockRelease(shared->holds_lock);
}

/* Note that the Redis of target has no trace of the hold (not asked again) */
void
shared_hold_not_found_under(int slot, const char *id, uint64 target)
{
	SharedHold *h;

	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		h->not_found_under = target;
		forget_failures(h);
	}
	LWLockRelease(shared->holds_lock);
}

/* The signature a tracked hold lives under now, or 0 if it is not tracked */
uint64
shared_hold_target(int slot, const char *id)
{
	SharedHold *h;
	uint64		target = 0;

	if (slot < 0)
		return 0;
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	if ((h = tracked_hold(slot, id)) != NULL)
		target = h->target;
	LWLockRelease(shared->holds_lock);
	return target;
}

/* True if the keeper process is running */
bool
shared_keeper_is_active(void)
{
	pid_t		pid;

	if (shared == NULL)
		return false;
	pid = shared->keeper_pid;
	return pid != 0 && kill(pid, 0) == 0;
}

/*
 * The entry in slot if it still tracks id, else NULL (a slot is reused once
 * its hold ends).  The caller holds holds_lock.
 */
static SharedHold *
tracked_hold(int slot, const char *id)
{
	SharedHold *h;

	if (slot < 0 || slot >= hold_table_size)
		return NULL;
	h = &hold_table[slot];
	return (h->in_use && strcmp(h->id, id) == 0) ? h : NULL;
}

/* Wake the keeper if it sleeps past when, so it sees a change in time */
static void
wake_keeper_by(TimestampTz when)
{
	Latch	   *latch = shared->keeper_latch;

	if (latch != NULL && when < shared->keeper_wakes_at)
	{
		pg_atomic_fetch_add_u64(&shared->keeper_wakes, 1);
		SetLatch(latch);
	}
}

/* Wake the keeper now (it has something to do: a read asked of it) */
void
shared_keeper_wake(void)
{
	if (shared != NULL)
		wake_keeper_by(DT_NOBEGIN);
}

/*
 * Ask the keeper for a touch of the index at once (fleet.c), so that it
 * learns of an adaptive limit just set (X4 in src/redsem.lua)
 */
void
shared_keeper_ask_touch(void)
{
	if (shared == NULL)
		return;
	pg_atomic_fetch_add_u64(&shared->touches_asked, 1);
	shared_keeper_wake();
}

/* The early touches asked of the keeper so far */
uint64
shared_keeper_touches_asked(void)
{
	return shared == NULL ? 0 : pg_atomic_read_u64(&shared->touches_asked);
}

/*
 * How many entries of the hold table one role may take: the setting, or a
 * quarter of the table when it is -1; 0 for no bound
 */
static int
role_bound(void)
{
	if (redsem_max_holds_per_role < 0)
		return Max(hold_table_size / 4, 1);
	return redsem_max_holds_per_role;
}

/* Under holds_lock: how many entries of the table role's bound counts */
static int
role_entries(Oid role)
{
	RoleHolds  *r = hash_search(role_holds, &role, HASH_FIND, NULL);

	return r != NULL ? r->holds : 0;
}

/*
 * True if role (bounded by redsem.max_holds_per_role) has that many entries
 * in the table already, as shared_hold_register would find it now
 */
bool
shared_role_at_bound(Oid role)
{
	int			bound = role_bound();
	bool		full;

	if (shared == NULL || bound <= 0)
		return false;
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	full = role_entries(role) >= bound;
	LWLockRelease(shared->holds_lock);
	return full;
}

/*
 * Register an acquire before Redis is asked, so that the keeper can release
 * whatever Redis grants if this backend dies.  Returns its slot, or -1 when
 * not preloaded.  A full table is an error: a hold nobody could keep alive
 * or clean up would break the promise of the limit.  So is one more entry
 * for role (the session's login role) when role_bounded and the role has
 * redsem.max_holds_per_role already: one role does not fill the table for
 * the others.
 */
int
shared_hold_register(const char *prefix, const char *name, const char *id,
					 uint64 target, uint8 scope, int64 lease_ms, int permits,
					 bool may_use_reserve, Oid role, bool role_bounded,
					 SlotLostPolicy on_lost)
{
	int			slot = -1;
	TimestampTz now = redsem_now();
	int			reserve = shared_hold_reserve();
	int			bound = role_bounded ? role_bound() : 0;
	int			role_has = 0;
	bool		reserved = false;

	if (shared == NULL)
		return -1;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if (bound > 0)
		role_has = role_entries(role);
	if (!may_use_reserve && shared->holds_in_use >= hold_table_size - reserve)
		reserved = true;
	for (int k = 0; k < hold_table_size && !reserved &&
		 (bound == 0 || role_has < bound); k++)
	{
		/* round-robin from the last entry taken: O(1) unless nearly full */
		int			i = (shared->hold_hint + k) % hold_table_size;
		SharedHold *h = &hold_table[i];

		if (h->in_use)
			continue;
		if (role_bounded && !role_holds_add(role, 1))
			break;				/* no room to count it: never, see RoleHolds */
		shared->hold_hint = (i + 1) % hold_table_size;
		memset(h, 0, sizeof(*h));
		h->role = role;
		h->role_counted = role_bounded;
		h->watch_bound = bound;
		h->pid = MyProcPid;
		h->scope = scope;
		h->on_lost = (uint8) on_lost;
		h->phase = PHASE_PENDING;
		h->lease_ms = lease_ms;
		h->permits = permits;
		h->acquired_at = h->refreshed_at = now;
		h->target = target;
		strlcpy(h->prefix, prefix, sizeof(h->prefix));
		strlcpy(h->name, name, sizeof(h->name));
		strlcpy(h->id, id, sizeof(h->id));
		pg_write_barrier();
		h->in_use = true;
		shared->holds_in_use++;
		slot = i;
		break;
	}
	LWLockRelease(shared->holds_lock);
	if (bound > 0 && role_has >= bound)
	{
		char	   *rolename = GetUserNameFromId(role, true);

		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role \"%s\" already holds or waits for %d redsem slots on this server",
						rolename ? rolename : "?", role_has),
				 errdetail("redsem.max_holds_per_role allows %d per role on this server. Slots still being given back count until the release is confirmed: by the session that sent it, at its next redsem call, or else by the keeper, redsem.command_timeout plus 1 s after it was sent.",
						   bound),
				 errhint("Release slots in the role's sessions with redsem_release or redsem_release_all; a superuser can change the bound for a role with ALTER ROLE ... SET redsem.max_holds_per_role.")));
	}
	if (reserved)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many redsem holds on this server"),
				 errdetail("The last %d of the %d holds the keeper can track (redsem.reserved_holds) are kept for superusers, members of redsem_admin and statement queues.",
						   reserve, hold_table_size),
				 errhint("Release slots, lower redsem.max_holds_per_role or redsem.max_holds_per_session for the roles that take many, or raise redsem.max_tracked_holds.")));
	if (slot < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many redsem holds on this server"),
				 errdetail("The keeper can track %d holds (and places in line) at once.",
						   hold_table_size),
				 errhint("Raise redsem.max_tracked_holds.")));
	return slot;
}

/*
 * The acquire joined the line or was granted (confirmed_at: when the
 * request that Redis answered was sent, a safe start of its lease).  A
 * grant by promotion that nobody confirmed yet has confirm_ms (its window)
 * rather than its lease to live: the keeper confirms it in time.
 */
void
shared_hold_set_phase(int slot, const char *id, HoldPhase phase, int64 ticket,
					  TimestampTz confirmed_at, int64 confirm_ms,
					  bool returned)
{
	SharedHold *h;
	int64		due_ms = 0;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		h->phase = phase;
		h->ticket = ticket;
		h->refreshed_at = confirmed_at;
		h->confirm_ms = confirm_ms;
		h->returned = returned;
		if (!returned)
		{
			/* a new try of the acquire: what stopped the last is over */
			h->stop = STOP_NONE;
			h->stop_signalled = false;
			h->signal_sent_at = 0;
			h->told = false;
			h->lost = false;
			h->forced = false;
			pg_atomic_write_u64(&h->stop_at, 0);
		}
		if (phase == PHASE_HELD)
			h->acquired_at = confirmed_at;
		/* (a promotion may yet fail the acquire: granted once returned) */
		if (phase == PHASE_HELD && returned)
			h->granted = true;
		due_ms = shared_hold_kept_ms(h) / KEEPER_REFRESH_FRACTION;
		note_stop_at(h);
	}
	LWLockRelease(shared->holds_lock);
	if (phase == PHASE_HELD)
		wake_keeper_by(TimestampTzPlusMilliseconds(confirmed_at, due_ms));
}

/* Redis confirmed a lease (or a place in line), perhaps with a new length */
void
shared_hold_refreshed(int slot, const char *id, int64 lease_ms,
					  TimestampTz confirmed_at)
{
	SharedHold *h;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		if (lease_ms > 0)
			h->lease_ms = lease_ms;
		h->refreshed_at = confirmed_at;
		h->confirm_ms = 0;
		if (h->stop == STOP_NONE)
		{
			/* a holder once stopped stays stopped */
			h->lost = false;
			h->forced = false;
		}
		note_stop_at(h);
	}
	LWLockRelease(shared->holds_lock);
	wake_keeper_by(TimestampTzPlusMilliseconds(confirmed_at,
											   lease_ms / KEEPER_REFRESH_FRACTION));
}

/*
 * The holders of semaphore (prefix, name) on this server: up to max of
 * them into out.  Returns how many there are.
 */
int
shared_hold_holders(const char *prefix, const char *name, LocalHolder *out,
					int max)
{
	int			n = 0;

	if (shared == NULL)
		return 0;
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	for (int i = 0; i < hold_table_size && n < max; i++)
	{
		SharedHold *h = &hold_table[i];

		if (!h->in_use || h->phase != PHASE_HELD || h->abandoned ||
			strcmp(h->name, name) != 0 || strcmp(h->prefix, prefix) != 0)
			continue;
		out[n].pid = h->pid;
		out[n].permits = h->permits;
		strlcpy(out[n].id, h->id, sizeof(out[n].id));
		n++;
	}
	LWLockRelease(shared->holds_lock);
	return n;
}

/*
 * A copy of every entry of the hold table in use, palloc'd (none without
 * shared_preload_libraries).  Returns how many.
 */
int
shared_hold_snapshot(SharedHold **out)
{
	int			n = 0;

	*out = NULL;
	if (shared == NULL)
		return 0;
	*out = palloc(sizeof(SharedHold) * Max(hold_table_size, 1));
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	for (int i = 0; i < hold_table_size; i++)
		if (hold_table[i].in_use)
			(*out)[n++] = hold_table[i];
	LWLockRelease(shared->holds_lock);
	return n;
}

/* Stop tracking a hold */
void
shared_hold_remove(int slot, const char *id)
{
	SharedHold *h;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		h->in_use = false;
		note_stop_at(h);
		shared->holds_in_use--;
		if (h->role_counted)
			(void) role_holds_add(h->role, -1);
		if (h->watch_counted)
			(void) role_count_add(h->role, 0, -1);
	}
	LWLockRelease(shared->holds_lock);
}

/*
 * Under holds_lock: count a hold whose acquire got no answer, and whose
 * release Redis took, among its role's watches instead of its holds.  A
 * role bounded by redsem.max_holds_per_role has no more watched than that
 * bound, so that one whose acquires keep failing (a short
 * redsem.command_timeout of its own) cannot take the room of the others'
 * watches; false if it has that many already: then the hold is to be
 * dropped (a late grant of it lasts its lease).
 */
static bool
count_as_watch(SharedHold *h)
{
	if (h->watch_counted || !h->role_counted)
		return true;
	if (h->watch_bound > 0 && role_watches(h->role) >= h->watch_bound)
		return false;
	if (role_count_add(h->role, -1, 1))
	{
		h->role_counted = false;
		h->watch_counted = true;
	}
	return true;
}

/*
 * Hand the keeper a hold whose acquire got no answer, given back by its
 * backend: released again at look_at and after, in case the acquire
 * reaches Redis late (keeper.c).  It counts toward its role's watches, no
 * longer its holds (count_as_watch), or is dropped when the role has its
 * bound of watches, or when the table is more than half full (a long
 * outage's failed acquires): room for new holds comes first.
 */
void
shared_hold_watch_unsure(int slot, const char *id, TimestampTz look_at)
{
	SharedHold *h;
	bool		drop = false;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		drop = shared->holds_in_use > hold_table_size / 2 || !count_as_watch(h);
		if (!drop)
		{
			h->abandoned = true;
			h->unsure = true;
			h->watching = true;
			h->retry_at = look_at;
			note_stop_at(h);
		}
	}
	LWLockRelease(shared->holds_lock);
	if (drop)
		shared_hold_remove(slot, id);
}

/* Note that a hold's acquire got no answer (see shared_hold_watch_unsure) */
void
shared_hold_set_unsure(int slot, const char *id)
{
	SharedHold *h;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
		h->unsure = true;
	LWLockRelease(shared->holds_lock);
}

/*
 * The keeper released a hold whose acquire got no answer, handed to it
 * unreleased (its backend's release failed, or a crash-restart came): it
 * looks at it again at look_at, as a watch of its role now
 * (count_as_watch), or drops it when the role has its bound of watches or
 * the table is more than half full, as shared_hold_watch_unsure does
 */
void
shared_hold_look_again(int slot, const char *id, TimestampTz look_at)
{
	SharedHold *h;
	bool		drop = false;

	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		drop = shared->holds_in_use > hold_table_size / 2 || !count_as_watch(h);
		h->retry_at = look_at;
		h->watching = true;
	}
	LWLockRelease(shared->holds_lock);
	if (drop)
		shared_hold_remove(slot, id);
}

/* Hand a hold to the keeper: its backend is gone or could not release it */
void
shared_hold_abandon(int slot, const char *id)
{
	SharedHold *h;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		h->abandoned = true;
		note_stop_at(h);
	}
	LWLockRelease(shared->holds_lock);
	wake_keeper_by(DT_NOEND);
}

/* Read back the keeper's view of a hold; false if not tracked */
bool
shared_hold_read(int slot, const char *id, SharedHold *copy)
{
	SharedHold *h;
	bool		found = false;

	if (shared == NULL)
		return false;
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		*copy = *h;
		found = true;
	}
	LWLockRelease(shared->holds_lock);
	return found;
}

/*
 * True if the keeper last heard the sentinels name, for target, another
 * primary than primary; under primary_mutex
 */
static bool
named_other_locked(uint64 target, const char *primary)
{
	return shared->primary_target == target && shared->primary_named[0] != '\0' &&
		strcmp(shared->primary_named, primary) != 0;
}

/*
 * The keeper heard the sentinels name primary ("host:port") for target:
 * SENTINEL_MOVED if that is another one than they named before for it,
 * SENTINEL_FIRST if they named none before for it (or for another target),
 * SENTINEL_SAME otherwise.  Either of the first two counts in
 * primary_moves, a backend's cue to compare its connection: a link opened
 * before the keeper first asked (the keeper's own, at its start; a
 * session's) may lead to a primary replaced since.
 */
SentinelNaming
shared_sentinel_named(uint64 target, const char *primary)
{
	SentinelNaming naming = SENTINEL_SAME;

	if (shared == NULL)
		return SENTINEL_SAME;
	SpinLockAcquire(&shared->primary_mutex);
	if (named_other_locked(target, primary))
		naming = SENTINEL_MOVED;
	else if (shared->primary_target != target || shared->primary_named[0] == '\0')
		naming = SENTINEL_FIRST;
	shared->primary_target = target;
	strlcpy(shared->primary_named, primary, sizeof(shared->primary_named));
	SpinLockRelease(&shared->primary_mutex);
	if (naming != SENTINEL_SAME)
		pg_atomic_fetch_add_u64(&shared->primary_moves, 1);
	return naming;
}

/* How many times the sentinels named another primary (shared_sentinel_named) */
uint64
shared_sentinel_moves(void)
{
	return shared ? pg_atomic_read_u64(&shared->primary_moves) : 0;
}

/*
 * True if the keeper last heard the sentinels name, for target, another
 * primary than primary ("host:port": where a connection leads)
 */
bool
shared_sentinel_named_other(uint64 target, const char *primary)
{
	bool		other;

	if (shared == NULL)
		return false;
	SpinLockAcquire(&shared->primary_mutex);
	other = named_other_locked(target, primary);
	SpinLockRelease(&shared->primary_mutex);
	return other;
}

/* How many holders were stopped so far (a backend's cue to look) */
uint64
shared_stops_made(void)
{
	return shared ? pg_atomic_read_u64(&shared->stops) : 0;
}

/*
 * Mark a hold stopped for why, under holds_lock held exclusive: its slot is
 * no longer the holder's, the keeper refreshes it no more.  True if it was
 * not stopped before.
 */
static bool
mark_stopped(SharedHold *h, StopReason why, TimestampTz now)
{
	if (h->stop != STOP_NONE)
		return false;
	h->stop = (uint8) why;
	h->lost = true;
	h->stopped_at = now;
	note_stop_at(h);
	pg_atomic_fetch_add_u64(&shared->stops, 1);
	return true;
}

/* A backend stops one of its own holds (found past its valid_until) */
bool
shared_hold_stop(int slot, const char *id, StopReason why, TimestampTz now)
{
	SharedHold *h;
	bool		newly = false;

	if (shared == NULL)
		return false;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
		newly = mark_stopped(h, why, now);
	LWLockRelease(shared->holds_lock);
	return newly;
}

/*
 * A backend told its session of the stop of one of its holds: the keeper
 * signals it no more (shared_hold_signal; the session asked it to watch
 * whether its code caught the error and runs on, src/escalate.c).  When the
 * keeper's signal was sent before, 0 if it was not.
 */
TimestampTz
shared_hold_told(int slot, const char *id)
{
	SharedHold *h;
	TimestampTz sent = 0;

	if (shared == NULL)
		return 0;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		sent = h->signal_sent_at;
		h->told = true;
	}
	LWLockRelease(shared->holds_lock);
	return sent;
}

/*
 * The keeper signals the backend of stopped hold sn with sig, unless its
 * session told the stop itself meanwhile.  The signal is sent under the
 * lock that shared_hold_told takes, so a session that tells a stop knows
 * whether a cancel of it is on its way (else it would get that cancel
 * after its own error, perhaps in the handler of code that caught it).
 * True if sent.
 */
bool
shared_hold_signal(const StopNotice *sn, int sig)
{
	SharedHold *h;
	bool		sent = false;

	if (shared == NULL)
		return false;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	/*
	 * (still the stop listed: a release since may have reset the entry; one
	 * under way, or the slot given up, leaves no work under it to stop)
	 */
	if ((h = tracked_hold(sn->slot, sn->id)) != NULL && h->pid == sn->pid &&
		h->stop != STOP_NONE && h->stop_signalled && !h->told &&
		!h->ending && !h->abandoned)
	{
		sent = (kill(sn->pid, sig) == 0);
		/* (after the kill: the signal is pending at the backend by then) */
		h->signal_sent_at = sent ? redsem_now() : 0;
	}
	LWLockRelease(shared->holds_lock);
	return sent;
}

/*
 * An administrator force-released slot id of semaphore name: if its holder
 * runs on this server, the keeper refreshes it at once (and so finds it
 * force-released and stops its holder now, not at its next refresh, up to
 * a third of its lease later).  True if it was found here.
 */
bool
shared_hold_refresh_now(const char *name, const char *id)
{
	bool		found = false;

	if (shared == NULL)
		return false;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	for (int i = 0; i < hold_table_size && !found; i++)
	{
		SharedHold *h = &hold_table[i];

		if (h->in_use && strcmp(h->id, id) == 0 && strcmp(h->name, name) == 0)
			found = h->refresh_now = true;
	}
	LWLockRelease(shared->holds_lock);
	if (found)
		wake_keeper_by(DT_NOBEGIN);
	return found;
}

/*
 * The process of this server that holds slot id of semaphore name (or whose
 * acquire of it may still be granted), or 0 if none does (none here, it
 * waits in line, or its backend is gone and the keeper releases it)
 */
int
shared_hold_holder_pid(const char *name, const char *id)
{
	int			pid = 0;

	if (shared == NULL)
		return 0;
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	for (int i = 0; i < hold_table_size && pid == 0; i++)
	{
		SharedHold *h = &hold_table[i];

		if (h->in_use && !h->abandoned && h->phase != PHASE_WAITING &&
			strcmp(h->id, id) == 0 && strcmp(h->name, name) == 0)
			pid = h->pid;
	}
	LWLockRelease(shared->holds_lock);
	return pid;
}

/*
 * True if h is a live holder's slot, returned to its caller, that its
 * policy lets be stopped (an acquire still running checks its grant itself;
 * one its backend is giving back has no work under it: a stop would only
 * cancel the release, redsem_release() say, waiting on a Redis that does
 * not answer)
 */
static bool
stoppable(const SharedHold *h)
{
	return h->in_use && h->phase == PHASE_HELD && h->returned &&
		!h->abandoned && !h->ending && h->pid != 0 &&
		h->on_lost != SLOT_LOST_WARN;
}

/*
 * Whether backend pid has an entry of semaphore name that is not stopped
 * (src/escalate.c): a slot granted to it, or one it waits for
 */
HoldFreshness
shared_hold_fresh(int pid, const char *name, TimestampTz since)
{
	HoldFreshness fresh = HOLD_FRESH_NONE;

	if (shared == NULL)
		return HOLD_FRESH_NONE;
	LWLockAcquire(shared->holds_lock, LW_SHARED);
	for (int i = 0; i < hold_table_size && fresh != HOLD_FRESH_GRANTED; i++)
	{
		SharedHold *h = &hold_table[i];

		if (h->in_use && h->pid == pid && h->stop == STOP_NONE &&
			!h->abandoned && !h->ending && strcmp(h->name, name) == 0)
		{
			/* (a slot held from before since is not one taken again) */
			if (h->phase != PHASE_HELD || !h->returned)
				fresh = HOLD_FRESH_WAITING;
			else if (h->acquired_at >= since)
				fresh = HOLD_FRESH_GRANTED;
		}
	}
	LWLockRelease(shared->holds_lock);
	return fresh;
}

/*
 * The keeper's look (src/timing.h): stop every held slot past its
 * valid_until, and hand back (up to max into out) the stopped holders it
 * has not signalled yet, now marked signalled.  *earliest: the next
 * valid_until among the slots still good (DT_NOEND if none).
 */
int
shared_hold_stops_due(TimestampTz now, StopNotice *out, int max,
					  TimestampTz *earliest)
{
	int			n = 0;

	*earliest = DT_NOEND;
	if (shared == NULL)
		return 0;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	for (int i = 0; i < hold_table_size; i++)
	{
		SharedHold *h = &hold_table[i];
		TimestampTz valid_until;
		/*
		 * (its backend's watchdog took the stop on, or its session told it:
		 * it stopped itself)
		 */
		bool		self = h->in_use && h->pid != 0 && !h->stop_signalled &&
			(h->told || pg_atomic_read_u64(&h->stop_at) == SHARED_STOP_CLAIMED);

		/* (handed over even once its session gave the slot up: ending) */
		if (!stoppable(h) && !self)
			continue;
		valid_until = shared_hold_valid_until(h);
		if (h->stop == STOP_NONE && now < valid_until && !self)
		{
			*earliest = Min(*earliest, valid_until);
			continue;
		}
		(void) mark_stopped(h, STOP_UNCONFIRMED, now);
		if (h->stop_signalled || n >= max)
			continue;
		h->stop_signalled = true;
		out[n].self = self;
		out[n].slot = i;
		out[n].pid = h->pid;
		out[n].told = h->told;
		out[n].policy = h->on_lost;
		out[n].reason = h->stop;
		out[n].kept_ms = shared_hold_kept_ms(h);
		out[n].window = h->confirm_ms > 0;
		out[n].unconfirmed_ms = TimestampDifferenceMilliseconds(h->refreshed_at,
																h->stopped_at);
		out[n].late_ms = h->stopped_at > valid_until ?
			TimestampDifferenceMilliseconds(valid_until, h->stopped_at) : 0;
		strlcpy(out[n].name, h->name, sizeof(out[n].name));
		strlcpy(out[n].id, h->id, sizeof(out[n].id));
		n++;
	}
	LWLockRelease(shared->holds_lock);
	return n;
}


/* One change to a counter: added, or for STAT_WAIT_MAX_MS the maximum kept */
typedef struct StatDelta
{
	StatField	field;
	int64		delta;
} StatDelta;

/* Apply the changes to an entry (atomics: under the lock shared or not) */
static void
apply_deltas(SharedSemStats *s, const StatDelta *d, int n)
{
	if (s->reserved)
		pg_atomic_write_u64(&s->counted_at, (uint64) redsem_now());
	for (int i = 0; i < n; i++)
	{
		pg_atomic_uint64 *c = &s->counters[d[i].field];

		if (d[i].field == STAT_WAIT_MAX_MS)
		{
			uint64		seen = pg_atomic_read_u64(c);

			while ((uint64) d[i].delta > seen &&
				   !pg_atomic_compare_exchange_u64(c, &seen, (uint64) d[i].delta))
				;
		}
		else
			pg_atomic_fetch_add_u64(c, d[i].delta);
	}
}

/*
 * Under stats_lock held exclusive: free the reserved room of one statement
 * queue that is no longer defined, its counts added to the others' entry;
 * false if there is none.  Dropped means: not in this backend's view of the
 * queues, and not counted since that view was made (a queue made later,
 * which a backend in a long statement has not seen yet, is counted after
 * it: helper-164).  The least recently counted goes first.
 */
static bool
stats_reclaim_reserved(void)
{
	HASH_SEQ_STATUS seq;
	SharedSemStats *s;
	SharedSemStats *victim = NULL;
	SharedSemStats *others = hash_search(stats_hash, &stats_others_key, HASH_FIND, NULL);
	uint64		since = stats_view_since_fn ? (uint64) stats_view_since_fn() : 0;

	if (since == 0)
		return false;
	hash_seq_init(&seq, stats_hash);
	while ((s = hash_seq_search(&seq)) != NULL)
	{
		uint64		at = pg_atomic_read_u64(&s->counted_at);

		if (!s->reserved || s->key.name[0] == '\0' || at >= since ||
			stats_reserved_fn(s->key.name))
			continue;			/* (ordinary, the others', live or maybe live) */
		if (victim == NULL || at < pg_atomic_read_u64(&victim->counted_at))
			victim = s;
	}
	if (victim == NULL)
		return false;
	if (others != NULL)
		for (int f = 0; f < STAT_NFIELDS; f++)
		{
			uint64		v = pg_atomic_read_u64(&victim->counters[f]);

			if (f == STAT_WAIT_MAX_MS)
				v = Max(v, pg_atomic_read_u64(&others->counters[f]));
			else
				v += pg_atomic_read_u64(&others->counters[f]);
			pg_atomic_write_u64(&others->counters[f], v);
		}
	hash_search(stats_hash, &victim->key, HASH_REMOVE, NULL);
	shared->stats_reserved--;
	return true;
}

/*
 * Under stats_lock held exclusive: key's entry, made if there is room for
 * it, else the others' entry (*first_overflow set the first time since the
 * table last had room).  Ordinary names take redsem.max_tracked_semaphores
 * entries at most; defined statement queues' have room beyond them
 * (reserved, so that they do not count).
 */
static SharedSemStats *
stats_entry_for(const StatsKey *key, bool *first_overflow)
{
	SharedSemStats *s = hash_search(stats_hash, key, HASH_FIND, NULL);
	bool		queue;

	if (s != NULL)
		return s;
	/*
	 * (a queue under many key prefixes has room for STATS_RESERVED_ROOM;
	 * dropped queues' rows stay until their room is needed)
	 */
	queue = stats_reserved_fn != NULL && stats_reserved_fn(key->name) &&
		(shared->stats_reserved < STATS_RESERVED_ROOM || stats_reclaim_reserved());
	if (queue || shared->stats_names < redsem_max_tracked_semaphores)
	{
		s = stats_new_entry(key, queue);
		if (s != NULL)
		{
			shared->stats_names += queue ? 0 : 1;
			shared->stats_reserved += queue ? 1 : 0;
			return s;
		}
	}
	*first_overflow = !shared->stats_full_logged;
	shared->stats_full_logged = true;
	return hash_search(stats_hash, &stats_others_key, HASH_FIND, NULL);
}

/*
 * Count changes to the counters of semaphore name: an entry that exists is
 * counted into under the shared lock; a new one is made under the
 * exclusive lock (stats_entry_for: the others' entry when the table is
 * full, with a LOG line the first time).
 */
static void
stats_count_deltas(const char *prefix, const char *name, const StatDelta *d, int n)
{
	SharedSemStats *s;
	bool		first_overflow = false;
	StatsKey	key;

	if (shared == NULL || stats_hash == NULL)
		return;
	memset(&key, 0, sizeof(key));
	strlcpy(key.prefix, redsem_prefix_or_setting(prefix),
			sizeof(key.prefix));
	strlcpy(key.name, name, sizeof(key.name));
	LWLockAcquire(shared->stats_lock, LW_SHARED);
	s = hash_search(stats_hash, &key, HASH_FIND, NULL);
	if (s != NULL)
		apply_deltas(s, d, n);
	LWLockRelease(shared->stats_lock);
	if (s != NULL)
		return;
	LWLockAcquire(shared->stats_lock, LW_EXCLUSIVE);
	s = stats_entry_for(&key, &first_overflow);
	if (s != NULL)
		apply_deltas(s, d, n);
	LWLockRelease(shared->stats_lock);
	if (first_overflow)
		ereport(LOG,
				(errmsg("redsem statistics table is full"),
				 errdetail("%d semaphore names have statistics on this server (redsem.max_tracked_semaphores); the counters of any other name now add up in the row of redsem_stats whose name is NULL.",
						   redsem_max_tracked_semaphores),
				 errhint("Forget names with redsem_stats_reset(), or raise redsem.max_tracked_semaphores (server restart).")));
}

/*
 * Add delta to one counter of semaphore name of key prefix prefix (NULL:
 * redsem.key_prefix); a no-op without preload
 */
void
stats_count(const char *prefix, const char *name, StatField field, int64 delta)
{
	StatDelta	d = {field, delta};

	stats_count_deltas(prefix, name, &d, 1);
}

/*
 * Count a wait of ms milliseconds: one more wait, its time in the total
 * and in its bucket, and the longest.
 */
void
stats_count_wait(const char *prefix, const char *name, int64 ms)
{
	StatDelta	d[4] = {
		{STAT_WAITED, 1},
		{STAT_WAIT_TIME_MS, ms},
		{ms <= 1 ? STAT_WAITS_LE_1MS : ms <= 10 ? STAT_WAITS_LE_10MS :
			ms <= 100 ? STAT_WAITS_LE_100MS : ms <= 1000 ? STAT_WAITS_LE_1S :
			ms <= 10000 ? STAT_WAITS_LE_10S : STAT_WAITS_OVER_10S, 1},
		{STAT_WAIT_MAX_MS, ms},
	};

	stats_count_deltas(prefix, name, d, lengthof(d));
}

/* Raise 55000 unless the statistics exist (redsem is preloaded) */
static void
require_stats(void)
{
	if (shared == NULL || stats_hash == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("redsem statistics require redsem in shared_preload_libraries"),
				 errhint("Add redsem to shared_preload_libraries and restart the server.")));
}

/* Copy every statistics entry into a palloc'd array; returns the count */
int
stats_snapshot(SemStats **out)
{
	HASH_SEQ_STATUS seq;
	SharedSemStats *s;
	int			n = 0;
	int			cap;

	require_stats();
	LWLockAcquire(shared->stats_lock, LW_SHARED);
	cap = Max(hash_get_num_entries(stats_hash), 1);
	*out = palloc(cap * sizeof(SemStats));
	hash_seq_init(&seq, stats_hash);
	while ((s = hash_seq_search(&seq)) != NULL)
	{
		if (n < cap)
		{
			SemStats   *o = &(*out)[n];
			bool		any = false;

			memcpy(o->prefix, s->key.prefix, sizeof(o->prefix));
			memcpy(o->name, s->key.name, sizeof(o->name));
			for (int f = 0; f < STAT_NFIELDS; f++)
			{
				o->counters[f] = (int64) pg_atomic_read_u64(&s->counters[f]);
				any |= (o->counters[f] != 0);
			}
			/* the others' entry shows once it counted something */
			n += (any || o->name[0] != '\0') ? 1 : 0;
		}
	}
	LWLockRelease(shared->stats_lock);
	return n;
}

/*
 * Forget all statistics (or those of one semaphore name, under every key
 * prefix): their entries go, and with all, the others' entry starts again
 * from zero
 */
void
stats_reset(const char *name)
{
	HASH_SEQ_STATUS seq;
	SharedSemStats *s;

	require_stats();
	LWLockAcquire(shared->stats_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, stats_hash);
	while ((s = hash_seq_search(&seq)) != NULL)
	{
		if (s->key.name[0] == '\0')
		{
			if (name == NULL)
				for (int f = 0; f < STAT_NFIELDS; f++)
					pg_atomic_write_u64(&s->counters[f], 0);
		}
		else if (name == NULL || strcmp(s->key.name, name) == 0)
		{
			shared->stats_names -= s->reserved ? 0 : 1;
			shared->stats_reserved -= s->reserved ? 1 : 0;
			hash_search(stats_hash, &s->key, HASH_REMOVE, NULL);
		}
	}
	if (shared->stats_names < redsem_max_tracked_semaphores)
		shared->stats_full_logged = false;
	LWLockRelease(shared->stats_lock);
}

/*
 * Define the settings of the shared table.  Its size is fixed at server
 * start, and none of them means anything without it, so they are only
 * defined while preloading.
 */
void
shmem_define_gucs(void)
{
	DefineCustomIntVariable("redsem.max_tracked_holds",
							"Maximum number of holds (and places in line) on this server the keeper tracks.",
							"Only used when redsem is in shared_preload_libraries.",
							&redsem_max_tracked_holds, 4096, 16, 1000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("redsem.max_tracked_semaphores",
							"Maximum number of semaphore names with statistics of their own.",
							"The names beyond it are counted together, in the row of redsem_stats whose name is NULL; statement queues have room of their own. Only used when redsem is in shared_preload_libraries.",
							&redsem_max_tracked_semaphores, 1000, 16, 1000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("redsem.reserved_holds",
							"Holds of this server's table that only superusers, members of redsem_admin and statement queues may take.",
							"At most half of redsem.max_tracked_holds is reserved, whatever this says.",
							&redsem_reserved_holds, 128, 0, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("redsem.max_holds_per_role",
							"Maximum number of holds (and places in line) of this server's table one role may take, over all its sessions.",
							"-1: a quarter of redsem.max_tracked_holds; 0: no bound.  Counted per login role; superusers, members of redsem_admin and statement queues are not bounded.  Set per role or database with ALTER ROLE/DATABASE ... SET.",
							&redsem_max_holds_per_role, -1, -1, 1000000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
}

/* What this server saw of slot's generation under sig; false if nothing */
bool
shared_gen_read(int slot, uint64 sig, SharedGenSeen *out)
{
	SharedGen  *g;
	bool		found;

	if (shared == NULL || slot < 0 || slot >= CLUSTER_SLOTS || sig == 0)
		return false;
	g = &shared->gens[slot];
	SpinLockAcquire(&g->mutex);
	found = g->sig == sig && g->seen.us > 0;
	if (found)
		*out = g->seen;
	SpinLockRelease(&g->mutex);
	return found;
}

/*
 * Note slot's generation under sig, as a reply told it; a reply older than
 * the one noted (the same generation and window, a smaller lmax) is not,
 * but when it was looked at is
 */
void
shared_gen_write(int slot, uint64 sig, const SharedGenSeen *in)
{
	SharedGen  *g;

	if (shared == NULL || slot < 0 || slot >= CLUSTER_SLOTS || sig == 0)
		return;
	g = &shared->gens[slot];
	SpinLockAcquire(&g->mutex);
	if (!(g->sig == sig && g->seen.us == in->us && g->seen.rot == in->rot &&
		  g->seen.lprev == in->lprev && g->seen.lmax >= in->lmax))
	{
		g->sig = sig;
		g->seen = *in;
	}
	else
	{
		g->seen.looked = Max(g->seen.looked, in->looked);
		g->seen.grace_until = in->grace_until;	/* (only for log_grace) */
	}
	SpinLockRelease(&g->mutex);
}
