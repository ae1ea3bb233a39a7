/*
 * broker_loop.c
 *		The redsem broker's work (in the child broker.c forks): accept the
 *		links of client backends (brokerlink.c), forward their requests to
 *		Redis over a few connections it owns, and hand each reply back.
 *
 * One WaitEventSet holds the latch, postmaster death, the listening socket,
 * every client and every upstream connection; it is rebuilt when sockets
 * come and go (a set has no removal before PostgreSQL 17).  Nothing
 * blocks: an upstream connection is opened by a forked opener
 * (broker_open.c), its clients' requests held meanwhile (a TLS one's
 * opener stays as its relay, a TLS session not being a thing that can be
 * handed over).
 *
 * Per client: a hiredis reader parsing its requests (RESP arrays of bulk
 * strings), an output buffer, and its target (REDSEM.TARGET, its first
 * request, that has no reply).  Per target: one shared upstream, set up by
 * link.c (AUTH, SELECT, TLS, the name), whose FIFO says which client each
 * outstanding command is for; a client's commands go in the order sent,
 * and ASKING goes with the command after it.  BLPOP (a waiter's wait)
 * goes on a side connection of its target, from a pool, so that it does
 * not stall the others; the client's later requests wait for its reply,
 * so replies come back in order.  WAIT goes on the shared upstream (it
 * waits for the writes of the connection it is sent on), which then
 * becomes a side connection carrying it, an idle side one (or a new one)
 * taking the shared role: nobody else waits behind a WAIT.
 *
 * Failures: an upstream that breaks or does not answer in time is closed,
 * and with it every client that had a command outstanding on it and every
 * client bound to its target (each sees a connection lost, 08006, as with
 * a broken Redis connection); an upstream that cannot be opened is
 * answered as "-REDSEMBROKER <status> <detail>", which link.c turns back
 * into the status direct mode would have found.  Replies for a client that
 * left are dropped.
 */
#include "postgres.h"

#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include "hiredis.h"

#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "broker_cluster.h"
#include "broker_state.h"
#include "broker_wait.h"
#include "broker_loop.h"
#include "broker_open.h"
#include "brokerlink.h"
#include "clock.h"
#include "compat.h"
#include "conn.h"
#include "guc.h"
#include "link.h"
#include "profile.h"
#include "replycap.h"
#include "timing.h"

/* An upstream connection being opened by an opener (broker_open.c) */
typedef struct Opening
{
	SockKind	kind;			/* first: what the event's user data is */
	BrokerOpening o;			/* o.pid 0: a free slot */
	int			target;
	bool		side;
	bool		short_budget;	/* given less than the server's connect timeout */
	int			pos;
} Opening;

static Opening **openings;
static int	n_openings;
static int	listen_fd = -1;
/*
 * The wait set's room for more sockets, and its dead entries (of links
 * closed since it was made); the least room it is made with
 */
static int	wait_set_room = 0;
static int	wait_set_dead = 0;
#define BROKER_WAIT_SPARE	64
static int	wait_add(uint32 events, pgsocket fd, void *user_data);
static uint32 client_events(const Client *c);
/* Why new_upstream found none, not waiting for one: what its client is told */
static RedisOutcome no_upstream;
/* Until when the listener is left alone after accept failed (0: not) */
static TimestampTz accept_paused_until = 0;
/* ... for how long, last (doubled at each failure in a row) */
static int	accept_pause_ms = BROKER_ACCEPT_PAUSE_MS / 2;
/* When the broker last forked (an opener) */
static TimestampTz forked_at = 0;
static int	settings_fd = -1;	/* the supervisor's pipe (broker.c) */
static WaitEventSet *wait_set;

static void close_client(Client *c);
static bool target_connected(int t);
static void connections_gone(int t);
static void timeout_outcome(const Client *c, RedisOutcome *o);
static void add_last_open_words(RedisOutcome *o, const RedisOutcome *last);
static bool take_request(Client *c);
static void fail_upstream(Upstream *u, const char *why);
static void process_client(Client *c);
static void read_settings(void);

/*
 * Close a connection to Redis: its context, and so its relay for TLS (0:
 * none), reaped once it has ended (broker_open.c)
 */
static void
close_connection(redisContext *ctx, pid_t relay)
{
	redis_close_context(ctx);
	broker_reap_later(relay);
}

static void client_read(Client *c);
static bool take_request(Client *c);
/* The most requests of a link answer_failure answers one by one */
#define BROKER_ANSWER_DRAIN_MAX	64
static void drop_held(Client *c, int n);

/*
 * Answer a client that its target cannot be reached: the status and
 * words link.c found (never a secret: outcomes carry none), on one line
 * for each request it sent that was not sent on (those held, ASKING and
 * its command alike, and those it sent behind them), each read as its
 * reply (none would be read as a connection lost, perhaps applied); then
 * the link ends
 */
static void
answer_failure(Client *c, const RedisOutcome *o)
{
	char		line[320];
	int			len;
	int			n;

	/*
	 * (with replies still owed, an answer now would be read as theirs:
	 * close instead, a connection lost, whose commands may have been
	 * applied, as they may)
	 */
	if (c->outstanding > 0)
	{
		close_client(c);
		return;
	}
	len = snprintf(line, sizeof(line), "%s %d%s %s", REDSEM_BROKER_ERROR,
				   (int) o->status, o->no_server ? "+" : "", o->detail);

	len = Min(len, (int) sizeof(line) - 1);
	for (int i = 0; i < len; i++)
		if (line[i] == '\r' || line[i] == '\n')
			line[i] = ' ';
	n = c->n_held;
	drop_held(c, c->n_held);
	client_read(c);
	while (c->fd >= 0 && n < BROKER_ANSWER_DRAIN_MAX && take_request(c))
	{
		n++;
		drop_held(c, 1);
	}
	if (c->fd < 0)
		return;
	/* (more than a backend ever sends behind one: not answered, dropped) */
	if (n >= BROKER_ANSWER_DRAIN_MAX)
	{
		close_client(c);
		return;
	}
	for (int i = 0; i < Max(n, 1); i++)
		broker_out_line(c, '-', line, len);
	c->closing = true;
}

/* ---- clients ---- */

/* The client a pending command is for, or NULL if it has left since */
static Client *
pending_client(const Pending *p)
{
	Client	   *c;

	if (p->what != PEND_CLIENT)
		return NULL;			/* (the broker's own) */
	c = clients[p->client];
	return (c->fd >= 0 && c->generation == p->generation) ? c : NULL;
}

/* A free client slot (a new one if none) */
static Client *
free_client_slot(void)
{
	Client	   *c;

	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd < 0 && clients[i]->reader == NULL)
			return clients[i];
	clients = clients ? repalloc(clients, sizeof(Client *) * (n_clients + 1)) :
		MemoryContextAlloc(broker_cxt, sizeof(Client *));
	c = MemoryContextAllocZero(broker_cxt, sizeof(Client));
	c->kind = SOCK_CLIENT;
	c->index = n_clients;
	c->fd = -1;
	clients[n_clients++] = c;
	return c;
}


/* Take a new client on fd */
static void
add_client(int fd)
{
	Client	   *c = free_client_slot();

	c->fd = fd;
	c->generation++;
	c->reader = redisReaderCreate();
	if (c->reader == NULL)
		elog(ERROR, "out of memory");
	c->target = -1;
	c->home = c->ask_node = -1;
	c->after_asking = false;
	c->connect_timeout_ms = redsem_connect_timeout_ms;
	c->waiting = c->waiting_side = false;
	c->waiting_pool = -1;
	c->last_up = -1;
	c->outstanding = 0;
	c->on_side = c->in_pool = c->closing = c->process = false;
	c->reroute = NULL;
	c->n_held = 0;
	c->out_len = c->out_off = 0;
	c->pos = -1;
	if (wait_set != NULL && !set_dirty && wait_set_room > 0)
	{
		c->events = client_events(c);
		c->pos = wait_add(c->events, c->fd, c);
	}
	else
		set_dirty = true;
}

/* How many backends are linked now */
static int
live_clients(void)
{
	int			n = 0;

	for (int i = 0; i < n_clients; i++)
		n += clients[i]->fd >= 0;
	return n;
}

/* How many connections to Redis are open now */
static int
live_upstreams(void)
{
	int			n = 0;

	for (int i = 0; i < n_upstreams; i++)
		n += upstreams[i]->ctx != NULL;
	return n;
}

/* True (and *at set to now) if nothing was said since *at for BROKER_ACCEPT_LOG_MS */
static bool
log_due(TimestampTz *at)
{
	TimestampTz now = redsem_now();

	if (*at != 0 && !TimestampDifferenceExceeds(*at, now, BROKER_ACCEPT_LOG_MS))
		return false;
	*at = now;
	return true;
}

/*
 * Stop listening for BROKER_ACCEPT_PAUSE_MS after accept failed (errno
 * set): saying so at most every BROKER_ACCEPT_LOG_MS
 */
static void
pause_accepting(void)
{
	static TimestampTz logged_at = 0;
	int			save_errno = errno;
	TimestampTz now = redsem_now();
	bool		no_fds = save_errno == EMFILE || save_errno == ENFILE;

	if (log_due(&logged_at))
	{
		errno = save_errno;
		ereport(LOG,
				(errmsg("redsem broker could not accept a connection: %m"),
				 no_fds ? errdetail("The broker holds %d links to backends and %d connections to Redis.",
									live_clients(), live_upstreams()) : 0,
				 no_fds ? errhint("Raise the open-file limit of the PostgreSQL server (ulimit -n, or LimitNOFILE= in its systemd unit); the broker tries again every %d ms to %d ms meanwhile.",
								  BROKER_ACCEPT_PAUSE_MS, BROKER_ACCEPT_PAUSE_MAX_MS) : 0));
	}
	/* (doubled while it keeps failing: each pause and resume makes the wait set anew) */
	accept_pause_ms = Min(accept_pause_ms * 2, BROKER_ACCEPT_PAUSE_MAX_MS);
	accept_paused_until = TimestampTzPlusMilliseconds(now, accept_pause_ms);
	set_dirty = true;
}

