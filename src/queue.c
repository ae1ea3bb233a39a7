/*
 * queue.c
 *		Statement queues: a top-level statement of a session that belongs
 *		to a queue takes a slot of the queue's semaphore before it executes
 *		and gives it back when it ends, however it ends.
 *
 * A session belongs to the queue named by redsem.queue (set with ALTER
 * ROLE/DATABASE ... SET; ordinary roles cannot change it), or else to the
 * first queue whose application_name patterns match its application_name.
 *
 * The slot is taken in ExecutorStart, once the plan and its cost are
 * known, and given back in ExecutorEnd: an open cursor keeps it until it is
 * closed.  It is a transaction-level hold of its own kind (scope
 * "statement"): an error, a cancel or a rollback ends it with the
 * transaction, the session's end with the session.  Only top-level
 * statements queue: queries run inside functions, procedures and DO blocks
 * are nested (nesting is counted in the executor and utility hooks, as
 * pg_stat_statements does), but not those run while a top-level statement
 * is planned, or inside a light one (queue_light.c), which hold no slot:
 * those are judged as top-level statements of their own.  A utility
 * statement that runs one query (EXPLAIN ANALYZE, EXECUTE, DECLARE CURSOR,
 * CREATE TABLE AS, REFRESH MATERIALIZED VIEW, COPY (query)) lets that
 * query queue as top-level; EXPLAIN without ANALYZE never waits itself (a
 * query the planner runs for it may: above).  Other utility statements
 * queue only in a queue with utility=on.  Parallel workers never queue.
 *
 * A session in no queue pays one test of a cached pointer per statement.
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/xact.h"
#include "executor/executor.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/nodes.h"
#include "nodes/parsenodes.h"
#include "optimizer/planner.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "acquire.h"
#include "clock.h"
#include "compat.h"
#include "guc.h"
#include "hold.h"
#include "hooks.h"
#include "queue.h"
#include "queue_conf.h"
#include "queue_cost.h"
#include "queue_fleet.h"
#include "queue_light.h"
#include "shmem.h"
#include "timing.h"

/* Times a statement stores its queue's cap again after Redis forgot it */
#define QUEUE_CAP_GONE_TRIES 3

static ExecutorStart_hook_type prev_executor_start = NULL;
static ExecutorRun_hook_type prev_executor_run = NULL;
static ExecutorFinish_hook_type prev_executor_finish = NULL;
static ExecutorEnd_hook_type prev_executor_end = NULL;
static ProcessUtility_hook_type prev_process_utility = NULL;
static planner_hook_type prev_planner = NULL;

/* How deep in executor/utility calls we are: 0 for a top-level statement */
static int	nesting = 0;

/* A statement that holds a queue slot */
typedef struct QueuedStatement
{
	QueryDesc  *query;			/* its executor state; NULL: a utility */
	SubTransactionId subxid;	/* the subtransaction it runs in */
	char	   *semaphore;
	char	   *id;				/* the slot's holder id; NULL: it runs under
								 * the slot of an earlier statement of the
								 * session (an open cursor) */
	bool		spans_xacts;	/* a CALL or DO: its procedure may commit */
} QueuedStatement;

/* Those statements, innermost last (TopMemoryContext) */
static List *queued = NIL;

/*
 * The top-level statements of a queued session judged light
 * (queue_light.c), running now (TopMemoryContext): what runs inside them
 * is not nested, so that SQL a built-in runs for them (a domain's CHECK)
 * is judged, and queued, as a top-level statement of its own
 */
static List *light_running = NIL;

/*
 * The statements of a queued session started nested (a cursor that a
 * function or DO block opened, by QueryDesc): judged when they run at the
 * top level (a FETCH, or a holdable cursor filled at COMMIT), which would
 * else run the cursor's query under no slot
 */
static List *nested_started = NIL;

