/*
 * script.c
 *		The semaphore operations: key names, one FCALL per operation, and
 *		a check of every reply's shape before it is used.
 *
 * All semaphore logic lives in src/redsem.lua, compiled into this file as a
 * string (see the Makefile) and loaded into Redis as a function library
 * named after the hash of its text, so servers running different versions
 * never load over each other.  Each operation sends FCALL; when Redis does
 * not have the library (first use, Redis restarted or flushed, a cluster
 * node that never ran it) it answers "Function not found": the library is
 * loaded on that node (FUNCTION LOAD) and the FCALL sent again.  A library
 * beats an EVALSHA script on cost: its Lua functions are made once, at
 * load, not at every call.  A reply of an unexpected shape is a failure of
 * class RS_MALFORMED, never a crash.
 */
#include "postgres.h"

#include "hiredis.h"

#include <unistd.h>

#include "commands/dbcommands.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "cluster.h"
#include "fcall.h"
#include "gen.h"
#include "guc.h"
#include "link.h"
#include "report.h"
#include "script.h"
#include "shmem.h"
#include "textenc.h"
#include "timing.h"

static const char lua_text[] =
#include "redsem_lua.h"
			;

#include "redsem_lua_sha1.h"
StaticAssertDecl(sizeof(REDSEM_LUA_SHA1) == 41, "the script's SHA1 is 40 hex digits");

/* How many hex digits of the script's SHA1 its library's name carries */
#define LIB_HASH_CHARS 16
static char lib_name[sizeof("redsem_") + LIB_HASH_CHARS];
static char *lib_text;

/*
 * The semaphore's key every operation names; the script makes its other
 * keys from it (same hash tag: same Cluster slot), except in a Cluster,
 * where a call names all of them (fcall_head)
 */
#define OWNER_SUFFIX "owner"
static const char *const key_suffixes[] =
{OWNER_SUFFIX, "timeout", "ticket", "info", "waiting", "state"};

/*
 * The library's (and its function's) name: "redsem_" and the first
 * LIB_HASH_CHARS hex digits of the script's SHA1, computed at build time
 */
const char *
library_name(void)
{
	if (lib_name[0] == '\0')
		snprintf(lib_name, sizeof(lib_name), "redsem_%.*s", LIB_HASH_CHARS, REDSEM_LUA_SHA1);
	return lib_name;
}

/* The library's function for what only keeps or gives back (function_for) */
static const char *
keep_function_name(void)
{
	static char name[sizeof(lib_name) + sizeof("_keep")];

	if (name[0] == '\0')
		snprintf(name, sizeof(name), "%s_keep", library_name());
	return name;
}

/*
 * The library as FUNCTION LOAD takes it: the script, named, registering
 * dispatch, and "<library>_keep", dispatch for what only keeps, with
 * allow-oom (see function_for).  The name hashes src/redsem.lua alone, so
 * a change of what is registered here comes with one of the script's
 * header, which says what is registered (else a Redis holding the old
 * library under the same name would lack the new function); the test
 * harness (t/RedsemTest.pm, test/other_server.sh) registers the same.
 */
static const char *
library_text(void)
{
	if (lib_text == NULL)
		lib_text = MemoryContextStrdup(TopMemoryContext,
									   psprintf("#!lua name=%s\n%s\nredis.register_function('%s', dispatch)\n"
												"redis.register_function{function_name='%s', flags={'allow-oom'}, callback=function(keys, args) return dispatch(keys, args, true) end}\n",
												library_name(), lua_text, library_name(), keep_function_name()));
	return lib_text;
}

/*
 * The function an operation calls: "<library>_keep" (allow-oom) for those
 * that only keep what is held or waited for, or give it back (a waiter's
 * look takes what a release let it have), or only read, so that a Redis
 * over maxmemory (noeviction: another program filled it) costs no holder
 * its slot, a release frees memory, and who holds can still be seen; the
 * library's dispatch, which Redis refuses as a whole above maxmemory, for
 * the rest.  The same list as the operations marked keep in src/redsem.lua.
 */
static const char *
function_for(const char *op)
{
	static const char *const keep[] = {"refresh", "refresh_many", "release", "give_up",
		"wait_check", "token", "list", "limit", "summary", "rate", "reserve", "tenants",
	"adapt", "index_list", "queues_get", "queue_servers"};

	for (int i = 0; i < (int) lengthof(keep); i++)
		if (strcmp(op, keep[i]) == 0)
			return keep_function_name();
	return library_name();
}

/*
 * Load the library where the last command went (FUNCTION LOAD has no key:
 * it follows the command that found the library missing).  Another server
 * loading it at the same time is no failure.
 */
static bool
load_library(RedisCall *call)
{
	const char *argv[3] = {"FUNCTION", "LOAD", library_text()};
	redisReply *reply;

	if (redis_exec(call, 3, argv, NULL, &reply))
	{
		freeReplyObject(reply);
		return true;
	}
	if (call->outcome.status == RS_REFUSED &&
		strstr(call->outcome.detail, "already exists") != NULL)
	{
		call->outcome.status = RS_OK;
		call->outcome.detail[0] = '\0';
		return true;
	}
	return false;
}

/*
 * Send a command; if it found the library missing, load it there and send
 * the command once more.  Returns the failure, for the caller to report.
 */
bool
fcall_send(RedisCall *call, int argc, const char **argv, redisReply **reply)
{
	bool		ok = redis_exec(call, argc, argv, NULL, reply);

	if (ok || call->outcome.status != RS_NOSCRIPT)
		return ok;
	ok = load_library(call) && redis_exec(call, argc, argv, NULL, reply);
	if (!ok && call->outcome.status == RS_NOSCRIPT)
	{
		(void) redis_note(&call->outcome, RS_REFUSED,
						  "the redsem library %s was missing right after it was loaded",
						  library_name());
	}
	return ok;
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

	prefix = redsem_prefix_or_setting(prefix);
	initStringInfo(&buf);
	appendStringInfoString(&buf, prefix);
	appendStringInfoChar(&buf, '{');
	append_encoded_name(&buf, name);
	appendStringInfo(&buf, "}:%s", suffix);
	return buf.data;
}

/* Where semaphore name's generation is (gen_slot), under prefix (NULL: the setting's) */
int
sem_gen_slot(const char *prefix, const char *name)
{
	char	   *key = sem_key(prefix, name, OWNER_SUFFIX);
	int			slot = gen_slot(prefix, key);

	pfree(key);
	return slot;
}

/*
 * How many keys an operation names: the owner key alone, or in a Cluster
 * all six of the semaphore's keys, as the Cluster checks only the keys a
 * call names, and a slot migration that has moved some of them must answer
 * TRYAGAIN, not let the script run on half a semaphore; then the
 * generation key
 */
static int
fcall_nkeys(void)
{
	return (cluster_enabled() ? (int) lengthof(key_suffixes) : 1) + 1;
}

/* The key prefix of the semaphore call fcall_head made last (statistics) */
static char call_prefix[REDSEM_MAX_PREFIX_BYTES + 1];

/*
 * Fill argv with "FCALL <library> <nkeys> <keys...> op" for a semaphore
 * (its owner key, then its generation key: every operation names it, as
 * any that may let a waiter in must stop in a grace, I15); returns how
 * many entries that is (at most 3 + SCRIPT_NKEYS_MAX + 1).
 */
