/*
 * conn.c
 *		The backend's Redis links, and routing commands over them.
 *
 * Layers, each calling only downward: sockwait.c (every wait on a socket
 * and the latch), link.c (a bare connection: open, set up, exchange,
 * classify; never raises), this file (the backend's links: one to the
 * server, or one per Redis Cluster node; routing, redirects, pipelines,
 * following a failover, sentinel.c to find the primary) and report.c
 * (status texts, and the one function that raises or logs).
 *
 * A link is opened lazily, on first use, and reopened on the next call
 * after it broke, after a connection setting changed, or after Redis said
 * it cannot serve us here (READONLY, LOADING, MASTERDOWN: a failover behind
 * the same address is then followed).  A request interrupted half way
 * leaves a reply in flight, so the link is dropped rather than reused.
 * Every function that works on a link is handed it (Link *); a single
 * Redis server is node 0, a Cluster's nodes are numbered by cluster.c.
 *
 * A command goes where it belongs in tries (exec_routed, over a Route: the
 * command, its bounds, a Cluster pipeline's time shares, the node it is
 * at): take the node's share, make its link usable, exchange, follow a
 * redirection or record a failure, and go again after a failover.  A
 * Cluster pipeline (pipeline_by_node) goes in passes instead: each node's
 * commands in one write, within the node's share, the redirected ones to
 * their node in the next pass, and only what must be waited out on its
 * own, over a Route.
 *
 * redis_exec() and redis_exec_pipeline() serve every caller.  They return a
 * status and never raise, except that on SQL paths (call->interruptible) a
 * cancel or timeout interrupt unwinds through them.  What went wrong is
 * kept in the call's outcome, classified (see RedisStatus), for the
 * operation that made the call to count and report once (script.c).
 */
#include "postgres.h"

#include <sys/socket.h>
#include <errno.h>

#include "hiredis.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/timestamp.h"

#include "brokerlink.h"
#include "clock.h"
#include "compat.h"
#include "cluster.h"
#include "conn.h"
#include "guc.h"
#include "link.h"
#include "replycap.h"
#include "report.h"
#include "sentinel.h"
#include "timing.h"
#include "tls.h"

/* A reply owed on a link, and where it goes */
typedef struct OwedReply
{
	RedisReplyHandler handler;
	void	   *arg;
	int			slot;			/* in a cluster, its command's slot (-1: none) */
} OwedReply;

/* The most commands a link carries without their replies read */
#define LINK_MAX_OWED	8

/*
 * One connection: to the Redis server (link 0), or, in a Redis Cluster, to
 * node i of cluster.c (link i).
 */
typedef struct Link
{
	redisContext *ctx;			/* NULL while closed */
	uint64		generation;		/* the settings it was opened under */
	bool		tls;			/* it speaks TLS */
	uint64		secrets;		/* behind the broker: a digest of the
								 * passwords its header carried (0: none) */
	int			connect_timeout_ms; /* behind the broker: the one the broker
									 * has for it (link_append) */

	/*
	 * True from sending a command until its reply is read.  Still true at
	 * the next use means the request was abandoned (an ERROR unwinds
	 * through redis_exec, but FATAL exits without unwinding): a reply, or a
	 * blocked BLPOP, is still owed on the socket, so the connection must not
	 * be reused.
	 */
	bool		in_flight;

	/* a reply was read on it since it was opened (connection_failed) */
	bool		answered;

	/* primary_moves() when it was opened or last compared (link_left_behind) */
	uint64		primary_moves;

	/* through Sentinel: the primary as the sentinels named it ("host:port") */
	char		named[SENTINEL_NAMED_LEN];

	/*
	 * Commands sent without waiting (redis_send_deferred), oldest first:
	 * their replies come before any other on the socket, and are read and
	 * handed over before the link's next use, or failed when it closes.
	 */
	int			n_owed;
	OwedReply	owed[LINK_MAX_OWED];
} Link;

static Link links[CLUSTER_MAX_NODES];

/*
 * Through Redis Sentinel in direct mode: what this server's keeper last
 * heard the sentinels name (shared memory, which the wing does not reach:
 * _PG_init hands these in).  A planned failover (SENTINEL FAILOVER) leaves
 * the old primary a primary, taking writes, until the sentinels demote it
 * about 10 s later; a connection to it would refresh, release and wait in
 * line there meanwhile, while the new primary's copy runs on.
 */
static bool (*primary_named_other) (uint64 target, const char *primary) = NULL;
static uint64 (*primary_moves) (void) = NULL;

/* The most keys one REDSEM.NODE_OF asks the broker about */
#define NODE_OF_BATCH	1000

/*
 * How many times this backend opened a link or followed a redirection: a
 * primary it talks to may be another since (gen.c has each slot's first
 * acquire after a change check which primary it is on)
 */
static uint64 route_changes = 0;

/* How many links this backend opened (a WAIT must go where its grant went) */
static uint64 link_opens = 0;

/* A link's node: its index in links[] (0: the server, outside a cluster) */
static inline int
link_node(const Link *link)
{
	return (int) (link - links);
}

/*
 * The node a command last went to (in a call, the one being tried), which
 * redis_target_description names in a cluster.  Routing writes it when it
 * picks a node; nothing but that description reads it.
 */
static int	described_node = 0;

/*
 * The Cluster node whose address link node (links[node]) has: itself;
 * behind the broker, which routes, every link names the seed, node 0
 */
static int
node_address(int node)
{
	return redsem_broker_wanted() ? 0 : node;
}

/* The node an outcome names for link (plus one; 0 outside a cluster) */
static int
outcome_node(const Link *link)
{
	return cluster_enabled() ? link_node(link) + 1 : 0;
}

/*
 * A hash of the settings that decide which Redis data we reach (each of
 * them moves redsem_guc_generation_now() when it changes, so the hash is
 * kept until then).  A hold taken under another signature is not kept
 * alive by the keeper, so a setting the connection ignores is not in it
 * (over a Unix socket, the host and port).  The sentinels listed and a
 * Cluster's seed are: another list, or another seed, may be another
 * deployment whose master has the same name (the generation a backend
 * knows, gen.c, is kept per signature too).
 */
uint64
redis_target_signature(void)
{
	static uint64 cached = 0;
	static uint64 cached_generation = PG_UINT64_MAX;
	char	   *desc;
	uint64		h;

	if (cached_generation == redsem_guc_generation_now())
		return cached;
	/* through sentinels, the data is the named primary's, wherever it is */
	if (sentinel_enabled())
		desc = psprintf("sentinel|%s|%s|%d|%s", redsem_sentinels, redsem_sentinel_master,
						redsem_database, redsem_user ? redsem_user : "");
	else if (cluster_enabled())
		desc = psprintf("cluster|%s|%d|%d|%s", redsem_host ? redsem_host : "", redsem_port,
						redsem_database, redsem_user ? redsem_user : "");
	else if (redsem_unix_socket && redsem_unix_socket[0] != '\0')
		desc = psprintf("unix|%s|%d|%s", redsem_unix_socket, redsem_database,
						redsem_user ? redsem_user : "");
	else
		desc = psprintf("tcp|%s|%d|%d|%s", redsem_host ? redsem_host : "", redsem_port,
						redsem_database, redsem_user ? redsem_user : "");
	h = hash_bytes_extended((const unsigned char *) desc, strlen(desc), 0);
	pfree(desc);
	cached = h;
	cached_generation = redsem_guc_generation_now();
	return h;
}

/* Human-readable connection target, for messages */
char *
redis_target_description(void)
{
	if (sentinel_enabled())
		return sentinel_target_description();
	if (cluster_enabled())
		return psprintf("%s:%d (Redis Cluster)", cluster_node_host(node_address(described_node)),
						cluster_node_port(node_address(described_node)));
	if (redsem_unix_socket && redsem_unix_socket[0] != '\0')
		return psprintf("unix socket \"%s\"", redsem_unix_socket);
	return psprintf("%s:%d", redsem_host ? redsem_host : "", redsem_port);
}

