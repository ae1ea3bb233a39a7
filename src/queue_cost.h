/*
 * queue_cost.h
 *		Whether a statement's planned cost can be trusted for a statement
 *		queue's min_cost, and the walk of its plan that reads it
 *		(queue_cost.c).
 */
#ifndef REDSEM_QUEUE_COST_H
#define REDSEM_QUEUE_COST_H

#include "nodes/plannodes.h"

/* Looks at one plan node (queue_plan_walk); false stops the walk */
typedef bool (*QueuePlanVisit) (const Plan *plan, void *arg);

extern bool queue_costs_trusted(void);
extern bool queue_plan_walk(const PlannedStmt *stmt, QueuePlanVisit visit, void *arg);
extern Cost queue_plan_max_cost(const PlannedStmt *stmt);

#endif							/* REDSEM_QUEUE_COST_H */
