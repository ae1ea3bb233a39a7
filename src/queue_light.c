/*
 * queue_light.c
 *		A statement that cannot be heavy never waits in a statement queue,
 *		nor for Redis: SELECT 1, SELECT now(), psql's \d and other reads of
 *		the system catalogs, whatever the queue's on_redis_error.  (SET,
 *		SHOW and transaction control are utility statements, which queue
 *		only with utility=on and never then: queue.c.)
 *
 * Light is decided by denying by default.  A plan is light when:
 * - it only reads: a SELECT without FOR UPDATE or data-modifying WITH (and,
 *   queue.c, not the query of CREATE TABLE AS, SELECT INTO or a
 *   materialized view);
 * - its range table holds no relation of the users (OIDs below
 *   FirstNormalObjectId only: the catalogs and the system's views);
 * - it calls no function of the users (the planner records each in
 *   invalItems);
 * - each of its nodes is of a kind listed in node_is_light(), whose
 *   expressions are all looked at: no WITH RECURSIVE, TABLESAMPLE, foreign
 *   or custom scan, XMLTABLE, and no Gather (a parallel worker is in no
 *   queue, so SQL run inside it, below, would never queue);
 * - no expression calls a volatile function (it may do more than compute a
 *   value: pg_sleep, pg_advisory_lock, set_config, nextval), but those
 *   that only list the server's state or catalogs (view_functions:
 *   pg_lock_status), a built-in that runs SQL or reads data by name
 *   (query_to_xml and the other *_to_xml, ts_stat, ts_rewrite, large
 *   objects, files: heavy_builtin()), or casts to a domain of the users
 *   (its CHECK may call anything);
 * - the costliest node of the plan and of its subplans costs at most
 *   QUEUE_LIGHT_MAX_COST, with cost settings the session could not lower
 *   (queue_cost.c): a LIMIT does not hide a cross join beneath it.  A plan
 *   of one Result node with no subplan (SELECT 1, SELECT now()) needs no
 *   estimate.
 * What it leaves open (the README says so): built-in functions given
 * large values can still burn CPU or memory (repeat('x', 100000000), a
 * set-returning function given a number the planner cannot see), though
 * never reading the users' data, and quals written to mislead the
 * planner's row estimates.  A light statement holds no slot, so SQL run
 * inside it (a domain's CHECK reached through array_in) is judged as a
 * top-level statement of its own (queue.c).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "commands/extension.h"
#include "nodes/nodeFuncs.h"
#include "nodes/pg_list.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "bounds.h"
#include "queue_cost.h"
#include "queue_light.h"

/* The end of a name, and whether it must be the whole name */
typedef struct NamePattern
{
	const char *text;
	enum
	{
		WHOLE, PREFIX, SUFFIX
	}			how;
} NamePattern;

/* Built-in functions that run SQL or read data by name: never light */
static const NamePattern heavy_names[] = {
	{"_to_xml", SUFFIX}, {"_to_xmlschema", SUFFIX}, {"_to_xml_and_xmlschema", SUFFIX},
	{"ts_stat", WHOLE}, {"ts_rewrite", WHOLE},
	{"lo_", PREFIX}, {"loread", WHOLE}, {"lowrite", WHOLE},
	{"pg_read_", PREFIX}, {"pg_ls_", PREFIX}, {"pg_stat_file", WHOLE},
	{"currtid", PREFIX},
};

/*
 * The volatile functions that only list the server's own state or
 * catalogs (the system views scan them; psql's \d calls
 * pg_partition_ancestors; redsem_activity, pg_blocking_pids): light
 */
