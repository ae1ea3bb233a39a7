/*
 * observe.c
 *		Observability: this session's holds, a semaphore as Redis sees it,
 *		fencing tokens, keeper status and statistics.
 *
 * The C functions serve the SQL definitions of every installed version of
 * the extension (0.1.0's redsem_held() has no keeper_error column): they
 * fill as many columns as the caller's result type has.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_authid_d.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "bounds.h"
#include "clock.h"
#include "guc.h"
#include "hold.h"
#include "queue_conf.h"
#include "queue_fleet.h"
#include "script.h"
#include "shmem.h"
#include "sqlargs.h"
#include "textenc.h"

PG_FUNCTION_INFO_V1(redsem_held);
PG_FUNCTION_INFO_V1(redsem_holders);
PG_FUNCTION_INFO_V1(redsem_token);
PG_FUNCTION_INFO_V1(redsem_keeper_active);
PG_FUNCTION_INFO_V1(redsem_stats);
PG_FUNCTION_INFO_V1(redsem_stats_reset);
PG_FUNCTION_INFO_V1(redsem_limit);
PG_FUNCTION_INFO_V1(redsem_semaphore);
PG_FUNCTION_INFO_V1(redsem_rate);
PG_FUNCTION_INFO_V1(redsem_adaptive_limit);
PG_FUNCTION_INFO_V1(redsem_reserve);
PG_FUNCTION_INFO_V1(redsem_tenants);
PG_FUNCTION_INFO_V1(redsem_queues);
PG_FUNCTION_INFO_V1(redsem_server_holds);

#define HELD_COLUMNS	10
#define HOLDERS_COLUMNS	15
#define QUEUES_COLUMNS	19
#define SERVER_HOLDS_COLUMNS	11

/* An interval of ms milliseconds */
static Datum
interval_from_ms(int64 ms)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = ms * 1000;
	return IntervalPGetDatum(iv);
}

/* Put a row, using only the columns the caller's result type has */
static void
put_row(ReturnSetInfo *rsinfo, Datum *values, bool *nulls, int ncolumns)
{
	if (rsinfo->setDesc->natts > ncolumns)
		elog(ERROR, "redsem: the SQL definition has more columns than the library fills");
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* The one row a record-returning function answers, from values and nulls */
static Datum
one_row(FunctionCallInfo fcinfo, Datum *values, bool *nulls)
{
	TupleDesc	tupdesc;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "redsem: a function returning a record is declared otherwise");
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls));
}

/* redsem_held(): one row per slot this session holds */
Datum
redsem_held(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HeldInfo   *held;
	int			n;

	InitMaterializedSRF(fcinfo, 0);
	n = hold_snapshot(&held);
	for (int i = 0; i < n; i++)
	{
		Datum		values[HELD_COLUMNS];
		bool		nulls[HELD_COLUMNS] = {0};

		values[0] = text_datum_from_redis(held[i].name);
		values[1] = CStringGetTextDatum(held[i].id);
		values[2] = CStringGetTextDatum(held[i].scope);
		values[3] = TimestampTzGetDatum(held[i].acquired_at);
		values[4] = interval_from_ms(held[i].lease_ms);
		values[5] = TimestampTzGetDatum(held[i].expires_at);
		values[6] = Int64GetDatum(held[i].ticket);
		values[7] = BoolGetDatum(held[i].kept_alive);
		nulls[8] = (held[i].keeper_error == NULL);
		values[8] = nulls[8] ? (Datum) 0 : text_datum_from_redis(held[i].keeper_error);
		values[9] = Int32GetDatum(held[i].permits);
		put_row(rsinfo, values, nulls, HELD_COLUMNS);
	}
	return (Datum) 0;
}

/* Split s at '|' into at most nfields fields (the last takes the rest) */
static int
split_fields(char *s, char **fields, int nfields)
{
	int			n = 0;

	while (n < nfields - 1)
	{
		char	   *bar = strchr(s, '|');

		if (bar == NULL)
			break;
		*bar = '\0';
		fields[n++] = s;
		s = bar + 1;
	}
	fields[n++] = s;
	return n;
}