/* Accept every waiting backend; a peer of another user is shut out */
static void
accept_clients(void)
{
	for (;;)
	{
		int			fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
		{
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
				errno != ECONNABORTED)
				pause_accepting();
			return;
		}
		accept_pause_ms = BROKER_ACCEPT_PAUSE_MS / 2;
		if (!redis_broker_peer_is_ours(fd))
		{
			ereport(LOG,
					(errmsg("redsem broker refused a connection from a process of another user")));
			close(fd);
			continue;
		}
		add_client(fd);
	}
}

/* True if every command pending on upstream u is client c's */
static bool
only_client_of(Upstream *u, Client *c)
{
	for (int k = 0; k < u->count; k++)
	{
		Client	   *o = pending_client(&u->fifo[(u->head + k) % u->cap]);

		if (o != NULL && o != c)	/* (NULL: one that left) */
			return false;
	}
	return true;
}

/*
 * Close the side connection that carries c's BLPOP: a BLPOP left blocking
 * for a client gone would take the next wake-up of its keys (Redis serves
 * the longest blocked first) and drop it; closed, Redis unblocks it without
 * popping anything, as when a backend's own connection closes.  A side
 * connection that also carries others' commands (a WAIT's, which took the
 * shared one) is left to answer them; c's replies are dropped.
 */
static void
close_side_of(Client *c)
{
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];
		int			t = u->target;

		if (u->ctx != NULL && u->side && !u->pool && u->count > 0 && only_client_of(u, c))
		{
			close_connection(u->ctx, u->relay);
			u->ctx = NULL;
			u->relay = 0;
			u->target = -1;
			while (u->count > 0)
				broker_fifo_pop(u);
			set_dirty = true;
			if (!target_connected(t))
				connections_gone(t);
		}
	}
}

/* Close a client's link; replies still owed to it will be dropped */
static void
close_client(Client *c)
{
	if (c->fd < 0)
		return;
	if (c->on_side)
		close_side_of(c);
	if (c->in_pool)
		broker_pool_leave(c);
	close(c->fd);
	c->fd = -1;
	c->generation++;
	for (int i = 0; i < c->n_held; i++)
		freeReplyObject(c->held[i]);
	c->n_held = 0;
	c->outstanding = 0;
	c->on_side = c->in_pool = false;
	c->waiting = c->waiting_side = false;
	/*
	 * (its entry in the wait set stays, dead: the kernel forgot the socket
	 * with its close, and an event naming it is ignored; the set is made
	 * anew once such entries are many)
	 */
	if (c->pos >= 0 && ++wait_set_dead > Max(BROKER_WAIT_SPARE, n_clients / 4))
		set_dirty = true;
	/*
	 * (an opener forked just now may not have closed its copy of the
	 * socket yet: the kernel would keep reporting its peer's close)
	 */
	if (c->pos >= 0 && redsem_now() < TimestampTzPlusMilliseconds(forked_at, BROKER_FORK_SETTLE_MS))
		set_dirty = true;
	c->pos = -1;
	/* the slot is reused only after the sweep (events may still name it) */
}

/* Write out what a client's output holds; close it if it is done */
static void
client_write(Client *c)
{
	while (c->fd >= 0 && c->out_off < c->out_len)
	{
		ssize_t		n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
							 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0)
		{
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return;
			close_client(c);
			return;
		}
		c->out_off += n;
	}
	c->out_off = c->out_len = 0;
	if (c->closing)
		close_client(c);
}

/* Close a client whose what (requests, replies) passed BROKER_CLIENT_BUFFER_MAX */
static void
close_overflowing(Client *c, const char *what)
{
	ereport(LOG,
			(errmsg("redsem broker closed a backend's link holding more than %d MB of %s",
					BROKER_CLIENT_BUFFER_MAX / (1024 * 1024), what)));
	close_client(c);
}

/* Read what a client sent into its reader; close it at EOF */
static void
client_read(Client *c)
{
	char		buf[16384];

	while (c->fd >= 0)
	{
		ssize_t		n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0)
		{
			if (redisReaderFeed(c->reader, buf, n) != REDIS_OK)
			{
				close_client(c);
				return;
			}
			if (c->reader->len - c->reader->pos > BROKER_CLIENT_BUFFER_MAX)
			{
				close_overflowing(c, "requests");
				return;
			}
			c->process = true;
			/* a short read drained the socket: the wait (level-triggered) says if more came */
			if ((size_t) n < sizeof(buf))
				return;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		close_client(c);
		return;
	}
}

/* ---- upstream connections ---- */

/* A free upstream slot (a new one if none) */
static Upstream *
free_upstream_slot(void)
{
	Upstream   *u;

	for (int i = 0; i < n_upstreams; i++)
		if (upstreams[i]->ctx == NULL && upstreams[i]->target < 0)
			return upstreams[i];
	upstreams = upstreams ? repalloc(upstreams, sizeof(Upstream *) * (n_upstreams + 1)) :
		MemoryContextAlloc(broker_cxt, sizeof(Upstream *));
	u = MemoryContextAllocZero(broker_cxt, sizeof(Upstream));
	u->kind = SOCK_UPSTREAM;
	u->index = n_upstreams;
	u->target = -1;
	upstreams[n_upstreams++] = u;
	return u;
}

/* True if header element i (of REDSEM.TARGET) is s */
static bool
header_is(const redisReply *cmd, int i, const char *s)
{
	return strcmp(cmd->element[i]->str, s) == 0;
}

/* True if target t is the one header cmd names */
static bool
target_is(const Target *t, const redisReply *cmd)
{
	const char *path = cmd->element[3]->str;
	const RedisProfile *p = &t->profile;

	return header_is(cmd, 1, t->host) && t->port == atoi(cmd->element[2]->str) &&
		(path[0] == '\0' ? t->path == NULL : (t->path != NULL && header_is(cmd, 3, t->path))) &&
		p->database == atoi(cmd->element[4]->str) && header_is(cmd, 5, p->user) &&
		header_is(cmd, 6, p->password) && p->tls == header_is(cmd, 7, "1") &&
		header_is(cmd, 8, p->tls_ca_file) && header_is(cmd, 9, p->tls_cert_file) &&
		header_is(cmd, 10, p->tls_key_file) && header_is(cmd, 11, p->tls_server_name) &&
		t->cluster == header_is(cmd, 13, "1") && header_is(cmd, 14, p->sentinels) &&
		header_is(cmd, 15, p->sentinel_master) && header_is(cmd, 16, p->sentinel_user) &&
		header_is(cmd, 17, p->sentinel_password);
}

/* A copy of header element i, in the broker's context */
static char *
header_copy(const redisReply *cmd, int i)
{
	return MemoryContextStrdup(broker_cxt, cmd->element[i]->str);
}

/* The target a REDSEM.TARGET header names, added if new */
static int
find_target(const redisReply *cmd)
{
	Target	   *t;
	int			i;

	for (i = 0; i < n_targets; i++)
		if (!targets[i].free && target_is(&targets[i], cmd))
			return i;
	i = broker_free_target_slot();
	t = &targets[i];
	memset(t, 0, sizeof(Target));
	t->host = header_copy(cmd, 1);
	t->port = atoi(cmd->element[2]->str);
	t->path = cmd->element[3]->str[0] != '\0' ? header_copy(cmd, 3) : NULL;
	t->profile.database = atoi(cmd->element[4]->str);
	t->profile.user = header_copy(cmd, 5);
	t->profile.password = header_copy(cmd, 6);
	t->profile.tls = header_is(cmd, 7, "1");
	t->profile.tls_ca_file = header_copy(cmd, 8);
	t->profile.tls_cert_file = header_copy(cmd, 9);
	t->profile.tls_key_file = header_copy(cmd, 10);
	t->profile.tls_server_name = header_copy(cmd, 11);
	t->cluster = header_is(cmd, 13, "1");
	t->profile.sentinels = header_copy(cmd, 14);
	t->profile.sentinel_master = header_copy(cmd, 15);
	t->profile.sentinel_user = header_copy(cmd, 16);
	t->profile.sentinel_password = header_copy(cmd, 17);
	t->shared = -1;
	return i;
}

/* Free target t's strings (a password among them) and its entry */
static void
free_target(int t)
{
	Target	   *target = &targets[t];
	RedisProfile *p = &target->profile;
	const char *strings[] = {target->host, target->path, p->user, p->password,
		p->tls_ca_file, p->tls_cert_file, p->tls_key_file, p->tls_server_name,
	p->sentinels, p->sentinel_master, p->sentinel_user, p->sentinel_password};

	broker_cluster_forget(t);
	for (int i = 0; i < (int) lengthof(strings); i++)
		if (strings[i] != NULL)
		{
			char	   *s = unconstify(char *, strings[i]);

			explicit_bzero(s, strlen(s));
			pfree(s);
		}
	memset(target, 0, sizeof(Target));
	target->free = true;
	target->shared = -1;
}

/*
 * Target t, for messages: its Unix socket, host:port, or the primary its
 * sentinels name (a static buffer)
 */
static const char *
target_text(int t)
{
	static char buf[MAXPGPATH + 1024];
	const RedisProfile *p = &targets[t].profile;

	if (p->sentinels[0] != '\0' && targets[t].primary[0] != '\0')
		snprintf(buf, sizeof(buf), "%s (primary \"%s\" of sentinels %s)",
				 targets[t].primary, p->sentinel_master, p->sentinels);
	else if (p->sentinels[0] != '\0')
		snprintf(buf, sizeof(buf), "primary \"%s\" of sentinels %s",
				 p->sentinel_master, p->sentinels);
	else if (targets[t].path != NULL)
		snprintf(buf, sizeof(buf), "unix socket \"%s\"", targets[t].path);
	else
		snprintf(buf, sizeof(buf), "%s:%d", targets[t].host, targets[t].port);
	return buf;
}

/* A new upstream connection of target t on ctx (a side one if side) */
static Upstream *
add_upstream(int t, bool side, redisContext *ctx, pid_t relay)
{
	Upstream   *u = free_upstream_slot();

	u->target = t;
	u->side = side;
	u->ctx = ctx;
	u->relay = relay;
	u->want_write = false;
	u->pos = -1;
	u->head = u->count = 0;
	u->idle_since = redsem_now();
	u->gen++;
	u->was_shared = false;
	u->pool = false;
	u->retired = false;
	/* (a shared one opened while another took the role stays a side one) */
	if (!side && targets[t].shared >= 0)
		u->side = true;
	else if (!side)
	{
		targets[t].shared = u->index;
		u->was_shared = true;
	}
	set_dirty = true;
	return u;
}

