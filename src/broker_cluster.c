/*
 * broker_cluster.c
 *		Redis Cluster routing inside the broker: each command of a
 *		backend's link goes to the node that serves its key's slot.
 *
 * A backend's links in a cluster name the seed (redsem.host, redsem.port).
 * The broker keeps one map per seed and profile (held by the seed's
 * target, the links' home), shared by every link of it: which node serves
 * each slot, learnt from the MOVED replies it passes on and from the
 * replies that are no error (a node that answers a key's command serves
 * its slot).  A command for a slot not known yet goes to the fallback node
 * (the seed, or after a node could not be opened the next one known),
 * which serves it or answers MOVED.
 *
 * Redirections still reach the backend, which sends the command again on
 * the same link (conn.c's broker_redirect); the broker, which learnt the node from the
 * reply, sends it there.  That keeps what the backend must know: each
 * redirection is a change of route for it, so its next acquire checks
 * which primary it is on (the era, I15).  With a shared map, one thing
 * more: a change this link never saw.  A slot moved because another link
 * was redirected, a slot forgotten because its node could not be opened,
 * a node that lost a connection or closed its last (it may have restarted,
 * having forgotten everything) are changes, counted by the map, which
 * stamps each slot they touch.  A link's script call for a slot stamped
 * after the link last looked is answered MOVED (to where the broker will
 * send it) by the broker itself, without sending it: the backend counts a
 * change of route (for every slot, which is why one answer brings the
 * link up to date) and sends it again.  A release is not answered so (it
 * is sent where the map says: the backend sends one at commit without
 * following redirections, and a release checks no era); nor does a
 * redirection in a release's reply bring its link up to date (an acquire
 * may be out behind it: Pending.sees).  Learning a slot not known before
 * is no change.
 *
 * ASK is passed on too, and the node it names is remembered for the link:
 * the ASKING the backend then sends, and the command after it, go there.
 *
 * A link's replies must come back in the order of its commands: a command
 * for another node than the one the link still owes replies from waits
 * until they are back (conn.c's broker_lane gives a backend more than one
 * link so that this rarely happens).
 *
 * Invariants: a client changes target only while it is owed nothing; an
 * answer of the broker's own (MOVED, REDSEM.NODE_OF) only while it is owed
 * nothing; a map's node indices stay valid while a client's ask_node may
 * name them (a map is reset only with its clients' ask_node).
 */
#include "postgres.h"

#include "hiredis.h"

#include "utils/memutils.h"

#include "broker_cluster.h"
#include "brokerlink.h"

/* The key a request routes by (cluster.c's rule): its element, or NULL */
static const redisReply *
request_key(const redisReply *cmd)
{
	const char *argv[4];
	int			argc = (int) Min(cmd->elements, lengthof(argv));
	const char *key;

	for (int i = 0; i < argc; i++)
		argv[i] = cmd->element[i]->str;
	key = cluster_command_key(argc, argv);
	for (int i = 0; key != NULL && i < argc; i++)
		if (argv[i] == key)
			return cmd->element[i];
	return NULL;
}

/* The slot of a key element (all its bytes, as Redis hashes them) */
static int
key_slot(const redisReply *key)
{
	return cluster_key_slot(key->str, key->len);
}

/* True for a script call */
static bool
request_is_script(const redisReply *cmd)
{
	return broker_is_command(cmd, "FCALL") || broker_is_command(cmd, "EVALSHA") ||
		broker_is_command(cmd, "EVAL");
}

/* True for a script call of a release (FCALL fn numkeys keys... op) */
static bool
request_is_release(const redisReply *cmd)
{
	size_t		op;

	if (!request_is_script(cmd))
		return false;
	op = 3 + (size_t) Max(atoi(cmd->elements > 2 ? cmd->element[2]->str : "0"), 0);
	return op < cmd->elements && pg_strcasecmp(cmd->element[op]->str, "release") == 0;
}

