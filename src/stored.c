/*
 * stored.c
 *		Configuration kept with a semaphore in Redis, for every server:
 *		storing its limit, its rate and its reserve (redsem_admin).
 *		Reading them back is in observe.c.
 */
#include "postgres.h"

#include <math.h>

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "bounds.h"
#include "hold.h"
#include "script.h"
#include "queue_fleet.h"
#include "shmem.h"
#include "sqlargs.h"
#include "timing.h"

PG_FUNCTION_INFO_V1(redsem_set_limit);
PG_FUNCTION_INFO_V1(redsem_set_adaptive_limit);
PG_FUNCTION_INFO_V1(redsem_set_rate);
PG_FUNCTION_INFO_V1(redsem_set_reserve);
PG_FUNCTION_INFO_V1(redsem_set_tenant_weight);

/* The slowest rate: one admission a week (the script takes up to 1e12 us) */
#define RATE_MAX_US			(7 * USECS_PER_DAY)
/* The largest burst */
#define RATE_MAX_BURST		100000
/* The longest rate text kept (the script takes up to 64 bytes) */
#define RATE_MAX_TEXT		40

/* A unit a rate may be given in, its length in microseconds, and how it is shown */
typedef struct RateUnit
{
	const char *name;
	int64		us;
	const char *shown;
} RateUnit;

static const RateUnit rate_units[] = {
	{"s", USECS_PER_SEC, "s"}, {"sec", USECS_PER_SEC, "s"}, {"second", USECS_PER_SEC, "s"},
	{"min", USECS_PER_MINUTE, "min"}, {"minute", USECS_PER_MINUTE, "min"},
	{"h", USECS_PER_HOUR, "h"}, {"hour", USECS_PER_HOUR, "h"},
	{"d", USECS_PER_DAY, "d"}, {"day", USECS_PER_DAY, "d"},
};

/* The unit named by s (a trailing "s" allowed after a long name), or NULL */
static const RateUnit *
rate_unit(const char *s)
{
	size_t		len = strlen(s);

	for (int i = 0; i < (int) lengthof(rate_units); i++)
	{
		size_t		n = strlen(rate_units[i].name);

		if (pg_strcasecmp(s, rate_units[i].name) == 0 ||
			(n > 1 && len == n + 1 && pg_strncasecmp(s, rate_units[i].name, n) == 0 &&
			 (s[n] == 's' || s[n] == 'S')))
			return &rate_units[i];
	}
	return NULL;
}

/* text with the spaces at both ends removed, in place */
static char *
strip_spaces(char *text)
{
	char	   *end = text + strlen(text);

	while (*text == ' ')
		text++;
	while (end > text && end[-1] == ' ')
		*--end = '\0';
	return text;
}

/* Raise the error for a rate that does not parse */
static void
reject_rate(const char *text)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid rate \"%s\"", strlen(text) > RATE_MAX_TEXT ? "(too long)" : text),
			 errdetail("A rate is a number of admissions per unit of time: \"100/s\", \"10/min\", \"2.5/hour\" or \"1000/day\".")));
}

/*
 * Parse "<number>/<unit>" into microseconds per admission, rounded up (a
 * whole microsecond never admits faster than the rate written: "3/s" is
 * one every 333334 us; helper-162: rounded to the nearest, "1999999/s"
 * passed as 1 us and was enforced as 1000000/s while shown as written);
 * raise 22023 for anything else, or a rate out of range.  *shown: the
 * rate as redsem_rate() shows it ("2.5/h").
 */
static int64
parse_rate(const char *text, char **shown)
{
	char	   *copy = pstrdup(text);
	char	   *slash = strchr(copy, '/');
	char	   *end;
	const RateUnit *unit;
	double		count;
	double		us;

	if (strlen(text) > RATE_MAX_TEXT || slash == NULL)
		reject_rate(text);
	*slash = '\0';
	errno = 0;
	count = strtod(copy, &end);
	while (*end == ' ')
		end++;
	if (end == copy || *end != '\0' || errno != 0 || !isfinite(count) ||
		strspn(copy, " 0123456789.") != strlen(copy))
		reject_rate(text);
	unit = rate_unit(strip_spaces(slash + 1));
	if (unit == NULL)
		reject_rate(text);
	us = count > 0 ? (double) unit->us / count : 0;
	if (count <= 0 || us < 1 || us > RATE_MAX_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate \"%s\" is out of range", text),
				 errdetail("A rate must be between one admission a week and 1000000 a second.")));
	*shown = psprintf("%s/%s", strip_spaces(copy), unit->shown);
	/* (less the division's own error: "0.1/s" is 10 s, not 10 s and 1 us) */
	return (int64) ceil(us * (1 - 1e-15));
}


/*
 * redsem_set_limit(name, max_holders): store a semaphore's limit in Redis
 * for every server (NULL: remove it).  For superusers and members of
 * redsem_admin (require_admin).  Logged.
 */
