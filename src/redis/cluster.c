/*
 * cluster.c
 *		Redis Cluster: which node serves a command's key.
 *
 * With redsem.cluster on, redsem.host and redsem.port name one node of the
 * cluster (the seed).  Every command redsem sends touches the keys of one
 * semaphore, which share one hash slot (the name is the hash tag), so each
 * goes to the node that serves that slot.  The slot map is learnt from the
 * cluster itself: a command for a slot not known yet goes to the seed (or,
 * after a node failed, to the next node known), and a MOVED reply names the
 * right node, which the map keeps.  ASK (a slot being migrated) is followed
 * for that one command.  conn.c keeps one connection per node it needs.
 *
 * A node that cannot be reached is forgotten with every slot mapped to it,
 * so the next command for those slots asks another node, which answers
 * MOVED to the replica promoted in its place once the cluster has failed
 * over (until then, CLUSTERDOWN or the dead address: conn.c asks again
 * until the call's deadline).
 *
 * Behind the broker (redsem.connection_mode = 'broker') none of this is
 * used: the broker routes (broker_cluster.c), and conn.c's links all name
 * the seed, node 0.
 */
#include "postgres.h"

#include "utils/guc.h"

#include "cluster.h"
#include "guc.h"


bool		redsem_cluster = false;

/* The nodes known; node 0 is the seed (redsem.host, redsem.port) */
typedef struct ClusterNode
{
	char		host[CLUSTER_HOST_MAX];
	int			port;
} ClusterNode;

static ClusterNode nodes[CLUSTER_MAX_NODES];
static int	node_count = 0;
static uint64 nodes_generation = 0;

/* The node that serves each slot, -1 if not known */
static int8 slot_node[CLUSTER_SLOTS];

/* Where commands for unknown slots go: the seed, or the next node known */
static int	fallback_node = 0;

/* Define the setting (superuser-only, like every connection setting) */
void
cluster_define_gucs(void)
{
	DefineCustomBoolVariable("redsem.cluster",
							 "Redis is a Redis Cluster: follow its redirections to the node of each semaphore.",
							 "redsem.host and redsem.port then name any one node of the cluster.",
							 &redsem_cluster, false,
							 PGC_SUSET, 0,
							 NULL, redsem_assign_connection_bool, NULL);
}

/* True when Redis is a cluster */
bool
cluster_enabled(void)
{
	return redsem_cluster;
}

/* Start anew from the seed when the connection settings changed */
static void
reset_if_stale(void)
{
	if (node_count > 0 && nodes_generation == redsem_guc_generation_now())
		return;
	memset(slot_node, -1, sizeof(slot_node));
	strlcpy(nodes[0].host, redsem_host ? redsem_host : "", sizeof(nodes[0].host));
	nodes[0].port = redsem_port;
	node_count = 1;
	fallback_node = 0;
	nodes_generation = redsem_guc_generation_now();
}

/* CRC16 (XMODEM: polynomial 0x1021, initial 0), as Redis Cluster hashes */
static uint16
crc16(const char *buf, size_t len)
{
	uint16		crc = 0;

	for (size_t i = 0; i < len; i++)
	{
		crc ^= (uint16) ((unsigned char) buf[i]) << 8;
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16) ((crc << 1) ^ 0x1021) : (uint16) (crc << 1);
	}
	return crc;
}

/* The hash slot of a key: of its {hash tag} when it has a non-empty one */
int
cluster_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open != NULL)
	{
		size_t		rest = len - (open - key) - 1;
		const char *close = memchr(open + 1, '}', rest);

		if (close != NULL && close > open + 1)
			return crc16(open + 1, close - open - 1) % CLUSTER_SLOTS;
	}
	return crc16(key, len) % CLUSTER_SLOTS;
}

/*
 * The key a command routes by: the first key of FCALL (or EVALSHA/EVAL),
 * the list of BLPOP, the key the broker is asked about (its node); NULL
 * for a command without one (WAIT, PING, FUNCTION LOAD).
 */
const char *
cluster_command_key(int argc, const char **argv)
{
	if ((pg_strcasecmp(argv[0], "FCALL") == 0 || pg_strcasecmp(argv[0], "EVALSHA") == 0 ||
		 pg_strcasecmp(argv[0], "EVAL") == 0) &&
		argc > 3 && atoi(argv[2]) > 0)
		return argv[3];
	if ((pg_strcasecmp(argv[0], "BLPOP") == 0 ||
		 pg_strcasecmp(argv[0], REDSEM_BROKER_NODE_OF) == 0) && argc > 1)
		return argv[1];
	return NULL;
}

