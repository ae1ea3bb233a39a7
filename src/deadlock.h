/*
 * deadlock.h
 *		Waiting in line for a slot that cannot come: the slot's holders on
 *		this server wait, directly or not, for a lock the waiter holds.
 */
#ifndef REDSEM_DEADLOCK_H
#define REDSEM_DEADLOCK_H

/* A wait due to end within this much of its next look is not looked at */
#define DEADLOCK_CHECK_MARGIN_MS	100

/* A waiter in line, as the deadlock check needs it */
typedef struct DeadlockWait
{
	const char *name;			/* the semaphore */
	const char *id;				/* the waiter's id */
	int			permits;
	int			priority;
	const char *tenant;			/* NULL: none */
	int64		limit;			/* the limit Redis last told, 0: none yet */
} DeadlockWait;

extern int64 deadlock_check_interval_ms(void);
extern bool deadlock_possible(const char *name);
extern void deadlock_check(const DeadlockWait *w);

#endif							/* REDSEM_DEADLOCK_H */
