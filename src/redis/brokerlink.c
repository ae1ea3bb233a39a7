/*
 * brokerlink.c
 *		A client backend's link to the redsem broker (src/broker.c), used in
 *		place of a connection to Redis when redsem.connection_mode is
 *		'broker'.  The link is a Unix socket (pg_stat_tmp/redsem_broker.sock
 *		in the data directory), handed to hiredis as an
 *		ordinary context: from then on conn.c, link.c and sockwait.c use it
 *		exactly as a connection to Redis, and the broker's death is a
 *		connection lost.  The first bytes on a new link name the Redis
 *		server it is for (REDSEM.TARGET, no reply), sent in the same write
 *		as the first request.  The broker does AUTH, SELECT, the name and
 *		TLS on its own connections, so the backend does none of them.
 */
#include "postgres.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <unistd.h>

#include "hiredis.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port.h"
#include "storage/fd.h"

#include "brokerlink.h"
#include "clock.h"
#include "cluster.h"
#include "compat.h"
#include "guc.h"
#include "profile.h"
#include "replycap.h"
#include "report.h"
#include "secret.h"
#include "sockwait.h"
#include "tls.h"
#include "timing.h"

/*
 * The broker's address: a socket file in the data directory's pg_stat_tmp,
 * named relative to the data directory (every server process works there),
 * so that only the server's OS user reaches it (the data directory is its
 * own) and two servers on one host never meet.  Not an abstract socket: any
 * local user could bind that name first, or after the broker's death, and
 * be served the backends' calls.  pg_basebackup leaves pg_stat_tmp's
 * contents out.  Returns the address's length.
 */
socklen_t
redis_broker_address(struct sockaddr_un *addr)
{
	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	strlcpy(addr->sun_path, REDSEM_BROKER_SOCKET, sizeof(addr->sun_path));
	return (socklen_t) (offsetof(struct sockaddr_un, sun_path) +
						strlen(addr->sun_path) + 1);
}

/* The credentials of the process at the other end of fd, as at connect */
static bool
peer_cred(int fd, struct ucred *cred)
{
	socklen_t	len = sizeof(*cred);

	return fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) == 0;
}

/* True if the process at the other end of fd runs as this server's user */
bool
redis_broker_peer_is_ours(int fd)
{
	struct ucred cred;

	return peer_cred(fd, &cred) && cred.uid == geteuid();
}

/* The kernel's flag of a process that is exiting (linux/sched.h) */
#define REDSEM_PF_EXITING	0x00000004

/*
 * The state letter and flags of process pid (/proc/<pid>/stat); false if
 * they cannot be read (no /proc, or the process is gone)
 */
static bool
proc_state(int pid, char *state, unsigned int *flags)
{
	char		path[64];
	char		buf[512];
	int			sfd;
	ssize_t		n;
	char	   *close_paren;

	/* (state is the field after the command's closing parenthesis) */
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	sfd = open(path, O_RDONLY | O_CLOEXEC);
	n = sfd < 0 ? -1 : read(sfd, buf, sizeof(buf) - 1);
	if (sfd >= 0)
		close(sfd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	close_paren = strrchr(buf, ')');
	return close_paren != NULL &&
		sscanf(close_paren + 1, " %c %*d %*d %*d %*d %*d %u", state, flags) == 2;
}

/*
 * True if the broker at the other end of fd has exited (its pid, from
 * SO_PEERCRED as it was at connect, in *pid): no such process, a zombie its
 * supervisor has not reaped yet, or one exiting (the kernel closes its
 * sockets before it is a zombie: its flags say so meanwhile).  False when
 * that cannot be told (no /proc): the link was then closed by a live
 * broker, as far as we know.
 */
bool
redis_broker_exited(int fd, int *pid)
{
	struct ucred cred;
	char		state;
	unsigned int flags;

	*pid = 0;
	if (!peer_cred(fd, &cred) || cred.pid <= 0)
		return false;
	*pid = (int) cred.pid;
	if (kill(cred.pid, 0) != 0)
		return errno == ESRCH;
	/* (reaped meanwhile: its entry went between kill() and reading it) */
	if (!proc_state(*pid, &state, &flags))
		return kill(cred.pid, 0) != 0 && errno == ESRCH;
	return state == 'Z' || state == 'X' || (flags & REDSEM_PF_EXITING) != 0;
}

/*
 * True if the broker at the other end of fd is stopped (SIGSTOP, or a
 * debugger holds it), its pid then in *pid (else 0): an answer it owes is
 * not Redis's delay
 */
bool
redis_broker_stopped(int fd, int *pid)
{
	struct ucred cred;
	char		state;
	unsigned int flags;

	*pid = 0;
	if (!peer_cred(fd, &cred) || cred.pid <= 0 ||
		!proc_state((int) cred.pid, &state, &flags) || (state != 'T' && state != 't'))
		return false;
	*pid = (int) cred.pid;
	return true;
}

/*
 * Broker mode was asked for in a server where redsem is not preloaded:
 * there is no broker.  A call from SQL raises 55000; any other fails to
 * connect (false, with the outcome filled).
 */
bool
redis_broker_available(RedisCall *call)
{
	if (!redsem_broker_asked_unpreloaded || !redsem_is_client_backend())
		return true;
	if (call->interruptible)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("redsem.connection_mode = 'broker' needs redsem in shared_preload_libraries"),
				 errhint("Add redsem to shared_preload_libraries and restart the server, or set redsem.connection_mode to 'direct'.")));
	return redis_note(&call->outcome, RS_CONNECT_FAILED,
					  "redsem.connection_mode = 'broker' needs redsem in shared_preload_libraries");
}