/*
 * True if an open of target t that ran out of a time a session gave it,
 * shorter than the server's connect timeout, says the node failed: only
 * once such opens have gone on failing, none opening, for the server's
 * connect timeout (one alone says nothing of the node, and the slot map
 * is every session's: a session of 1 ms would have had it forget a node
 * that answers; a node gone dark must still be forgotten)
 */
static bool
short_open_failed_node(int t)
{
	TimestampTz now = redsem_now();

	if (targets[t].short_failing == 0)
		targets[t].short_failing = now;
	return now >= TimestampTzPlusMilliseconds(targets[t].short_failing, redsem_connect_timeout_ms);
}

/*
 * Target t could not be opened (outcome): remember why, and, if refused
 * (the open ended before its time: not a timeout, which is the opening
 * client's own), whether nothing served there (no_server_lately); a
 * Cluster node's slots are forgotten if node_failed
 */
static void
note_open_failure(int t, const RedisOutcome *outcome, bool node_failed, bool refused)
{
	Target	   *target = &targets[t];

	target->failure = *outcome;
	target->no_server_at = refused && outcome->status == RS_CONNECT_FAILED &&
		outcome->no_server ? redsem_now() : 0;
	if (target->cluster && node_failed)
		broker_cluster_node_failed(t);
	if (log_due(&target->failure_logged_at))
		ereport(LOG,
				(errmsg("redsem broker could not connect to Redis at %s",
						target_text(t)),
				 errdetail_internal("%s", outcome->detail)));
}

/*
 * True if target t's last open found nothing serving at its address within
 * BROKER_NO_SERVER_REUSE_MS (a single Redis's: through sentinels, each
 * open asks them anew), whose failure is then the answer (timing.h)
 */
static bool
no_server_lately(int t)
{
	Target	   *target = &targets[t];

	return target->no_server_at != 0 && target->profile.sentinels[0] == '\0' &&
		!TimestampDifferenceExceeds(target->no_server_at, redsem_now(),
									BROKER_NO_SERVER_REUSE_MS) &&
		!target_connected(t);
}

/* True if target t has an open connection */
static bool
target_connected(int t)
{
	for (int i = 0; i < n_upstreams; i++)
		if (upstreams[i]->target == t && upstreams[i]->ctx != NULL)
			return true;
	return false;
}

/*
 * Mark target t's clients' links to end once they owe nothing, saying why
 * (one of brokerlink.h's answers that the backend sends again on a new
 * link); only those that sent a command if used_only.  A reason already
 * marked is kept.
 */
static void
mark_reroute(int t, bool used_only, const char *why)
{
	for (int i = 0; i < n_clients; i++)
	{
		Client	   *c = clients[i];

		if (c->fd >= 0 && c->target == t && c->reroute == NULL &&
			(!used_only || c->last_up >= 0))
			c->reroute = why;
	}
}

/*
 * Target t's last connection closed: a Redis restarted meanwhile would go
 * unseen (in direct mode a backend's own connection would break), so it is
 * a change of route for every client that used it.  A Cluster node's slots
 * are stamped (broker_cluster.c); any other target's clients are ended
 * (end_rerouted_links), so that each links anew and its next acquire checks
 * the era (I15).
 */
static void
connections_gone(int t)
{
	if (targets[t].cluster)
	{
		broker_cluster_node_lost(t);
		return;
	}
	/* (a link that sent nothing yet checks the era at its first acquire) */
	mark_reroute(t, true, REDSEM_BROKER_RETRY);
}

/* Close an upstream that owes no reply (its clients keep their links) */
static void
close_upstream(Upstream *u)
{
	int			t = u->target;

	close_connection(u->ctx, u->relay);
	u->ctx = NULL;
	u->relay = 0;
	u->target = -1;
	set_dirty = true;
	if (t >= 0 && !target_connected(t))
		connections_gone(t);
}

/*
 * End the links marked to end (Client.reroute: their target's route
 * changed) whose replies are all in: a backend then links anew, which
 * counts as a change of route, so that its next acquire checks the era
 * (I15) as after any failover.  A request it sent that was not forwarded
 * is answered with the reason (RS_UNAVAILABLE, words the backend knows to
 * send again on a new link) rather than dropped, which it would read as a
 * connection lost with the request perhaps applied.  Run from the loop,
 * never inside a client's own processing.
 */
static void
end_rerouted_links(void)
{
	RedisOutcome o;

	memset(&o, 0, sizeof(o));
	o.status = RS_UNAVAILABLE;
	for (int i = 0; i < n_clients; i++)
	{
		Client	   *c = clients[i];

		if (c->fd < 0 || !c->reroute || c->closing || c->outstanding > 0)
			continue;
		strlcpy(o.detail, c->reroute, sizeof(o.detail));
		c->waiting = c->waiting_side = false;
		if (c->n_held == 0)
		{
			client_read(c);
			if (c->fd < 0)
				continue;
			(void) take_request(c);
		}
		if (c->fd >= 0 && c->n_held > 0)
			answer_failure(c, &o);
		else if (c->fd < 0)
			continue;
		else if (c->out_off < c->out_len)
			c->closing = true;
		else
			close_client(c);
	}
}

static void settle_waiters(int t, bool side, bool opened, bool timed_out);

/*
 * End target t's openings under way (not its asks of the sentinels): begun
 * before it moved, each may be waiting on a primary that hangs, for as
 * long as the session that began it allowed, while no other could begin
 * one.  Their waiters with time left have one begun anew; the others are
 * told the primary moved (which their backends try again).
 */
static void
cancel_openings(int t)
{
	bool		any = false;

	for (int i = 0; i < n_openings; i++)
	{
		Opening    *op = openings[i];
		RedisOutcome outcome;

		if (op->o.pid == 0 || op->target != t || op->o.ask)
			continue;
		broker_open_cancel(&op->o, &outcome);
		if (op->side)
			targets[t].opening_sides--;
		else
			targets[t].opening_shared = false;
		any = true;
	}
	if (!any)
		return;
	memset(&targets[t].failure, 0, sizeof(targets[t].failure));
	targets[t].failure.status = RS_UNAVAILABLE;
	strlcpy(targets[t].failure.detail, REDSEM_BROKER_MOVED, sizeof(targets[t].failure.detail));
	set_dirty = true;
	settle_waiters(t, false, false, true);
	settle_waiters(t, true, false, true);
}

/*
 * Stop using target t's connections: through sentinels, the server they
 * reach is not the primary now (it said so, or the sentinels name
 * another).  A wait pool, or a client's own BLPOP, fails (its waiters try
 * again, reaching the primary); an idle connection closes; a busy one takes
 * no new command and closes once its replies are in.  Every client of the
 * target that sent a command ends its link once it is owed nothing
 * (end_rerouted_links; it forwards nothing more meanwhile), and the
 * target's next command opens anew, asking the sentinels; so do the
 * waiters of an opening under way, which is ended (cancel_openings).
 */
static void
retire_target(int t, const char *why)
{
	targets[t].shared = -1;
	cancel_openings(t);
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];

		if (u->ctx == NULL || u->target != t || u->retired)
			continue;
		ereport(LOG,
				(errmsg("redsem broker stops using a connection to %s", target_text(t)),
				 errdetail_internal("%s", why)));
		u->side = true;
		u->retired = true;
		/* (a BLPOP there, its waiter's or a pool's, would wait for nothing) */
		if (u->pool || (!u->was_shared && u->count > 0))
			fail_upstream(u, why);
		else if (u->count == 0)
			close_upstream(u);
	}
	/*
	 * (a link that has sent nothing yet, one waiting for the open that
	 * found the new primary, is new to its backend: its first acquire
	 * checks the era anyway)
	 */
	mark_reroute(t, true, REDSEM_BROKER_MOVED);
	set_dirty = true;
	SetLatch(MyLatch);			/* (end_rerouted_links, at the next turn) */
}

/*
 * A connection opened for target t (a side one if side): an upstream.
 * Through sentinels, at primary (the address its opener found): one found
 * elsewhere than the target's other connections means those reach a
 * primary of before a failover, and they are retired first.
 */
static Upstream *
upstream_opened(int t, bool side, redisContext *ctx, pid_t relay, const char *primary)
{
	Target	   *target = &targets[t];

	target->short_failing = 0;

	if (target->profile.sentinels[0] != '\0')
	{
		if (target->primary[0] != '\0' && strcmp(target->primary, primary) != 0)
			retire_target(t, psprintf("the sentinels name %s as the primary now", primary));
		if (strcmp(target->primary, primary) != 0)
			target->primary_at = redsem_now();
		strlcpy(target->primary, primary, sizeof(target->primary));
		target->next_ask = TimestampTzPlusMilliseconds(redsem_now(), SENTINEL_RECHECK_MS);
	}
	return add_upstream(t, side, ctx, relay);
}

/* A free opening slot (a new one if none) */
static Opening *
free_opening_slot(void)
{
	Opening    *op;

	for (int i = 0; i < n_openings; i++)
		if (openings[i]->o.pid == 0)
			return openings[i];
	openings = openings ? repalloc(openings, sizeof(Opening *) * (n_openings + 1)) :
		MemoryContextAlloc(broker_cxt, sizeof(Opening *));
	op = MemoryContextAllocZero(broker_cxt, sizeof(Opening));
	op->kind = SOCK_OPENING;
	op->pos = -1;
	openings[n_openings++] = op;
	return op;
}

/*
 * In an opener, right after fork: close what it must not hold of the
 * broker (a client the broker closes must see its link end at once; a side
 * connection the broker closes must close in Redis, which unblocks its
 * BLPOP)
 */
static void
forget_broker(void)
{
	if (listen_fd >= 0)
		close(listen_fd);
	if (settings_fd >= 0)
		close(settings_fd);
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0)
			close(clients[i]->fd);
	for (int i = 0; i < n_upstreams; i++)
		if (upstreams[i]->ctx != NULL)
			close(upstreams[i]->ctx->fd);
	for (int i = 0; i < n_openings; i++)
		if (openings[i]->o.pid != 0)
			close(openings[i]->o.fd);
}

/*
 * Say (at most every BROKER_ACCEPT_LOG_MS, as log_due) that no opener
 * could be started for target t: no socket pair or no fork
 */