/* Text datum, or NULL for an empty or missing field */
static Datum
text_field(char **fields, int nfields, int i, bool *isnull)
{
	*isnull = (i >= nfields || fields[i][0] == '\0');
	return *isnull ? (Datum) 0 : text_datum_from_redis(fields[i]);
}

/*
 * One row of redsem_holders().  The holder id is what releases a slot, so
 * it is shown only to administrators and to the session that holds it;
 * the server names a host and port, so it is shown as pg_stat_activity
 * shows client_addr: to those and to members of pg_read_all_stats.
 */
static void
put_holder_row(ReturnSetInfo *rsinfo, const SemMember *m, int position,
			   TimestampTz now, bool admin, bool sees_servers)
{
	bool		own = hold_is_own(m->id);
	Datum		values[HOLDERS_COLUMNS];
	bool		nulls[HOLDERS_COLUMNS] = {0};
	char	   *info[6];
	char	   *origin[5];
	int			norigin = 0;
	int			ninfo = split_fields(pstrdup(m->info), info, 6);

	if (ninfo == 6)
		norigin = split_fields(info[5], origin, 5);

	values[0] = Int32GetDatum(position);
	values[1] = CStringGetTextDatum(m->waiting ? "waiting" : "holding");
	nulls[2] = !(admin || own);
	values[2] = nulls[2] ? (Datum) 0 : text_datum_from_redis(m->id);
	values[3] = Int64GetDatum(m->ticket);
	nulls[4] = m->waiting || m->ms_left < 0;
	values[4] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, m->ms_left));
	if (sees_servers || own)
		values[5] = text_field(origin, norigin, 0, &nulls[5]);
	else
		nulls[5] = true;
	nulls[6] = (norigin < 2 || origin[1][0] == '\0');
	values[6] = nulls[6] ? (Datum) 0 : Int32GetDatum(atoi(origin[1]));
	values[7] = text_field(origin, norigin, 2, &nulls[7]);
	values[8] = text_field(origin, norigin, 3, &nulls[8]);
	values[9] = text_field(origin, norigin, 4, &nulls[9]);
	values[10] = Int32GetDatum((int32) m->permits);
	nulls[11] = m->waiting || m->age_ms < 0;
	values[11] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, -m->age_ms));
	nulls[12] = !m->waiting || m->age_ms < 0;
	values[12] = values[11];
	nulls[13] = ninfo < 6;
	values[13] = nulls[13] ? (Datum) 0 : Int32GetDatum(atoi(info[3]));
	values[14] = text_field(info, ninfo, 4, &nulls[14]);
	put_row(rsinfo, values, nulls, HOLDERS_COLUMNS);
}

/* redsem_holders(name): holders then waiters, in line order */
Datum
redsem_holders(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name = name_arg(fcinfo, 0);
	RedisCall	call = REDIS_SQL_CALL;
	SemMember  *members;
	int			count;
	bool		admin = redsem_is_admin();
	bool		sees_servers = admin ||
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	TimestampTz now;

	InitMaterializedSRF(fcinfo, 0);
	hold_init();
	(void) sem_list(&call, name, &members, &count);
	now = GetCurrentTimestamp();
	for (int i = 0; i < count; i++)
		put_holder_row(rsinfo, &members[i], i + 1, now, admin, sees_servers);
	return (Datum) 0;
}

