/*
 * conn.c
 *		The backend's single Redis connection and every wait on it.
 *
 * The connection is opened lazily, on first use, and reopened on the next
 * call after it broke or after a connection setting changed.  All socket I/O
 * is non-blocking: every wait is on the socket and the process latch
 * together (as WaitLatchOrSocket does, with the wait set kept per socket),
 * so query cancel, statement_timeout and
 * pg_terminate_backend are served while Redis is slow or stalled.  A request
 * interrupted half way leaves a reply in flight, so the connection is
 * discarded rather than reused.
 *
 * Two entry points: redis_command() for SQL-callable code (raises ERROR, can
 * be interrupted), and redis_command_quiet() for commit/abort/exit callbacks
 * (never raises, holds interrupts, honours a hard deadline).
 */
#include "postgres.h"

#include <sys/socket.h>
#include <errno.h>

#include "hiredis.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "redsem.h"

static redisContext *conn = NULL;
static uint64 conn_generation = 0;

/*
 * True from sending a command until its reply is read.  Still true at the
 * next use means the request was abandoned (an ERROR unwinds through
 * redis_command, but FATAL exits without unwinding): a reply, or a blocked
 * BLPOP, is still owed on the socket, so the connection must not be reused.
 */
static bool request_in_flight = false;

/* Number of connection errors raised so far, for statistics */
uint64		redis_failures = 0;

/*
 * The wait set (latch, postmaster death, socket) of the socket we last
 * waited on, kept so that each wait is one epoll_wait rather than a new
 * epoll set.  It must be dropped before its socket is closed: a new socket
 * may get the same number.
 */
static WaitEventSet *wait_set = NULL;
static int	wait_set_fd = -1;
static int	wait_set_socket_pos = -1;

/* Milliseconds from now until deadline, never negative */
static long
ms_until(TimestampTz deadline)
{
	return TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
}

/* Deadline ms milliseconds from now */
static TimestampTz
deadline_after(int64 ms)
{
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
}

/* A hash of every setting that decides which Redis data we reach */
uint64
redis_target_signature(void)
{
	char	   *desc = psprintf("%s|%d|%s|%d|%s",
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
	if (redsem_unix_socket && redsem_unix_socket[0] != '\0')
		return psprintf("unix socket \"%s\"", redsem_unix_socket);
	return psprintf("%s:%d", redsem_host ? redsem_host : "", redsem_port);
}

/* Drop the cached wait set; call before closing its socket */
static void
forget_wait_set(void)
{
	if (wait_set == NULL)
		return;
	FreeWaitEventSet(wait_set);
	wait_set = NULL;
	wait_set_fd = -1;
}

/* Close a context and its socket */
static void
close_context(redisContext *c)
{
	if (c->fd == wait_set_fd)
		forget_wait_set();
	redisFree(c);
}

/* The wait set for fd, made on first use */
static WaitEventSet *
wait_set_for(int fd)
{
	if (wait_set != NULL && wait_set_fd == fd)
		return wait_set;
	forget_wait_set();
	wait_set = CreateWaitEventSet(TopMemoryContext, 3);
	wait_set_fd = fd;
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_POSTMASTER_DEATH, PGINVALID_SOCKET, NULL, NULL);
	wait_set_socket_pos = AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, fd,
											NULL, NULL);
	return wait_set;
}

/* Close the connection, if any, and give back its file descriptor */
void
redis_disconnect(void)
{
	if (conn == NULL)
		return;
	close_context(conn);
	conn = NULL;
	request_in_flight = false;
	ReleaseExternalFD();
}

/*
 * Wait until the socket is ready for io_events, the latch is set or the
 * deadline passes.  Returns the WL_* events that fired.  When interruptible,
 * CHECK_FOR_INTERRUPTS may throw; otherwise postmaster death ends the wait
 * as a timeout.
 */
static int
wait_on_socket(int fd, int io_events, TimestampTz deadline, bool interruptible)
{
	WaitEventSet *set = wait_set_for(fd);
	WaitEvent	event;
	int			rc;

	ModifyWaitEvent(set, wait_set_socket_pos, io_events, NULL);
	if (WaitEventSetWait(set, ms_until(deadline), &event, 1,
						 PG_WAIT_EXTENSION) == 0)
		return WL_TIMEOUT;
	rc = event.events;
	if (rc & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		if (interruptible)
			CHECK_FOR_INTERRUPTS();
	}
	if (rc & WL_POSTMASTER_DEATH)
	{
		if (interruptible)
			proc_exit(1);
		rc |= WL_TIMEOUT;
	}
	return rc;
}

/*
 * Flush the output buffer and read one reply, waiting on the socket in
 * between.  Stores the reply (malloc'd by hiredis) in *reply.
 */