static void
log_not_started(int t, const RedisOutcome *outcome)
{
	static TimestampTz logged_at = 0;

	if (!log_due(&logged_at))
		return;
	ereport(LOG,
			(errmsg("redsem broker could not start a process to connect to Redis at %s",
					target_text(t)),
			 errdetail_internal("%s", outcome->detail)));
}

/*
 * An opener for target t could not be started: its waiters are answered
 * that failure, and it is said (log_not_started); no node is forgotten
 */
static void
opener_not_started(int t, const RedisOutcome *outcome)
{
	targets[t].failure = *outcome;
	log_not_started(t, outcome);
}

/*
 * The longest an open may take, whatever the session that asked set: the
 * server's redsem.connect_timeout, or BROKER_OPEN_CAP_FLOOR_MS if longer
 * (src/timing.h)
 */
static int
open_cap_ms(void)
{
	return Max(redsem_connect_timeout_ms, BROKER_OPEN_CAP_FLOOR_MS);
}

/*
 * Have an opener open a connection to target t for client c (a side one
 * if side), within what is left of c's connect timeout, and never longer
 * than the server's redsem.connect_timeout (or BROKER_OPEN_CAP_FLOOR_MS, if
 * longer: src/timing.h): every other session's calls to
 * the target wait for this open, and anyone may raise their own setting
 * (to 10 min: a path that swallowed the open then kept everyone out that
 * long after it worked again; a client with more time left tries again);
 * false, the target's failure noted, if none could be forked
 */
static bool
start_opening(int t, bool side, Client *c)
{
	Target	   *target = &targets[t];
	Opening    *op = free_opening_slot();
	RedisOutcome outcome;
	int			budget_ms = Min(c->connect_timeout_ms, open_cap_ms());
	/*
	 * (its whole connect timeout when it begins to wait now, so that a
	 * failure names the setting as direct mode does; what is left of it
	 * when it has waited already, for another's open or its own)
	 */
	TimestampTz by = redsem_now() - c->wait_start < 1000 ? DT_NOEND : c->wait_until;

	if (!broker_open_start(&op->o, target->host, target->port, target->path,
						   &target->profile, budget_ms, by, false, forget_broker,
						   &outcome))
	{
		opener_not_started(t, &outcome);
		return false;
	}
	forked_at = redsem_now();
	op->target = t;
	op->side = side;
	op->pos = -1;
	op->short_budget = c->connect_timeout_ms < redsem_connect_timeout_ms ||
		(by != DT_NOEND && op->o.deadline == by);
	c->tried = true;
	if (side)
		target->opening_sides++;
	else
		target->opening_shared = true;
	set_dirty = true;
	return true;
}

/*
 * True if what an opening begun at started found of target t's primary is
 * older than the primary the target moved to last: a slow opener that
 * reached the old primary before a failover must not move it back
 */
static bool
found_before_last_move(int t, TimestampTz started)
{
	return started < targets[t].primary_at;
}

/*
 * Have an opener ask target t's sentinels where the primary is now (its
 * answer: sentinels_answered), within the server's redsem.connect_timeout
 */
static void
begin_ask(int t)
{
	Target	   *target = &targets[t];
	Opening    *op = free_opening_slot();
	RedisOutcome outcome;

	if (!broker_open_start(&op->o, NULL, 0, NULL, &target->profile,
						   redsem_connect_timeout_ms, DT_NOEND, true, forget_broker,
						   &outcome))
	{
		log_not_started(t, &outcome);	/* asked again at the next check */
		return;
	}
	forked_at = redsem_now();
	op->target = t;
	op->side = false;
	op->pos = -1;
	target->asking = true;
	set_dirty = true;
}

/*
 * Target t's sentinels refused the password its links' headers carried (a
 * DBA rotated it since; the target's connections to the primary, set up
 * before, still work): its links end once they owe nothing, so that each
 * backend links again with what its password files say now, as a session
 * in direct mode reads them for each new connection.  Said once while they
 * keep refusing; while they do (a file still wrong: the backends link
 * again just the same), no more often than SENTINEL_REFUSED_RELINK_MS.
 */
static void
sentinels_refused(int t, const RedisOutcome *outcome)
{
	TimestampTz now = redsem_now();

	if (targets[t].refused_at == 0)
		ereport(LOG,
				(errmsg("redsem broker: the sentinels refused a target's password; its backends link again, reading their password files"),
				 errdetail_internal("%s", outcome->detail)));
	else if (now < TimestampTzPlusMilliseconds(targets[t].refused_at, SENTINEL_REFUSED_RELINK_MS))
		return;
	targets[t].refused_at = now;
	mark_reroute(t, false, REDSEM_BROKER_REFUSED);
}

/*
 * The sentinels of target t answered (outcome): a primary elsewhere than
 * the one its connections reach retires them; a refused password ends its
 * links (sentinels_refused); no answer changes nothing
 */
static void
sentinels_answered(int t, const RedisOutcome *outcome, TimestampTz started)
{
	Target	   *target = &targets[t];

	target->asking = false;
	if (outcome->status == RS_BAD_PASSWORD || outcome->status == RS_AUTH_FAILED)
	{
		sentinels_refused(t, outcome);
		return;
	}
	if (outcome->status == RS_OK)
		target->refused_at = 0;
	if (outcome->status != RS_OK || outcome->detail[0] == '\0' ||
		target->primary[0] == '\0' || strcmp(target->primary, outcome->detail) == 0 ||
		found_before_last_move(t, started))
		return;
	retire_target(t, psprintf("the sentinels name %s as the primary now", outcome->detail));
	strlcpy(target->primary, outcome->detail, sizeof(target->primary));
	target->primary_at = redsem_now();
}

/*
 * True if target t is due to end at now: unused for BROKER_TARGET_IDLE_MS
 * (end_unused_targets)
 */
static bool
target_due_to_end(const Target *target, TimestampTz now)
{
	return target->unused_since != 0 &&
		now - target->unused_since >= (TimestampTz) BROKER_TARGET_IDLE_MS * 1000;
}

/*
 * True if target t's sentinels are to be asked where the primary is, when
 * it is time (check_sentinels): found through sentinels, a primary found,
 * no ask under way, not due to end.  Also while no client is linked: the
 * target's connections stay open until it is ended, and a session that
 * links after a failover would be served on the old primary before an ask
 * begun then could answer; but not a target the sentinels refused while
 * no client is linked for it (its clients linked again with a password
 * rotated since: sentinels_refused).  (An ask is no use of the target:
 * target_in_use.)
 */
static bool
sentinels_to_ask(int t, TimestampTz now)
{
	Target	   *target = &targets[t];

	if (target->free || target->profile.sentinels[0] == '\0' || target->asking ||
		target->primary[0] == '\0' || target_due_to_end(target, now))
		return false;
	/* (refused: with no client, a password rotated since; asked no more) */
	if (target->refused_at == 0)
		return true;
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->target == t)
			return true;
	return false;
}

/*
 * Every SENTINEL_RECHECK_MS, ask the sentinels of each target where the
 * primary is (a primary replaced by SENTINEL FAILOVER
 * takes writes until the sentinels turn it into a replica, and one that
 * hangs answers nothing: the broker's connections would stay with it,
 * where a session's next connection in direct mode asks anew).
 */
static void
check_sentinels(TimestampTz now)
{
	for (int t = 0; t < n_targets; t++)
	{
		if (!sentinels_to_ask(t, now) || now < targets[t].next_ask)
			continue;
		targets[t].next_ask = TimestampTzPlusMilliseconds(now, SENTINEL_RECHECK_MS);
		begin_ask(t);
	}
}

/*
 * How many side connections the clients of target t wait for: one each,
 * but one per wait pool for those whose BLPOP waits for its pool's
 */
static int
side_waiters(int t)
{
	int			n = 0;

	for (int i = 0; i < n_clients; i++)
	{
		Client	   *c = clients[i];
		bool		counted = false;

		if (c->fd < 0 || c->target != t || !c->waiting_side)
			continue;
		for (int k = 0; k < i && c->waiting_pool >= 0 && !counted; k++)
			counted = clients[k]->fd >= 0 && clients[k]->target == t &&
				clients[k]->waiting_side && clients[k]->waiting_pool == c->waiting_pool;
		n += !counted;
	}
	return n;
}

/*
 * A new upstream of c's target (a side one if side): NULL with *wait set,
 * c waiting for an opener to open it (one more side connection per client
 * waiting for one); NULL alone once c's wait has run out, or no opener
 * could be forked (no_upstream says which, and is answered).
 */
static Upstream *
new_upstream(Client *c, bool side, bool *wait)
{
	int			t = c->target;
	Target	   *target = &targets[t];

	if (c->waiting && redsem_now() >= c->wait_until)
	{
		c->waiting = c->waiting_side = false;
		timeout_outcome(c, &no_upstream);
		return NULL;
	}
	if (!c->waiting && no_server_lately(t))
	{
		no_upstream = target->failure;
		return NULL;
	}
	if (!c->waiting)
	{
		c->wait_start = redsem_now();
		c->wait_until = TimestampTzPlusMilliseconds(c->wait_start, c->connect_timeout_ms);
		c->tried = false;
	}
	c->waiting = true;
	c->waiting_side = side;
	if (side ? target->opening_sides < side_waiters(t) : !target->opening_shared)
	{
		if (!start_opening(t, side, c))
		{
			c->waiting = c->waiting_side = false;
			no_upstream = target->failure;
			return NULL;
		}
	}
	*wait = true;
	return NULL;
}

static void promote_idle_side(int t);

/*
 * The shared upstream of c's target (an idle side connection promoted if
 * it has none: a WAIT took it), or new_upstream's answer
 */
static Upstream *
shared_upstream(Client *c, bool *wait)
{
	if (targets[c->target].shared < 0)
		promote_idle_side(c->target);
	if (targets[c->target].shared >= 0)
		return upstreams[targets[c->target].shared];
	return new_upstream(c, false, wait);
}

/* An idle side connection of c's target (for a BLPOP), or new_upstream's answer */
static Upstream *
side_upstream(Client *c, bool *wait)
{
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];

		/*
		 * (not one that had the shared role: it may carry a client's
		 * writes, whose WAIT must not queue behind a BLPOP)
		 */
		if (u->ctx != NULL && u->side && !u->was_shared && !u->pool && !u->retired &&
			u->target == c->target && u->count == 0)
			return u;
	}
	return new_upstream(c, true, wait);
}