/*
 * A top-level CALL or DO of a queue without utility=on (the default) takes
 * no slot at its start, but it runs queries of the user's, nested in it,
 * which take none of their own: it takes one at its first query that would
 * queue as a top-level statement (not light, not under min_cost) and holds
 * it, as one of utility=on does from its start, until it ends (across the
 * transactions its procedure ends).  Else a role of the queue ran any query
 * beside the cap inside a DO block.  lazy: such a CALL or DO runs and has
 * not taken its slot yet (its queue is the session's, looked up at each
 * judge: a definition may be replaced, and freed, while a procedure runs);
 * lazy_entry: its slot's entry once it took it.
 */
static bool lazy = false;
static QueuedStatement *lazy_entry = NULL;

static void span_xacts(QueuedStatement *qs, bool on);

/* The name of a queue's semaphore */
static char *
queue_semaphore(const QueueDef *q)
{
	return pstrdup(q->semaphore);
}

/* True if application_name matches one of the '|'-separated patterns */
static bool
apps_match(const char *apps)
{
	char		buf[QUEUE_MAX_APPS_BYTES + 1];
	char	   *save;

	if (apps[0] == '\0' || application_name == NULL)
		return false;
	strlcpy(buf, apps, sizeof(buf));
	for (char *pat = strtok_r(buf, "|", &save); pat; pat = strtok_r(NULL, "|", &save))
		if (queue_glob_match(pat, application_name))
			return true;
	return false;
}

/*
 * The priority of this session's statements in queue q: that of the first
 * application_priority pattern its application_name matches, at most
 * redsem.max_priority (the client chooses that name); else
 * redsem.queue_priority.
 */
static int
statement_priority(const QueueDef *q)
{
	int			priority;

	if (q->app_priorities[0] != '\0' &&
		queue_app_priority(q->app_priorities, application_name, &priority) == 1)
		return Min(priority, redsem_max_priority);
	return queue_session_priority();
}

/*
 * Say once per session that redsem.queue names no defined queue: at
 * elevel (WARNING; LOG where no queue is defined at all, as on a server
 * that queues nothing on purpose, such as a standby that inherits role
 * settings: the log alone)
 */
static void
warn_undefined_queue(const char *name, int elevel)
{
	static char warned[QUEUE_MAX_NAME_BYTES + 1] = "";

	if (strcmp(warned, name) == 0)
		return;
	strlcpy(warned, name, sizeof(warned));
	ereport(elevel,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("redsem.queue names statement queue \"%s\", which is not defined", name),
			 errdetail("Statements of this session run without queueing."),
			 errhint("Define it with redsem_create_queue(), or correct redsem.queue.")));
}

/* The queue of this session right now, or NULL */
static const QueueDef *
session_queue(const QueueConfig *conf)
{
	const char *name = queue_session_setting();

	if (name[0] != '\0')
	{
		for (int i = 0; i < conf->count; i++)
			if (strcmp(conf->queues[i].name, name) == 0)
				return &conf->queues[i];
		warn_undefined_queue(name, WARNING);
		return NULL;
	}
	for (int i = 0; i < conf->count; i++)
		if (apps_match(conf->queues[i].apps))
			return &conf->queues[i];
	return NULL;
}

/*
 * The queue this session's top-level statements go through, or NULL,
 * whatever the nesting now (see queue_to_use).  The answer is kept until
 * the definitions, redsem.queue or application_name change, so a session
 * in no queue pays a few string comparisons per statement.
 */
static const QueueDef *
session_queue_now(void)
{
	static uint64 cached_generation = 0;
	static char cached_queue[QUEUE_MAX_NAME_BYTES + 1];
	static char cached_app[NAMEDATALEN];
	static const QueueDef *cached = NULL;
	const QueueConfig *conf = queue_config();
	const char *app = application_name ? application_name : "";

	if (IsParallelWorker())
		return NULL;
	if (conf == NULL || conf->count == 0)
	{
		/* (a queue named while none is defined is not applied either) */
		if (queue_session_setting()[0] != '\0')
			warn_undefined_queue(queue_session_setting(), LOG);
		return NULL;
	}
	if (cached_generation != queue_config_generation() ||
		strcmp(cached_queue, queue_session_setting()) != 0 ||
		strcmp(cached_app, app) != 0)
	{
		cached = session_queue(conf);
		cached_generation = queue_config_generation();
		strlcpy(cached_queue, queue_session_setting(), sizeof(cached_queue));
		strlcpy(cached_app, app, sizeof(cached_app));
	}
	return cached;
}

