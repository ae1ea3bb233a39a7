/*
 * clock.h
 *		redsem's clock for every interval it measures: leases, waits,
 *		deadlines, back-offs, the keeper's rounds.
 *
 * It counts from the machine's boot (CLOCK_BOOTTIME where Linux has it, so
 * a suspended machine's time still counts, as Redis's does; CLOCK_MONOTONIC
 * elsewhere), in the microseconds of a TimestampTz, and it never steps: an
 * administrator, NTP or faketime setting the wall clock back or forward
 * changes no lease, no wait and no deadline here.  Every process of a
 * server reads the same clock, so its readings may be kept in shared
 * memory.  Only what is shown to people (redsem_held, redsem_server_holds)
 * is turned into wall-clock time, with redsem_wall_time.
 */
#ifndef REDSEM_CLOCK_H
#define REDSEM_CLOCK_H

#include <time.h>

#include "datatype/timestamp.h"
#include "utils/timestamp.h"

#include "timing.h"

#ifdef CLOCK_BOOTTIME
#define REDSEM_CLOCK_ID		CLOCK_BOOTTIME
#else
#define REDSEM_CLOCK_ID		CLOCK_MONOTONIC
#endif

/* Now, by redsem's clock */
static inline TimestampTz
redsem_now(void)
{
	struct timespec ts;

	clock_gettime(REDSEM_CLOCK_ID, &ts);
	return (TimestampTz) ts.tv_sec * USECS_PER_SEC + ts.tv_nsec / 1000;
}

/* The wall-clock time of a reading of redsem's clock (for display) */
static inline TimestampTz
redsem_wall_time(TimestampTz at)
{
	return GetCurrentTimestamp() - (redsem_now() - at);
}

/*
 * Until when a slot that Redis kept for kept_ms, by a request sent at (by
 * redsem's clock), is surely still its holder's: less the margin for
 * clock rates and for a stop to act (src/timing.h)
 */
static inline TimestampTz
redsem_valid_until(TimestampTz at, int64 kept_ms)
{
	return TimestampTzPlusMilliseconds(at, kept_ms - kept_ms / REDSEM_CLOCK_RATE_DIVISOR -
									   REDSEM_STOP_ACT_MS);
}

/*
 * True at most once every every_ms of the wall clock for one message (*at:
 * when it last said so, updated): a log line that must not flood
 */
static inline bool
redsem_once_every(TimestampTz *at, int every_ms)
{
	TimestampTz now = GetCurrentTimestamp();

	if (!TimestampDifferenceExceeds(*at, now, every_ms))
		return false;
	*at = now;
	return true;
}

#endif							/* REDSEM_CLOCK_H */