static const char *const view_functions[] = {
	"pg_lock_status", "pg_get_backend_memory_contexts", "pg_get_shmem_allocations",
	"pg_hba_file_rules", "pg_ident_file_mappings", "pg_prepared_xact",
	"pg_show_all_file_settings", "pg_show_replication_origin_status",
	"pg_stat_get_recovery_prefetch", "pg_stat_get_activity", "pg_cursor",
	"pg_prepared_statement", "pg_get_replication_slots", "pg_stat_get_wal_senders",
	"pg_stat_get_wal_receiver", "pg_stat_get_subscription", "pg_stat_get_progress_info",
	"pg_timezone_names", "pg_timezone_abbrevs", "pg_show_all_settings", "pg_get_wait_events",
	"pg_available_extensions", "pg_available_extension_versions", "pg_config",
	"pg_stat_get_slru", "pg_stat_get_io", "pg_get_keywords",
	"pg_partition_ancestors", "pg_partition_tree",
	"pg_blocking_pids", "pg_safe_snapshot_blocking_pids",
};

/*
 * Volatile built-ins that only signal other processes: light, so that an
 * administrator in a session the queue governs can cancel a full queue's
 * blocker, or reload a setting, without waiting behind it (helper-136)
 */
static const char *const signal_functions[] = {
	"pg_cancel_backend", "pg_terminate_backend", "pg_reload_conf",
};

/*
 * redsem's own functions a light statement may call, by C symbol: they
 * look at or change redsem's state (Redis, this server's shared memory),
 * run no SQL and read no data of the users, so that an administrator in a
 * session the queue governs can look at a full queue, change its cap and
 * free its slots (helper-136: each waited behind the queue and failed
 * with 55P03).  Taking a slot (redsem_acquire, redsem_acquire_xact,
 * redsem_guard) is not light: it may wait.
 */
static const char *const own_light_functions[] = {
	"redsem_release", "redsem_refresh", "redsem_release_all", "redsem_force_release",
	"redsem_set_limit", "redsem_limit", "redsem_set_adaptive_limit", "redsem_adaptive_limit",
	"redsem_set_rate", "redsem_rate", "redsem_set_reserve", "redsem_reserve",
	"redsem_set_tenant_weight", "redsem_tenants", "redsem_semaphore", "redsem_held",
	"redsem_holders", "redsem_token", "redsem_keeper_active", "redsem_stats",
	"redsem_stats_reset", "redsem_queues", "redsem_create_queue", "redsem_alter_queue",
	"redsem_drop_queue", "redsem_queue_servers", "redsem_server_holds", "redsem_semaphores",
};

/* The process hash values (PlanInvalItem) of redsem's functions a plan calls */
#define MAX_OWN_CALLED 32
static uint32 own_called[MAX_OWN_CALLED];
static int	n_own_called;

/*
 * While the expressions looked at run once per statement, so that a call
 * of redsem's there is one call: the top node's, when it is a lone Result
 * (SELECT redsem_limit('x')), and the functions of a FunctionScan that no
 * parameter changes (FROM redsem_holders('x'): a rescan reads its stored
 * rows again).  Anywhere else a call of redsem's runs once per row, and
 * rows a set-returning function makes in numbers the planner cannot see
 * (generate_series(1, (SELECT 30000))) would call Redis without bound
 * beside the queue (helper-138): heavy.
 */
static bool own_allowed;
static const Plan *judged_top;
static bool own_light_ok;		/* the caller allows them at all */

/* True if name is one of the count strings of list */
static bool
name_in(const char *name, const char *const *list, int count)
{
	for (int i = 0; i < count; i++)
		if (strcmp(name, list[i]) == 0)
			return true;
	return false;
}

/* True if name matches pattern p */
static bool
name_matches(const char *name, const NamePattern *p)
{
	size_t		n = strlen(name),
				k = strlen(p->text);

	switch (p->how)
	{
		case WHOLE:
			return strcmp(name, p->text) == 0;
		case PREFIX:
			return strncmp(name, p->text, k) == 0;
		case SUFFIX:
			return n >= k && strcmp(name + n - k, p->text) == 0;
	}
	return false;
}

