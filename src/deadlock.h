/*
 * deadlock.h
 *		Waiting in line for a slot that cannot come: the slot's holders on
 *		this server wait, directly or not, for a lock the waiter holds.
 */
#ifndef REDSEM_DEADLOCK_H
#define REDSEM_DEADLOCK_H

extern int64 deadlock_check_interval_ms(void);
extern void deadlock_check(const char *name, int permits, int64 limit);

#endif							/* REDSEM_DEADLOCK_H */
