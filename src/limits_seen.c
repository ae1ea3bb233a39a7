/*
 * limits_seen.c
 *		The stored limits this server was told (I18 in src/redsem.lua).
 *
 * A grant under a semaphore's stored limit tells the limit; this server
 * keeps the last one told per semaphore (Redis target, key prefix and
 * name), with the identity of the generation of Redis's data it knew then
 * (gen.c).  A caller told "no limit" is told the generation's identity
 * now: another one means Redis forgot since (a restart without
 * persistence, FLUSHALL), and the caller stores the limit again; the same
 * one means an administrator removed it, and it is forgotten here too.
 * The table is as large as the statistics' (redsem.max_tracked_semaphores
 * names); once full, further names are not remembered.  Without
 * shared_preload_libraries nothing is.
 */
#include "postgres.h"

#include "storage/shmem.h"
#include "utils/hsearch.h"

#include "bounds.h"
#include "gen.h"
#include "guc.h"
#include "limits_seen.h"
#include "redis/conn.h"
#include "script.h"
#include "shmem.h"

/* A semaphore under one Redis target and key prefix */
typedef struct LimitSeenKey
{
	uint64		target;			/* redis_target_signature() */
	char		prefix[REDSEM_MAX_PREFIX_BYTES + 1];
	char		name[REDSEM_MAX_NAME_BYTES + 1];
} LimitSeenKey;

typedef struct LimitSeen
{
	LimitSeenKey key;
	int64		limit;			/* the stored limit last told */
	int64		gen_us;			/* the generation this server knew then */
} LimitSeen;

static HTAB *seen_hash;
static LWLock *seen_lock;

/* The shared memory the table needs */
Size
limits_seen_shmem_size(void)
{
	return hash_estimate_size(redsem_max_tracked_semaphores, sizeof(LimitSeen));
}

/* At shared memory startup (AddinShmemInitLock held): map the table */
void
limits_seen_shmem_init(LWLock *lock)
{
	HASHCTL		info;

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(LimitSeenKey);
	info.entrysize = sizeof(LimitSeen);
	seen_hash = ShmemInitHash("redsem limits seen",
							  redsem_max_tracked_semaphores, redsem_max_tracked_semaphores,
							  &info, HASH_ELEM | HASH_BLOBS);
	seen_lock = lock;
}

/* The key of semaphore name under the current settings */
static void
seen_key(LimitSeenKey *key, const char *name)
{
	memset(key, 0, sizeof(*key));
	key->target = redis_target_signature();
	strlcpy(key->prefix, redsem_key_prefix ? redsem_key_prefix : "", sizeof(key->prefix));
	strlcpy(key->name, name, sizeof(key->name));
}

/*
 * Remember that semaphore name's stored limit is limit, under the
 * generation this server knows now (none known: nothing to tell a
 * forgetting by, so nothing is remembered).  Only a change takes the lock
 * exclusive.
 */
void
limits_seen_note(const char *name, int64 limit)
{
	LimitSeenKey key;
	LimitSeen  *e;
	int64		gen_us;
	bool		same;

	if (seen_hash == NULL || limit <= 0)
		return;
	gen_us = gen_us_seen(NULL, sem_gen_slot(NULL, name));
	if (gen_us == 0)
		return;
	seen_key(&key, name);
	LWLockAcquire(seen_lock, LW_SHARED);
	e = hash_search(seen_hash, &key, HASH_FIND, NULL);
	same = e != NULL && e->limit == limit && e->gen_us == gen_us;
	LWLockRelease(seen_lock);
	if (same)
		return;
	LWLockAcquire(seen_lock, LW_EXCLUSIVE);
	e = hash_search(seen_hash, &key, HASH_ENTER_NULL, NULL);
	if (e != NULL)
	{
		e->limit = limit;
		e->gen_us = gen_us;
	}
	LWLockRelease(seen_lock);
}

/*
 * True if this server remembers a stored limit of semaphore name: *limit
 * and the generation it knew then (*gen_us)
 */
bool
limits_seen_lookup(const char *name, int64 *limit, int64 *gen_us)
{
	LimitSeenKey key;
	LimitSeen  *e;

	if (seen_hash == NULL)
		return false;
	seen_key(&key, name);
	LWLockAcquire(seen_lock, LW_SHARED);
	e = hash_search(seen_hash, &key, HASH_FIND, NULL);
	if (e != NULL)
	{
		*limit = e->limit;
		*gen_us = e->gen_us;
	}
	LWLockRelease(seen_lock);
	return e != NULL;
}

/* Forget semaphore name's stored limit (it was removed) */
void
limits_seen_forget(const char *name)
{
	LimitSeenKey key;

	if (seen_hash == NULL)
		return;
	seen_key(&key, name);
	LWLockAcquire(seen_lock, LW_EXCLUSIVE);
	hash_search(seen_hash, &key, HASH_REMOVE, NULL);
	LWLockRelease(seen_lock);
}
