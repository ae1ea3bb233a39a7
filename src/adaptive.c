/*
 * adaptive.c
 *		Adaptive limits, the keeper's part: once every ADAPT_TICK_MS it
 *		reports this server's pressure to each adaptive semaphore of its
 *		key prefix (adapt_tick), and the first report of an interval runs
 *		the controller in Redis, for the whole fleet (I16 in
 *		src/redsem.lua, where the formula is).  The hold times the
 *		controller follows are measured in Redis, at each release, by
 *		Redis's clock: no server's clock and no backend's bookkeeping.
 *
 * A server's pressure is the worse of two ratios to their settings, sent
 * x1000 (1000: at its line):
 *   cpu  processes runnable per CPU (/proc/stat procs_running, less the
 *        keeper itself, over the CPUs online), smoothed over the last few
 *        ticks, against redsem.adaptive_cpu_busy;
 *   lag  on a standby whose replay is behind what it received, how far
 *        behind (now less the last replayed commit's time), against
 *        redsem.adaptive_max_lag.
 * At its line a server keeps the limit from growing; at twice it, the
 * limit comes down a step each interval.
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "replication/walreceiver.h"
#include "common/hashfn.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "adaptive.h"
#include "clock.h"
#include "fleet.h"
#include "script.h"
#include "timing.h"

double		redsem_adaptive_cpu_busy = 3.0;
int			redsem_adaptive_max_lag_ms = 10000;

/* When the next tick is due */
static TimestampTz next_tick = 0;
/* Runnable processes per CPU, smoothed (-1: no sample yet) */
static double runnable_avg = -1;
/*
 * On a standby, what it had received at each recent tick, oldest first: the
 * lag is the age of the oldest of these that replay has not reached
 */
typedef struct Received
{
	TimestampTz at;
	XLogRecPtr	upto;
} Received;

static Received received_at[ADAPT_LAG_SAMPLES];
static int	nreceived = 0;

