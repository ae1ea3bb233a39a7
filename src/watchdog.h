/*
 * watchdog.h
 *		A holder stops itself when the keeper is late (watchdog.c).
 */
#ifndef REDSEM_WATCHDOG_H
#define REDSEM_WATCHDOG_H

extern void watchdog_arm(void);
extern void watchdog_watch(int slot);
extern void watchdog_unwatch(int slot);
extern int	watchdog_fires(void);

#endif							/* REDSEM_WATCHDOG_H */
