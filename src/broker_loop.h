/*
 * broker_loop.h
 *		The redsem broker's loop (broker_loop.c), run by the broker child
 *		that broker.c forks.
 */
#ifndef REDSEM_BROKER_LOOP_H
#define REDSEM_BROKER_LOOP_H

#include <signal.h>

#include "compat.h"

/*
 * The settings the supervisor passes to the broker at a reload, over a
 * pipe (the broker reads no configuration file: broker.c)
 */
typedef struct BrokerSettings
{
	int32		command_timeout_ms;
	int32		connect_timeout_ms;
	int32		poll_us;		/* redsem.broker_poll */
} BrokerSettings;

pg_noreturn extern void broker_loop(volatile sig_atomic_t *stop_requested, int settings_fd);

#endif							/* REDSEM_BROKER_LOOP_H */
