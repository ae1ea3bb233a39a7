/*
 * keeper.h
 *		The keeper background worker.
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

#endif							/* REDSEM_KEEPER_H */