/*
 * One try at connecting to the broker: the socket, or -1 with errno (a
 * refused or busy broker is worth another try).
 */
static int
try_connect(void)
{
	struct sockaddr_un addr;
	socklen_t	len = redis_broker_address(&addr);
	int			fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int			saved;

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *) &addr, len) == 0)
	{
		if (redis_broker_peer_is_ours(fd))
			return fd;
		errno = EACCES;			/* (not the broker: never sent a byte) */
	}
	saved = errno;
	close(fd);
	errno = saved;
	return -1;
}

/* True for a connect error that a broker being (re)started explains */
static bool
broker_not_there_yet(int err)
{
	return err == ECONNREFUSED || err == ENOENT || err == EAGAIN ||
		err == EWOULDBLOCK || err == EINTR;
}

/*
 * Connect to the broker by deadline, trying again every
 * BROKER_CONNECT_RETRY_MS while it is refused (the broker is restarting);
 * cancel is served between tries on interruptible calls.  The socket, or
 * -1 with the outcome filled.
 */
static int
connect_broker(RedisCall *call, TimestampTz deadline)
{
	for (;;)
	{
		int			fd = try_connect();
		int			err = errno;

		if (fd >= 0)
			return fd;
		if (!broker_not_there_yet(err) || redis_past(deadline))
		{
			(void) redis_note(&call->outcome, RS_CONNECT_FAILED,
							  "could not connect to the redsem broker: %s",
							  strerror(err));
			/* (a broker being restarted serves again soon) */
			call->outcome.no_server = broker_not_there_yet(err);
			return -1;
		}
		redis_pause(BROKER_CONNECT_RETRY_MS, deadline, call->interruptible);
	}
}

/* This session's sentinel settings (not the password), into profile */
static void
sentinel_session_profile(RedisProfile *profile)
{
	profile->sentinels = redsem_sentinels ? redsem_sentinels : "";
	profile->sentinel_master = redsem_sentinel_master ? redsem_sentinel_master : "";
	profile->sentinel_user = redsem_sentinel_user ? redsem_sentinel_user : "";
}

/*
 * The sentinels' password of this session into buf (*have false if none):
 * read from redsem.sentinel_password_file through sentinels only, as
 * direct mode reads it; false, with the outcome filled, if the file cannot
 * be used
 */
static bool
sentinel_password_of_session(const RedisProfile *p, char *buf, size_t len,
							 bool *have, RedisOutcome *o)
{
	buf[0] = '\0';
	*have = false;
	if (p->sentinels[0] == '\0' || redsem_sentinel_password_file == NULL ||
		redsem_sentinel_password_file[0] == '\0')
		return true;
	if (!secret_from_file("redsem.sentinel_password_file", redsem_sentinel_password_file,
						  buf, len, o))
		return false;
	*have = buf[0] != '\0';
	return true;
}

/* The digest of the secrets in the header of the link opened last (0: none) */
static uint64 last_link_secrets = 0;