int
fcall_head(const char **argv, const char *prefix, const char *name,
		   const char *op)
{
	static const char *const counts[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
	int			argc = 0;
	int			nkeys = fcall_nkeys();

	StaticAssertStmt(lengthof(counts) > SCRIPT_NKEYS_MAX, "a count for every number of keys");
	strlcpy(call_prefix, redsem_prefix_or_setting(prefix),
			sizeof(call_prefix));
	argv[argc++] = "FCALL";
	argv[argc++] = function_for(op);
	argv[argc++] = counts[nkeys];
	for (int i = 0; i < nkeys - 1; i++)
		argv[argc++] = sem_key(prefix, name, key_suffixes[i]);
	argv[argc++] = gen_key(prefix, gen_slot(prefix, argv[3]));
	argv[argc++] = op;
	return argc;
}


/*
 * The one place a failed operation is counted and reported: in the
 * semaphore's statistics (name NULL, or a caller that counted it already:
 * not counted), then raised if the call reports at ERROR; lower levels only
 * return it, in call->outcome.  Always false.
 */
bool
sem_call_failed(RedisCall *call, const char *name)
{
	if (name != NULL && !call->uncounted)
		stats_count(call_prefix, name, STAT_REDIS_ERRORS, 1);
	if (call->elevel >= ERROR)
		redis_report(call->elevel, &call->outcome);
	return false;
}

/* Send one command (loading the library if need be); report a failure */
static bool
exec_counted(RedisCall *call, const char *name, int argc, const char **argv,
			 redisReply **reply)
{
	return fcall_send(call, argc, argv, reply) || sem_call_failed(call, name);
}

/*
 * Run one script operation.  Returns true with a (non-error) reply that the
 * caller frees; false with the failure in call->outcome.
 */
static bool
run_script(RedisCall *call, const char *prefix, const char *name,
		   const char *op, int nargs, const char **args, redisReply **reply)
{
	const char *argv[3 + SCRIPT_NKEYS_MAX + 1 + SCRIPT_MAX_ARGS];
	int			argc;

	if (nargs > SCRIPT_MAX_ARGS)
		elog(ERROR, "redsem: operation %s given %d arguments, more than %d",
			 op, nargs, SCRIPT_MAX_ARGS);
	argc = fcall_head(argv, prefix, name, op);
	for (int i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	return exec_counted(call, name, argc, argv, reply);
}

/* Fail a call whose reply (now freed) did not have the expected shape */
static bool
malformed(RedisCall *call, const char *name, redisReply *reply,
		  const char *what)
{
	int			type = reply ? reply->type : -1;

	if (reply)
		freeReplyObject(reply);
	(void) redis_note(&call->outcome, RS_MALFORMED,
					  "%s (reply type %d) for semaphore \"%s\"", what, type, name);
	return sem_call_failed(call, name);
}

/* A reply element holding an integer, as an integer or decimal text */
bool
reply_int64(const redisReply *e, int64 *value)
{
	char	   *end;

	if (e == NULL)
		return false;
	if (e->type == REDIS_REPLY_INTEGER)
	{
		*value = e->integer;
		return true;
	}
	if ((e->type != REDIS_REPLY_STRING && e->type != REDIS_REPLY_STATUS) ||
		e->str == NULL || e->len == 0 || e->len > 20)
		return false;
	errno = 0;
	*value = strtoll(e->str, &end, 10);
	return errno == 0 && *end == '\0';
}

/* Element i of an array reply, or NULL */
const redisReply *
reply_element(const redisReply *r, size_t i)
{
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
		return NULL;
	return r->element[i];
}

/* True if element i is a string equal to s */
static bool
element_is(const redisReply *r, size_t i, const char *s)
{
	const redisReply *e = reply_element(r, i);

	return e != NULL && e->type == REDIS_REPLY_STRING && e->str != NULL &&
		strcmp(e->str, s) == 0;
}

/*
 * Decode the optional element i of a busy or waiting reply: present only
 * for a semaphore with a stored rate (I10), the ms until the rate lets the
 * caller in, or -1 if something else keeps it out
 */
static bool
decode_rate_ms(const redisReply *reply, size_t i, SemResult *result)
{
	const redisReply *e = reply_element(reply, i);

	result->rate_ms = -1;
	result->has_rate = e != NULL && !(e->type == REDIS_REPLY_STRING && e->len == 0);
	return !result->has_rate ||
		(reply_int64(e, &result->rate_ms) && result->rate_ms >= -1);
}

/*
 * Decode the optional element i of a busy or waiting reply: present only
 * when a reserve (I11) keeps permits from the caller's priority, the
 * permits left to it
 */
static bool
decode_share(const redisReply *reply, size_t i, SemResult *result)
{
	const redisReply *e = reply_element(reply, i);

	result->share = -1;
	return e == NULL || (e->type == REDIS_REPLY_STRING && e->len == 0) ||
		(reply_int64(e, &result->share) && result->share >= 1);
}

/* An acquire's reply: its generation text at i (I15), if it has one */
static void
copy_gen(const redisReply *reply, size_t i, SemResult *result)
{
	const redisReply *e = reply_element(reply, i);

	if (e != NULL && e->type == REDIS_REPLY_STRING && e->len < GEN_TEXT_LEN)
		memcpy(result->gen, e->str, e->len + 1);
}

/* Decode a {state, ticket, ms, position, limit} reply into result, then free it */
static bool
decode_state(RedisCall *call, const char *name, redisReply *reply,
			 SemResult *result)
{
	bool		ok = true;

	memset(result, 0, sizeof(*result));
	if (element_is(reply, 0, "held"))
	{
		result->state = SEM_HELD;
		ok = reply_int64(reply_element(reply, 1), &result->ticket) &&
			reply_int64(reply_element(reply, 2), &result->ms);
		copy_gen(reply, 3, result);
	}
	else if (element_is(reply, 0, "waiting"))
	{
		result->state = SEM_WAITING;
		ok = reply_int64(reply_element(reply, 1), &result->ticket) &&
			reply_int64(reply_element(reply, 2), &result->position) &&
			reply_int64(reply_element(reply, 3), &result->ms) &&
			reply_int64(reply_element(reply, 4), &result->limit) &&
			decode_rate_ms(reply, 5, result) && decode_share(reply, 6, result);
		copy_gen(reply, 7, result);
	}
	else if (element_is(reply, 0, "busy"))
	{
		result->state = SEM_BUSY;
		ok = reply_int64(reply_element(reply, 1), &result->limit) &&
			decode_rate_ms(reply, 2, result) && decode_share(reply, 3, result);
		copy_gen(reply, 4, result);
	}
	else if (element_is(reply, 0, "limit"))
	{
		result->state = SEM_OTHER_LIMIT;
		result->stored = element_is(reply, 2, "stored");
		ok = reply_int64(reply_element(reply, 1), &result->limit);
	}
	else if (element_is(reply, 0, "nolimit"))
		result->state = SEM_NO_LIMIT;
	else if (element_is(reply, 0, "toolarge"))
	{
		result->state = SEM_TOO_LARGE;
		result->reserve = element_is(reply, 2, "reserve");
		result->adaptive = element_is(reply, 2, "adaptive");
		ok = reply_int64(reply_element(reply, 1), &result->limit);
	}
	else if (element_is(reply, 0, "gone"))
		result->state = SEM_GONE;
	else if (element_is(reply, 0, "lost"))
		result->state = SEM_LOST;
	else if (element_is(reply, 0, "removed"))
		result->state = SEM_REMOVED;
	else
		ok = false;
	if (!ok)
		return malformed(call, name, reply, "the script answered with an unknown state");
	freeReplyObject(reply);
	return true;
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
	/* (in UTF-8, as names are: textenc.c) */
	append_field(&buf, db ? text_to_redis_quiet(db) : NULL);
	append_field(&buf, user ? text_to_redis_quiet(user) : NULL);
	appendStringInfoString(&buf, application_name ? application_name : "");
	return buf.data;
}

/*
 * True if a line formed under another primary is settled by this caller
 * (I9 in redsem.lua): only when grants wait for replicas, so that the old
 * primary cannot grant beside the new one.
 */
static bool
settle_eras(void)
{
	return redsem_grant_replicas > 0;
}

/*
 * Try to take permits of a semaphore, or a place in line when wait is
 * true, by priority and tenant (NULL: none).  max_holders 0: the stored
 * limit.
 */
bool
sem_acquire(RedisCall *call, const char *name, const char *id,
			int max_holders, int permits, int64 lease_ms, bool wait,
			int priority, const char *tenant, SemResult *result)
{
	const char *args[SCRIPT_MAX_ARGS];
	int			nargs;
	char		known[GEN_TEXT_LEN];
	char		flags[4];
	char		fresh[5];
	uint64		changes;
	bool		ok;
	int			slot = sem_gen_slot(NULL, name);
	redisReply *reply;

	gen_known(NULL, slot, lease_ms, !settle_eras(), known, flags);
	args[0] = id;
	args[1] = max_holders > 0 ? psprintf("%d", max_holders) : "";
	args[2] = psprintf("%d", permits);
	args[3] = psprintf(INT64_FORMAT, lease_ms);
	args[4] = wait ? "1" : "0";
	args[5] = psprintf("%d", WAIT_PLACE_TTL_MS);
	args[6] = origin_text();
	args[7] = known;
	args[8] = flags;
	/* the arguments at their defaults are left out (each costs Redis) */
	args[9] = settle_eras() ? "settle" : "";
	args[10] = priority != 0 ? psprintf("%d", priority) : "0";
	args[11] = tenant != NULL ? tenant : "";
	nargs = tenant != NULL ? 12 : priority != 0 ? 11 : settle_eras() ? 10 : 9;
	/* a try over a link opened or redirected during the call checks the era */
	snprintf(fresh, sizeof(fresh), "e%s", strchr(flags, 'e') ? flags + 1 : flags);
	changes = redis_route_changes();
	call->fresh_argi = 3 + fcall_nkeys() + 1 + 8;
	call->fresh_arg = fresh;
	call->fresh_since = changes;
	ok = run_script(call, NULL, name, "acquire", nargs, args, &reply);
	call->fresh_argi = 0;
	call->fresh_arg = NULL;
	if (!ok || !decode_state(call, name, reply, result))
		return false;
	gen_note(NULL, slot, result->gen, strchr(flags, 'u') != NULL &&
			 (result->state == SEM_HELD || result->state == SEM_WAITING));
	/*
	 * (recorded only if the try that answered carried the check: an acquire
	 * sent without it, before a change of route read during the call, a
	 * redirection of a release sent ahead of it, leaves its slot unchecked,
	 * for the next acquire)
	 */
	if (strchr(flags, 'e') != NULL || call->fresh_sent)
		gen_checked(NULL, slot, redis_route_changes());
	return true;
}

/*
 * Wait, at most timeout_ms, until replicas of Redis's replicas have
 * everything this connection wrote so far (WAIT); *acked is how many have.
 */
bool
sem_wait_replicas(RedisCall *call, const char *name, int replicas,
				  int timeout_ms, int *acked)
{
	char		n[16];
	char		t[16];
	const char *argv[] = {"WAIT", n, t};
	redisReply *reply;

	snprintf(n, sizeof(n), "%d", replicas);
	snprintf(t, sizeof(t), "%d", timeout_ms);
	/* (Redis ends a WAIT at its next timer tick too: src/timing.h) */
	call->extra_wait_ms = (int) Min((int64) timeout_ms + REDIS_TICK_SLACK_MS, PG_INT32_MAX / 2);
	if (!exec_counted(call, name, 3, argv, &reply))
		return false;
	if (reply->type != REDIS_REPLY_INTEGER)
		return malformed(call, name, reply, "WAIT");
	*acked = (int) reply->integer;
	freeReplyObject(reply);
	return true;
}

/*
 * Keep a place in line alive, or, once promoted, confirm the slot: its
 * full lease starts then.
 */
bool
sem_wait_check(RedisCall *call, const char *name, const char *id,
			   SemResult *result)
{
	const char *args[3];
	redisReply *reply;

	args[0] = id;
	args[1] = psprintf("%d", WAIT_PLACE_TTL_MS);
	args[2] = "settle";
	return run_script(call, NULL, name, "wait_check", settle_eras() ? 3 : 2,
					  args, &reply) &&
		decode_state(call, name, reply, result);
}

/* Leave the line, unless the slot arrived just in time (then confirm it) */
bool
sem_give_up(RedisCall *call, const char *name, const char *id,
			SemResult *result)
{
	const char *args[1] = {id};
	redisReply *reply;

	return run_script(call, NULL, name, "give_up", 1, args, &reply) &&
		decode_state(call, name, reply, result);
}

/*
 * The release operation; how: NULL, or an administrator's "forced" or
 * "gone".  *answer: 1 a live slot, 2 (an administrator's only) a place in
 * line removed, 0 neither.
 */
static bool
release_call(RedisCall *call, const char *prefix, const char *name,
			 const char *id, const char *how, int64 *answer)
{
	const char *args[2] = {id, how};
	redisReply *reply;

	redsem_fault("release");
	if (!run_script(call, prefix, name, "release", how ? 2 : 1, args, &reply))
		return false;
	if (!reply_int64(reply, answer) || *answer < 0 || *answer > (how ? 2 : 1))
		return malformed(call, name, reply, "release did not answer 0, 1 or 2");
	freeReplyObject(reply);
	return true;
}

/* Release a slot or a place in line; *was_held: it was a live slot */
bool
sem_release(RedisCall *call, const char *prefix, const char *name,
			const char *id, bool *was_held)
{
	int64		answer = 0;
	bool		ok = release_call(call, prefix, name, id, NULL, &answer);

	*was_held = (answer == 1);
	return ok;
}

/*
 * Send a release without waiting for its reply (see redis_send_deferred):
 * handler gets the reply, for sem_release_reply to read.  False, with the
 * failure counted and in call->outcome, if it could not be sent.
 */
bool
sem_release_deferred(RedisCall *call, const char *prefix, const char *name,
					 const char *id, RedisReplyHandler handler, void *arg)
{
	const char *argv[3 + SCRIPT_NKEYS_MAX + 2];
	int			argc;

	redsem_fault("release");
	argc = fcall_head(argv, prefix, name, "release");
	argv[argc++] = id;
	return redis_send_deferred(call, argc, argv, handler, arg) ||
		sem_call_failed(call, name);
}

/* What a release's reply says: *was_held; false if it has the wrong shape */
bool
sem_release_reply(const redisReply *reply, bool *was_held)
{
	int64		held;

	if (!reply_int64(reply, &held) || (held != 0 && held != 1))
		return false;
	*was_held = (held == 1);
	return true;
}

/*
 * An administrator's release of another session's slot: a place in line is
 * given up (*was_waiting), its waiter told; a slot still counts, marked so that its holder learns why it
 * lost it, until its holder gives it back (I17), unless holder_gone (the
 * administrator knows it no longer runs): then it is released at once.
 */
bool
sem_force_release(RedisCall *call, const char *name, const char *id,
				  bool holder_gone, bool *was_held, bool *was_waiting)
{
	int64		answer = 0;
	bool		ok = release_call(call, NULL, name, id, holder_gone ? "gone" : "forced", &answer);

	*was_held = (answer == 1);
	*was_waiting = (answer == 2);
	return ok;
}


/*
 * Extend a lease (0: by its original length).  *new_lease_ms is the new
 * lease, 0 if the slot was already lost, -1 if an administrator released it
 * (redsem_force_release).
 */
bool
sem_refresh(RedisCall *call, const char *prefix, const char *name,
			const char *id, int64 lease_ms, int64 *new_lease_ms)
{
	const char *args[2];
	redisReply *reply;
	int			slot = sem_gen_slot(prefix, name);

	/* a lease made longer than any asked for: its generation counts it first (I15) */
	if (lease_ms > 0 && gen_lmax_below(prefix, slot, lease_ms, !settle_eras()) &&
		!sem_gen_raise(call, prefix, name, lease_ms, !settle_eras()))
		return false;
	args[0] = id;
	args[1] = psprintf(INT64_FORMAT, lease_ms);
	if (!run_script(call, prefix, name, "refresh", 2, args, &reply))
		return false;
	if (!reply_int64(reply, new_lease_ms) || *new_lease_ms < -1)
		return malformed(call, name, reply, "refresh did not answer a lease");
	freeReplyObject(reply);
	return true;
}

/*
 * Make the lmax of semaphore name's generation at least lease_ms, and, if
 * unacked (a lengthened lease that waits for no replica), its ul and ue
 * as for such a grant (gen_raise, I15); note the generation Redis
 * answered with
 */
bool
sem_gen_raise(RedisCall *call, const char *prefix, const char *name,
			  int64 lease_ms, bool unacked)
{
	const char *args[3];
	char		known[GEN_TEXT_LEN];
	redisReply *reply;

	gen_known_text(prefix, sem_gen_slot(prefix, name), known);
	args[0] = psprintf(INT64_FORMAT, lease_ms);
	args[1] = unacked ? "u" : "";
	args[2] = known;
	if (!run_script(call, prefix, name, "gen_raise", 3, args, &reply))
		return false;
	if (reply->type == REDIS_REPLY_STRING)
		gen_note(prefix, sem_gen_slot(prefix, name), reply->str, unacked);
	freeReplyObject(reply);
	return true;
}

/*
 * What a keeper pipeline (run_pipeline) does with each item's answer:
 * absorb takes item i's reply (not an error; absorb frees it) and says
 * whether the item was done; alone sends item i again on its own, for a
 * node that missed the library (which that loads).  what names the
 * operation in a failure's words.
 */
typedef struct PipelineItems
{
	const char *what;
	bool		(*absorb) (RedisCall *call, void *ctx, int i, redisReply *reply);
	bool		(*alone) (RedisCall *call, void *ctx, int i);
	void	   *ctx;
} PipelineItems;

/*
 * Send the n commands in one pipeline: one round trip (in a Cluster one
 * per node, in turn, nodes that failed recently last, each within
 * call->node_budget_ms), each answer handed to items.  done[i]: whether
 * item i was done.  False if any was not (call->outcome: the first
 * failure).  (The keeper's: a Cluster pipeline is never sent through the
 * broker.)
 */
static bool
run_pipeline(RedisCall *call, int n, RedisCommand *cmds, const PipelineItems *items,
			 bool *done)
{
	redisReply **replies = palloc0(sizeof(redisReply *) * n);
	RedisOutcome first = {RS_OK, 0, "", 0, false, 0};
	bool		all = redis_exec_pipeline(call, n, cmds, replies);

	if (!all)
		first = call->outcome;
	for (int i = 0; i < n; i++)
	{
		RedisOutcome o = {RS_OK, 0, "", 0, false, 0};

		done[i] = false;
		if (replies[i] == NULL)
		{
			all = false;
			continue;
		}
		(void) redis_reply_outcome(replies[i], &o);
		if (o.status == RS_OK)
			done[i] = items->absorb(call, items->ctx, i, replies[i]);
		else
		{
			freeReplyObject(replies[i]);
			if (o.status == RS_NOSCRIPT)
				done[i] = items->alone(call, items->ctx, i);
		}
		/* (an answer that was not an error but failed: absorb's, or alone's, words) */
		if (!done[i] && first.status == RS_OK)
			first = o.status == RS_OK || o.status == RS_NOSCRIPT ? call->outcome : o;
		if (!done[i] && first.status == RS_OK)
			(void) redis_note(&first, RS_MALFORMED, "%s answered nothing", items->what);
		all &= done[i];
	}
	pfree(replies);
	call->outcome = first;
	return all;
}

/* run_pipeline's absorb for gen_raise: note the generation Redis answered */
static bool
absorb_gen_raise(RedisCall *call, void *ctx, int i, redisReply *reply)
{
	const GenRaise *g = &((const GenRaise *) ctx)[i];

	if (reply->type == REDIS_REPLY_STRING)
		gen_note(g->prefix, sem_gen_slot(g->prefix, g->name), reply->str, false);
	freeReplyObject(reply);
	return true;
}

/* run_pipeline's alone for gen_raise */
static bool
gen_raise_alone(RedisCall *call, void *ctx, int i)
{
	const GenRaise *g = &((const GenRaise *) ctx)[i];

	return sem_gen_raise(call, g->prefix, g->name, g->lease_ms, false);
}

/*
 * sem_gen_raise (not unacked) of n generations, each named by a semaphore
 * of it and given a lease, in one pipeline (run_pipeline).  raised[i]:
 * whether generation i was.  One generation goes as one command, so that a
 * late reply may be left owed (owe_late_reply).
 */
bool
sem_gen_raise_many(RedisCall *call, int n, const GenRaise *gens, bool *raised)
{
	PipelineItems items = {"gen_raise", absorb_gen_raise, gen_raise_alone, (void *) gens};
	RedisCommand *cmds;

	if (n == 1)
		return (raised[0] = gen_raise_alone(call, (void *) gens, 0));
	cmds = palloc(sizeof(RedisCommand) * n);
	for (int i = 0; i < n; i++)
	{
		const char **argv = palloc(sizeof(char *) * (3 + SCRIPT_NKEYS_MAX + 4));
		char	   *known = palloc(GEN_TEXT_LEN);

		gen_known_text(gens[i].prefix, sem_gen_slot(gens[i].prefix, gens[i].name), known);
		cmds[i].argv = argv;
		cmds[i].argc = fcall_head(argv, gens[i].prefix, gens[i].name, "gen_raise");
		argv[cmds[i].argc++] = psprintf(INT64_FORMAT, gens[i].lease_ms);
		argv[cmds[i].argc++] = "";
		argv[cmds[i].argc++] = known;
	}
	return run_pipeline(call, n, cmds, &items, raised);
}

/*
 * Block on the caller's wake and nudge lists for up to timeout_ms.  *ticket
 * is the ticket pushed by a promotion (the caller was promoted and must
 * confirm); *nudge_ms, when not -1, is a nudge: look again in that many ms.
 * Both stay 0 and -1 when the wait timed out.
 */
bool
sem_wait_for_wake(RedisCall *call, const char *name, const char *id,
				  int64 timeout_ms, int64 *ticket, int64 *nudge_ms)
{
	char		secs[32];
	const char *argv[4];
	redisReply *reply;
	redisReply	message;
	const redisReply *e;

	snprintf(secs, sizeof(secs), "%.3f", Max(timeout_ms, 1) / 1000.0);
	argv[0] = "BLPOP";
	argv[1] = sem_key(NULL, name, psprintf("wake:%s", id));
	argv[2] = sem_key(NULL, name, psprintf("nudge:%s", id));
	argv[3] = secs;
	/* (Redis ends a BLPOP at its next timer tick: src/timing.h) */
	call->extra_wait_ms = (int) Min(timeout_ms + REDIS_TICK_SLACK_MS, PG_INT32_MAX / 2);
	*ticket = 0;
	*nudge_ms = -1;
	if (!exec_counted(call, name, 4, argv, &reply))
		return false;
	if (reply->type == REDIS_REPLY_NIL)
	{
		freeReplyObject(reply);
		return true;
	}
	e = reply_element(reply, 1);
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
		e->type != REDIS_REPLY_STRING || e->str == NULL || e->len < 1)
		return malformed(call, name, reply, "BLPOP did not answer a wake-up");
	if (e->str[0] == 'n')
	{
		/* a nudge: "n<ms>" */
		message = *e;
		message.str = e->str + 1;
		message.len = e->len - 1;
		if (!reply_int64(&message, nudge_ms))
			return malformed(call, name, reply, "BLPOP answered a malformed nudge");
		*nudge_ms = Max(*nudge_ms, 0);
	}
	else if (!reply_int64(e, ticket) || *ticket <= 0)
		return malformed(call, name, reply, "BLPOP did not answer a ticket");
	freeReplyObject(reply);
	return true;
}

/* The holder's ticket (fencing token), or 0 if id does not hold a slot */
bool
sem_token(RedisCall *call, const char *name, const char *id, int64 *token)
{
	const char *args[1] = {id};
	redisReply *reply;

	*token = 0;
	if (!run_script(call, NULL, name, "token", 1, args, &reply))
		return false;
	if (reply->type != REDIS_REPLY_NIL && !reply_int64(reply, token))
		return malformed(call, name, reply, "token did not answer a ticket");
	freeReplyObject(reply);
	return true;
}

/* True if e is a row of width strings (a list or tenants reply's entry) */
static bool
is_row(const redisReply *e, size_t width)
{
	if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements != width)
		return false;
	for (size_t i = 0; i < width; i++)
		if (e->element[i]->type != REDIS_REPLY_STRING || e->element[i]->str == NULL)
			return false;
	return true;
}

