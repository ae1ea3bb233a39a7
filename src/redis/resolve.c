/*
 * resolve.c
 *		Host names turned into addresses without blocking the backend.
 *
 * getaddrinfo() can block for as long as the resolver's timeouts allow
 * (tens of seconds with an unreachable name server), and a signal does not
 * end it: PostgreSQL installs its handlers with SA_RESTART.  So a name is
 * looked up on a helper thread that runs getaddrinfo() and nothing else (no
 * PostgreSQL code, every signal blocked) and then writes an eventfd; the
 * backend waits on that eventfd and its latch together, through
 * redis_wait_socket(), so cancel, statement_timeout, pg_terminate_backend
 * and redsem.connect_timeout are served while the resolver is stuck.
 *
 * A lookup the backend stops waiting for (a timeout, an interrupt) is
 * abandoned, not stopped.  The thread and the backend each hold a
 * reference to it, and whichever drops the last one frees it, eventfd
 * included: the thread's write can never reach a descriptor that the
 * backend already closed (and the process may have reused for a Redis
 * socket).  It lives in malloc'd memory for that reason.  The backend
 * counts the eventfd against max_files_per_process until it is closed; a
 * descriptor that a thread closed is given back to that count at the
 * backend's next lookup.  A numeric address needs no lookup and no thread.
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "clock.h"
#include "guc.h"
#include "redis_call.h"
#include "report.h"
#include "sockwait.h"
#include "resolve.h"

/* Whether the thread has a result for the backend */
#define LOOKUP_RUNNING	0
#define LOOKUP_DONE		1		/* the result is there to read */

/*
 * At most this many lookups at once per process, abandoned ones included:
 * a resolver that hangs while calls keep timing out must not pile up
 * threads.  Each thread gets a small stack (LOOKUP_STACK_BYTES), which
 * counts against the commit limit under vm.overcommit_memory = 2.
 */
#define LOOKUPS_MAX			8
#define LOOKUP_STACK_BYTES	(1024 * 1024)

/* Lookups whose thread has not finished, in this process */
static pg_atomic_uint32 lookups_running;

/* Eventfds that threads closed, not yet given back to ReleaseExternalFD */
static pg_atomic_uint32 fds_closed_by_threads;
static bool atomics_set = false;

typedef struct Lookup
{
	pg_atomic_uint32 state;
	pg_atomic_uint32 refs;		/* the thread's and the backend's */
	int			event_fd;		/* written by the thread when done */
	int			rc;				/* getaddrinfo's result */
	struct addrinfo *result;
	char		host[NI_MAXHOST];
} Lookup;

/*
 * In a process just forked (the broker's opener): the parent's lookup
 * threads are not the child's, so none of them counts against its limit
 */
void
redis_resolve_forget_inherited(void)
{
	atomics_set = false;
}

/* Free a lookup and what it holds */
static void
lookup_free(Lookup *l)
{
	if (l->result != NULL)
		freeaddrinfo(l->result);
	close(l->event_fd);
	free(l);
}

/*
 * Drop one reference to l; the last one frees it.  by_thread: the caller is
 * the helper thread, which may not touch the backend's descriptor count.
 */
static void
lookup_unref(Lookup *l, bool by_thread)
{
	if (pg_atomic_fetch_sub_u32(&l->refs, 1) != 1)
		return;
	lookup_free(l);
	if (by_thread)
		pg_atomic_fetch_add_u32(&fds_closed_by_threads, 1);
	else
		ReleaseExternalFD();
}

/* Give back to the descriptor count the eventfds that threads closed */
static void
release_thread_fds(void)
{
	uint32		n = pg_atomic_exchange_u32(&fds_closed_by_threads, 0);

	while (n-- > 0)
		ReleaseExternalFD();
}

/* The helper thread: resolve, publish, wake the backend, drop its reference */
static void *
lookup_thread(void *arg)
{
	Lookup	   *l = (Lookup *) arg;
	struct addrinfo hints;
	uint64_t	one = 1;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	l->rc = getaddrinfo(l->host, NULL, &hints, &l->result);
	pg_write_barrier();
	pg_atomic_write_u32(&l->state, LOOKUP_DONE);
	/* l, and so its eventfd, stays open until we drop our reference */
	if (write(l->event_fd, &one, sizeof(one)) < 0)
	{
		/* the backend also polls the state: nothing lost */
	}
	lookup_unref(l, true);
	pg_atomic_fetch_sub_u32(&lookups_running, 1);
	return NULL;
}

/* The backend stops waiting for l */
static void
lookup_leave(Lookup *l)
{
	lookup_unref(l, false);
}

/*
 * Start a lookup of host on a detached thread with every signal blocked;
 * NULL with the outcome filled if that cannot be done.
 */
