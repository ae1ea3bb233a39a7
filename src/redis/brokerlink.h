/*
 * brokerlink.h
 *		A backend's link to the redsem broker (brokerlink.c), in place of a
 *		connection to Redis: a Unix socket that conn.c uses as it would a
 *		Redis connection.
 */
#ifndef REDSEM_BROKERLINK_H
#define REDSEM_BROKERLINK_H

#include <sys/socket.h>
#include <sys/un.h>

#include "datatype/timestamp.h"

#include "redis_call.h"

struct redisContext;

/*
 * The first request of a link, with no reply: REDSEM.TARGET host port
 * unix_socket database user password tls ca_file cert_file key_file
 * server_name (the session's settings; "" for those not set: the target
 * and its profile) connect_timeout_ms (the session's: an open it asks for
 * is given that long) cluster ("1" with redsem.cluster: the target is a
 * Cluster node, the seed, and the broker routes each command to the node
 * of its key's slot: broker_cluster.c)
 * sentinels master sentinel_user sentinel_password (through sentinels:
 * the broker finds the primary, and host, port and unix_socket are "")
 */
#define REDSEM_BROKER_HEADER_ARGS	18

/*
 * A later request of a link, with no reply: REDSEM.TIMEOUT connect_timeout_ms
 * (the session's redsem.connect_timeout changed since the header, or a
 * statement queue's acquire raised it to the server's: conn.c sends it
 * before the next command, and the broker gives the opens that command
 * asks for that long)
 */
#define REDSEM_BROKER_TIMEOUT	"REDSEM.TIMEOUT"

/*
 * The words of the broker's answers to a request it did not send on,
 * having ended the link, one for each reason: the backend sends it again
 * on a new link, in any mode (conn.c: broker_says_retry).  Its target's last
 * connection closed (a change of route: Redis may have restarted); the
 * sentinels name another primary; the sentinels refused the password the
 * link's header carries.  The last is the backend's own: the broker
 * refused the link's password and the password files changed since.
 */
#define REDSEM_BROKER_RETRY		"the broker's connections to Redis closed meanwhile; try again"
#define REDSEM_BROKER_MOVED		"the sentinels name another primary now; try again"
#define REDSEM_BROKER_REFUSED	"the sentinels refused the password this link was made with; try again"
#define REDSEM_BROKER_RELINK	"the password files changed since this link was made; try again"

/* The error code the broker answers with when it cannot reach Redis */
#define REDSEM_BROKER_ERROR		"REDSEMBROKER"

extern struct redisContext *redis_context_on_fd(int fd, RedisOutcome *outcome);
extern bool redis_broker_available(RedisCall *call);
extern struct redisContext *redis_broker_open(RedisCall *call, const char *host,
											  int port, const char *unix_path,
											  TimestampTz deadline);
/* The broker's socket, relative to the data directory, and its directory */
#define REDSEM_BROKER_DIR		"pg_stat_tmp"
#define REDSEM_BROKER_SOCKET	REDSEM_BROKER_DIR "/redsem_broker.sock"

extern socklen_t redis_broker_address(struct sockaddr_un *addr);
extern bool redis_broker_peer_is_ours(int fd);
extern bool redis_broker_exited(int fd, int *pid);
extern bool redis_broker_stopped(int fd, int *pid);
extern uint64 redis_broker_link_secrets(void);
extern bool redis_broker_secrets_changed(uint64 secrets);
extern bool redis_broker_error(const char *msg, RedisStatus *status,
							   const char **detail);
extern bool redis_broker_no_server(const char *msg);

#endif							/* REDSEM_BROKERLINK_H */
