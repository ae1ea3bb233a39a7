/*
 * script.c
 *		The semaphore operations: key names, and one EVALSHA per operation.
 *
 * All semaphore logic lives in src/redsem.lua, compiled into this file as a
 * string (see the Makefile).  Each operation sends EVALSHA; on NOSCRIPT
 * (first use, or Redis restarted) it sends EVAL with the text, which also
 * caches the script, so later calls are one EVALSHA again.
 */
#include "postgres.h"

#include "hiredis.h"

#include <unistd.h>

#include "commands/dbcommands.h"
#include "common/cryptohash.h"
#include "common/sha1.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "redsem.h"

static const char lua_text[] =
#include "redsem_lua.h"
			;

static char lua_sha[SHA1_DIGEST_LENGTH * 2 + 1];

#define SCRIPT_NKEYS 5
static const char *const key_suffixes[SCRIPT_NKEYS] =
{"owner", "timeout", "ticket", "info", "waiting"};

/* The SHA1 of the script, in hex, computed once */
static const char *
script_sha(void)
{
	if (lua_sha[0] == '\0')
	{
		uint8		digest[SHA1_DIGEST_LENGTH];
		pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA1);

		if (ctx == NULL ||
			pg_cryptohash_init(ctx) < 0 ||
			pg_cryptohash_update(ctx, (const uint8 *) lua_text, strlen(lua_text)) < 0 ||
			pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
			elog(ERROR, "could not compute SHA1 of the redsem script");
		pg_cryptohash_free(ctx);
		hex_encode((const char *) digest, SHA1_DIGEST_LENGTH, lua_sha);
		lua_sha[SHA1_DIGEST_LENGTH * 2] = '\0';
	}
	return lua_sha;
}

/*
 * Append name to buf so that no two names give the same text and the result
 * has no braces: '%', '{', '}' and control bytes become %XX.  The name then
 * sits safely inside a Redis Cluster hash tag.
 */
static void
append_encoded_name(StringInfo buf, const char *name)
{
	for (const unsigned char *p = (const unsigned char *) name; *p; p++)
	{
		if (*p == '%' || *p == '{' || *p == '}' || *p < 0x20 || *p == 0x7f)
			appendStringInfo(buf, "%%%02X", *p);
		else
			appendStringInfoChar(buf, (char) *p);
	}
}

/*
 * The Redis key "<prefix>{<encoded name>}:<suffix>".  prefix NULL means
 * redsem.key_prefix; holds pass the prefix they were taken under, so they
 * are released and refreshed there even if the setting changed since.
 */
static char *
sem_key(const char *prefix, const char *name, const char *suffix)
{
	StringInfoData buf;

	if (prefix == NULL)
		prefix = redsem_key_prefix ? redsem_key_prefix : "";
	initStringInfo(&buf);
	appendStringInfoString(&buf, prefix);
	appendStringInfoChar(&buf, '{');
	append_encoded_name(&buf, name);
	appendStringInfo(&buf, "}:%s", suffix);
	return buf.data;
}

/*
 * Build "EVALSHA sha 5 keys... op args..." into argv; slot 0 and 1 are
 * replaced by EVAL and the text for the NOSCRIPT retry.
 */
