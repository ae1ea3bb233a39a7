/*
 * keeper.h
 *		The keeper background worker.
 */
#ifndef REDSEM_KEEPER_H
#define REDSEM_KEEPER_H

extern void keeper_register(void);

#endif							/* REDSEM_KEEPER_H */
