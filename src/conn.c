/*
 * conn.c
 *		The backend's single Redis connection and every wait on it.
 *
 * The connection is opened lazily, on first use, and reopened on the next
 * call after it broke, after a connection setting changed, or after Redis
 * said it cannot serve us here (READONLY, LOADING, MASTERDOWN: a failover
 * behind the same address is then followed).  All socket I/O is
 * non-blocking: every wait is on the socket and the process latch together
 * (one wait set kept per socket), so query cancel, statement_timeout and
 * pg_terminate_backend are served while Redis is slow or stalled.  A
 * request interrupted half way leaves a reply in flight, so the connection
 * is discarded rather than reused.
 *
 * One core, redis_exec(), serves every caller.  It returns a status and
 * never raises, except that on SQL paths (call->interruptible) a cancel or
 * timeout interrupt unwinds through it.  What went wrong is kept in the
 * call's outcome, classified (see RedisStatus), and redis_report() turns it
 * into an error or a log line at the caller's level, in the manner of
 * postgres_fdw's pgfdw_report_error().
 */
#include "postgres.h"

#include <sys/socket.h>
#include <errno.h>
#include <netdb.h>

#include "hiredis.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "cluster.h"
#include "conn.h"
#include "redsem.h"
#include "report.h"
#include "resolve.h"
#include "secret.h"
#include "sentinel.h"
#include "timing.h"
#include "tls.h"

/*
 * One connection: to the Redis server (link 0), or, in a Redis Cluster, to
 * node i of cluster.c (link i).
 */
typedef struct Link
{
	redisContext *ctx;			/* NULL while closed */
	uint64		generation;		/* the settings it was opened under */
	bool		tls;			/* it speaks TLS */

	/*
	 * True from sending a command until its reply is read.  Still true at
	 * the next use means the request was abandoned (an ERROR unwinds
	 * through redis_exec, but FATAL exits without unwinding): a reply, or a
	 * blocked BLPOP, is still owed on the socket, so the connection must not
	 * be reused.
	 */
	bool		in_flight;
} Link;

static Link links[CLUSTER_MAX_NODES];

/* The link in use: every function below works on it */
static int	cur_node = 0;
#define cur (&links[cur_node])

/* A hash of every setting that decides which Redis data we reach */
uint64
redis_target_signature(void)
{
	/* through sentinels, the data is the named primary's, wherever it is */
	char	   *desc = sentinel_enabled()
		? psprintf("sentinel|%s|%s|%d|%s", redsem_sentinels,
				   redsem_sentinel_master, redsem_database,
				   redsem_user ? redsem_user : "")
		: psprintf("%s%s|%d|%s|%d|%s", cluster_enabled() ? "cluster|" : "",
				   redsem_host ? redsem_host : "", redsem_port,
				   redsem_unix_socket ? redsem_unix_socket : "",
				   redsem_database,
				   redsem_user ? redsem_user : "");
	uint64		h = hash_bytes_extended((const unsigned char *) desc,
										strlen(desc), 0);

	pfree(desc);
	return h;
}

