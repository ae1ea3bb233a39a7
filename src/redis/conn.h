/*
 * conn.h
 *		The backend's Redis links (conn.c): one status-returning core for
 *		every command and pipeline, routed to the right server or Cluster
 *		node; and the report of a failure, naming its target.
 */
#ifndef REDSEM_CONN_H
#define REDSEM_CONN_H

#include "datatype/timestamp.h"

#include "redis_call.h"
#include "report.h"
#include "sockwait.h"


struct redisContext;

extern void redis_call_init(RedisCall *call, TimestampTz deadline,
							bool interruptible, int elevel);
extern bool redis_exec(RedisCall *call, int argc, const char **argv,
					   const size_t *argvlen, struct redisReply **reply);
extern bool redis_exec_pipeline(RedisCall *call, int n, const RedisCommand *cmds,
								struct redisReply **replies);
extern bool redis_send_deferred(RedisCall *call, int argc, const char **argv,
								RedisReplyHandler handler, void *arg);
extern void redis_settle_deferred(TimestampTz deadline, bool interruptible);
extern void redis_poll_deferred(void);
extern void redis_report(int elevel, const RedisOutcome *outcome);
extern char *redis_outcome_text(const RedisOutcome *outcome);
extern void redis_disconnect(void);
extern void redis_watch_named_primary(bool (*named_other) (uint64 target, const char *primary),
									  uint64 (*moves) (void));
extern char *redis_target_description(void);
extern uint64 redis_target_signature(void);
extern uint64 redis_route_changes(void);
extern uint64 redis_link_opens(void);
extern void redis_known_nodes(const RedisCall *call, const char *const *keys, int n,
							  int *nodes);

#endif							/* REDSEM_CONN_H */
