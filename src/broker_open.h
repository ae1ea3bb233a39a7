/*
 * broker_open.h
 *		Opening the broker's Redis connections without blocking it
 *		(broker_open.c): a forked opener per connection.
 */
#ifndef REDSEM_BROKER_OPEN_H
#define REDSEM_BROKER_OPEN_H

#include <sys/types.h>

#include "datatype/timestamp.h"

#include "profile.h"
#include "redis_call.h"

struct redisContext;

/* An open under way: its opener, and the broker's end of their socket pair */
typedef struct BrokerOpening
{
	pid_t		pid;			/* 0: none */
	int			fd;
	TimestampTz started;
	TimestampTz deadline;		/* the opener's own: it gives up then */
	TimestampTz kill_at;		/* past its own deadline: killed */
	bool		ask;			/* it only asks the sentinels (no connection) */
	bool		relay;			/* TLS: it stays, as the connection's relay */
} BrokerOpening;

extern bool broker_open_start(BrokerOpening *o, const char *host, int port,
							  const char *path, const RedisProfile *profile,
							  int connect_timeout_ms, TimestampTz by, bool ask,
							  void (*forget) (void),
							  RedisOutcome *outcome);
extern struct redisContext *broker_open_finish(BrokerOpening *o, RedisOutcome *outcome,
											  pid_t *relay);
extern void broker_reap_later(pid_t pid);
extern void broker_reap_ended(TimestampTz now);
extern TimestampTz broker_reap_next(TimestampTz until);
extern void broker_open_cancel(BrokerOpening *o, RedisOutcome *outcome);

#endif							/* REDSEM_BROKER_OPEN_H */
