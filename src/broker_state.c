/*
 * broker_state.c
 *		The broker's state, shared by its loop (broker_loop.c) and its wait
 *		pools (broker_wait.c): its clients, targets and upstream
 *		connections; encoding replies onto a client's output; the FIFO of
 *		an upstream and queueing a command on it; a target's entry, and a
 *		Cluster node's target (broker_cluster.c).
 */
#include "postgres.h"

#include "hiredis.h"

#include "utils/memutils.h"

#include "broker_state.h"
#include "brokerlink.h"
#include "clock.h"
#include "guc.h"
#include "timing.h"

MemoryContext broker_cxt;
Client	  **clients;
int			n_clients;
Upstream  **upstreams;
int			n_upstreams;
Target	   *targets;
int			n_targets;
bool		set_dirty = true;

/* ---- buffers and encoding ---- */

/* Append len bytes to a client's output */
void
broker_out_append(Client *c, const char *data, size_t len)
{
	if (c->out_len + len > c->out_cap)
	{
		size_t		cap = Max(c->out_cap * 2, c->out_len + len + 1024);

		c->out = c->out ? repalloc(c->out, cap) : MemoryContextAlloc(broker_cxt, cap);
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, data, len);
	c->out_len += len;
}

/* Append a RESP line: prefix, text, CRLF */
void
broker_out_line(Client *c, char prefix, const char *text, size_t len)
{
	broker_out_append(c, &prefix, 1);
	broker_out_append(c, text, len);
	broker_out_append(c, "\r\n", 2);
}

/* Append a RESP length or integer line (prefix and number) */
static void
out_number(Client *c, char prefix, long long n)
{
	char		buf[32];
	int			len = snprintf(buf, sizeof(buf), "%lld", n);

	broker_out_line(c, prefix, buf, len);
}

/* Encode a reply as RESP (version 2) onto a client's output */
void
broker_encode_reply(Client *c, const redisReply *r)
{
	switch (r->type)
	{
		case REDIS_REPLY_STATUS:
			broker_out_line(c, '+', r->str, (size_t) r->len);
			break;
		case REDIS_REPLY_ERROR:
			/* (Redis's words never pass for the broker's own: brokerlink.h) */
			if (r->len >= (int) strlen(REDSEM_BROKER_ERROR) &&
				strncmp(r->str, REDSEM_BROKER_ERROR, strlen(REDSEM_BROKER_ERROR)) == 0)
			{
				broker_out_append(c, "-ERR ", 5);
				broker_out_append(c, r->str, (size_t) r->len);
				broker_out_append(c, "\r\n", 2);
			}
			else
				broker_out_line(c, '-', r->str, (size_t) r->len);
			break;
		case REDIS_REPLY_INTEGER:
			out_number(c, ':', r->integer);
			break;
		case REDIS_REPLY_NIL:
			broker_out_append(c, "$-1\r\n", 5);
			break;
		case REDIS_REPLY_ARRAY:
			out_number(c, '*', (long long) r->elements);
			for (size_t i = 0; i < r->elements; i++)
				broker_encode_reply(c, r->element[i]);
			break;
		default:
			/* a string, or a RESP3 type a RESP2 connection never gets */
			if (r->str == NULL)
			{
				broker_out_append(c, "$-1\r\n", 5);
				break;
			}
			out_number(c, '$', (long long) r->len);
			broker_out_append(c, r->str, (size_t) r->len);
			broker_out_append(c, "\r\n", 2);
			break;
	}
}

/* ---- the FIFO of an upstream ---- */

/* Add a pending command to an upstream's FIFO */
void
broker_fifo_push(Upstream *u, Pending p)
{
	if (u->count == u->cap)
	{
		int			cap = Max(u->cap * 2, 16);
		Pending    *fifo = MemoryContextAlloc(broker_cxt, sizeof(Pending) * cap);

		for (int i = 0; i < u->count; i++)
			fifo[i] = u->fifo[(u->head + i) % Max(u->cap, 1)];
		if (u->fifo)
			pfree(u->fifo);
		u->fifo = fifo;
		u->cap = cap;
		u->head = 0;
	}
	u->fifo[(u->head + u->count) % u->cap] = p;
	u->count++;
}

/* The oldest pending command of an upstream (it must have one) */
Pending *
broker_fifo_head(Upstream *u)
{
	return &u->fifo[u->head];
}

/* Remove the oldest pending command */
void
broker_fifo_pop(Upstream *u)
{
	u->head = (u->head + 1) % u->cap;
	u->count--;
}

/* The deadline of a command sent now that waits wait_ms by itself */
TimestampTz
broker_command_deadline(int64 wait_ms)
{
	return TimestampTzPlusMilliseconds(redsem_now(), redsem_command_timeout_ms +
									   BROKER_TIMEOUT_MARGIN_MS + wait_ms);
}