/* Human-readable connection target, for messages */
char *
redis_target_description(void)
{
	if (sentinel_enabled())
		return sentinel_target_description();
	if (cluster_enabled())
		return psprintf("%s:%d (Redis Cluster)", cluster_node_host(cur_node),
						cluster_node_port(cur_node));
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
 * Record why a call failed; raise at once if the call reports at ERROR.
 * Always returns false, so callers can "return redis_fail(...)".
 */
bool
redis_fail(RedisCall *call, RedisStatus status, const char *fmt,...)
{
	va_list		args;

	call->outcome.status = status;
	va_start(args, fmt);
	vsnprintf(call->outcome.detail, sizeof(call->outcome.detail), fmt, args);
	va_end(args);
	if (call->elevel >= ERROR)
		redis_report(call->elevel, &call->outcome);
	return false;
}

/* Close a context and its socket */
static void
close_context(redisContext *c)
{
	redis_forget_wait_fd(c->fd);
	redisFree(c);
}

/* Close the current link, if open, and give back its file descriptor */
static void
disconnect_current(void)
{
	if (cur->ctx == NULL)
		return;
	close_context(cur->ctx);
	cur->ctx = NULL;
	cur->in_flight = false;
	ReleaseExternalFD();
}

/* Close every connection */
void
redis_disconnect(void)
{
	int			was = cur_node;

	for (cur_node = 0; cur_node < CLUSTER_MAX_NODES; cur_node++)
		disconnect_current();
	cur_node = was;
}

/*
 * How many times this process started writing to Redis: a request made
 * while this stays unchanged never left the process.
 */
static uint64 writes_started = 0;

/* See writes_started */
uint64
redis_writes_started(void)
{
	return writes_started;
}

/* Write out everything hiredis has buffered, waiting on the socket */
static RedisStatus
flush_output(redisContext *c, TimestampTz deadline, bool interruptible)
{
	int			done = 0;

	writes_started++;

	for (;;)
	{
		if (redisBufferWrite(c, &done) != REDIS_OK)
			return RS_LOST;
		if (done)
			return RS_OK;
		if ((redis_wait_socket(c->fd, WL_SOCKET_WRITEABLE, deadline,
							interruptible) & WL_TIMEOUT) && redis_past(deadline))
			return RS_TIMED_OUT;
	}
}

/* Read the next reply (malloc'd by hiredis) into *reply, waiting on the socket */
static RedisStatus
read_reply(redisContext *c, TimestampTz deadline, bool interruptible,
		   redisReply **reply)
{
	void	   *r = NULL;

	*reply = NULL;
	for (;;)
	{
		int			rc;

		if (redisGetReplyFromReader(c, &r) != REDIS_OK)
			return RS_LOST;
		if (r != NULL)
		{
			*reply = (redisReply *) r;
			return RS_OK;
		}
		rc = redis_wait_socket(c->fd, WL_SOCKET_READABLE, deadline, interruptible);
		if (rc & WL_SOCKET_READABLE)
		{
			if (redisBufferRead(c) != REDIS_OK)
				return RS_LOST;
		}
		else if ((rc & WL_TIMEOUT) && redis_past(deadline))
			return RS_TIMED_OUT;
	}
}

/*
 * Flush the output buffer and read one reply, waiting on the socket in
 * between.  Stores the reply (malloc'd by hiredis) in *reply.
 */
static RedisStatus
exchange(redisContext *c, TimestampTz deadline, bool interruptible,
		 redisReply **reply)
{
	RedisStatus status = flush_output(c, deadline, interruptible);

	*reply = NULL;
	if (status == RS_OK)
		status = read_reply(c, deadline, interruptible, reply);
	if (status == RS_OK && c == cur->ctx)
		cur->in_flight = false;
	return status;
}

/*
 * The class of a Redis error reply, from its leading code; *drop says
 * whether the connection is no use any more (the server is a replica now,
 * refused us, or is about to close it).
 */
static RedisStatus
classify_error(const char *msg, bool *drop)
{
	static const struct
	{
		const char *prefix;
		RedisStatus status;
		bool		drop;
	}			classes[] =
	{
		{"NOSCRIPT", RS_NOSCRIPT, false},
		{"ERR Function not found", RS_NOSCRIPT, false},
		{"NOAUTH", RS_AUTH_FAILED, true},
		{"NOPERM", RS_AUTH_FAILED, false},
		/* the ACL denies a command the library runs (7.0; 7.2 and later) */
		{"ERR The user executing the script can't run this command", RS_AUTH_FAILED, false},
		{"ERR ACL failure in script", RS_AUTH_FAILED, false},
		{"WRONGPASS", RS_BAD_PASSWORD, true},
		{"ERR invalid password", RS_BAD_PASSWORD, true},
		{"ERR AUTH", RS_AUTH_FAILED, true},
		{"ERR Client sent AUTH", RS_AUTH_FAILED, true},
		/* Redis 7 answers a long command of an unauthenticated client so */
		{"ERR Protocol error: unauthenticated", RS_AUTH_FAILED, true},
		{"ERR max number of clients", RS_TOO_MANY_CLIENTS, true},
		{"READONLY", RS_UNAVAILABLE, true},
		{"LOADING", RS_UNAVAILABLE, true},
		{"MASTERDOWN", RS_UNAVAILABLE, true},
		{"UNBLOCKED", RS_UNAVAILABLE, true},
		{"BUSY", RS_UNAVAILABLE, false},
		{"TRYAGAIN", RS_UNAVAILABLE, false},
		{"CLUSTERDOWN", RS_UNAVAILABLE, true},
		/* WAIT on a primary demoted since the grant: it cannot confirm */
		{"ERR WAIT cannot be used with replica", RS_NOT_REPLICATED, true},
		{"OOM", RS_OUT_OF_MEMORY, false},
		{"WRONGTYPE", RS_CONFLICT, false},
		{"REDSEM", RS_CONFLICT, false},
		{"ERR user_script", RS_CONFLICT, false},
		{"ERR user_function", RS_CONFLICT, false},
		{"ERR Error running script", RS_CONFLICT, false},
		{"ERR Error compiling script", RS_CONFLICT, false},
	};

	for (int i = 0; i < lengthof(classes); i++)
	{
		size_t		len = strlen(classes[i].prefix);

		if (strncmp(msg, classes[i].prefix, len) == 0 &&
			(msg[len] == ' ' || msg[len] == '\0' || msg[len] == ':'))
		{
			*drop = classes[i].drop;
			return classes[i].status;
		}
	}
	*drop = false;
	return RS_REFUSED;
}

/*
 * Turn an error reply into the call's outcome (freeing the reply).  Returns
 * the class; the caller drops the connection if *drop.
 */
static RedisStatus
absorb_error_reply(RedisCall *call, redisReply *reply, const char *what,
				   bool *drop)
{
	const char *msg = (reply->str != NULL) ? reply->str : "";
	RedisStatus status = classify_error(msg, drop);

	call->outcome.status = status;
	/* Redis never echoes a password in its error replies */
	if (what != NULL)
		snprintf(call->outcome.detail, sizeof(call->outcome.detail),
				 "%s: %s", what, msg);
	else
		snprintf(call->outcome.detail, sizeof(call->outcome.detail), "%s", msg);
	freeReplyObject(reply);
	return status;
}

/* Wait for a non-blocking connect to finish, then check its outcome */
static bool
finish_connect(RedisCall *call, redisContext *c, TimestampTz deadline)
{
	int			soerr = 0;
	socklen_t	len = sizeof(soerr);

	for (;;)
	{
		int			rc = redis_wait_socket(c->fd, WL_SOCKET_WRITEABLE, deadline,
										call->interruptible);

		if (rc & WL_SOCKET_WRITEABLE)
			break;
		if ((rc & WL_TIMEOUT) && redis_past(deadline))
		{
			(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "no answer within %d ms (redsem.connect_timeout)",
					 redsem_connect_timeout_ms);
			return false;
		}
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
		soerr = errno;
	if (soerr != 0)
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "%s",
				 strerror(soerr));
		return false;
	}
	return true;
}

