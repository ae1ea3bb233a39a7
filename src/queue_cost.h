/*
 * queue_cost.h
 *		Whether a statement's planned cost can be trusted for a statement
 *		queue's min_cost (queue_cost.c).
 */
#ifndef REDSEM_QUEUE_COST_H
#define REDSEM_QUEUE_COST_H

extern bool queue_costs_trusted(void);

#endif							/* REDSEM_QUEUE_COST_H */