/* Set up a call: deadline (DT_NOEND: redsem.command_timeout), mode, level */
void
redis_call_init(RedisCall *call, TimestampTz deadline, bool interruptible,
				int elevel)
{
	memset(call, 0, sizeof(*call));
	call->deadline = deadline;
	call->interruptible = interruptible;
	call->elevel = elevel;
}

/*
 * Hand the oldest owed reply of link to its handler: reply, or NULL with
 * why in outcome.
 */
static void
deliver_owed(Link *link, redisReply *reply, const RedisOutcome *outcome)
{
	OwedReply	owed = link->owed[0];

	link->n_owed--;
	memmove(&link->owed[0], &link->owed[1], sizeof(OwedReply) * link->n_owed);
	owed.handler(owed.arg, reply, outcome);
	if (reply != NULL)
		freeReplyObject(reply);
}

static void disconnect_link(Link *link);
static bool is_redirect(const redisReply *reply);

/*
 * Hand a reply read on link for its oldest owed command to its handler: an
 * error reply as its outcome.  True if the link is no use any more (the
 * caller drops it).
 */
static bool
hand_over(Link *link, redisReply *reply)
{
	RedisOutcome o = {RS_OK, 0, "", 0, false, 0};
	bool		drop = false;

	if (reply->type == REDIS_REPLY_ERROR)
	{
		/*
		 * (a redirection is not followed here, but the route moved all the
		 * same: behind the broker the link's next command goes there)
		 */
		if (is_redirect(reply))
			route_changes++;
		drop = redis_reply_outcome(reply, &o);
		freeReplyObject(reply);
		reply = NULL;
	}
	deliver_owed(link, reply, &o);
	return drop;
}

/* hand_over, dropping the link at once if it is no use any more */
static void
deliver_read(Link *link, redisReply *reply)
{
	if (hand_over(link, reply))
		disconnect_link(link);
}

/* Close link, if open, and give back its file descriptor */
static void
disconnect_link(Link *link)
{
	RedisOutcome lost = {RS_LOST, 0, "the connection closed before the reply was read", 0, false};

	if (link->ctx == NULL)
		return;
	redis_close_context(link->ctx);
	link->ctx = NULL;
	link->in_flight = false;
	lost.node_plus1 = outcome_node(link);
	while (link->n_owed > 0)
		deliver_owed(link, NULL, &lost);
}

/* Close every connection */
void
redis_disconnect(void)
{
	for (int node = 0; node < CLUSTER_MAX_NODES; node++)
		disconnect_link(&links[node]);
}

/* The configured Unix socket, or NULL for TCP */
static const char *
unix_socket_path(void)
{
	return (redsem_unix_socket && redsem_unix_socket[0] != '\0') ? redsem_unix_socket : NULL;
}

/*
 * Open a connection to host:port (or unix_path) and set up its session, or
 * through sentinels one to the primary they name (see sentinel.c; behind
 * the broker, a link to the broker, which finds it).  While a
 * failover runs (the named primary is unreachable or still a replica, or a
 * server is loading), ask again every SENTINEL_RETRY_MS until deadline.
 * NULL, nothing left open and the call's outcome saying why, on failure.
 */
static redisContext *
redis_open_following(RedisCall *call, const char *host, int port,
					 const char *unix_path, TimestampTz deadline)
{
	for (;;)
	{
		redisContext *c = sentinel_enabled() && !redsem_broker_wanted()
			? sentinel_connect_primary(call, deadline)
			: redis_open_target(call, host, port, unix_path,
								redis_connect_deadline(deadline));

		if (c != NULL || call->outcome.status != RS_UNAVAILABLE ||
			!redis_pause_to_retry(SENTINEL_RETRY_MS, deadline, call->interruptible))
			return c;
	}
}

/*
 * Open link: to the configured server (or Cluster node), or to the primary
 * the sentinels name (redis_open_following)
 */
static bool
open_connection(RedisCall *call, Link *link, TimestampTz deadline)
{
	redisContext *c;
	uint64		moves = primary_moves ? primary_moves() : 0;

	if (sentinel_enabled() && cluster_enabled())
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "redsem.sentinels and redsem.cluster cannot be used together: a Redis Cluster fails over by itself");
		return false;
	}
	c = cluster_enabled()
		? redis_open_following(call, cluster_node_host(node_address(link_node(link))),
							   cluster_node_port(node_address(link_node(link))), NULL, deadline)
		: redis_open_following(call, redsem_host, redsem_port,
							   unix_socket_path(), deadline);
	if (c == NULL)
		return false;
	link->ctx = c;
	link->answered = false;
	link->primary_moves = moves;	/* (read before the sentinels were asked) */
	strlcpy(link->named, sentinel_enabled() && !redsem_broker_wanted() ? sentinel_last_primary() : "",
			sizeof(link->named));
	link->generation = redsem_guc_generation_now();
	link->tls = redis_target_tls();
	link->secrets = redsem_broker_wanted() ? redis_broker_link_secrets() : 0;
	link->connect_timeout_ms = redsem_connect_timeout_ms;
	route_changes++;
	link_opens++;
	return true;
}

/* See route_changes */
uint64
redis_route_changes(void)
{
	return route_changes;
}

/* See link_opens */
uint64
redis_link_opens(void)
{
	return link_opens;
}

/*
 * In a cluster, for each of n keys, a number telling apart the node known
 * to serve it, or -1 while it is not known: this process's slot map's, or
 * behind the broker (which routes) the broker's, asked on a link in
 * requests of at most NODE_OF_BATCH keys (a failure to ask is -1, the
 * call's outcome untouched)
 */
void
redis_known_nodes(const RedisCall *call, const char *const *keys, int n, int *nodes)
{
	for (int i = 0; i < n; i++)
		nodes[i] = redsem_broker_wanted() ? -1 : cluster_known_node(keys[i]);
	if (!redsem_broker_wanted())
		return;
	for (int first = 0; first < n; first += NODE_OF_BATCH)
	{
		int			m = Min(n - first, NODE_OF_BATCH);
		const char **argv = palloc(sizeof(char *) * (m + 1));
		RedisCall	mine = *call;
		redisReply *reply = NULL;

		argv[0] = REDSEM_BROKER_NODE_OF;
		memcpy(&argv[1], &keys[first], sizeof(char *) * m);
		if (redis_exec(&mine, m + 1, argv, NULL, &reply) &&
			reply->type == REDIS_REPLY_ARRAY && reply->elements == (size_t) m)
			for (int j = 0; j < m; j++)
				if (reply->element[j]->type == REDIS_REPLY_INTEGER)
					nodes[first + j] = (int) reply->element[j]->integer;
		if (reply != NULL)
			freeReplyObject(reply);
		pfree(argv);
	}
}

static bool read_left_behind(redisContext *c);

/* Hand in the keeper's view of the primary (see primary_named_other) */
void
redis_watch_named_primary(bool (*named_other) (uint64 target, const char *primary),
						  uint64 (*moves) (void))
{
	primary_named_other = named_other;
	primary_moves = moves;
	redis_set_read_wake_check(read_left_behind);
}

/*
 * True if link leads to a Sentinel primary (direct mode) and, since it
 * last looked, the keeper heard the sentinels name another one than the
 * one they named when it opened (as named, host name or address: hiredis
 * holds the address it connected to); the context's error then says so,
 * for the call's outcome
 */
static bool
link_left_behind(Link *link)
{
	uint64		moves;

	if (primary_moves == NULL || link->ctx == NULL || link->named[0] == '\0' ||
		!sentinel_enabled() || redsem_broker_wanted())
		return false;
	moves = primary_moves();
	if (moves == link->primary_moves)
		return false;
	link->primary_moves = moves;
	if (!primary_named_other(redis_target_signature(), link->named))
		return false;
	link->ctx->err = REDIS_ERR_EOF;
	snprintf(link->ctx->errstr, sizeof(link->ctx->errstr),
			 "the sentinels now name another primary than %s", link->named);
	return true;
}