/*
 * Send one command on a context being set up and read its reply into
 * *reply (or free it when reply is NULL); on failure fill the outcome.  An
 * error reply is a failure, of its class (RS_REFUSED counts as a failure
 * to connect).
 */
bool
redis_context_command(RedisCall *call, redisContext *c, int argc,
					  const char **argv, TimestampTz deadline,
					  redisReply **reply)
{
	redisReply *r;
	RedisStatus status;
	bool		drop;

	if (reply != NULL)
		*reply = NULL;
	if (redisAppendCommandArgv(c, argc, argv, NULL) != REDIS_OK)
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "%s", c->errstr);
		return false;
	}
	status = exchange(c, deadline, call->interruptible, &r);
	if (status != RS_OK)
	{
		call->outcome.status = RS_CONNECT_FAILED;
		if (c->err)
			snprintf(call->outcome.detail, sizeof(call->outcome.detail), "%s", c->errstr);
		else
			snprintf(call->outcome.detail, sizeof(call->outcome.detail),
					 "no answer to %s within %d ms (redsem.connect_timeout)",
					 argv[0], redsem_connect_timeout_ms);
		return false;
	}
	if (r->type == REDIS_REPLY_ERROR)
	{
		status = absorb_error_reply(call, r, argv[0], &drop);
		if (status == RS_REFUSED)
			call->outcome.status = RS_CONNECT_FAILED;
		return false;
	}
	if (reply != NULL)
		*reply = r;
	else
		freeReplyObject(r);
	return true;
}

/* Authenticate and select the database, as configured */
static bool
setup_session(RedisCall *call, redisContext *c, TimestampTz deadline)
{
	char		password[REDSEM_MAX_SECRET_BYTES + 1];
	bool		have_password;
	bool		ok = true;

	if (!redis_password(password, sizeof(password), &have_password, &call->outcome))
		return false;
	if (have_password)
	{
		const char *argv[3] = {"AUTH", redsem_user, password};

		if (redsem_user && redsem_user[0] != '\0')
			ok = redis_context_command(call, c, 3, argv, deadline, NULL);
		else
		{
			argv[1] = password;
			ok = redis_context_command(call, c, 2, argv, deadline, NULL);
		}
		explicit_bzero(password, sizeof(password));
	}
	if (ok && redsem_database != 0)
	{
		char		db[16];
		const char *argv[] = {"SELECT", db};

		snprintf(db, sizeof(db), "%d", redsem_database);
		ok = redis_context_command(call, c, 2, argv, deadline, NULL);
	}
	return ok;
}

