/*
 * guard.c
 *		Statements of a holder whose slot is lost are stopped: the executor
 *		and utility hooks that look at the session's holds.
 *
 * When a statement starts, the session's holds are looked at if a holder
 * was stopped on this server since the last look or one of ours may have
 * run past its valid_until (hold_check_stopped: one atomic read and a clock
 * reading otherwise), so a lost slot fails the next statement, once.  While
 * a statement runs, the keeper's cancel (src/keeper.c) unwinds through
 * ExecutorRun, ExecutorFinish or ProcessUtility here, and the bare "canceling
 * statement due to user request" is replaced with the error that names the
 * semaphore and why (src/stop.c); a cancel with nothing of ours behind it
 * goes on unchanged.  Transaction control (COMMIT is looked at before it
 * commits, src/hold.c) and DISCARD are let through, so that a session can
 * always roll back and be reset, and a COMMIT PREPARED is never told of a
 * failure after it committed.  These hooks are installed last, outermost,
 * so that a statement queue's wait (src/queue.c) is inside them.  A cancel
 * that lands while a statement is parsed (waiting for a lock its parse
 * takes) is PostgreSQL's own; the next statement is then told why.  A
 * client's statement that ends (a utility statement of
 * PROCESS_UTILITY_TOPLEVEL: a DO, a CALL, a FETCH, never one run by SPI; a
 * query whose executor ends outside any other's: exec_depth) says so to
 * the keeper's watch of a cancelled holder (src/escalate.c), since within
 * a multi-statement Query the next statement has the same query_start.
 */
#include "postgres.h"

#include "executor/executor.h"
#include "nodes/parsenodes.h"
#include "optimizer/planner.h"
#include "tcop/utility.h"
#include "utils/backend_status.h"
#include "utils/elog.h"
#include "utils/errcodes.h"
#include "utils/fmgrprotos.h"
#include "utils/memutils.h"

#include "bounds.h"
#include "compat.h"
#include "escalate.h"
#include "guard.h"
#include "hold.h"
#include "hooks.h"
#include "stop.h"
#include "textenc.h"

static ExecutorStart_hook_type prev_executor_start = NULL;
static ExecutorRun_hook_type prev_executor_run = NULL;
static ExecutorFinish_hook_type prev_executor_finish = NULL;
static ExecutorEnd_hook_type prev_executor_end = NULL;
static planner_hook_type prev_planner = NULL;
static ProcessUtility_hook_type prev_process_utility = NULL;
static emit_log_hook_type prev_emit_log = NULL;

/*
 * How many executor, utility or planner calls of this backend are under
 * way: a query whose executor ends at 0 is a client's (or its portal's),
 * one run by SPI or by a function (one the planner runs included) ends
 * inside another's call
 */
static int	exec_depth = 0;

/*
 * In a PG_CATCH: if the error is a cancel and one of this session's holds
 * was stopped, raise the error that says so instead; else re-throw it.
 */
static void
rethrow_as_stop(MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	if (edata->sqlerrcode != ERRCODE_QUERY_CANCELED || !hold_stop_look_due(false))
	{
		FreeErrorData(edata);
		PG_RE_THROW();
	}
	FlushErrorState();
	hold_check_stopped(false);
	ReThrowError(edata);		/* nothing of ours: the cancel as it was */
}

/*
 * ExecutorStart: a statement of a session that lost a slot fails; a cancel
 * for a lost slot (while it waits in a statement queue, say) says so
 */
static void
guard_executor_start(QueryDesc *query, int eflags)
{
	MemoryContext cxt = CurrentMemoryContext;

	if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) == 0)
		hold_check_stopped(false);
	exec_depth++;
	PG_TRY();
	{
		if (prev_executor_start)
			prev_executor_start(query, eflags);
		else
			standard_ExecutorStart(query, eflags);
	}
	PG_CATCH();
	{
		exec_depth--;
		rethrow_as_stop(cxt);
	}
	PG_END_TRY();
	exec_depth--;
}

/*
 * ExecutorRun: a portal run again (a protocol-level Execute, which the
 * keeper's cancel cannot reach while the session waits for it) looks
 * first; a cancel for a lost slot says so
 */
static void
guard_executor_run(QueryDesc *query, ScanDirection direction, uint64 count
				   REDSEM_EXECUTE_ONCE_PARAM)
{
	MemoryContext cxt = CurrentMemoryContext;

	hold_check_stopped(false);
	exec_depth++;
	PG_TRY();
	{
		if (prev_executor_run)
			prev_executor_run(query, direction, count REDSEM_EXECUTE_ONCE_ARG);
		else
			standard_ExecutorRun(query, direction, count REDSEM_EXECUTE_ONCE_ARG);
	}
	PG_CATCH();
	{
		exec_depth--;
		rethrow_as_stop(cxt);
	}
	PG_END_TRY();
	exec_depth--;
}