/* Copies a validated reply's rows into out; returns how many were whole */
typedef int (*RowCopier) (const redisReply *reply, void *out);

/*
 * Run op (no arguments) on the semaphore, check that it answers rows of
 * width strings, and copy them with copy into a palloc'd array of entries
 * of elem bytes.  The hiredis reply is freed even if a palloc raises.
 */
static bool
sem_rows(RedisCall *call, const char *name, const char *op, size_t width,
		 size_t elem, RowCopier copy, void **rows, int *count)
{
	redisReply *reply;
	char		what[64];

	*rows = NULL;
	*count = 0;
	if (!run_script(call, NULL, name, op, 0, NULL, &reply))
		return false;
	snprintf(what, sizeof(what), "%s did not answer an array", op);
	if (reply->type != REDIS_REPLY_ARRAY)
		return malformed(call, name, reply, what);
	snprintf(what, sizeof(what), "%s answered a malformed entry", op);
	for (size_t i = 0; i < reply->elements; i++)
		if (!is_row(reply->element[i], width))
			return malformed(call, name, reply, what);
	PG_TRY();
	{
		*rows = palloc0(elem * Max(reply->elements, 1));
		*count = copy(reply, *rows);
	}
	PG_FINALLY();
	{
		freeReplyObject(reply);
	}
	PG_END_TRY();
	return true;
}