/* redsem_token(name, id): the holder's fencing token, or NULL */
Datum
redsem_token(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	char	   *id = id_arg(fcinfo, 1);
	RedisCall	call = REDIS_SQL_CALL;
	int64		token;

	hold_init();
	(void) sem_token(&call, name, id, &token);
	if (token <= 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/* redsem_keeper_active(): is the keeper keeping leases alive? */
Datum
redsem_keeper_active(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(shared_keeper_is_active());
}

/* The counters of redsem_stats, in its column order after name */
static const StatField stats_columns[] = {
	STAT_ACQUIRED, STAT_REFUSED, STAT_WAITED, STAT_WAIT_TIMEOUTS,
	STAT_WAIT_TIME_MS, STAT_RELEASED, STAT_EXPIRED, STAT_LOST,
	STAT_REDIS_ERRORS, STAT_ACQUIRED_PERMITS,
	STAT_WAITS_LE_1MS, STAT_WAITS_LE_10MS, STAT_WAITS_LE_100MS,
	STAT_WAITS_LE_1S, STAT_WAITS_LE_10S, STAT_WAITS_OVER_10S,
	STAT_WAIT_MAX_MS,
};

/* redsem_stats(): the per-semaphore counters (needs preloading) */
Datum
redsem_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SemStats   *stats;
	int			n;

	n = stats_snapshot(&stats);
	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		Datum		values[lengthof(stats_columns) + 2];
		bool		nulls[lengthof(stats_columns) + 2] = {0};

		/* the semaphores the table had no room for: a NULL name */
		nulls[0] = (stats[i].name[0] == '\0');
		values[0] = nulls[0] ? (Datum) 0 : text_datum_from_redis(stats[i].name);
		for (int c = 0; c < (int) lengthof(stats_columns); c++)
		{
			StatField	f = stats_columns[c];

			values[c + 1] = (f == STAT_WAIT_TIME_MS || f == STAT_WAIT_MAX_MS) ?
				interval_from_ms(stats[i].counters[f]) :
				Int64GetDatum(stats[i].counters[f]);
		}
		/* last: semaphores of two key prefixes are two semaphores */
		nulls[lengthof(stats_columns) + 1] = nulls[0];
		values[lengthof(stats_columns) + 1] = text_datum_from_redis(stats[i].prefix);
		put_row(rsinfo, values, nulls, lengthof(stats_columns) + 2);
	}
	return (Datum) 0;
}

/* redsem_stats_reset(name DEFAULT NULL): forget statistics */
Datum
redsem_stats_reset(PG_FUNCTION_ARGS)
{
	require_admin_for("reset redsem statistics", fcinfo);
	/* (a name no semaphore can have is an error, not a reset of nothing) */
	stats_reset(PG_ARGISNULL(0) ? NULL : name_arg(fcinfo, 0));
	PG_RETURN_VOID();
}

/* redsem_limit(name): the semaphore's stored limit, or NULL */
Datum
redsem_limit(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	RedisCall	call = REDIS_SQL_CALL;
	SemLimit	limit;

	hold_init();
	(void) sem_limit(&call, name, &limit);
	if (limit.stored <= 0)
		PG_RETURN_NULL();
	PG_RETURN_INT32((int32) Min(limit.stored, PG_INT32_MAX));
}

/*
 * redsem_semaphore(name): its stored limit, the limit in effect, the
 * permits held and the members in line, as Redis sees them now; for an
 * adaptive limit, its bounds, why it last moved and when
 */
Datum
redsem_semaphore(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	RedisCall	call = REDIS_SQL_CALL;
	SemSummary	s;
	Datum		values[8];
	bool		nulls[8] = {0};

	hold_init();
	(void) sem_summary(&call, name, &s);
	nulls[0] = (s.stored_limit <= 0);
	values[0] = Int32GetDatum((int32) Min(s.stored_limit, PG_INT32_MAX));
	nulls[1] = (s.limit_in_effect <= 0);
	values[1] = Int32GetDatum((int32) Min(s.limit_in_effect, PG_INT32_MAX));
	values[2] = Int64GetDatum(s.permits_held);
	values[3] = Int64GetDatum(s.waiting);
	nulls[4] = nulls[5] = s.adaptive_min <= 0;
	values[4] = Int32GetDatum((int32) s.adaptive_min);
	values[5] = Int32GetDatum((int32) s.adaptive_max);
	nulls[6] = s.last_move == NULL;
	values[6] = nulls[6] ? (Datum) 0 : CStringGetTextDatum(s.last_move);
	nulls[7] = s.last_move_ms < 0;
	values[7] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																-s.last_move_ms));
	PG_RETURN_DATUM(one_row(fcinfo, values, nulls));
}

/* An interval of us microseconds, or NULL (*isnull) if us < 0 */
static Datum
interval_from_us(int64 us, bool *isnull)
{
	Interval   *iv = palloc0(sizeof(Interval));

	*isnull = us < 0;
	iv->time = us;
	return IntervalPGetDatum(iv);
}

/*
 * redsem_adaptive_limit(name): an adaptive limit as its controller sees it
 * (I16): the limit in effect, its bounds, the best recent and the smoothed
 * mean hold time, the last interval's mean hold and releases, the highest
 * pressure reported (1: a server's line) and by how many servers, why the
 * limit last moved and when.  NULLs but the limit if it is not adaptive.
 * Anybody may read it.
 */
