/*
 * queue_light.c
 *		A statement that cannot be heavy never waits in a statement queue,
 *		nor for Redis: SELECT 1, SELECT now(), psql's \d and other reads of
 *		the system catalogs, whatever the queue's on_redis_error.  (SET,
 *		SHOW and transaction control are utility statements, which queue
 *		only with utility=on and never then: queue.c.)
 *
 * A plan is light when it only reads (a SELECT without FOR UPDATE or
 * data-modifying WITH), reads no relation but the system's own (OIDs below
 * FirstNormalObjectId: the catalogs, the system views), calls no function
 * but built-in ones (the planner records every other function it used in
 * invalItems), no volatile one (which may do more than compute a value:
 * pg_sleep, pg_advisory_lock, set_config; a set-returning function scanned
 * in FROM may be volatile itself, as pg_lock_status() is, but not its
 * arguments), and does not recurse (WITH RECURSIVE), scan a foreign or
 * custom source or parse a document (XMLTABLE).  Its rows then come from
 * the catalogs and from built-in functions whose rows the planner
 * estimates, and its estimated cost must be at most QUEUE_LIGHT_MAX_COST,
 * with cost settings the session could not lower (queue_cost.c); a plan of
 * one Result node with no subplan (SELECT 1, SELECT now()) needs no
 * estimate.  A cross join of catalogs or generate_series(1, 1e9) is not
 * light: its cost says so.  What light leaves open, and the README says:
 * a built-in set-returning function given a number the planner cannot see
 * (a subquery's) is estimated at 1000 rows, so a role may burn CPU outside
 * its queue that way, though never reading its tables.
 */
#include "postgres.h"

#include "access/transam.h"
#include "nodes/pg_list.h"
#include "optimizer/optimizer.h"
#include "utils/syscache.h"

#include "queue_cost.h"
#include "queue_light.h"

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

		if (rte->rtekind == RTE_RELATION && rte->relid >= FirstNormalObjectId)
			return false;
	}
	return true;
}

/* True if the plan calls no function but built-in ones */
static bool
builtin_functions_only(const List *items)
{
	ListCell   *lc;

	foreach(lc, items)
		if (((const PlanInvalItem *) lfirst(lc))->cacheId == PROCOID)
			return false;
	return true;
}

static bool plan_is_light(const Plan *plan);

/* True if every plan of the list is light */
static bool
plans_are_light(const List *plans)
{
	ListCell   *lc;

	foreach(lc, plans)
		if (!plan_is_light((const Plan *) lfirst(lc)))
			return false;
	return true;
}

/* True if expression (or list) node calls no volatile function */
static bool
stable_expr(const void *node)
{
	return !contain_volatile_functions((Node *) unconstify(void *, node));
}

/*
 * True if the output, conditions and node-specific expressions of plan
 * node call no volatile function (the indexes' own conditions cannot: a
 * volatile condition is never an index's)
 */
static bool
node_exprs_stable(const Plan *plan)
{
	if (!stable_expr(plan->targetlist) || !stable_expr(plan->qual))
		return false;
	switch (nodeTag(plan))
	{
		case T_Result:
			return stable_expr(((const Result *) plan)->resconstantqual);
		case T_NestLoop:
		case T_MergeJoin:
		case T_HashJoin:
			return stable_expr(((const Join *) plan)->joinqual);
		case T_ValuesScan:
			return stable_expr(((const ValuesScan *) plan)->values_lists);
		case T_Limit:
			return stable_expr(((const Limit *) plan)->limitOffset) &&
				stable_expr(((const Limit *) plan)->limitCount);
		default:
			return true;
	}
}

/*
 * True if the functions of a function scan (built-in ones: the planner
 * records the others) are given no volatile argument: their rows then
 * count in the plan's cost like a table's (generate_series(1, 1e9) is not
 * light, pg_lock_status() is)
 */
static bool
function_args_stable(const FunctionScan *scan)
{
	ListCell   *lc;

	foreach(lc, scan->functions)
	{
		const Node *expr = ((const RangeTblFunction *) lfirst(lc))->funcexpr;

		if (!IsA(expr, FuncExpr) || !stable_expr(((const FuncExpr *) expr)->args))
			return false;
	}
	return true;
}

/* True if no node of the plan tree is one a light plan cannot have (above) */
static bool
plan_is_light(const Plan *plan)
{
	if (plan == NULL)
		return true;
	if (!node_exprs_stable(plan))
		return false;
	switch (nodeTag(plan))
	{
		case T_FunctionScan:
			if (!function_args_stable((const FunctionScan *) plan))
				return false;
			break;
		case T_TableFuncScan:
		case T_RecursiveUnion:
		case T_WorkTableScan:
		case T_NamedTuplestoreScan:
		case T_ForeignScan:
		case T_CustomScan:
		case T_ModifyTable:
		case T_LockRows:
			return false;
		case T_Append:
			return plans_are_light(((const Append *) plan)->appendplans);
		case T_MergeAppend:
			return plans_are_light(((const MergeAppend *) plan)->mergeplans);
		case T_BitmapAnd:
			return plans_are_light(((const BitmapAnd *) plan)->bitmapplans);
		case T_BitmapOr:
			return plans_are_light(((const BitmapOr *) plan)->bitmapplans);
		case T_SubqueryScan:
			if (!plan_is_light(((const SubqueryScan *) plan)->subplan))
				return false;
			break;
		default:
			break;
	}
	return plan_is_light(plan->lefttree) && plan_is_light(plan->righttree);
}

/* Why statement stmt may be heavy (above), or NULL if it cannot be */
static const char *
heavy_because(const PlannedStmt *stmt)
{
	const Plan *top = stmt->planTree;

	if (stmt->commandType != CMD_SELECT || stmt->hasModifyingCTE ||
		stmt->rowMarks != NIL || top == NULL)
		return "it may write or lock rows";
	if (!system_relations_only(stmt->rtable))
		return "it reads a user's relation";
	if (!builtin_functions_only(stmt->invalItems))
		return "it calls a user's function";
	if (!plan_is_light(top) || !plans_are_light(stmt->subplans))
		return "it calls a volatile function, recurses, or scans what is not a table";
	/* a lone Result: expressions of built-in functions over no table */
	if (IsA(top, Result) && top->lefttree == NULL && stmt->subplans == NIL)
		return NULL;
	if (top->total_cost > QUEUE_LIGHT_MAX_COST)
		return "its estimated cost is above the bound of a light statement";
	if (!queue_costs_trusted())
		return "the session changed its cost settings";
	return NULL;
}

/* True if statement stmt cannot be heavy (above): it never queues */
bool
queue_statement_is_light(const PlannedStmt *stmt)
{
	const char *why = heavy_because(stmt);

	if (why != NULL)
		elog(DEBUG1, "redsem: statement queues: %s", why);
	return why == NULL;
}