/* Copy the members of a validated list reply into out; returns how many */
static int
copy_members(const redisReply *reply, void *out)
{
	int			n = 0;

	for (size_t i = 0; i < reply->elements; i++)
	{
		const redisReply *e = reply->element[i];
		SemMember  *m = &((SemMember *) out)[n];

		if (!reply_int64(e->element[1], &m->ticket) ||
			!reply_int64(e->element[2], &m->ms_left) ||
			!reply_int64(e->element[5], &m->permits) ||
			!reply_int64(e->element[6], &m->age_ms))
			continue;
		m->id = pstrdup(e->element[0]->str);
		m->waiting = strcmp(e->element[3]->str, "1") == 0;
		m->info = pstrdup(e->element[4]->str);
		n++;
	}
	return n;
}

/*
 * Every member of the semaphore in line order, copied into a palloc'd
 * array.  The hiredis reply is freed even if a palloc raises.
 */
bool
sem_list(RedisCall *call, const char *name, SemMember **members, int *count)
{
	/* {id, ticket, ms, waiting, info, permits, age} */
	return sem_rows(call, name, "list", 7, sizeof(SemMember), copy_members,
					(void **) members, count);
}

/* Decode a {stored, in effect, held, waiting} reply ('' for no limit) */
static bool
decode_limit(RedisCall *call, const char *name, redisReply *reply,
			 SemLimit *limit)
{
	int64	   *fields[4] = {&limit->stored, &limit->in_effect, &limit->held,
	&limit->waiting};

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4)
		return malformed(call, name, reply, "limit did not answer four fields");
	for (int i = 0; i < 4; i++)
	{
		const redisReply *e = reply->element[i];

		*fields[i] = 0;
		if (i < 2 && e->type == REDIS_REPLY_STRING && e->len == 0)
			continue;
		if (!reply_int64(e, fields[i]) || *fields[i] < 0)
			return malformed(call, name, reply, "limit answered a malformed field");
	}
	freeReplyObject(reply);
	return true;
}