/*
 * The clients of target t that wait for an upstream (a side one if side),
 * once an opening of it ended: looked at again (it opened, or it ran out
 * of its own time, which may be shorter than theirs: each then has one
 * opened within what is left of its own, as direct mode would), or
 * answered the target's failure (refused, a wrong password...: at once,
 * as in direct mode)
 */
static void
settle_waiters(int t, bool side, bool opened, bool timed_out)
{
	Target	   *target = &targets[t];
	TimestampTz now = redsem_now();

	for (int i = 0; i < n_clients; i++)
	{
		Client	   *c = clients[i];
		bool		again;

		if (c->fd < 0 || c->target != t || !c->waiting || c->waiting_side != side)
			continue;
		again = opened || (now < c->wait_until &&
						   (timed_out || (side && target->opening_sides > 0)));
		if (!again && timed_out && c->connect_timeout_ms > open_cap_ms())
		{
			RedisOutcome o;

			/*
			 * (its own time ran out over several opens, each at most the
			 * server's: the last one's "time this call had left" would
			 * belittle its wait)
			 */
			c->waiting = c->waiting_side = false;
			timeout_outcome(c, &o);
			add_last_open_words(&o, &target->failure);
			answer_failure(c, &o);
		}
		else if (!again)
		{
			c->waiting = c->waiting_side = false;
			answer_failure(c, &target->failure);
		}
		else
			c->tried = false;	/* (its open ended: answered at its own timeout) */
		c->process = true;
		SetLatch(MyLatch);		/* (looked at in the next turn, at once) */
	}
}

/*
 * An opener has answered: the upstream it opened, or the target's failure
 * (or, for one that asked, the sentinels' answer)
 */
static void
finish_opening(Opening *op)
{
	int			t = op->target;
	bool		side = op->side;
	bool		ask = op->o.ask;
	TimestampTz started = op->o.started;
	TimestampTz deadline = op->o.deadline;
	bool		short_budget = op->short_budget;
	bool		timed_out;
	RedisOutcome outcome;
	pid_t		relay;
	redisContext *ctx = broker_open_finish(&op->o, &outcome, &relay);

	if (ask)
	{
		set_dirty = true;
		sentinels_answered(t, &outcome, started);
		return;
	}
	/* (through sentinels, a primary found before the target moved: stale) */
	if (ctx != NULL && targets[t].profile.sentinels[0] != '\0' &&
		strcmp(targets[t].primary, outcome.detail) != 0 && found_before_last_move(t, started))
	{
		close_connection(ctx, relay);
		ctx = NULL;
		(void) redis_note(&outcome, RS_UNAVAILABLE, "the primary found (%s) is no longer the one the sentinels name",
						  outcome.detail);
	}
	if (side)
		targets[t].opening_sides--;
	else
		targets[t].opening_shared = false;
	set_dirty = true;
	timed_out = redsem_now() >= TimestampTzPlusMilliseconds(deadline, -BROKER_SLOW_OPEN_MS);
	if (ctx != NULL)
	{
		targets[t].no_server_at = 0;
		targets[t].failure_logged_at = 0;	/* (the next outage is said) */
		(void) upstream_opened(t, side, ctx, relay, outcome.detail);
	}
	else
		note_open_failure(t, &outcome, !(timed_out && short_budget) || short_open_failed_node(t),
						  !timed_out);
	/* (ended at its deadline, or nearly: it ran out of time) */
	settle_waiters(t, side, ctx != NULL, timed_out);
}

/* Give up every opening past its time (its opener killed) */
static void
check_openings(TimestampTz now)
{
	for (int i = 0; i < n_openings; i++)
	{
		Opening    *op = openings[i];
		RedisOutcome outcome;

		if (op->o.pid == 0 || now < op->o.kill_at)
			continue;
		broker_open_cancel(&op->o, &outcome);
		if (op->o.ask)
		{
			set_dirty = true;
			sentinels_answered(op->target, &outcome, op->o.started);
			continue;
		}
		if (op->side)
			targets[op->target].opening_sides--;
		else
			targets[op->target].opening_shared = false;
		set_dirty = true;
		note_open_failure(op->target, &outcome, !op->short_budget || short_open_failed_node(op->target),
						  false);
		settle_waiters(op->target, op->side, false, true);
	}
}

/* What client c is told when no connection came within its connect timeout */
static void
timeout_outcome(const Client *c, RedisOutcome *o)
{
	memset(o, 0, sizeof(*o));
	o->status = RS_CONNECT_FAILED;
	snprintf(o->detail, sizeof(o->detail), "no answer within %d ms (redsem.connect_timeout)",
			 c->connect_timeout_ms);
	o->no_server = true;
	/* (through sentinels, as sentinel.c says of a primary not reached) */
	if (targets[c->target].profile.sentinels[0] != '\0')
	{
		o->status = RS_UNAVAILABLE;
		o->no_server = false;
		strlcat(o->detail, " from the primary the sentinels name (a failover may be in progress)",
				sizeof(o->detail));
	}
}

/*
 * Add to o, a session's own timeout over several opens, what the last open
 * said (last), so that a TLS handshake that never came or a step that got
 * no answer (AUTH) is still named, as direct mode names it
 */
static void
add_last_open_words(RedisOutcome *o, const RedisOutcome *last)
{
	char		words[sizeof(o->detail)];

	if (last->status == RS_OK || last->detail[0] == '\0' ||
		strncmp(last->detail, "no answer within ", 17) == 0)
		return;					/* (nothing the session's own words lack) */
	snprintf(words, sizeof(words), "; the broker's opens last at most %d ms each, and the last said: %s",
			 open_cap_ms(), last->detail);
	strlcat(o->detail, words, sizeof(o->detail));
}

/*
 * Answer every client still waiting for another session's open once its
 * own connect timeout has run out (that open may have been given longer),
 * as direct mode would have failed its connect; a client that began the
 * open it waits for hears that open's own words at its end
 */
static void
check_waiters(TimestampTz now)
{
	for (int i = 0; i < n_clients; i++)
	{
		Client	   *c = clients[i];
		RedisOutcome o;

		if (c->fd < 0 || !c->waiting || c->tried || now < c->wait_until)
			continue;
		timeout_outcome(c, &o);
		c->waiting = c->waiting_side = false;
		answer_failure(c, &o);
	}
}

/* Close every client bound to target t */
static void
close_target_clients(int t)
{
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->target == t)
			close_client(clients[i]);
}

/*
 * Give up an upstream: close it, and every client that had a command on
 * it; for a shared one, every client of its target too, so each opens a
 * fresh link (and an acquire checks its era again)
 */
static void
fail_upstream(Upstream *u, const char *why)
{
	int			t = u->target;
	redisContext *ctx = u->ctx;
	pid_t		relay = u->relay;
	Client	  **owed = palloc(sizeof(Client *) * (u->count + broker_pool_members(u) + 1));
	int			n = 0;

	ereport(LOG,
			(errmsg("redsem broker closed its connection to Redis at %s: %s",
					target_text(t), why)));
	/*
	 * (detached first: closing a client may look at the upstreams, and
	 * must not find this one half failed)
	 */
	u->ctx = NULL;
	u->relay = 0;
	if (u->pool)
		n = broker_pool_fail(u, owed);
	while (u->count > 0)
	{
		Client	   *c = pending_client(broker_fifo_head(u));

		if (c != NULL)
			owed[n++] = c;
		broker_fifo_pop(u);
	}
	for (int i = 0; i < n; i++)
		close_client(owed[i]);
	pfree(owed);
	close_connection(ctx, relay);
	if (!u->side)
	{
		targets[t].shared = -1;
		close_target_clients(t);
	}
	u->target = -1;
	set_dirty = true;
	/* (a Cluster node that lost any connection may have restarted) */
	if (targets[t].cluster)
		broker_cluster_node_lost(t);
	else if (!target_connected(t))
		connections_gone(t);
}

/*
 * True if a backend is linked for target t (or, for a Cluster node, for a
 * seed whose map knows it)
 */
static bool
target_has_clients(int t)
{
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && (clients[i]->target == t || clients[i]->home == t))
			return true;
	return targets[t].cluster && broker_cluster_node_in_use(t);
}

/*
 * Close a side connection left idle for BROKER_SIDE_IDLE_MS; but one that
 * is its target's last while backends are linked for it takes the shared
 * role instead (the connection a WAIT took, none opened since): closing it
 * would be a change of route for them all (connections_gone)
 */
static void
close_idle_sides(TimestampTz now)
{
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];
		int			t = u->target;

		if (u->ctx == NULL || !u->side || u->count > 0 ||
			now - u->idle_since < (TimestampTz) BROKER_SIDE_IDLE_MS * 1000)
			continue;
		if (targets[t].shared < 0 && !u->pool && !u->retired && target_has_clients(t))
			promote_idle_side(t);
		else
			close_upstream(u);
	}
}

/*
 * True if target t is in use: a backend is linked for it, a connection of
 * it owes a reply, or an opener opens a connection for it (one that only
 * asks its sentinels where the primary is does not count: those asks go
 * on while it is idle, sentinels_to_ask, and would keep it for good)
 */
static bool
target_in_use(int t)
{
	const Target *target = &targets[t];

	if (target->opening_shared || target->opening_sides > 0)
		return true;
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->target == t)
			return true;
	if (broker_cluster_home_in_use(t))
		return true;
	for (int i = 0; i < n_upstreams; i++)
		if (upstreams[i]->target == t && upstreams[i]->ctx != NULL && upstreams[i]->count > 0)
			return true;
	for (int i = 0; i < n_openings; i++)
		if (openings[i]->o.pid != 0 && openings[i]->target == t && !openings[i]->o.ask)
			return true;
	return false;
}

/*
 * End the targets unused for BROKER_TARGET_IDLE_MS (timing.h): close their
 * connections (none owes a reply), then, once no wait pool names them any
 * more (an empty pool whose connection closed is freed by the next kick:
 * at the next look), free their entries
 */
