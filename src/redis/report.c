/*
 * report.c
 *		Every text about a failed Redis call, from one table: the short
 *		text of a status (log lines, redsem_held()), the one-sentence
 *		outcome, and the report at a level (ERROR raises) with the SQLSTATE,
 *		message and hint of its class; see the table "Redis errors" in
 *		README.md.  Like postgres_fdw's pgfdw_report_error, one function
 *		raises or logs by level for every caller.
 */
#include "postgres.h"

#include <errno.h>

#include "guc.h"
#include "report.h"

/* What to say about a status */
typedef struct StatusInfo
{
	int			sqlerrcode;
	const char *text;			/* short, for log lines */
	const char *message;		/* the report's message; %s: the target */
	const char *hint;			/* NULL: see status_hint */
} StatusInfo;

static const StatusInfo status_info[] = {
	[RS_OK] = {0, "ok", NULL, NULL},
	[RS_CONNECT_FAILED] = {ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
		"could not connect to Redis", "could not connect to Redis at %s",
	"Check that Redis is running and reachable, and the settings redsem.host, redsem.port, redsem.unix_socket and redsem.database."},
	[RS_AUTH_FAILED] = {ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION,
		"Redis refused access", "Redis at %s refused redsem access",
	"Check redsem.user, the password given by redsem.password_file (or redsem.password), and the Redis ACL of that user: it needs FCALL, FUNCTION LOAD, BLPOP and the commands redsem's library runs, on keys under redsem.key_prefix (see docs/deployment.md, Redis ACL)."},
	[RS_BAD_PASSWORD] = {ERRCODE_INVALID_PASSWORD,
		"Redis did not accept the password", "Redis at %s did not accept redsem's password",
	"Check redsem.user and the password given by redsem.password_file (or redsem.password)."},
	[RS_PASSWORD_FILE] = {ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION,
		"the password file cannot be used", "redsem cannot read its password for Redis at %s",
	"The file must be a regular file owned by the database server's user (mode 0600 or less) or by root (0640 or less), holding the password on its first line. Nothing was sent to Redis."},
	[RS_TOO_MANY_CLIENTS] = {ERRCODE_SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION,
		"Redis has too many clients", "Redis at %s refused the connection: too many clients",
	"Raise maxclients in Redis: every PostgreSQL session that uses redsem keeps one connection."},
	[RS_LOST] = {ERRCODE_CONNECTION_FAILURE,
		"lost connection to Redis", "lost connection to Redis at %s",
	"Check that Redis is running; the next call reconnects."},
	[RS_TIMED_OUT] = {ERRCODE_CONNECTION_FAILURE,
		"Redis did not answer in time", "Redis at %s did not answer within %d ms",
	"Check the load on the Redis server, or raise redsem.command_timeout."},
	[RS_UNAVAILABLE] = {ERRCODE_CONNECTION_FAILURE,
		"Redis cannot serve redsem now", "Redis at %s cannot serve redsem now",
	NULL},
	[RS_OUT_OF_MEMORY] = {ERRCODE_OUT_OF_MEMORY,
		"Redis is out of memory", "Redis at %s is out of memory",
	"Redis refuses writes above its maxmemory setting: raise maxmemory or free memory, and keep maxmemory-policy at noeviction (see docs/deployment.md, Redis memory)."},
	[RS_CONFLICT] = {ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
		"Redis rejected a redsem operation", "Redis at %s rejected a redsem operation",
	"Make sure no other program writes to keys under redsem.key_prefix."},
	[RS_REFUSED] = {ERRCODE_SYSTEM_ERROR,
		"Redis refused a redsem command", "Redis at %s refused a redsem command",
	"Check that FCALL, FUNCTION LOAD and BLPOP are neither renamed nor disabled in Redis, and that the Redis user may run them."},
	[RS_MALFORMED] = {ERRCODE_PROTOCOL_VIOLATION,
		"unexpected reply from Redis", "unexpected reply from Redis at %s",
	"Make sure redsem's settings point at a Redis server and that no other program writes to keys under redsem.key_prefix."},
	[RS_NOT_REPLICATED] = {ERRCODE_CONNECTION_FAILURE,
		"Redis replicas did not confirm a grant", "Redis at %s did not confirm a grant on its replicas",
	"Check that the replicas of Redis are up and in sync, or lower redsem.grant_replicas."},
	[RS_NOSCRIPT] = {0, "script not loaded", NULL, NULL},
};

StaticAssertDecl(lengthof(status_info) == RS_NOSCRIPT + 1,
				 "one entry of status_info per RedisStatus");

/* The table's entry for a status (RS_REFUSED's for one out of range) */
static const StatusInfo *
info_of(RedisStatus status)
{
	if ((int) status < 0 || (int) status >= (int) lengthof(status_info))
		return &status_info[RS_REFUSED];
	return &status_info[status];
}

/*
 * Record why a call failed in o: its status and, formatted, its detail.
 * Never raises (the caller's boundary reports: redis_report).  Returns
 * false, so callers can "return redis_note(...)".
 */
bool
redis_note(RedisOutcome *o, RedisStatus status, const char *fmt,...)
{
	va_list		args;

	o->status = status;
	o->no_server = false;
	o->broker_stopped = 0;
	va_start(args, fmt);
	vsnprintf(o->detail, sizeof(o->detail), fmt, args);
	va_end(args);
	return false;
}