/* Give client c, whose target is a Cluster seed, that seed's map */
void
broker_cluster_bind(Client *c)
{
	Target	   *t = &targets[c->target];
	ClusterMap *map = t->map;

	c->home = -1;
	c->ask_node = -1;
	if (!t->cluster)
		return;
	if (map == NULL)
	{
		map = MemoryContextAllocZero(broker_cxt, sizeof(ClusterMap));
		memset(map->slot, -1, sizeof(map->slot));
		strlcpy(map->nodes[0].host, t->host, sizeof(map->nodes[0].host));
		map->nodes[0].port = t->port;
		map->nodes[0].target = c->target;
		map->n_nodes = 1;
		t->map = map;
	}
	c->home = c->target;
	c->map_seen = map->changes;
}

/* Count a change of map: the stamp of the slots it touches */
static uint64
map_change(ClusterMap *map)
{
	return ++map->changes;
}

/*
 * Forget every node of home's map but the seed (it is full: addresses
 * that come and go), every slot with them: a change for every slot
 */
static void
map_reset(int home)
{
	ClusterMap *map = targets[home].map;
	uint64		stamp = map_change(map);

	memset(map->slot, -1, sizeof(map->slot));
	for (int s = 0; s < CLUSTER_SLOTS; s++)
		map->changed[s] = stamp;
	map->n_nodes = 1;
	map->fallback = 0;
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->home == home)
			clients[i]->ask_node = -1;
	ereport(LOG,
			(errmsg("redsem broker forgot the Cluster nodes it knew beyond the seed %s:%d",
					map->nodes[0].host, map->nodes[0].port),
			 errdetail("It knew %d node addresses, the most it keeps.", CLUSTER_MAX_NODES)));
}

/*
 * An index of home's map that nothing names (no slot, not the fallback,
 * no client's next ASKING), to reuse; -1 if none
 */
static int
map_unused_node(int home)
{
	ClusterMap *map = targets[home].map;
	bool		named[CLUSTER_MAX_NODES] = {0};

	for (int s = 0; s < CLUSTER_SLOTS; s++)
		if (map->slot[s] >= 0)
			named[map->slot[s]] = true;
	named[0] = named[map->fallback] = true;
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->home == home && clients[i]->ask_node >= 0)
			named[clients[i]->ask_node] = true;
	for (int i = 1; i < map->n_nodes; i++)
		if (!named[i])
			return i;
	return -1;
}

/*
 * The index of node host:port in home's map, added if new: in place of a
 * node nothing names if the map is full (addresses that come and go), or
 * in a map reset to the seed if every one is named
 */
static int
map_node(int home, const char *host, int port)
{
	ClusterMap *map = targets[home].map;
	MapNode    *n;
	int			i;

	for (i = 0; i < map->n_nodes; i++)
		if (map->nodes[i].port == port && strcmp(map->nodes[i].host, host) == 0)
			return i;
	if (map->n_nodes < CLUSTER_MAX_NODES)
		i = map->n_nodes++;
	else if ((i = map_unused_node(home)) < 0)
	{
		map_reset(home);
		i = map->n_nodes++;
	}
	n = &map->nodes[i];
	strlcpy(n->host, host, sizeof(n->host));
	n->port = port;
	n->target = -1;
	return i;
}

/* Map slot to node, stamping it if it was known elsewhere */
static void
map_learn(ClusterMap *map, int slot, int node)
{
	if (map->slot[slot] == node)
		return;
	if (map->slot[slot] >= 0)
		map->changed[slot] = map_change(map);
	map->slot[slot] = (int8) node;
}

/* The node of map a command for slot goes to */
static int
slot_node(const ClusterMap *map, int slot)
{
	return map->slot[slot] >= 0 ? map->slot[slot] : map->fallback;
}

/* Client c waits for no connection any more (its request moved or was answered) */
static void
stop_waiting(Client *c)
{
	c->waiting = c->waiting_side = false;
	c->waiting_pool = -1;
}

/*
 * Move client c (linked for home) to node of map for its next request:
 * held while replies it is owed elsewhere are not back
 */
static ClusterStep
move_to(Client *c, ClusterMap *map, int node)
{
	MapNode    *n = &map->nodes[node];

	if (n->target < 0)
		n->target = broker_node_target(c->home, n->host, n->port);
	if (n->target == c->target)
		return CLUSTER_GO;
	if (c->outstanding > 0)
		return CLUSTER_HOLD;
	stop_waiting(c);
	c->target = n->target;
	return CLUSTER_GO;
}

