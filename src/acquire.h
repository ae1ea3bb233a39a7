/*
 * acquire.h
 *		Taking a slot: one request, waiting in line, stale grants, limit
 *		errors and statistics, for the SQL functions (sqlfuncs.c) and the
 *		statement queues (queue.c).
 */
#ifndef REDSEM_ACQUIRE_H
#define REDSEM_ACQUIRE_H

#include "conn.h"
#include "hold.h"
#include "script.h"

/* What to take, and how; then what Redis said */
typedef struct AcquireArgs
{
	char	   *name;
	int			max_holders;
	int			default_limit;	/* > 0: with max_holders 0, the limit to store
								 * if the semaphore has none (a statement
								 * queue's cap, from its definition) */	/* 0: the stored limit */
	int			permits;
	int			priority;		/* higher first, a second per level (I4) */
	char	   *tenant;			/* shares the line fairly with others (I12);
								 * NULL: none */
	int64		lease_ms;
	int64		wait_ms;		/* -1: no limit */
	int			elevel;			/* ERROR: a Redis failure raises; lower:
								 * it ends the acquire, in failure */
	uint32		wait_event;		/* shown while in line; 0: the default */
	/* what came back */
	int64		limit_seen;		/* the limit in effect Redis last told */
	bool		rate_seen;		/* the semaphore has a stored rate */
	int64		rate_ms;		/* Redis last told: the rate alone keeps the
								 * caller out this many ms more (-1: not so) */
	int64		share_seen;		/* the permits a reserve leaves to the
								 * caller's priority (-1: no reserve) */
	bool		grace_seen;		/* a reply told of a grace period after Redis
								 * forgot (I15) */
	bool		waited;			/* it had to queue */
	bool		reached;		/* Redis granted it or queued it once */
	bool		line_lost;		/* its line was lost under it while it
								 * waited (Redis forgot, FLUSHALL, or its
								 * place expired) */
	int64		gen_us;			/* the generation of its semaphore's slot
								 * this server knew when it began to wait
								 * (its us; 0: none) */
	RedisOutcome failure;		/* why it failed (elevel below ERROR) */
	TimestampTz deadline;		/* the end of the wait (DT_NOEND: none) */
	TimestampTz ride_from;		/* the first failure of the ride now */
	TimestampTz ride_last;		/* the last failure ridden */
	RedisStatus ride_cause;		/* the status of the ride's first failure */
	int			rides;			/* calls that failed and were tried again */
	int64		try_rt_ms;		/* the round trip of the last give-back
								 * (-1: none, or not known) */
} AcquireArgs;

/* The DETAIL of a wait that ran out in a grace period (I15) */
#define ACQUIRE_GRACE_DETAIL \
	"Redis lost, or after a change of primary may have lost, slots it had granted (a restart without persistence, FLUSHALL, or a failover), and nobody is admitted until their leases could have ended, so that their holders are stopped first."

/* How an acquire ended */
typedef enum AcquireResult
{
	ACQUIRE_GRANTED,
	ACQUIRE_NOT_GRANTED,		/* no slot within the wait */
	ACQUIRE_FAILED,				/* Redis failed us (args->failure) */
	ACQUIRE_CAP_GONE			/* (default_limit only) the limit it stored
								 * went again: a drop, or Redis forgot */
} AcquireResult;

extern AcquireResult acquire_slot(AcquireArgs *args, HoldScope scope,
								  char **id, Hold **hold);

#endif							/* REDSEM_ACQUIRE_H */
