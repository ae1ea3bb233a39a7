/*
 * broker_state.h
 *		The broker's state (broker_state.c), shared by its loop
 *		(broker_loop.c), its wait pools (broker_wait.c) and its Cluster
 *		routing (broker_cluster.c): its clients
 *		(backends' links), targets and upstream connections.  Only the
 *		broker child uses it.
 */
#ifndef REDSEM_BROKER_STATE_H
#define REDSEM_BROKER_STATE_H

#include <sys/types.h>

#include "hiredis.h"

#include "datatype/timestamp.h"

#include "profile.h"
#include "redis_call.h"

/*
 * The most a backend's link may hold in the broker, in requests not yet
 * parsed or in replies not yet written to it: a link past it is closed
 * (its backend sees its connection lost).  A backend pipelines a few
 * small commands (the Lua library, the largest, is some hundred kB), so
 * this only bounds what a process gone wrong can make the broker hold.
 */
#define BROKER_CLIENT_BUFFER_MAX	(64 * 1024 * 1024)

/* What a registered socket is */
typedef enum SockKind
{
	SOCK_CLIENT,
	SOCK_UPSTREAM,
	SOCK_OPENING
} SockKind;

/* Whose a command sent upstream is */
typedef enum PendKind
{
	PEND_CLIENT,				/* a client's: its reply goes to it */
	PEND_POOL_ID,				/* a wait pool's CLIENT ID (broker_wait.c) */
	PEND_POOL_WAIT,				/* a wait pool's BLPOP */
	PEND_POOL_UNBLOCK			/* CLIENT UNBLOCK of a wait pool's BLPOP */
} PendKind;

/* A command sent upstream, and the client (or wait pool) its reply goes to */
typedef struct Pending
{
	PendKind	what;
	int			client;			/* the client's index, or the wait pool's */
	uint32		generation;		/* the client's (the pool's), when sent */
	TimestampTz deadline;		/* DT_NOEND: none */
	int			slot;			/* in a cluster, the slot a reply that is no
								 * error shows its node serves; -1: none */
	uint64		stamp;			/* ... its map's changes when sent */
	bool		sees;			/* ... a redirection in reply brings its client
								 * up to date (broker_cluster_reply) */
	bool		looked;			/* past its deadline, it had its one look at
								 * what Redis sent (check_deadlines) */
} Pending;

/*
 * A Redis server clients name, with the settings their sessions set a
 * connection up with (clients whose settings differ have targets of their
 * own: a role's Redis user stays its own)
 */
typedef struct Target
{
	bool		free;			/* a free entry (ended: end_unused_targets) */
	TimestampTz unused_since;	/* nobody has used it since (0: in use) */
	char	   *host;
	int			port;
	char	   *path;			/* NULL: TCP */
	RedisProfile profile;		/* its strings are the target's own */
	bool		opening_shared; /* its shared upstream is being opened */
	int			opening_sides;	/* side connections being opened */
	int			shared;			/* its shared upstream, -1: none */
	RedisOutcome failure;
	bool		cluster;		/* a Cluster node (its clients route by slot) */
	struct ClusterMap *map;		/* a seed's: its links' slot map (broker_cluster.c) */
	char		primary[280];	/* through sentinels: the primary last found */
	TimestampTz primary_at;		/* ... since */
	bool		asking;			/* an opener asks its sentinels where it is */
	TimestampTz next_ask;		/* ... next (check_sentinels) */
	TimestampTz refused_at;		/* its sentinels refused its password: when its
								 * links were last ended for it (0: they took it) */
	TimestampTz short_failing;	/* opens a session gave less than the server's
								 * connect timeout run out since (0: none) */
	TimestampTz no_server_at;	/* its last open found nothing serving there:
								 * when (0: not so; see timing.h) */
	TimestampTz failure_logged_at;	/* when an open's failure was last logged */
} Target;

/* A connection to Redis */
typedef struct Upstream
{
	SockKind	kind;			/* first: what the event's user data is */
	int			index;
	int			target;
	bool		side;			/* a side connection, for BLPOP */
	redisContext *ctx;			/* NULL: free slot */
	pid_t		relay;			/* TLS: its relay process (broker_open.c), 0: none */
	bool		want_write;
	int			pos;			/* in the wait set, -1: not there */
	uint32		events;
	Pending    *fifo;
	int			head;
	int			count;
	int			cap;
	TimestampTz idle_since;
	uint32		gen;			/* bumped each time the slot gets a connection */
	bool		was_shared;		/* it had the shared role since it opened */
	bool		pool;			/* a wait pool's (broker_wait.c), a side one */
	bool		retired;		/* no new command: closes once its replies are in */
} Upstream;

/* A backend's link */
typedef struct Client
{
	SockKind	kind;			/* first: what the event's user data is */
	int			index;
	int			fd;				/* -1: free slot */
	uint32		generation;
	redisReader *reader;
	int			target;			/* -1 until REDSEM.TARGET; in a cluster, the node
								 * its last request went to */
	int			home;			/* in a cluster, the seed it linked for, else -1 */
	int			ask_node;		/* ... the node its next ASKING goes to, -1: none */
	uint64		map_seen;		/* ... its home map's changes it has seen */
	bool		after_asking;	/* ... its last request sent was ASKING */
	int			connect_timeout_ms; /* its session's (REDSEM.TARGET) */
	bool		waiting;		/* for an upstream being opened */
	bool		waiting_side;	/* ... a side connection */
	int			waiting_pool;	/* ... for this wait pool's, -1: none */
	TimestampTz wait_start;		/* ... since */
	TimestampTz wait_until;		/* ... within its connect timeout */
	bool		tried;			/* an opening was begun for it in this wait */
	int			last_up;		/* the upstream of its last command, -1: none */
	uint32		last_up_gen;	/* ... its gen then */
	int			outstanding;	/* commands sent, replies not yet back */
	bool		on_side;		/* its BLPOP is on a side connection */
	bool		in_pool;		/* its BLPOP is in a wait pool */
	bool		closing;		/* write out what is left, then close */
	const char *reroute;		/* why its link ends once owed nothing (its
								 * target's route changed), NULL: it does not */
	bool		process;		/* look at its requests again */
	redisReply *held[2];		/* parsed, not yet sent */
	int			n_held;
	char	   *out;
	size_t		out_len;
	size_t		out_off;
	size_t		out_cap;
	int			pos;
	uint32		events;
} Client;


extern MemoryContext broker_cxt;
extern Client **clients;
extern int	n_clients;
extern Upstream **upstreams;
extern int	n_upstreams;
extern Target *targets;
extern int	n_targets;
extern bool set_dirty;

extern void broker_out_append(Client *c, const char *data, size_t len);
extern void broker_out_line(Client *c, char prefix, const char *text, size_t len);
extern void broker_encode_reply(Client *c, const redisReply *r);
extern void broker_fifo_push(Upstream *u, Pending p);
extern Pending *broker_fifo_head(Upstream *u);
extern void broker_fifo_pop(Upstream *u);
extern TimestampTz broker_command_deadline(int64 wait_ms);
extern bool broker_queue_formatted(Upstream *u, char *formatted, int len, Pending p);
extern bool broker_is_command(const redisReply *cmd, const char *name);
extern int	broker_free_target_slot(void);
extern int	broker_node_target(int home, const char *host, int port);
extern bool broker_send_own(Upstream *u, int argc, const char **argv, PendKind what,
							int pool, uint32 pool_gen, TimestampTz deadline);

#endif							/* REDSEM_BROKER_STATE_H */