/* A read's wake check (link.c): link_left_behind of this backend's link on c */
static bool
read_left_behind(redisContext *c)
{
	return c != NULL && c == links[0].ctx && link_left_behind(&links[0]);
}

/*
 * True if an idle link can no longer be used: a setting changed, the
 * server closed it (EOF or unexpected bytes waiting on the socket), or
 * the sentinels name another primary (link_left_behind).
 */
static bool
connection_is_stale(Link *link)
{
	char		b;
	ssize_t		n;

	if (link->in_flight || link->generation != redsem_guc_generation_now() || link->ctx->err ||
		link_left_behind(link))
		return true;
	n = recv(link->ctx->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0 && link->tls)
		return !tls_idle_input_ok(link->ctx);
	if (n >= 0)
		return true;
	return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/*
 * Flush what was appended on link (if flush); if owed_first,
 * hand over the replies owed on it (sent earlier without waiting, so they
 * come first); then read n replies into replies[], in order.  A command
 * sent behind owed replies so waits for one round trip, not two.  The link
 * is in flight meanwhile: an interrupt that unwinds drops it, since a
 * reply may still be owed on it.  An owed reply that says the link is no
 * use any more drops it once the caller's replies are read (they are the
 * caller's to judge: the same trouble, said again).
 */
static RedisStatus
exchange(RedisCall *call, Link *link, TimestampTz deadline, bool flush,
		 bool owed_first, int n, redisReply **replies)
{
	volatile RedisStatus status = RS_OK;
	volatile bool drop = false;

	link->in_flight = true;
	PG_TRY();
	{
		if (flush)
			status = redis_context_flush(link->ctx, deadline, call->interruptible);
		while (owed_first && status == RS_OK && link->n_owed > 0)
		{
			redisReply *owed = NULL;

			status = redis_context_read(link->ctx, deadline, call->interruptible, &owed);
			if (status == RS_OK)
				drop |= hand_over(link, owed);
		}
		for (int i = 0; i < n && status == RS_OK; i++)
			status = redis_context_read(link->ctx, deadline, call->interruptible,
										&replies[i]);
	}
	PG_CATCH();
	{
		disconnect_link(link);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (status == RS_OK)
	{
		link->in_flight = false;
		link->answered = true;
		if (drop)
			disconnect_link(link);
	}
	return status;
}

/*
 * Append a command to link's output.  Behind the broker, a redsem.connect_timeout
 * that is not the one the link's broker client has goes first
 * (REDSEM.TIMEOUT): the broker gives the opens a command needs its link's
 * value, and a statement queue's acquire raises the session's to the
 * server's (queue.c: acquire_with_server_timeouts).
 */
static bool
link_append(Link *link, int argc, const char **argv, const size_t *argvlen)
{
	if (redsem_broker_wanted() && link->connect_timeout_ms != redsem_connect_timeout_ms)
	{
		char		ms[16];
		const char *timeout_argv[] = {REDSEM_BROKER_TIMEOUT, ms};

		snprintf(ms, sizeof(ms), "%d", redsem_connect_timeout_ms);
		if (redisAppendCommandArgv(link->ctx, 2, timeout_argv, NULL) != REDIS_OK)
			return false;
		link->connect_timeout_ms = redsem_connect_timeout_ms;
	}
	return redisAppendCommandArgv(link->ctx, argc, argv, argvlen) == REDIS_OK;
}

/*
 * Send one command on link (open), preceded by ASKING if asking (a cluster
 * slot being migrated: the ASKING reply is read and dropped), and read its
 * reply
 */
static RedisStatus
send_and_receive(RedisCall *call, Link *link, int argc, const char **argv,
				 const size_t *argvlen, TimestampTz deadline, bool asking,
				 redisReply **reply)
{
	const char *asking_argv[] = {"ASKING"};
	redisReply *got[2] = {NULL, NULL};
	RedisStatus status;

	*reply = NULL;
	if ((asking && !link_append(link, 1, asking_argv, NULL)) ||
		!link_append(link, argc, argv, argvlen))
		return RS_LOST;
	status = exchange(call, link, deadline, true, true, asking ? 2 : 1, got);
	if (asking && got[0] != NULL)
		freeReplyObject(got[0]);
	*reply = got[asking ? 1 : 0];
	return status;
}

/*
 * Through the broker, a link closed because the broker itself exited (killed,
 * crashed) is not Redis's doing: say so in the outcome's detail
 */
static void
note_broker_exit(RedisCall *call, const Link *link)
{
	int			pid;

	if (link->ctx != NULL && redis_broker_exited(link->ctx->fd, &pid))
		snprintf(call->outcome.detail, sizeof(call->outcome.detail),
				 "The redsem broker (process %d) that served this link exited; unless the server is shutting down, it starts another.",
				 pid);
}

/*
 * Fill the call's outcome from link's failure (status), and drop the link:
 * a reply may still be owed on it.  A connection to Redis (not the
 * broker's link) closed before anything was answered on it is of an
 * address where nothing serves (no_server), as a refused connect is: a
 * proxy in front of a Redis that is down accepts, then closes.
 */
static void
connection_failed(RedisCall *call, Link *link, RedisStatus status, int timeout_ms)
{
	(void) redis_note(&call->outcome, status, "%s",
					  link->ctx->err ? redis_context_error(link->ctx) : "");
	call->outcome.no_server = (status == RS_LOST && !link->answered &&
							   !redsem_broker_wanted());
	call->outcome.timeout_ms = timeout_ms;
	if (status == RS_TIMED_OUT && redsem_broker_wanted())
		(void) redis_broker_stopped(link->ctx->fd, &call->outcome.broker_stopped);
	if (status == RS_LOST)
	{
		char		before[sizeof(call->outcome.detail)];

		strlcpy(before, call->outcome.detail, sizeof(before));
		redis_salvage_error_line(call, link->ctx);
		/* (an error line the broker wrote before it went says more) */
		if (redsem_broker_wanted() && strcmp(call->outcome.detail, before) == 0)
			note_broker_exit(call, link);
	}
	disconnect_link(link);
}

/* In a cluster, the slot of command argv's key; -1 without one */
static int
command_slot(int argc, const char **argv)
{
	const char *key = cluster_enabled() ? cluster_command_key(argc, argv) : NULL;

	return key ? cluster_key_slot(key, strlen(key)) : -1;
}

/* True if link owes a reply of a command of slot */
static bool
owes_slot(const Link *link, int slot)
{
	for (int i = 0; i < link->n_owed; i++)
		if (link->owed[i].slot == slot)
			return true;
	return false;
}

/* The handler of a reply that came too late for its call: dropped */
static void
drop_late_reply(void *arg, redisReply *reply, const RedisOutcome *outcome)
{
}

/*
 * For a call that asked for it (owe_late_reply): its one command timed out
 * on a link that owed nothing before it, so its reply is still to come and
 * nothing else is wrong with the link.  Leave that reply owed (read and
 * dropped if it has come by the link's next use; if not, the link is
 * dropped then: owes_late_reply) rather than drop a connection to a Redis
 * that is merely far; the call's outcome says it timed out.  False if the
 * link cannot owe it (the caller then drops the link).
 */
static bool
owe_late_reply(RedisCall *call, Link *link, int timeout_ms)
{
	if (!call->owe_late_reply || link->ctx == NULL || link->ctx->err ||
		link->n_owed != 0)
		return false;
	link->in_flight = false;
	link->owed[0].handler = drop_late_reply;
	link->owed[0].arg = NULL;
	link->owed[0].slot = -1;
	link->n_owed = 1;
	(void) redis_note(&call->outcome, RS_TIMED_OUT,
					  "the reply is read later, the connection kept");
	call->outcome.timeout_ms = timeout_ms;
	return true;
}

/*
 * True if link still owes a late reply (owe_late_reply) that has not come
 * by its next use: Redis is slow to answer, and a command sent behind it
 * would wait as long (the keeper's refreshes), so the link is dropped
 * instead, as if the late call had dropped it
 */
static bool
owes_late_reply(const Link *link)
{
	for (int i = 0; i < link->n_owed; i++)
		if (link->owed[i].handler == drop_late_reply)
			return true;
	return false;
}

/*
 * Read the replies owed on link, by deadline, and hand each to its
 * handler.  A failure to read closes the link (which fails the rest); the
 * caller's call is not charged with it.
 */
static void
settle_owed(const RedisCall *call, Link *link, TimestampTz deadline)
{
	RedisCall	mine = *call;
	RedisStatus status;

	if (link->ctx == NULL || link->n_owed == 0)
		return;
	status = exchange(&mine, link, deadline, false, true, 0, NULL);
	if (status != RS_OK)
		connection_failed(&mine, link, status, 0);
}

/* True if the socket has input (or EOF, or an error) to read now */
static bool
input_waiting(int fd)
{
	char		b;

	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0 ||
		!(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/*
 * Hand over the owed replies that have come on link, without waiting for
 * the others (a link found broken fails its replies)
 */
static void
poll_owed(Link *link)
{
	while (link->ctx != NULL && link->n_owed > 0)
	{
		void	   *r = NULL;

		if (redisGetReplyFromReader(link->ctx, &r) != REDIS_OK)
			disconnect_link(link);
		else if (r != NULL)
			deliver_read(link, (redisReply *) r);
		else if (!input_waiting(link->ctx->fd))
			break;
		else if (redisBufferRead(link->ctx) != REDIS_OK)
			disconnect_link(link);
	}
}

/* poll_owed on every link */
void
redis_poll_deferred(void)
{
	HOLD_INTERRUPTS();
	for (int node = 0; node < CLUSTER_MAX_NODES; node++)
		poll_owed(&links[node]);
	RESUME_INTERRUPTS();
}

/*
 * True if a command may go out on link behind the replies it still owes,
 * without the idle look of connection_is_stale (the bytes waiting are
 * those replies): it carried a command moments ago, under the settings in
 * force, and has not broken.
 */
static bool
usable_behind_owed(Link *link)
{
	return link->ctx != NULL && link->n_owed > 0 && !link->in_flight &&
		!link->ctx->err && link->generation == redsem_guc_generation_now() &&
		!link_left_behind(link);
}

/*
 * Make sure link is usable, opening it if need be.  A link that still owes
 * replies once those that came are handed over is used as it is
 * (usable_behind_owed), and exchange() reads the owed replies before the
 * new command's.  If its settings changed or it broke, the owed replies
 * are read first, and the link is replaced.
 */
static bool
ensure_connection(RedisCall *call, Link *link, TimestampTz deadline)
{
	if (link->ctx != NULL && link->n_owed > 0)
	{
		poll_owed(link);
		if (owes_late_reply(link))
			disconnect_link(link);
		else if (usable_behind_owed(link))
		{
			elog(DEBUG2, "redsem: a command goes out behind %d replies still owed",
				 link->n_owed);
			return true;
		}
		else
			settle_owed(call, link, deadline);
	}
	if (link->ctx != NULL && connection_is_stale(link))
		disconnect_link(link);
	if (link->ctx != NULL)
		return true;
	return open_connection(call, link, deadline);
}

/*
 * True if outcome is the broker's answer to a request it did not send on,
 * having ended the link (one of brokerlink.h's reasons), or the backend's
 * own after the broker refused a link's password and the password files
 * changed since (REDSEM_BROKER_RELINK): sent again in any mode
 */
static bool
broker_says_retry(const RedisOutcome *outcome)
{
	static const char *const reasons[] = {
		REDSEM_BROKER_RETRY, REDSEM_BROKER_MOVED,
		REDSEM_BROKER_REFUSED, REDSEM_BROKER_RELINK
	};

	if (!redsem_broker_wanted() || outcome->status != RS_UNAVAILABLE)
		return false;
	for (size_t i = 0; i < lengthof(reasons); i++)
		if (strstr(outcome->detail, reasons[i]) != NULL)
			return true;
	return false;
}

/*
 * Through sentinels or in a cluster, a command refused because the server
 * is no primary now (READONLY, CLUSTERDOWN, TRYAGAIN and the like: the
 * command was not run), or whose node could not be reached, is sent again
 * until the deadline: to the primary the sentinels name next, or to the
 * node the cluster redirects to; so is one the broker did not send on
 * (broker_says_retry).  True after pausing, if it should be; a link ended
 * for a changed password file is made again at once (nothing to wait
 * out), so that a short wait does not end in that reason, unless the last
 * such was less than a pause ago.
 */
static bool
follow_failover(RedisCall *call, TimestampTz deadline)
{
	static TimestampTz relinked_at = 0;
	TimestampTz now = redsem_now();
	bool		at_once = false;

	if (!(sentinel_enabled() || cluster_enabled() || broker_says_retry(&call->outcome)) ||
		!(call->outcome.status == RS_UNAVAILABLE ||
		  (cluster_enabled() && call->outcome.status == RS_CONNECT_FAILED)) ||
		redis_past(deadline))
		return false;
	/* (at once at most every SENTINEL_RETRY_MS: a file rewritten on and on) */
	if (strstr(call->outcome.detail, REDSEM_BROKER_RELINK) != NULL)
	{
		at_once = relinked_at == 0 ||
			TimestampDifferenceExceeds(relinked_at, now, SENTINEL_RETRY_MS);
		relinked_at = now;
	}
	if (!at_once)
		return redis_pause_to_retry(SENTINEL_RETRY_MS, deadline, call->interruptible);
	return !redis_past(deadline);
}

/* The node of the command sent last (WAIT must follow it) */
static int	last_node = -1;

/*
 * For exec_routed's keep_errors: true if an error reply read on link goes
 * back to the caller as it is (dropping the link if it is no use any
 * more); false if it is a failover to follow (through sentinels or in a
 * cluster).
 */
static bool
keep_error_reply(Link *link, const redisReply *reply)
{
	RedisOutcome o;
	bool		drop = redis_reply_outcome(reply, &o);

	if (o.status == RS_UNAVAILABLE &&
		(cluster_enabled() || sentinel_enabled() || broker_says_retry(&o)))
		return false;
	if (drop)
		disconnect_link(link);
	return true;
}

/* When each Cluster node last failed a pipeline of this process, or 0 */
static TimestampTz node_failed_at[CLUSTER_MAX_NODES];

/* Order nodes (a list of node numbers) so that those that failed go last */
static void
order_nodes_by_health(int *nodes, int count)
{
	for (int i = 1; i < count; i++)
	{
		int			node = nodes[i];
		int			j = i;

		for (; j > 0 && node_failed_at[nodes[j - 1]] > node_failed_at[node]; j--)
			nodes[j] = nodes[j - 1];
		nodes[j] = node;
	}
}

/* True if an error reply is a cluster redirection (MOVED, ASK) */
static bool
is_redirect(const redisReply *reply)
{
	const char *msg = reply->str ? reply->str : "";

	return strncmp(msg, "MOVED ", 6) == 0 || strncmp(msg, "ASK ", 4) == 0;
}

/*
 * Redirections went round in a loop (a slot changing hands, the nodes not
 * yet agreeing): record it as a passing unavailability, which the caller
 * waits out until its deadline, and free the reply.
 */
static void
redirect_loop(RedisCall *call, redisReply *reply, int redirects)
{
	(void) redis_note(&call->outcome, RS_UNAVAILABLE, "redirected %d times, last: %s",
					  redirects, reply->str ? reply->str : "");
	call->outcome.timeout_ms = 0;
	freeReplyObject(reply);
}

/*
 * A Cluster pipeline's shares of time (see pipeline_by_node): the time
 * spent so far on each node (connecting, sending, waiting for its reply),
 * and the nodes that failed, which get no more of its commands.  A share
 * is charged only for time spent on its own node: a command redirected to
 * a node that hangs uses up that node's share, never the share of the node
 * that redirected it (whose other commands then still have theirs).
 * pipeline_by_node hands them to exec_routed; NULL for any other command.
 */
typedef struct NodeShares
{
	int			budget_ms;
	int64		spent_us[CLUSTER_MAX_NODES];
	bool		failed[CLUSTER_MAX_NODES];
} NodeShares;

/*
 * Charge node's share in shares (if any: NULL outside a Cluster pipeline)
 * with the time since began (a try on it)
 */
static void
node_share_charge(NodeShares *shares, int node, TimestampTz began)
{
	if (shares != NULL)
		shares->spent_us[node] += Max(redsem_now() - began, 0);
}

/*
 * Node failed within its share in shares: send it nothing more.  Unless
 * it was given no time (the call's had run out on other nodes), it goes
 * last in the next pipelines: a healthy node the budget did not reach must
 * not go behind the hung one that used it up.
 */
static void
node_share_failed(NodeShares *shares, int node, bool given_time)
{
	shares->failed[node] = true;
	if (given_time)
		node_failed_at[node] = redsem_now();
}

/*
 * Behind the broker in a cluster (the broker routes: cluster.c), the link a
 * command goes on.  Each link is a client of the broker, which keeps its
 * replies in order, so a reply a link still owes (a release sent at commit
 * without waiting, a reply too late for its call) delays its next command:
 * a command goes behind the replies owed for its own slot (a release and
 * the next acquire of one semaphore keep their order); else, sent without
 * waiting (deferred), on an open link with room (current first), or on an
 * open one anyway (redis_send_deferred reads what it owes first: a commit
 * of many releases opens no link); else on the first link that owes
 * nothing, opened if need be.  So a node that hangs on a reply owed delays
 * the calls of other slots only while they find no other link, as a
 * connection per node does in direct mode.  A command without a key stays
 * on current (WAIT must follow the grant it confirms).
 */
static int
broker_lane(int argc, const char **argv, int current, bool deferred)
{
	int			slot = command_slot(argc, argv);
	int			open = -1;

	if (slot < 0)
		return current >= 0 ? current : 0;
	for (int i = 0; i < CLUSTER_MAX_NODES; i++)
	{
		poll_owed(&links[i]);
		if (links[i].ctx != NULL && owes_slot(&links[i], slot))
			return i;
	}
	if (deferred && current >= 0 && links[current].ctx != NULL &&
		links[current].n_owed < LINK_MAX_OWED)
		return current;
	for (int i = 0; i < CLUSTER_MAX_NODES; i++)
		if (links[i].ctx != NULL)
		{
			if (links[i].n_owed == 0 || (deferred && links[i].n_owed < LINK_MAX_OWED))
				return i;
			if (open < 0)
				open = i;
		}
	if (deferred && open >= 0)
		return (current >= 0 && links[current].ctx != NULL) ? current : open;
	for (int i = 0; i < CLUSTER_MAX_NODES; i++)
		if (links[i].ctx == NULL)
			return i;
	return 0;
}

/*
 * The node a command goes to: in a cluster, the one serving its key (or
 * current, for a command without one); the server, node 0, otherwise;
 * behind the broker in a cluster, the link (broker_lane)
 */
static int
command_node(int argc, const char **argv, int current, bool deferred)
{
	if (cluster_enabled() && redsem_broker_wanted())
		return broker_lane(argc, argv, current, deferred);
	return cluster_enabled() ? cluster_node_for(argc, argv, current) : 0;
}

/*
 * One command on its way to where it belongs (exec_routed): what it is and
 * its bounds, fixed; then where it is, which each try moves on.  A single
 * Redis server is node 0, which never redirects.
 */
typedef struct Route
{
	RedisCall  *call;
	int			argc;
	const char **argv;
	const size_t *argvlen;
	TimestampTz deadline;		/* the whole command's */
	int			timeout_ms;		/* the wait it allows, for messages */
	bool		keep_errors;	/* error replies go back as they are */
	NodeShares *shares;			/* a Cluster pipeline's, or NULL */

	int			node;			/* the node it goes to next */
	int			redirects;		/* followed since the last failover */
	bool		asking;			/* ASKING goes first (an ASK redirection) */
	TimestampTz until;			/* the end of this try */
	TimestampTz began;			/* when this try began (a share's charge) */
} Route;

/* What became of one try of a command on one node */
typedef enum RouteResult
{
	ROUTE_SERVED,				/* a reply: not an error, or an error kept */
	ROUTE_REDIRECTED,			/* MOVED or ASK: the route moved on */
	ROUTE_FAILED,				/* the call's outcome says why */
	ROUTE_SKIPPED				/* not sent: the node failed earlier in the
								 * pipeline */
} RouteResult;

/*
 * Start a try on the route's node, now: its deadline is the command's, or
 * in a Cluster pipeline what is left of the node's share (and timeout_ms
 * at most the share, for messages).  False, with the outcome filled, if
 * the node failed earlier in the pipeline.
 */
static bool
route_take_share(Route *r)
{
	NodeShares *shares = r->shares;

	r->until = r->deadline;
	r->began = 0;
	if (shares == NULL)
		return true;
	if (shares->failed[r->node])
	{
		r->call->outcome.timeout_ms = 0;
		r->call->outcome.node_plus1 = r->node + 1;
		return redis_note(&r->call->outcome, RS_LOST,
						  "not sent: the node failed earlier in the batch");
	}
	r->began = redsem_now();
	if (shares->budget_ms <= 0)
		return true;
	r->until = Min(r->deadline, r->began + Max((int64) shares->budget_ms * 1000 -
											   shares->spent_us[r->node], 0));
	r->timeout_ms = Min(r->timeout_ms, shares->budget_ms);
	return true;
}

/*
 * True unless the call's time had run out before the try of r began (on
 * other nodes): a node that used up its own share was given time
 */
static bool
route_given_time(const Route *r)
{
	return r->deadline > (r->began != 0 ? r->began : redsem_now());
}

/*
 * Make link usable for the try (a Cluster node out of reach is noted; not
 * one given no time: its slots stay known)
 */
static bool
route_connect(Route *r, Link *link)
{
	bool		given_time = route_given_time(r);

	if (ensure_connection(r->call, link, r->until))
		return true;
	if (cluster_enabled() && !redsem_broker_wanted() && given_time)
		cluster_node_failed(r->node);
	return false;
}

/*
 * Behind the broker, a redirection is followed on the same link (the
 * broker learnt the node from it, and routes): the route's node, or -1 if
 * msg is none
 */
static int
broker_redirect(Route *r, const char *msg)
{
	char		host[CLUSTER_HOST_MAX];
	int			slot;
	int			port;

	if (!cluster_parse_redirect(msg, &r->asking, &slot, host, &port))
		return -1;
	return r->node;
}

/*
 * Follow a redirection (MOVED, ASK; in a cluster, within the limit): the
 * route moves to the node it names, and the reply is freed.  False if the
 * error reply is not one to follow.
 */
static bool
route_redirect(Route *r, redisReply **reply)
{
	const char *msg = (*reply)->str ? (*reply)->str : "";
	int			next = -1;

	if (cluster_enabled() && r->redirects < CLUSTER_MAX_REDIRECTS)
		next = redsem_broker_wanted() ? broker_redirect(r, msg) : cluster_redirect(msg, &r->asking);
	if (next < 0)
	{
		r->asking = false;
		return false;
	}
	elog(DEBUG2, "redsem: %s: %s", r->argv[0], (*reply)->str);
	freeReplyObject(*reply);
	*reply = NULL;
	r->node = next;
	r->redirects++;
	route_changes++;
	return true;
}

/*
 * True if reply is the broker's refusal of the password link's header
 * carried (it could not open a connection with it: nothing was sent on)
 * while the session's password files say another now: a DBA rotated it
 * after the link was made, and the broker's connections that were open
 * then still work.  A new link, with the new password, is to be tried.
 */
static bool
broker_password_rotated(const Link *link, const redisReply *reply)
{
	RedisStatus status;
	const char *detail;

	return link->secrets != 0 && reply->type == REDIS_REPLY_ERROR && reply->str != NULL &&
		redis_broker_error(reply->str, &status, &detail) &&
		(status == RS_BAD_PASSWORD || status == RS_AUTH_FAILED) &&
		redis_broker_secrets_changed(link->secrets);
}

/*
 * Judge an error reply read on link: a redirection followed, a loop of
 * them (nodes that disagree for a moment: waited out like a failover), an
 * error kept for the caller, or the try's failure (the link dropped if it
 * is no use any more)
 */
static RouteResult
route_error_reply(Route *r, Link *link, redisReply **reply)
{
	bool		drop = false;

	if (route_redirect(r, reply))
		return ROUTE_REDIRECTED;
	if (broker_password_rotated(link, *reply))
	{
		elog(DEBUG1, "redsem: the broker refused the password of a link made before the password file changed; linking again");
		freeReplyObject(*reply);
		*reply = NULL;
		disconnect_link(link);
		(void) redis_note(&r->call->outcome, RS_UNAVAILABLE, "%s", REDSEM_BROKER_RELINK);
		return ROUTE_FAILED;
	}
	if (r->redirects >= CLUSTER_MAX_REDIRECTS && is_redirect(*reply))
	{
		redirect_loop(r->call, *reply, r->redirects);
		*reply = NULL;
		return ROUTE_FAILED;
	}
	if (r->keep_errors && keep_error_reply(link, *reply))
		return ROUTE_SERVED;
	/* an error reply is never of class RS_OK */
	(void) redis_absorb_error_reply(r->call, *reply, NULL, &drop);
	*reply = NULL;
	if (drop)
		disconnect_link(link);
	return ROUTE_FAILED;
}

/*
 * Send the command on link and read its reply, charging the node's share:
 * a reply that is not an error (which tells a cluster who serves its key),
 * an error reply judged, or connection trouble (the link dropped)
 */
static RouteResult
route_exchange(Route *r, Link *link, redisReply **reply)
{
	/* a late reply can be left owed only for one command on its own */
	bool		alone = !r->asking && link->n_owed == 0;
	RedisStatus status = send_and_receive(r->call, link, r->argc, r->argv,
										  r->argvlen, r->until, r->asking, reply);

	if (cluster_enabled() && !redsem_broker_wanted() && !r->asking && status == RS_OK &&
		(*reply)->type != REDIS_REPLY_ERROR)
		cluster_note_served(r->argc, r->argv, r->node);
	r->asking = false;
	node_share_charge(r->shares, r->node, r->began);
	if (status == RS_TIMED_OUT && alone &&
		owe_late_reply(r->call, link, r->timeout_ms))
	{
		link->owed[0].slot = command_slot(r->argc, r->argv);
		return ROUTE_FAILED;	/* the link kept, its reply owed */
	}
	if (status != RS_OK)
	{
		connection_failed(r->call, link, status, r->timeout_ms);
		return ROUTE_FAILED;
	}
	if ((*reply)->type == REDIS_REPLY_ERROR)
		return route_error_reply(r, link, reply);
	return ROUTE_SERVED;
}

/* A failed try on link: the outcome names its node, its share is closed */
static void
route_failed(Route *r, Link *link)
{
	r->call->outcome.node_plus1 = outcome_node(link);
	if (r->shares != NULL)
	{
		node_share_charge(r->shares, link_node(link), r->began);
		node_share_failed(r->shares, link_node(link), route_given_time(r));
	}
}

/*
 * A try over a link opened, or after a redirection followed, since the
 * call's fresh_since sends its fresh_arg in place of argv[fresh_argi]
 * (once: the copy stays for later tries)
 */
static void
route_fresh_arg(Route *r)
{
	const char **argv;
	size_t	   *argvlen = NULL;
	int			i = r->call->fresh_argi;

	if (i <= 0 || i >= r->argc || route_changes == r->call->fresh_since ||
		r->argv[i] == r->call->fresh_arg)
		return;
	argv = palloc(sizeof(char *) * r->argc);
	memcpy(argv, r->argv, sizeof(char *) * r->argc);
	argv[i] = r->call->fresh_arg;
	if (r->argvlen != NULL)
	{
		argvlen = palloc(sizeof(size_t) * r->argc);
		memcpy(argvlen, r->argvlen, sizeof(size_t) * r->argc);
		argvlen[i] = strlen(r->call->fresh_arg);
	}
	r->argv = argv;
	r->argvlen = argvlen;
}

/* One try of the command on the route's node: share, link, exchange */
static RouteResult
route_try(Route *r, redisReply **reply)
{
	Link	   *link = &links[r->node];
	RouteResult result;

	described_node = r->node;
	*reply = NULL;
	if (!route_take_share(r))
		return ROUTE_SKIPPED;
	if (!route_connect(r, link))
		result = ROUTE_FAILED;
	else
	{
		route_fresh_arg(r);
		r->call->fresh_sent = r->call->fresh_argi > 0 && r->call->fresh_argi < r->argc &&
			r->argv[r->call->fresh_argi] == r->call->fresh_arg;
		result = route_exchange(r, link, reply);
	}
	if (result == ROUTE_FAILED)
		route_failed(r, link);
	return result;
}

/*
 * After a failed try: true if the command goes again, after a pause (a
 * failover followed, see follow_failover), to the node that serves it now
 */
static bool
route_again(Route *r)
{
	if (!follow_failover(r->call, r->until))
		return false;
	r->node = command_node(r->argc, r->argv, r->node, false);
	r->redirects = 0;			/* a limit per attempt */
	return true;
}

/*
 * Send one command to where it belongs, following cluster redirections
 * (MOVED, ASK) and failovers (see follow_failover), until deadline, and
 * within its node's share of shares (a Cluster pipeline's; else NULL).
 * Returns true with its reply; an error reply is returned as such when
 * keep_errors, else absorbed into the call's outcome (false).  False with
 * the outcome on connection trouble.  Never raises but on interrupts.
 */
static bool
exec_routed(RedisCall *call, int argc, const char **argv,
			const size_t *argvlen, TimestampTz deadline, int timeout_ms,
			bool keep_errors, NodeShares *shares, redisReply **reply)
{
	Route		r = {
		.call = call,
		.argc = argc,
		.argv = argv,
		.argvlen = argvlen,
		.deadline = deadline,
		.timeout_ms = timeout_ms,
		.keep_errors = keep_errors,
		.shares = shares,
	};
	RouteResult result;

	r.node = command_node(argc, argv, last_node, false);
	do
		result = route_try(&r, reply);
	while (result == ROUTE_REDIRECTED ||
		   (result == ROUTE_FAILED && route_again(&r)));
	if (result == ROUTE_SKIPPED)
		return false;
	last_node = r.node;
	return result == ROUTE_SERVED;
}

/*
 * Start a call: clear its outcome and fix its deadline (DT_NOEND: the
 * command timeout plus any extra wait, from now).  *timeout_ms is the wait
 * that deadline allows, for messages.
 */
static TimestampTz
begin_call(RedisCall *call, int *timeout_ms)
{
	call->outcome.status = RS_OK;
	call->outcome.timeout_ms = 0;
	call->outcome.detail[0] = '\0';
	call->outcome.node_plus1 = 0;
	if (call->deadline == DT_NOEND)
	{
		TimestampTz until;

		*timeout_ms = redsem_command_timeout_ms + call->extra_wait_ms;
		until = TimestampTzPlusMilliseconds(redsem_now(), *timeout_ms);
		if (call->end_by == 0 || until <= call->end_by)
			return until;
		*timeout_ms = (int) Min(redis_ms_until(call->end_by), PG_INT32_MAX);
		return call->end_by;
	}
	*timeout_ms = (int) Min(redis_ms_until(call->deadline), PG_INT32_MAX);
	return call->deadline;
}

/*
 * The core: send one command and return its reply in *reply (the caller
 * frees it with freeReplyObject).  Connects first if need be.  Returns
 * true with a reply that is not an error; otherwise false, with the
 * failure classified in call->outcome, never raised (the operation that
 * made the call reports it).  Holds interrupts off unless the call is interruptible, and ends
 * by the call's deadline (redsem.command_timeout plus extra_wait_ms from
 * now, when none is given).
 */
bool
redis_exec(RedisCall *call, int argc, const char **argv,
		   const size_t *argvlen, redisReply **reply)
{
	int			timeout_ms;
	TimestampTz deadline = begin_call(call, &timeout_ms);
	bool		ok;

	*reply = NULL;
	if (!call->interruptible)
		HOLD_INTERRUPTS();
	ok = exec_routed(call, argc, argv, argvlen, deadline, timeout_ms, false,
					 NULL, reply);
	if (!call->interruptible)
		RESUME_INTERRUPTS();
	return ok;
}

/*
 * Send one command without waiting for its reply: the reply is read before
 * the link's next use (or at redis_settle_deferred), and handed to
 * handler(arg, ...) then; if the link closes first, handler is told so.
 * Returns true once the command is written (handler will be called exactly
 * once); false, with the failure in call->outcome and handler never called,
 * if it could not be.  An interrupt that unwinds the write drops the link
 * (the command may or may not have gone) and never calls handler.  No
 * redirections are followed: an error reply goes to handler.
 */
bool
redis_send_deferred(RedisCall *call, int argc, const char **argv,
					RedisReplyHandler handler, void *arg)
{
	int			timeout_ms;
	TimestampTz deadline = begin_call(call, &timeout_ms);
	RedisStatus status = RS_OK;
	int			node;
	Link	   *link;
	bool		ok;

	if (!call->interruptible)
		HOLD_INTERRUPTS();
	node = command_node(argc, argv, last_node, true);
	link = &links[node];
	described_node = node;
	if (link->ctx != NULL && link->n_owed == LINK_MAX_OWED)
		settle_owed(call, link, deadline);
	/* behind replies still owed, the command goes out without a poll */
	ok = usable_behind_owed(link) || ensure_connection(call, link, deadline);
	if (ok && !link_append(link, argc, argv, NULL))
		status = RS_LOST;
	else if (ok)
		status = exchange(call, link, deadline, true, false, 0, NULL);
	if (ok && status != RS_OK)
		connection_failed(call, link, status, timeout_ms);
	else if (ok)
	{
		link->owed[link->n_owed].handler = handler;
		link->owed[link->n_owed].arg = arg;
		link->owed[link->n_owed].slot = command_slot(argc, argv);
		link->n_owed++;
	}
	if (!ok)
		call->outcome.node_plus1 = outcome_node(link);
	last_node = node;
	if (!call->interruptible)
		RESUME_INTERRUPTS();
	return ok && status == RS_OK;
}

/*
 * Read every reply owed on any link (see redis_send_deferred), by
 * deadline; those not read by then stay owed.
 */
void
redis_settle_deferred(TimestampTz deadline, bool interruptible)
{
	RedisCall	call;

	redis_call_init(&call, deadline, interruptible, 0);
	if (!interruptible)
		HOLD_INTERRUPTS();
	for (int node = 0; node < CLUSTER_MAX_NODES; node++)
		if (links[node].ctx != NULL && links[node].n_owed > 0 && !redis_past(deadline))
			settle_owed(&call, &links[node], deadline);
	if (!interruptible)
		RESUME_INTERRUPTS();
}

/* Send n commands at once on link and read their replies, in order */
static RedisStatus
pipeline_exchange(RedisCall *call, Link *link, int n, const RedisCommand *cmds,
				  TimestampTz deadline, redisReply **replies)
{
	for (int i = 0; i < n; i++)
		if (!link_append(link, cmds[i].argc, cmds[i].argv, NULL))
			return RS_LOST;
	return exchange(call, link, deadline, true, true, n, replies);
}

/*
 * One command of a Cluster pipeline (pipeline_by_node): the node it goes to
 * in the next pass, and whether it still waits for one, or for a try on its
 * own after the passes (exec_routed).
 */
typedef struct PipedCommand
{
	int			node;
	bool		asking;			/* ASKING goes first (an ASK redirection) */
	int			redirects;		/* followed so far */
	bool		pending;		/* goes in the next pass */
	bool		alone;			/* goes on its own after the passes */
} PipedCommand;

/* A Cluster pipeline under way: its bounds, shares and first failure */
typedef struct Pipeline
{
	RedisCall  *call;
	int			n;
	const RedisCommand *cmds;
	PipedCommand *pc;
	redisReply **replies;
	TimestampTz deadline;
	int			timeout_ms;
	NodeShares	shares;
	RedisOutcome failure;		/* the first failure */
	bool		all;			/* no failure so far */
} Pipeline;

/* Keep the call's outcome as the pipeline's failure, if it is the first */
static void
pipeline_failed(Pipeline *p)
{
	if (p->all)
		p->failure = p->call->outcome;
	p->all = false;
}

/*
 * Judge reply j of a node's pass, for command i, which went to node: a
 * reply for the caller (an error kept as it is), a redirection to follow
 * in the next pass (MOVED, ASK; the reply freed), or, for an error to wait
 * out (CLUSTERDOWN, TRYAGAIN...) or a loop of redirections, a try on its
 * own after the passes, as any single command (exec_routed).
 */
static void
pipeline_reply(Pipeline *p, Link *link, int i, redisReply *reply)
{
	PipedCommand *pc = &p->pc[i];
	bool		asked = pc->asking;
	bool		ask;
	int			next;

	pc->asking = false;
	if (reply->type != REDIS_REPLY_ERROR)
	{
		if (!asked)
			cluster_note_served(p->cmds[i].argc, p->cmds[i].argv, pc->node);
		p->replies[i] = reply;
		pc->pending = false;
		return;
	}
	if (is_redirect(reply) && pc->redirects < CLUSTER_MAX_REDIRECTS &&
		(next = cluster_redirect(reply->str, &ask)) >= 0)
	{
		elog(DEBUG2, "redsem: %s: %s", p->cmds[i].argv[0], reply->str);
		freeReplyObject(reply);
		pc->node = next;
		pc->asking = ask;
		pc->redirects++;
		return;
	}
	if (!is_redirect(reply) && keep_error_reply(link, reply))
	{
		p->replies[i] = reply;
		pc->pending = false;
		return;
	}
	freeReplyObject(reply);
	pc->pending = false;
	pc->alone = true;
}

/*
 * One pass of the pipeline on node: every command still pending for it
 * (each behind ASKING if redirected so) in one write, and their replies
 * read in one round trip, within the node's share.  A node that failed
 * earlier gets nothing (its commands say "not sent"); one that fails now
 * fails its share, and the commands it did not answer go where the slot
 * map says next (nowhere, if it is still that node: "not sent").
 */
static void
pipeline_node_pass(Pipeline *p, int node)
{
	Link	   *link = &links[node];
	Route		r = {
		.call = p->call,
		.deadline = p->deadline,
		.timeout_ms = p->timeout_ms,
		.shares = &p->shares,
		.node = node,
	};
	int		   *which = palloc(sizeof(int) * 2 * p->n);
	redisReply **got = palloc0(sizeof(redisReply *) * 2 * p->n);
	const char *asking_argv[] = {"ASKING"};
	int			count = 0;
	RedisStatus status = RS_OK;

	described_node = node;
	last_node = node;
	if (!route_take_share(&r))
	{
		pipeline_failed(p);
		for (int i = 0; i < p->n; i++)
			if (p->pc[i].pending && p->pc[i].node == node)
				p->pc[i].pending = false;
		pfree(which);
		pfree(got);
		return;
	}
	if (!route_connect(&r, link))
		status = RS_CONNECT_FAILED;
	for (int i = 0; i < p->n && status == RS_OK; i++)
	{
		if (!p->pc[i].pending || p->pc[i].node != node)
			continue;
		if (p->pc[i].asking)
		{
			which[count++] = -1;
			if (!link_append(link, 1, asking_argv, NULL))
				status = RS_LOST;
		}
		which[count++] = i;
		if (status == RS_OK &&
			!link_append(link, p->cmds[i].argc, p->cmds[i].argv, NULL))
			status = RS_LOST;
	}
	if (status == RS_OK)
	{
		p->call->round_trips++;
		status = exchange(p->call, link, r.until, true, true, count, got);
		node_share_charge(&p->shares, node, r.began);
		if (status != RS_OK)
			connection_failed(p->call, link, status, r.timeout_ms);
	}
	else if (status == RS_LOST)
		connection_failed(p->call, link, status, r.timeout_ms);
	if (status != RS_OK)
	{
		route_failed(&r, link);
		pipeline_failed(p);
	}
	/* the replies read (all of them, or those before a failure) */
	for (int j = 0; j < count; j++)
	{
		if (got[j] == NULL)
			continue;
		if (which[j] < 0)
			freeReplyObject(got[j]);
		else
			pipeline_reply(p, link, which[j], got[j]);
	}
	/* those the node did not answer go where the slot map says now */
	for (int i = 0; i < p->n && status != RS_OK; i++)
		if (p->pc[i].pending && p->pc[i].node == node)
		{
			p->pc[i].node = command_node(p->cmds[i].argc, p->cmds[i].argv, node, false);
			p->pc[i].asking = false;
		}
	pfree(which);
	pfree(got);
}

/*
 * A pipeline in a Redis Cluster, whose commands may belong to different
 * nodes: in passes, each node's pending commands in one write and their
 * replies in one round trip (as far as the slot map knows them; nodes
 * that failed recently last), and each node within its own share of the
 * time (call->node_budget_ms, from the moment the pipeline first turns to
 * it, redirections included), so that a hung node costs the others at
 * most that share, and nothing once it has failed.  A redirected command
 * (MOVED, ASK) goes to the node named in the next pass, with that node's
 * others; a command refused for a while (CLUSTERDOWN, TRYAGAIN) or
 * redirected in a loop goes on its own after the passes (exec_routed; its
 * first refusal closes its node's share for the batch, so it is not waited
 * out: the keeper's next round tries it again).  A command whose node
 * fails keeps a NULL reply, and so do the later ones for that node (not
 * sent); the others go on.  Returns false if any failed (the first
 * failure in call->outcome, naming its node).
 */
static bool
pipeline_by_node(RedisCall *call, int n, const RedisCommand *cmds,
				 TimestampTz deadline, int timeout_ms, redisReply **replies)
{
	Pipeline	p;

	/* (the keeper's only, which is never behind the broker: its routing is its own) */
	Assert(!redsem_broker_wanted());
	memset(&p, 0, sizeof(p));
	p.call = call;
	p.n = n;
	p.cmds = cmds;
	p.pc = palloc0(sizeof(PipedCommand) * Max(n, 1));
	p.replies = replies;
	p.deadline = deadline;
	p.timeout_ms = timeout_ms;
	p.shares.budget_ms = call->node_budget_ms;
	p.failure.status = RS_OK;
	p.all = true;
	for (int i = 0; i < n; i++)
	{
		p.pc[i].node = cluster_node_for(cmds[i].argc, cmds[i].argv, last_node);
		p.pc[i].pending = true;
	}
	if (!call->interruptible)
		HOLD_INTERRUPTS();
	for (int pass = 0; pass <= CLUSTER_MAX_REDIRECTS; pass++)
	{
		int			nodes[CLUSTER_MAX_NODES];
		int			count = 0;

		for (int i = 0; i < n; i++)
		{
			bool		seen = false;

			if (!p.pc[i].pending)
				continue;
			for (int k = 0; k < count && !seen; k++)
				seen = (nodes[k] == p.pc[i].node);
			if (!seen)
				nodes[count++] = p.pc[i].node;
		}
		if (count == 0)
			break;
		order_nodes_by_health(nodes, count);
		for (int k = 0; k < count; k++)
			pipeline_node_pass(&p, nodes[k]);
	}
	for (int i = 0; i < n; i++)
	{
		if (!p.pc[i].alone && !p.pc[i].pending)
			continue;
		call->round_trips++;
		if (!exec_routed(call, cmds[i].argc, cmds[i].argv, NULL, deadline,
						 timeout_ms, true, &p.shares, &replies[i]))
			pipeline_failed(&p);
	}
	if (!call->interruptible)
		RESUME_INTERRUPTS();
	pfree(p.pc);
	call->outcome = p.failure;
	return p.all;
}

/*
 * Pipelining: send n commands in one write and read their n replies, one
 * round trip for all.  Returns true when every reply came back; each
 * replies[i] (freed by the caller) may be an error reply, for the caller to
 * judge with redis_reply_outcome().  Returns false, with the failure in
 * call->outcome (never raised), when the connection failed; the replies
 * read until then are kept, the rest are NULL.  An error reply that makes
 * the connection useless (READONLY...) drops it after all replies are read.
 */
bool
redis_exec_pipeline(RedisCall *call, int n, const RedisCommand *cmds,
					redisReply **replies)
{
	int			timeout_ms;
	TimestampTz deadline = begin_call(call, &timeout_ms);
	Link	   *link = &links[0];
	RedisStatus status = RS_OK;
	bool		ok;

	memset(replies, 0, sizeof(redisReply *) * n);
	call->round_trips = 0;
	if (cluster_enabled())
		return pipeline_by_node(call, n, cmds, deadline, timeout_ms, replies);
	if (!call->interruptible)
		HOLD_INTERRUPTS();
	described_node = 0;
	ok = ensure_connection(call, link, deadline);
	if (ok)
	{
		call->round_trips = 1;
		status = pipeline_exchange(call, link, n, cmds, deadline, replies);
		if (status != RS_OK)
			connection_failed(call, link, status, timeout_ms);
		else
		{
			for (int i = 0; i < n && link->ctx != NULL; i++)
			{
				RedisOutcome o;

				if (redis_reply_outcome(replies[i], &o))
					disconnect_link(link);
			}
		}
		ok = (status == RS_OK);
	}
	if (!call->interruptible)
		RESUME_INTERRUPTS();
	return ok;
}

static char *
outcome_target(const RedisOutcome *o)
{
	return o->node_plus1 > 0 ?
		psprintf("%s:%d (Redis Cluster)", cluster_node_host(node_address(o->node_plus1 - 1)),
				 cluster_node_port(node_address(o->node_plus1 - 1))) :
		redis_target_description();
}

/* One sentence saying why a call failed, for log lines and redsem_held() */
char *
redis_outcome_text(const RedisOutcome *o)
{
	return redis_outcome_sentence(o, outcome_target(o));
}

/*
 * Report a failed call at elevel (ERROR raises), with the SQLSTATE of its
 * class (report.c); the message names the target that failed (its Cluster
 * node, if the outcome says which).
 */
void
redis_report(int elevel, const RedisOutcome *o)
{
	char	   *target = outcome_target(o);

	redis_report_at(elevel, o, target);
	pfree(target);
}
