/*
 * broker_open.c
 *		Opening the broker's Redis connections without blocking it.
 *
 * Opening a connection can take as long as redsem.connect_timeout: a host
 * name whose resolver hangs, a Redis that accepts connections but does not
 * answer AUTH.  Done in the broker's loop, that would stall every backend
 * of the server, whatever Redis it calls (and fail healthy connections
 * whose replies wait meanwhile).  So the broker forks an opener per
 * connection: the child runs link.c's open and set-up unchanged (the
 * latch-aware waits, the resolver thread, AUTH, SELECT, the name), sends
 * the connected socket back over a socket pair (SCM_RIGHTS) with the
 * outcome, and exits.  The connection's state (authenticated, its database
 * selected, named) is Redis's, so the socket is all the broker needs.
 *
 * Through sentinels the opener also finds the primary (sentinel.c) and
 * checks that it is one; its address comes back with the outcome.
 *
 * A TLS session's state is the process's own and cannot be handed over:
 * an opener that opened a TLS connection stays, as its relay (tls.c): it
 * hands the broker one end of a local socket pair instead, and passes
 * bytes on between it and the session until either closes.  So a TLS
 * server that does not answer delays only the calls to it, as any other
 * (docs/broker.md).
 *
 * The child forgets the broker: its exit callbacks, its latch, and (by the
 * caller's forget function) the descriptors of its clients and upstreams,
 * so that a client the broker closes sees the end of its link at once.  It
 * dies with the broker (PR_SET_PDEATHSIG), and the broker kills it once
 * BROKER_OPEN_KILL_MARGIN_MS past its own connect deadline.
 */
#include "postgres.h"

#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include "hiredis.h"

#include "libpq/pqsignal.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/ps_status.h"
#include "utils/timestamp.h"

#include "broker_open.h"
#include "brokerlink.h"
#include "clock.h"
#include "compat.h"
#include "conn.h"
#include "guc.h"
#include "link.h"
#include "report.h"
#include "resolve.h"
#include "sentinel.h"
#include "sockwait.h"
#include "timing.h"
#include "tls.h"

/* The opener's own latch (the broker's is the broker's) */
static Latch opener_latch;

