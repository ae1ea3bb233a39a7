/*
 * queue.h
 *		Statement queues: admission control for the top-level statements of
 *		chosen roles, databases and applications, with no change to their
 *		SQL.  A queue is a redsem semaphore ("queue:<name>"); its definition
 *		and a session's queue are settings (queue_conf.h).
 */
#ifndef REDSEM_QUEUE_H
#define REDSEM_QUEUE_H

/* A statement's slot lives this long unless the keeper refreshes it */
#define QUEUE_LEASE_MS			30000

extern void queue_install_hooks(void);

#endif							/* REDSEM_QUEUE_H */
