/*
 * shmem.c
 *		Shared memory, when redsem is in shared_preload_libraries: the table
 *		of every hold on this server (for the keeper), the server's identity,
 *		and per-semaphore statistics.
 *
 * Without preloading, shared is NULL and every function here degrades to a
 * no-op (statistics functions raise 55000 instead).
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "redsem.h"

/* Survives crash-restarts: the postmaster keeps its memory */
static uint64 postmaster_last_incarnation = 0;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

RedsemShared *shared = NULL;
static HTAB *stats_hash = NULL;
static uint64 local_incarnation = 0;

int			redsem_max_tracked_holds = 4096;
int			redsem_max_tracked_semaphores = 1000;

/* Bytes of shared memory for the hold table */
static Size
shared_size(void)
{
	return add_size(offsetof(RedsemShared, holds),
					mul_size(redsem_max_tracked_holds, sizeof(SharedHold)));
}

/* Ask for our shared memory and locks */
static void
redsem_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(shared_size(),
									hash_estimate_size(redsem_max_tracked_semaphores,
													   sizeof(SemStats))));
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
 * Attach to (or create) our shared memory.  In the postmaster this runs at
 * every (re)initialization, so a crash-restart hands the previous
 * incarnation's identity to the keeper, which releases its slots.
 */
static void
redsem_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("redsem", shared_size(), &found);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche("redsem");

		memset(shared, 0, shared_size());
		shared->holds_lock = &locks[0].lock;
		shared->stats_lock = &locks[1].lock;
		shared->incarnation = random_tag();
		shared->previous_incarnation = postmaster_last_incarnation;
		shared->max_holds = redsem_max_tracked_holds;
		if (!IsUnderPostmaster)
			postmaster_last_incarnation = shared->incarnation;
	}
	memset(&info, 0, sizeof(info));
	info.keysize = REDSEM_MAX_NAME_BYTES + 1;
	info.entrysize = sizeof(SemStats);
	stats_hash = ShmemInitHash("redsem statistics",
							   redsem_max_tracked_semaphores,
							   redsem_max_tracked_semaphores,
							   &info, HASH_ELEM | HASH_STRINGS);
	LWLockRelease(AddinShmemInitLock);
}