/* Queue an append of a formatted command and its pending entry on u */
bool
broker_queue_formatted(Upstream *u, char *formatted, int len, Pending p)
{
	bool		ok;

	if (len < 0)
		return false;
	ok = redisAppendFormattedCommand(u->ctx, formatted, len) == REDIS_OK;
	redisFreeCommand(formatted);
	if (!ok)
		return false;
	/* (deadlines only rise along a FIFO: the head's is the one checked) */
	if (u->count > 0)
		p.deadline = Max(p.deadline, u->fifo[(u->head + u->count - 1) % u->cap].deadline);
	broker_fifo_push(u, p);
	u->want_write = true;
	return true;
}

/*
 * Queue a command of the broker's own on upstream u (what: whose, pool:
 * the wait pool it is for, pool_gen: that pool's gen); false if out of
 * memory
 */
bool
broker_send_own(Upstream *u, int argc, const char **argv, PendKind what, int pool,
				uint32 pool_gen, TimestampTz deadline)
{
	char	   *formatted;
	int			len = redisFormatCommandArgv(&formatted, argc, argv, NULL);
	Pending		p = {0};

	p.what = what;
	p.client = pool;
	p.generation = pool_gen;
	p.deadline = deadline;
	p.slot = -1;
	p.stamp = 0;
	p.sees = false;
	return broker_queue_formatted(u, formatted, len, p);
}

/* True if a request is the command name (case-insensitive) */
bool
broker_is_command(const redisReply *cmd, const char *name)
{
	return cmd->elements > 0 && pg_strcasecmp(cmd->element[0]->str, name) == 0;
}

/* ---- targets ---- */

/* A free target entry's index (a new one if none) */
int
broker_free_target_slot(void)
{
	for (int i = 0; i < n_targets; i++)
		if (targets[i].free)
			return i;
	targets = targets ? repalloc(targets, sizeof(Target) * (n_targets + 1)) :
		MemoryContextAlloc(broker_cxt, sizeof(Target));
	return n_targets++;
}

/* A copy of s, in the broker's context */
static char *
copy_string(const char *s)
{
	return MemoryContextStrdup(broker_cxt, s);
}

/* True if two profiles are the same (a role's Redis user stays its own) */
static bool
same_profile(const RedisProfile *a, const RedisProfile *b)
{
	return a->database == b->database && strcmp(a->user, b->user) == 0 &&
		strcmp(a->password, b->password) == 0 && a->tls == b->tls &&
		strcmp(a->tls_ca_file, b->tls_ca_file) == 0 &&
		strcmp(a->tls_cert_file, b->tls_cert_file) == 0 &&
		strcmp(a->tls_key_file, b->tls_key_file) == 0 &&
		strcmp(a->tls_server_name, b->tls_server_name) == 0 &&
		strcmp(a->sentinels, b->sentinels) == 0 &&
		strcmp(a->sentinel_master, b->sentinel_master) == 0 &&
		strcmp(a->sentinel_user, b->sentinel_user) == 0 &&
		strcmp(a->sentinel_password, b->sentinel_password) == 0;
}

/*
 * The target of Cluster node host:port with the profile of home (the seed
 * a client linked for: broker_cluster.c), added if new
 */
int
broker_node_target(int home, const char *host, int port)
{
	Target	   *t;
	const RedisProfile *p;
	int			i;

	for (i = 0; i < n_targets; i++)
		if (!targets[i].free && targets[i].cluster && targets[i].path == NULL &&
			targets[i].port == port && strcmp(targets[i].host, host) == 0 &&
			same_profile(&targets[i].profile, &targets[home].profile))
			return i;
	i = broker_free_target_slot();
	t = &targets[i];
	p = &targets[home].profile; /* (after: the array may have moved) */
	memset(t, 0, sizeof(Target));
	t->host = copy_string(host);
	t->port = port;
	t->profile.database = p->database;
	t->profile.user = copy_string(p->user);
	t->profile.password = copy_string(p->password);
	t->profile.tls = p->tls;
	t->profile.tls_ca_file = copy_string(p->tls_ca_file);
	t->profile.tls_cert_file = copy_string(p->tls_cert_file);
	t->profile.tls_key_file = copy_string(p->tls_key_file);
	t->profile.tls_server_name = copy_string(p->tls_server_name);
	t->profile.sentinels = copy_string(p->sentinels);
	t->profile.sentinel_master = copy_string(p->sentinel_master);
	t->profile.sentinel_user = copy_string(p->sentinel_user);
	t->profile.sentinel_password = copy_string(p->sentinel_password);
	t->cluster = true;
	t->shared = -1;
	return i;
}