/* True if built-in function funcid runs SQL or reads data by name */
static bool
heavy_builtin(Oid funcid)
{
	char	   *name = get_func_name(funcid);
	bool		heavy = false;

	if (name == NULL)
		return true;
	for (int i = 0; i < (int) lengthof(heavy_names) && !heavy; i++)
		heavy = name_matches(name, &heavy_names[i]);
	pfree(name);
	return heavy;
}

/* True if built-in funcid's name is one of the count strings of list */
static bool
named_in(Oid funcid, const char *const *list, int count)
{
	char	   *name = get_func_name(funcid);
	bool		found = name != NULL && name_in(name, list, count);

	if (name != NULL)
		pfree(name);
	return found;
}

/*
 * True if funcid is one of redsem's light functions (above): a C function
 * of the extension (only a superuser can add one to it), by its symbol,
 * whatever its SQL name or schema
 */
static bool
own_light_function(Oid funcid)
{
	Oid			redsem = get_extension_oid(REDSEM_EXTENSION_NAME, true);
	HeapTuple	tuple;
	bool		own = false;
	Datum		d;
	bool		isnull;

	if (!OidIsValid(redsem) || getExtensionOfObject(ProcedureRelationId, funcid) != redsem)
		return false;
	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	if (!HeapTupleIsValid(tuple))
		return false;
	if (((Form_pg_proc) GETSTRUCT(tuple))->prolang == ClanguageId)
	{
		d = SysCacheGetAttr(PROCOID, tuple, Anum_pg_proc_prosrc, &isnull);
		own = !isnull && name_in(TextDatumGetCString(d), own_light_functions,
								 lengthof(own_light_functions));
	}
	ReleaseSysCache(tuple);
	return own;
}

/*
 * True if function funcid is one a light statement may not call (one of
 * redsem's light ones is noted, for builtin_or_own_functions_only).
 * context: non-NULL for a plain call (a FuncExpr), the only form in which
 * redsem's may be light: an operator over one, in ANY over an array, runs
 * once per element (helper-139).
 */
static bool
heavy_function(Oid funcid, void *context)
{
	if (funcid >= FirstNormalObjectId)
	{
		if (context == NULL || !own_light_ok || !own_allowed ||
			n_own_called == MAX_OWN_CALLED || !own_light_function(funcid))
			return true;
		own_called[n_own_called++] = GetSysCacheHashValue1(PROCOID, ObjectIdGetDatum(funcid));
		return false;
	}
	return heavy_builtin(funcid) ||
		(func_volatile(funcid) == PROVOLATILE_VOLATILE &&
		 !named_in(funcid, view_functions, lengthof(view_functions)) &&
		 !named_in(funcid, signal_functions, lengthof(signal_functions)));
}

/* True if expression (or list) node may be heavy (above) */
static bool
heavy_expr_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, FuncExpr) ?
		heavy_function(((FuncExpr *) node)->funcid, (void *) node) :
		check_functions_in_node(node, heavy_function, NULL))
		return true;
	if (IsA(node, CoerceToDomain) &&
		((CoerceToDomain *) node)->resulttype >= FirstNormalObjectId)
		return true;
	if (IsA(node, NextValueExpr))
		return true;
	return expression_tree_walker(node, heavy_expr_walker, context);
}

/* True if expression (or list) node cannot be heavy */
static bool
light_expr(const void *node)
{
	return !heavy_expr_walker((Node *) unconstify(void *, node), NULL);
}

/*
 * True if plan node's own expressions (beyond its output and filter)
 * cannot be heavy, for the kinds of node a light plan may have; false for
 * any other kind
 */