Datum
redsem_adaptive_limit(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	RedisCall	call = REDIS_SQL_CALL;
	SemAdapt	a;
	Datum		values[11] = {0};
	bool		nulls[11] = {0};

	hold_init();
	(void) sem_adapt(&call, name, &a);
	nulls[0] = a.limit <= 0;
	values[0] = Int32GetDatum((int32) Min(a.limit, PG_INT32_MAX));
	if (a.min <= 0)
	{
		for (int i = 1; i < 11; i++)
			nulls[i] = true;
		PG_RETURN_DATUM(one_row(fcinfo, values, nulls));
	}
	values[1] = Int32GetDatum((int32) a.min);
	values[2] = Int32GetDatum((int32) a.max);
	values[3] = interval_from_us(a.base_us, &nulls[3]);
	values[4] = interval_from_us(a.mean_us, &nulls[4]);
	values[5] = interval_from_us(a.last_us, &nulls[5]);
	values[6] = Int64GetDatum(a.last_n);
	nulls[7] = a.pressure < 0;
	values[7] = Float8GetDatum((double) a.pressure / 1000.0);
	values[8] = Int32GetDatum((int32) a.servers);
	nulls[9] = a.why == NULL;
	values[9] = nulls[9] ? (Datum) 0 : CStringGetTextDatum(a.why);
	nulls[10] = a.moved_ms < 0;
	values[10] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																 -a.moved_ms));
	PG_RETURN_DATUM(one_row(fcinfo, values, nulls));
}

/*
 * The statistics of semaphore name among stats[0..n-1], added up over its
 * key prefixes (a queue's sessions may use several), or NULL
 */
static const SemStats *
find_stats(const SemStats *stats, int n, const char *name)
{
	SemStats   *sum = NULL;

	for (int i = 0; i < n; i++)
	{
		if (strcmp(stats[i].name, name) != 0)
			continue;
		if (sum == NULL)
		{
			sum = palloc(sizeof(SemStats));
			*sum = stats[i];
			continue;
		}
		for (int f = 0; f < STAT_NFIELDS; f++)
			sum->counters[f] = f == STAT_WAIT_MAX_MS ?
				Max(sum->counters[f], stats[i].counters[f]) :
				sum->counters[f] + stats[i].counters[f];
	}
	return sum;
}

/* sem_limit of a queue's semaphore, where its slots are taken (queue.c) */
static bool
queue_sem_limit(RedisCall *call, const char *sem, SemLimit *limit)
{
	volatile bool asked = false;

	redsem_prefix_stand_in(queue_fleet_prefix());
	PG_TRY();
	{
		asked = sem_limit(call, sem, limit);
	}
	PG_FINALLY();
	{
		redsem_prefix_stand_in(NULL);
	}
	PG_END_TRY();
	return asked;
}

/*
 * redsem_queues(): every statement queue in effect here (defined in Redis,
 * or by this server's redsem.queues), with what
 * Redis says now (NULL if Redis cannot be asked) and this server's
 * statistics.
 */
