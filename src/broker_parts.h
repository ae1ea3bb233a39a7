/*
 * broker_parts.h
 *		What the files of the broker's loop share: broker_loop.c (the loop
 *		and its wait set), broker_clients.c (backends' links),
 *		broker_upstream.c (connections to Redis) and broker_forward.c
 *		(requests sent on).  Only the broker child uses it.
 */
#ifndef REDSEM_BROKER_PARTS_H
#define REDSEM_BROKER_PARTS_H

#include "hiredis.h"

#include "storage/latch.h"

#include "broker_open.h"
#include "broker_state.h"

/* An upstream connection being opened by an opener (broker_open.c) */
typedef struct Opening
{
	SockKind	kind;			/* first: what the event's user data is */
	BrokerOpening o;			/* o.pid 0: a free slot */
	int			target;
	bool		side;
	bool		short_budget;	/* given less than the server's connect timeout */
	int			pos;
} Opening;

/* The loop (broker_loop.c) */
/* The least room for more sockets the wait set is made with */
#define BROKER_WAIT_SPARE	64
extern int	listen_fd;
extern int	settings_fd;
extern WaitEventSet *wait_set;
extern int	wait_set_room;
extern int	wait_set_dead;
extern uint32 client_events(const Client *c);
extern int wait_add(uint32 events, pgsocket fd, void *user_data);

/* Clients (broker_clients.c) */
extern TimestampTz accept_paused_until;
extern Client *pending_client(const Pending *p);
extern void add_client(int fd);
extern int live_clients(void);
extern int live_upstreams(void);
extern bool log_due(TimestampTz *at);
extern void accept_clients(void);
extern void close_client(Client *c);
extern void client_write(Client *c);
extern void close_overflowing(Client *c, const char *what);
extern void client_read(Client *c);

/* Upstream connections (broker_upstream.c) */
extern Opening **openings;
extern int	n_openings;
extern RedisOutcome no_upstream;
extern TimestampTz forked_at;
extern void close_connection(redisContext *ctx, pid_t relay);
extern int find_target(const redisReply *cmd);
extern bool target_connected(int t);
extern void connections_gone(int t);
extern void end_rerouted_links(void);
extern bool sentinels_to_ask(int t);
extern void check_sentinels(TimestampTz now);
extern Upstream *shared_upstream(Client *c, bool *wait);
extern Upstream *side_upstream(Client *c, bool *wait);
extern void finish_opening(Opening *op);
extern void check_openings(TimestampTz now);
extern void check_waiters(TimestampTz now);
extern void fail_upstream(Upstream *u, const char *why);
extern void close_idle_sides(TimestampTz now);
extern void end_unused_targets(TimestampTz now);
extern void upstream_write(Upstream *u);
extern void upstream_read(Upstream *u);

/* Forwarding (broker_forward.c) */
extern void answer_failure(Client *c, const RedisOutcome *o);
extern bool take_request(Client *c);
extern void promote_idle_side(int t);
extern void process_client(Client *c);

#endif							/* REDSEM_BROKER_PARTS_H */
