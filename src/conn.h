/*
 * conn.h
 *		The backend's Redis connection: one status-returning core for every
 *		command, and one report function that raises or logs by level.
 */
#ifndef REDSEM_CONN_H
#define REDSEM_CONN_H

#include "datatype/timestamp.h"

#include "redis_call.h"
#include "report.h"
#include "sockwait.h"


struct redisContext;

/* Connection set-up, shared with sentinel.c */
extern struct redisContext *redis_open_context(RedisCall *call, const char *host,
											   int port, const char *unix_path,
											   TimestampTz deadline);
extern bool redis_setup_context(RedisCall *call, struct redisContext *c,
								TimestampTz deadline);
extern bool redis_context_command(RedisCall *call, struct redisContext *c,
								  int argc, const char **argv,
								  TimestampTz deadline, struct redisReply **reply);
extern void redis_close_context(struct redisContext *c);
extern TimestampTz redis_connect_deadline(TimestampTz deadline);

extern void redis_call_init(RedisCall *call, TimestampTz deadline,
							bool interruptible, int elevel);
extern bool redis_exec(RedisCall *call, int argc, const char **argv,
					   const size_t *argvlen, struct redisReply **reply);
extern bool redis_exec_pipeline(RedisCall *call, int n, const RedisCommand *cmds,
								struct redisReply **replies);
extern bool redis_reply_outcome(const struct redisReply *reply,
								RedisOutcome *outcome);
extern bool redis_fail(RedisCall *call, RedisStatus status, const char *fmt,...)
			pg_attribute_printf(3, 4);
extern void redis_report(int elevel, const RedisOutcome *outcome);
extern char *redis_outcome_text(const RedisOutcome *outcome);
extern uint64 redis_writes_started(void);
extern void redis_disconnect(void);
extern char *redis_target_description(void);
extern uint64 redis_target_signature(void);

#endif							/* REDSEM_CONN_H */
