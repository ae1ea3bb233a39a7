/*
 * broker_loop.h
 *		The redsem broker's loop (broker_loop.c), run by the broker child
 *		that broker.c forks.
 */
#ifndef REDSEM_BROKER_LOOP_H
#define REDSEM_BROKER_LOOP_H

#include <signal.h>

#include "compat.h"

pg_noreturn extern void broker_loop(volatile sig_atomic_t *stop_requested);

#endif							/* REDSEM_BROKER_LOOP_H */