/*
 * Answer client c's request for slot, without sending it, with the MOVED
 * that its node would have answered had the route changed under it
 */
static void
answer_moved(Client *c, const ClusterMap *map, int slot)
{
	const MapNode *n = &map->nodes[slot_node(map, slot)];
	char		line[CLUSTER_HOST_MAX + 64];
	int			len;

	/* (a seed on a Unix socket has no host; the backend reads none) */
	len = snprintf(line, sizeof(line), "MOVED %d %s:%d", slot,
				   n->host[0] != '\0' ? n->host : "localhost", Max(n->port, 1));
	broker_out_line(c, '-', line, Min(len, (int) sizeof(line) - 1));
}

/*
 * Answer client c's REDSEM.NODE_OF key...: for each, the node map knows for
 * its slot, or -1
 */
static void
answer_node_of(Client *c, const ClusterMap *map, const redisReply *cmd)
{
	char		line[32];
	int			len;

	len = snprintf(line, sizeof(line), "%d", (int) cmd->elements - 1);
	broker_out_line(c, '*', line, len);
	for (size_t i = 1; i < cmd->elements; i++)
	{
		const redisReply *key = cmd->element[i];

		len = snprintf(line, sizeof(line), "%d", map->slot[key_slot(key)]);
		broker_out_line(c, ':', line, len);
	}
}

/* Client c's request is answered here: it waits for nothing */
static ClusterStep
answered(Client *c)
{
	stop_waiting(c);
	return CLUSTER_ANSWERED;
}

/*
 * Where client c's next request (held[0]) goes, in a cluster: c->target
 * set to its node; or held until replies owed elsewhere are back; or
 * answered here (MOVED after a change c did not see: see above; or
 * REDSEM.NODE_OF).  Outside a cluster, where it is.
 */
ClusterStep
broker_cluster_route(Client *c)
{
	const redisReply *cmd = c->held[0];
	ClusterMap *map;
	const redisReply *key;
	int			slot;
	ClusterStep step;

	if (c->home < 0)
		return CLUSTER_GO;
	map = targets[c->home].map;
	if (broker_is_command(cmd, REDSEM_BROKER_NODE_OF) && cmd->elements >= 2)
	{
		if (c->outstanding > 0)
			return CLUSTER_HOLD;
		answer_node_of(c, map, cmd);
		return answered(c);
	}
	if (broker_is_command(cmd, "ASKING"))
	{
		if (c->ask_node < 0)
			return CLUSTER_GO;
		step = move_to(c, map, c->ask_node);
		if (step == CLUSTER_GO)
			c->ask_node = -1;
		return step;
	}
	c->ask_node = -1;			/* (an ASK is for the command that follows it) */
	if ((key = request_key(cmd)) == NULL)
		return CLUSTER_GO;		/* (WAIT, FUNCTION LOAD: where the last went) */
	slot = key_slot(key);
	if (map->changed[slot] > c->map_seen && request_is_script(cmd) && !request_is_release(cmd))
	{
		if (c->outstanding > 0)
			return CLUSTER_HOLD;
		c->map_seen = map->changes;
		answer_moved(c, map, slot);
		return answered(c);
	}
	return move_to(c, map, slot_node(map, slot));
}

/*
 * A reply for client c, about to be passed on: a MOVED teaches its home's
 * map the slot's node, an ASK names the node of c's next ASKING.  If sees
 * (the backend follows it before it sends anything else: not a release's
 * reply, which may be read after an acquire went out behind it), it is a
 * change of route the backend counts, so c has seen the map as it is.
 */
void
broker_cluster_reply(Client *c, const redisReply *reply, bool sees)
{
	ClusterMap *map;
	char		host[CLUSTER_HOST_MAX];
	bool		ask;
	int			slot;
	int			port;
	int			node;

	if (c->home < 0 || reply->type != REDIS_REPLY_ERROR || reply->str == NULL ||
		!cluster_parse_redirect(reply->str, &ask, &slot, host, &port))
		return;
	node = map_node(c->home, host, port);
	map = targets[c->home].map;
	if (ask)
		c->ask_node = node;
	else
		map_learn(map, slot, node);
	if (sees)
		c->map_seen = map->changes;
}

