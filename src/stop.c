/*
 * stop.c
 *		A holder whose slot is lost is stopped: the policy
 *		(redsem.on_slot_lost) and the words that tell the holder why.
 *
 * A slot is lost when a refresh finds it gone (Redis forgot it, or its
 * lease ran out), when an administrator force-released it, or when Redis
 * has not confirmed its lease for so long that it may already be another
 * holder's (src/timing.h says how long that is, and why it comes before
 * Redis can give the slot away).  The keeper then cancels the holder's
 * statement (src/keeper.c), and the holder's session is told why at once,
 * or at its next statement, or at its COMMIT, whichever comes first
 * (src/hold.c, src/guard.c).  The error keeps the SQLSTATE of a cancel,
 * 57014, so that code which catches its own errors (a PL/pgSQL WHEN OTHERS)
 * cannot swallow it and run on without the slot.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/elog.h"
#include "utils/guc.h"
#include "utils/timeout.h"

#include "clock.h"
#include "escalate.h"
#include "stop.h"
#include "timing.h"

/* redsem.on_slot_lost */
int			redsem_on_slot_lost = SLOT_LOST_CANCEL;

static const struct config_enum_entry slot_lost_options[] = {
	{"cancel", SLOT_LOST_CANCEL, false},
	{"terminate", SLOT_LOST_TERMINATE, false},
	{"warn", SLOT_LOST_WARN, false},
	{NULL, 0, false}
};

/* Define redsem.on_slot_lost */
void
stop_define_gucs(void)
{
	DefineCustomEnumVariable("redsem.on_slot_lost",
							 "What becomes of a holder whose slot is lost.",
							 "cancel: its statement is cancelled, or its next statement fails; "
							 "terminate: its session ends; warn: it runs on, with a WARNING.",
							 &redsem_on_slot_lost, SLOT_LOST_CANCEL,
							 slot_lost_options, PGC_SUSET, 0,
							 NULL, NULL, NULL);
}

/*
 * Why a slot was lost, as the sentences of an errdetail (unconfirmed_ms:
 * from its last confirmed request to the stop; trouble: why the keeper's
 * last try to refresh it failed, NULL or "" if it did not).  A slot found
 * gone with lease left was lost by Redis or freed by an administrator.
 */
char *
stop_reason_detail(StopReason why, int64 kept_ms, bool window,
				   int64 unconfirmed_ms, const char *trouble)
{
	/* (a slot promoted from the line and not yet confirmed has a window) */
	const char *what = window ? "promotion window" : "lease";

	switch (why)
	{
		case STOP_GONE:
			if (unconfirmed_ms < kept_ms)
				return psprintf("Redis no longer had the slot when it was refreshed, though its %s of " INT64_FORMAT " ms had " INT64_FORMAT " ms left: Redis lost it (a restart without persistence, a failover that lost writes, FLUSHALL or an eviction), or an administrator freed it with redsem_force_release(..., holder_gone => true).",
								what, kept_ms, kept_ms - unconfirmed_ms);
			return psprintf("Redis no longer had the slot when it was refreshed: its %s of " INT64_FORMAT " ms ran out before it could be refreshed (%s " INT64_FORMAT " ms before).",
							what, kept_ms, window ? "it was promoted" : "it was last confirmed", unconfirmed_ms);
		case STOP_FORCED:
			return pstrdup("An administrator force-released it (redsem_force_release).");
		case STOP_UNCONFIRMED:
			return psprintf("Redis had not confirmed its %s of " INT64_FORMAT " ms for " INT64_FORMAT " ms, so the slot could soon be another holder's.%s",
							what, kept_ms, unconfirmed_ms,
							trouble != NULL && trouble[0] != '\0' ?
							psprintf(" The keeper's last try to refresh it failed: %s", trouble) : "");
		case STOP_NONE:
			break;
	}
	return pstrdup("");
}

/* The error (or, for policy warn, the WARNING) that tells of one lost slot */
static void
report_one(const StoppedHold *s, int others, int elevel)
{
	ereport(elevel,
			(errcode(elevel == WARNING ? ERRCODE_WARNING :
					 elevel == FATAL ? ERRCODE_ADMIN_SHUTDOWN : ERRCODE_QUERY_CANCELED),
			 errmsg("the slot of semaphore \"%s\" was lost", s->name),
			 errdetail("%s%s", stop_reason_detail(s->reason, s->kept_ms, s->window, s->unconfirmed_ms, s->trouble),
					   others > 0 ?
					   psprintf(" %d other slot(s) of this session were lost as well.", others) : ""),
			 elevel == WARNING ?
			 errhint("The work goes on without the slot (redsem.on_slot_lost is warn): more holders than the limit may run at once.") :
			 s->statement ?
			 errhint("It was the slot of the statement's queue: run the statement again (after a ROLLBACK in a transaction block), and it queues anew.") :
			 s->in_xact ?
			 errhint("The transaction cannot commit: roll it back, and take the slot again in a new one.") :
			 errhint("Take the slot again to go on; redsem.on_slot_lost chooses what becomes of a holder whose slot is lost.")));
}

