/*
 * broker_clients.c
 *		The broker's clients (backends' links): accepting them, reading
 *		their requests, writing their replies, closing them.
 */
#include "postgres.h"

#include <sys/socket.h>
#include <errno.h>
#include <unistd.h>

#include "hiredis.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "broker_parts.h"
#include "broker_wait.h"
#include "brokerlink.h"
#include "clock.h"
#include "guc.h"

/* Until when the listener is left alone after accept failed (0: not) */
TimestampTz accept_paused_until = 0;
/* ... for how long, last (doubled at each failure in a row) */
static int	accept_pause_ms = BROKER_ACCEPT_PAUSE_MS / 2;

/* The client a pending command is for, or NULL if it has left since */
Client *
pending_client(const Pending *p)
{
	Client	   *c;

	if (p->what != PEND_CLIENT)
		return NULL;			/* (the broker's own) */
	c = clients[p->client];
	return (c->fd >= 0 && c->generation == p->generation) ? c : NULL;
}

/* A free client slot (a new one if none) */
static Client *
free_client_slot(void)
{
	Client	   *c;

	for (int i = 0; i < n_clients; i++)
		if (clients[i]->fd < 0 && clients[i]->reader == NULL)
			return clients[i];
	clients = clients ? repalloc(clients, sizeof(Client *) * (n_clients + 1)) :
		MemoryContextAlloc(broker_cxt, sizeof(Client *));
	c = MemoryContextAllocZero(broker_cxt, sizeof(Client));
	c->kind = SOCK_CLIENT;
	c->index = n_clients;
	c->fd = -1;
	clients[n_clients++] = c;
	return c;
}


/* Take a new client on fd */
void
add_client(int fd)
{
	Client	   *c = free_client_slot();

	c->fd = fd;
	c->generation++;
	c->reader = redisReaderCreate();
	if (c->reader == NULL)
		elog(ERROR, "out of memory");
	c->target = -1;
	c->home = c->ask_node = -1;
	c->after_asking = false;
	c->connect_timeout_ms = redsem_connect_timeout_ms;
	c->waiting = c->waiting_side = false;
	c->waiting_pool = -1;
	c->last_up = -1;
	c->outstanding = 0;
	c->on_side = c->in_pool = c->closing = c->process = false;
	c->reroute = NULL;
	c->n_held = 0;
	c->out_len = c->out_off = 0;
	c->pos = -1;
	if (wait_set != NULL && !set_dirty && wait_set_room > 0)
	{
		c->events = client_events(c);
		c->pos = wait_add(c->events, c->fd, c);
	}
	else
		set_dirty = true;
}

/* How many backends are linked now */
int
live_clients(void)
{
	int			n = 0;

	for (int i = 0; i < n_clients; i++)
		n += clients[i]->fd >= 0;
	return n;
}

/* How many connections to Redis are open now */
int
live_upstreams(void)
{
	int			n = 0;

	for (int i = 0; i < n_upstreams; i++)
		n += upstreams[i]->ctx != NULL;
	return n;
}

/* True (and *at set to now) if nothing was said since *at for BROKER_ACCEPT_LOG_MS */
bool
log_due(TimestampTz *at)
{
	TimestampTz now = redsem_now();

	if (*at != 0 && !TimestampDifferenceExceeds(*at, now, BROKER_ACCEPT_LOG_MS))
		return false;
	*at = now;
	return true;
}

/*
 * Stop listening for BROKER_ACCEPT_PAUSE_MS after accept failed (errno
 * set): saying so at most every BROKER_ACCEPT_LOG_MS
 */
static void
pause_accepting(void)
{
	static TimestampTz logged_at = 0;
	int			save_errno = errno;
	TimestampTz now = redsem_now();
	bool		no_fds = save_errno == EMFILE || save_errno == ENFILE;

	if (log_due(&logged_at))
	{
		errno = save_errno;
		ereport(LOG,
				(errmsg("redsem broker could not accept a connection: %m"),
				 no_fds ? errdetail("The broker holds %d links to backends and %d connections to Redis.",
									live_clients(), live_upstreams()) : 0,
				 no_fds ? errhint("Raise the open-file limit of the PostgreSQL server (ulimit -n, or LimitNOFILE= in its systemd unit); the broker tries again every %d ms to %d ms meanwhile.",
								  BROKER_ACCEPT_PAUSE_MS, BROKER_ACCEPT_PAUSE_MAX_MS) : 0));
	}
	/* (doubled while it keeps failing: each pause and resume makes the wait set anew) */
	accept_pause_ms = Min(accept_pause_ms * 2, BROKER_ACCEPT_PAUSE_MAX_MS);
	accept_paused_until = TimestampTzPlusMilliseconds(now, accept_pause_ms);
	set_dirty = true;
}

