/*
 * stop.h
 *		A holder whose slot is lost is stopped: the policy
 *		(redsem.on_slot_lost) and the words that tell the holder why.
 */
#ifndef REDSEM_STOP_H
#define REDSEM_STOP_H

#include "shmem.h"

/* One of this session's holds found stopped (hold_check_stopped) */
typedef struct StoppedHold
{
	const char *name;
	StopReason	reason;
	SlotLostPolicy policy;
	bool		in_xact;		/* a transaction's (or statement's) own slot:
								 * the transaction cannot commit */
	bool		statement;		/* a statement queue's statement's slot */
	int64		kept_ms;		/* the lease (or window) it had */
	bool		window;			/* kept_ms is a promotion window */
	int64		unconfirmed_ms; /* from its last confirmed request to now */
	char		trouble[KEEPER_TROUBLE_LEN];	/* why the keeper's last try to
												 * refresh it failed ("": it
												 * did not fail) */
	bool		cancel_coming;	/* a cancel of it was sent to this backend:
								 * its watchdog's, or the keeper's sent
								 * before the session told it ... */
	TimestampTz keeper_sent_at; /* ... when the keeper's was (it may not be
								 * in yet), 0: its watchdog's */
} StoppedHold;

extern int	redsem_on_slot_lost;

extern void stop_define_gucs(void);
extern char *stop_reason_detail(StopReason why, int64 kept_ms, bool window,
								int64 unconfirmed_ms, const char *trouble);
extern void stop_report(const StoppedHold *stopped, int n);
extern void stop_reword_terminate(ErrorData *edata, const StoppedHold *s, int others);
extern void stop_reword_escalated(ErrorData *edata, const char *name);
extern void stop_absorb_cancel(TimestampTz keeper_sent_at);

#endif							/* REDSEM_STOP_H */
