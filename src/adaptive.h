/*
 * adaptive.h
 *		Adaptive limits (I16 in src/redsem.lua): the keeper's part.  Each
 *		keeper ticks every adaptive semaphore of its key prefix once an
 *		interval with this server's pressure; the controller itself runs in
 *		Redis, once per interval for the whole fleet.
 */
#ifndef REDSEM_ADAPTIVE_H
#define REDSEM_ADAPTIVE_H

#include "datatype/timestamp.h"

extern double redsem_adaptive_cpu_busy;
extern int	redsem_adaptive_max_lag_ms;

extern void adaptive_define_gucs(void);
extern bool adaptive_tick_due(void);
extern int64 adaptive_ms_until_tick(void);
extern void adaptive_keeper_tick(int budget_ms);
extern int	adaptive_pressure(const char **tag);

#endif							/* REDSEM_ADAPTIVE_H */
