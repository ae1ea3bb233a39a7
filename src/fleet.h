/*
 * fleet.h
 *		One view of the fleet: the index of the semaphores in use under a
 *		key prefix (kept by every server's keeper) and redsem_semaphores().
 */
#ifndef REDSEM_FLEET_H
#define REDSEM_FLEET_H

#include "shmem.h"

/* A semaphore of a key prefix */
typedef struct FleetName
{
	char	   *prefix;
	char	   *name;
} FleetName;

/* The most adaptive semaphores a keeper ticks */
#define FLEET_ADAPTIVE_MAX	64

extern void fleet_touch_index(const HoldCopy *holds, int n, uint64 target,
							  int budget_ms);
extern const FleetName *fleet_adaptive_used(int *n);
extern void fleet_adaptive_drop(int i);
extern void fleet_touch_failed(const char *why);
extern void fleet_gen_keep_failed(const char *why);
extern bool fleet_touch_due(void);
extern bool fleet_gen_keep_due(const HoldCopy *holds, int n, uint64 target);
extern void fleet_keep_generations(const HoldCopy *holds, int n, uint64 target,
								   int budget_ms);

#endif							/* REDSEM_FLEET_H */