/* The queue a top-level statement of this session must go through, or NULL */
static const QueueDef *
queue_to_use(void)
{
	return nesting > 0 ? NULL : session_queue_now();
}

/*
 * Until when this backend's statements of queues with on_redis_error=run
 * run without a slot, without trying Redis (src/timing.h; redsem's clock),
 * and why (cut to a whole character)
 */
static TimestampTz unqueued_until = 0;
static char unqueued_why[256];
static RedisStatus unqueued_status = RS_LOST;

/*
 * Report a statement that runs without a slot because Redis failed us (o),
 * or failed an earlier statement of this backend (o NULL: unqueued_why)
 */
static void
run_unqueued(const QueueDef *q, const char *semaphore, const RedisOutcome *o)
{
	if (o != NULL)
	{
		const char *text = redis_outcome_text(o);
		int			len = pg_mbcliplen(text, strlen(text), sizeof(unqueued_why) - 1);

		memcpy(unqueued_why, text, len);
		unqueued_why[len] = '\0';
		unqueued_until = TimestampTzPlusMilliseconds(redsem_now(), QUEUE_UNQUEUED_SPELL_MS);
		unqueued_status = o->status;
	}
	stats_count(NULL, semaphore, STAT_UNQUEUED, 1);
	ereport(WARNING,
			(errcode(redis_status_sqlstate(unqueued_status)),
			 errmsg("statement runs without a slot of redsem queue \"%s\": Redis cannot be used", q->name),
			 o != NULL ? errdetail_internal("%s", redis_outcome_text(o)) :
			 errdetail("Redis failed an earlier statement of this server process (%s); the process tries it again %d s after that.",
					   unqueued_why, QUEUE_UNQUEUED_SPELL_MS / 1000),
			 errhint("The queue is set to on_redis_error=run; with on_redis_error=fail such statements fail instead.")));
}

/*
 * Report a statement that runs without a slot because its queue's cap was
 * removed while it waited, after it had stored it again, and the queue is
 * no longer defined: dropped, and a dropped queue's line is let in
 * (redsem_drop_queue)
 */
static void
run_dropped(const QueueDef *q, const char *semaphore)
{
	stats_count(NULL, semaphore, STAT_UNQUEUED, 1);
	ereport(NOTICE,
			(errmsg("statement runs without a slot of redsem queue \"%s\": the queue was dropped while it waited", q->name),
			 errdetail("Its cap was removed from Redis; the statements in a dropped queue's line run.")));
}

/* Remember that statement query runs under the slot id (NULL: borrowed) */
static void
note_statement(QueryDesc *query, const char *semaphore, const char *id)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	QueuedStatement *qs = palloc(sizeof(QueuedStatement));

	qs->query = query;
	qs->subxid = GetCurrentSubTransactionId();
	qs->semaphore = pstrdup(semaphore);
	qs->id = id ? pstrdup(id) : NULL;
	qs->spans_xacts = false;
	queued = lappend(queued, qs);
	MemoryContextSwitchTo(old);
}

/* True if a statement of this session already holds a slot of semaphore */
static bool
session_holds(const char *semaphore)
{
	ListCell   *lc;

	foreach(lc, queued)
		if (strcmp(((QueuedStatement *) lfirst(lc))->semaphore, semaphore) == 0)
			return true;
	return false;
}

/* Error context of a queue's acquire: name the queue */
static void
queue_error_context(void *arg)
{
	errcontext("entering redsem queue \"%s\"", ((const QueueDef *) arg)->name);
}

/*
 * acquire_slot for a statement of queue q.  With on_redis_error=run, a
 * Redis that fails lets the statement run without a slot, so the role must
 * not be able to make it fail: redsem's timeouts are at least what the
 * server's configuration says (a session's or a role's own shorter ones
 * made a queue's wait look like a Redis that does not answer)
 */
