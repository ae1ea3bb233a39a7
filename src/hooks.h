/*
 * hooks.h
 *		Passing a utility statement on down PostgreSQL's hook chain, for the
 *		two modules that look at utility statements (hold.c: DISCARD ALL;
 *		queue.c: statement queues).
 */
#ifndef REDSEM_HOOKS_H
#define REDSEM_HOOKS_H

#include "tcop/utility.h"

/* Run the statement through prev, the hook installed before ours, if any */
static inline void
redsem_next_utility(ProcessUtility_hook_type prev, PlannedStmt *pstmt,
					const char *queryString, bool readOnlyTree,
					ProcessUtilityContext context, ParamListInfo params,
					QueryEnvironment *queryEnv, DestReceiver *dest,
					QueryCompletion *qc)
{
	if (prev)
		prev(pstmt, queryString, readOnlyTree, context, params, queryEnv,
			 dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

#endif							/* REDSEM_HOOKS_H */
