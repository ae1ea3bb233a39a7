/*
 * sentinel.h
 *		Finding the primary through Redis Sentinel.
 */
#ifndef REDSEM_SENTINEL_H
#define REDSEM_SENTINEL_H

#include "profile.h"
#include "redis_call.h"

struct redisContext;

/* Room for a primary's "host:port" as the sentinels name it */
#define SENTINEL_NAMED_LEN	(255 + 16)

extern void sentinel_define_gucs(void);
extern bool sentinel_enabled(void);
extern struct redisContext *sentinel_connect_primary(RedisCall *call,
													 TimestampTz deadline);
extern char *sentinel_target_description(void);
extern const char *sentinel_last_primary(void);
extern bool sentinel_ask_primary(RedisCall *call, TimestampTz deadline);

#endif							/* REDSEM_SENTINEL_H */