/* Send the outcome, and the socket when there is one (fd >= 0) */
static bool
send_result(int sock, const RedisOutcome *outcome, int fd)
{
	struct msghdr msg = {0};
	struct iovec iov = {(void *) outcome, sizeof(RedisOutcome)};
	char		control[CMSG_SPACE(sizeof(int))] = {0};

	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if (fd >= 0)
	{
		struct cmsghdr *cm;

		msg.msg_control = control;
		msg.msg_controllen = sizeof(control);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	return sendmsg(sock, &msg, MSG_NOSIGNAL) == (ssize_t) sizeof(RedisOutcome);
}

/*
 * Become a process of its own: no exit callbacks, its own latch, none of
 * the broker's cached wait set or lookup count, dies with the broker; its
 * connections are named after the broker, whose they become
 */
static void
become_opener(pid_t broker)
{
	on_exit_reset();
	MyProcPid = getpid();
	InitLatch(&opener_latch);
	MyLatch = &opener_latch;
	/*
	 * (a fast shutdown's SIGTERM reaches the whole process group, while
	 * the broker serves on for BROKER_STOP_LINGER_MS: openers and relays
	 * end with the broker, or when it closes their socket, or killed)
	 */
	pqsignal(SIGTERM, SIG_IGN);
	pqsignal(SIGCHLD, SIG_DFL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != broker)
		_exit(1);
	/* (a copy of the broker's memory: no core dump, no tracing) */
	(void) prctl(PR_SET_DUMPABLE, 0);
	(void) prctl(PR_SET_NAME, "redsem opener");
	init_ps_display("redsem opener");
	redis_wait_forget_inherited();
	redis_resolve_forget_inherited();
	redis_name_connections_after(broker);
}

/*
 * Open and set up a connection to host:port (or path), or to the primary
 * the profile's sentinels name, as profile says, by deadline: one try (a
 * backend asks again while a failover runs, as in direct mode); on success
 * the outcome is RS_OK with, through sentinels, the primary's address as
 * its detail.  With ask, only ask the sentinels where the primary is: NULL,
 * and RS_OK with the address if they said.
 */
static redisContext *
broker_open_profiled(RedisCall *call, const char *host, int port, const char *path,
					 const RedisProfile *profile, TimestampTz deadline, bool ask)
{
	redisContext *ctx = NULL;

	redis_profile_force(profile);
	if (ask)
	{
		if (sentinel_ask_primary(call, deadline))
			(void) redis_note(&call->outcome, RS_OK, "%s", sentinel_last_primary());
	}
	else
	{
		ctx = sentinel_enabled() ? sentinel_connect_primary(call, deadline)
			: redis_open_target(call, host, port, path, deadline);
		if (ctx != NULL)
			(void) redis_note(&call->outcome, RS_OK, "%s",
							  sentinel_enabled() ? sentinel_last_primary() : "");
	}
	redis_profile_force(NULL);
	return ctx;
}

/*
 * How long an opener for profile may take, given the asking session's
 * connect timeout: that, or through sentinels one for each sentinel and
 * one for the primary, as a backend gives each (a sentinel that does not
 * answer must not leave the others no time)
 */
static int
open_budget_ms(const RedisProfile *profile, int connect_timeout_ms)
{
	int			n = 1;

	if (profile->sentinels[0] == '\0')
		return connect_timeout_ms;
	for (const char *p = profile->sentinels; *p != '\0'; p++)
		n += (*p == ',');
	return connect_timeout_ms * (Min(n, 16) + 1);
}

/*
 * Hand the broker (on sock, with the outcome) one end of a new socket
 * pair for TLS connection ctx, and become the relay between the other end
 * and ctx's session (tls_relay).  If it cannot, the outcome sent says
 * so, without a socket.  Never returns.
 */
pg_noreturn static void
relay_for_broker(int sock, RedisOutcome *outcome, redisContext *ctx)
{
	int			sv[2];

	if (!tls_relay_ready(ctx))
	{
		(void) redis_note(outcome, RS_CONNECT_FAILED, "the TLS session of the connection was not found to relay");
		_exit(send_result(sock, outcome, -1) ? 0 : 1);
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
	{
		(void) redis_note(outcome, RS_CONNECT_FAILED, "could not make a socket pair for the TLS relay: %m");
		_exit(send_result(sock, outcome, -1) ? 0 : 1);
	}
	if (!send_result(sock, outcome, sv[0]))
		_exit(1);
	close(sv[0]);
	close(sock);
	(void) prctl(PR_SET_NAME, "redsem relay");
	init_ps_display("redsem relay");
	tls_relay(ctx, sv[1], redsem_broker_poll_us);
}

/*
 * The opener, right after fork: open and set up the connection as profile
 * says, send the outcome (and the socket) on sock, exit.  An ERROR ends it
 * without a word: the broker sees its end of the pair close.
 */
pg_noreturn static void
opener_main(pid_t broker, int sock, const char *host, int port, const char *path,
			const RedisProfile *profile, int connect_timeout_ms, TimestampTz by,
			bool ask)
{
	sigjmp_buf	local_sigjmp_buf;
	RedisCall	call;
	redisContext *ctx;
	TimestampTz deadline;

	become_opener(broker);
	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
		_exit(1);
	PG_exception_stack = &local_sigjmp_buf;
	sigprocmask(SIG_SETMASK, &UnBlockSig, NULL);
	/* (the session's that asked first: the message names it) */
	redsem_connect_timeout_ms = connect_timeout_ms;
	redis_call_init(&call, DT_NOEND, false, LOG);
	/* (through sentinels, sentinel.c gives each try its connect timeout) */
	deadline = profile->sentinels[0] != '\0'
		? Min(by, TimestampTzPlusMilliseconds(redsem_now(),
											  open_budget_ms(profile, connect_timeout_ms)))
		: redis_connect_deadline(by);
	ctx = broker_open_profiled(&call, host, port, path, profile, deadline, ask);
	if (ctx != NULL && profile->tls)
		relay_for_broker(sock, &call.outcome, ctx);
	_exit(send_result(sock, &call.outcome, ctx ? ctx->fd : -1) ? 0 : 1);
}

/*
 * Fork an opener for host:port (or path) set up with profile, within
 * connect_timeout_ms (the asking session's redsem.connect_timeout; through
 * sentinels, one for each and one for the primary: open_budget_ms), and by
 * by if that is sooner (DT_NOEND: no sooner); with ask, one that only asks
 * the profile's sentinels where the primary is.  forget closes, in the
 * child, the descriptors of the broker it must not keep.  False, with the
 * outcome filled, if it could not be forked.
 */
bool
broker_open_start(BrokerOpening *o, const char *host, int port, const char *path,
				  const RedisProfile *profile, int connect_timeout_ms, TimestampTz by,
				  bool ask, void (*forget) (void), RedisOutcome *outcome)
{
	int			sv[2];
	pid_t		broker = getpid();
	sigset_t	was;

	/* (a datagram per message: the outcome arrives whole or not at all) */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return redis_note(outcome, RS_CONNECT_FAILED, "could not make a socket pair: %m");
	fflush(stdout);
	fflush(stderr);
	/* (blocked until the child's handlers are in place) */
	sigprocmask(SIG_SETMASK, &BlockSig, &was);
	o->pid = fork();
	if (o->pid == 0)
	{
		close(sv[0]);
		forget();
		opener_main(broker, sv[1], host, port, path, profile, connect_timeout_ms, by, ask);
	}
	sigprocmask(SIG_SETMASK, &was, NULL);
	close(sv[1]);
	if (o->pid < 0)
	{
		o->pid = 0;
		close(sv[0]);
		return redis_note(outcome, RS_CONNECT_FAILED, "could not fork a process to connect: %m");
	}
	o->fd = sv[0];
	o->ask = ask;
	o->relay = profile->tls && !ask;
	o->started = redsem_now();
	o->deadline = Min(by, TimestampTzPlusMilliseconds(o->started,
													  open_budget_ms(profile, connect_timeout_ms)));
	o->kill_at = TimestampTzPlusMilliseconds(o->deadline, BROKER_OPEN_KILL_MARGIN_MS);
	return true;
}

/*
 * Reap child pid, an opener or a relay (killed first if still there; only
 * this pid is waited for, so it cannot have been reused); 0: none
 */
static void
broker_reap(pid_t pid)
{
	if (pid > 0 && waitpid(pid, NULL, WNOHANG) == 0)
	{
		(void) kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
}

/*
 * Relays whose connections the broker closed, and since when: each ends
 * when it sees its socket closed, and is reaped then (broker_reap_ended),
 * or killed BROKER_RELAY_END_MS later (one waiting on a frozen server).
 * A listed pid cannot be another process's: it stays the broker's child
 * until reaped here, as the broker never reaps children otherwise
 * (SIGCHLD is not ignored in it, and nothing waits for any child).
 */
typedef struct EndingRelay
{
	pid_t		pid;
	TimestampTz since;
} EndingRelay;

static EndingRelay *ending = NULL;
static int	n_ending = 0;
static int	ending_cap = 0;

/* Reap relay pid (0: none) once it has ended, its socket being closed */
void
broker_reap_later(pid_t pid)
{
	if (pid <= 0)
		return;
	if (n_ending == ending_cap)
	{
		ending_cap = Max(16, ending_cap * 2);
		ending = ending ? repalloc(ending, sizeof(EndingRelay) * ending_cap)
			: MemoryContextAlloc(TopMemoryContext, sizeof(EndingRelay) * ending_cap);
	}
	ending[n_ending].pid = pid;
	ending[n_ending++].since = redsem_now();
}

/*
 * The earlier of until and when broker_reap_ended is next due: every
 * BROKER_REAP_POLL_MS while relays are to be reaped (nothing wakes the
 * broker when one ends)
 */
TimestampTz
broker_reap_next(TimestampTz until)
{
	if (n_ending == 0)
		return until;
	return Min(until, TimestampTzPlusMilliseconds(redsem_now(), BROKER_REAP_POLL_MS));
}

/* Reap the relays that ended; kill those past BROKER_RELAY_END_MS */
void
broker_reap_ended(TimestampTz now)
{
	for (int i = 0; i < n_ending;)
	{
		if (now - ending[i].since >= (TimestampTz) BROKER_RELAY_END_MS * 1000)
			broker_reap(ending[i].pid);
		else if (waitpid(ending[i].pid, NULL, WNOHANG) == 0)
		{
			i++;
			continue;
		}
		ending[i] = ending[--n_ending];
	}
}

/* End an opening: its socket closed, its opener reaped */
static void
end_opening(BrokerOpening *o)
{
	if (o->fd >= 0)
		close(o->fd);
	o->fd = -1;
	broker_reap(o->pid);
	o->pid = 0;
}

/*
 * What the opener sent (its socket pair is readable): a context on the
 * socket it opened, or NULL with the outcome saying why (an asking one's:
 * NULL, RS_OK and the address when the sentinels answered).  The opening
 * ends; for a TLS connection the opener stays as its relay, whose pid is
 * *relay (0 otherwise), to be reaped (broker_reap) once the context is
 * closed.
 */
redisContext *
broker_open_finish(BrokerOpening *o, RedisOutcome *outcome, pid_t *relay)
{
	struct msghdr msg = {0};
	struct iovec iov = {outcome, sizeof(RedisOutcome)};
	char		control[CMSG_SPACE(sizeof(int))];
	struct cmsghdr *cm;
	ssize_t		n;
	int			fd = -1;
	bool		ask = o->ask;
	redisContext *ctx;

	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control;
	msg.msg_controllen = sizeof(control);
	do
		n = recvmsg(o->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	cm = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
	if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	*relay = 0;
	if (o->relay && fd >= 0 && n == (ssize_t) sizeof(RedisOutcome) && outcome->status == RS_OK)
	{
		*relay = o->pid;		/* (not killed: it is the connection now) */
		o->pid = 0;
	}
	end_opening(o);
	if (n != (ssize_t) sizeof(RedisOutcome))
	{
		if (fd >= 0)
			close(fd);
		(void) redis_note(outcome, RS_CONNECT_FAILED, "the process opening the connection ended without a result");
		return NULL;
	}
	outcome->detail[sizeof(outcome->detail) - 1] = '\0';
	if (ask && fd < 0)
		return NULL;			/* (the sentinels' answer, or why none) */
	if (outcome->status != RS_OK || fd < 0)
	{
		if (fd >= 0)
			close(fd);
		if (outcome->status == RS_OK)
			(void) redis_note(outcome, RS_CONNECT_FAILED, "no connection was handed over");
		return NULL;
	}
	if (!AcquireExternalFD())
	{
		close(fd);
		(void) redis_note(outcome, RS_CONNECT_FAILED, "there are too many open files on the local server");
		ctx = NULL;
	}
	else
		ctx = redis_context_on_fd(fd, outcome); /* (non-blocking: the opener made it so) */
	if (ctx == NULL)
	{
		broker_reap_later(*relay);	/* (its socket is closed) */
		*relay = 0;
	}
	return ctx;
}

/* Give up an opening past its time (the opener is killed), with the outcome */
void
broker_open_cancel(BrokerOpening *o, RedisOutcome *outcome)
{
	end_opening(o);
	(void) redis_note(outcome, RS_CONNECT_FAILED, "no connection within redsem.connect_timeout");
	outcome->no_server = true;
}
