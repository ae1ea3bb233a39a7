/*
 * sentinel.c
 *		Finding the primary through Redis Sentinel.
 *
 * With redsem.sentinels set, redsem.host and redsem.port are not used: each
 * new connection asks the sentinels (the one that answered last first, then
 * in the order listed, each given a fair share of the time left) for the address
 * of the primary redsem.sentinel_master (SENTINEL get-master-addr-by-name),
 * connects there, and checks with ROLE that the server is a primary before
 * using it, so a sentinel that has not yet heard of a failover cannot send
 * redsem to a replica.  conn.c drops the connection whenever it breaks or a
 * server answers READONLY (a demoted primary), so the next call asks again;
 * while the primary named is unreachable or still a replica, conn.c asks
 * again until the call's deadline.  Nothing is written through a sentinel.
 *
 * Failures: no sentinel answering, or none knowing the primary, is a
 * failure to connect (08001); a primary named but unreachable, or a
 * replica, is a failover in progress (08006, retried until the deadline).
 *
 * In broker mode a backend does none of this: its link's header names the
 * sentinels, the primary's name and the sentinels' credentials (its
 * session's), and the broker's opener finds the primary with this code,
 * under that client's forced profile (profile.h), as the session would
 * have.
 */
#include "postgres.h"

#include "hiredis.h"
#include "utils/guc.h"

#include "clock.h"
#include "guc.h"
#include "link.h"
#include "profile.h"
#include "report.h"
#include "secret.h"
#include "sentinel.h"

#define MAX_SENTINELS	16
#define MAX_HOST_BYTES	255


/* The primary's address as last named by a sentinel, for messages */
static char last_primary[SENTINEL_NAMED_LEN] = "";

/*
 * The sentinel (its place in the list) that answered last, asked first
 * next time; each sentinel asked gets a fair share of the time left, so
 * that one that hangs (its host down) costs the others nothing but its share
 */
static int	answered_last = 0;

/* One sentinel's address */
typedef struct SentinelAddr
{
	char		host[MAX_HOST_BYTES + 1];
	int			port;
} SentinelAddr;

/* Copy n bytes of s into a string of at most cap bytes; false if too long */
static bool
copy_part(char *dst, size_t cap, const char *s, size_t n)
{
	if (n == 0 || n > cap)
		return false;
	memcpy(dst, s, n);
	dst[n] = '\0';
	return true;
}

/*
 * Parse one "host:port" or "[v6 address]:port" entry of len bytes, blanks
 * around it allowed.  Returns false if it is not one.
 */
static bool
parse_entry(const char *s, size_t len, SentinelAddr *out)
{
	char		entry[MAX_HOST_BYTES + 16];
	char	   *colon;
	char	   *host;
	char	   *end;
	long		port;

	while (len > 0 && (*s == ' ' || *s == '\t'))
		s++, len--;
	while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	if (!copy_part(entry, sizeof(entry) - 1, s, len) ||
		(colon = strrchr(entry, ':')) == NULL)
		return false;
	*colon = '\0';
	host = entry;
	if (host[0] == '[')
	{
		size_t		hl = strlen(host);

		if (hl < 3 || host[hl - 1] != ']')
			return false;
		host[hl - 1] = '\0';
		host++;
	}
	else if (strchr(host, ':') != NULL)
		return false;			/* an IPv6 address needs brackets */
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end != '\0' || errno != 0 || port < 1 || port > 65535)
		return false;
	out->port = (int) port;
	return copy_part(out->host, MAX_HOST_BYTES, host, strlen(host));
}

/*
 * Parse a comma-separated list into out (at most MAX_SENTINELS); returns
 * the count, or -1 (with the bad entry's position in *bad) if malformed.
 */
static int
parse_list(const char *list, SentinelAddr *out, int *bad)
{
	int			n = 0;
	const char *p = list;

	while (*p != '\0')
	{
		size_t		len = strcspn(p, ",");

		if (n == MAX_SENTINELS || !parse_entry(p, len, &out[n]))
		{
			*bad = n + 1;
			return -1;
		}
		n++;
		p += len;
		if (*p == ',')
			p++;
	}
	return n;
}

