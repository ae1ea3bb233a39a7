/*
 * cluster.h
 *		Redis Cluster: which node serves a command's key, learnt from the
 *		cluster's own redirections.
 */
#ifndef REDSEM_CLUSTER_H
#define REDSEM_CLUSTER_H

#define CLUSTER_SLOTS		16384	/* Redis Cluster's hash slots */
#define CLUSTER_MAX_NODES	64
#define CLUSTER_MAX_REDIRECTS	16	/* per attempt, MOVED and ASK together */
#define CLUSTER_HOST_MAX	256		/* a node's host name, with its NUL */

/*
 * REDSEM.NODE_OF key...: behind the broker in a cluster, the broker answers
 * (itself) for each key the node it knows to serve its slot, an integer
 * that tells nodes apart, or -1 while it does not know it
 */
#define REDSEM_BROKER_NODE_OF	"REDSEM.NODE_OF"

extern bool redsem_cluster;

extern void cluster_define_gucs(void);
extern bool cluster_enabled(void);
extern int	cluster_node_for(int argc, const char **argv, int current);
extern int	cluster_known_node(const char *key);
extern void cluster_note_served(int argc, const char **argv, int node);
extern int	cluster_redirect(const char *error, bool *ask);
extern void cluster_node_failed(int node);
extern const char *cluster_node_host(int node);
extern int	cluster_node_port(int node);
extern int	cluster_key_slot(const char *key, size_t len);
extern const char *cluster_command_key(int argc, const char **argv);
extern bool cluster_parse_redirect(const char *error, bool *ask, int *slot,
								   char *host, int *port);

#endif							/* REDSEM_CLUSTER_H */
