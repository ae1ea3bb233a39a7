/*
 * limits_seen.h
 *		The stored limits this server was told, with the generation of
 *		Redis's data it knew then (limits_seen.c; I18 in src/redsem.lua):
 *		how a limit Redis forgot comes back without an administrator.
 */
#ifndef REDSEM_LIMITS_SEEN_H
#define REDSEM_LIMITS_SEEN_H

#include "storage/lwlock.h"

extern Size limits_seen_shmem_size(void);
extern void limits_seen_shmem_init(LWLock *lock);
extern void limits_seen_note(const char *name, int64 limit);
extern bool limits_seen_lookup(const char *name, int64 *limit, int64 *gen_us);
extern void limits_seen_forget(const char *name);

#endif							/* REDSEM_LIMITS_SEEN_H */