/* The semaphore's stored limit, limit in effect, permits held and waiters */
bool
sem_limit(RedisCall *call, const char *name, SemLimit *limit)
{
	redisReply *reply;

	return run_script(call, NULL, name, "limit", 0, NULL, &reply) &&
		decode_limit(call, name, reply, limit);
}

/*
 * Store the semaphore's limit (max_holders 0: remove it), or, if_none,
 * only if none is stored; waiters that now fit are admitted.  *limit: as
 * sem_limit, afterwards.
 */
bool
sem_set_limit(RedisCall *call, const char *name, int max_holders,
			  bool if_none, SemLimit *limit)
{
	const char *args[2];
	redisReply *reply;

	args[0] = max_holders > 0 ? psprintf("%d", max_holders) : "";
	args[1] = "nx";
	return run_script(call, NULL, name, "set_limit", if_none ? 2 : 1, args, &reply) &&
		decode_limit(call, name, reply, limit);
}

/*
 * Store the semaphore's limit (0: remove it) only if the stored one is
 * was (0: none); *limit as sem_limit, afterwards (its stored limit tells
 * whether it was set)
 */
bool
sem_set_limit_if(RedisCall *call, const char *name, int max_holders, int was,
				 SemLimit *limit)
{
	const char *args[2];
	redisReply *reply;

	args[0] = max_holders > 0 ? psprintf("%d", max_holders) : "";
	args[1] = psprintf("if=%d", Max(was, 0));
	return run_script(call, NULL, name, "set_limit", 2, args, &reply) &&
		decode_limit(call, name, reply, limit);
}

/* Decode a {text, us, burst, wait ms} rate reply ('' for no rate), then free it */
static bool
decode_rate(RedisCall *call, const char *name, redisReply *reply, SemRate *rate)
{
	memset(rate, 0, sizeof(*rate));
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4 ||
		reply->element[0]->type != REDIS_REPLY_STRING)
		return malformed(call, name, reply, "rate did not answer four fields");
	if (reply->element[0]->len > 0 || !element_is(reply, 1, ""))
	{
		if (!reply_int64(reply->element[1], &rate->us) || rate->us < 1 ||
			!reply_int64(reply->element[2], &rate->burst) || rate->burst < 1)
			return malformed(call, name, reply, "rate answered a malformed field");
		rate->text = pnstrdup(reply->element[0]->str, reply->element[0]->len);
	}
	if (!reply_int64(reply->element[3], &rate->wait_ms) || rate->wait_ms < 0)
		return malformed(call, name, reply, "rate answered a malformed field");
	freeReplyObject(reply);
	return true;
}

/* The semaphore's stored rate (rate->text NULL: none) */
bool
sem_rate(RedisCall *call, const char *name, SemRate *rate)
{
	redisReply *reply;

	return run_script(call, NULL, name, "rate", 0, NULL, &reply) &&
		decode_rate(call, name, reply, rate);
}

/*
 * Store the semaphore's rate (set->text NULL: remove it); a waiter it now
 * lets in is admitted.  *rate: as sem_rate, afterwards.
 */
bool
sem_set_rate(RedisCall *call, const char *name, const SemRate *set,
			 SemRate *rate)
{
	const char *args[3] = {""};
	redisReply *reply;

	if (set->text != NULL)
	{
		args[0] = psprintf(INT64_FORMAT, set->us);
		args[1] = psprintf(INT64_FORMAT, set->burst);
		args[2] = set->text;
	}
	return run_script(call, NULL, name, "set_rate", set->text ? 3 : 1, args, &reply) &&
		decode_rate(call, name, reply, rate);
}

/* Decode a {permits, priority, held} reserve reply ('' for none), then free it */
static bool
decode_reserve(RedisCall *call, const char *name, redisReply *reply,
			   SemReserve *reserve)
{
	memset(reserve, 0, sizeof(*reserve));
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3)
		return malformed(call, name, reply, "reserve did not answer three fields");
	if (!element_is(reply, 0, "") &&
		(!reply_int64(reply->element[0], &reserve->permits) || reserve->permits < 1 ||
		 !reply_int64(reply->element[1], &reserve->min_priority)))
		return malformed(call, name, reply, "reserve answered a malformed field");
	if (!reply_int64(reply->element[2], &reserve->held) || reserve->held < 0)
		return malformed(call, name, reply, "reserve answered a malformed field");
	freeReplyObject(reply);
	return true;
}

/* The semaphore's stored reserve (reserve->permits 0: none) */
bool
sem_reserve(RedisCall *call, const char *name, SemReserve *reserve)
{
	redisReply *reply;

	return run_script(call, NULL, name, "reserve", 0, NULL, &reply) &&
		decode_reserve(call, name, reply, reserve);
}

/*
 * Store the semaphore's reserve (permits 0: remove it); a waiter it now
 * lets in is admitted.  *reserve: as sem_reserve, afterwards.
 */
bool
sem_set_reserve(RedisCall *call, const char *name, int permits,
				int min_priority, SemReserve *reserve)
{
	const char *args[2] = {""};
	redisReply *reply;

	if (permits > 0)
	{
		args[0] = psprintf("%d", permits);
		args[1] = psprintf("%d", min_priority);
	}
	return run_script(call, NULL, name, "set_reserve", permits > 0 ? 2 : 1, args, &reply) &&
		decode_reserve(call, name, reply, reserve);
}

/* Copy a validated tenants reply into out; returns how many were whole */
static int
copy_tenants(const redisReply *reply, void *out)
{
	int			n = 0;

	for (size_t i = 0; i < reply->elements; i++)
	{
		const redisReply *e = reply->element[i];
		SemTenant  *t = &((SemTenant *) out)[n];

		if (!reply_int64(e->element[1], &t->weight) ||
			!reply_int64(e->element[2], &t->held) ||
			!reply_int64(e->element[3], &t->waiting))
			continue;
		t->tenant = e->element[0]->len > 0 ? pstrdup(e->element[0]->str) : NULL;
		n++;
	}
	return n;
}

/*
 * The semaphore's tenants (I12): those holding, waiting or with a stored
 * weight, the callers without a tenant first; a palloc'd array.
 */
bool
sem_tenants(RedisCall *call, const char *name, SemTenant **tenants, int *count)
{
	/* {tenant, weight, held, waiting} */
	return sem_rows(call, name, "tenants", 4, sizeof(SemTenant), copy_tenants,
					(void **) tenants, count);
}

/*
 * Store a tenant's weight (0: remove it, making it 1); *now: the weight in
 * effect afterwards.
 */
