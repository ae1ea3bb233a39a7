/*
 * stored.h
 *		What administrators store with a semaphore, in Redis, for every
 *		server: its limit, rate, reserve and tenants' weights (stored.c).
 */
#ifndef REDSEM_STORED_H
#define REDSEM_STORED_H

#include "redis/redis_call.h"

extern void stored_pin_configured(RedisCall *call, const char *name);

#endif							/* REDSEM_STORED_H */