/* redsem.sentinels must be a list of host:port */
static bool
check_sentinels(char **newval, void **extra, GucSource source)
{
	SentinelAddr *addrs;
	int			bad = 0;
	int			n;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	addrs = palloc(sizeof(SentinelAddr) * MAX_SENTINELS);
	n = parse_list(*newval, addrs, &bad);
	pfree(addrs);
	if (n < 0)
	{
		GUC_check_errdetail("Entry %d is not of the form host:port (or [address]:port), or there are more than %d entries.",
							bad, MAX_SENTINELS);
		return false;
	}
	return true;
}

/* Define the Sentinel settings (superuser-only, like every connection setting) */
void
sentinel_define_gucs(void)
{
	DefineCustomStringVariable("redsem.sentinels",
							   "Redis Sentinel addresses (host:port, comma-separated); empty means none.",
							   "When set, redsem connects to the primary the sentinels name, and redsem.host and redsem.port are not used.",
							   &redsem_sentinels, "",
							   PGC_SUSET, 0,
							   check_sentinels, redsem_assign_connection_string, NULL);
	DefineCustomStringVariable("redsem.sentinel_master",
							   "Name of the primary the sentinels monitor, as in their configuration.",
							   NULL,
							   &redsem_sentinel_master, "mymaster",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
	DefineCustomStringVariable("redsem.sentinel_user",
							   "ACL user name for the sentinels; empty means the default user.",
							   NULL,
							   &redsem_sentinel_user, "",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
	DefineCustomStringVariable("redsem.sentinel_password_file",
							   "File holding the sentinels' password; empty means none.",
							   "The file must be readable by the server's operating system user only (0600).",
							   &redsem_sentinel_password_file, "",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
}

/* The sentinels in force: the forced profile's (broker), or the session's */
static const char *
list_in_force(void)
{
	const RedisProfile *forced = redis_profile_forced();

	return forced ? forced->sentinels : (redsem_sentinels ? redsem_sentinels : "");
}

/* The primary's name in force (see list_in_force) */
static const char *
master_in_force(void)
{
	const RedisProfile *forced = redis_profile_forced();

	return forced ? forced->sentinel_master : (redsem_sentinel_master ? redsem_sentinel_master : "");
}

/* True when redsem finds its Redis through sentinels */
bool
sentinel_enabled(void)
{
	return list_in_force()[0] != '\0';
}

/*
 * The sentinels' password in force into buf (*have false if none); false,
 * with the outcome filled, if its file cannot be used
 */
static bool
sentinel_password(char *buf, size_t len, bool *have, RedisOutcome *o)
{
	const RedisProfile *forced = redis_profile_forced();

	buf[0] = '\0';
	if (forced != NULL)
		strlcpy(buf, forced->sentinel_password, len);
	else if (redsem_sentinel_password_file != NULL &&
			 redsem_sentinel_password_file[0] != '\0' &&
			 !secret_from_file("redsem.sentinel_password_file",
							   redsem_sentinel_password_file, buf, len, o))
		return false;
	*have = buf[0] != '\0';
	return true;
}

/* The primary's address as the sentinels last named it ("" if never) */
const char *
sentinel_last_primary(void)
{
	return last_primary;
}

/* For messages: the primary, and where it was last seen */
char *
sentinel_target_description(void)
{
	if (last_primary[0] != '\0')
		return psprintf("%s (primary \"%s\" of redsem.sentinels)", last_primary,
						master_in_force());
	return psprintf("primary \"%s\" of redsem.sentinels", master_in_force());
}

/* Authenticate to a sentinel, if sentinel credentials are configured */
static bool
sentinel_auth(RedisCall *call, redisContext *c, TimestampTz deadline)
{
	char		password[REDSEM_MAX_SECRET_BYTES + 1];
	const RedisProfile *forced = redis_profile_forced();
	const char *user = forced ? forced->sentinel_user : (redsem_sentinel_user ? redsem_sentinel_user : "");
	const char *argv[3] = {"AUTH", user, password};
	bool		have;
	bool		ok;

	if (!sentinel_password(password, sizeof(password), &have, &call->outcome))
		return false;
	if (!have)
		return true;
	if (user[0] != '\0')
		ok = redis_context_command(call, c, 3, argv, deadline, NULL);
	else
	{
		argv[1] = password;
		ok = redis_context_command(call, c, 2, argv, deadline, NULL);
	}
	explicit_bzero(password, sizeof(password));
	return ok;
}

/*
 * Ask one open sentinel (at where) for the primary's address.  Returns false with the
 * outcome filled if it cannot say; *unknown is set if it does not know the
 * name.
 */
static bool
ask_sentinel(RedisCall *call, redisContext *c, const SentinelAddr *where,
			 TimestampTz deadline, SentinelAddr *primary, bool *unknown)
{
	const char *argv[] = {"SENTINEL", "get-master-addr-by-name", master_in_force()};
	redisReply *r;
	bool		ok = false;
	long		port = 0;

	if (!sentinel_auth(call, c, deadline) ||
		!redis_context_command(call, c, 3, argv, deadline, &r))
	{
		char		why[sizeof(call->outcome.detail)];

		strlcpy(why, call->outcome.detail, sizeof(why));
		return redis_note(&call->outcome, call->outcome.status,
						  "sentinel %s:%d: %s", where->host, where->port, why);
	}
	if (r->type == REDIS_REPLY_NIL)
		*unknown = true;
	else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			 r->element[0]->type == REDIS_REPLY_STRING &&
			 r->element[1]->type == REDIS_REPLY_STRING &&
			 r->element[0]->len <= MAX_HOST_BYTES)
	{
		port = strtol(r->element[1]->str, NULL, 10);
		ok = port >= 1 && port <= 65535;
		strlcpy(primary->host, r->element[0]->str, sizeof(primary->host));
		primary->port = (int) port;
	}
	freeReplyObject(r);
	if (!ok)
	{
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED, *unknown ? "the sentinels do not monitor a primary named \"%s\" (redsem.sentinel_master)"
				 : "unexpected reply to SENTINEL get-master-addr-by-name \"%s\"",
				 master_in_force());
	}
	return ok;
}

/*
 * The primary's address, from the first sentinel that can name it.
 * False, with the last sentinel's trouble in the outcome (08001), if none.
 */
static bool
find_primary(RedisCall *call, TimestampTz deadline, SentinelAddr *primary)
{
	SentinelAddr addrs[MAX_SENTINELS];
	int			bad;
	int			n = parse_list(list_in_force(), addrs, &bad);
	bool		unknown = false;

	for (int i = 0; i < n; i++)
	{
		int			at = (answered_last + i) % n;
		TimestampTz now = redsem_now();
		volatile TimestampTz d = Min(redis_connect_deadline(deadline),
									 deadline > now ? now + (deadline - now) / (n - i) : deadline);
		redisContext *c = redis_open_context(call, addrs[at].host, addrs[at].port,
											 NULL, d);
		bool		ok;

		if (c == NULL)
			continue;
		PG_TRY();
		{
			ok = ask_sentinel(call, c, &addrs[at], d, primary, &unknown);
		}
		PG_CATCH();
		{
			redis_close_context(c);
			PG_RE_THROW();
		}
		PG_END_TRY();
		redis_close_context(c);
		if (ok)
		{
			answered_last = at;
			return true;
		}
	}
	if (call->outcome.status == RS_OK || call->outcome.status == RS_CONNECT_FAILED)
	{
		char		last[sizeof(call->outcome.detail)];

		strlcpy(last, call->outcome.detail, sizeof(last));
		(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "no sentinel of redsem.sentinels named the primary: %s", last);
	}
	return false;
}

/*
 * True if the server on c says (ROLE) it is a primary.  A user not allowed
 * ROLE is taken at its word: a replica refuses every redsem write anyway
 * (READONLY), and conn.c follows that.
 */
static bool
is_primary(RedisCall *call, redisContext *c, TimestampTz deadline)
{
	const char *argv[] = {"ROLE"};
	redisReply *r;
	bool		ok;

	if (!redis_context_command(call, c, 1, argv, deadline, &r))
	{
		if (call->outcome.status != RS_AUTH_FAILED)
			return false;
		call->outcome.status = RS_OK;
		return true;
	}
	ok = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
		r->element[0]->type == REDIS_REPLY_STRING &&
		strcmp(r->element[0]->str, "master") == 0;
	freeReplyObject(r);
	if (!ok)
	{
		(void) redis_note(&call->outcome, RS_UNAVAILABLE, "the sentinels name %s as primary \"%s\", but it is not a primary (a failover is in progress)",
				 last_primary, master_in_force());
	}
	return ok;
}

/*
 * The named primary could not be reached, or broke off while being set up:
 * the sentinels have not noticed a failover yet, so this is worth trying
 * again (RS_UNAVAILABLE).  Authentication and other refusals stay as they
 * are.
 */
static void
primary_unreachable(RedisCall *call)
{
	char		why[sizeof(call->outcome.detail)];

	if (call->outcome.status != RS_CONNECT_FAILED &&
		call->outcome.status != RS_LOST &&
		call->outcome.status != RS_TIMED_OUT)
		return;
	strlcpy(why, call->outcome.detail, sizeof(why));
	(void) redis_note(&call->outcome, RS_UNAVAILABLE, "the sentinels name %s as primary \"%s\", but it cannot be reached (a failover may be in progress): %s",
			 last_primary, master_in_force(), why);
}

/*
 * A connection to the primary at addr, its session set up (in broker mode:
 * a link to the broker for it); NULL if none
 */
static redisContext *
connect_primary(RedisCall *call, const SentinelAddr *addr, TimestampTz deadline)
{
	redisContext *c = redis_open_target(call, addr->host, addr->port, NULL, deadline);
	bool		ok;

	if (c == NULL)
	{
		primary_unreachable(call);
		return NULL;
	}
	PG_TRY();
	{
		ok = is_primary(call, c, deadline);
	}
	PG_CATCH();
	{
		redis_close_context(c);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!ok)
	{
		primary_unreachable(call);
		redis_close_context(c);
		return NULL;
	}
	return c;
}

/* host and port as "host:port" ("[host]:port" for IPv6) into buf */
static void
sentinel_format_address(char *buf, size_t len, const char *host, int port)
{
	if (strchr(host, ':') != NULL)
		snprintf(buf, len, "[%s]:%d", host, port);
	else
		snprintf(buf, len, "%s:%d", host, port);
}

/* find_primary, its answer kept as the primary last named (last_primary) */
static bool
find_named_primary(RedisCall *call, TimestampTz deadline, SentinelAddr *primary)
{
	if (!find_primary(call, deadline, primary))
		return false;
	sentinel_format_address(last_primary, sizeof(last_primary), primary->host, primary->port);
	return true;
}

/*
 * Connect to the primary the sentinels name, and set up its session.
 * Returns NULL with the outcome filled on failure: RS_UNAVAILABLE while a
 * failover seems to run (worth asking again), anything else otherwise.
 */
redisContext *
sentinel_connect_primary(RedisCall *call, TimestampTz deadline)
{
	SentinelAddr primary;

	if (!find_named_primary(call, deadline, &primary))
		return NULL;
	return connect_primary(call, &primary, redis_connect_deadline(deadline));
}

/*
 * Ask the sentinels (only) where the primary is: true with its address
 * (also sentinel_last_primary()), or false with the outcome filled
 */
bool
sentinel_ask_primary(RedisCall *call, TimestampTz deadline)
{
	SentinelAddr primary;

	return find_named_primary(call, deadline, &primary);
}
