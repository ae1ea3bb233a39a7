/*
 * guc.c
 *		The connection and timeout settings, and the test-only fault
 *		injection.  Other settings are defined by their modules (password:
 *		secret.c; per-session bound: hold.c; shared table: shmem.c; TLS,
 *		Sentinel, Cluster, queues); src/redsem.c calls each.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "bounds.h"
#include "compat.h"
#include "guc.h"
#include "timing.h"

char	   *redsem_host = NULL;
int			redsem_port = 6379;
char	   *redsem_unix_socket = NULL;
int			redsem_database = 0;
char	   *redsem_user = NULL;
/* (defined by sentinel.c; here so that lower layers read them: brokerlink.c) */
char	   *redsem_sentinels = NULL;
char	   *redsem_sentinel_master = NULL;
char	   *redsem_sentinel_user = NULL;
char	   *redsem_sentinel_password_file = NULL;
char	   *redsem_key_prefix = NULL;
int			redsem_max_lease_ms = 3600 * 1000;
int			redsem_connect_timeout_ms = 2000;
int			redsem_command_timeout_ms = 5000;
int			redsem_connect_timeout_floor_ms = 2000;
int			redsem_command_timeout_floor_ms = 5000;
int			redsem_grant_replicas = 0;
int			redsem_max_priority = REDSEM_MAX_PRIORITY;
int			redsem_grant_replica_timeout_ms = 1000;
static char *redsem_inject_fault = NULL;

/*
 * Moved when a connection setting changed, so that the next call
 * reconnects (redsem_guc_generation_now); the assign hooks count their
 * calls, which come at every reload for each setting in the file, changed
 * or not, and at every SET and its rollback
 */
static uint64 redsem_guc_generation = 0;
static uint64 connection_hook_calls = 0;

/* The settings whose change makes the next call reconnect */
static const char *const connection_settings[] = {
	"redsem.host", "redsem.port", "redsem.unix_socket", "redsem.database",
	"redsem.user", "redsem.password", "redsem.password_file", "redsem.cluster",
	"redsem.sentinels", "redsem.sentinel_master", "redsem.sentinel_user",
	"redsem.sentinel_password_file", "redsem.tls", "redsem.tls_ca_file",
	"redsem.tls_cert_file", "redsem.tls_key_file", "redsem.tls_server_name"
};

/* A hash of the connection settings' values now */
static uint64
connection_fingerprint(void)
{
	uint64		h = 0;

	for (size_t i = 0; i < lengthof(connection_settings); i++)
	{
		const char *v = GetConfigOption(connection_settings[i], true, false);

		h = hash_combine64(h, v ? hash_bytes_extended((const unsigned char *) v, strlen(v), i)
						   : (uint64) i);
	}
	return h;
}

/*
 * The connection settings' generation: moved only when their values
 * changed since it was last asked for (a reload that changes none of them
 * drops no connection)
 */
uint64
redsem_guc_generation_now(void)
{
	static uint64 seen_calls = PG_UINT64_MAX;
	static uint64 fingerprint = 0;

	if (seen_calls != connection_hook_calls)
	{
		uint64		h = connection_fingerprint();

		seen_calls = connection_hook_calls;
		if (h != fingerprint || redsem_guc_generation == 0)
		{
			fingerprint = h;
			redsem_guc_generation++;
		}
	}
	return redsem_guc_generation;
}

/*
 * How the module was loaded, set by _PG_init (redsem.c) and read by the
 * settings' check hooks and the modules below it.  True in a server that
 * loaded redsem from shared_preload_libraries:
 */
bool		redsem_preloaded = false;
/* ... and while _PG_init defines the settings (their check hooks run) */
bool		redsem_loading = false;

/* See guc.h */
int			redsem_connection_mode = REDSEM_CONNECTION_DIRECT;
int			redsem_broker_poll_us = BROKER_POLL_US;
bool		redsem_broker_asked_unpreloaded = false;

/* Any connection setting changed: reconnect at the next call */
void
redsem_assign_connection_string(const char *newval, void *extra)
{
	connection_hook_calls++;
}

/* Integer variant of redsem_assign_connection_string */
static void
assign_connection_int(int newval, void *extra)
{
	connection_hook_calls++;
}

/* Boolean variant of redsem_assign_connection_string */
void
redsem_assign_connection_bool(bool newval, void *extra)
{
	connection_hook_calls++;
}

/* The key prefix may not contain braces: they would move the hash tag */
static bool
check_key_prefix(char **newval, void **extra, GucSource source)
{
	if (*newval && (strchr(*newval, '{') || strchr(*newval, '}')))
	{
		GUC_check_errdetail("The prefix must not contain \"{\" or \"}\".");
		return false;
	}
	if (*newval && strlen(*newval) > REDSEM_MAX_PREFIX_BYTES)
	{
		GUC_check_errdetail("The prefix must be at most %d bytes long.",
							REDSEM_MAX_PREFIX_BYTES);
		return false;
	}
	return true;
}

/*
 * Test-only: raise an ERROR at the named point of the code (see
 * redsem.inject_fault), to prove that callbacks survive one.
 */
void
redsem_fault(const char *point)
{
	if (redsem_inject_fault != NULL && redsem_inject_fault[0] != '\0' &&
		strcmp(redsem_inject_fault, point) == 0)
		elog(ERROR, "redsem: fault injected at \"%s\"", point);
}

