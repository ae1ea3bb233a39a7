/*
 * fcall.h
 *		Calling the redsem function library (script.c), for the files that
 *		build their own calls of it (batch.c): the FCALL head of a
 *		semaphore's operation, sending one (loading the library where it
 *		is missing), and reading an array reply.  Not for other callers:
 *		they use the operations of script.h.
 */
#ifndef REDSEM_FCALL_H
#define REDSEM_FCALL_H

#include "redis_call.h"

struct redisReply;

/*
 * Keys an operation names: the semaphore's owner key (the script makes
 * the others from it; in a Cluster all six are named) and its generation
 * key (gen.c); and the most
 * arguments an operation takes after its name (acquire: id, limit,
 * permits, lease, wait, keepalive, origin, the generation known, its
 * flags, settle, priority, tenant)
 */
#define SCRIPT_NKEYS_MAX 7		/* (in a Cluster: all six, and the generation) */
#define SCRIPT_MAX_ARGS 12

extern const char *library_name(void);
extern int	fcall_head(const char **argv, const char *prefix, const char *name,
					   const char *op);
extern bool fcall_send(RedisCall *call, int argc, const char **argv,
					   struct redisReply **reply);
extern bool reply_int64(const struct redisReply *e, int64 *value);
extern const struct redisReply *reply_element(const struct redisReply *r, size_t i);

#endif							/* REDSEM_FCALL_H */