static AcquireResult
acquire_with_server_timeouts(const QueueDef *q, AcquireArgs *args, char **id, Hold **hold)
{
	int			connect_ms = redsem_connect_timeout_ms;
	int			command_ms = redsem_command_timeout_ms;
	volatile AcquireResult result = ACQUIRE_FAILED;

	if (!q->run_on_error)
		return acquire_slot(args, HOLD_STATEMENT, id, hold);
	redsem_connect_timeout_ms = Max(connect_ms, redsem_connect_timeout_floor_ms);
	redsem_command_timeout_ms = Max(command_ms, redsem_command_timeout_floor_ms);
	PG_TRY();
	{
		result = acquire_slot(args, HOLD_STATEMENT, id, hold);
	}
	PG_FINALLY();
	{
		redsem_connect_timeout_ms = connect_ms;
		redsem_command_timeout_ms = command_ms;
	}
	PG_END_TRY();
	return result;
}

/*
 * acquire_with_server_timeouts, again (in the wait left) while the queue's
 * cap, which the statement stored again, goes again and the queue is still
 * defined: Redis forgot it once more.  ACQUIRE_CAP_GONE only once the
 * queue is no longer defined (dropped); 55P03 after QUEUE_CAP_GONE_TRIES.
 */
static AcquireResult
acquire_in_queue(const QueueDef *q, AcquireArgs *args, char **id, Hold **hold)
{
	TimestampTz started = redsem_now();

	for (int tries = 1;; tries++)
	{
		AcquireResult result = acquire_with_server_timeouts(q, args, id, hold);

		if (result != ACQUIRE_CAP_GONE || !queue_fleet_defines(q->name))
			return result;
		if (tries == QUEUE_CAP_GONE_TRIES)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg_plural("statement could not enter redsem queue \"%s\": its cap was removed from Redis %d time while it waited",
								   "statement could not enter redsem queue \"%s\": its cap was removed from Redis %d times while it waited",
								   tries, q->name, tries),
					 errdetail("Redis forgot the queue's semaphore again and again (restarts without persistence, or failovers that lose writes)."),
					 errhint("Retry the statement.")));
		if (q->max_wait_ms >= 0)
			args->wait_ms = Max(q->max_wait_ms -
								(int) TimestampDifferenceMilliseconds(started, redsem_now()), 0);
	}
}

/*
 * acquire_in_queue under the key prefix the queue definitions are read
 * under (queue_fleet_prefix), whatever the session's own: one cap for the
 * fleet, which redsem_alter_queue and redsem_drop_queue reach
 */
static AcquireResult
acquire_under_fleet_prefix(const QueueDef *q, AcquireArgs *args, char **id, Hold **hold)
{
	volatile AcquireResult result = ACQUIRE_FAILED;

	redsem_prefix_stand_in(queue_fleet_prefix());
	PG_TRY();
	{
		result = acquire_in_queue(q, args, id, hold);
	}
	PG_FINALLY();
	{
		redsem_prefix_stand_in(NULL);
	}
	PG_END_TRY();
	return result;
}

/*
 * Take a slot of queue q for the statement query (NULL: a utility).  A
 * session that already holds one (an open cursor) runs the statement under
 * it: it could never wait for its own slot.
 */