static RedisStatus
exchange(redisContext *c, TimestampTz deadline, bool interruptible,
		 redisReply **reply)
{
	int			done = 0;
	void	   *r = NULL;

	*reply = NULL;
	for (;;)
	{
		if (redisBufferWrite(c, &done) != REDIS_OK)
			return REDIS_STATUS_IO_FAILED;
		if (done)
			break;
		if (wait_on_socket(c->fd, WL_SOCKET_WRITEABLE, deadline,
						   interruptible) & WL_TIMEOUT &&
			GetCurrentTimestamp() >= deadline)
			return REDIS_STATUS_TIMED_OUT;
	}
	for (;;)
	{
		int			rc;

		if (redisGetReplyFromReader(c, &r) != REDIS_OK)
			return REDIS_STATUS_IO_FAILED;
		if (r != NULL)
		{
			*reply = (redisReply *) r;
			if (c == conn)
				request_in_flight = false;
			return REDIS_STATUS_OK;
		}
		rc = wait_on_socket(c->fd, WL_SOCKET_READABLE, deadline, interruptible);
		if (rc & WL_SOCKET_READABLE)
		{
			if (redisBufferRead(c) != REDIS_OK)
				return REDIS_STATUS_IO_FAILED;
		}
		else if ((rc & WL_TIMEOUT) && GetCurrentTimestamp() >= deadline)
			return REDIS_STATUS_TIMED_OUT;
	}
}

/* Wait for a non-blocking connect to finish, then check its outcome */
static RedisStatus
finish_connect(redisContext *c, TimestampTz deadline, bool interruptible,
			   char *err, size_t errlen)
{
	int			soerr = 0;
	socklen_t	len = sizeof(soerr);

	for (;;)
	{
		int			rc = wait_on_socket(c->fd, WL_SOCKET_WRITEABLE, deadline,
										interruptible);

		if (rc & WL_SOCKET_WRITEABLE)
			break;
		if ((rc & WL_TIMEOUT) && GetCurrentTimestamp() >= deadline)
		{
			snprintf(err, errlen, "no answer within %d ms (redsem.connect_timeout)",
					 redsem_connect_timeout_ms);
			return REDIS_STATUS_TIMED_OUT;
		}
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
		soerr = errno;
	if (soerr != 0)
	{
		snprintf(err, errlen, "%s", strerror(soerr));
		return REDIS_STATUS_CONNECT_FAILED;
	}
	return REDIS_STATUS_OK;
}

/* Send one command during connection set-up; copy any error text out */
static RedisStatus
setup_command(redisContext *c, int argc, const char **argv,
			  TimestampTz deadline, bool interruptible, char *err, size_t errlen)
{
	redisReply *reply;
	RedisStatus status;

	if (redisAppendCommandArgv(c, argc, argv, NULL) != REDIS_OK)
	{
		snprintf(err, errlen, "%s", c->errstr);
		return REDIS_STATUS_IO_FAILED;
	}
	status = exchange(c, deadline, interruptible, &reply);
	if (status != REDIS_STATUS_OK)
	{
		if (c->err)
			snprintf(err, errlen, "%s", c->errstr);
		else
			snprintf(err, errlen, "no answer to %s within %d ms (redsem.connect_timeout)",
					 argv[0], redsem_connect_timeout_ms);
		return status;
	}
	if (reply->type == REDIS_REPLY_ERROR)
	{
		/* Redis never echoes the password in its error replies */
		snprintf(err, errlen, "%s: %s", argv[0], reply->str);
		status = REDIS_STATUS_CONNECT_FAILED;
	}
	freeReplyObject(reply);
	return status;
}

/* Authenticate and select the database, as configured */
static RedisStatus
setup_session(redisContext *c, TimestampTz deadline, bool interruptible,
			  char *err, size_t errlen)
{
	RedisStatus status = REDIS_STATUS_OK;

	if (redsem_password && redsem_password[0] != '\0')
	{
		if (redsem_user && redsem_user[0] != '\0')
		{
			const char *argv[] = {"AUTH", redsem_user, redsem_password};

			status = setup_command(c, 3, argv, deadline, interruptible, err, errlen);
		}
		else
		{
			const char *argv[] = {"AUTH", redsem_password};

			status = setup_command(c, 2, argv, deadline, interruptible, err, errlen);
		}
	}
	if (status == REDIS_STATUS_OK && redsem_database != 0)
	{
		char		db[16];
		const char *argv[] = {"SELECT", db};

		snprintf(db, sizeof(db), "%d", redsem_database);
		status = setup_command(c, 2, argv, deadline, interruptible, err, errlen);
	}
	return status;
}

/*
 * Open a new connection, bounded by redsem.connect_timeout and by deadline.
 * On failure nothing is left open and err says why.
 */
static RedisStatus
open_connection(TimestampTz deadline, bool interruptible, char *err, size_t errlen)
{
	TimestampTz connect_deadline = deadline_after(redsem_connect_timeout_ms);
	redisContext *c;
	RedisStatus status;

	if (connect_deadline > deadline)
		connect_deadline = deadline;
	if (!AcquireExternalFD())
	{
		snprintf(err, errlen, "there are too many open files on the local server");
		return REDIS_STATUS_CONNECT_FAILED;
	}
	if (redsem_unix_socket && redsem_unix_socket[0] != '\0')
		c = redisConnectUnixNonBlock(redsem_unix_socket);
	else
		c = redisConnectNonBlock(redsem_host, redsem_port);
	if (c == NULL || c->err)
	{
		snprintf(err, errlen, "%s", c ? c->errstr : "out of memory");
		if (c)
			close_context(c);
		ReleaseExternalFD();
		return REDIS_STATUS_CONNECT_FAILED;
	}

	/* Don't leak the socket if an interrupt throws while we wait */
	PG_TRY();
	{
		status = finish_connect(c, connect_deadline, interruptible, err, errlen);
		if (status == REDIS_STATUS_OK)
			status = setup_session(c, connect_deadline, interruptible, err, errlen);
	}
	PG_CATCH();
	{
		close_context(c);
		ReleaseExternalFD();
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (status != REDIS_STATUS_OK)
	{
		close_context(c);
		ReleaseExternalFD();
		return status == REDIS_STATUS_TIMED_OUT ? status : REDIS_STATUS_CONNECT_FAILED;
	}
	if (!(redsem_unix_socket && redsem_unix_socket[0] != '\0'))
		(void) redisEnableKeepAlive(c);
	conn = c;
	conn_generation = redsem_guc_generation;
	return REDIS_STATUS_OK;
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

	if (request_in_flight || conn_generation != redsem_guc_generation || conn->err)
		return true;
	n = recv(conn->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0 || n > 0)
		return true;
	return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/* Make sure conn is usable, opening it if need be */
static RedisStatus
ensure_connection(TimestampTz deadline, bool interruptible, char *err, size_t errlen)
{
	if (conn != NULL && connection_is_stale())
		redis_disconnect();
	if (conn != NULL)
		return REDIS_STATUS_OK;
	return open_connection(deadline, interruptible, err, errlen);
}

/* Queue one command on the connection */
static RedisStatus
append_command(int argc, const char **argv, const size_t *argvlen)
{
	if (redisAppendCommandArgv(conn, argc, argv, argvlen) != REDIS_OK)
		return REDIS_STATUS_IO_FAILED;
	request_in_flight = true;
	return REDIS_STATUS_OK;
}

/* Raise the error that matches a failed connection attempt */
static void
report_connect_failure(const char *err)
{
	redis_failures++;
	ereport(ERROR,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("could not connect to Redis at %s", redis_target_description()),
			 errdetail_internal("%s", err),
			 errhint("Check that Redis is running and reachable, and the settings redsem.host, redsem.port, redsem.unix_socket, redsem.user and redsem.password.")));
}

/* Raise the error that matches a failed or timed-out request */
static void
report_request_failure(RedisStatus status, const char *err, int timeout_ms)
{
	redis_failures++;
	if (status == REDIS_STATUS_TIMED_OUT)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("Redis at %s did not answer within %d ms",
						redis_target_description(), timeout_ms),
				 errhint("Check the load on the Redis server, or raise redsem.command_timeout.")));
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("lost connection to Redis at %s", redis_target_description()),
			 errdetail_internal("%s", err),
			 errhint("Check that Redis is running; the next call reconnects.")));
}