/*
 * Put the words of a lost slot into the FATAL that PostgreSQL raises when
 * the keeper or the watchdog ends a session under policy terminate, which
 * would otherwise only say "due to administrator command" (src/guard.c:
 * emit_log_hook, while the error is reported: nothing here may raise).
 * The SQLSTATE stays 57P01.
 */
void
stop_reword_terminate(ErrorData *edata, const StoppedHold *s, int others)
{
	edata->message = psprintf("terminating connection because the slot of semaphore \"%s\" was lost",
							  s->name);
	edata->detail = psprintf("%s%s", stop_reason_detail(s->reason, s->kept_ms, s->window, s->unconfirmed_ms, s->trouble),
							 others > 0 ?
							 psprintf(" %d other slot(s) of this session were lost as well.", others) : "");
	edata->hint = pstrdup("redsem.on_slot_lost is terminate for this slot: the session of a holder whose slot is lost ends.");
}

/*
 * The words of the FATAL that ends a session the keeper terminated for
 * running on after its statement was stopped for a lost slot (escalate.c),
 * in place of PostgreSQL's "terminating connection due to administrator
 * command", which says nothing of why
 */
void
stop_reword_escalated(ErrorData *edata, const char *name)
{
	edata->message = psprintf("terminating connection because it ran on after its statement was stopped for the lost slot of semaphore \"%s\"",
							  name);
	edata->detail = pstrdup("Its code caught the error that told it (query_canceled) and went on without taking the slot again, so the keeper ended the session.");
	edata->hint = pstrdup(ESCALATE_HINT);
}

/*
 * Tell this session of the slots it lost: one WARNING for those whose
 * policy was warn (naming the first), then one ERROR (FATAL for
 * terminate) for the others.
 */
void
stop_report(const StoppedHold *stopped, int n)
{
	const StoppedHold *first = NULL;
	const StoppedHold *first_warned = NULL;
	int			others = 0;
	int			others_warned = 0;

	for (int i = 0; i < n; i++)
	{
		if (stopped[i].policy == SLOT_LOST_WARN)
		{
			if (first_warned == NULL)
				first_warned = &stopped[i];
			else
				others_warned++;
		}
		else
		{
			if (first != NULL)
				others++;
			/* (one of policy terminate ends the session, whatever the rest) */
			if (first == NULL ||
				(stopped[i].policy == SLOT_LOST_TERMINATE &&
				 first->policy != SLOT_LOST_TERMINATE))
				first = &stopped[i];
		}
	}
	if (first_warned != NULL)
		report_one(first_warned, others_warned, WARNING);
	if (first != NULL)
		report_one(first, others,
				   first->policy == SLOT_LOST_TERMINATE ? FATAL : ERROR);
}


/*
 * The cancel of a stop this session tells now is pending (the keeper's
 * signal, sent before the session told it, or its watchdog's): the error
 * that tells the stop is that cancel, so it is dropped (else it would come
 * after, perhaps in the handler of code that caught the error, as a bare
 * cancel), unless a timeout's cancel is pending too.  The keeper's signal,
 * sent from another process at keeper_sent_at (0: none), may take a moment
 * to come in: it is waited for until REDSEM_SIGNAL_IN_MS after it was sent
 * (src/timing.h), no longer (one sent before has come in: acted on, or
 * dropped while the session was idle).
 */
void
stop_absorb_cancel(TimestampTz keeper_sent_at)
{
	TimestampTz until = keeper_sent_at == 0 ? 0 :
		TimestampTzPlusMilliseconds(keeper_sent_at, REDSEM_SIGNAL_IN_MS);

	while (!QueryCancelPending && redsem_now() < until)
		pg_usleep(100L);		/* (the signal ends the sleep) */
	if (QueryCancelPending &&
		!get_timeout_indicator(STATEMENT_TIMEOUT, false) &&
		!get_timeout_indicator(LOCK_TIMEOUT, false))
		QueryCancelPending = false;
}