static void
enter_queue(const QueueDef *q, QueryDesc *query)
{
	AcquireArgs args;
	Hold	   *hold;
	char	   *id = NULL;
	AcquireResult result;
	ErrorContextCallback context;

	memset(&args, 0, sizeof(args));
	args.name = queue_semaphore(q);
	if (session_holds(args.name))
	{
		note_statement(query, args.name, NULL);
		return;
	}
	if (q->run_on_error && redsem_now() < unqueued_until)
	{
		run_unqueued(q, args.name, NULL);
		return;
	}
	/* the cap in Redis (redsem_set_limit), or the definition's if none */
	args.max_holders = 0;
	args.default_limit = q->active;
	args.permits = 1;
	args.priority = statement_priority(q);
	args.tenant = queue_session_tenant();
	args.lease_ms = QUEUE_LEASE_MS;
	args.wait_ms = q->max_wait_ms;
	args.elevel = q->run_on_error ? LOG : ERROR;
	args.wait_event = redsem_queue_wait_event();
	context.callback = queue_error_context;
	context.arg = unconstify(QueueDef *, q);
	context.previous = error_context_stack;
	error_context_stack = &context;
	result = acquire_under_fleet_prefix(q, &args, &id, &hold);
	error_context_stack = context.previous;
	if (result == ACQUIRE_FAILED)
	{
		run_unqueued(q, args.name, &args.failure);
		return;
	}
	if (result == ACQUIRE_CAP_GONE)
	{
		run_dropped(q, args.name);
		return;
	}
	if (result == ACQUIRE_NOT_GRANTED)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("statement could not enter redsem queue \"%s\" within %d ms",
						q->name, q->max_wait_ms),
				 args.grace_seen ? errdetail("%s", ACQUIRE_GRACE_DETAIL) :
				 errdetail("No slot came free for it within the wait (the queue's cap in effect: " INT64_FORMAT ").",
						   args.limit_seen),
				 errhint("Retry later; the queue's max_wait is part of its definition (redsem_alter_queue).")));
	note_statement(query, args.name, id);
}

/* Free an entry */
static void
free_statement(QueuedStatement *qs)
{
	pfree(qs->semaphore);
	if (qs->id)
		pfree(qs->id);
	pfree(qs);
}

/*
 * Hand the slot of qs to another statement of the session running under
 * it, if there is one; true if so.
 */
static bool
hand_over(QueuedStatement *qs)
{
	ListCell   *lc;

	foreach(lc, queued)
	{
		QueuedStatement *other = (QueuedStatement *) lfirst(lc);

		if (other->id == NULL && strcmp(other->semaphore, qs->semaphore) == 0)
		{
			other->id = qs->id;
			qs->id = NULL;
			return true;
		}
	}
	return false;
}

/* Give back the slot of statement query (NULL: the innermost utility) */
static void
leave_queue(QueryDesc *query)
{
	ListCell   *lc;

	foreach(lc, queued)
	{
		QueuedStatement *qs = (QueuedStatement *) lfirst(lc);

		if (qs->query != query)
			continue;
		queued = foreach_delete_current(queued, lc);
		if (qs->id != NULL && !hand_over(qs))
			hold_release_quietly(qs->semaphore, qs->id);
		free_statement(qs);
		return;
	}
}

/*
 * True if the plan's cost (its costliest node's, or a subplan's) is below
 * the queue's threshold, estimated with cost settings the role could not
 * lower (queue_cost.c): it passes (counted as bypassed if count)
 */
static bool
passes_by_cost(const QueueDef *q, const QueryDesc *query, bool count)
{
	PlannedStmt *stmt = query->plannedstmt;

	if (stmt == NULL || stmt->planTree == NULL ||
		queue_plan_max_cost(stmt) >= q->min_cost ||
		!queue_costs_trusted())
		return false;
	if (count)
		stats_count(NULL, q->semaphore, STAT_BYPASSED, 1);
	return true;
}

/*
 * True unless the statement's rows go into a new table (CREATE TABLE AS,
 * SELECT INTO, a materialized view): such a SELECT writes
 */
static bool
reads_only(const QueryDesc *query)
{
	CommandDest dest = query->dest ? query->dest->mydest : DestNone;

	return dest != DestIntoRel && dest != DestTransientRel;
}

/*
 * True if query is light (queue_light.c): it writes no new table, and its
 * plan is light.  own_functions: calls of redsem's own may be light (not
 * in a CALL or DO that has no slot yet, whose loop could repeat a light
 * call without bound: helper-139)
 */
static bool
is_light(const QueryDesc *query, bool own_functions)
{
	return reads_only(query) &&
		queue_statement_is_light(query->plannedstmt, own_functions);
}

/*
 * The key of the entry of a statement being planned (queue_planner): its
 * Query, which no QueryDesc shares an address with
 */
static QueryDesc *
planning_key(Query *parse)
{
	return (QueryDesc *) (void *) parse;
}

/* Add query to *list, kept in TopMemoryContext */
static void
remember_query(List **list, QueryDesc *query)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	*list = lappend(*list, query);
	MemoryContextSwitchTo(old);
}

