/*
 * queue_fleet.h
 *		The statement queues' definitions for the whole fleet, kept in Redis
 *		and managed with redsem_create_queue/alter/drop (queue_fleet.c):
 *		each server's keeper reads them into shared memory, from where its
 *		backends take them; a copy in the data directory outlives restarts.
 */
#ifndef REDSEM_QUEUE_FLEET_H
#define REDSEM_QUEUE_FLEET_H

#include "queue_conf.h"

extern void queue_fleet_shmem_init(void);
extern const QueueConfig *queue_fleet_config(uint64 *generation);
extern bool queue_fleet_poll_due(void);
extern bool queue_fleet_read_asked(void);
extern void queue_fleet_poll(int budget_ms);
extern bool queue_fleet_set_limit(const char *semaphore, int active, const char *by);
extern bool queue_fleet_defines(const char *name);
extern const char *queue_fleet_prefix(void);

#endif							/* REDSEM_QUEUE_FLEET_H */