static void
end_unused_targets(TimestampTz now)
{
	static TimestampTz next_look = 0;

	/* (once a second: it looks at every client for each target) */
	if (now < next_look)
		return;
	next_look = TimestampTzPlusMilliseconds(now, 1000);
	for (int t = 0; t < n_targets; t++)
	{
		Target	   *target = &targets[t];

		if (target->free)
			continue;
		if (target_in_use(t))
		{
			target->unused_since = 0;
			continue;
		}
		if (target->unused_since == 0)
			target->unused_since = now;
		/* (an ask under way ends first: its answer names the target) */
		if (!target_due_to_end(target, now) || target->asking)
			continue;
		/* (an upstream without a connection has no target: close_upstream) */
		for (int i = 0; i < n_upstreams; i++)
			if (upstreams[i]->target == t && upstreams[i]->ctx != NULL)
				close_upstream(upstreams[i]);
		target->shared = -1;
		if (!broker_pool_of(t))
			free_target(t);
	}
}

/* Write what an upstream has buffered, as far as the socket takes it */
static void
upstream_write(Upstream *u)
{
	int			done = 0;

	if (u->ctx == NULL || !u->want_write)
		return;
	if (redisBufferWrite(u->ctx, &done) != REDIS_OK)
	{
		fail_upstream(u, redis_context_error(u->ctx));
		return;
	}
	u->want_write = !done;
}

/*
 * True if reply, read on u, says that u's server is not the primary now
 * (READONLY, MASTERDOWN, LOADING...: a backend's own connection would be
 * dropped) and u's target is found through sentinels
 */
static bool
says_not_primary(const Upstream *u, const redisReply *reply)
{
	RedisOutcome o;

	return targets[u->target].profile.sentinels[0] != '\0' &&
		redis_reply_outcome(reply, &o) && o.status == RS_UNAVAILABLE;
}

/*
 * Hand a reply read on an upstream to the client of its oldest command;
 * through sentinels, one from a server that is no primary now retires the
 * target's connections
 */
static void
deliver(Upstream *u, redisReply *reply)
{
	Pending		pend = *broker_fifo_head(u);
	Client	   *c = pending_client(&pend);
	bool		not_primary = says_not_primary(u, reply);

	broker_fifo_pop(u);
	if (pend.what != PEND_CLIENT)
		broker_pool_reply(&pend, reply);
	else if (c != NULL)
	{
		broker_cluster_reply(c, reply, pend.sees);
		broker_cluster_served(c, u->target, &pend, reply);
		broker_encode_reply(c, reply);
		c->outstanding--;
		/*
		 * (ASKING's reply comes before its BLPOP's; a WAIT follows the
		 * client's own earlier commands on its connection)
		 */
		if (c->outstanding == 0)
			c->on_side = false;
		c->process = true;
	}
	if (u->side && u->count == 0)
		u->idle_since = redsem_now();
	freeReplyObject(reply);
	if (not_primary && u->ctx != NULL && !u->retired)
		retire_target(u->target, "its server answered that it is not the primary now");
	if (u->ctx != NULL && u->retired && u->count == 0)
		close_upstream(u);
}

/* Read what an upstream sent and hand over every whole reply */
static void
upstream_read(Upstream *u)
{
	void	   *r;

	if (u->ctx == NULL)
		return;
	if (redisBufferRead(u->ctx) != REDIS_OK)
	{
		fail_upstream(u, redis_context_error(u->ctx));
		return;
	}
	for (;;)
	{
		if (redisGetReplyFromReader(u->ctx, &r) != REDIS_OK)
		{
			fail_upstream(u, redis_context_error(u->ctx));
			return;
		}
		if (r == NULL)
			return;
		if (u->count == 0)
		{
			freeReplyObject(r);
			fail_upstream(u, "a reply nobody asked for");
			return;
		}
		deliver(u, (redisReply *) r);
		if (u->ctx == NULL)
			return;				/* (closed or failed on that reply) */
	}
}

/* ---- forwarding ---- */

/* An integer argument of a request (0 if absent or not a number) */
static double
number_arg(const redisReply *cmd, size_t i)
{
	return i < cmd->elements ? strtod(cmd->element[i]->str, NULL) : 0;
}

/*
 * How long past sending a command may go unanswered before its upstream
 * is given up: redsem.command_timeout, the margin, and its own wait (BLPOP
 * and WAIT; one that waits for ever has no bound)
 */
static TimestampTz
command_deadline(const redisReply *cmd)
{
	double		wait_ms = 0;

	if (broker_is_command(cmd, "BLPOP"))
		wait_ms = number_arg(cmd, cmd->elements - 1) * 1000.0;
	else if (broker_is_command(cmd, "WAIT"))
		wait_ms = number_arg(cmd, 2);
	if ((broker_is_command(cmd, "BLPOP") || broker_is_command(cmd, "WAIT")) && wait_ms <= 0)
		return DT_NOEND;
	return broker_command_deadline((int64) wait_ms);
}

/* Queue a client's request on an upstream; false if out of memory */
static bool
send_upstream(Client *c, Upstream *u, const redisReply *cmd)
{
	const char **argv = palloc(sizeof(char *) * cmd->elements);
	size_t	   *argvlen = palloc(sizeof(size_t) * cmd->elements);
	char	   *formatted;
	int			len;
	Pending		p = {0};

	for (size_t i = 0; i < cmd->elements; i++)
	{
		argv[i] = cmd->element[i]->str;
		argvlen[i] = (size_t) cmd->element[i]->len;
	}
	len = redisFormatCommandArgv(&formatted, (int) cmd->elements, argv, argvlen);
	pfree(argv);
	pfree(argvlen);
	p.what = PEND_CLIENT;
	p.client = c->index;
	p.generation = c->generation;
	p.deadline = command_deadline(cmd);
	broker_cluster_pending(c, cmd, &p);
	if (!broker_queue_formatted(u, formatted, len, p))
		return false;
	c->outstanding++;
	c->last_up = u->index;
	c->last_up_gen = u->gen;
	return true;
}

/* Take the next whole request a client sent into held; false if none */
static bool
take_request(Client *c)
{
	void	   *r = NULL;
	redisReply *cmd;

	if (c->n_held >= (int) lengthof(c->held))
		return false;
	if (redisReaderGetReply(c->reader, &r) != REDIS_OK)
	{
		close_client(c);
		return false;
	}
	if (r == NULL)
		return false;
	cmd = (redisReply *) r;
	if (cmd->type != REDIS_REPLY_ARRAY || cmd->elements == 0)
	{
		freeReplyObject(cmd);
		close_client(c);
		return false;
	}
	for (size_t i = 0; i < cmd->elements; i++)
		if (cmd->element[i]->type != REDIS_REPLY_STRING)
		{
			freeReplyObject(cmd);
			close_client(c);
			return false;
		}
	c->held[c->n_held++] = cmd;
	return true;
}

/* Drop the first n held requests of a client */
static void
drop_held(Client *c, int n)
{
	for (int i = 0; i < n; i++)
		freeReplyObject(c->held[i]);
	for (int i = n; i < c->n_held; i++)
		c->held[i - n] = c->held[i];
	c->n_held -= n;
}

/* Bind a client to the target its REDSEM.TARGET header names */
static bool
bind_target(Client *c, const redisReply *cmd)
{
	if (cmd->elements != REDSEM_BROKER_HEADER_ARGS || c->target >= 0)
		return false;
	for (size_t i = 1; i < cmd->elements; i++)
		if (cmd->element[i]->type != REDIS_REPLY_STRING)
			return false;
	c->target = find_target(cmd);
	c->connect_timeout_ms = Max(atoi(cmd->element[12]->str), 1);
	broker_cluster_bind(c);
	return true;
}

/* Take a bound client's new connect timeout (REDSEM.TIMEOUT); false if malformed */
static bool
set_connect_timeout(Client *c, const redisReply *cmd)
{
	char	   *end;
	long		ms;

	if (cmd->elements != 2 || c->target < 0 || cmd->element[1]->type != REDIS_REPLY_STRING)
		return false;
	errno = 0;
	ms = strtol(cmd->element[1]->str, &end, 10);
	if (errno != 0 || end == cmd->element[1]->str || *end != '\0' || ms < 1 || ms > PG_INT32_MAX)
		return false;
	c->connect_timeout_ms = (int) ms;
	return true;
}

/*
 * Zero the passwords of a REDSEM.TARGET header before it is freed (the
 * target keeps its own copy; the link's read buffer is hiredis's, and is
 * freed unzeroed)
 */
static void
wipe_header_passwords(redisReply *cmd)
{
	static const int secret[] = {6, 17};

	for (int i = 0; i < (int) lengthof(secret); i++)
		if ((size_t) secret[i] < cmd->elements && cmd->element[secret[i]]->type == REDIS_REPLY_STRING)
			explicit_bzero(cmd->element[secret[i]]->str, cmd->element[secret[i]]->len);
}

/* The connection that carried c's last command, if it is still that one */
static Upstream *
last_upstream(const Client *c)
{
	Upstream   *u;

	if (c->last_up < 0)
		return NULL;
	u = upstreams[c->last_up];
	return (u->ctx != NULL && u->gen == c->last_up_gen) ? u : NULL;
}

/*
 * Send held[0 .. n-1] of a client on upstream u; if there is none, leave
 * them held while one is being opened for it (wait), else answer the
 * failure and close the client
 */
static bool
send_held(Client *c, Upstream *u, int n, bool wait)
{
	if (u == NULL)
	{
		if (!wait)
			answer_failure(c, &no_upstream);
		return false;
	}
	c->waiting = c->waiting_side = false;
	for (int i = 0; i < n; i++)
		if (!send_upstream(c, u, c->held[i]))
		{
			fail_upstream(u, "out of memory");
			return false;
		}
	drop_held(c, n);
	return true;
}

/*
 * Send held[0 .. n-1] of a client on its target's shared upstream (n = 2:
 * ASKING and the command it applies to, back to back)
 */
static bool
send_shared(Client *c, int n)
{
	bool		wait = false;
	Upstream   *prev = last_upstream(c);
	Upstream   *u;

	/*
	 * (replies it is still owed on a connection that is no longer the
	 * shared one, which a WAIT took, come first: later ones could overtake)
	 */
	if (c->outstanding > 0 && prev != NULL && prev->index != targets[c->target].shared)
		return false;
	u = shared_upstream(c, &wait);
	return send_held(c, u, n, wait);
}

/*
 * Send a client's BLPOP (n = 1), or ASKING and its BLPOP (n = 2: a wake key
 * in a slot being migrated), on a side connection of its target
 */