/*
 * With TLS 1.3 the server judges our certificate after our side of the
 * handshake is over: one PING tells.  Any reply, NOAUTH included, means the
 * session was accepted; a closed connection means it was refused, and
 * OpenSSL has the server's reason.
 */
static bool
tls_accepted(RedisCall *call, redisContext *c, TimestampTz deadline)
{
	const char *argv[] = {"PING"};
	redisReply *r;
	char		why[200];

	if (redisAppendCommandArgv(c, 1, argv, NULL) == REDIS_OK &&
		exchange(c, deadline, call->interruptible, &r) == RS_OK)
	{
		freeReplyObject(r);
		return true;
	}
	(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "the server refused the TLS session after the handshake (a client certificate it requires or does not accept): %s",
			 tls_refusal(why, sizeof(why), c->err ? c->errstr : "no answer"));
	return false;
}

/* Close a context made by redis_open_context, giving back its descriptor */
void
redis_close_context(redisContext *c)
{
	close_context(c);
	ReleaseExternalFD();
}

/*
 * Connect to host:port (or the Unix socket unix_path, when not NULL) and
 * start TLS if configured, by deadline.  Returns the context, or NULL with
 * the call's outcome saying why; nothing is left open then, even when an
 * interrupt unwinds the wait.
 */
redisContext *
redis_open_context(RedisCall *call, const char *host, int port,
				   const char *unix_path, TimestampTz deadline)
{
	redisContext *c;
	bool		ok;
	char		addr[NI_MAXHOST];

	call->outcome.status = RS_CONNECT_FAILED;
	if (redsem_tls && !tls_supported(call))
		return NULL;
	if (unix_path != NULL && redsem_tls)
	{
		snprintf(call->outcome.detail, sizeof(call->outcome.detail),
				 "redsem.tls applies to TCP connections, and redsem.unix_socket is set");
		return NULL;
	}
	if (unix_path == NULL && !redis_resolve(call, host, addr, sizeof(addr), deadline))
		return NULL;
	if (!AcquireExternalFD())
	{
		snprintf(call->outcome.detail, sizeof(call->outcome.detail),
				 "there are too many open files on the local server");
		return NULL;
	}
	c = unix_path ? redisConnectUnixNonBlock(unix_path) : redisConnectNonBlock(addr, port);
	if (c == NULL || c->err)
	{
		snprintf(call->outcome.detail, sizeof(call->outcome.detail), "%s",
				 c ? c->errstr : "out of memory");
		if (c)
			close_context(c);
		ReleaseExternalFD();
		return NULL;
	}
	PG_TRY();
	{
		ok = finish_connect(call, c, deadline) &&
			(!redsem_tls || (tls_start(call, c, host, deadline) &&
							 tls_accepted(call, c, deadline)));
	}
	PG_CATCH();
	{
		redis_close_context(c);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!ok)
	{
		redis_close_context(c);
		return NULL;
	}
	call->outcome.status = RS_OK;
	if (unix_path == NULL)
		(void) redisEnableKeepAlive(c);
	return c;
}

/*
 * Set up the session of a new context c (see setup_session); on failure, or
 * when an interrupt unwinds, c is closed.
 */
bool
redis_setup_context(RedisCall *call, redisContext *c, TimestampTz deadline)
{
	bool		ok;

	PG_TRY();
	{
		ok = setup_session(call, c, deadline);
	}
	PG_CATCH();
	{
		redis_close_context(c);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!ok)
		redis_close_context(c);
	return ok;
}

/* The configured Unix socket, or NULL for TCP */
static const char *
unix_socket_path(void)
{
	return (redsem_unix_socket && redsem_unix_socket[0] != '\0') ? redsem_unix_socket : NULL;
}

/* The earlier of deadline and redsem.connect_timeout from now */
TimestampTz
redis_connect_deadline(TimestampTz deadline)
{
	TimestampTz d = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												redsem_connect_timeout_ms);

	return Min(d, deadline);
}

/*
 * Open a connection to the configured server (in a cluster: to the node of
 * the current link) and set up its session
 */