bool
sem_set_weight(RedisCall *call, const char *name, const char *tenant,
			   int weight, int64 *now)
{
	const char *args[2];
	redisReply *reply;

	args[0] = tenant;
	args[1] = weight > 0 ? psprintf("%d", weight) : "";
	if (!run_script(call, NULL, name, "set_weight", 2, args, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1 ||
		!reply_int64(reply->element[0], now) || *now < 1)
		return malformed(call, name, reply, "set_weight answered a malformed field");
	freeReplyObject(reply);
	return true;
}

/* The index key of prefix (NULL: redsem.key_prefix): "<prefix>index" */
static char *
index_key(const char *prefix)
{
	return psprintf("%sindex", redsem_prefix_or_setting(prefix));
}

/*
 * "FCALL <library> 1 <key> op args..." for an index operation, key being
 * the index's (or, for index_policy, a semaphore's: the node to ask);
 * *argc: how many entries
 */
static const char **
index_argv(const char *key, const char *op, int nargs, const char *const *args, int *argc)
{
	const char **argv = palloc(sizeof(char *) * (5 + nargs));

	*argc = 0;
	argv[(*argc)++] = "FCALL";
	argv[(*argc)++] = function_for(op);
	argv[(*argc)++] = "1";
	argv[(*argc)++] = key;
	argv[(*argc)++] = op;
	for (int i = 0; i < nargs; i++)
		argv[(*argc)++] = args[i];
	return argv;
}

/*
 * Run an index operation (index_argv).  Returns true with a (non-error)
 * reply that the caller frees.
 */
static bool
run_index(RedisCall *call, const char *key, const char *op, int nargs,
		  const char **args, redisReply **reply)
{
	int			argc;
	const char **argv = index_argv(key, op, nargs, args, &argc);
	bool		ok;

	call_prefix[0] = '\0';	/* (not a semaphore's: counted nowhere) */
	ok = fcall_send(call, argc, argv, reply) || sem_call_failed(call, NULL);
	pfree(argv);
	return ok;
}

/*
 * The eviction policy an index reply gives at element i: palloc'd, or NULL
 * when Redis cannot evict keys (an empty string)
 */
static char *
evicting_policy(const redisReply *reply, size_t i)
{
	const redisReply *e = reply->element[i];

	return e->len == 0 ? NULL : pnstrdup(e->str, Min(e->len, 64));
}

/*
 * Take an index_touch reply over names[0..n-1] apart (freed): *evicting
 * and adaptive[] as sem_index_touch's.  False if it was malformed.
 */
static bool
absorb_touch_reply(RedisCall *call, redisReply *reply, const char *const *names, int n,
				   char **evicting, bool *adaptive)
{
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
		reply->element[1]->type != REDIS_REPLY_STRING)
		return malformed(call, "(index)", reply, "index_touch did not answer a count and a policy");
	*evicting = evicting_policy(reply, 1);
	memset(adaptive, 0, sizeof(bool) * n);
	/* (the adaptive names come in the order given: one pass) */
	for (size_t i = 2, k = 0; i < reply->elements; i++)
	{
		const redisReply *e = reply->element[i];

		while (k < (size_t) n && (e->type != REDIS_REPLY_STRING || strlen(names[k]) != e->len ||
								  memcmp(names[k], e->str, e->len) != 0))
			k++;
		if (k < (size_t) n)
			adaptive[k++] = true;
	}
	freeReplyObject(reply);
	return true;
}

/* The arguments of an index_touch of names[0..n-1] (after the op) */
static const char **
touch_args(const char *const *names, int n, int ttl_ms)
{
	const char **args = palloc(sizeof(char *) * (n + 1));

	Assert(n >= 1 && n <= FLEET_TOUCH_MAX_NAMES);
	args[0] = psprintf("%d", ttl_ms);
	memcpy(args + 1, names, sizeof(char *) * n);
	return args;
}

/*
 * Note in the index of prefix that the n names are in use until ttl_ms
 * from now (by Redis's clock).  At most FLEET_TOUCH_MAX_NAMES names.
 * *evicting: Redis's eviction policy if it may evict keys, else NULL;
 * adaptive[i]: whether names[i] is an adaptive semaphore (X4).
 */
bool
sem_index_touch(RedisCall *call, const char *prefix, const char **names,
				int n, int ttl_ms, char **evicting, bool *adaptive)
{
	redisReply *reply;

	if (!run_index(call, index_key(prefix), "index_touch", n + 1,
				   touch_args(names, n, ttl_ms), &reply))
		return false;
	return absorb_touch_reply(call, reply, names, n, evicting, adaptive);
}

/* What run_pipeline's handlers of index touches share */
typedef struct TouchPipeline
{
	const IndexTouch *groups;
	int			ttl_ms;
	char	   *evicting;		/* the first policy that may evict */
} TouchPipeline;

/* Note a touched group's policy, if the first that may evict */
static bool
note_policy(TouchPipeline *t, bool touched, char *policy)
{
	if (touched && t->evicting == NULL)
		t->evicting = policy;
	return touched;
}

/* run_pipeline's absorb for index_touch */
static bool
absorb_index_touch(RedisCall *call, void *ctx, int i, redisReply *reply)
{
	TouchPipeline *t = ctx;
	const IndexTouch *g = &t->groups[i];
	char	   *policy = NULL;

	bool		touched = absorb_touch_reply(call, reply, g->names, g->n, &policy, g->adaptive);

	return note_policy(t, touched, policy);
}

/* run_pipeline's alone for index_touch */
static bool
index_touch_alone(RedisCall *call, void *ctx, int i)
{
	TouchPipeline *t = ctx;
	const IndexTouch *g = &t->groups[i];
	char	   *policy = NULL;

	bool		touched = sem_index_touch(call, g->prefix, g->names, g->n, t->ttl_ms,
										  &policy, g->adaptive);

	return note_policy(t, touched, policy);
}

/*
 * sem_index_touch of n groups of names (each of one prefix, at most
 * FLEET_TOUCH_MAX_NAMES) in one pipeline (run_pipeline): one round trip,
 * however many key prefixes.  touched[i]: whether group i was; *evicting:
 * the first policy that may evict.  One group goes as one command, so that
 * a late reply may be left owed.
 */
bool
sem_index_touch_many(RedisCall *call, int n, const IndexTouch *groups, int ttl_ms,
					 char **evicting, bool *touched)
{
	TouchPipeline t = {groups, ttl_ms, NULL};
	PipelineItems items = {"index_touch", absorb_index_touch, index_touch_alone, &t};
	RedisCommand *cmds;
	bool		all;

	if (n == 1)
		all = (touched[0] = index_touch_alone(call, &t, 0));
	else
	{
		cmds = palloc(sizeof(RedisCommand) * n);
		for (int i = 0; i < n; i++)
			cmds[i].argv = index_argv(index_key(groups[i].prefix), "index_touch", groups[i].n + 1,
									  touch_args(groups[i].names, groups[i].n, ttl_ms),
									  &cmds[i].argc);
		call_prefix[0] = '\0';	/* (not a semaphore's: counted nowhere) */
		all = run_pipeline(call, n, cmds, &items, touched);
	}
	*evicting = t.evicting;
	return all;
}

/* Pin a semaphore's name in the index (a stored limit), or let it go */
bool
sem_index_pin(RedisCall *call, const char *name, bool pin, int ttl_ms)
{
	const char *args[3];
	redisReply *reply;

	args[0] = psprintf("%d", ttl_ms);
	args[1] = name;
	args[2] = pin ? "1" : "0";
	if (!run_index(call, index_key(NULL), "index_pin", 3, args, &reply))
		return false;
	freeReplyObject(reply);
	return true;
}

/*
 * max names of the index from the from-th (palloc'd, *count of them) and
 * how many entries it has in all (*total); *evicting as sem_index_touch's.
 */