static bool
node_is_light(const Plan *plan)
{
	switch (nodeTag(plan))
	{
		case T_Result:
			return light_expr(((const Result *) plan)->resconstantqual);
		case T_SeqScan:
		case T_CteScan:
		case T_Material:
		case T_Sort:
		case T_IncrementalSort:
		case T_Group:
		case T_Agg:
		case T_Unique:
		case T_SetOp:
		case T_ProjectSet:
			return true;
		case T_IndexScan:
			return light_expr(((const IndexScan *) plan)->indexqualorig) &&
				light_expr(((const IndexScan *) plan)->indexorderbyorig);
		case T_IndexOnlyScan:
			return light_expr(((const IndexOnlyScan *) plan)->indexqual) &&
				light_expr(((const IndexOnlyScan *) plan)->indexorderby);
		case T_BitmapIndexScan:
			return light_expr(((const BitmapIndexScan *) plan)->indexqualorig);
		case T_BitmapHeapScan:
			return light_expr(((const BitmapHeapScan *) plan)->bitmapqualorig);
		case T_TidScan:
			return light_expr(((const TidScan *) plan)->tidquals);
		case T_TidRangeScan:
			return light_expr(((const TidRangeScan *) plan)->tidrangequals);
		case T_SubqueryScan:
		case T_Append:
		case T_MergeAppend:
		case T_BitmapAnd:
		case T_BitmapOr:
			/* (their plans: queue_plan_walk) */
			return true;
		case T_FunctionScan:
			/* (its functions in FROM: heavy_function, as everywhere) */
			return light_expr(((const FunctionScan *) plan)->functions);
		case T_ValuesScan:
			return light_expr(((const ValuesScan *) plan)->values_lists);
		case T_NestLoop:
			return light_expr(((const Join *) plan)->joinqual);
		case T_MergeJoin:
			return light_expr(((const Join *) plan)->joinqual) &&
				light_expr(((const MergeJoin *) plan)->mergeclauses);
		case T_HashJoin:
			return light_expr(((const Join *) plan)->joinqual) &&
				light_expr(((const HashJoin *) plan)->hashclauses);
		case T_Hash:
			return light_expr(((const Hash *) plan)->hashkeys);
		case T_Memoize:
			return light_expr(((const Memoize *) plan)->param_exprs);
		case T_WindowAgg:
			return light_expr(((const WindowAgg *) plan)->startOffset) &&
				light_expr(((const WindowAgg *) plan)->endOffset) &&
				light_expr(((const WindowAgg *) plan)->runCondition);
		case T_Limit:
			return light_expr(((const Limit *) plan)->limitOffset) &&
				light_expr(((const Limit *) plan)->limitCount);
		default:
			return false;
	}
}

/*
 * True if plan node cannot be heavy (above), for queue_plan_walk; notes the
 * costliest node seen in arg (a Cost)
 */
static bool
light_node(const Plan *plan, void *arg)
{
	Cost	   *max_cost = (Cost *) arg;
	bool		light;

	*max_cost = Max(*max_cost, plan->total_cost);
	own_allowed = (plan == judged_top && IsA(plan, Result) && plan->lefttree == NULL);
	light = light_expr(plan->targetlist) && light_expr(plan->qual);
	if (IsA(plan, FunctionScan))
		own_allowed = bms_is_empty(plan->extParam);
	light = light && node_is_light(plan);
	own_allowed = false;
	return light;
}

/*
 * True if relid is one of redsem's views (redsem_stats, redsem_queues,
 * redsem_activity: over redsem's light functions and the system's views),
 * which PostgreSQL 15 keeps in the range table for its permission checks
 */
static bool
own_view(Oid relid)
{
	Oid			redsem = get_extension_oid(REDSEM_EXTENSION_NAME, true);

	return get_rel_relkind(relid) == RELKIND_VIEW && OidIsValid(redsem) &&
		getExtensionOfObject(RelationRelationId, relid) == redsem;
}

/*
 * True if no relation the plan reads is a user's (its range table's: the
 * plan's relationOids also hold every OID constant, such as psql's
 * "WHERE c.oid = '16424'")
 */
static bool
system_relations_only(const List *rtable)
{
	ListCell   *lc;

	foreach(lc, rtable)
	{
		const RangeTblEntry *rte = (const RangeTblEntry *) lfirst(lc);

		if (rte->rtekind == RTE_RELATION && rte->relid >= FirstNormalObjectId &&
			!own_view(rte->relid))
			return false;
	}
	return true;
}

