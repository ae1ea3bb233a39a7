/*
 * queue_light.h
 *		Statements that cannot be heavy never queue (queue_light.c).
 */
#ifndef REDSEM_QUEUE_LIGHT_H
#define REDSEM_QUEUE_LIGHT_H

#include "nodes/plannodes.h"

/*
 * The most a catalog-only statement's plan may cost and still count as
 * light: a psql \d on a database of some thousands of tables costs a few
 * hundred to a few thousand
 */
#define QUEUE_LIGHT_MAX_COST	10000.0

extern bool queue_statement_is_light(const PlannedStmt *stmt, bool own_functions);
extern bool queue_planning_runs_user_code(Query *parse);

#endif							/* REDSEM_QUEUE_LIGHT_H */