static bool
send_side(Client *c, int n)
{
	bool		wait = false;
	Upstream   *u;

	c->waiting_pool = -1;
	u = side_upstream(c, &wait);
	if (!send_held(c, u, n, wait))
		return false;
	c->on_side = true;
	return true;
}

/*
 * Put a client's BLPOP of its wake and nudge keys in the wait pool of its
 * target (and slot): one BLPOP on the pool's connection waits for every
 * waiter in it (broker_wait.c).  A pool without a connection takes an idle
 * side one, or has one opened while the client waits.  While the pool's
 * BLPOP out cannot be ended (no other connection of the target to send
 * CLIENT UNBLOCK on: a WAIT holds it), the client's BLPOP goes on a side
 * connection of its own.
 */
static bool
send_pool(Client *c)
{
	int			p = broker_pool_for(c, c->held[0]);

	if (!broker_pool_usable(p))
	{
		bool		wait = false;
		Upstream   *u;

		c->waiting_pool = p;
		u = side_upstream(c, &wait);

		if (u == NULL)
		{
			if (!wait)
				answer_failure(c, &no_upstream);
			return false;
		}
		broker_pool_attach(p, u);
	}
	else if (!broker_pool_can_take(p))
		return send_side(c, 1); /* (its BLPOP out cannot be ended now) */
	c->waiting = c->waiting_side = false;
	c->waiting_pool = -1;
	broker_pool_join(p, c, c->held[0]);
	drop_held(c, 1);
	return true;
}

/* Look again at the clients of target t waiting for a shared connection */
static void
wake_shared_waiters(int t)
{
	for (int i = 0; i < n_clients; i++)
	{
		Client	   *c = clients[i];

		if (c->fd >= 0 && c->target == t && c->waiting && !c->waiting_side)
		{
			c->process = true;
			SetLatch(MyLatch);
		}
	}
}

/* Give the shared role of target t to an idle side connection, if it has one */
static void
promote_idle_side(int t)
{
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];

		if (u->ctx != NULL && u->side && !u->pool && !u->retired && u->target == t &&
			u->count == 0)
		{
			u->side = false;
			u->was_shared = true;
			targets[t].shared = u->index;
			wake_shared_waiters(t);
			return;
		}
	}
}

/*
 * Send a client's WAIT on the connection that carried its last command,
 * where its writes went (Redis's WAIT waits for the writes of the
 * connection it is sent on; behind another client's WAIT there, if one
 * took it); if that was the shared connection, it becomes a side one
 * carrying the WAIT, and an idle side connection (or one opened at the
 * next call) takes the shared role: nobody else's call waits behind a
 * WAIT.  The client's later requests wait for its reply, as after a BLPOP.
 * A client whose connection is gone since (it failed) is closed: its
 * writes' fate is unknown, as after a lost connection.
 */
static bool
send_wait(Client *c)
{
	Upstream   *u = last_upstream(c);
	bool		wait = false;

	if (u == NULL && c->last_up >= 0)
	{
		close_client(c);
		return false;
	}
	if (u == NULL)
		u = shared_upstream(c, &wait); /* (no command yet: nothing to wait for) */
	if (!send_held(c, u, 1, wait))
		return false;
	if (!u->side)
	{
		u->side = true;
		targets[u->target].shared = -1;
		promote_idle_side(u->target);
		set_dirty = true;
	}
	c->on_side = true;
	return true;
}

/*
 * Forward what a client sent, in order, as far as its ordering allows: a
 * BLPOP waits until its earlier replies are back, and nothing goes after
 * a BLPOP until its reply is back
 */
static void
process_client(Client *c)
{
	c->process = false;
	while (c->fd >= 0 && !c->closing && !c->reroute && !c->on_side && !c->in_pool)
	{
		redisReply *cmd;

		if (c->n_held == 0 && !take_request(c))
			return;
		cmd = c->held[0];
		if (broker_is_command(cmd, "REDSEM.TARGET"))
		{
			bool		bound = bind_target(c, cmd);

			wipe_header_passwords(cmd);
			if (!bound)
			{
				close_client(c);
				return;
			}
			drop_held(c, 1);
			continue;
		}
		if (broker_is_command(cmd, REDSEM_BROKER_TIMEOUT))
		{
			if (!set_connect_timeout(c, cmd))
			{
				close_client(c);
				return;
			}
			drop_held(c, 1);
			continue;
		}
		if (c->target < 0)
		{
			close_client(c);
			return;
		}
		switch (broker_cluster_route(c))
		{
			case CLUSTER_HOLD:
				return;
			case CLUSTER_ANSWERED:
				drop_held(c, 1);
				continue;
			case CLUSTER_GO:
				break;
		}
		if (broker_is_command(cmd, "BLPOP"))
		{
			/* (a wake and a nudge key, and the timeout: a waiter's) */
			bool		pooled = cmd->elements == 4;

			if (c->outstanding > 0 || !(pooled ? send_pool(c) : send_side(c, 1)))
				return;
			continue;
		}
		if (broker_is_command(cmd, "WAIT"))
		{
			if (!send_wait(c))
				return;
			continue;
		}
		if (broker_is_command(cmd, "ASKING"))
		{
			if (c->n_held < 2 && !take_request(c))
				return;
			if (broker_is_command(c->held[1], "BLPOP"))
			{
				if (c->outstanding > 0 || !send_side(c, 2))
					return;
				continue;
			}
			if (!send_shared(c, 2))
				return;
			continue;
		}
		if (!send_shared(c, 1))
			return;
	}
}

/* ---- the loop ---- */

/* Open the listening socket at the broker's address */
static void
listen_broker(void)
{
	struct sockaddr_un addr;
	socklen_t	len = redis_broker_address(&addr);

	listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (listen_fd < 0)
		ereport(ERROR,
				(errmsg("redsem broker could not create its socket: %m")));
	/* pg_stat_tmp is made by initdb; a socket left by a broker that died goes */
	if (mkdir(REDSEM_BROKER_DIR, S_IRWXU) != 0 && errno != EEXIST)
		ereport(ERROR,
				(errmsg("redsem broker could not create directory \"%s\": %m", REDSEM_BROKER_DIR)));
	if (unlink(addr.sun_path) != 0 && errno != ENOENT)
		ereport(ERROR,
				(errmsg("redsem broker could not remove the old socket \"%s\": %m", addr.sun_path)));
	if (bind(listen_fd, (struct sockaddr *) &addr, len) != 0)
		ereport(ERROR,
				(errmsg("redsem broker could not bind its socket \"%s\": %m", addr.sun_path)));
	if (chmod(addr.sun_path, S_IRUSR | S_IWUSR) != 0)
		ereport(ERROR,
				(errmsg("redsem broker could not restrict its socket \"%s\": %m", addr.sun_path)));
	if (listen(listen_fd, SOMAXCONN) != 0)
		ereport(ERROR,
				(errmsg("redsem broker could not listen on its socket: %m")));
}

/* Free the slots of clients closed since the last sweep */
static void
sweep_clients(void)
{
	for (int i = 0; i < n_clients; i++)
	{
		Client	   *c = clients[i];

		if (c->fd < 0 && c->reader != NULL)
		{
			redisReaderFree(c->reader);
			c->reader = NULL;
			c->out_len = c->out_off = 0;
		}
	}
}

/* The events a client's socket is waited for */
static uint32
client_events(const Client *c)
{
	return WL_SOCKET_READABLE | (c->out_off < c->out_len ? WL_SOCKET_WRITEABLE : 0);
}

/* The events an upstream's socket is waited for */
static uint32
upstream_events(const Upstream *u)
{
	return WL_SOCKET_READABLE | (u->want_write ? WL_SOCKET_WRITEABLE : 0);
}

/* Add a socket to the wait set (room for it counted) */
static int
wait_add(uint32 events, pgsocket fd, void *user_data)
{
	wait_set_room--;
	return AddWaitEventToSet(wait_set, events, fd, NULL, user_data);
}

/*
 * Make the wait set anew: latch, postmaster death, listener, every socket;
 * with room for BROKER_WAIT_SPARE new links or more, which add_client adds
 * without making it anew (a role that links and drops links on and on
 * would otherwise have it made anew at each turn, every socket added again)
 */
static void
rebuild_wait_set(void)
{
	int			n = 4 + live_clients() + live_upstreams();

	if (wait_set != NULL)
		FreeWaitEventSet(wait_set);
	for (int i = 0; i < n_openings; i++)
		n += openings[i]->o.pid != 0;
	n += Max(BROKER_WAIT_SPARE, n / 2);
	wait_set = redsem_create_wait_set(broker_cxt, n);
	wait_set_room = n - 2;
	wait_set_dead = 0;
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_POSTMASTER_DEATH, PGINVALID_SOCKET, NULL, NULL);
	if (accept_paused_until == 0)
		(void) wait_add(WL_SOCKET_READABLE, listen_fd, NULL);
	if (settings_fd >= 0)
		(void) wait_add(WL_SOCKET_READABLE, settings_fd, NULL);
	for (int i = 0; i < n_clients; i++)
	{
		Client	   *c = clients[i];

		c->pos = -1;
		if (c->fd < 0)
			continue;
		c->events = client_events(c);
		c->pos = wait_add(c->events, c->fd, c);
	}
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];

		u->pos = -1;
		if (u->ctx == NULL)
			continue;
		u->events = upstream_events(u);
		u->pos = wait_add(u->events, u->ctx->fd, u);
	}
	for (int i = 0; i < n_openings; i++)
	{
		Opening    *op = openings[i];

		op->pos = -1;
		if (op->o.pid != 0)
			op->pos = wait_add(WL_SOCKET_READABLE, op->o.fd, op);
	}
	set_dirty = false;
}

/* Wait for writability only where there is something to write */
static void
update_interest(void)
{
	for (int i = 0; i < n_clients; i++)
	{
		Client	   *c = clients[i];

		if (c->pos >= 0 && client_events(c) != c->events)
		{
			c->events = client_events(c);
			ModifyWaitEvent(wait_set, c->pos, c->events, NULL);
		}
	}
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];

		if (u->pos >= 0 && upstream_events(u) != u->events)
		{
			u->events = upstream_events(u);
			ModifyWaitEvent(wait_set, u->pos, u->events, NULL);
		}
	}
}