/*
 * True if err, or the system's words for an error (hiredis keeps only
 * those), say that nothing served at the address
 */
bool
redis_no_server_error(int err, const char *words)
{
	/* (EAGAIN: a Unix socket whose backlog is full, as a frozen server's fills) */
	static const int gone[] = {ECONNREFUSED, ENOENT, ECONNRESET, EPIPE, ETIMEDOUT,
	EHOSTUNREACH, ENETUNREACH, EAGAIN};

	for (int i = 0; i < (int) lengthof(gone); i++)
		if (err == gone[i] || (words != NULL && strcmp(words, strerror(gone[i])) == 0))
			return true;
	return false;
}

/* The SQLSTATE of a status (08006 for one that has none) */
int
redis_status_sqlstate(RedisStatus status)
{
	int			code = info_of(status)->sqlerrcode;

	return code != 0 ? code : ERRCODE_CONNECTION_FAILURE;
}

/* A short name of a status, for log lines and redsem_held() */
const char *
redis_status_text(RedisStatus status)
{
	return info_of(status)->text;
}

/* The hint of an outcome: an unavailable server's depends on Redis's words */
static const char *
status_hint(const RedisOutcome *o)
{
	/* (through the broker, the silence may be the broker's own) */
	if (o->status == RS_TIMED_OUT && o->broker_stopped > 0)
		return "Resume the broker (kill -CONT, as the server's operating-system user) or detach the debugger that holds it; until then no call of this server's sessions is answered.";
	if (o->status == RS_TIMED_OUT && redsem_broker_wanted())
		return "Check the load on the Redis server and on this server's \"redsem broker\" process (calls go through it: redsem.connection_mode is broker), or raise redsem.command_timeout.";
	if (o->status == RS_TOO_MANY_CLIENTS && redsem_broker_wanted())
		return "Raise maxclients in Redis: this server's sessions share the connections of its \"redsem broker\" process (redsem.connection_mode is broker), but each server, keeper and broker connection counts.";
	if (o->status == RS_LOST && redsem_broker_wanted())
		return "Calls go through this server's \"redsem broker\" process (redsem.connection_mode is broker): it closes a session's link when its connection to Redis breaks, when Redis does not answer within redsem.command_timeout plus 1 s, and when it restarts. Check that Redis is running and answering; the next call links again.";
	if (info_of(o->status)->hint != NULL)
		return info_of(o->status)->hint;
	if (strncmp(o->detail, "BUSY", 4) == 0)
		return "Redis is busy running a long script or function; redsem calls fail until it ends.";
	if (strncmp(o->detail, "NOREPLICAS", 10) == 0)
		return "Redis refuses writes while fewer replicas than its min-replicas-to-write are connected and in sync: bring the replicas back, or lower min-replicas-to-write.";
	return "The server is a read-only replica, is loading its data, or has lost its primary. redsem reconnects at the next call, so a failover behind the same address is followed.";
}

/*
 * The message of a call that timed out on target: within how long, or, when
 * the call's time had run out before this command (earlier commands of the
 * call used it up, as in the keeper's budgets), that the server was given
 * none, so that a node is not blamed for a silence it was never given time
 * to break
 */
static char *
timed_out_message(const RedisOutcome *o, const char *target)
{
	if (o->timeout_ms <= 0)
		return psprintf("Redis at %s was given no time to answer: the call's time had run out before this command", target);
	if (o->broker_stopped > 0)
		return psprintf("the redsem broker (process %d) passed on no answer of Redis at %s within %d ms: the broker is stopped (SIGSTOP, or a debugger holds it)",
						o->broker_stopped, target, o->timeout_ms);
	return psprintf(status_info[RS_TIMED_OUT].message, target, o->timeout_ms);
}

/* One sentence saying why a call to target failed */
char *
redis_outcome_sentence(const RedisOutcome *o, const char *target)
{
	switch (o->status)
	{
		case RS_CONNECT_FAILED:
			return psprintf("could not connect to Redis at %s: %s", target, o->detail);
		case RS_LOST:
			return psprintf("lost connection to Redis at %s: %s", target, o->detail);
		case RS_TIMED_OUT:
			return timed_out_message(o, target);
		default:
			return psprintf("%s at %s: %s", redis_status_text(o->status), target, o->detail);
	}
}

/*
 * Report a failed call to target at elevel (ERROR raises), with the
 * SQLSTATE, message and hint of its class.  RS_OK and RS_NOSCRIPT (loaded
 * and retried by the caller) are never reported.
 */
void
redis_report_at(int elevel, const RedisOutcome *o, const char *target)
{
	const StatusInfo *info = info_of(o->status);
	char	   *message;

	if (o->status == RS_OK || o->status == RS_NOSCRIPT)
		return;
	message = o->status == RS_TIMED_OUT ?
		timed_out_message(o, target) : psprintf(info->message, target);
	ereport(elevel,
			(errcode(info->sqlerrcode),
			 errmsg_internal("%s", message),
			 o->status != RS_TIMED_OUT ? errdetail_internal("%s", o->detail) : 0,
			 errhint("%s", status_hint(o))));
	pfree(message);
}
