/*
 * link.h
 *		A bare connection to one Redis server (link.c): open, set up,
 *		exchange, classify.  Below conn.c and sentinel.c; never raises for a
 *		Redis failure.
 */
#ifndef REDSEM_LINK_H
#define REDSEM_LINK_H

#include "datatype/timestamp.h"

#include "redis_call.h"

struct redisContext;
struct redisReply;

/* Opening and closing */
extern TimestampTz redis_connect_deadline(TimestampTz deadline);
extern struct redisContext *redis_open_context(RedisCall *call, const char *host,
											   int port, const char *unix_path,
											   TimestampTz deadline);
extern bool redis_setup_context(RedisCall *call, struct redisContext *c,
								TimestampTz deadline);
extern void redis_close_context(struct redisContext *c);
extern void redis_set_connection_purpose(const char *purpose);
extern void redis_name_every_connection(void);
extern void redis_name_connections_after(pid_t pid);
extern struct redisContext *redis_open_target(RedisCall *call, const char *host,
											  int port, const char *unix_path,
											  TimestampTz deadline);
extern bool redis_target_tls(void);

/* Exchanging */
extern bool redis_context_command(RedisCall *call, struct redisContext *c,
								  int argc, const char **argv,
								  TimestampTz deadline, struct redisReply **reply);
extern RedisStatus redis_context_flush(struct redisContext *c, TimestampTz deadline,
									   bool interruptible);
extern void redis_set_read_wake_check(bool (*check) (struct redisContext *c));
extern RedisStatus redis_context_read(struct redisContext *c, TimestampTz deadline,
									  bool interruptible, struct redisReply **reply);
extern uint64 redis_writes_started(void);

/* Classifying */
extern RedisStatus redis_error_class(const char *msg, bool *drop);
extern RedisStatus redis_absorb_error_reply(RedisCall *call, struct redisReply *reply,
											const char *what, bool *drop);
extern void redis_salvage_error_line(RedisCall *call, struct redisContext *c);
extern bool redis_reply_outcome(const struct redisReply *reply,
								RedisOutcome *outcome);

#endif							/* REDSEM_LINK_H */