/* Install the shared memory hooks (from _PG_init, when preloading) */
void
shmem_install_hooks(void)
{
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

/* True if the keeper process is running */
bool
keeper_is_active(void)
{
	pid_t		pid;

	if (shared == NULL)
		return false;
	pid = shared->keeper_pid;
	return pid != 0 && kill(pid, 0) == 0;
}

/* Wake the keeper so it notices a change at once */
static void
wake_keeper(void)
{
	Latch	   *latch = shared->keeper_latch;

	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Publish a confirmed hold so the keeper keeps it alive.  Returns its slot,
 * or -1 if not preloaded or the table is full.
 */
int
shared_hold_add(const char *prefix, const char *name, const char *id,
				bool xact, bool waiting, int64 lease_ms, int64 ticket)
{
	int			slot = -1;
	bool		first_change;

	if (shared == NULL)
		return -1;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	for (int i = 0; i < shared->max_holds; i++)
	{
		SharedHold *h = &shared->holds[i];

		if (h->in_use)
			continue;
		memset(h, 0, sizeof(*h));
		h->in_use = true;
		h->pid = MyProcPid;
		h->xact = xact;
		h->waiting = waiting;
		h->lease_ms = lease_ms;
		h->ticket = ticket;
		h->acquired_at = h->refreshed_at = GetCurrentTimestamp();
		h->target = redis_target_signature();
		strlcpy(h->prefix, prefix, sizeof(h->prefix));
		strlcpy(h->name, name, sizeof(h->name));
		strlcpy(h->id, id, sizeof(h->id));
		slot = i;
		break;
	}
	shared->generation++;
	first_change = !shared->index_dirty;
	shared->index_dirty = true;
	LWLockRelease(shared->holds_lock);

	/*
	 * Let the keeper list the new hold in its crash-cleanup index soon; one
	 * wake-up per index rewrite, so a busy server doesn't wake it per call.
	 */
	if (first_change)
		wake_keeper();
	if (slot < 0)
		ereport(WARNING,
				(errmsg("redsem keeper cannot track more than %d holds", shared->max_holds),
				 errdetail("The slot of semaphore \"%s\" is held, but its lease will not be refreshed.", name),
				 errhint("Raise redsem.max_tracked_holds.")));
	return slot;
}

/*
 * The entry in slot if it still tracks id, else NULL (a slot is reused once
 * its hold ends).  The caller holds holds_lock.
 */
SharedHold *
tracked_hold(int slot, const char *id)
{
	SharedHold *h = &shared->holds[slot];

	return (h->in_use && strcmp(h->id, id) == 0) ? h : NULL;
}

/* Stop tracking a hold */
void
shared_hold_remove(int slot, const char *id)
{
	SharedHold *h;

	if (shared == NULL || slot < 0)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
		h->in_use = false;
	shared->generation++;
	LWLockRelease(shared->holds_lock);
}

/* A tracked place in line became a slot */
void
shared_hold_now_held(int slot, const char *id, int64 ticket)
{
	SharedHold *h;

	if (shared == NULL || slot < 0)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		h->waiting = false;
		h->ticket = ticket;
		h->acquired_at = h->refreshed_at = GetCurrentTimestamp();
	}
	LWLockRelease(shared->holds_lock);
}

/* The owner refreshed a hold itself, perhaps with a new lease length */
void
shared_hold_refreshed(int slot, const char *id, int64 lease_ms)
{
	SharedHold *h;

	if (shared == NULL || slot < 0)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
	{
		h->lease_ms = lease_ms;
		h->refreshed_at = GetCurrentTimestamp();
		h->lost = false;
	}
	LWLockRelease(shared->holds_lock);
}

/* Hand a hold to the keeper for release: its owner could not do it */
void
shared_hold_abandon(int slot, const char *id)
{
	SharedHold *h;

	if (shared == NULL || slot < 0)
		return;
	LWLockAcquire(shared->holds_lock, LW_EXCLUSIVE);
	if ((h = tracked_hold(slot, id)) != NULL)
		h->abandoned = true;
	shared->index_dirty = true;
	LWLockRelease(shared->holds_lock);
	wake_keeper();
}

/* Read back the keeper's view of a hold; false if not tracked */
bool
shared_hold_read(int slot, const char *id, SharedHold *copy)
{
	SharedHold *h;
	bool		found = false;

	if (shared == NULL || slot < 0)
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

/* Add delta to one counter of semaphore name (no-op without preload) */
void
stats_count(const char *name, StatField field, int64 delta)
{
	SemStats   *s;
	bool		found;
	char		key[REDSEM_MAX_NAME_BYTES + 1];

	if (shared == NULL || stats_hash == NULL)
		return;
	memset(key, 0, sizeof(key));
	strlcpy(key, name, sizeof(key));
	LWLockAcquire(shared->stats_lock, LW_EXCLUSIVE);
	s = hash_search(stats_hash, key, HASH_ENTER_NULL, &found);
	if (s != NULL)
	{
		if (!found)
			memset(s->counters, 0, sizeof(s->counters));
		s->counters[field] += delta;
	}
	LWLockRelease(shared->stats_lock);
}

/* Copy every statistics entry into a palloc'd array; returns the count */
int
stats_snapshot(SemStats **out)
{
	HASH_SEQ_STATUS seq;
	SemStats   *s;
	int			n = 0;
	int			cap;

	if (shared == NULL || stats_hash == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("redsem statistics require redsem in shared_preload_libraries"),
				 errhint("Add redsem to shared_preload_libraries and restart the server.")));
	LWLockAcquire(shared->stats_lock, LW_SHARED);
	cap = Max(hash_get_num_entries(stats_hash), 1);
	*out = palloc(cap * sizeof(SemStats));
	hash_seq_init(&seq, stats_hash);
	while ((s = hash_seq_search(&seq)) != NULL)
	{
		if (n < cap)
			(*out)[n++] = *s;
	}
	LWLockRelease(shared->stats_lock);
	return n;
}

/* Forget all statistics (or those of one semaphore) */
void
stats_reset(const char *name)
{
	HASH_SEQ_STATUS seq;
	SemStats   *s;

	(void) stats_snapshot(&s);	/* raises 55000 when not preloaded */
	LWLockAcquire(shared->stats_lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, stats_hash);
	while ((s = hash_seq_search(&seq)) != NULL)
	{
		if (name == NULL || strcmp(s->name, name) == 0)
			hash_search(stats_hash, s->name, HASH_REMOVE, NULL);
	}
	LWLockRelease(shared->stats_lock);
}
