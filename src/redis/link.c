/*
 * link.c
 *		A bare connection to one Redis server: open it (resolve, connect,
 *		TLS), set up its session (AUTH, SELECT, its name), exchange commands and
 *		replies on it, and classify an error reply.  Nothing here raises for
 *		a Redis failure: each function fills the call's outcome and returns.
 *		Every wait is sockwait.c's, so cancel and timeouts are served (on
 *		interruptible calls).  Above it, conn.c keeps the backend's links,
 *		routes commands and follows failovers; sentinel.c uses it to talk to
 *		sentinels.  Nothing here knows which link a context belongs to.
 */
#include "postgres.h"

#include <sys/socket.h>
#include <errno.h>
#include <netdb.h>

#include "hiredis.h"

#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/fd.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "brokerlink.h"
#include "clock.h"
#include "compat.h"
#include "guc.h"
#include "link.h"
#include "profile.h"
#include "replycap.h"
#include "report.h"
#include "resolve.h"
#include "secret.h"
#include "sockwait.h"
#include "timing.h"
#include "tls.h"

/* Close a context and its socket */
static void
close_context(redisContext *c)
{
	redis_forget_wait_fd(c->fd);
	redisFree(c);
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

/* When this process last finished writing a request (0: never) */
static TimestampTz last_write_done = 0;

/*
 * The deadline of a reply: the call's, but for a session's call that may
 * be cancelled at least REDIS_ANSWER_FLOOR_MS after the last request was
 * written (timing.h: a backend stalled before it sent must not blame
 * Redis; a call that may not be cancelled, a callback's, and the keeper's
 * calls, whose budgets are its own, keep their bounds)
 */
static TimestampTz
answer_deadline(TimestampTz deadline, bool interruptible)
{
	TimestampTz floor;

	if (last_write_done == 0 || !interruptible || MyBackendType != B_BACKEND)
		return deadline;
	floor = TimestampTzPlusMilliseconds(last_write_done, REDIS_ANSWER_FLOOR_MS);
	return Max(deadline, floor);
}

/* Write out everything hiredis has buffered, waiting on the socket */
RedisStatus
redis_context_flush(redisContext *c, TimestampTz deadline, bool interruptible)
{
	int			done = 0;

	writes_started++;

	for (;;)
	{
		if (redisBufferWrite(c, &done) != REDIS_OK)
			return RS_LOST;
		if (done)
		{
			last_write_done = redsem_now();
			return RS_OK;
		}
		if ((redis_wait_socket(c->fd, WL_SOCKET_WRITEABLE, deadline,
							interruptible) & WL_TIMEOUT) && redis_past(deadline))
			return RS_TIMED_OUT;
	}
}

/*
 * A check of a connection a read waits on, made when the wait wakes on the
 * latch (conn.c's: the sentinels now name another primary); true gives the
 * read up as a lost connection, with why in the context's error
 */
static bool (*read_wake_check) (redisContext *c) = NULL;

/* Set the check a read makes when its wait wakes on the latch */
void
redis_set_read_wake_check(bool (*check) (redisContext *c))
{
	read_wake_check = check;
}

/* Read the next reply (malloc'd by hiredis) into *reply, waiting on the socket */
RedisStatus
redis_context_read(redisContext *c, TimestampTz deadline, bool interruptible,
		   redisReply **reply)
{
	void	   *r = NULL;

	*reply = NULL;
	deadline = answer_deadline(deadline, interruptible);
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
		else if ((rc & WL_LATCH_SET) && interruptible && read_wake_check != NULL &&
				 read_wake_check(c))
			return RS_LOST;
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
	RedisStatus status = redis_context_flush(c, deadline, interruptible);

	*reply = NULL;
	if (status == RS_OK)
		status = redis_context_read(c, deadline, interruptible, reply);
	return status;
}

/*
 * The class of a Redis error reply, from its leading code; *drop says
 * whether the connection is no use any more (the server is a replica now,
 * refused us, or is about to close it).
 */
RedisStatus
redis_error_class(const char *msg, bool *drop)
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
		/* min-replicas-to-write not met: the primary refuses writes */
		{"NOREPLICAS", RS_UNAVAILABLE, false},
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
		/* a counter of redsem's (HINCRBY) that another program set */
		{"ERR hash value is not an integer", RS_CONFLICT, false},
	};
	RedisStatus broker_status;
	const char *detail;

	/* the broker could not reach Redis: the status it found, as direct mode */
	if (redis_broker_error(msg, &broker_status, &detail))
	{
		*drop = true;
		return broker_status;
	}
	for (int i = 0; i < (int) lengthof(classes); i++)
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