static redisContext *
open_direct(RedisCall *call, TimestampTz deadline)
{
	TimestampTz connect_deadline = redis_connect_deadline(deadline);
	redisContext *c = cluster_enabled()
		? redis_open_context(call, cluster_node_host(cur_node),
							 cluster_node_port(cur_node), NULL, connect_deadline)
		: redis_open_context(call, redsem_host, redsem_port,
							 unix_socket_path(), connect_deadline);

	if (c == NULL || !redis_setup_context(call, c, connect_deadline))
		return NULL;
	return c;
}

/*
 * Open the connection: to the configured server, or to the primary the
 * sentinels name (see sentinel.c).  While a failover runs (the named primary
 * is unreachable or still a replica), ask again every SENTINEL_RETRY_MS
 * until deadline.  On failure nothing is left open and the call's outcome
 * says why.
 */
static bool
open_connection(RedisCall *call, TimestampTz deadline)
{
	redisContext *c;

	if (sentinel_enabled() && cluster_enabled())
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "redsem.sentinels and redsem.cluster cannot be used together: a Redis Cluster fails over by itself");
		return false;
	}
	for (;;)
	{
		c = sentinel_enabled() ? sentinel_connect_primary(call, deadline)
			: open_direct(call, deadline);
		if (c != NULL || call->outcome.status != RS_UNAVAILABLE || redis_past(deadline))
			break;
		redis_pause(SENTINEL_RETRY_MS, deadline, call->interruptible);
	}
	if (c == NULL)
		return false;
	cur->ctx = c;
	cur->generation = redsem_guc_generation;
	cur->tls = redsem_tls;
	return true;
}

/*
 * True if an idle connection can no longer be used: a setting changed, or
 * the server closed it (EOF or unexpected bytes waiting on the socket).
 */