/*
 * A digest of the passwords a header carries, under a seed of this
 * process's own (never sent or shown): enough to tell whether the password
 * files say something else now, without keeping a password.  Never 0.
 */
static uint64
secrets_digest(const char *password, bool have, const char *sentinel_pw, bool have_sentinel)
{
	static uint64 seed = 0;
	uint64		h;

	if (seed == 0 && !pg_strong_random(&seed, sizeof(seed)))
		seed = (uint64) MyProcPid * UINT64CONST(0x9E3779B97F4A7C15);
	h = hash_bytes_extended((const unsigned char *) password, have ? strlen(password) : 0,
							seed ^ (have ? 1 : 2));
	h = hash_bytes_extended((const unsigned char *) sentinel_pw,
							have_sentinel ? strlen(sentinel_pw) : 0, h ^ (have_sentinel ? 3 : 4));
	return h | 1;
}

/*
 * Read the session's passwords now (redsem.password or its file, and the
 * sentinels' through sentinels), as a new link's header carries them.
 * False with *o filled if a password file cannot be used.
 */
static bool
read_secrets(RedisProfile *p, char *password, bool *have, char *sentinel_pw,
			 bool *have_sentinel, RedisOutcome *o)
{
	if (!redis_password(password, REDSEM_MAX_SECRET_BYTES + 1, have, o))
		return false;
	tls_session_profile(p);
	sentinel_session_profile(p);
	if (!sentinel_password_of_session(p, sentinel_pw, REDSEM_MAX_SECRET_BYTES + 1,
									  have_sentinel, o))
	{
		explicit_bzero(password, REDSEM_MAX_SECRET_BYTES + 1);
		return false;
	}
	return true;
}

/* The digest of the secrets the header of the link opened last carried */
uint64
redis_broker_link_secrets(void)
{
	return last_link_secrets;
}

/*
 * True if the session's passwords read now differ from those whose digest
 * is secrets (a link's): the broker refused a link's password, and a DBA
 * has rotated it in the file since the link was made, so a new link, with
 * the new one, is to be tried.  False if they cannot be read.
 */
bool
redis_broker_secrets_changed(uint64 secrets)
{
	char		password[REDSEM_MAX_SECRET_BYTES + 1];
	char		sentinel_pw[REDSEM_MAX_SECRET_BYTES + 1];
	bool		have;
	bool		have_sentinel;
	RedisProfile p;
	RedisOutcome o;
	uint64		now;

	memset(&o, 0, sizeof(o));
	if (secrets == 0 || !read_secrets(&p, password, &have, sentinel_pw, &have_sentinel, &o))
		return false;
	now = secrets_digest(password, have, sentinel_pw, have_sentinel);
	explicit_bzero(password, sizeof(password));
	explicit_bzero(sentinel_pw, sizeof(sentinel_pw));
	return now != secrets;
}

/*
 * Queue the header that names the link's Redis server (or the sentinels
 * that name it) and the settings this session sets a connection up with
 * (the broker opens and sets up its connections as the session would:
 * SELECT, AUTH with the passwords read now, TLS); it leaves with the first
 * request.  False with the outcome filled if a password file cannot be
 * used.
 */
static bool
queue_target(RedisCall *call, redisContext *c, const char *host, int port,
			 const char *unix_path)
{
	char		password[REDSEM_MAX_SECRET_BYTES + 1];
	char		sentinel_pw[REDSEM_MAX_SECRET_BYTES + 1];
	char		portbuf[16];
	char		dbbuf[16];
	char		timeoutbuf[16];
	RedisProfile p;
	bool		have;
	bool		have_sentinel_pw;
	char	   *cmd;
	int			len;
	bool		ok;

	if (!read_secrets(&p, password, &have, sentinel_pw, &have_sentinel_pw, &call->outcome))
		return false;
	last_link_secrets = secrets_digest(password, have, sentinel_pw, have_sentinel_pw);
	/* (through sentinels the address is the broker's to find) */
	if (p.sentinels[0] != '\0')
	{
		host = unix_path = NULL;
		port = 0;
	}
	snprintf(portbuf, sizeof(portbuf), "%d", port);
	snprintf(dbbuf, sizeof(dbbuf), "%d", redsem_database);
	snprintf(timeoutbuf, sizeof(timeoutbuf), "%d", redsem_connect_timeout_ms);
	{
		const char *argv[REDSEM_BROKER_HEADER_ARGS] = {
			"REDSEM.TARGET", host ? host : "", portbuf, unix_path ? unix_path : "",
			dbbuf, redsem_user ? redsem_user : "", have ? password : "",
			p.tls ? "1" : "0", p.tls_ca_file, p.tls_cert_file, p.tls_key_file,
			p.tls_server_name, timeoutbuf, redsem_cluster ? "1" : "0",
			p.sentinels, p.sentinel_master, p.sentinel_user,
		have_sentinel_pw ? sentinel_pw : ""};

		len = redisFormatCommandArgv(&cmd, REDSEM_BROKER_HEADER_ARGS, argv, NULL);
	}
	explicit_bzero(password, sizeof(password));
	explicit_bzero(sentinel_pw, sizeof(sentinel_pw));
	if (len < 0)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "out of memory");
	ok = redisAppendFormattedCommand(c, cmd, len) == REDIS_OK;
	explicit_bzero(cmd, len);
	redisFreeCommand(cmd);
	if (!ok)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "out of memory");
	return true;
}

