/*
 * broker.h
 *		The Redis broker (broker.c): one process per server that owns the
 *		Redis connections of every client backend in broker mode, kept alive
 *		by a supervisor background worker; its loop is broker_loop.c, the
 *		backend's side of it src/redis/brokerlink.c.
 */
#ifndef REDSEM_BROKER_H
#define REDSEM_BROKER_H

extern void broker_define_gucs(void);
extern void broker_note_unpreloaded_setting(void);
extern void broker_register(void);


#endif							/* REDSEM_BROKER_H */