/* ExecutorFinish (AFTER triggers): a cancel for a lost slot says so */
static void
guard_executor_finish(QueryDesc *query)
{
	MemoryContext cxt = CurrentMemoryContext;

	exec_depth++;
	PG_TRY();
	{
		if (prev_executor_finish)
			prev_executor_finish(query);
		else
			standard_ExecutorFinish(query);
	}
	PG_CATCH();
	{
		exec_depth--;
		rethrow_as_stop(cxt);
	}
	PG_END_TRY();
	exec_depth--;
}

/*
 * planner: a function it runs (an immutable one with constant arguments, a
 * stable one for an estimate) runs inside the planning, not as a client's
 * statement of its own; a cancel for a lost slot that lands in the
 * planning says so too
 */
static PlannedStmt *
guard_planner(Query *parse, const char *query_string, int cursorOptions,
			  ParamListInfo boundParams)
{
	MemoryContext cxt = CurrentMemoryContext;
	PlannedStmt *result;

	exec_depth++;
	PG_TRY();
	{
		if (prev_planner)
			result = prev_planner(parse, query_string, cursorOptions, boundParams);
		else
			result = standard_planner(parse, query_string, cursorOptions, boundParams);
	}
	PG_CATCH();
	{
		exec_depth--;
		rethrow_as_stop(cxt);
	}
	PG_END_TRY();
	exec_depth--;
	return result;
}

/*
 * True if a query that ends outside any executor or utility call is SPI's
 * of code the client's statement still runs: a trigger fired at commit (a
 * deferred one, after the statement's own executor ended), or a function
 * called through the fastpath protocol (PQfn: no hook sees its start)
 */
static bool
statement_runs_on(void)
{
	LOCAL_FCINFO(fcinfo, 0);

	InitFunctionCallInfoData(*fcinfo, NULL, 0, InvalidOid, NULL, NULL);
	return DatumGetInt32(pg_trigger_depth(fcinfo)) > 0 ||
		(MyBEEntry != NULL && MyBEEntry->st_state == STATE_FASTPATH);
}

/* ExecutorEnd: a client's query ended (outside any other's call) */
static void
guard_executor_end(QueryDesc *query)
{
	if (exec_depth == 0 && !statement_runs_on())
		escalate_statement_ended();
	if (prev_executor_end)
		prev_executor_end(query);
	else
		standard_ExecutorEnd(query);
}

/* True for statements that must always run: transaction control, DISCARD */
static bool
always_runs(const Node *stmt)
{
	return IsA(stmt, TransactionStmt) || IsA(stmt, DiscardStmt);
}

/* ProcessUtility: as ExecutorStart and ExecutorRun, for utility statements */
static void
guard_process_utility(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	MemoryContext cxt = CurrentMemoryContext;

	if (!always_runs(pstmt->utilityStmt))
		hold_check_stopped(false);
	exec_depth++;
	PG_TRY();
	{
		redsem_next_utility(prev_process_utility, pstmt, queryString,
							readOnlyTree, context, params, queryEnv, dest, qc);
	}
	PG_CATCH();
	{
		exec_depth--;
		if (context == PROCESS_UTILITY_TOPLEVEL)
			escalate_statement_ended();
		rethrow_as_stop(cxt);
	}
	PG_END_TRY();
	exec_depth--;
	if (context == PROCESS_UTILITY_TOPLEVEL)
		escalate_statement_ended();
}

/*
 * emit_log_hook: the FATAL of a session ended because a slot of policy
 * terminate was lost (the keeper's SIGTERM, or the watchdog's) says so,
 * instead of PostgreSQL's "due to administrator command" alone
 */
static void
guard_emit_log(ErrorData *edata)
{
	static bool busy = false;
	StoppedHold s;
	int			others;

	if (!busy && edata->elevel == FATAL && edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN &&
		edata->message_id != NULL &&
		strcmp(edata->message_id, "terminating connection due to administrator command") == 0)
	{
		char		name[REDSEM_MAX_NAME_BYTES + 1];

		busy = true;
		if (hold_terminated(&s, &others))
			stop_reword_terminate(edata, &s, others);
		else if (escalate_terminated(name, sizeof(name)))
			stop_reword_escalated(edata, name);
		busy = false;
	}
	textenc_fix_report(edata);
	if (prev_emit_log)
		prev_emit_log(edata);
}

/* Install the hooks (from _PG_init, preloaded or not) */
void
guard_install_hooks(void)
{
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = guard_executor_start;
	prev_executor_run = ExecutorRun_hook;
	ExecutorRun_hook = guard_executor_run;
	prev_executor_finish = ExecutorFinish_hook;
	ExecutorFinish_hook = guard_executor_finish;
	prev_executor_end = ExecutorEnd_hook;
	ExecutorEnd_hook = guard_executor_end;
	prev_planner = planner_hook;
	planner_hook = guard_planner;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = guard_process_utility;
	prev_emit_log = emit_log_hook;
	emit_log_hook = guard_emit_log;
}