static Lookup *
lookup_start(RedisCall *call, const char *host)
{
	Lookup	   *l;
	pthread_attr_t attr;
	pthread_t	thread;
	sigset_t	all,
				saved;
	int			err;

	if (!atomics_set)
	{
		pg_atomic_init_u32(&lookups_running, 0);
		pg_atomic_init_u32(&fds_closed_by_threads, 0);
		atomics_set = true;
	}
	release_thread_fds();
	if (pg_atomic_read_u32(&lookups_running) >= LOOKUPS_MAX)
	{
		redis_note(&call->outcome, RS_CONNECT_FAILED, "%d earlier lookups of host names are still running; the name server does not answer",
					LOOKUPS_MAX);
		return NULL;
	}
	if (!AcquireExternalFD())
	{
		redis_note(&call->outcome, RS_CONNECT_FAILED, "there are too many open files on the local server");
		return NULL;
	}
	l = calloc(1, sizeof(Lookup));
	if (l == NULL)
	{
		ReleaseExternalFD();
		redis_note(&call->outcome, RS_CONNECT_FAILED, "could not start a lookup of host name \"%s\": out of memory", host);
		return NULL;
	}
	l->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->event_fd < 0)
	{
		redis_note(&call->outcome, RS_CONNECT_FAILED, "could not start a lookup of host name \"%s\": %s",
					host, strerror(errno));
		free(l);
		ReleaseExternalFD();
		return NULL;
	}
	pg_atomic_init_u32(&l->state, LOOKUP_RUNNING);
	pg_atomic_init_u32(&l->refs, 2);
	strlcpy(l->host, host, sizeof(l->host));
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	pg_atomic_fetch_add_u32(&lookups_running, 1);
	err = pthread_attr_init(&attr);
	if (err == 0)
	{
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, LOOKUP_STACK_BYTES);
		err = pthread_create(&thread, &attr, lookup_thread, l);
		pthread_attr_destroy(&attr);
	}
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	if (err != 0)
	{
		pg_atomic_fetch_sub_u32(&lookups_running, 1);
		ReleaseExternalFD();
		lookup_free(l);
		redis_note(&call->outcome, RS_CONNECT_FAILED, "could not start a lookup of host name \"%s\": %s",
				   host, strerror(err));
		return NULL;
	}
	return l;
}

/*
 * Copy the address to use out of a finished lookup into addr: the first
 * IPv4 address, else the first IPv6 one (hiredis's own order).
 */
static bool
lookup_address(RedisCall *call, Lookup *l, char *addr, size_t addrlen)
{
	struct addrinfo *a,
			   *pick = NULL;

	if (l->rc != 0)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "could not resolve host name \"%s\": %s",
						  l->host, gai_strerror(l->rc));
	for (a = l->result; a != NULL && pick == NULL; a = a->ai_next)
		if (a->ai_family == AF_INET)
			pick = a;
	for (a = l->result; a != NULL && pick == NULL; a = a->ai_next)
		if (a->ai_family == AF_INET6)
			pick = a;
	if (pick == NULL ||
		getnameinfo(pick->ai_addr, pick->ai_addrlen, addr, addrlen, NULL, 0,
					NI_NUMERICHOST) != 0)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "host name \"%s\" has no usable address",
						  l->host);
	return true;
}

/* True if host is an IPv4 or IPv6 address already */
static bool
is_numeric(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* Wait for l to finish, by deadline; cancel is served if interruptible */
static bool
lookup_wait(RedisCall *call, Lookup *l, TimestampTz deadline)
{
	TimestampTz start = redsem_now();

	while (pg_atomic_read_u32(&l->state) == LOOKUP_RUNNING)
	{
		int			rc = redis_wait_socket(l->event_fd, WL_SOCKET_READABLE, deadline,
										   call->interruptible);

		if ((rc & WL_TIMEOUT) && redis_past(deadline))
			return redis_note(&call->outcome, RS_CONNECT_FAILED,
							   "no address for host name \"%s\" within %ld ms (redsem.connect_timeout is %d ms)",
							   l->host,
							   (long) ((redsem_now() - start) / 1000),
							   redsem_connect_timeout_ms);
	}
	pg_memory_barrier();
	return true;
}

/*
 * Resolve host into a numeric address in addr (addrlen bytes, at least
 * NI_MAXHOST), by deadline.  False, with the call's outcome saying why, if
 * it has no address or none came in time.  An interrupt unwinds through
 * here and leaves nothing behind but the thread, which then cleans up.
 */
bool
redis_resolve(RedisCall *call, const char *host, char *addr, size_t addrlen,
			  TimestampTz deadline)
{
	Lookup	   *l;
	bool		ok;

	if (is_numeric(host))
	{
		strlcpy(addr, host, addrlen);
		return true;
	}
	if (strlen(host) >= NI_MAXHOST)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "host name is too long");
	l = lookup_start(call, host);
	if (l == NULL)
		return false;
	PG_TRY();
	{
		ok = lookup_wait(call, l, deadline) && lookup_address(call, l, addr, addrlen);
	}
	PG_CATCH();
	{
		redis_forget_wait_fd(l->event_fd);
		lookup_leave(l);
		PG_RE_THROW();
	}
	PG_END_TRY();
	redis_forget_wait_fd(l->event_fd);
	lookup_leave(l);
	return ok;
}