/*
 * Judge statement query, top-level, of a session of queue q: light, under
 * min_cost, or it takes a slot
 */
static void
judge_top_level(const QueueDef *q, QueryDesc *query)
{
	if (is_light(query, true))
		remember_query(&light_running, query);
	else if (!passes_by_cost(q, query, true))
		enter_queue(q, query);
}

/*
 * A query nested in a CALL or DO that has no slot yet (lazy): if it
 * would queue as a top-level statement, the CALL or DO takes its slot now
 * (once: a statement that could not enter raised, and the next one tries
 * again; one run unqueued for a Redis failure ends the tries)
 */
static void
judge_in_lazy(QueryDesc *query)
{
	const QueueDef *q = session_queue_now();
	int			before = list_length(queued);

	if (q == NULL)
	{
		lazy = false;			/* (the session's queue is gone) */
		return;
	}
	if (is_light(query, false) || passes_by_cost(q, query, false))
		return;
	enter_queue(q, NULL);
	lazy = false;
	if (list_length(queued) > before)
	{
		lazy_entry = (QueuedStatement *) llast(queued);
		span_xacts(lazy_entry, true);
	}
}

/* ExecutorStart: a top-level statement of a queued session takes a slot */
static void
queue_executor_start(QueryDesc *query, int eflags)
{
	const QueueDef *q;

	/* (an entry left by an error in a subtransaction may have its address) */
	light_running = list_delete_ptr(light_running, query);
	nested_started = list_delete_ptr(nested_started, query);
	if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) == 0 && nesting > 0 && lazy)
		judge_in_lazy(query);
	if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) == 0 && nesting > 0 && session_queue_now() != NULL)
		remember_query(&nested_started, query);
	else if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) == 0 && (q = queue_to_use()) != NULL)
		judge_top_level(q, query);
	if (prev_executor_start)
		prev_executor_start(query, eflags);
	else
		standard_ExecutorStart(query, eflags);
}

/*
 * A statement started nested that runs now at the top level (a cursor a
 * function opened, fetched by a top-level FETCH, or filled WITH HOLD at
 * COMMIT): judged now as a top-level statement started now would be, once
 * (judge false: forgotten unjudged, as at the ExecutorFinish of a cursor
 * never fetched that COMMIT closes, which runs nothing of the user's)
 */
static void
judge_opened_nested(QueryDesc *query, bool judge)
{
	const QueueDef *q;

	if (nesting > 0 || !list_member_ptr(nested_started, query))
		return;
	nested_started = list_delete_ptr(nested_started, query);
	if (judge && (q = session_queue_now()) != NULL)
		judge_top_level(q, query);
}

/* 1 if what runs inside statement query is nested: 0 for a light one */
static int
nests_inside(const QueryDesc *query)
{
	return list_member_ptr(light_running, query) ? 0 : 1;
}

/* ExecutorRun: what runs inside is nested (but inside a light statement) */
static void
queue_executor_run(QueryDesc *query, ScanDirection direction, uint64 count
				   REDSEM_EXECUTE_ONCE_PARAM)
{
	volatile int nests;

	judge_opened_nested(query, true);
	/* (a cursor opened before, by an earlier DO, fetched inside this one) */
	if (lazy && nesting > 0 && list_member_ptr(nested_started, query))
		judge_in_lazy(query);
	nests = nests_inside(query);

	nesting += nests;
	PG_TRY();
	{
		if (prev_executor_run)
			prev_executor_run(query, direction, count REDSEM_EXECUTE_ONCE_ARG);
		else
			standard_ExecutorRun(query, direction, count REDSEM_EXECUTE_ONCE_ARG);
	}
	PG_FINALLY();
	{
		nesting -= nests;
	}
	PG_END_TRY();
}

/* ExecutorFinish: what runs inside (AFTER triggers) is nested */
static void
queue_executor_finish(QueryDesc *query)
{
	volatile int nests;

	judge_opened_nested(query, false);
	nests = nests_inside(query);

	nesting += nests;
	PG_TRY();
	{
		if (prev_executor_finish)
			prev_executor_finish(query);
		else
			standard_ExecutorFinish(query);
	}
	PG_FINALLY();
	{
		nesting -= nests;
	}
	PG_END_TRY();
}