/* The words of an error reply to report (the broker's, without its code) */
static const char *
error_words(const char *msg)
{
	RedisStatus status;
	const char *detail;

	return redis_broker_error(msg, &status, &detail) ? detail : msg;
}

/*
 * Turn an error reply into the call's outcome (freeing the reply).  Returns
 * the class; the caller drops the connection if *drop.
 */
RedisStatus
redis_absorb_error_reply(RedisCall *call, redisReply *reply, const char *what,
				   bool *drop)
{
	const char *msg = (reply->str != NULL) ? reply->str : "";
	RedisStatus status = redis_error_class(msg, drop);

	/* Redis never echoes a password in its error replies; nor the broker */
	(void) redis_note(&call->outcome, status, "%s%s%s", what ? what : "",
					  what ? ": " : "", error_words(msg));
	call->outcome.no_server = redis_broker_no_server(msg);
	freeReplyObject(reply);
	return status;
}

/* The bound of the connection being set up (redis_connect_deadline) */
static bool connect_cut_short = false;
static int	connect_budget_ms = 0;

/* Note that a connection step (what: a command, or NULL) had no answer in time */
static bool
note_connect_timeout(RedisCall *call, const char *what)
{
	if (connect_cut_short)
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED,
						  "no answer%s%s within %d ms (the time this call had left, less than redsem.connect_timeout)",
						  what ? " to " : "", what ? what : "", connect_budget_ms);
	else
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED,
						  "no answer%s%s within %d ms (redsem.connect_timeout)",
						  what ? " to " : "", what ? what : "", redsem_connect_timeout_ms);
	/* (a server stopped, frozen or cut off: nothing of our settings) */
	call->outcome.no_server = true;
	return false;
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
			(void) note_connect_timeout(call, NULL);
			return false;
		}
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
		soerr = errno;
	if (soerr != 0)
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "%s",
				 strerror(soerr));
		call->outcome.no_server = redis_no_server_error(soerr, NULL);
		return false;
	}
	return true;
}

/*
 * After a failed write or read on c: if Redis wrote an error line before it
 * closed the connection (it does so when it has too many clients), take the
 * class and words from that line rather than the socket's failure.
 */
