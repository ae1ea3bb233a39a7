/*
 * bounds.h
 *		What redsem promises at its SQL interface: the bounds on arguments
 *		and the names it reserves (the administrators' role, the statement
 *		queues' prefix).  Settings are in guc.h, the SQL argument checks in
 *		sqlargs.h, and each module has its own header; timing constants are
 *		in timing.h, PostgreSQL and hiredis version differences in compat.h.
 */
#ifndef REDSEM_BOUNDS_H
#define REDSEM_BOUNDS_H

/* Bounds on arguments, documented in README.md */
#define REDSEM_MAX_NAME_BYTES	200
#define REDSEM_MAX_ID_BYTES		100
#define REDSEM_MAX_PREFIX_BYTES	64
#define REDSEM_MAX_HOLDERS		1000000
/* Priorities run from -this to this (PRIORITY_MAX in src/redsem.lua) */
#define REDSEM_MAX_PRIORITY		100
/* A tenant's name (I12): 1 to this many bytes; and the largest weight */
#define REDSEM_MAX_TENANT_BYTES	64
#define REDSEM_MAX_WEIGHT		10000

/* The role whose members may force-release slots and see every holder id */
#define REDSEM_ADMIN_ROLE		"redsem_admin"

/*
 * A statement queue's semaphore is this prefix and the queue's name; only
 * administrators may take its slots from SQL (refuse_queue_semaphore)
 */
#define REDSEM_QUEUE_PREFIX		"queue:"

/* The queue's name in a statement queue's semaphore name; NULL if it is no queue's */
static inline const char *
redsem_queue_of_semaphore(const char *semaphore)
{
	size_t		len = strlen(REDSEM_QUEUE_PREFIX);

	return strncmp(semaphore, REDSEM_QUEUE_PREFIX, len) == 0 ? semaphore + len : NULL;
}

/* The extension's name (pg_extension) */
#define REDSEM_EXTENSION_NAME	"redsem"

#endif							/* REDSEM_BOUNDS_H */