/* Accept every waiting backend; a peer of another user is shut out */
void
accept_clients(void)
{
	for (;;)
	{
		int			fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
		{
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
				errno != ECONNABORTED)
				pause_accepting();
			return;
		}
		accept_pause_ms = BROKER_ACCEPT_PAUSE_MS / 2;
		if (!redis_broker_peer_is_ours(fd))
		{
			ereport(LOG,
					(errmsg("redsem broker refused a connection from a process of another user")));
			close(fd);
			continue;
		}
		add_client(fd);
	}
}

/* True if every command pending on upstream u is client c's */
static bool
only_client_of(Upstream *u, Client *c)
{
	for (int k = 0; k < u->count; k++)
	{
		Client	   *o = pending_client(&u->fifo[(u->head + k) % u->cap]);

		if (o != NULL && o != c)	/* (NULL: one that left) */
			return false;
	}
	return true;
}

/*
 * Close the side connection that carries c's BLPOP: a BLPOP left blocking
 * for a client gone would take the next wake-up of its keys (Redis serves
 * the longest blocked first) and drop it; closed, Redis unblocks it without
 * popping anything, as when a backend's own connection closes.  A side
 * connection that also carries others' commands (a WAIT's, which took the
 * shared one) is left to answer them; c's replies are dropped.
 */
static void
close_side_of(Client *c)
{
	for (int i = 0; i < n_upstreams; i++)
	{
		Upstream   *u = upstreams[i];
		int			t = u->target;

		if (u->ctx != NULL && u->side && !u->pool && u->count > 0 && only_client_of(u, c))
		{
			close_connection(u->ctx, u->relay);
			u->ctx = NULL;
			u->relay = 0;
			u->target = -1;
			while (u->count > 0)
				broker_fifo_pop(u);
			set_dirty = true;
			if (!target_connected(t))
				connections_gone(t);
		}
	}
}

/* Close a client's link; replies still owed to it will be dropped */
void
close_client(Client *c)
{
	if (c->fd < 0)
		return;
	if (c->on_side)
		close_side_of(c);
	if (c->in_pool)
		broker_pool_leave(c);
	close(c->fd);
	c->fd = -1;
	c->generation++;
	for (int i = 0; i < c->n_held; i++)
		freeReplyObject(c->held[i]);
	c->n_held = 0;
	c->outstanding = 0;
	c->on_side = c->in_pool = false;
	c->waiting = c->waiting_side = false;
	/*
	 * (its entry in the wait set stays, dead: the kernel forgot the socket
	 * with its close, and an event naming it is ignored; the set is made
	 * anew once such entries are many)
	 */
	if (c->pos >= 0 && ++wait_set_dead > Max(BROKER_WAIT_SPARE, n_clients / 4))
		set_dirty = true;
	/*
	 * (an opener forked just now may not have closed its copy of the
	 * socket yet: the kernel would keep reporting its peer's close)
	 */
	if (c->pos >= 0 && redsem_now() < TimestampTzPlusMilliseconds(forked_at, BROKER_FORK_SETTLE_MS))
		set_dirty = true;
	c->pos = -1;
	/* the slot is reused only after the sweep (events may still name it) */
}

/* Write out what a client's output holds; close it if it is done */
void
client_write(Client *c)
{
	while (c->fd >= 0 && c->out_off < c->out_len)
	{
		ssize_t		n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
							 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0)
		{
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return;
			close_client(c);
			return;
		}
		c->out_off += n;
	}
	c->out_off = c->out_len = 0;
	if (c->closing)
		close_client(c);
}

/* Close a client whose what (requests, replies) passed BROKER_CLIENT_BUFFER_MAX */
void
close_overflowing(Client *c, const char *what)
{
	ereport(LOG,
			(errmsg("redsem broker closed a backend's link holding more than %d MB of %s",
					BROKER_CLIENT_BUFFER_MAX / (1024 * 1024), what)));
	close_client(c);
}

/* Read what a client sent into its reader; close it at EOF */
void
client_read(Client *c)
{
	char		buf[16384];

	while (c->fd >= 0)
	{
		ssize_t		n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0)
		{
			if (redisReaderFeed(c->reader, buf, n) != REDIS_OK)
			{
				close_client(c);
				return;
			}
			if (c->reader->len - c->reader->pos > BROKER_CLIENT_BUFFER_MAX)
			{
				close_overflowing(c, "requests");
				return;
			}
			c->process = true;
			/* a short read drained the socket: the wait (level-triggered) says if more came */
			if ((size_t) n < sizeof(buf))
				return;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		close_client(c);
		return;
	}
}