/*
 * True if the plan calls no function but built-in ones and redsem's light
 * ones its expressions showed (the planner records each function of the
 * users in invalItems, also one it inlined, which no expression shows)
 */
static bool
builtin_or_own_functions_only(const List *items)
{
	ListCell   *lc;

	foreach(lc, items)
	{
		const PlanInvalItem *item = (const PlanInvalItem *) lfirst(lc);
		bool		seen = false;

		if (item->cacheId != PROCOID)
			continue;
		for (int i = 0; i < n_own_called && !seen; i++)
			seen = own_called[i] == item->hashValue;
		if (!seen)
			return false;
	}
	return true;
}

/* Why statement stmt may be heavy (above), or NULL if it cannot be */
static const char *
heavy_because(const PlannedStmt *stmt)
{
	const Plan *top = stmt->planTree;
	Cost		max_cost = 0;

	if (stmt->commandType != CMD_SELECT || stmt->hasModifyingCTE ||
		stmt->rowMarks != NIL || top == NULL)
		return "it may write or lock rows";
	/* (a parallel worker is in no queue: SQL run inside it would not queue) */
	if (stmt->parallelModeNeeded)
		return "it runs in parallel workers";
	if (!system_relations_only(stmt->rtable))
		return "it reads a user's relation";
	n_own_called = 0;
	judged_top = top;
	if (!queue_plan_walk(stmt, light_node, &max_cost))
		return "it calls a volatile function, a user's or one that reads data, or has a plan node that may be heavy";
	if (!builtin_or_own_functions_only(stmt->invalItems))
		return "it calls a user's function";
	/* a lone Result: expressions of built-in functions over no table */
	if (IsA(top, Result) && top->lefttree == NULL && stmt->subplans == NIL)
		return NULL;
	if (max_cost > QUEUE_LIGHT_MAX_COST)
		return "its estimated cost is above the bound of a light statement";
	if (!queue_costs_trusted())
		return "the session changed its cost settings";
	return NULL;
}

/*
 * True if statement stmt cannot be heavy (above): it never queues.
 * own_functions: calls of redsem's own may be light.
 */
bool
queue_statement_is_light(const PlannedStmt *stmt, bool own_functions)
{
	const char *why;

	own_light_ok = own_functions;
	why = heavy_because(stmt);

	if (why != NULL)
		elog(DEBUG1, "redsem: statement queues: %s", why);
	return why == NULL;
}

/*
 * True if function funcid is one of the users' whose body the planner may
 * run while it plans: not volatile (an immutable one is folded when its
 * arguments are constants, a stable one evaluated to estimate a
 * selectivity), in a language a role may write in (C and internal ones
 * come from superusers)
 */
static bool
planner_may_run(Oid funcid, void *context)
{
	HeapTuple	tuple;
	Form_pg_proc proc;
	bool		may;

	if (funcid < FirstNormalObjectId)
		return false;
	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	if (!HeapTupleIsValid(tuple))
		return true;
	proc = (Form_pg_proc) GETSTRUCT(tuple);
	may = proc->provolatile != PROVOLATILE_VOLATILE &&
		proc->prolang != ClanguageId && proc->prolang != INTERNALlanguageId;
	ReleaseSysCache(tuple);
	return may;
}

/* True if node (a query, an expression or a list) calls such a function */
static bool
planner_may_run_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, planner_may_run_walker, context, 0);
	if (check_functions_in_node(node, planner_may_run, context))
		return true;
	return expression_tree_walker(node, planner_may_run_walker, context);
}

/*
 * True if planning the query may run code of the users: a PL/pgSQL loop
 * in an immutable function called with constants runs to its end before
 * the plan exists, so before the plan could be judged (queue.c takes a
 * slot for the planning then)
 */
bool
queue_planning_runs_user_code(Query *parse)
{
	return planner_may_run_walker((Node *) parse, NULL);
}
