/*
 * broker_wait.h
 *		The broker's wait pools (broker_wait.c): waits without a connection
 *		each.
 */
#ifndef REDSEM_BROKER_WAIT_H
#define REDSEM_BROKER_WAIT_H

#include "broker_state.h"

extern int	broker_pool_for(const Client *c, const redisReply *cmd);
extern bool broker_pool_usable(int p);
extern bool broker_pool_can_take(int p);
extern void broker_pool_attach(int p, Upstream *u);
extern void broker_pool_join(int p, Client *c, const redisReply *cmd);
extern void broker_pool_leave(const Client *c);
extern void broker_pool_reply(const Pending *pend, const redisReply *reply);
extern int	broker_pool_fail(Upstream *u, Client **lost);
extern int	broker_pool_members(Upstream *u);
extern bool broker_pool_of(int t);
extern void broker_pool_kick(void);
extern void broker_pool_check(TimestampTz now);
extern TimestampTz broker_pool_next_deadline(TimestampTz until);

#endif							/* REDSEM_BROKER_WAIT_H */