/*
 * The node to send a command to: the one serving its key's slot, if known;
 * else the fallback node.  A command without a key stays on current (WAIT
 * must follow the grant it confirms); -1 there means the fallback too.
 */
int
cluster_node_for(int argc, const char **argv, int current)
{
	const char *key = cluster_command_key(argc, argv);
	int			slot;

	reset_if_stale();
	if (key == NULL)
		return current >= 0 ? current : fallback_node;
	slot = cluster_key_slot(key, strlen(key));
	return slot_node[slot] >= 0 ? slot_node[slot] : fallback_node;
}

/*
 * A command went to node without ASKING and was answered there (not
 * redirected): node serves its key's slot.  (A slot is learnt so from the
 * fallback node too, which never redirects its own slots.)
 */
void
cluster_note_served(int argc, const char **argv, int node)
{
	const char *key = cluster_command_key(argc, argv);

	reset_if_stale();
	if (key != NULL && node >= 0 && node < node_count)
		slot_node[cluster_key_slot(key, strlen(key))] = (int8) node;
}

/*
 * The node known to serve key's slot (learnt from a redirection or a
 * reply), or -1
 */
int
cluster_known_node(const char *key)
{
	reset_if_stale();
	return slot_node[cluster_key_slot(key, strlen(key))];
}

/* The index of node host:port, added if new; -1 if the table is full */
static int
node_index(const char *host, int port)
{
	for (int i = 0; i < node_count; i++)
		if (nodes[i].port == port && strcmp(nodes[i].host, host) == 0)
			return i;
	if (node_count == CLUSTER_MAX_NODES)
		return -1;
	strlcpy(nodes[node_count].host, host, sizeof(nodes[node_count].host));
	nodes[node_count].port = port;
	return node_count++;
}

/*
 * Read "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>" (*ask
 * says which; host has room for CLUSTER_HOST_MAX): false if error is
 * neither, or malformed
 */
bool
cluster_parse_redirect(const char *error, bool *ask, int *slot, char *host, int *port)
{
	const char *addr;
	const char *colon;

	*ask = strncmp(error, "ASK ", 4) == 0;
	if (!*ask && strncmp(error, "MOVED ", 6) != 0)
		return false;
	addr = strchr(error + (*ask ? 4 : 6), ' ');
	*slot = atoi(error + (*ask ? 4 : 6));
	if (addr == NULL || *slot < 0 || *slot >= CLUSTER_SLOTS ||
		(colon = strrchr(addr + 1, ':')) == NULL ||
		colon - addr - 1 <= 0 || colon - addr - 1 >= CLUSTER_HOST_MAX)
		return false;
	memcpy(host, addr + 1, colon - addr - 1);
	host[colon - addr - 1] = '\0';
	*port = atoi(colon + 1);
	return *port >= 1 && *port <= 65535;
}

/*
 * Follow "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>": the
 * node to send the command to, or -1 if error is neither (or malformed, or
 * the table is full).  MOVED is kept in the slot map; *ask says the
 * command must go there once, after ASKING.
 */
int
cluster_redirect(const char *error, bool *ask)
{
	char		host[CLUSTER_HOST_MAX];
	int			slot;
	int			port;
	int			node;

	if (!cluster_parse_redirect(error, ask, &slot, host, &port))
	{
		*ask = false;
		return -1;
	}
	reset_if_stale();
	if ((node = node_index(host, port)) < 0)
		return -1;
	if (!*ask)
		slot_node[slot] = (int8) node;
	return node;
}

/*
 * A node could not be reached: forget the slots it served, and send
 * commands for unknown slots to the next node known, which will redirect.
 */
void
cluster_node_failed(int node)
{
	reset_if_stale();
	for (int s = 0; s < CLUSTER_SLOTS; s++)
		if (slot_node[s] == node)
			slot_node[s] = -1;
	if (node == fallback_node)
		fallback_node = (fallback_node + 1) % node_count;
}

/* A node's host */
const char *
cluster_node_host(int node)
{
	reset_if_stale();
	return nodes[node].host;
}

/* A node's port */
int
cluster_node_port(int node)
{
	reset_if_stale();
	return nodes[node].port;
}