/* Define the connection settings */
static void
define_connection_gucs(void)
{
	DefineCustomStringVariable("redsem.host",
							   "Redis server host name or IP address.",
							   "Ignored when redsem.unix_socket is set.",
							   &redsem_host, "127.0.0.1",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
	DefineCustomIntVariable("redsem.port",
							"Redis server TCP port.",
							NULL,
							&redsem_port, 6379, 1, 65535,
							PGC_SUSET, 0,
							NULL, assign_connection_int, NULL);
	DefineCustomStringVariable("redsem.unix_socket",
							   "Path of the Redis server's Unix socket; empty means TCP.",
							   NULL,
							   &redsem_unix_socket, "",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
	DefineCustomIntVariable("redsem.database",
							"Redis logical database number (SELECT).",
							NULL,
							&redsem_database, 0, 0, 1000000,
							PGC_SUSET, 0,
							NULL, assign_connection_int, NULL);
	DefineCustomStringVariable("redsem.user",
							   "Redis ACL user name; empty means the default user.",
							   NULL,
							   &redsem_user, "",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
	DefineCustomStringVariable("redsem.key_prefix",
							   "Prefix of every Redis key redsem uses.",
							   NULL,
							   &redsem_key_prefix, "redsem:",
							   PGC_SUSET, 0,
							   check_key_prefix, NULL, NULL);
}

/*
 * A timeout's value from the last source a role cannot write itself (the
 * server's configuration, or the default), carried as the setting's
 * "extra" so that it follows SET, RESET and rollback with the value
 */
typedef struct TimeoutFloor
{
	int			floor;
} TimeoutFloor;

/* The floor a new value of a timeout brings: its own, if trusted */
static bool
timeout_floor_extra(int newval, void **extra, GucSource source, int floor_now)
{
	TimeoutFloor *f = redsem_guc_malloc(sizeof(TimeoutFloor));

	if (f == NULL)
		return false;
	f->floor = source <= PGC_S_GLOBAL ? newval : floor_now;
	*extra = f;
	return true;
}

/* Check hook of redsem.connect_timeout: note its floor */
static bool
check_connect_timeout(int *newval, void **extra, GucSource source)
{
	return timeout_floor_extra(*newval, extra, source, redsem_connect_timeout_floor_ms);
}

/* Assign hook of redsem.connect_timeout */
static void
assign_connect_timeout(int newval, void *extra)
{
	redsem_connect_timeout_floor_ms = extra ? ((TimeoutFloor *) extra)->floor : newval;
}

/* Check hook of redsem.command_timeout: note its floor */
static bool
check_command_timeout(int *newval, void **extra, GucSource source)
{
	return timeout_floor_extra(*newval, extra, source, redsem_command_timeout_floor_ms);
}

/* Assign hook of redsem.command_timeout */
static void
assign_command_timeout(int newval, void *extra)
{
	redsem_command_timeout_floor_ms = extra ? ((TimeoutFloor *) extra)->floor : newval;
}

/* Define the timeout settings */
static void
define_timeout_gucs(void)
{
	DefineCustomIntVariable("redsem.max_lease",
							"Longest lease a caller may ask for (acquire or refresh).",
							"After Redis forgets, newcomers wait as long as the longest lease asked for (I15): "
							"this bounds that wait. Set by superusers, per role or database.",
							&redsem_max_lease_ms, 3600 * 1000, REDSEM_MIN_LEASE_MS, (int) REDSEM_MAX_LEASE_MS,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("redsem.connect_timeout",
							"Maximum time to wait while connecting to Redis.",
							NULL,
							&redsem_connect_timeout_ms, 2000, 1, 600000,
							PGC_USERSET, GUC_UNIT_MS,
							check_connect_timeout, assign_connect_timeout, NULL);
	DefineCustomIntVariable("redsem.command_timeout",
							"Maximum time to wait for Redis to answer a command.",
							NULL,
							&redsem_command_timeout_ms, 5000, 1, 600000,
							PGC_USERSET, GUC_UNIT_MS,
							check_command_timeout, assign_command_timeout, NULL);
	DefineCustomIntVariable("redsem.max_priority",
							"The highest priority this session may ask for in redsem_acquire, redsem_acquire_xact and redsem_guard.",
							"Set it per role (ALTER ROLE ... SET) so that a role cannot push its callers ahead of everybody else's.",
							&redsem_max_priority, REDSEM_MAX_PRIORITY,
							-REDSEM_MAX_PRIORITY, REDSEM_MAX_PRIORITY,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("redsem.grant_replicas",
							"Number of Redis replicas that must have a grant before acquire returns; 0 means none.",
							"Each grant then costs one more round trip (WAIT); too few acknowledgements fail the acquire.",
							&redsem_grant_replicas, 0, 0, 100,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("redsem.grant_replica_timeout",
							"Maximum time to wait for the replicas of redsem.grant_replicas.",
							NULL,
							&redsem_grant_replica_timeout_ms, 1000, 1, 600000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomStringVariable("redsem.inject_fault",
							   "Test only: raise an error at the named point of redsem.",
							   NULL,
							   &redsem_inject_fault, "",
							   PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);
}

/* Define the settings of this file */
void
guc_define(void)
{
	define_connection_gucs();
	define_timeout_gucs();
}

/* The prefix that stands for the setting meanwhile (redsem_prefix_stand_in) */
static const char *prefix_stand_in = NULL;

/*
 * Until called again with NULL, make prefix stand for redsem.key_prefix
 * wherever no prefix is given (a statement queue's calls: queue.c)
 */
void
redsem_prefix_stand_in(const char *prefix)
{
	prefix_stand_in = prefix;
}

/* redsem.key_prefix, whatever stands for it ("" if unset) */
const char *
redsem_prefix_setting(void)
{
	return redsem_key_prefix ? redsem_key_prefix : "";
}

/* prefix, or if NULL what stands for redsem.key_prefix, or the setting */
const char *
redsem_prefix_or_setting(const char *prefix)
{
	if (prefix != NULL)
		return prefix;
	return prefix_stand_in ? prefix_stand_in : redsem_prefix_setting();
}