bool
sem_index_list(RedisCall *call, int max, int64 from, char ***names, int *count,
			   int64 *total, char **evicting)
{
	const char *args[2] = {psprintf("%d", max), psprintf(INT64_FORMAT, from)};
	redisReply *reply;

	if (!run_index(call, index_key(NULL), "index_list", 2, args, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
		!reply_int64(reply->element[0], total) ||
		reply->element[1]->type != REDIS_REPLY_STRING)
		return malformed(call, "(index)", reply, "index_list did not answer a count, a policy and names");
	*evicting = evicting_policy(reply, 1);
	*names = palloc(sizeof(char *) * Max(reply->elements, 1));
	*count = 0;
	for (size_t i = 2; i < reply->elements; i++)
		if (reply->element[i]->type == REDIS_REPLY_STRING)
			(*names)[(*count)++] = pnstrdup(reply->element[i]->str, reply->element[i]->len);
	freeReplyObject(reply);
	return true;
}

/*
 * Run an operation on the statement queues' definitions of prefix (NULL:
 * redsem.key_prefix), naming their three keys (X3): "<prefix>{queues}",
 * and that with ":servers" and ":seen"
 */
static bool
run_queues(RedisCall *call, const char *prefix, const char *op, int nargs,
		   const char **args, redisReply **reply)
{
	const char **argv = palloc(sizeof(char *) * (7 + nargs));
	char	   *key = psprintf("%s{queues}", redsem_prefix_or_setting(prefix));
	int			argc = 0;
	bool		ok;

	call_prefix[0] = '\0';	/* (not a semaphore's: counted nowhere) */
	argv[argc++] = "FCALL";
	argv[argc++] = function_for(op);
	argv[argc++] = "3";
	argv[argc++] = key;
	argv[argc++] = psprintf("%s:servers", key);
	argv[argc++] = psprintf("%s:seen", key);
	argv[argc++] = op;
	for (int i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	ok = fcall_send(call, argc, argv, reply) || sem_call_failed(call, NULL);
	pfree(argv);
	return ok;
}

/* Copy a reply's string element */
static char *
reply_text(const redisReply *e)
{
	return pnstrdup(e->str, e->len);
}

/*
 * The statement queues' definitions stored under prefix (NULL: the
 * session's): *count names and texts (palloc'd); *exists 1 if they are
 * there, 2 if they are a copy a server stored back, 0 if they are gone
 * (Redis forgot them, or nobody defined a queue yet); *version counts the
 * changes.
 */
bool
sem_queues_get(RedisCall *call, const char *prefix, int *exists,
			   int64 *version, bool *must_wait, char ***names, char ***texts,
			   int *count)
{
	return sem_queues_poll(call, prefix, NULL, 0, 0, NULL, exists, version,
						   must_wait, names, texts, count);
}

/*
 * As sem_queues_get, and note first that server (if not NULL) read them,
 * until ttl_ms from now, its copy being of copy_version, saying value of
 * itself (queue_servers)
 */
bool
sem_queues_poll(RedisCall *call, const char *prefix, const char *server,
				int ttl_ms, int64 copy_version, const char *value, int *exists,
				int64 *version, bool *must_wait, char ***names, char ***texts,
				int *count)
{
	int64		wait;
	const char *args[4] = {server, psprintf("%d", ttl_ms),
	psprintf(INT64_FORMAT, copy_version), value};
	redisReply *reply;
	int64		there;

	if (!run_queues(call, prefix, server ? "queues_poll" : "queues_get",
					server ? 4 : 0, args, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 || reply->elements % 2 != 1 ||
		!reply_int64(reply->element[0], &there) || !reply_int64(reply->element[1], version) ||
		!reply_int64(reply->element[2], &wait))
		return malformed(call, "(queues)", reply, "queues_get did not answer a flag, a version, a flag and pairs");
	*must_wait = wait == 1;
	*exists = (int) there;
	*count = 0;
	*names = palloc(sizeof(char *) * (reply->elements / 2 + 1));
	*texts = palloc(sizeof(char *) * (reply->elements / 2 + 1));
	for (size_t i = 3; i + 1 < reply->elements; i += 2)
	{
		if (reply->element[i]->type != REDIS_REPLY_STRING ||
			reply->element[i + 1]->type != REDIS_REPLY_STRING)
			continue;
		(*names)[*count] = reply_text(reply->element[i]);
		(*texts)[(*count)++] = reply_text(reply->element[i + 1]);
	}
	freeReplyObject(reply);
	return true;
}

/*
 * The servers that read the statement queues' definitions lately: *count
 * names and what each said of itself (palloc'd, "<until ms> <value>"),
 * and Redis's clock now (*now_ms)
 */
bool
sem_queue_servers(RedisCall *call, int64 *now_ms, char ***servers,
				  char ***values, int *count)
{
	redisReply *reply;

	if (!run_queues(call, NULL, "queue_servers", 0, NULL, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2 != 1 ||
		!reply_int64(reply->element[0], now_ms))
		return malformed(call, "(queues)", reply, "queue_servers did not answer a time and pairs");
	*count = 0;
	*servers = palloc(sizeof(char *) * (reply->elements / 2 + 1));
	*values = palloc(sizeof(char *) * (reply->elements / 2 + 1));
	for (size_t i = 1; i + 1 < reply->elements; i += 2)
	{
		if (reply->element[i]->type != REDIS_REPLY_STRING ||
			reply->element[i + 1]->type != REDIS_REPLY_STRING)
			continue;
		(*servers)[*count] = reply_text(reply->element[i]);
		(*values)[(*count)++] = reply_text(reply->element[i + 1]);
	}
	freeReplyObject(reply);
	return true;
}

/*
 * Store queue name's definition: was NULL, a new queue (only if it is not
 * there); else in place of definition was (only if it is still that).
 * *result: 1 stored, 0 not (*existing then holds the definition there,
 * palloc'd, or NULL if there is none), -1 too many queues, -2 nothing
 * done: the definitions are gone or a copy stored back, and a server has
 * a newer copy it is about to store back.
 */
bool
sem_queue_put(RedisCall *call, const char *name, const char *text,
			  const char *was, int *result, char **existing)
{
	const char *args[4] = {name, text, was ? "alter" : "create", was};
	redisReply *reply;
	int64		r;

	*existing = NULL;
	if (!run_queues(call, NULL, "queue_put", was ? 4 : 3, args, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
		!reply_int64(reply->element[0], &r))
		return malformed(call, "(queues)", reply, "queue_put did not answer a result");
	*result = (int) r;
	if (reply->elements > 1 && reply->element[1]->type == REDIS_REPLY_STRING)
		*existing = reply_text(reply->element[1]);
	freeReplyObject(reply);
	return true;
}

/*
 * Drop queue name's definition; *result 1 dropped, 0 there was none, -2
 * nothing done (as sem_queue_put's)
 */
bool
sem_queue_drop(RedisCall *call, const char *name, int *result)
{
	const char *args[1] = {name};
	redisReply *reply;
	int64		r;

	if (!run_queues(call, NULL, "queue_drop", 1, args, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1 ||
		!reply_int64(reply->element[0], &r))
		return malformed(call, "(queues)", reply, "queue_drop did not answer a result");
	*result = (int) r;
	freeReplyObject(reply);
	return true;
}

/*
 * Note in Redis that the drop of queue name left an open limit on its
 * semaphore, due for removal in ms (queue_fleet.c free_line)
 */
bool
sem_queue_open(RedisCall *call, const char *name, int ms)
{
	const char *args[2] = {name, psprintf("%d", ms)};
	redisReply *reply;

	if (!run_queues(call, NULL, "queue_open", 2, args, &reply))
		return false;
	freeReplyObject(reply);
	return true;
}

/*
 * The queues whose open limit (sem_queue_open) is due for removal, with
 * the due time noted (*dues, as text), *count of each
 */
bool
sem_queue_opens(RedisCall *call, char ***names, char ***dues, int *count)
{
	redisReply *reply;

	if (!run_queues(call, NULL, "queue_opens", 0, NULL, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2 != 0)
		return malformed(call, "(queues)", reply, "queue_opens did not answer pairs");
	*count = 0;
	*names = palloc(sizeof(char *) * (reply->elements / 2 + 1));
	*dues = palloc(sizeof(char *) * (reply->elements / 2 + 1));
	for (size_t i = 0; i + 1 < reply->elements; i += 2)
	{
		if (reply->element[i]->type != REDIS_REPLY_STRING ||
			reply->element[i + 1]->type != REDIS_REPLY_STRING)
			continue;
		(*names)[*count] = reply_text(reply->element[i]);
		(*dues)[(*count)++] = reply_text(reply->element[i + 1]);
	}
	freeReplyObject(reply);
	return true;
}

/* Forget queue name's open limit note if it still says due */
bool
sem_queue_open_done(RedisCall *call, const char *name, const char *due)
{
	const char *args[2] = {name, due};
	redisReply *reply;

	if (!run_queues(call, NULL, "queue_open_done", 2, args, &reply))
		return false;
	freeReplyObject(reply);
	return true;
}

/*
 * Store the n definitions (a copy of version; n may be 0) under prefix in
 * place of Redis's if those are gone or older; *restored false if it did
 * not take them.
 */
bool
sem_queues_restore(RedisCall *call, const char *prefix, int64 version, int n,
				   char *const *names, char *const *texts, bool *restored,
				   char **replaced)
{
	StringInfoData buf;

	const char **args = palloc(sizeof(char *) * (2 * n + 1));
	redisReply *reply;
	int64		r;

	args[0] = psprintf(INT64_FORMAT, version);
	for (int i = 0; i < n; i++)
	{
		args[1 + 2 * i] = names[i];
		args[2 + 2 * i] = texts[i];
	}
	if (!run_queues(call, prefix, "queues_restore", 2 * n + 1, args, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
		!reply_int64(reply->element[0], &r))
		return malformed(call, "(queues)", reply, "queues_restore did not answer a result");
	*restored = r == 1;
	initStringInfo(&buf);
	for (size_t i = 1; i < reply->elements; i++)
		if (reply->element[i]->type == REDIS_REPLY_STRING)
			appendStringInfo(&buf, "%s\"%.*s\"", buf.len > 0 ? ", " : "",
							 (int) reply->element[i]->len, reply->element[i]->str);
	*replaced = buf.data;
	freeReplyObject(reply);
	return true;
}

/*
 * A stored limit, rate or reserve is configuration: the index pins the
 * name, so that redsem_semaphores() shows it while nobody uses it.
 */
void
sem_pin_configured(RedisCall *call, const char *name)
{
	SemLimit	limit;
	SemRate		rate;
	SemReserve	reserve;

	if (sem_limit(call, name, &limit) && sem_rate(call, name, &rate) &&
		sem_reserve(call, name, &reserve))
		(void) sem_index_pin(call, name,
							 limit.stored > 0 || rate.text != NULL || reserve.permits > 0,
							 FLEET_TTL_MS);
}

/*
 * In a Redis Cluster, the node known to serve semaphore name of prefix
 * (name NULL: the index), or -1 while this process (behind the broker,
 * the broker) has not learnt it
 */
int
sem_node_of(const RedisCall *call, const char *prefix, const char *name)
{
	const char *key = name ? sem_key(prefix, name, OWNER_SUFFIX) : index_key(prefix);
	int			node;

	redis_known_nodes(call, &key, 1, &node);
	pfree(unconstify(char *, key));
	return node;
}

/* sem_node_of for each of n names, in nodes (asked together) */
void
sem_nodes_of(const RedisCall *call, const char *prefix, char *const *names, int n,
			 int *nodes)
{
	const char **keys = palloc(sizeof(char *) * Max(n, 1));

	for (int i = 0; i < n; i++)
		keys[i] = sem_key(prefix, names[i], OWNER_SUFFIX);
	redis_known_nodes(call, keys, n, nodes);
	for (int i = 0; i < n; i++)
		pfree(unconstify(char *, keys[i]));
	pfree(keys);
}

/*
 * The eviction policy of the node that serves semaphore name of prefix
 * (*evicting as sem_index_touch's): in a Cluster, not always the index's.
 */
bool
sem_node_policy(RedisCall *call, const char *prefix, const char *name,
				char **evicting)
{
	redisReply *reply;

	if (!run_index(call, sem_key(prefix, name, OWNER_SUFFIX), "index_policy", 0, NULL, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1 ||
		reply->element[0]->type != REDIS_REPLY_STRING)
		return malformed(call, "(index)", reply, "index_policy did not answer a policy");
	*evicting = evicting_policy(reply, 0);
	freeReplyObject(reply);
	return true;
}

/* Adaptive bounds "lo|hi" (I16) from a reply element; '' gives 0, 0 */
static bool
adapt_bounds_text(const redisReply *e, int64 *lo, int64 *hi)
{
	char		text[48];

	*lo = *hi = 0;
	if (e->type != REDIS_REPLY_STRING || e->len >= sizeof(text))
		return false;
	if (e->len == 0)
		return true;
	memcpy(text, e->str, e->len);
	text[e->len] = '\0';
	return sscanf(text, INT64_FORMAT "|" INT64_FORMAT, lo, hi) == 2 && *lo >= 1 && *hi >= *lo;
}

/* A field of a summary reply: a count, or -1 for '' (none) */
static bool
summary_field(const redisReply *e, int64 *v)
{
	if (e->type == REDIS_REPLY_STRING && e->len == 0)
	{
		*v = -1;
		return true;
	}
	return reply_int64(e, v);
}

/* A semaphore as Redis sees it now (the "summary" operation) */
bool
sem_summary(RedisCall *call, const char *name, SemSummary *out)
{
	redisReply *reply;
	int64		v[13] = {0};

	if (!run_script(call, NULL, name, "summary", 0, NULL, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 13 ||
		reply->element[6]->type != REDIS_REPLY_STRING ||
		reply->element[10]->type != REDIS_REPLY_STRING ||
		reply->element[11]->type != REDIS_REPLY_STRING)
		return malformed(call, name, reply, "summary did not answer thirteen fields");
	for (int i = 0; i < 13; i++)
		if (i != 6 && i != 10 && i != 11 && !summary_field(reply->element[i], &v[i]))
			return malformed(call, name, reply, "summary did not answer numbers");
	out->rate = reply->element[6]->len == 0 ? NULL :
		pnstrdup(reply->element[6]->str, reply->element[6]->len);
	if (!adapt_bounds_text(reply->element[10], &out->adaptive_min, &out->adaptive_max))
		return malformed(call, name, reply, "summary answered malformed adaptive bounds");
	out->last_move = reply->element[11]->len == 0 ? NULL :
		pnstrdup(reply->element[11]->str, Min(reply->element[11]->len, 32));
	out->last_move_ms = v[12];
	freeReplyObject(reply);
	out->stored_limit = v[0];
	out->limit_in_effect = v[1];
	out->permits_held = v[2];
	out->waiting = v[3];
	out->holders = v[4];
	out->oldest_wait_ms = v[5];
	out->reserved = v[7];
	out->reserved_for = v[8];
	out->tenants_waiting = v[9];
	return true;
}


/* Decode an "adapt" reply (I16) into *out, then free it */
static bool
decode_adapt(RedisCall *call, const char *name, redisReply *reply, SemAdapt *out)
{
	int64	   *fields[] = {&out->limit, &out->min, &out->max, &out->base_us,
		&out->mean_us, &out->last_us, &out->last_n, NULL, &out->moved_ms,
	&out->pressure, &out->servers};

	memset(out, 0, sizeof(*out));
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != lengthof(fields) ||
		reply->element[7]->type != REDIS_REPLY_STRING)
		return malformed(call, name, reply, "adapt did not answer eleven fields");
	for (int i = 0; i < (int) lengthof(fields); i++)
	{
		if (fields[i] == NULL)
			continue;
		if (!summary_field(reply->element[i], fields[i]))
			return malformed(call, name, reply, "adapt answered a malformed field");
	}
	out->why = reply->element[7]->len == 0 ? NULL :
		pnstrdup(reply->element[7]->str, Min(reply->element[7]->len, 32));
	freeReplyObject(reply);
	return true;
}

/* A semaphore's adaptive limit as the "adapt" operation reports it */
bool
sem_adapt(RedisCall *call, const char *name, SemAdapt *out)
{
	redisReply *reply;

	return run_script(call, NULL, name, "adapt", 0, NULL, &reply) &&
		decode_adapt(call, name, reply, out);
}

/*
 * Make a semaphore's limit adaptive within [lo, hi] starting at start (0:
 * where it is), or (lo 0) fixed where it is; *out as sem_adapt, afterwards
 */
bool
sem_set_adapt(RedisCall *call, const char *name, int lo, int hi, int start,
			  SemAdapt *out)
{
	const char *args[3] = {""};
	int			nargs = 1;
	redisReply *reply;

	if (lo > 0)
	{
		args[0] = psprintf("%d", lo);
		args[1] = psprintf("%d", hi);
		args[2] = psprintf("%d", start);
		nargs = start > 0 ? 3 : 2;
	}
	return run_script(call, NULL, name, "set_adapt", nargs, args, &reply) &&
		decode_adapt(call, name, reply, out);
}

/*
 * Mark semaphore name adaptive in the index (on) or no more, so that the
 * keepers of the servers that use it tick it (X4)
 */
bool
sem_adapt_note(RedisCall *call, const char *name, bool on)
{
	const char *args[2] = {name, on ? "1" : "0"};
	redisReply *reply;

	if (!run_index(call, index_key(NULL), "adapt_note", 2, args, &reply))
		return false;
	freeReplyObject(reply);
	return true;
}

/*
 * Tick adaptive semaphore name of prefix for server with its pressure
 * (1000: its line) and what presses most (tag); *adaptive: whether it
 * still is, *ran: whether the controller ran on this tick
 */
bool
sem_adapt_tick(RedisCall *call, const char *prefix, const char *name,
			   const char *server, int pressure, const char *tag,
			   bool *adaptive, bool *ran)
{
	const char *args[3] = {server, psprintf("%d", Max(pressure, 0)), tag};
	redisReply *reply;

	if (!run_script(call, prefix, name, "adapt_tick", 3, args, &reply))
		return false;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
		reply->element[0]->type != REDIS_REPLY_STRING)
		return malformed(call, name, reply, "adapt_tick did not answer three fields");
	*adaptive = reply->element[0]->len > 0;
	*ran = element_is(reply, 2, "1");
	freeReplyObject(reply);
	return true;
}
