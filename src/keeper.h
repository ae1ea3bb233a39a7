/*
 * keeper.h
 *		The keeper background worker (keeper.c).
 */
#ifndef REDSEM_KEEPER_H
#define REDSEM_KEEPER_H

extern void keeper_register(void);

#endif							/* REDSEM_KEEPER_H */