Datum
redsem_set_limit(PG_FUNCTION_ARGS)
{
	char	   *name;
	int			max_holders;
	RedisCall	call = REDIS_SQL_CALL;
	SemLimit	limit;

	require_admin_for("set the stored limit of a redsem semaphore", fcinfo);
	name = name_arg(fcinfo, 0);
	max_holders = PG_ARGISNULL(1) ? 0 : count_arg(fcinfo, 1, "max_holders");
	hold_init();
	/*
	 * A limit set by hand ends an adaptive one: its mark goes first, so that
	 * an adaptive limit set meanwhile (mark after state) keeps its mark
	 */
	(void) sem_adapt_note(&call, name, false);
	/* (a queue defined in Redis: its definition changes, cap included) */
	if (queue_fleet_set_limit(name, max_holders, "redsem_set_limit"))
		PG_RETURN_VOID();
	(void) sem_set_limit(&call, name, max_holders, false, &limit);
	sem_pin_configured(&call, name);
	if (max_holders > 0)
		ereport(LOG,
				(errmsg("redsem: limit of semaphore \"%s\" set to %d by role \"%s\"",
						name, max_holders, GetUserNameFromId(GetUserId(), false))));
	else
		ereport(LOG,
				(errmsg("redsem: stored limit of semaphore \"%s\" removed by role \"%s\"",
						name, GetUserNameFromId(GetUserId(), false))));
	PG_RETURN_VOID();
}

/*
 * An adaptive limit of a statement queue that Redis defines, fixed where it
 * is now: its definition's active_statements becomes that limit, cap
 * included, as redsem_set_limit does (the keepers keep each queue's cap at
 * its definition's: fixing the limit alone, they would set it back).  The
 * definition first, so that a change refused (a concurrent change, a
 * restore) leaves the limit adaptive.  False if not such a queue (or not
 * adaptive): the caller fixes the limit itself.
 */
static bool
fix_queue_where_it_is(RedisCall *call, const char *name)
{
	SemAdapt	cur;

	/* (no look at a semaphore that is no queue's) */
	if (redsem_queue_of_semaphore(name) == NULL)
		return false;
	if (!sem_adapt(call, name, &cur) || cur.min <= 0 || cur.limit <= 0 ||
		!queue_fleet_set_limit(name, (int) Min(cur.limit, INT_MAX),
							   "its adaptive limit fixed by redsem_set_adaptive_limit"))
		return false;
	ereport(LOG,
			(errmsg("redsem: limit of semaphore \"%s\" fixed at " INT64_FORMAT " by role \"%s\"",
					name, cur.limit, GetUserNameFromId(GetUserId(), false))));
	return true;
}

/*
 * redsem_set_adaptive_limit(name, min_holders, max_holders, start_holders):
 * make a semaphore's stored limit adaptive within [min, max] for every
 * server, starting at start_holders (NULL: where the limit is, brought
 * into the bounds); min and max NULL: fixed where it is now.  For
 * superusers and members of redsem_admin.  Logged.
 */
Datum
redsem_set_adaptive_limit(PG_FUNCTION_ARGS)
{
	char	   *name;
	int			lo = 0;
	int			hi = 0;
	int			start = 0;
	RedisCall	call = REDIS_SQL_CALL;
	SemAdapt	now;

	require_admin_for("set the adaptive limit of a redsem semaphore", fcinfo);
	name = name_arg(fcinfo, 0);
	if (PG_ARGISNULL(1) != PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"min_holders\" and \"max_holders\" must both be given, or both be NULL"),
				 errhint("Pass NULL for both to make the limit fixed where it is.")));
	if (!PG_ARGISNULL(1))
	{
		lo = count_arg(fcinfo, 1, "min_holders");
		hi = count_arg(fcinfo, 2, "max_holders");
		if (lo > hi)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("\"min_holders\" (%d) is above \"max_holders\" (%d)", lo, hi)));
		if (!PG_ARGISNULL(3))
			start = count_arg(fcinfo, 3, "start_holders");
	}
	else if (!PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"start_holders\" needs \"min_holders\" and \"max_holders\"")));
	hold_init();
	/*
	 * The state, then the mark that has the keepers tick it; fixing it, the
	 * mark first: then of two administrators' calls at once, whichever order
	 * their steps take, an adaptive limit has its mark (a mark left on a
	 * fixed one only costs a look)
	 */
	if (lo == 0)
	{
		(void) sem_adapt_note(&call, name, false);
		if (fix_queue_where_it_is(&call, name))
			PG_RETURN_VOID();
	}
	(void) sem_set_adapt(&call, name, lo, hi, start, &now);
	if (lo > 0)
	{
		(void) sem_adapt_note(&call, name, true);
		shared_keeper_ask_touch();	/* (this server's keeper ticks it at once) */
	}
	sem_pin_configured(&call, name);
	if (lo > 0)
		ereport(LOG,
				(errmsg("redsem: limit of semaphore \"%s\" set adaptive between %d and %d by role \"%s\" (at " INT64_FORMAT " now)",
						name, lo, hi, GetUserNameFromId(GetUserId(), false), now.limit)));
	else if (now.limit > 0)
		ereport(LOG,
				(errmsg("redsem: limit of semaphore \"%s\" fixed at " INT64_FORMAT " by role \"%s\"",
						name, now.limit, GetUserNameFromId(GetUserId(), false))));
	PG_RETURN_VOID();
}

