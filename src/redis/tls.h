/*
 * tls.h
 *		TLS to Redis (hiredis >= 1.0 built with hiredis_ssl): the settings,
 *		and the handshake run on a freshly connected context.
 */
#ifndef REDSEM_TLS_H
#define REDSEM_TLS_H

#include "compat.h"
#include "redis_call.h"

struct redisContext;
struct RedisProfile;

extern bool redsem_tls;

extern void tls_define_gucs(void);
extern bool tls_supported(RedisCall *call);
extern bool redis_tls_wanted(void);
extern void tls_session_profile(struct RedisProfile *profile);
extern bool tls_start(RedisCall *call, struct redisContext *c,
					  const char *host, TimestampTz deadline);
extern bool tls_idle_input_ok(struct redisContext *c);
extern bool tls_relay_ready(struct redisContext *c);
pg_noreturn extern void tls_relay(struct redisContext *c, int plain, int poll_us);
extern const char *tls_refusal(char *buf, size_t len, const char *fallback);

#endif							/* REDSEM_TLS_H */