void
redis_salvage_error_line(RedisCall *call, redisContext *c)
{
	char		buf[256];
	ssize_t		n = recv(c->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	char	   *end;
	bool		drop;
	RedisStatus status;

	if (n <= 1 || buf[0] != '-')
		return;
	buf[n] = '\0';
	if ((end = strpbrk(buf, "\r\n")) != NULL)
		*end = '\0';
	status = redis_error_class(buf + 1, &drop);
	(void) redis_note(&call->outcome, status == RS_NOSCRIPT ? RS_LOST : status,
					  "%s", buf + 1);
}

/*
 * True for an error reply that refuses only the command it answers: the
 * ACL does not allow it (NOPERM), or the server does not know it.  Any
 * other (too many clients, protected mode, NOAUTH, LOADING...) is about the
 * connection, and must be reported as such.
 */
static bool
refuses_only_command(const redisReply *r)
{
	return r->str != NULL &&
		(strncmp(r->str, "NOPERM", 6) == 0 ||
		 strncmp(r->str, "ERR unknown command", 19) == 0 ||
		 strncmp(r->str, "ERR unknown subcommand", 22) == 0);
}

/*
 * Read the next reply of a context being set up into *reply (or free it
 * when reply is NULL); on failure fill the outcome.  An error reply is a
 * failure, of its class (RS_REFUSED counts as a failure to connect), unless
 * optional and it refuses only its command (refuses_only_command), when it
 * is dropped.
 */
static bool
await_reply(RedisCall *call, redisContext *c, const char *what,
			TimestampTz deadline, redisReply **reply, bool optional)
{
	redisReply *r;
	RedisStatus status;
	bool		drop;

	if (reply != NULL)
		*reply = NULL;
	status = exchange(c, deadline, call->interruptible, &r);
	if (status != RS_OK)
	{
		if (!c->err)
			return note_connect_timeout(call, what);
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "%s", redis_context_error(c));
		/* (closed on us mid-way: a server going down; unless it said why) */
		call->outcome.no_server = c->err == REDIS_ERR_EOF ||
			redis_no_server_error(0, c->errstr);
		redis_salvage_error_line(call, c);
		if (call->outcome.status == RS_REFUSED)
			call->outcome.status = RS_CONNECT_FAILED;
		return false;
	}
	if (r->type == REDIS_REPLY_ERROR && optional && refuses_only_command(r))
	{
		freeReplyObject(r);
		return true;
	}
	if (r->type == REDIS_REPLY_ERROR)
	{
		status = redis_absorb_error_reply(call, r, what, &drop);
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

/* Queue one command on a context; on failure fill the outcome */
static bool
append_command(RedisCall *call, redisContext *c, int argc, const char **argv)
{
	if (redisAppendCommandArgv(c, argc, argv, NULL) == REDIS_OK)
		return true;
	return redis_note(&call->outcome, RS_CONNECT_FAILED, "%s", c->errstr);
}

/*
 * Send one command on a context being set up and read its reply (see
 * await_reply)
 */
bool
redis_context_command(RedisCall *call, redisContext *c, int argc,
					  const char **argv, TimestampTz deadline,
					  redisReply **reply)
{
	if (reply != NULL)
		*reply = NULL;
	return append_command(call, c, argc, argv) &&
		await_reply(call, c, argv[0], deadline, reply, false);
}

/* What this process's connections are for (see redis_set_connection_purpose) */
static const char *connection_purpose = "backend";

/* Name every connection, even one set up without AUTH or SELECT */
static bool name_always = false;

/* The pid a connection's name carries (0: this process's) */
static pid_t name_pid = 0;

/*
 * Name the connections this process opens after process pid (the broker's
 * opener opens them for the broker, whose pid they are to carry)
 */
void
redis_name_connections_after(pid_t pid)
{
	name_pid = pid;
}

/*
 * Name every connection this process opens (the broker's: its set-up is
 * paid once, not at each backend's first call)
 */
void
redis_name_every_connection(void)
{
	name_always = true;
}

/* Name this process's connections for purpose ("keeper"; "backend" if never set) */
void
redis_set_connection_purpose(const char *purpose)
{
	connection_purpose = purpose;
}

/*
 * The name CLIENT SETNAME gives each connection, so that CLIENT LIST tells
 * who is who: "redsem:<server>:<purpose>:<pid>", the server being
 * cluster_name (its first 64 bytes, so the pid always fits), or else this
 * host's name and port.  Redis refuses spaces and control characters in a
 * name: those become '_'.
 */
static void
connection_name(char *buf, size_t size)
{
	char		host[64];

	if (cluster_name != NULL && cluster_name[0] != '\0')
		snprintf(buf, size, "redsem:%.64s:%s:%d", cluster_name, connection_purpose,
				 name_pid ? (int) name_pid : MyProcPid);
	else
	{
		if (gethostname(host, sizeof(host)) != 0)
			strlcpy(host, "localhost", sizeof(host));
		host[sizeof(host) - 1] = '\0';
		snprintf(buf, size, "redsem:%s:%d:%s:%d", host, PostPortNumber,
				 connection_purpose, name_pid ? (int) name_pid : MyProcPid);
	}
	for (char *p = buf; *p != '\0'; p++)
		if (*p <= ' ' || *p > '~')
			*p = '_';
}

/*
 * Authenticate and select the database (as configured), and then name the
 * connection: one write, then the replies in order.  A name the ACL
 * refuses (no CLIENT SETNAME) does no harm: the connection goes unnamed.
 * With neither AUTH nor SELECT to send, the connection is not named: the
 * name would cost a round trip at connect, and a Redis that accepts
 * connections but does not answer would then fail the set-up (08001)
 * rather than the call (08006).
 */
static bool
setup_session(RedisCall *call, redisContext *c, const char *host,
			  TimestampTz deadline)
{
	char		password[REDSEM_MAX_SECRET_BYTES + 1];
	char		db[16];
	char		name[160];
	const RedisProfile *forced = redis_profile_forced();
	const char *user = forced ? forced->user : (redsem_user ? redsem_user : "");
	int			database = forced ? forced->database : redsem_database;
	const char *auth[3] = {"AUTH", user, password};
	const char *select[2] = {"SELECT", db};
	const char *setname[3] = {"CLIENT", "SETNAME", name};
	bool		have_password;
	bool		ok = true;

	if (!redis_password(password, sizeof(password), &have_password, &call->outcome))
		return false;
	if (have_password)
	{
		bool		named = user[0] != '\0';

		if (!named)
			auth[1] = password;
		ok = append_command(call, c, named ? 3 : 2, auth);
		explicit_bzero(password, sizeof(password));
	}
	snprintf(db, sizeof(db), "%d", database);
	if (ok && database != 0)
		ok = append_command(call, c, 2, select);
	if (!have_password && database == 0 && !name_always)
		return ok;
	connection_name(name, sizeof(name));
	ok = ok && append_command(call, c, 3, setname);
	if (ok && have_password)
		ok = await_reply(call, c, "AUTH", deadline, NULL, false);
	if (ok && database != 0)
		ok = await_reply(call, c, "SELECT", deadline, NULL, false);
	return ok && await_reply(call, c, NULL, deadline, NULL, true);
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

/* A step of setting up a new context (host: the name TLS verifies) */
typedef bool (*ContextStep) (RedisCall *call, redisContext *c,
							 const char *host, TimestampTz deadline);

/* Connect, then TLS if configured: the handshake of a new context */
static bool
handshake(RedisCall *call, redisContext *c, const char *host,
		  TimestampTz deadline)
{
	return finish_connect(call, c, deadline) &&
		(!redis_tls_wanted() || (tls_start(call, c, host, deadline) &&
						 tls_accepted(call, c, deadline)));
}

/*
 * Run one step on a new context; close it if the step fails or an
 * interrupt unwinds through it, so nothing is left open.
 */
static bool
step_or_close(ContextStep step, RedisCall *call, redisContext *c,
			  const char *host, TimestampTz deadline)
{
	bool		ok;

	PG_TRY();
	{
		ok = step(call, c, host, deadline);
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
	char		addr[NI_MAXHOST];

	call->outcome.status = RS_CONNECT_FAILED;
	if (redis_tls_wanted() && !tls_supported(call))
		return NULL;
	if (unix_path != NULL && redis_tls_wanted())
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED,
						  "redsem.tls applies to TCP connections, and redsem.unix_socket is set");
		return NULL;
	}
	if (unix_path == NULL && !redis_resolve(call, host, addr, sizeof(addr), deadline))
		return NULL;
	if (!AcquireExternalFD())
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED,
						  "there are too many open files on the local server");
		return NULL;
	}
	c = unix_path ? redisConnectUnixNonBlock(unix_path) : redisConnectNonBlock(addr, port);
	if (c == NULL || c->err)
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "%s",
						  c ? c->errstr : "out of memory");
		call->outcome.no_server = c != NULL && redis_no_server_error(0, c->errstr);
		if (c)
			close_context(c);
		ReleaseExternalFD();
		return NULL;
	}
	redis_cap_replies(c);
	if (!step_or_close(handshake, call, c, host, deadline))
		return NULL;
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
	return step_or_close(setup_session, call, c, NULL, deadline);
}