Datum
redsem_queues(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const QueueConfig *conf = queue_config();
	SemStats   *stats;
	int			nstats;

	if (!redsem_preloaded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("statement queues need redsem in shared_preload_libraries"),
				 errdetail_plural("redsem.queues defines %d queue, which this server does not apply: statements run without waiting for a queue slot.",
								  "redsem.queues defines %d queues, which this server does not apply: statements run without waiting for a queue slot.",
								  conf ? conf->count : 0, conf ? conf->count : 0),
				 errhint("Add redsem to shared_preload_libraries and restart the server.")));
	nstats = stats_snapshot(&stats);
	InitMaterializedSRF(fcinfo, 0);
	hold_init();
	for (int i = 0; conf != NULL && i < conf->count; i++)
	{
		const QueueDef *q = &conf->queues[i];
		char	   *sem = psprintf(REDSEM_QUEUE_PREFIX "%s", q->name);
		const SemStats *st = find_stats(stats, nstats, sem);
		RedisCall	call = REDIS_SQL_CALL;
		SemLimit	limit;
		Datum		values[QUEUES_COLUMNS];
		bool		nulls[QUEUES_COLUMNS] = {0};
		bool		asked;

		call.elevel = LOG;		/* a row without the live figures */
		asked = queue_sem_limit(&call, sem, &limit);
		values[0] = text_datum_from_redis(q->name);
		values[1] = Int32GetDatum(q->active);
		values[2] = Float8GetDatum(q->min_cost);
		nulls[3] = (q->max_wait_ms < 0);
		values[3] = interval_from_ms(q->max_wait_ms);
		values[4] = CStringGetTextDatum(q->run_on_error ? "run" : "fail");
		values[5] = BoolGetDatum(q->utility);
		nulls[6] = (q->apps[0] == '\0');
		values[6] = text_datum_from_redis(q->apps);
		nulls[7] = (q->app_priorities[0] == '\0');
		values[7] = text_datum_from_redis(q->app_priorities);
		nulls[8] = nulls[9] = !asked;
		values[8] = Int64GetDatum(asked ? limit.held : 0);
		values[9] = Int64GetDatum(asked ? limit.waiting : 0);
		values[10] = Int64GetDatum(st ? st->counters[STAT_ACQUIRED] : 0);
		values[11] = Int64GetDatum(st ? st->counters[STAT_WAITED] : 0);
		values[12] = Int64GetDatum(st ? st->counters[STAT_WAIT_TIMEOUTS] : 0);
		values[13] = interval_from_ms(st ? st->counters[STAT_WAIT_TIME_MS] : 0);
		values[14] = Int64GetDatum(st ? st->counters[STAT_BYPASSED] : 0);
		values[15] = Int64GetDatum(st ? st->counters[STAT_UNQUEUED] : 0);
		/* the cap in effect for every server: the stored limit (queue_caps.c) */
		nulls[16] = !asked || limit.stored <= 0;
		values[16] = Int32GetDatum((int32) (asked ? limit.stored : 0));
		/* where the definition comes from, and whether it hides this server's */
		values[17] = CStringGetTextDatum(q->fleet ? "redis" : "redsem.queues");
		values[18] = BoolGetDatum(q->setting_differs);
		put_row(rsinfo, values, nulls, QUEUES_COLUMNS);
	}
	return (Datum) 0;
}

/* What a hold table entry is doing, for redsem_server_holds() */
static const char *
server_hold_state(const SharedHold *h)
{
	if (h->watching)
		return "watching";
	if (h->abandoned)
		return "releasing";
	if (h->lost)
		return "lost";
	switch ((HoldPhase) h->phase)
	{
		case PHASE_PENDING:
			return "asking";
		case PHASE_WAITING:
			return "waiting";
		case PHASE_RELEASING:
			return "releasing";
		case PHASE_HELD:
			break;
	}
	return "holding";
}

/* Why the keeper does not keep an entry alive now, or NULL */
static const char *
server_hold_trouble(const SharedHold *h)
{
	if (h->lost && h->forced)
		return "the slot was lost: an administrator force-released it (redsem_force_release)";
	if (h->lost)
		return "the slot was lost: Redis no longer had it when the keeper refreshed it";
	if (h->unkept)
		return "taken under other connection settings than the keeper's";
	if (h->failures > 0 && h->trouble[0] != '\0')
		return h->trouble;
	return NULL;
}

/*
 * redsem_server_holds(): every hold and place in line of this server's
 * sessions, from the keeper's table (for pg_monitor and redsem_admin; see
 * the view redsem_activity).  Ids only for administrators and their own
 * session.
 */
