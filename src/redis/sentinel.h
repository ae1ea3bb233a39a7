/*
 * sentinel.h
 *		Finding the primary through Redis Sentinel.
 */
#ifndef REDSEM_SENTINEL_H
#define REDSEM_SENTINEL_H

#include "profile.h"
#include "redis_call.h"

struct redisContext;

extern void sentinel_define_gucs(void);
extern bool sentinel_enabled(void);
extern struct redisContext *sentinel_connect_primary(RedisCall *call,
													 TimestampTz deadline);
extern char *sentinel_target_description(void);
extern const char *sentinel_last_primary(void);
extern bool sentinel_ask_primary(RedisCall *call, TimestampTz deadline);
extern void sentinel_format_address(char *buf, size_t len, const char *host, int port);

#endif							/* REDSEM_SENTINEL_H */
