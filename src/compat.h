/*
 * compat.h
 *		Every difference between the supported PostgreSQL majors (15, 17,
 *		18) and hiredis releases (0.14, 1.x), in one place.
 */
#ifndef REDSEM_COMPAT_H
#define REDSEM_COMPAT_H

#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "storage/latch.h"
#if PG_VERSION_NUM >= 180000
#include "storage/waiteventset.h"
#endif
#include "utils/acl.h"
#include "utils/guc_tables.h"
#include "utils/wait_event.h"

#if PG_VERSION_NUM < 150000
#error "redsem needs PostgreSQL 15 or later"
#endif

/*
 * A function that never returns, written before its declaration:
 * PostgreSQL 18's pg_noreturn replaced the pg_attribute_noreturn() written
 * after it.
 */
#ifndef pg_noreturn
#define pg_noreturn __attribute__((noreturn))
#endif

/*
 * A wait set that lives as long as the session: PostgreSQL 17 added a
 * resource owner argument (NULL: not owned by any).
 */
#if PG_VERSION_NUM >= 170000
#define redsem_create_wait_set(ctx, n)	CreateWaitEventSet(NULL, (n))
#else
#define redsem_create_wait_set(ctx, n)	CreateWaitEventSet((ctx), (n))
#endif

/*
 * A wait event of redsem's own, shown in pg_stat_activity: named (kept in
 * *cache once registered) since PostgreSQL 17, the generic
 * Extension/Extension before.
 */
static inline uint32
redsem_named_wait_event(const char *name, uint32 *cache)
{
#if PG_VERSION_NUM >= 170000
	if (*cache == 0)
		*cache = WaitEventExtensionNew(name);
	return *cache;
#else
	(void) name;
	(void) cache;
	return PG_WAIT_EXTENSION;
#endif
}

/* Waiting for Redis to answer, or to connect: "RedsemRedis" */
static inline uint32
redsem_wait_event(void)
{
	static uint32 event = 0;

	return redsem_named_wait_event("RedsemRedis", &event);
}

/* A redsem_acquire waiting in line for a slot: "RedsemSlot" */
static inline uint32
redsem_slot_wait_event(void)
{
	static uint32 event = 0;

	return redsem_named_wait_event("RedsemSlot", &event);
}

/* A statement waiting in a statement queue: "RedsemQueue" */
static inline uint32
redsem_queue_wait_event(void)
{
	static uint32 event = 0;

	return redsem_named_wait_event("RedsemQueue", &event);
}

/*
 * ExecutorRun lost its execute_once argument in PostgreSQL 18: the hook's
 * extra parameter, and the argument to pass on.
 */
#if PG_VERSION_NUM >= 180000
#define REDSEM_EXECUTE_ONCE_PARAM
#define REDSEM_EXECUTE_ONCE_ARG
#else
#define REDSEM_EXECUTE_ONCE_PARAM	, bool execute_once
#define REDSEM_EXECUTE_ONCE_ARG		, execute_once
#endif

/*
 * Memory for a setting's parsed value (a check hook's "extra"): GUC's own
 * allocator since PostgreSQL 16, malloc before.
 */
#if PG_VERSION_NUM >= 160000
#define redsem_guc_malloc(size)	guc_malloc(LOG, (size))
#define redsem_guc_free(ptr)	guc_free(ptr)
#else
#define redsem_guc_malloc(size)	malloc(size)
#define redsem_guc_free(ptr)	free(ptr)
#endif

/* The module magic block: named and versioned since PostgreSQL 18 */
#if PG_VERSION_NUM >= 180000
#define REDSEM_MODULE_MAGIC PG_MODULE_MAGIC_EXT(.name = "redsem", .version = "0.2.0")
#else
#define REDSEM_MODULE_MAGIC PG_MODULE_MAGIC
#endif

/*
 * The record of a built-in setting (NULL if there is none): looked up by
 * find_option since PostgreSQL 16, by a scan of the table before.
 */
static inline struct config_generic *
redsem_find_setting(const char *name)
{
#if PG_VERSION_NUM >= 160000
	return find_option(name, false, true, ERROR);
#else
	struct config_generic **vars = get_guc_variables();
	int			n = GetNumConfigOptions();

	for (int i = 0; i < n; i++)
		if (strcmp(vars[i]->name, name) == 0)
			return vars[i];
	return NULL;
#endif
}


/*
 * True in a client backend (a session), the only kind of process that
 * goes through the broker; the same test in every supported major.
 */
static inline bool
redsem_is_client_backend(void)
{
	return MyBackendType == B_BACKEND;
}

/*
 * Entry i (1-based) of this process's snapshot of the backends' status:
 * renamed in PostgreSQL 17.
 */
#if PG_VERSION_NUM >= 170000
#define redsem_local_beentry(i)	pgstat_get_local_beentry_by_index(i)
#else
#define redsem_local_beentry(i)	pgstat_fetch_stat_local_beentry(i)
#endif

/*
 * The element count hiredis hands a reply's createArray: an int before
 * hiredis 1.0 (include hiredis.h before this header to use it)
 */
#ifdef HIREDIS_MAJOR
#if HIREDIS_MAJOR >= 1
typedef size_t redsem_reply_elements;
#else
typedef int redsem_reply_elements;
#endif
#endif

#endif							/* REDSEM_COMPAT_H */
