/*
 * resolve.h
 *		Host names resolved while the backend keeps serving interrupts.
 */
#ifndef REDSEM_RESOLVE_H
#define REDSEM_RESOLVE_H

#include "redis_call.h"

extern void redis_resolve_forget_inherited(void);
extern bool redis_resolve(RedisCall *call, const char *host, char *addr,
						  size_t addrlen, TimestampTz deadline);

#endif							/* REDSEM_RESOLVE_H */