/* Define the adaptive limits' settings */
void
adaptive_define_gucs(void)
{
	DefineCustomRealVariable("redsem.adaptive_cpu_busy",
							 "Runnable processes per CPU at which this server keeps adaptive limits from growing.",
							 "At twice this, adaptive limits come down a step a second. 0 disables the CPU signal.",
							 &redsem_adaptive_cpu_busy, 3.0, 0.0, 1000.0,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("redsem.adaptive_max_lag",
							"Replay lag at which a standby keeps adaptive limits from growing.",
							"At twice this, adaptive limits come down a step a second. 0 disables the lag signal.",
							&redsem_adaptive_max_lag_ms, 10000, 0, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
}

/* True once a tick is due and this server uses an adaptive semaphore */
bool
adaptive_tick_due(void)
{
	int			n;

	(void) fleet_adaptive_used(&n);
	return n > 0 && redsem_now() >= next_tick;
}

/*
 * ms until the next tick (at least 1), or KEEPER_MAX_SLEEP_MS if this
 * server uses no adaptive semaphore (the keeper then sleeps as before)
 */
int64
adaptive_ms_until_tick(void)
{
	TimestampTz now = redsem_now();
	int			n;

	(void) fleet_adaptive_used(&n);
	if (n == 0)
		return KEEPER_MAX_SLEEP_MS;
	if (now >= next_tick)
		return 1;
	return Max(TimestampDifferenceMilliseconds(now, next_tick), 1);
}

/* Processes runnable now, from /proc/stat, or -1 if it cannot be read */
static int
procs_running(void)
{
	FILE	   *f = fopen("/proc/stat", "r");
	char		line[256];
	int			n = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "procs_running %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

/* The CPU ratio x1000: runnable per CPU, smoothed, against the setting */
static int
cpu_pressure(void)
{
	long		cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int			running = procs_running();
	double		now;

	if (redsem_adaptive_cpu_busy <= 0 || running < 0 || cpus < 1)
		return 0;
	now = (double) Max(running - 1, 0) / (double) cpus;
	runnable_avg = runnable_avg < 0 ? now : runnable_avg + ADAPT_RUNNABLE_SMOOTH * (now - runnable_avg);
	return (int) Min(runnable_avg / redsem_adaptive_cpu_busy * 1000.0, 1e6);
}

/* Note what a standby had received now (every other sample goes if full) */
static void
note_received(TimestampTz now, XLogRecPtr upto)
{
	if (nreceived > 0 && received_at[nreceived - 1].upto == upto)
		return;					/* (nothing new: the older time stays) */
	if (nreceived == ADAPT_LAG_SAMPLES)
	{
		for (int i = 1; i < ADAPT_LAG_SAMPLES / 2; i++)
			received_at[i] = received_at[2 * i];
		nreceived = ADAPT_LAG_SAMPLES / 2;
	}
	received_at[nreceived].at = now;
	received_at[nreceived].upto = upto;
	nreceived++;
}

/*
 * The lag ratio x1000 on a standby: the age of the oldest WAL it had
 * received at a tick that replay has not reached yet (0 if replay has all
 * it had), against redsem.adaptive_max_lag.  Not the age of the last
 * transaction replayed: a primary idle, or busy with one long transaction,
 * commits nothing for a while although its standby keeps up.
 */
static int
lag_pressure(void)
{
	TimestampTz now = GetCurrentTimestamp();
	XLogRecPtr	replayed;
	int			k = 0;

	if (redsem_adaptive_max_lag_ms <= 0 || !RecoveryInProgress())
	{
		nreceived = 0;
		return 0;
	}
	replayed = GetXLogReplayRecPtr(NULL);
	/* (the samples replay has passed go: what it reached is no lag) */
	while (k < nreceived && received_at[k].upto <= replayed)
		k++;
	memmove(received_at, received_at + k, sizeof(Received) * (nreceived - k));
	nreceived -= k;
	note_received(now, GetWalRcvFlushRecPtr(NULL, NULL));
	if (nreceived == 0 || received_at[0].upto <= replayed)
		return 0;
	return (int) Min((double) TimestampDifferenceMilliseconds(received_at[0].at, now) /
					 redsem_adaptive_max_lag_ms * 1000.0, 1e6);
}

/* This server's pressure x1000, and (tag) which signal it is */
int
adaptive_pressure(const char **tag)
{
	int			cpu = cpu_pressure();
	int			lag = lag_pressure();

	*tag = lag > cpu ? "lag" : cpu > 0 ? "cpu" : "";
	return Max(cpu, lag);
}

/*
 * This server as an adaptive semaphore's list of servers names it: the
 * host name's first 20 bytes and a hash of all of it (two hosts whose names
 * begin alike stay two), the port, the system identifier (a standby
 * shares its primary's)
 */
static const char *
server_tag(void)
{
	static char tag[65];
	char		host[256];

	if (tag[0] != '\0')
		return tag;
	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "host", sizeof(host));
	host[sizeof(host) - 1] = '\0';
	snprintf(tag, sizeof(tag), "%.20s-%08x:%d:%llx", host,
			 (unsigned) hash_bytes((const unsigned char *) host, strlen(host)),
			 PostPortNumber, (unsigned long long) GetSystemIdentifier());
	for (char *c = tag; *c; c++)
		if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:", *c) == NULL)
			*c = '_';
	return tag;
}

/* Log a failed tick, at most once every KEEPER_LOG_EVERY_MS */
static void
tick_failed(const char *name, RedisCall *call)
{
	static TimestampTz logged_at = 0;

	if (!redsem_once_every(&logged_at, KEEPER_LOG_EVERY_MS))
		return;
	ereport(LOG,
			(errmsg("redsem keeper could not report to adaptive semaphore \"%s\": %s",
					name, redis_outcome_text(&call->outcome)),
			 errdetail("Leases are not affected; the adaptive limit holds still without reports, and this server's pressure stops counting.")));
}

/* True if a failure of one semaphore's tick leaves the others worth trying */
static bool
only_that_one(const RedisCall *call)
{
	return call->outcome.status == RS_CONFLICT || call->outcome.status == RS_REFUSED ||
		call->outcome.status == RS_MALFORMED || call->outcome.status == RS_OUT_OF_MEMORY;
}

/*
 * The keeper's part, every ADAPT_TICK_MS: report this server's pressure to
 * each adaptive semaphore its sessions used at the keeper's last touch of
 * the index (fleet.c learns which), within budget_ms.  Best effort: a
 * failure is logged and the next tick tries again; one semaphore's (a key
 * conflict, a node that refuses it) does not keep the others from being
 * ticked, a broken connection or the budget spent does.  (The keeper
 * catches an ERROR raised here.)
 */
void
adaptive_keeper_tick(int budget_ms)
{
	TimestampTz now = redsem_now();
	const FleetName *used;
	RedisCall	call;
	const char *tag;
	int			pressure;
	int			n;

	if (now < next_tick)
		return;
	next_tick = TimestampTzPlusMilliseconds(now, ADAPT_TICK_MS);
	used = fleet_adaptive_used(&n);
	if (n == 0)
		return;
	pressure = adaptive_pressure(&tag);
	redis_call_init(&call, TimestampTzPlusMilliseconds(now, budget_ms), true, 0);
	call.owe_late_reply = true;
	/* (backwards: a semaphore adaptive no more is dropped from the list) */
	for (int i = n - 1; i >= 0; i--)
	{
		bool		adaptive;
		bool		ran;

		if (sem_adapt_tick(&call, used[i].prefix, used[i].name, server_tag(), pressure,
						   tag, &adaptive, &ran))
		{
			if (!adaptive)
				fleet_adaptive_drop(i);
			continue;
		}
		tick_failed(used[i].name, &call);
		if (!only_that_one(&call))
			return;
	}
}