/* ExecutorEnd: the statement is over; its slot goes back */
static void
queue_executor_end(QueryDesc *query)
{
	if (prev_executor_end)
		prev_executor_end(query);
	else
		standard_ExecutorEnd(query);
	light_running = list_delete_ptr(light_running, query);
	nested_started = list_delete_ptr(nested_started, query);
	if (queued != NIL)
		leave_queue(query);
}

/*
 * planner: what runs while a top-level statement is planned (a function
 * the planner evaluates ahead of time, or to estimate a selectivity) is
 * not nested: its queries are judged, and queued, as top-level statements
 * of their own, under the slot the planning holds if it holds one.  A
 * top-level statement that calls a function of the users the planner may
 * run takes a slot while it is planned: that function's own work (a loop)
 * is no query, and is over before the plan exists to be judged.  It gives
 * the slot back once planned, and its run is judged as any statement's (a
 * plan cache runs a copy of the plan, which nothing could tie to it).
 */
static PlannedStmt *
queue_planner(Query *parse, const char *query_string, int cursorOptions,
			  ParamListInfo boundParams)
{
	PlannedStmt *result;
	const QueueDef *q = queue_to_use();
	bool		slot = (q != NULL && queue_planning_runs_user_code(parse));

	/* (an error leaves the entry to the end of the transaction: forget_statements) */
	if (slot)
		enter_queue(q, planning_key(parse));

	/*
	 * a plan made with cost settings the role could lower (queue_cost.c), at
	 * any nesting and whatever the queue (min_cost, or a plan that would be
	 * light: queue_light.c): one made inside a DO block, a function or by
	 * EXPLAIN may be kept (PREPARE) and run at the top level later
	 */
	if (session_queue_now() != NULL)
		(void) queue_costs_trusted();
	if (prev_planner)
		result = prev_planner(parse, query_string, cursorOptions, boundParams);
	else
		result = standard_planner(parse, query_string, cursorOptions, boundParams);
	/* (again: a function the planner evaluated may have set one meanwhile) */
	if (session_queue_now() != NULL)
		(void) queue_costs_trusted();
	if (slot)
		leave_queue(planning_key(parse));
	return result;
}

/*
 * True for the utility statements that run exactly one query of the user's:
 * that query counts as top-level.
 */
static bool
runs_one_query(const Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_ExplainStmt:
		case T_ExecuteStmt:
		case T_DeclareCursorStmt:
		case T_FetchStmt:
		case T_CreateTableAsStmt:
		case T_RefreshMatViewStmt:
			return true;
		case T_CopyStmt:
			/* COPY (query) TO; COPY table TO/FROM is a utility of its own */
			return ((const CopyStmt *) stmt)->query != NULL;
		default:
			return false;
	}
}

/* True for the utility statements a queue with utility=on never holds up */
static bool
never_queued(const Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_TransactionStmt:
		case T_VariableSetStmt:
		case T_VariableShowStmt:
		case T_DiscardStmt:
		case T_ListenStmt:
		case T_NotifyStmt:
		case T_UnlistenStmt:
		case T_PrepareStmt:
		case T_DeallocateStmt:
		case T_ClosePortalStmt:
		case T_LoadStmt:
		case T_CheckPointStmt:
			return true;
		default:
			return runs_one_query(stmt);
	}
}

/* True for the statements whose procedure may COMMIT or ROLLBACK */
static bool
may_end_xacts(const Node *stmt)
{
	return IsA(stmt, CallStmt) || IsA(stmt, DoStmt);
}

/*
 * Keep (on) the slot of statement qs, a CALL or DO, across the
 * transactions its procedure ends, or stop keeping it (off): the slot is
 * the top-level statement's, not one transaction's.
 */
static void
span_xacts(QueuedStatement *qs, bool on)
{
	qs->spans_xacts = on;
	if (qs->id != NULL)
		hold_span_xacts(qs->semaphore, qs->id, on);
}