/*
 * What a reply to client c's request cmd (about to be sent on c->target)
 * will teach, in p: the slot whose node it shows if it is no error (that of
 * a script call's key, unless it follows ASKING, which is for one command;
 * -1 for none), the map's changes now, and whether a redirection in it
 * brings c up to date (see broker_cluster_reply)
 */
void
broker_cluster_pending(Client *c, const redisReply *cmd, Pending *p)
{
	const redisReply *key;
	bool		asked = c->after_asking;

	c->after_asking = broker_is_command(cmd, "ASKING");
	p->slot = -1;
	p->stamp = 0;
	p->sees = false;
	if (c->home < 0)
		return;
	p->stamp = targets[c->home].map->changes;
	p->sees = !request_is_release(cmd);
	if (!asked && request_is_script(cmd) && (key = request_key(cmd)) != NULL)
		p->slot = key_slot(key);
}

/*
 * A reply that is no error, for client c, read on target t for its request
 * p: t serves p's slot, unless the slot moved since it was sent (the reply
 * is older than what the map knows)
 */
void
broker_cluster_served(Client *c, int t, const Pending *p, const redisReply *reply)
{
	ClusterMap *map;

	if (c->home < 0 || p->slot < 0 || reply->type == REDIS_REPLY_ERROR)
		return;
	map = targets[c->home].map;
	if (map->changed[p->slot] > p->stamp)
		return;
	for (int i = 0; i < map->n_nodes; i++)
		if (map->nodes[i].target == t)
		{
			map_learn(map, p->slot, i);
			return;
		}
}

/*
 * In every map that knows target t as a node: a change stamped on the
 * slots it serves (forget: they are forgotten too, and a map that fell back
 * on it falls back on the next node it knows)
 */
static void
node_changed(int t, bool forget)
{
	for (int h = 0; h < n_targets; h++)
	{
		ClusterMap *map = targets[h].free ? NULL : targets[h].map;

		if (map == NULL)
			continue;
		for (int i = 0; i < map->n_nodes; i++)
		{
			uint64		stamp;

			if (map->nodes[i].target != t)
				continue;
			stamp = map_change(map);
			for (int s = 0; s < CLUSTER_SLOTS; s++)
				if (map->slot[s] == i)
				{
					map->changed[s] = stamp;
					if (forget)
						map->slot[s] = -1;
				}
			if (forget && map->fallback == i)
				map->fallback = (i + 1) % map->n_nodes;
		}
	}
}

/*
 * Target t, a Cluster node, could not be opened: every map forgets the
 * slots it served, and one that fell back on it falls back on the next
 * node it knows, which will redirect
 */
void
broker_cluster_node_failed(int t)
{
	node_changed(t, true);
}

/*
 * A connection of target t, a Cluster node, was lost (it may have
 * restarted, having forgotten everything): a change for its slots
 */
void
broker_cluster_node_lost(int t)
{
	node_changed(t, false);
}

/*
 * Target t is being ended (its connections closed): a change for its
 * slots; no map names it any more (its nodes keep their addresses, and
 * get a target again when routed to), and its own map, if it was a home,
 * is freed
 */
void
broker_cluster_forget(int t)
{
	node_changed(t, false);
	for (int h = 0; h < n_targets; h++)
	{
		ClusterMap *map = targets[h].free ? NULL : targets[h].map;

		if (map == NULL)
			continue;
		for (int i = 0; i < map->n_nodes; i++)
			if (map->nodes[i].target == t)
				map->nodes[i].target = -1;
	}
	if (targets[t].map != NULL)
	{
		pfree(targets[t].map);
		targets[t].map = NULL;
	}
}

/* True if a backend is linked for a seed whose map knows target t as a node */
bool
broker_cluster_node_in_use(int t)
{
	for (int h = 0; h < n_targets; h++)
	{
		ClusterMap *map = targets[h].free ? NULL : targets[h].map;

		if (map == NULL)
			continue;
		for (int i = 0; i < map->n_nodes; i++)
			if (map->nodes[i].target == t && broker_cluster_home_in_use(h))
				return true;
	}
	return false;
}

/* True if a backend is linked with target t as its home (its seed) */
bool
broker_cluster_home_in_use(int t)
{
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->home == t)
			return true;
	return false;
}
