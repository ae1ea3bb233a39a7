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
 *		... SET, which an ordinary role may do for itself) makes every
 *		statement of the session count as costly: it is queued.  The server
 *		log says so once per setting and session.
 */
#include "postgres.h"

#include "compat.h"
#include "queue_cost.h"

/*
 * The settings a plan's total cost depends on and a role may set: the
 * unit costs, the parallel plan's, the memory a sort or hash may assume,
 * and how a cached plan is chosen.  (enable_* only ever make the chosen
 * plan costlier; per-tablespace and per-table settings need ownership.)
 */
static const char *const cost_settings[] = {
	"seq_page_cost", "random_page_cost", "cpu_tuple_cost",
	"cpu_index_tuple_cost", "cpu_operator_cost", "parallel_setup_cost",
	"parallel_tuple_cost", "min_parallel_table_scan_size",
	"min_parallel_index_scan_size", "max_parallel_workers_per_gather",
	"parallel_leader_participation", "effective_cache_size", "work_mem",
	"hash_mem_multiplier", "recursive_worktable_factor", "plan_cache_mode",
	"cursor_tuple_fraction",
};

#define N_COST_SETTINGS lengthof(cost_settings)

/* Per backend: each setting's record, once looked up */
static struct config_generic *records[N_COST_SETTINGS];
/* Per backend: the settings already reported in the server log */
static bool reported[N_COST_SETTINGS];

/* True if a value from source may have been set by the role itself */
static bool
untrusted_source(GucSource source)
{
	if (source <= PGC_S_GLOBAL)
		return false;
	if (source == PGC_S_DATABASE)
		return redsem_owns_database();
	return true;
}

/* True if no cost setting of this session comes from where the role can write */
bool
queue_costs_trusted(void)
{
	bool		trusted = true;

	for (int i = 0; i < (int) N_COST_SETTINGS; i++)
	{
		if (records[i] == NULL)
			records[i] = redsem_find_setting(cost_settings[i]);
		if (records[i] == NULL || !untrusted_source(records[i]->source))
			continue;
		trusted = false;
		if (!reported[i])
		{
			reported[i] = true;
			ereport(LOG,
					(errmsg("redsem: statements of this session count as costly for statement queues' min_cost"),
					 errdetail("Setting \"%s\" comes from the session or the role (%s), which could lower a statement's estimated cost.",
							   cost_settings[i], GucSource_Names[records[i]->source]),
					 errhint("Set the planner's cost settings of queued roles in the server's configuration or with ALTER DATABASE.")));
		}
	}
	return trusted;
}