/*
 * Send one command and return its reply, which the caller must free with
 * freeReplyObject.  Waits at most redsem.command_timeout plus extra_wait_ms
 * (for blocking commands).  Raises ERROR on any connection trouble; Redis
 * error replies are returned to the caller.
 */
redisReply *
redis_command(int argc, const char **argv, const size_t *argvlen,
			  int extra_wait_ms)
{
	char		err[256];
	redisReply *reply = NULL;
	RedisStatus status;
	int			timeout_ms = redsem_command_timeout_ms + extra_wait_ms;

	status = ensure_connection(DT_NOEND, true, err, sizeof(err));
	if (status != REDIS_STATUS_OK)
		report_connect_failure(err);

	status = append_command(argc, argv, argvlen);
	if (status == REDIS_STATUS_OK)
	{
		PG_TRY();
		{
			status = exchange(conn, deadline_after(timeout_ms), true, &reply);
		}
		PG_CATCH();
		{
			/* interrupted with a reply possibly still in flight */
			redis_disconnect();
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	if (status != REDIS_STATUS_OK)
	{
		snprintf(err, sizeof(err), "%s", conn->err ? conn->errstr : "");
		redis_disconnect();
		report_request_failure(status, err, timeout_ms);
	}
	return reply;
}

/*
 * Like redis_command, for callbacks that must never raise: interrupts are
 * held, and everything (connecting included) ends by deadline.
 */
RedisStatus
redis_command_quiet(int argc, const char **argv, const size_t *argvlen,
					TimestampTz deadline, redisReply **reply)
{
	char		err[256];
	RedisStatus status;

	*reply = NULL;
	HOLD_INTERRUPTS();
	status = ensure_connection(deadline, false, err, sizeof(err));
	if (status == REDIS_STATUS_OK)
		status = append_command(argc, argv, argvlen);
	if (status == REDIS_STATUS_OK && conn != NULL)
	{
		status = exchange(conn, deadline, false, reply);
		if (status != REDIS_STATUS_OK)
			redis_disconnect();
	}
	RESUME_INTERRUPTS();
	return status;
}
