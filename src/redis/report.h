/*
 * report.h
 *		The reporting layer of the Redis client: one table of statuses
 *		(SQLSTATE, short text, message, hint) drives every text about a
 *		failed call and the one function that raises (report.c).  The
 *		caller names the target; conn.c wraps these with the current one.
 */
#ifndef REDSEM_REPORT_H
#define REDSEM_REPORT_H

#include "redis_call.h"

extern bool redis_note(RedisOutcome *o, RedisStatus status, const char *fmt,...)
			pg_attribute_printf(3, 4);
extern bool redis_no_server_error(int err, const char *words);
extern const char *redis_status_text(RedisStatus status);
extern int	redis_status_sqlstate(RedisStatus status);
extern char *redis_outcome_sentence(const RedisOutcome *o, const char *target);
extern void redis_report_at(int elevel, const RedisOutcome *o,
							const char *target);

#endif							/* REDSEM_REPORT_H */
