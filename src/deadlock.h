/*
 * deadlock.h
 *		Waiting in line for a slot that cannot come: the slot's holders on
 *		this server wait, directly or not, for a lock the waiter holds.
 */
#ifndef REDSEM_DEADLOCK_H
#define REDSEM_DEADLOCK_H

/* A wait due to end within this much of its next look is not looked at */
#define DEADLOCK_CHECK_MARGIN_MS	100

extern int64 deadlock_check_interval_ms(void);
extern bool deadlock_possible(const char *name);
extern void deadlock_check(const char *name, int permits, int64 limit);

#endif							/* REDSEM_DEADLOCK_H */
