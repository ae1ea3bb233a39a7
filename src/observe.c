/*
 * observe.c
 *		Observability: this session's holds, a semaphore as Redis sees it,
 *		fencing tokens, keeper status and statistics.
 */
#include "postgres.h"

#include "hiredis.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "redsem.h"

PG_FUNCTION_INFO_V1(redsem_held);
PG_FUNCTION_INFO_V1(redsem_holders);
PG_FUNCTION_INFO_V1(redsem_token);
PG_FUNCTION_INFO_V1(redsem_keeper_active);
PG_FUNCTION_INFO_V1(redsem_stats);
PG_FUNCTION_INFO_V1(redsem_stats_reset);

/* An interval of ms milliseconds */
static Datum
interval_from_ms(int64 ms)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = ms * 1000;
	return IntervalPGetDatum(iv);
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
		Datum		values[8];
		bool		nulls[8] = {0};

		values[0] = CStringGetTextDatum(held[i].name);
		values[1] = CStringGetTextDatum(held[i].id);
		values[2] = CStringGetTextDatum(held[i].xact ? "transaction" : "session");
		values[3] = TimestampTzGetDatum(held[i].acquired_at);
		values[4] = interval_from_ms(held[i].lease_ms);
		values[5] = TimestampTzGetDatum(held[i].expires_at);
		values[6] = Int64GetDatum(held[i].ticket);
		values[7] = BoolGetDatum(held[i].kept_alive && !held[i].lost);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
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
	return *isnull ? (Datum) 0 : CStringGetTextDatum(fields[i]);
}

/* One row of redsem_holders() from one element of the "list" reply */
static void
put_holder_row(ReturnSetInfo *rsinfo, redisReply *e, int position,
			   TimestampTz now)
{
	Datum		values[10];
	bool		nulls[10] = {0};
	char	   *info[4];
	char	   *origin[5];
	int			ninfo;
	int			norigin = 0;
	bool		waiting = strcmp(e->element[3]->str, "1") == 0;
	int64		left = strtoll(e->element[2]->str, NULL, 10);

	ninfo = split_fields(pstrdup(e->element[4]->str), info, 4);
	if (ninfo == 4)
		norigin = split_fields(info[3], origin, 5);

	values[0] = Int32GetDatum(position);
	values[1] = CStringGetTextDatum(waiting ? "waiting" : "holding");
	values[2] = CStringGetTextDatum(e->element[0]->str);
	values[3] = Int64GetDatum(strtoll(e->element[1]->str, NULL, 10));
	nulls[4] = waiting || left < 0;
	values[4] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, left));
	values[5] = text_field(origin, norigin, 0, &nulls[5]);
	nulls[6] = (norigin < 2 || origin[1][0] == '\0');
	values[6] = nulls[6] ? (Datum) 0 : Int32GetDatum(atoi(origin[1]));
	values[7] = text_field(origin, norigin, 2, &nulls[7]);
	values[8] = text_field(origin, norigin, 3, &nulls[8]);
	values[9] = text_field(origin, norigin, 4, &nulls[9]);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* True if e has the shape {id, ticket, ms, waiting, info}, all strings */
static bool
is_holder_element(redisReply *e)
{
	if (e->type != REDIS_REPLY_ARRAY || e->elements != 5)
		return false;
	for (int i = 0; i < 5; i++)
		if (e->element[i]->type != REDIS_REPLY_STRING)
			return false;
	return true;
}

/* redsem_holders(name): holders then waiters, in line order */
Datum
redsem_holders(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name = name_arg(fcinfo, 0);
	redisReply *reply;
	TimestampTz now;

	InitMaterializedSRF(fcinfo, 0);
	hold_init();
	reply = sem_list(name);
	now = GetCurrentTimestamp();
	if (reply->type == REDIS_REPLY_ARRAY)
	{
		int			position = 0;

		/* palloc failures would leak the reply; it is small, so accept that */
		for (size_t i = 0; i < reply->elements; i++)
		{
			if (is_holder_element(reply->element[i]))
				put_holder_row(rsinfo, reply->element[i], ++position, now);
		}
	}
	freeReplyObject(reply);
	return (Datum) 0;
}

/* redsem_token(name, id): the holder's fencing token, or NULL */
Datum
redsem_token(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	char	   *id = id_arg(fcinfo, 1);
	int64		token;

	hold_init();
	token = sem_token(name, id);
	if (token <= 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/* redsem_keeper_active(): is the keeper keeping leases alive? */
Datum
redsem_keeper_active(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(keeper_is_active());
}

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
		Datum		values[STAT_NFIELDS + 1];
		bool		nulls[STAT_NFIELDS + 1] = {0};

		values[0] = CStringGetTextDatum(stats[i].name);
		for (int f = 0; f < STAT_NFIELDS; f++)
			values[f + 1] = (f == STAT_WAIT_TIME_MS) ?
				interval_from_ms(stats[i].counters[f]) :
				Int64GetDatum(stats[i].counters[f]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* redsem_stats_reset(name DEFAULT NULL): forget statistics */
Datum
redsem_stats_reset(PG_FUNCTION_ARGS)
{
	stats_reset(PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0)));
	PG_RETURN_VOID();
}
