/*
 * hold.h
 *		This session's holds: scopes, ownership, and releasing them on time.
 */
#ifndef REDSEM_HOLD_H
#define REDSEM_HOLD_H

#include "datatype/timestamp.h"

#include "stop.h"

typedef enum HoldScope
{
	HOLD_SESSION,
	HOLD_XACT,
	HOLD_STATEMENT				/* a statement queue's slot (queue.c) */
} HoldScope;

typedef struct Hold Hold;

/* One row of redsem_held() */
typedef struct HeldInfo
{
	char	   *name;
	char	   *id;
	const char *scope;			/* "session", "transaction" or "statement" */
	bool		kept_alive;		/* the keeper refreshes it, successfully */
	char	   *keeper_error;	/* why it does not, or NULL */
	TimestampTz acquired_at;
	TimestampTz expires_at;		/* estimate, from the last confirmation */
	int64		lease_ms;
	int64		ticket;
	int			permits;
} HeldInfo;

extern void hold_init(void);
extern void hold_install_hooks(void);
extern Hold *hold_begin(const char *name, const char *id, HoldScope scope,
						int64 lease_ms, int permits);
extern void hold_mark_waiting(Hold *hold, TimestampTz checked_at);
extern bool hold_keeper_can_confirm(Hold *hold);
extern void hold_mark_promoted(Hold *hold, int64 ticket, int64 window_ms,
							   TimestampTz at);
extern void hold_mark_unsure(Hold *hold);
extern void hold_mark_held(Hold *hold, int64 ticket, int64 lease_ms,
						   TimestampTz confirmed_at, int64 confirm_ms);
extern void hold_forget(Hold *hold);
extern bool hold_is_own(const char *id);
extern void hold_refuse_statement_slot(const char *name, const char *id, bool release);
extern bool hold_release_id(const char *name, const char *id, bool *held);
extern bool hold_refresh_id(const char *name, const char *id, int64 lease_ms,
							int64 *new_lease_ms);
extern void hold_forget_id(const char *name, const char *id);
extern bool hold_take_ended(const char *name, const char *id);
extern void hold_release_quietly(const char *name, const char *id);
extern void hold_span_xacts(const char *name, const char *id, bool on);
extern int	hold_snapshot(HeldInfo **out);
extern int	hold_release_session(void);
extern void hold_flush_deferred(void);
extern bool hold_stop_look_due(bool at_commit);
extern void hold_check_stopped(bool at_commit);
extern bool hold_terminated(StoppedHold *out, int *others);

extern int	redsem_max_holds_per_session;
extern bool redsem_await_release;
extern void hold_define_gucs(void);

#endif							/* REDSEM_HOLD_H */