/*
 * True if Redis's bytes already wait on fd (a look for no time).  A broker
 * stopped past a deadline (SIGSTOP, a starved CPU) wakes to a wait that
 * ends on its time without looking at the sockets: what Redis answered
 * meanwhile must not be called silence.
 */
static bool
answer_waiting(int fd)
{
	struct pollfd p = {.fd = fd,.events = POLLIN};

	return poll(&p, 1, 0) > 0;
}

/*
 * Read what already waits on upstream u's socket, handing over every whole
 * reply: no more than was there when it began (one read takes at most
 * 16 kB, and an answer may be larger), so a Redis that trickles bytes is
 * not read for ever
 */
static void
read_waiting(Upstream *u)
{
	int			queued = 0;

	if (ioctl(u->ctx->fd, FIONREAD, &queued) != 0)
		queued = 0;
	for (int reads = queued / 1024 + 1; reads > 0 && u->ctx != NULL; reads--)
	{
		upstream_read(u);
		if (u->ctx == NULL || !answer_waiting(u->ctx->fd))
			break;
	}
}

/*
 * Give up every upstream whose oldest command is past its deadline; each
 * command gets one look first, which reads what Redis already sent (here,
 * not at the next turn: a set latch or a full event list may keep that
 * turn from the socket)
 */
static void
check_deadlines(TimestampTz now)
{
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];
		Pending    *head;

		while (u->ctx != NULL && u->count > 0 &&
			   (head = broker_fifo_head(u))->deadline <= now)
		{
			if (head->looked || !answer_waiting(u->ctx->fd))
			{
				fail_upstream(u, "no answer within redsem.command_timeout");
				break;
			}
			head->looked = true;
			read_waiting(u);
		}
	}
}

/* How long the loop may sleep: until the next deadline, at most 1 s */
static long
sleep_ms(TimestampTz now)
{
	TimestampTz until = TimestampTzPlusMilliseconds(now, 1000);

	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];

		if (u->ctx != NULL && u->count > 0)
			until = Min(until, broker_fifo_head(u)->deadline);
	}
	for (int i = 0; i < n_openings; i++)
		if (openings[i]->o.pid != 0)
			until = Min(until, openings[i]->o.kill_at);
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->waiting && !clients[i]->tried)
			until = Min(until, clients[i]->wait_until);
	for (int t = 0; t < n_targets; t++)
		if (sentinels_to_ask(t, now))
			until = Min(until, targets[t].next_ask);
	if (accept_paused_until != 0)
		until = Min(until, accept_paused_until);
	until = broker_pool_next_deadline(until);
	until = broker_reap_next(until);
	return Max(TimestampDifferenceMilliseconds(now, until), 0);
}

/* Handle one event of the wait */
static void
handle_event(const WaitEvent *ev)
{
	if (ev->events & WL_LATCH_SET)
		ResetLatch(MyLatch);
	if (ev->events & WL_POSTMASTER_DEATH)
		_exit(1);
	if (settings_fd >= 0 && ev->fd == settings_fd && ev->user_data == NULL)
	{
		if (ev->events & WL_SOCKET_READABLE)
			read_settings();
		return;
	}
	if (ev->fd == listen_fd && ev->user_data == NULL)
	{
		if (ev->events & WL_SOCKET_READABLE)
			accept_clients();
		return;
	}
	if (ev->user_data == NULL)
		return;
	if (*(SockKind *) ev->user_data == SOCK_CLIENT)
	{
		Client	   *c = (Client *) ev->user_data;

		/* (a dead entry: its link closed since, the struct maybe reused) */
		if (c->fd < 0 || c->pos != ev->pos)
			return;
		if (ev->events & WL_SOCKET_WRITEABLE)
			client_write(c);
		if (ev->events & WL_SOCKET_READABLE)
			client_read(c);
	}
	else if (*(SockKind *) ev->user_data == SOCK_OPENING)
	{
		Opening    *op = (Opening *) ev->user_data;

		if ((ev->events & WL_SOCKET_READABLE) && op->o.pid != 0)
			finish_opening(op);
	}
	else
	{
		Upstream   *u = (Upstream *) ev->user_data;

		if (ev->events & WL_SOCKET_WRITEABLE)
			upstream_write(u);
		if (ev->events & WL_SOCKET_READABLE)
			upstream_read(u);
	}
}

/*
 * After the events: forward what clients sent, write to every upstream and
 * client with something to send (most writes succeed at once, saving a
 * turn of the loop)
 */
static void
forward_and_flush(void)
{
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->process)
			process_client(clients[i]);
	broker_pool_kick();
	end_rerouted_links();
	for (int i = 0; i < n_upstreams; i++)
		upstream_write(upstreams[i]);
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->out_len > BROKER_CLIENT_BUFFER_MAX)
			close_overflowing(clients[i], "replies it does not read");
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->out_off < clients[i]->out_len)
			client_write(clients[i]);
	/* replies delivered just now may let clients go on */
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->process)
			process_client(clients[i]);
	broker_pool_kick();
	for (int i = 0; i < n_upstreams; i++)
		upstream_write(upstreams[i]);
}

/* True while any backend is linked to the broker */
static bool
any_client(void)
{
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0)
			return true;
	return false;
}

/*
 * True until the broker may end: at once without a stop asked; once asked
 * (SIGTERM: a shutdown), when no backend is linked any more or after
 * BROKER_STOP_LINGER_MS, so that backends ending in the same shutdown
 * still give their slots back through it
 */
static bool
keep_serving(volatile sig_atomic_t *stop_requested, TimestampTz *stop_by)
{
	if (!*stop_requested)
		return true;
	if (*stop_by == 0)
		*stop_by = TimestampTzPlusMilliseconds(redsem_now(), BROKER_STOP_LINGER_MS);
	return any_client() && redsem_now() < *stop_by;
}

/*
 * The settings the supervisor sent at a reload (the last, if several came):
 * redsem.command_timeout, at which the broker gives up on a command, and
 * redsem.connect_timeout, its sentinel asks' and a link's before its
 * header, apply to what it sends from now on (a link's own settings are
 * its header's).  The supervisor gone (end of file), nothing: the broker
 * dies with it.
 */
static void
read_settings(void)
{
	BrokerSettings s;
	BrokerSettings last = {0, 0, 0};
	bool		got = false;
	ssize_t		n;

	while ((n = read(settings_fd, &s, sizeof(s))) == (ssize_t) sizeof(s))
	{
		last = s;
		got = true;
	}
	if (n == 0)
	{
		/* (the supervisor gone: no more events from the pipe) */
		close(settings_fd);
		settings_fd = -1;
		set_dirty = true;
	}
	if (!got)
		return;
	redsem_command_timeout_ms = Max(last.command_timeout_ms, 1);
	redsem_connect_timeout_ms = Max(last.connect_timeout_ms, 1);
	if (Max(last.poll_us, 0) != redsem_broker_poll_us)
		ereport(LOG,
				(errmsg("redsem broker polls for %d microseconds after activity now (redsem.broker_poll)",
						Max(last.poll_us, 0))));
	redsem_broker_poll_us = Max(last.poll_us, 0);
}

/*
 * Raise this process's soft limit of open files to its hard limit: each
 * backend linked is a socket here, so the usual soft limit of 1024 would
 * cap a server's linked backends
 */
static void
raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		elog(DEBUG1, "redsem broker could not raise its open-file limit: %m");
}

/*
 * Wait for events on the wait set for up to timeout_ms; until
 * redsem.broker_poll us after the last were handled (*active), poll first,
 * yielding the CPU between polls (timing.h, BROKER_POLL_US), then sleep
 * for what is left of timeout_ms
 */
static int
wait_events(WaitEvent *events, int nevents, long timeout_ms, const instr_time *active)
{
	instr_time	start;
	instr_time	now;
	int64		polled_us = 0;

	INSTR_TIME_SET_CURRENT(start);
	while (redsem_broker_poll_us > 0 && polled_us < (int64) timeout_ms * 1000)
	{
		int			n = WaitEventSetWait(wait_set, 0, events, nevents, PG_WAIT_EXTENSION);

		if (n > 0)
			return n;
		INSTR_TIME_SET_CURRENT(now);
		INSTR_TIME_SUBTRACT(now, *active);
		if ((int64) INSTR_TIME_GET_MICROSEC(now) >= redsem_broker_poll_us)
			break;
		sched_yield();
		INSTR_TIME_SET_CURRENT(now);
		INSTR_TIME_SUBTRACT(now, start);
		polled_us = (int64) INSTR_TIME_GET_MICROSEC(now);
	}
	timeout_ms = Max(timeout_ms - (long) (polled_us / 1000), 0);
	return WaitEventSetWait(wait_set, timeout_ms, events, nevents, PG_WAIT_EXTENSION);
}

/*
 * The broker's loop; ends the process once *stop_requested (SIGTERM).
 * settings_pipe: the supervisor's settings at each reload (non-blocking).
 */
void
broker_loop(volatile sig_atomic_t *stop_requested, int settings_pipe)
{
	WaitEvent	events[64];
	TimestampTz stop_by = 0;
	instr_time	active;			/* when events last came */

	broker_cxt = AllocSetContextCreate(TopMemoryContext, "redsem broker",
									   ALLOCSET_DEFAULT_SIZES);
	settings_fd = settings_pipe;
	raise_fd_limit();
	listen_broker();
	ereport(LOG, (errmsg("redsem broker started")));
	INSTR_TIME_SET_CURRENT(active);
	while (keep_serving(stop_requested, &stop_by))
	{
		TimestampTz now;
		int			n;

		if (set_dirty)
			rebuild_wait_set();
		update_interest();
		n = wait_events(events, lengthof(events), stop_by ? 50 : sleep_ms(redsem_now()), &active);
		for (int i = 0; i < n; i++)
			handle_event(&events[i]);
		forward_and_flush();
		now = redsem_now();
		if (accept_paused_until != 0 && now >= accept_paused_until)
		{
			accept_paused_until = 0;
			set_dirty = true;
		}
		check_deadlines(now);
		check_openings(now);
		broker_reap_ended(now);
		check_sentinels(now);
		check_waiters(now);
		broker_pool_check(now);
		close_idle_sides(now);
		end_unused_targets(now);
		sweep_clients();
		/* (the polls' time counts from here: the round's work is done) */
		if (n > 0)
			INSTR_TIME_SET_CURRENT(active);
	}
	_exit(0);
}
