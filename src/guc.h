/*
 * guc.h
 *		redsem's settings (guc.c; the Sentinel, TLS, queue and keeper
 *		modules define their own), the generation that changes with any
 *		connection setting, and the test-only fault injection.
 */
#ifndef REDSEM_GUC_H
#define REDSEM_GUC_H

#include "compat.h"

extern char *redsem_host;
extern int	redsem_port;
extern char *redsem_unix_socket;
extern int	redsem_database;
extern char *redsem_user;
extern char *redsem_sentinels;
extern char *redsem_sentinel_master;
extern char *redsem_sentinel_user;
extern char *redsem_sentinel_password_file;
extern char *redsem_key_prefix;
extern int	redsem_connect_timeout_ms;
extern int	redsem_max_lease_ms;
extern int	redsem_command_timeout_ms;
/* the timeouts' values from the server's configuration (not the role's) */
extern int	redsem_connect_timeout_floor_ms;
extern int	redsem_command_timeout_floor_ms;
extern int	redsem_grant_replicas;
extern int	redsem_max_priority;
extern int	redsem_grant_replica_timeout_ms;
extern uint64 redsem_guc_generation_now(void);
extern bool redsem_preloaded;
extern bool redsem_loading;

/* redsem.connection_mode (defined by broker.c, read by the Redis client) */
typedef enum RedsemConnectionMode
{
	REDSEM_CONNECTION_DIRECT,	/* a connection per backend (default) */
	REDSEM_CONNECTION_BROKER	/* client backends go through the broker */
} RedsemConnectionMode;

extern int	redsem_connection_mode;

/* True if this process's data connections go through the broker */
static inline bool
redsem_broker_wanted(void)
{
	return redsem_preloaded &&
		redsem_connection_mode == REDSEM_CONNECTION_BROKER &&
		redsem_is_client_backend();
}

/* redsem.broker_poll: microseconds the broker polls after activity (broker.c) */
extern int	redsem_broker_poll_us;

/* Broker mode was asked for, but redsem is not preloaded (see broker.c) */
extern bool redsem_broker_asked_unpreloaded;

extern void guc_define(void);

extern void redsem_assign_connection_string(const char *newval, void *extra);
extern void redsem_assign_connection_bool(bool newval, void *extra);

extern void redsem_fault(const char *point);

extern const char *redsem_prefix_or_setting(const char *prefix);
extern const char *redsem_prefix_setting(void);
extern void redsem_prefix_stand_in(const char *prefix);

#endif							/* REDSEM_GUC_H */