/*
 * A data connection to host:port (or unix_path), its session set up: to
 * the server itself, or, in broker mode, a link to the broker that serves
 * it (the broker sets up its own connections).  NULL with the outcome
 * filled on failure.
 */
redisContext *
redis_open_target(RedisCall *call, const char *host, int port,
				  const char *unix_path, TimestampTz deadline)
{
	redisContext *c;

	if (!redis_broker_available(call))
		return NULL;
	if (redsem_broker_wanted())
		return redis_broker_open(call, host, port, unix_path, deadline);
	c = redis_open_context(call, host, port, unix_path, deadline);
	if (c == NULL || !redis_setup_context(call, c, deadline))
		return NULL;
	return c;
}

/* True if a data connection opened now speaks TLS (never a broker link) */
bool
redis_target_tls(void)
{
	return redsem_tls && !redsem_broker_wanted();
}

/*
 * The earlier of deadline and redsem.connect_timeout from now.  Which one
 * it was, and how long that leaves, is kept for the message should the
 * connection not be made in time (one connection is set up at a time).
 */
TimestampTz
redis_connect_deadline(TimestampTz deadline)
{
	TimestampTz now = redsem_now();
	TimestampTz d = TimestampTzPlusMilliseconds(now, redsem_connect_timeout_ms);

	/* (within CONNECT_CUT_SLACK_MS it is the timeout's own end: timing.h) */
	connect_cut_short = deadline < TimestampTzPlusMilliseconds(d, -CONNECT_CUT_SLACK_MS);
	connect_budget_ms = connect_cut_short ? (int) Max((deadline - now) / 1000, 0) :
		redsem_connect_timeout_ms;
	return Min(d, deadline);
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
	o->node_plus1 = 0;
	o->no_server = false;
	if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
		return false;
	(void) redis_note(o, redis_error_class(reply->str ? reply->str : "", &drop),
					  "%s", error_words(reply->str ? reply->str : ""));
	return drop;
}

/* The target a failure names: its Cluster node, or the current target */
