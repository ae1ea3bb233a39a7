/*
 * sockwait.h
 *		The bottom layer of the Redis client: waiting on a socket and the
 *		process latch together, so that cancel, timeouts and postmaster
 *		death are served while Redis is slow (sockwait.c).
 */
#ifndef REDSEM_SOCKWAIT_H
#define REDSEM_SOCKWAIT_H

#include "datatype/timestamp.h"

extern void redis_set_wait_event(uint32 event);
extern void redis_watch_client(bool on);
extern int	redis_wait_socket(int fd, int io_events, TimestampTz deadline,
							  bool interruptible);
extern void redis_forget_wait_fd(int fd);
extern void redis_wait_forget_inherited(void);
extern bool redis_past(TimestampTz deadline);
extern long redis_ms_until(TimestampTz deadline);
extern void redis_pause(int ms, TimestampTz deadline, bool interruptible);
extern bool redis_pause_to_retry(int ms, TimestampTz deadline, bool interruptible);

#endif							/* REDSEM_SOCKWAIT_H */