static int
build_script_argv(const char **argv, const char *prefix, const char *name,
				  const char *op, int nargs, const char **args)
{
	int			argc = 0;

	argv[argc++] = "EVALSHA";
	argv[argc++] = script_sha();
	argv[argc++] = "5";
	for (int i = 0; i < SCRIPT_NKEYS; i++)
		argv[argc++] = sem_key(prefix, name, key_suffixes[i]);
	argv[argc++] = op;
	for (int i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	return argc;
}

/* True if the reply says the script is not cached */
static bool
is_noscript(redisReply *reply)
{
	return reply != NULL && reply->type == REDIS_REPLY_ERROR &&
		strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

/* Raise ERROR for an error reply from Redis (frees it first) */
static void
report_redis_error(redisReply *reply)
{
	char	   *msg = pstrdup(reply->str ? reply->str : "");

	freeReplyObject(reply);
	ereport(ERROR,
			(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg("Redis at %s rejected a redsem operation", redis_target_description()),
			 errdetail_internal("%s", msg),
			 errhint("Make sure no other program writes to keys under redsem.key_prefix.")));
}

/* Run one script operation; the caller frees the (non-error) reply */
static redisReply *
run_script(const char *prefix, const char *name, const char *op, int nargs,
		   const char **args)
{
	const char *argv[3 + SCRIPT_NKEYS + 1 + 8];
	int			argc;
	redisReply *reply;

	uint64		failures_before = redis_failures;

	Assert(nargs <= 8);
	argc = build_script_argv(argv, prefix, name, op, nargs, args);
	PG_TRY();
	{
		reply = redis_command(argc, argv, NULL, 0);
		if (is_noscript(reply))
		{
			freeReplyObject(reply);
			argv[0] = "EVAL";
			argv[1] = lua_text;
			reply = redis_command(argc, argv, NULL, 0);
		}
	}
	PG_CATCH();
	{
		if (redis_failures != failures_before)
			stats_count(name, STAT_REDIS_ERRORS, 1);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (reply->type == REDIS_REPLY_ERROR)
		report_redis_error(reply);
	return reply;
}

/* Like run_script, for callbacks: never raises, ends by deadline */
static RedisStatus
run_script_quiet(const char *prefix, const char *name, const char *op,
				 int nargs, const char **args, TimestampTz deadline,
				 redisReply **reply)
{
	const char *argv[3 + SCRIPT_NKEYS + 1 + 8];
	int			argc;
	RedisStatus status;

	argc = build_script_argv(argv, prefix, name, op, nargs, args);
	status = redis_command_quiet(argc, argv, NULL, deadline, reply);
	if (status == REDIS_STATUS_OK && is_noscript(*reply))
	{
		freeReplyObject(*reply);
		argv[0] = "EVAL";
		argv[1] = lua_text;
		status = redis_command_quiet(argc, argv, NULL, deadline, reply);
	}
	return status;
}

/* Element i of an array reply as int64 (strings or integers), or 0 */
static int64
reply_int(redisReply *reply, size_t i)
{
	redisReply *e;

	if (reply->type != REDIS_REPLY_ARRAY || i >= reply->elements)
		return 0;
	e = reply->element[i];
	if (e->type == REDIS_REPLY_INTEGER)
		return e->integer;
	if (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS)
		return strtoll(e->str, NULL, 10);
	return 0;
}

/* Decode a {state, ticket, ms, position} reply into result, then free it */
static void
decode_state(redisReply *reply, SemResult *result)
{
	const char *state;

	memset(result, 0, sizeof(*result));
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
		reply->element[0]->type != REDIS_REPLY_STRING)
	{
		freeReplyObject(reply);
		elog(ERROR, "unexpected reply from the redsem script");
	}
	state = reply->element[0]->str;
	if (strcmp(state, "held") == 0)
	{
		result->state = SEM_HELD;
		result->ticket = reply_int(reply, 1);
		result->ms = reply_int(reply, 2);
	}
	else if (strcmp(state, "waiting") == 0)
	{
		result->state = SEM_WAITING;
		result->ticket = reply_int(reply, 1);
		result->position = reply_int(reply, 2);
		result->ms = reply_int(reply, 3);
	}
	else if (strcmp(state, "busy") == 0)
	{
		result->state = SEM_BUSY;
		result->ticket = reply_int(reply, 1);
	}
	else if (strcmp(state, "gone") == 0)
		result->state = SEM_GONE;
	else
		result->state = SEM_LOST;
	freeReplyObject(reply);
}

/* Copy s into buf with '|' replaced, so the origin splits unambiguously */
static void
append_field(StringInfo buf, const char *s)
{
	for (; s && *s; s++)
		appendStringInfoChar(buf, *s == '|' ? '/' : *s);
	appendStringInfoChar(buf, '|');
}

/*
 * This server's name in holder origins: cluster_name if set, else host name
 * and port.  Both are fixed at server start, so it is computed once.
 */
static const char *
server_name(void)
{
	static char name[300] = "";

	if (name[0] == '\0')
	{
		char		host[256];

		if (cluster_name && cluster_name[0] != '\0')
			strlcpy(name, cluster_name, sizeof(name));
		else
		{
			if (gethostname(host, sizeof(host)) != 0)
				strlcpy(host, "?", sizeof(host));
			host[sizeof(host) - 1] = '\0';
			snprintf(name, sizeof(name), "%s:%d", host, PostPortNumber);
		}
	}
	return name;
}

/*
 * Where this backend comes from, stored with each hold for observability:
 * "server|pid|database|user|application_name".
 */
static char *
origin_text(void)
{
	StringInfoData buf;
	char	   *db = OidIsValid(MyDatabaseId) ? get_database_name(MyDatabaseId) : NULL;
	char	   *user = OidIsValid(GetUserId()) ? GetUserNameFromId(GetUserId(), true) : NULL;

	initStringInfo(&buf);
	append_field(&buf, server_name());
	append_field(&buf, psprintf("%d", MyProcPid));
	append_field(&buf, db);
	append_field(&buf, user);
	appendStringInfoString(&buf, application_name ? application_name : "");
	return buf.data;
}

/* Try to take a slot, or a place in line when wait is true */
void
sem_acquire(const char *name, const char *id, int max_holders, int64 lease_ms,
			bool wait, int64 keepalive_ms, SemResult *result)
{
	const char *args[6];

	args[0] = id;
	args[1] = psprintf("%d", max_holders);
	args[2] = psprintf(INT64_FORMAT, lease_ms);
	args[3] = wait ? "1" : "0";
	args[4] = psprintf(INT64_FORMAT, keepalive_ms);
	args[5] = origin_text();
	decode_state(run_script(NULL, name, "acquire", 6, args), result);
}

/* Keep a place in line alive; tells whether it turned into a slot */
void
sem_wait_check(const char *name, const char *id, int64 keepalive_ms,
			   SemResult *result)
{
	const char *args[2];

	args[0] = id;
	args[1] = psprintf(INT64_FORMAT, keepalive_ms);
	decode_state(run_script(NULL, name, "wait_check", 2, args), result);
}

/* Leave the line, unless the slot arrived just in time */
void
sem_give_up(const char *name, const char *id, SemResult *result)
{
	const char *args[1] = {id};

	decode_state(run_script(NULL, name, "give_up", 1, args), result);
}

/* Release a slot or a place in line; true if it was a live slot */
bool
sem_release(const char *prefix, const char *name, const char *id)
{
	const char *args[1] = {id};
	redisReply *reply = run_script(prefix, name, "release", 1, args);
	bool		held = (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1);

	freeReplyObject(reply);
	return held;
}

/*
 * Release for callbacks: never raises.  Returns false if Redis could not be
 * asked by deadline; else *was_held says whether it was a live slot.
 */
bool
sem_release_quiet(const char *prefix, const char *name, const char *id,
				  TimestampTz deadline, bool *was_held)
{
	const char *args[1] = {id};
	redisReply *reply = NULL;
	RedisStatus status;
	bool		ok;

	status = run_script_quiet(prefix, name, "release", 1, args, deadline, &reply);
	if (status != REDIS_STATUS_OK)
		return false;
	ok = (reply->type == REDIS_REPLY_INTEGER);
	*was_held = ok && reply->integer == 1;
	freeReplyObject(reply);
	return ok;
}

/* Extend a lease (0: by its original length); new lease ms, or 0 if lost */
int64
sem_refresh(const char *prefix, const char *name, const char *id,
			int64 lease_ms)
{
	const char *args[2];
	redisReply *reply;
	int64		result = 0;

	args[0] = id;
	args[1] = psprintf(INT64_FORMAT, lease_ms);
	reply = run_script(prefix, name, "refresh", 2, args);
	if (reply->type == REDIS_REPLY_INTEGER)
		result = reply->integer;
	else if (reply->type == REDIS_REPLY_STRING)
		result = strtoll(reply->str, NULL, 10);
	freeReplyObject(reply);
	return result;
}

/*
 * Block on the caller's wake list for up to timeout_ms.  Returns the ticket
 * pushed by a promotion (the caller now holds a slot), or 0 on timeout.
 */
int64
sem_wait_for_wake(const char *name, const char *id, int64 timeout_ms)
{
	char	   *suffix = psprintf("wake:%s", id);
	char		secs[32];
	const char *argv[3];
	redisReply *reply;
	int64		ticket = 0;

	snprintf(secs, sizeof(secs), "%.3f", Max(timeout_ms, 1) / 1000.0);
	argv[0] = "BLPOP";
	argv[1] = sem_key(NULL, name, suffix);
	argv[2] = secs;
	reply = redis_command(3, argv, NULL, (int) timeout_ms);
	if (reply->type == REDIS_REPLY_ERROR)
		report_redis_error(reply);
	if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2)
		ticket = Max(reply_int(reply, 1), 1);
	freeReplyObject(reply);
	return ticket;
}

/* The holder's ticket (fencing token), or 0 if id does not hold a slot */
int64
sem_token(const char *name, const char *id)
{
	const char *args[1] = {id};
	redisReply *reply = run_script(NULL, name, "token", 1, args);
	int64		ticket = 0;

	if (reply->type == REDIS_REPLY_STRING)
		ticket = strtoll(reply->str, NULL, 10);
	else if (reply->type == REDIS_REPLY_INTEGER)
		ticket = reply->integer;
	freeReplyObject(reply);
	return ticket;
}

/*
 * Every member of the semaphore in line order, as the script's "list"
 * operation returns it.  The caller frees the reply.
 */
struct redisReply *
sem_list(const char *name)
{
	return run_script(NULL, name, "list", 0, NULL);
}
