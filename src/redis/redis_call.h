/*
 * redis_call.h
 *		The vocabulary of a Redis call, shared by every layer of the Redis
 *		client: what became of a command (RedisStatus, RedisOutcome), how to
 *		run one (RedisCall), one command of a pipeline (RedisCommand).
 *		Nothing here does anything; the layers are sockwait.c (the socket
 *		wait), conn.c (connections, routing, reports) and its helpers
 *		tls.c, resolve.c, secret.c, sentinel.c.
 */
#ifndef REDSEM_REDIS_CALL_H
#define REDSEM_REDIS_CALL_H

#include "datatype/timestamp.h"

struct redisReply;

/*
 * What became of a command.  Every Redis error reply falls in one class;
 * see the table in README.md ("Redis errors").
 */
typedef enum RedisStatus
{
	RS_OK,						/* a reply that is not an error */
	RS_CONNECT_FAILED,			/* 08001: no connection */
	RS_AUTH_FAILED,				/* 28000: NOAUTH, NOPERM */
	RS_BAD_PASSWORD,			/* 28P01: WRONGPASS, invalid password */
	RS_PASSWORD_FILE,			/* 28000: the password file cannot be used
								 * (never sent to Redis) */
	RS_TOO_MANY_CLIENTS,		/* 08004: Redis refused the connection */
	RS_LOST,					/* 08006: connection broke */
	RS_TIMED_OUT,				/* 08006: no answer in time */
	RS_UNAVAILABLE,				/* 08006: READONLY, LOADING, MASTERDOWN,
								 * BUSY */
	RS_OUT_OF_MEMORY,			/* 53200: OOM (maxmemory) */
	RS_CONFLICT,				/* 38000: script or key conflict */
	RS_REFUSED,					/* 58000: any other error reply */
	RS_MALFORMED,				/* 08P01: a reply of an unexpected shape */
	RS_NOT_REPLICATED,			/* 08006: WAIT found too few replicas */
	RS_NOSCRIPT					/* library missing (loaded, retried, never
								 * reported) */
} RedisStatus;

/* Why a command failed, kept for the caller to report; never a secret */
typedef struct RedisOutcome
{
	RedisStatus status;
	int			timeout_ms;		/* RS_TIMED_OUT: the wait that ran out */
	char		detail[256];	/* Redis's words, or the system's */
	int			node_plus1;		/* the Redis Cluster node that failed, plus
								 * one; 0: the current target */
	bool		no_server;		/* RS_CONNECT_FAILED: nothing served at the
								 * address (refused, no socket, reset,
								 * unreachable, no answer), as while a
								 * server restarts; not a refusal of our
								 * settings.  RS_LOST: the connection was
								 * new and closed before anything was
								 * answered on it (a proxy whose Redis is
								 * down) */
	int			broker_stopped;	/* RS_TIMED_OUT: the pid of the redsem broker
								 * that owed the answer, found stopped; 0:
								 * none */
} RedisOutcome;

/*
 * How to run one command: until when, whether cancel and timeouts are
 * served (SQL paths) or held off (callbacks, the keeper), and the level at
 * which a failure is reported: ERROR raises; anything lower is only
 * returned in outcome, for the caller to log as it sees fit.
 */
typedef struct RedisCall
{
	TimestampTz deadline;		/* DT_NOEND: redsem.command_timeout */
	int			extra_wait_ms;	/* added to the timeout (blocking commands) */
	bool		interruptible;
	int			elevel;
	bool		uncounted;		/* a failure is not counted in redsem_stats
								 * (the caller's was counted already) */
	RedisOutcome outcome;
	int			node_budget_ms; /* a Cluster pipeline: the longest any one
								 * node may take; 0: the whole deadline */
	bool		owe_late_reply; /* one command that times out leaves its
								 * reply owed on the link (read and dropped
								 * before its next use) instead of dropping
								 * the link */
	int			round_trips;	/* out: the round trips the last pipeline
								 * took (in a Cluster, one per node and pass,
								 * and one per command sent on its own) */
	int			fresh_argi;		/* > 0: a try over a link opened, or after a
								 * redirection followed, since fresh_since
								 * (redis_route_changes) sends fresh_arg as
								 * argv[fresh_argi] (an acquire asks for its
								 * era check then) */
	const char *fresh_arg;
	uint64		fresh_since;
	bool		fresh_sent;		/* out: the try that answered sent fresh_arg */
	TimestampTz end_by;			/* 0: none; else the call ends by then at the
								 * latest, whatever its timeout (a call of an
								 * acquire's wait) */
} RedisCall;

/* One command of a pipeline */
typedef struct RedisCommand
{
	int			argc;
	const char **argv;
} RedisCommand;

/*
 * Where the reply of a command sent without waiting (redis_send_deferred)
 * goes, once read: a reply that is not an error (freed after the handler
 * returns), or NULL with why in outcome.  Called exactly once, perhaps
 * from an error path or at exit: it must not raise nor allocate.
 */
typedef void (*RedisReplyHandler) (void *arg, struct redisReply *reply,
								   const RedisOutcome *outcome);

/* A call from SQL: interruptible, within redsem.command_timeout, raising */
#define REDIS_SQL_CALL	{DT_NOEND, 0, true, ERROR, false, {RS_OK, 0, "", 0, false, 0}, 0, false, 0, 0, NULL, 0, false, 0}

#endif							/* REDSEM_REDIS_CALL_H */