/*
 * redsem_set_rate(name, rate, burst): store a semaphore's rate in Redis for
 * every server (rate NULL: remove it).  For superusers and members of
 * redsem_admin.  Logged.
 */
Datum
redsem_set_rate(PG_FUNCTION_ARGS)
{
	char	   *name;
	RedisCall	call = REDIS_SQL_CALL;
	SemRate		set = {0};
	SemRate		rate;

	require_admin_for("set the rate of a redsem semaphore", fcinfo);
	name = name_arg(fcinfo, 0);
	if (!PG_ARGISNULL(1))
	{
		set.us = parse_rate(strip_spaces(text_to_cstring(PG_GETARG_TEXT_PP(1))), &set.text);
		if (PG_ARGISNULL(2))
			reject_null("burst");
		set.burst = PG_GETARG_INT32(2);
		if (set.burst < 1 || set.burst > RATE_MAX_BURST)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"burst\" is out of range"),
					 errdetail("\"burst\" must be between 1 and %d; it is " INT64_FORMAT ".",
							   RATE_MAX_BURST, set.burst)));
	}
	hold_init();
	(void) sem_set_rate(&call, name, &set, &rate);
	sem_pin_configured(&call, name);
	if (set.text != NULL)
		ereport(LOG,
				(errmsg("redsem: rate of semaphore \"%s\" set to %s (burst " INT64_FORMAT ") by role \"%s\"",
						name, set.text, set.burst, GetUserNameFromId(GetUserId(), false))));
	else
		ereport(LOG,
				(errmsg("redsem: stored rate of semaphore \"%s\" removed by role \"%s\"",
						name, GetUserNameFromId(GetUserId(), false))));
	PG_RETURN_VOID();
}

/*
 * redsem_set_reserve(name, permits, min_priority): keep permits of the
 * semaphore's limit for callers of priority min_priority and up, in Redis
 * for every server (permits NULL: remove the reserve).  For superusers and
 * members of redsem_admin.  Logged.
 */
Datum
redsem_set_reserve(PG_FUNCTION_ARGS)
{
	char	   *name;
	int			permits = 0;
	int			min_priority = 0;
	RedisCall	call = REDIS_SQL_CALL;
	SemReserve	reserve;

	require_admin_for("set the reserve of a redsem semaphore", fcinfo);
	name = name_arg(fcinfo, 0);
	if (!PG_ARGISNULL(1))
	{
		permits = count_arg(fcinfo, 1, "permits");
		if (PG_ARGISNULL(2))
			reject_null("min_priority");
		min_priority = PG_GETARG_INT32(2);
		if (min_priority < -REDSEM_MAX_PRIORITY || min_priority > REDSEM_MAX_PRIORITY)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"min_priority\" is out of range"),
					 errdetail("\"min_priority\" must be between %d and %d; it is %d.",
							   -REDSEM_MAX_PRIORITY, REDSEM_MAX_PRIORITY, min_priority)));
	}
	hold_init();
	(void) sem_set_reserve(&call, name, permits, min_priority, &reserve);
	sem_pin_configured(&call, name);
	if (permits > 0)
		ereport(LOG,
				(errmsg_plural("redsem: reserve of semaphore \"%s\" set to %d permit for priority %d and up by role \"%s\"",
							   "redsem: reserve of semaphore \"%s\" set to %d permits for priority %d and up by role \"%s\"",
							   permits, name, permits, min_priority,
							   GetUserNameFromId(GetUserId(), false))));
	else
		ereport(LOG,
				(errmsg("redsem: reserve of semaphore \"%s\" removed by role \"%s\"",
						name, GetUserNameFromId(GetUserId(), false))));
	PG_RETURN_VOID();
}

/*
 * redsem_set_tenant_weight(name, tenant, weight): the tenant's share of the
 * semaphore while tenants wait (I12), in Redis for every server (weight
 * NULL: remove it, making it 1).  For superusers and members of
 * redsem_admin.  Logged.
 */
Datum
redsem_set_tenant_weight(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *tenant;
	int			weight = 0;
	int64		now;
	RedisCall	call = REDIS_SQL_CALL;

	require_admin_for("set a tenant's weight on a redsem semaphore", fcinfo);
	name = name_arg(fcinfo, 0);
	if (PG_ARGISNULL(1))
		reject_null("tenant");
	tenant = tenant_arg(fcinfo, 1);
	if (!PG_ARGISNULL(2))
	{
		weight = PG_GETARG_INT32(2);
		if (weight < 1 || weight > REDSEM_MAX_WEIGHT)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"weight\" is out of range"),
					 errdetail("\"weight\" must be between 1 and %d; it is %d.",
							   REDSEM_MAX_WEIGHT, weight)));
	}
	hold_init();
	(void) sem_set_weight(&call, name, tenant, weight, &now);
	ereport(LOG,
			(errmsg("redsem: weight of tenant \"%s\" on semaphore \"%s\" set to %d by role \"%s\"",
					tenant, name, (int) now, GetUserNameFromId(GetUserId(), false))));
	PG_RETURN_VOID();
}
