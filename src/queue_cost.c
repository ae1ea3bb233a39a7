/*
 * queue_cost.c
 *		A statement queue's min_cost lets cheap statements pass unqueued, by
 *		the cost the planner estimated.  The planner's cost settings are
 *		ordinary ones: a role that may lower them (SET cpu_tuple_cost = 0)
 *		would make any statement look cheap and pass.  So the cost counts
 *		only while every setting the estimate depends on comes from where
 *		the role cannot write: the server's files and command line,
 *		ALTER SYSTEM, ALTER ROLE ALL, or ALTER DATABASE of a database the
 *		role does not own.  A value the session set (SET, a function's SET,
 *		its connection's options) or the role set for itself (ALTER ROLE
 *		... SET, which an ordinary role may do for itself), seen when a
 *		statement is planned or starts, makes every statement of the session
 *		from then on count as costly: it is queued (a plan made then may be
 *		kept, by PREPARE or the plan cache, after the setting is reset).
 *		The server log says so once per session, naming the settings.
 *
 *		A plan is looked at after it is made too: a function the planner
 *		evaluates (to fold a constant, or to estimate a selectivity) may set
 *		a cost setting while the plan is made.  It may also reset it before
 *		the plan is done (RESET, or set_config with a null value, which give
 *		the setting its trusted source back), so a cost setting changed in
 *		the transaction at all (SET, RESET, set_config: each leaves the value
 *		it replaced on the setting's stack until the transaction ends) counts
 *		as one the session set.
 */
#include "postgres.h"

#include "catalog/pg_database.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/syscache.h"

#include "compat.h"
#include "queue_cost.h"

/*
 * The settings a plan's total cost depends on and a role may set: the
 * unit costs, the parallel plan's, the memory a sort or hash may assume,
 * how a cached plan is chosen, and the two enable_* that are off by default
 * (turned on, they let the planner find a cheaper plan over partitions; the
 * others, on by default, can only be turned off, which only ever makes the
 * chosen plan costlier).  Per-tablespace and per-table settings need
 * ownership.
 */
static const char *const cost_settings[] = {
	"seq_page_cost", "random_page_cost", "cpu_tuple_cost",
	"cpu_index_tuple_cost", "cpu_operator_cost", "parallel_setup_cost",
	"parallel_tuple_cost", "min_parallel_table_scan_size",
	"min_parallel_index_scan_size", "max_parallel_workers_per_gather",
	"parallel_leader_participation", "effective_cache_size", "work_mem",
	"hash_mem_multiplier", "recursive_worktable_factor", "plan_cache_mode",
	"cursor_tuple_fraction", "enable_partitionwise_join",
	"enable_partitionwise_aggregate",
};

#define N_COST_SETTINGS lengthof(cost_settings)

/* Per backend: each setting's record, once looked up */
static struct config_generic *records[N_COST_SETTINGS];
/*
 * Per backend: a plan was made, or a statement ran, with a cost setting
 * the role could have lowered: from then on the session's statements count
 * as costly (a plan kept by PREPARE or the plan cache may still be the
 * cheap one), and the server log said so
 */
static bool untrusted_seen = false;

/*
 * True if the current or the session user could act as the current
 * database's owner (and so ALTER DATABASE SET): a member of its role,
 * inheriting or not (a NOINHERIT member can SET ROLE to it first)
 */
static bool
may_act_as_database_owner(void)
{
	HeapTuple	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		return true;
	owner = ((Form_pg_database) GETSTRUCT(tuple))->datdba;
	ReleaseSysCache(tuple);
	return is_member_of_role(GetUserId(), owner) ||
		is_member_of_role(GetSessionUserId(), owner);
}

/* True if a value from source may have been set by the role itself */
static bool
untrusted_source(GucSource source)
{
	if (source <= PGC_S_GLOBAL)
		return false;
	if (source == PGC_S_DATABASE)
		return may_act_as_database_owner();
	return true;
}

/*
 * True if a setting's value may have been set by the role itself, or was
 * changed in this transaction (and perhaps reset since)
 */
static bool
untrusted_setting(const struct config_generic *record)
{
	return record->stack != NULL || untrusted_source(record->source);
}

