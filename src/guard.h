/*
 * guard.h
 *		Statements of a holder whose slot is lost are stopped (guard.c).
 */
#ifndef REDSEM_GUARD_H
#define REDSEM_GUARD_H

extern void guard_install_hooks(void);

#endif							/* REDSEM_GUARD_H */