/*
 * A hiredis context on fd, a non-blocking socket the caller counted with
 * AcquireExternalFD; NULL with the outcome filled, fd closed and given
 * back, if it cannot be made
 */
redisContext *
redis_context_on_fd(int fd, RedisOutcome *outcome)
{
	redisContext *c = redisConnectFd(fd);

	if (c == NULL || c->err)
	{
		(void) redis_note(outcome, RS_CONNECT_FAILED, "%s", c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		else
			close(fd);
		ReleaseExternalFD();
		return NULL;
	}
	/* the socket is non-blocking: let hiredis treat EAGAIN as "later" */
	c->flags &= ~REDIS_BLOCK;
	redis_cap_replies(c);
	return c;
}

/*
 * A link to the broker for Redis at host:port (or unix_path), as a hiredis
 * context that conn.c uses as a connection to that server; NULL with the
 * outcome filled if the broker cannot be reached by deadline.  Its
 * descriptor counts as an external one (redis_close_context gives it back).
 */
redisContext *
redis_broker_open(RedisCall *call, const char *host, int port,
				  const char *unix_path, TimestampTz deadline)
{
	redisContext *c;
	int			fd;

	call->outcome.status = RS_CONNECT_FAILED;
	if (!AcquireExternalFD())
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED,
						  "there are too many open files on the local server");
		return NULL;
	}
	fd = connect_broker(call, deadline);
	if (fd < 0)
	{
		ReleaseExternalFD();
		return NULL;
	}
	c = redis_context_on_fd(fd, &call->outcome);
	if (c == NULL)
		return NULL;
	if (!queue_target(call, c, host, port, unix_path))
	{
		redisFree(c);
		ReleaseExternalFD();
		return NULL;
	}
	call->outcome.status = RS_OK;
	return c;
}

/*
 * If msg is the broker's error reply "REDSEMBROKER <status>[+] <detail>"
 * (it could not reach Redis for us), the status and detail it carries.
 */
bool
redis_broker_error(const char *msg, RedisStatus *status, const char **detail)
{
	size_t		len = strlen(REDSEM_BROKER_ERROR);
	char	   *end;
	long		n;

	/* (only the broker speaks so: in direct mode it is Redis's words) */
	if (!redsem_broker_wanted() ||
		strncmp(msg, REDSEM_BROKER_ERROR, len) != 0 || msg[len] != ' ')
		return false;
	n = strtol(msg + len + 1, &end, 10);
	if (end == msg + len + 1 || n <= RS_OK || n > RS_NOSCRIPT || n == RS_NOSCRIPT)
		n = RS_CONNECT_FAILED;
	*status = (RedisStatus) n;
	if (*end == '+')
		end++;
	*detail = (*end == ' ') ? end + 1 : end;
	return true;
}

/*
 * True if msg is the broker's error reply and says that nothing served at
 * Redis's address ("REDSEMBROKER <status>+ <detail>": see no_server)
 */
bool
redis_broker_no_server(const char *msg)
{
	RedisStatus status;
	const char *detail;

	return redis_broker_error(msg, &status, &detail) && detail > msg &&
		strncmp(detail - 2, "+ ", 2) == 0;
}
