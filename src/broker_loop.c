/*
 * broker_loop.c
 *		The redsem broker's work (in the child broker.c forks): accept the
 *		links of client backends (brokerlink.c), forward their requests to
 *		Redis over a few connections it owns, and hand each reply back.
 *		This file is the loop itself, its listening socket and its wait
 *		set; its parts (broker_parts.h) are broker_clients.c (the links),
 *		broker_upstream.c (connections to Redis) and broker_forward.c
 *		(requests sent on).
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

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include "hiredis.h"

#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "broker_loop.h"
#include "broker_parts.h"
#include "broker_wait.h"
#include "brokerlink.h"
#include "clock.h"
#include "compat.h"
#include "guc.h"

int			listen_fd = -1;		/* the socket backends link to */
int			settings_fd = -1;	/* the supervisor's pipe (broker.c) */
/* Every socket the broker waits on (rebuild_wait_set) */
WaitEventSet *wait_set;
/*
 * The wait set's room for more sockets, and its dead entries (of links
 * closed since it was made)
 */
int			wait_set_room = 0;
int			wait_set_dead = 0;

static void read_settings(void);

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
uint32
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
int
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

/* Give up every upstream whose oldest command is past its deadline */
static void
check_deadlines(TimestampTz now)
{
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];

		if (u->ctx != NULL && u->count > 0 && broker_fifo_head(u)->deadline <= now)
			fail_upstream(u, "no answer within redsem.command_timeout");
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
		if (sentinels_to_ask(t))
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
