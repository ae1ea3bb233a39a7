/*
 * broker.h
 *		The Redis broker (broker.c): one process per server that owns the
 *		Redis connections of every client backend in broker mode, kept alive
 *		by a supervisor background worker.  The backend's side of it is
 *		src/redis/brokerlink.c.
 */
#ifndef REDSEM_BROKER_H
#define REDSEM_BROKER_H

/* redsem.connection_mode */
typedef enum RedsemConnectionMode
{
	REDSEM_CONNECTION_DIRECT,	/* a connection per backend (default) */
	REDSEM_CONNECTION_BROKER	/* client backends go through the broker */
} RedsemConnectionMode;

extern int	redsem_connection_mode;

/* Set in _PG_init: broker mode was asked for, but redsem is not preloaded */
extern bool redsem_broker_asked_unpreloaded;

extern void broker_define_gucs(void);
extern void broker_note_unpreloaded_setting(void);
extern void broker_register(void);

/* In the broker child (broker.c starts it, broker_loop.c is its work) */
extern bool broker_should_stop(void);
extern void broker_loop(void) pg_attribute_noreturn();

#endif							/* REDSEM_BROKER_H */
