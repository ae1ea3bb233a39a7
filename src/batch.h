/*
 * batch.h
 *		The keeper's batches of refreshes and releases (batch.c).
 */
#ifndef REDSEM_BATCH_H
#define REDSEM_BATCH_H

#include "redis_call.h"

/* One hold the keeper refreshes or releases, in a batch (sem_keep_batch) */
typedef struct SemKeepItem
{
	const char *prefix;
	const char *name;
	const char *id;
	int64		lease_ms;		/* refresh: the new lease */
	bool		release;		/* release it rather than refresh it */
	bool		elsewhere;		/* taken under other connection settings:
								 * does the Redis of these have it? */
	/* what came back */
	RedisOutcome outcome;		/* RS_OK, or why this one failed */
	int64		value;			/* refresh: the lease, 0 if lost; release:
								 * 1 if it was live */
} SemKeepItem;

/* What one batch cost */
typedef struct SemBatchCost
{
	int			commands;		/* script calls sent */
	int			round_trips;
} SemBatchCost;

extern bool sem_keep_batch(RedisCall *call, SemKeepItem *items, int n,
						   SemBatchCost *cost);

#endif							/* REDSEM_BATCH_H */
