/*
 * broker_forward.c
 *		The broker's forwarding: taking each client's requests, sending them
 *		on the right upstream (the shared one, a side one for a wait),
 *		and answering a client whose target cannot be reached.
 */
#include "postgres.h"

#include <errno.h>

#include "hiredis.h"

#include "miscadmin.h"

#include "broker_cluster.h"
#include "broker_parts.h"
#include "broker_wait.h"
#include "brokerlink.h"

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
void
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
	Pending		p;

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
bool
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
void
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
void
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