static bool
connection_is_stale(void)
{
	char		b;
	ssize_t		n;

	if (cur->in_flight || cur->generation != redsem_guc_generation || cur->ctx->err)
		return true;
	n = recv(cur->ctx->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0 && cur->tls)
		return !tls_idle_input_ok(cur->ctx);
	if (n >= 0)
		return true;
	return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/* Make sure the current link is usable, opening it if need be */
static bool
ensure_connection(RedisCall *call, TimestampTz deadline)
{
	if (cur->ctx != NULL && connection_is_stale())
		disconnect_current();
	if (cur->ctx != NULL)
		return true;
	return open_connection(call, deadline);
}

/*
 * After a failed write or read: if Redis wrote an error line before it
 * closed the connection (it does so when it has too many clients), take the
 * class and words from that line rather than the socket's failure.
 */
static void
salvage_error_line(RedisCall *call)
{
	char		buf[256];
	ssize_t		n = recv(cur->ctx->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	char	   *end;
	bool		drop;
	RedisStatus status;

	if (n <= 1 || buf[0] != '-')
		return;
	buf[n] = '\0';
	if ((end = strpbrk(buf, "\r\n")) != NULL)
		*end = '\0';
	status = classify_error(buf + 1, &drop);
	(void) redis_note(&call->outcome, status == RS_NOSCRIPT ? RS_LOST : status,
					  "%s", buf + 1);
}

/*
 * Send one command on the open connection, preceded by ASKING if asking (a
 * cluster slot being migrated: the ASKING reply is read and dropped), and
 * read its reply
 */
static RedisStatus
send_and_receive(RedisCall *call, int argc, const char **argv,
				 const size_t *argvlen, TimestampTz deadline, bool asking,
				 redisReply **reply)
{
	const char *asking_argv[] = {"ASKING"};
	RedisStatus status;

	if ((asking && redisAppendCommandArgv(cur->ctx, 1, asking_argv, NULL) != REDIS_OK) ||
		redisAppendCommandArgv(cur->ctx, argc, argv, argvlen) != REDIS_OK)
		return RS_LOST;
	cur->in_flight = true;
	PG_TRY();
	{
		status = flush_output(cur->ctx, deadline, call->interruptible);
		if (status == RS_OK && asking)
		{
			status = read_reply(cur->ctx, deadline, call->interruptible, reply);
			if (status == RS_OK)
				freeReplyObject(*reply);
			*reply = NULL;
		}
		if (status == RS_OK)
			status = read_reply(cur->ctx, deadline, call->interruptible, reply);
	}
	PG_CATCH();
	{
		/* interrupted with a reply possibly still in flight */
		disconnect_current();
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (status == RS_OK)
		cur->in_flight = false;
	return status;
}

/*
 * Fill the call's outcome from the connection's failure (status), and drop
 * the connection: a reply may still be owed on it.
 */
static void
connection_failed(RedisCall *call, RedisStatus status, int timeout_ms)
{
	call->outcome.status = status;
	call->outcome.timeout_ms = timeout_ms;
	snprintf(call->outcome.detail, sizeof(call->outcome.detail), "%s",
			 cur->ctx->err ? cur->ctx->errstr : "");
	if (status == RS_LOST)
		salvage_error_line(call);
	disconnect_current();
}

/*
 * Through sentinels or in a cluster, a command refused because the server
 * is no primary now (READONLY, CLUSTERDOWN, TRYAGAIN and the like: the
 * command was not run), or whose node could not be reached, is sent again
 * until the deadline: to the primary the sentinels name next, or to the
 * node the cluster redirects to.  True after pausing, if it should be.
 */
static bool
follow_failover(RedisCall *call, TimestampTz deadline)
{
	if (!(sentinel_enabled() || cluster_enabled()) ||
		!(call->outcome.status == RS_UNAVAILABLE ||
		  (cluster_enabled() && call->outcome.status == RS_CONNECT_FAILED)) ||
		redis_past(deadline))
		return false;
	redis_pause(SENTINEL_RETRY_MS, deadline, call->interruptible);
	return !redis_past(deadline);
}

/* The node of the command sent last (WAIT must follow it) */
static int	last_node = -1;

/*
 * For exec_routed's keep_errors: true if an error reply goes back to the
 * caller as it is (dropping the connection if it is no use any more);
 * false if it is a failover to follow (through sentinels or in a cluster).
 */
static bool
keep_error_reply(const redisReply *reply)
{
	RedisOutcome o;
	bool		drop = redis_reply_outcome(reply, &o);

	if (o.status == RS_UNAVAILABLE && (cluster_enabled() || sentinel_enabled()))
		return false;
	if (drop)
		disconnect_current();
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
	call->outcome.status = RS_UNAVAILABLE;
	call->outcome.timeout_ms = 0;
	snprintf(call->outcome.detail, sizeof(call->outcome.detail),
			 "redirected %d times, last: %s", redirects, reply->str ? reply->str : "");
	freeReplyObject(reply);
}

/*
 * A Cluster pipeline's shares of time (see pipeline_by_node): each node's
 * deadline, set when the pipeline first turns to it, and the nodes that
 * failed, which get no more of its commands.  NULL outside such a pipeline.
 */
typedef struct NodeShares
{
	int			budget_ms;
	TimestampTz until[CLUSTER_MAX_NODES];
	bool		failed[CLUSTER_MAX_NODES];
} NodeShares;

static NodeShares *shares = NULL;

/*
 * The deadline of node's share (*until, with *timeout_ms for messages);
 * false, with the outcome filled, if the node already failed.
 */
static bool
node_share(RedisCall *call, int node, TimestampTz deadline, TimestampTz *until,
		   int *timeout_ms)
{
	if (shares->failed[node])
	{
		call->outcome.status = RS_LOST;
		call->outcome.timeout_ms = 0;
		call->outcome.node_plus1 = node + 1;
		snprintf(call->outcome.detail, sizeof(call->outcome.detail),
				 "not sent: the node failed earlier in the batch");
		return false;
	}
	if (shares->budget_ms <= 0)
		return true;
	if (shares->until[node] == 0)
		shares->until[node] = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  shares->budget_ms);
	*until = Min(deadline, shares->until[node]);
	*timeout_ms = Min(*timeout_ms, shares->budget_ms);
	return true;
}

/* Node failed within its share: send it nothing more */
static void
node_share_failed(RedisCall *call, int node)
{
	shares->failed[node] = true;
	node_failed_at[node] = GetCurrentTimestamp();
}

/*
 * Send one command to where it belongs, following cluster redirections
 * (MOVED, ASK) and failovers (see follow_failover), until deadline.
 * Returns true with its reply; an error reply is returned as such when
 * keep_errors, else absorbed into the call's outcome (false).  False with
 * the outcome on connection trouble.  Never raises but on interrupts.
 */
static bool
exec_routed(RedisCall *call, int argc, const char **argv,
			const size_t *argvlen, TimestampTz deadline, int timeout_ms,
			bool keep_errors, redisReply **reply)
{
	bool		cluster = cluster_enabled();
	int			node = cluster ? cluster_node_for(argc, argv, last_node) : 0;
	int			redirects = 0;
	bool		asking = false;
	bool		ok;

	for (;;)
	{
		RedisStatus status;
		bool		drop = false;
		TimestampTz until = deadline;

		cur_node = node;
		*reply = NULL;
		if (shares != NULL && !node_share(call, node, deadline, &until, &timeout_ms))
			return false;
		ok = ensure_connection(call, until);
		if (!ok && cluster)
			cluster_node_failed(node);
		if (ok)
		{
			status = send_and_receive(call, argc, argv, argvlen, until, asking, reply);
			asking = false;
			if (status == RS_OK && (*reply)->type == REDIS_REPLY_ERROR)
			{
				int			next = (cluster && redirects < CLUSTER_MAX_REDIRECTS)
					? cluster_redirect((*reply)->str ? (*reply)->str : "", &asking) : -1;

				if (next < 0)
					asking = false;
				else
				{
					elog(DEBUG2, "redsem: %s: %s", argv[0], (*reply)->str);
					freeReplyObject(*reply);
					node = next;
					redirects++;
					continue;
				}
				if (cluster && redirects >= CLUSTER_MAX_REDIRECTS && is_redirect(*reply))
				{
					/* nodes that disagree for a moment: wait like a failover */
					redirect_loop(call, *reply, redirects);
					*reply = NULL;
					status = RS_UNAVAILABLE;
				}
				else if (keep_errors && keep_error_reply(*reply))
				{
					last_node = cur_node;
					return true;
				}
				else
				{
					status = absorb_error_reply(call, *reply, NULL, &drop);
					*reply = NULL;
				}
			}
			else if (status != RS_OK)
				connection_failed(call, status, timeout_ms);
			if (drop)
				disconnect_current();
			ok = (status == RS_OK);
		}
		if (!ok && cluster)
			call->outcome.node_plus1 = cur_node + 1;	/* named as it failed */
		if (!ok && shares != NULL)
			node_share_failed(call, cur_node);
		if (ok || !follow_failover(call, until))
			break;
		if (cluster)
			node = cluster_node_for(argc, argv, node);
		redirects = 0;			/* a limit per attempt */
	}
	last_node = cur_node;
	return ok;
}

/*
 * The core: send one command and return its reply in *reply (the caller
 * frees it with freeReplyObject).  Connects first if need be.  Returns
 * true with a reply that is not an error; otherwise false, with the
 * failure classified in call->outcome (and raised if call->elevel is
 * ERROR).  Holds interrupts off unless the call is interruptible, and ends
 * by the call's deadline (redsem.command_timeout plus extra_wait_ms from
 * now, when none is given).
 */
bool
redis_exec(RedisCall *call, int argc, const char **argv,
		   const size_t *argvlen, redisReply **reply)
{
	TimestampTz deadline = call->deadline;
	int			timeout_ms = redsem_command_timeout_ms + call->extra_wait_ms;
	bool		ok;

	*reply = NULL;
	call->outcome.status = RS_OK;
	call->outcome.detail[0] = '\0';
	call->outcome.node_plus1 = 0;
	if (deadline == DT_NOEND)
		deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	else
	{
		long		left = redis_ms_until(deadline);

		timeout_ms = (int) Min(left, PG_INT32_MAX);
	}

	if (!call->interruptible)
		HOLD_INTERRUPTS();
	ok = exec_routed(call, argc, argv, argvlen, deadline, timeout_ms, false, reply);
	if (!call->interruptible)
		RESUME_INTERRUPTS();

	if (!ok && call->elevel >= ERROR && call->outcome.status != RS_NOSCRIPT)
		redis_report(call->elevel, &call->outcome);
	return ok;
}

/* Send n commands at once and read the replies that come back, in order */
static RedisStatus
pipeline_exchange(RedisCall *call, int n, const RedisCommand *cmds,
				  TimestampTz deadline, redisReply **replies)
{
	RedisStatus status = RS_OK;

	for (int i = 0; i < n; i++)
		if (redisAppendCommandArgv(cur->ctx, cmds[i].argc, cmds[i].argv, NULL) != REDIS_OK)
			return RS_LOST;
	cur->in_flight = true;
	PG_TRY();
	{
		status = flush_output(cur->ctx, deadline, call->interruptible);
		for (int i = 0; i < n && status == RS_OK; i++)
			status = read_reply(cur->ctx, deadline, call->interruptible, &replies[i]);
	}
	PG_CATCH();
	{
		/* interrupted with replies possibly still in flight */
		disconnect_current();
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (status == RS_OK)
		cur->in_flight = false;
	return status;
}

/*
 * A pipeline in a Redis Cluster, whose commands may belong to different
 * nodes: each node's commands in turn (as far as the slot map knows them),
 * nodes that failed recently last, and each node within its own share of
 * the time (call->node_budget_ms, from the moment the pipeline first turns
 * to it, redirections included), so that a hung node costs the others at
 * most that share, and nothing once it has failed.  A command whose node
 * fails keeps a NULL reply, and so do the later ones for that node (not
 * sent); the others go on.  Returns false if any failed (the first failure
 * in call->outcome, naming its node).
 */
static bool
pipeline_by_node(RedisCall *call, int n, const RedisCommand *cmds,
				 TimestampTz deadline, int timeout_ms, redisReply **replies)
{
	int		   *node_of = palloc(sizeof(int) * Max(n, 1));
	int			nodes[CLUSTER_MAX_NODES];
	int			count = 0;
	NodeShares	mine;
	RedisOutcome failure = {RS_OK, 0, "", 0};
	bool		all = true;

	memset(&mine, 0, sizeof(mine));
	mine.budget_ms = call->node_budget_ms;
	for (int i = 0; i < n; i++)
	{
		bool		seen = false;

		node_of[i] = cluster_node_for(cmds[i].argc, cmds[i].argv, last_node);
		for (int k = 0; k < count && !seen; k++)
			seen = (nodes[k] == node_of[i]);
		if (!seen)
			nodes[count++] = node_of[i];
	}
	order_nodes_by_health(nodes, count);
	if (!call->interruptible)
		HOLD_INTERRUPTS();
	shares = &mine;
	PG_TRY();
	{
		for (int k = 0; k < count; k++)
			for (int i = 0; i < n; i++)
			{
				if (node_of[i] != nodes[k])
					continue;
				if (!exec_routed(call, cmds[i].argc, cmds[i].argv, NULL, deadline,
								 timeout_ms, true, &replies[i]))
				{
					/* the first failure says why; the later ones say "not sent" */
					if (all)
						failure = call->outcome;
					all = false;
				}
			}
	}
	PG_FINALLY();
	{
		shares = NULL;
	}
	PG_END_TRY();
	if (!call->interruptible)
		RESUME_INTERRUPTS();
	pfree(node_of);
	call->outcome = failure;
	return all;
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
	TimestampTz deadline = call->deadline;
	int			timeout_ms = redsem_command_timeout_ms + call->extra_wait_ms;
	RedisStatus status = RS_OK;
	bool		ok;

	memset(replies, 0, sizeof(redisReply *) * n);
	call->outcome.status = RS_OK;
	call->outcome.detail[0] = '\0';
	call->outcome.node_plus1 = 0;
	if (deadline == DT_NOEND)
		deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	if (cluster_enabled())
		return pipeline_by_node(call, n, cmds, deadline, timeout_ms, replies);
	if (!call->interruptible)
		HOLD_INTERRUPTS();
	cur_node = 0;
	ok = ensure_connection(call, deadline);
	if (ok)
	{
		status = pipeline_exchange(call, n, cmds, deadline, replies);
		if (status != RS_OK)
			connection_failed(call, status, timeout_ms);
		else
		{
			for (int i = 0; i < n && cur->ctx != NULL; i++)
			{
				RedisOutcome o;

				if (redis_reply_outcome(replies[i], &o))
					disconnect_current();
			}
		}
		ok = (status == RS_OK);
	}
	if (!call->interruptible)
		RESUME_INTERRUPTS();
	return ok;
}

/*
 * Judge one reply of a pipeline: o->status is RS_OK unless it is an error
 * reply, classified (see RedisStatus).  Returns true if the error makes the
 * connection useless.
 */
bool
redis_reply_outcome(const redisReply *reply, RedisOutcome *o)
{
	bool		drop = false;

	o->status = RS_OK;
	o->timeout_ms = 0;
	o->detail[0] = '\0';
	if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
		return false;
	o->status = classify_error(reply->str ? reply->str : "", &drop);
	snprintf(o->detail, sizeof(o->detail), "%s", reply->str ? reply->str : "");
	return drop;
}

/* The target a failure names: its Cluster node, or the current target */
static char *
outcome_target(const RedisOutcome *o)
{
	return o->node_plus1 > 0 ?
		psprintf("%s:%d (Redis Cluster)", cluster_node_host(o->node_plus1 - 1),
				 cluster_node_port(o->node_plus1 - 1)) :
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
 * class (report.c); the message names the current target.
 */
void
redis_report(int elevel, const RedisOutcome *o)
{
	char	   *target = redis_target_description();

	redis_report_at(elevel, o, target);
	pfree(target);
}