/*
 * ProcessUtility: a top-level utility statement queues in a queue with
 * utility=on; what runs inside a utility is nested, except the one query of
 * those in runs_one_query().
 */
static void
queue_process_utility(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	const QueueDef *q = NULL;
	volatile bool nests = !runs_one_query(stmt);
	volatile bool entered = false;
	volatile bool lazy_here = false;
	volatile bool lazy_took = false;
	QueuedStatement *volatile spanning = NULL;

	if (!never_queued(stmt) && (q = queue_to_use()) != NULL && q->utility)
	{
		enter_queue(q, NULL);
		entered = (queued != NIL && ((QueuedStatement *) llast(queued))->query == NULL);
		if (entered && may_end_xacts(stmt))
		{
			spanning = (QueuedStatement *) llast(queued);
			span_xacts(spanning, true);
		}
	}
	else if (q != NULL && may_end_xacts(stmt))
	{
		/* (its slot at its first query that would queue: judge_in_lazy) */
		lazy_here = true;
		lazy = true;
		lazy_entry = NULL;
	}
	if (nests)
		nesting++;
	PG_TRY();
	{
		redsem_next_utility(prev_process_utility, pstmt, queryString,
							readOnlyTree, context, params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		if (nests)
			nesting--;
		/* an error: the slot ends with the transaction that aborts */
		if (spanning != NULL)
			span_xacts(spanning, false);
		if (lazy_here)
		{
			lazy_took = (lazy_entry != NULL);
			if (lazy_took)
				span_xacts(lazy_entry, false);
			lazy = false;
			lazy_entry = NULL;
		}
	}
	PG_END_TRY();
	if (entered || lazy_took)
		leave_queue(NULL);
}

/*
 * Forget the statements of subtransaction subxid (all of them for
 * InvalidSubTransactionId), whose slots ended with it (hold.c) without
 * ExecutorEnd: an error, a cancel, a rollback.
 */
static void
forget_statements(SubTransactionId subxid)
{
	ListCell   *lc;

	foreach(lc, queued)
	{
		QueuedStatement *qs = (QueuedStatement *) lfirst(lc);

		if (subxid != InvalidSubTransactionId && qs->subxid != subxid)
			continue;
		if (qs->spans_xacts)
			continue;			/* its procedure committed: it goes on */
		queued = foreach_delete_current(queued, lc);
		/*
		 * (a cursor opened before the savepoint, its slot taken at a FETCH
		 * in it, is open still: judged again at its next top-level run; the
		 * address of a statement that ended is harmless there, never read)
		 */
		if (subxid != InvalidSubTransactionId && qs->query != NULL)
			remember_query(&nested_started, qs->query);
		free_statement(qs);
	}
}

/* At the end of a transaction, forget its statements */
static void
queue_xact_callback(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PREPARE && event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PARALLEL_ABORT)
		return;
	/* (a light statement's entry an error left behind: none runs now) */
	list_free(light_running);
	light_running = NIL;
	/* (a cursor opened nested ended with the transaction, or was filled) */
	list_free(nested_started);
	nested_started = NIL;
	if (queued != NIL)
		forget_statements(InvalidSubTransactionId);
}

/* At the rollback of a subtransaction, forget its statements */
static void
queue_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (queued == NIL)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		forget_statements(mySubid);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		foreach(lc, queued)
		{
			QueuedStatement *qs = (QueuedStatement *) lfirst(lc);

			if (qs->subxid == mySubid)
				qs->subxid = parentSubid;
		}
}

/* Install the hooks (from _PG_init, when preloading) */
void
queue_install_hooks(void)
{
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = queue_executor_start;
	prev_executor_run = ExecutorRun_hook;
	ExecutorRun_hook = queue_executor_run;
	prev_executor_finish = ExecutorFinish_hook;
	ExecutorFinish_hook = queue_executor_finish;
	prev_executor_end = ExecutorEnd_hook;
	ExecutorEnd_hook = queue_executor_end;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = queue_process_utility;
	prev_planner = planner_hook;
	planner_hook = queue_planner;
	RegisterXactCallback(queue_xact_callback, NULL);
	RegisterSubXactCallback(queue_subxact_callback, NULL);
}
