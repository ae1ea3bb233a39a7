/*
 * broker_cluster.h
 *		Redis Cluster routing inside the broker (broker_cluster.c): which
 *		node each command of a backend's link goes to.
 */
#ifndef REDSEM_BROKER_CLUSTER_H
#define REDSEM_BROKER_CLUSTER_H

#include "broker_state.h"
#include "cluster.h"

/* A node a cluster map knows, by address, and its target once routed to */
typedef struct MapNode
{
	char		host[CLUSTER_HOST_MAX];
	int			port;
	int			target;			/* -1: none yet (or ended since) */
} MapNode;

/*
 * What the broker knows of one cluster, for the links that name one seed
 * with one profile (the seed's target holds it): which node serves each
 * slot, learnt from the MOVED replies it passes on
 */
typedef struct ClusterMap
{
	int8		slot[CLUSTER_SLOTS];	/* an index in nodes, -1: not known */
	uint64		changed[CLUSTER_SLOTS]; /* the change that last moved it, 0: none */
	MapNode		nodes[CLUSTER_MAX_NODES];	/* nodes[0]: the seed */
	int			n_nodes;
	int			fallback;		/* where commands for unknown slots go */
	uint64		changes;		/* changes so far (a slot moved or forgotten,
								 * its node's last connection closed) */
} ClusterMap;

/* What to do with a client's next request (broker_cluster_route) */
typedef enum ClusterStep
{
	CLUSTER_GO,					/* send it, on c->target (set) */
	CLUSTER_HOLD,				/* wait until its owed replies are back */
	CLUSTER_ANSWERED			/* answered here (a route change): drop it */
} ClusterStep;

extern void broker_cluster_bind(Client *c);
extern ClusterStep broker_cluster_route(Client *c);
extern void broker_cluster_reply(Client *c, const redisReply *reply, bool sees);
extern void broker_cluster_pending(Client *c, const redisReply *cmd, Pending *p);
extern void broker_cluster_served(Client *c, int t, const Pending *p,
								  const redisReply *reply);
extern void broker_cluster_node_failed(int t);
extern void broker_cluster_node_lost(int t);
extern void broker_cluster_forget(int t);
extern bool broker_cluster_home_in_use(int t);
extern bool broker_cluster_node_in_use(int t);

#endif							/* REDSEM_BROKER_CLUSTER_H */
