/*
 * broker_upstream.c
 *		The broker's upstream connections: its targets (the Redis servers
 *		clients name), opening connections to them through openers
 *		(broker_open.c), asking sentinels where a primary is, reading
 *		replies and handing them back, and giving up on a connection that
 *		broke or went silent.
 */
#include "postgres.h"

#include <signal.h>
#include <unistd.h>

#include "hiredis.h"

#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "broker_cluster.h"
#include "broker_parts.h"
#include "broker_wait.h"
#include "brokerlink.h"
#include "clock.h"
#include "conn.h"
#include "guc.h"
#include "link.h"

/* The openers under way (a free slot: o.pid 0) */
Opening   **openings;
int			n_openings;
/* Why new_upstream found none, not waiting for one: what its client is told */
RedisOutcome no_upstream;
/* When the broker last forked (an opener) */
TimestampTz forked_at = 0;

static void timeout_outcome(const Client *c, RedisOutcome *o);

/*
 * Close a connection to Redis: its context, and so its relay for TLS (0:
 * none), reaped once it has ended (broker_open.c)
 */
void
close_connection(redisContext *ctx, pid_t relay)
{
	redis_close_context(ctx);
	broker_reap_later(relay);
}

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
int
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
bool
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
void
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
void
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
 * Have an opener open a connection to target t for client c (a side one
 * if side), within what is left of c's connect timeout; false, the
 * target's failure noted, if none could be forked
 */
static bool
start_opening(int t, bool side, Client *c)
{
	Target	   *target = &targets[t];
	Opening    *op = free_opening_slot();
	RedisOutcome outcome;
	/*
	 * (its whole connect timeout when it begins to wait now, so that a
	 * failure names the setting as direct mode does; what is left of it
	 * when it has waited already, for another's open or its own)
	 */
	TimestampTz by = redsem_now() - c->wait_start < 1000 ? DT_NOEND : c->wait_until;

	if (!broker_open_start(&op->o, target->host, target->port, target->path,
						   &target->profile, c->connect_timeout_ms, by, false, forget_broker,
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
 * True if target t's sentinels are to be asked where the primary is, when
 * it is time (check_sentinels): found through sentinels, a primary found,
 * no ask under way, a client linked
 */
bool
sentinels_to_ask(int t)
{
	Target	   *target = &targets[t];

	if (target->free || target->profile.sentinels[0] == '\0' || target->asking ||
		target->primary[0] == '\0')
		return false;
	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd >= 0 && clients[i]->target == t)
			return true;
	return false;
}

/*
 * Every SENTINEL_RECHECK_MS, ask the sentinels of each target that has
 * clients where the primary is (a primary replaced by SENTINEL FAILOVER
 * takes writes until the sentinels turn it into a replica, and one that
 * hangs answers nothing: the broker's connections would stay with it,
 * where a session's next connection in direct mode asks anew).
 */
void
check_sentinels(TimestampTz now)
{
	for (int t = 0; t < n_targets; t++)
	{
		if (!sentinels_to_ask(t) || now < targets[t].next_ask)
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

/*
 * The shared upstream of c's target (an idle side connection promoted if
 * it has none: a WAIT took it), or new_upstream's answer
 */
Upstream *
shared_upstream(Client *c, bool *wait)
{
	if (targets[c->target].shared < 0)
		promote_idle_side(c->target);
	if (targets[c->target].shared >= 0)
		return upstreams[targets[c->target].shared];
	return new_upstream(c, false, wait);
}

/* An idle side connection of c's target (for a BLPOP), or new_upstream's answer */
Upstream *
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
		if (!again)
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
void
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
void
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
 * Answer every client still waiting for another session's open once its
 * own connect timeout has run out (that open may have been given longer),
 * as direct mode would have failed its connect; a client that began the
 * open it waits for hears that open's own words at its end
 */
void
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
void
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
void
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
 * it owes a reply, or an opener works for it
 */
static bool
target_in_use(int t)
{
	const Target *target = &targets[t];

	if (target->opening_shared || target->opening_sides > 0 || target->asking)
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
		if (openings[i]->o.pid != 0 && openings[i]->target == t)
			return true;
	return false;
}

/*
 * End the targets unused for BROKER_TARGET_IDLE_MS (timing.h): close their
 * connections (none owes a reply), then, once no wait pool names them any
 * more (an empty pool whose connection closed is freed by the next kick:
 * at the next look), free their entries
 */
void
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
		if (now - target->unused_since < (TimestampTz) BROKER_TARGET_IDLE_MS * 1000)
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
void
upstream_write(Upstream *u)
{
	int			done = 0;

	if (u->ctx == NULL || !u->want_write)
		return;
	if (redisBufferWrite(u->ctx, &done) != REDIS_OK)
	{
		fail_upstream(u, u->ctx->errstr);
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
void
upstream_read(Upstream *u)
{
	void	   *r;

	if (u->ctx == NULL)
		return;
	if (redisBufferRead(u->ctx) != REDIS_OK)
	{
		fail_upstream(u, u->ctx->errstr);
		return;
	}
	for (;;)
	{
		if (redisGetReplyFromReader(u->ctx, &r) != REDIS_OK)
		{
			fail_upstream(u, u->ctx->errstr);
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