Datum
redsem_server_holds(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		admin = redsem_is_admin();
	SharedHold *all;
	int			n;

	if (!shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("redsem_activity requires redsem in shared_preload_libraries"),
				 errdetail("Without it, a server keeps no table of its sessions' slots."),
				 errhint("Add redsem to shared_preload_libraries and restart the server.")));
	InitMaterializedSRF(fcinfo, 0);
	n = shared_hold_snapshot(&all);
	for (int i = 0; i < n; i++)
	{
		const SharedHold *h = &all[i];
		Datum		values[SERVER_HOLDS_COLUMNS];
		bool		nulls[SERVER_HOLDS_COLUMNS] = {0};
		bool		holding = (h->phase == PHASE_HELD);
		bool		in_line = (h->phase == PHASE_PENDING || h->phase == PHASE_WAITING);
		const char *trouble = server_hold_trouble(h);

		values[0] = Int32GetDatum(h->pid);
		values[1] = text_datum_from_redis(h->name);
		nulls[2] = !(admin || h->pid == MyProcPid);
		values[2] = nulls[2] ? (Datum) 0 : CStringGetTextDatum(h->id);
		values[3] = CStringGetTextDatum(h->scope == HOLD_XACT ? "transaction" :
										h->scope == HOLD_STATEMENT ? "statement" : "session");
		values[4] = CStringGetTextDatum(server_hold_state(h));
		values[5] = Int32GetDatum(h->permits);
		values[6] = interval_from_ms(h->lease_ms);
		nulls[7] = in_line;
		values[7] = TimestampTzGetDatum(redsem_wall_time(h->acquired_at));
		nulls[8] = !in_line;
		values[8] = TimestampTzGetDatum(redsem_wall_time(h->acquired_at));
		nulls[9] = !holding || h->abandoned || h->lost;
		values[9] = TimestampTzGetDatum(redsem_wall_time(TimestampTzPlusMilliseconds(h->refreshed_at, h->lease_ms)));
		nulls[10] = (trouble == NULL);
		values[10] = nulls[10] ? (Datum) 0 : text_datum_from_redis(trouble);
		put_row(rsinfo, values, nulls, SERVER_HOLDS_COLUMNS);
	}
	return (Datum) 0;
}

/*
 * redsem_rate(name): the stored rate as given, its burst, and how long until
 * it lets the next caller in; NULLs if none.  Anybody may read it.
 */
Datum
redsem_rate(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	RedisCall	call = REDIS_SQL_CALL;
	SemRate		rate;
	Datum		values[3] = {0};
	bool		nulls[3] = {true, true, true};

	hold_init();
	(void) sem_rate(&call, name, &rate);
	if (rate.text != NULL)
	{
		values[0] = CStringGetTextDatum(rate.text);
		values[1] = Int32GetDatum((int32) rate.burst);
		values[2] = interval_from_ms(rate.wait_ms);
		nulls[0] = nulls[1] = nulls[2] = false;
	}
	PG_RETURN_DATUM(one_row(fcinfo, values, nulls));
}

/*
 * redsem_reserve(name): the stored reserve's permits, the priority they are
 * kept for, and the permits callers of that priority hold; NULLs if none.
 * Anybody may read it.
 */
Datum
redsem_reserve(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	RedisCall	call = REDIS_SQL_CALL;
	SemReserve	reserve;
	Datum		values[3] = {0};
	bool		nulls[3] = {true, true, true};

	hold_init();
	(void) sem_reserve(&call, name, &reserve);
	if (reserve.permits > 0)
	{
		values[0] = Int32GetDatum((int32) reserve.permits);
		values[1] = Int32GetDatum((int32) reserve.min_priority);
		values[2] = Int64GetDatum(reserve.held);
		nulls[0] = nulls[1] = nulls[2] = false;
	}
	PG_RETURN_DATUM(one_row(fcinfo, values, nulls));
}

/*
 * redsem_tenants(name): each tenant holding, waiting or with a stored
 * weight (NULL: the callers without one), its weight, the permits it
 * holds and its waiters.  Anybody may read it.
 */
Datum
redsem_tenants(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name = name_arg(fcinfo, 0);
	RedisCall	call = REDIS_SQL_CALL;
	SemTenant  *tenants;
	int			count;

	InitMaterializedSRF(fcinfo, 0);
	hold_init();
	(void) sem_tenants(&call, name, &tenants, &count);
	for (int i = 0; i < count; i++)
	{
		Datum		values[4];
		bool		nulls[4] = {tenants[i].tenant == NULL, false, false, false};

		values[0] = nulls[0] ? (Datum) 0 : text_datum_from_redis(tenants[i].tenant);
		values[1] = Int32GetDatum((int32) tenants[i].weight);
		values[2] = Int64GetDatum(tenants[i].held);
		values[3] = Int64GetDatum(tenants[i].waiting);
		put_row(rsinfo, values, nulls, 4);
	}
	return (Datum) 0;
}