/* Say once, in the server log, which settings made the session's statements costly */
static void
report_untrusted(void)
{
	StringInfoData names;

	initStringInfo(&names);
	for (int i = 0; i < (int) N_COST_SETTINGS; i++)
		if (records[i] != NULL && untrusted_setting(records[i]))
			appendStringInfo(&names, "%s%s (%s)", names.len > 0 ? ", " : "",
							 cost_settings[i],
							 untrusted_source(records[i]->source) ?
							 GucSource_Names[records[i]->source] :
							 "changed in this transaction");
	ereport(LOG,
			(errmsg("redsem: statements of this session count as costly for statement queues from now on"),
			 errdetail("These planner settings come from the session or the role, which could lower a statement's estimated cost: %s.",
					   names.data),
			 errhint("Set the planner's cost settings of queued roles in the server's configuration or with ALTER DATABASE.")));
	pfree(names.data);
}

/*
 * True while no plan or statement of this session saw a cost setting from
 * where the role can write (called when a statement of a queue with
 * min_cost is planned, before and after, or starts, and for a catalog
 * read that may be light: queue_light.c)
 */
bool
queue_costs_trusted(void)
{
	if (untrusted_seen)
		return false;
	for (int i = 0; i < (int) N_COST_SETTINGS; i++)
	{
		if (records[i] == NULL)
			records[i] = redsem_find_setting(cost_settings[i]);
		if (records[i] != NULL && untrusted_setting(records[i]))
		{
			untrusted_seen = true;
			report_untrusted();
			return false;
		}
	}
	return true;
}

static bool walk_plan(const Plan *plan, QueuePlanVisit visit, void *arg);

/* Walk each plan of a list (walk_plan); false if a visit stopped it */
static bool
walk_plans(const List *plans, QueuePlanVisit visit, void *arg)
{
	ListCell   *lc;

	foreach(lc, plans)
		if (!walk_plan((const Plan *) lfirst(lc), visit, arg))
			return false;
	return true;
}

/*
 * Visit every node of a plan tree, each before its children: the left and
 * right trees, and the plans a node holds in a list or field of its own
 */
static bool
walk_plan(const Plan *plan, QueuePlanVisit visit, void *arg)
{
	if (plan == NULL)
		return true;
	if (!visit(plan, arg) ||
		!walk_plan(plan->lefttree, visit, arg) ||
		!walk_plan(plan->righttree, visit, arg))
		return false;
	switch (nodeTag(plan))
	{
		case T_Append:
			return walk_plans(((const Append *) plan)->appendplans, visit, arg);
		case T_MergeAppend:
			return walk_plans(((const MergeAppend *) plan)->mergeplans, visit, arg);
		case T_SubqueryScan:
			return walk_plan(((const SubqueryScan *) plan)->subplan, visit, arg);
		case T_BitmapAnd:
			return walk_plans(((const BitmapAnd *) plan)->bitmapplans, visit, arg);
		case T_BitmapOr:
			return walk_plans(((const BitmapOr *) plan)->bitmapplans, visit, arg);
		case T_CustomScan:
			return walk_plans(((const CustomScan *) plan)->custom_plans, visit, arg);
		default:
			return true;
	}
}

/*
 * Visit every node of statement stmt's plan and of its subplans (those of
 * its SubPlan expressions, EXISTS and the like); false if a visit stopped
 * the walk
 */
bool
queue_plan_walk(const PlannedStmt *stmt, QueuePlanVisit visit, void *arg)
{
	return walk_plan(stmt->planTree, visit, arg) &&
		walk_plans(stmt->subplans, visit, arg);
}

/* Note a node's total cost if it is the highest seen (a QueuePlanVisit) */
static bool
note_max_cost(const Plan *plan, void *arg)
{
	Cost	   *max = (Cost *) arg;

	*max = Max(*max, plan->total_cost);
	return true;
}

/*
 * The highest total cost of a node of statement stmt's plan or subplans,
 * for a queue's min_cost: a LIMIT or EXISTS costs its rows only, and would
 * hide a costly join beneath it
 */
Cost
queue_plan_max_cost(const PlannedStmt *stmt)
{
	Cost		max = 0;

	(void) queue_plan_walk(stmt, note_max_cost, &max);
	return max;
}
