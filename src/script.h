/*
 * script.h
 *		The semaphore operations: one EVALSHA of src/redsem.lua each.
 *
 * Every operation takes a RedisCall (see conn.h): from SQL it raises on
 * failure; from callbacks and the keeper it returns false with the reason in
 * call->outcome.  prefix NULL means the current redsem.key_prefix.
 */
#ifndef REDSEM_SCRIPT_H
#define REDSEM_SCRIPT_H

#include "conn.h"

typedef enum SemState
{
	SEM_HELD,					/* caller holds a slot */
	SEM_WAITING,				/* caller is in line */
	SEM_BUSY,					/* full, caller not queued */
	SEM_GONE,					/* caller left the line */
	SEM_LOST					/* caller's entry no longer exists */
} SemState;

typedef struct SemResult
{
	SemState	state;
	int64		ticket;			/* fencing token / place in line */
	int64		ms;				/* HELD: lease left; WAITING: look again in */
	int64		position;		/* WAITING: waiters ahead beyond the window */
} SemResult;

/* One member of a semaphore, as the "list" operation reports it */
typedef struct SemMember
{
	char	   *id;
	int64		ticket;
	int64		ms_left;		/* until its deadline; -1 if unknown */
	bool		waiting;
	char	   *info;			/* "lease|max_holders|since|origin" */
} SemMember;

extern bool sem_acquire(RedisCall *call, const char *name, const char *id,
						int max_holders, int64 lease_ms, bool wait,
						SemResult *result);
extern bool sem_wait_check(RedisCall *call, const char *name, const char *id,
						   SemResult *result);
extern bool sem_give_up(RedisCall *call, const char *name, const char *id,
						SemResult *result);
extern bool sem_release(RedisCall *call, const char *prefix, const char *name,
						const char *id, bool *was_held);
extern bool sem_refresh(RedisCall *call, const char *prefix, const char *name,
						const char *id, int64 lease_ms, int64 *new_lease_ms);
extern bool sem_wait_for_wake(RedisCall *call, const char *name,
							  const char *id, int64 timeout_ms, int64 *ticket,
							  int64 *nudge_ms);
extern bool sem_token(RedisCall *call, const char *name, const char *id,
					  int64 *token);
extern bool sem_list(RedisCall *call, const char *name, SemMember **members,
					 int *count);

#endif							/* REDSEM_SCRIPT_H */
