/*
 * keeper.h
 *		The keeper background worker (keeper.c), and what the fleet index
 *		(fleet.c) takes from it.
 */
#ifndef REDSEM_KEEPER_H
#define REDSEM_KEEPER_H

#include "shmem.h"

/* One cycle's view of a hold, and what this cycle learned about it */
typedef struct HoldCopy
{
	int			slot;
	SharedHold	hold;
} HoldCopy;

extern void keeper_register(void);
extern void keeper_swallow_error(MemoryContext cxt, uint32 holdoff,
								 char *buf, size_t len);

#endif							/* REDSEM_KEEPER_H */
