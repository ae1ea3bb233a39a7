/*
 * escalate.h
 *		The keeper ends a holder that runs on after its statement was
 *		cancelled for a lost slot (src/escalate.c).
 */
#ifndef REDSEM_ESCALATE_H
#define REDSEM_ESCALATE_H

#include "datatype/timestamp.h"

extern void escalate_shmem_init(void);
extern void escalate_note_try(const char *name, bool granted);
extern void escalate_statement_ended(void);
extern bool escalate_terminated(char *name, size_t size);

/* The HINT of a termination for running on: the keeper's LOG and the FATAL */
#define ESCALATE_HINT \
	"Code that catches query_canceled must end its statement or take the slot again; redsem.on_slot_lost = terminate ends such sessions at once."

extern bool escalate_note_told(const char *name, TimestampTz told_in);
extern bool escalate_watch(int pid, const char *name, TimestampTz now,
						   bool signalled);
extern void escalate_unwatch(int pid, const char *name);
extern void escalate_look(TimestampTz now);
extern void escalate_keeper_start(void);

#endif							/* REDSEM_ESCALATE_H */
