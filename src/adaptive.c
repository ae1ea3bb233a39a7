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

#include <ctype.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "replication/walreceiver.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "adaptive.h"
#include "clock.h"
#include "keeper.h"
#include "script.h"
#include "timing.h"

double		redsem_adaptive_cpu_busy = 3.0;
int			redsem_adaptive_max_lag_ms = 10000;

/* When the next tick is due, when the list of names is next read */
static TimestampTz next_tick = 0;
static TimestampTz next_list = 0;
/* The adaptive semaphores as last listed (TopMemoryContext) */
static char **names = NULL;
static int	nnames = 0;
/* Runnable processes per CPU, smoothed (-1: no sample yet) */
static double runnable_avg = -1;

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

/* True once a tick is due */
bool
adaptive_tick_due(void)
{
	return redsem_now() >= next_tick;
}

/* ms until the next tick (at least 1) */
int64
adaptive_ms_until_tick(void)
{
	TimestampTz now = redsem_now();

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

/* The lag ratio x1000 on a standby replaying behind what it received */
static int
lag_pressure(void)
{
	TimestampTz last;
	XLogRecPtr	received;
	XLogRecPtr	replayed;
	long		secs;
	int			usecs;

	if (redsem_adaptive_max_lag_ms <= 0 || !RecoveryInProgress())
		return 0;
	received = GetWalRcvFlushRecPtr(NULL, NULL);
	replayed = GetXLogReplayRecPtr(NULL);
	last = GetLatestXTime();
	if (received == InvalidXLogRecPtr || replayed >= received || last == 0)
		return 0;
	TimestampDifference(last, GetCurrentTimestamp(), &secs, &usecs);
	return (int) Min(((double) secs * 1000.0 + usecs / 1000.0) /
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

/* This server as an adaptive semaphore's list of servers names it */
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
	snprintf(tag, sizeof(tag), "%.30s:%d:%llx", host, PostPortNumber,
			 (unsigned long long) GetSystemIdentifier());
	for (char *c = tag; *c; c++)
		if (!(isalnum((unsigned char) *c) || strchr(".-_:", *c)))
			*c = '_';
	return tag;
}

/* Read the adaptive semaphores of this server's key prefix anew */
static bool
read_names(RedisCall *call)
{
	char	  **got;
	int			n;
	MemoryContext old;

	if (!sem_adapt_list(call, NULL, ADAPT_MAX_SEMAPHORES, &got, &n))
		return false;
	for (int i = 0; i < nnames; i++)
		pfree(names[i]);
	if (names)
		pfree(names);
	old = MemoryContextSwitchTo(TopMemoryContext);
	names = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
		names[i] = pstrdup(got[i]);
	MemoryContextSwitchTo(old);
	nnames = n;
	return true;
}

/* Log a failed tick, at most once every KEEPER_LOG_EVERY_MS */
static void
tick_failed(const char *name, RedisCall *call)
{
	static TimestampTz logged_at = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (!TimestampDifferenceExceeds(logged_at, now, KEEPER_LOG_EVERY_MS))
		return;
	logged_at = now;
	ereport(LOG,
			(errmsg("redsem keeper could not report to adaptive semaphore \"%s\": %s",
					name ? name : "(list)", redis_outcome_text(&call->outcome)),
			 errdetail("Leases are not affected; the adaptive limit holds still without reports, and this server's pressure stops counting.")));
}

/*
 * The keeper's part, every ADAPT_TICK_MS: report to each adaptive
 * semaphore (the list read again every ADAPT_LIST_MS), within budget_ms.
 * Best effort: a failure is logged and the next tick tries again.  (The
 * keeper catches an ERROR raised here.)
 */
void
adaptive_keeper_tick(int budget_ms)
{
	TimestampTz now = redsem_now();
	RedisCall	call;
	const char *tag;
	int			pressure;

	if (now < next_tick)
		return;
	next_tick = TimestampTzPlusMilliseconds(now, ADAPT_TICK_MS);
	redis_call_init(&call, TimestampTzPlusMilliseconds(now, budget_ms), true, 0);
	call.owe_late_reply = true;
	if (now >= next_list)
	{
		next_list = TimestampTzPlusMilliseconds(now, ADAPT_LIST_MS);
		if (!read_names(&call))
		{
			tick_failed(NULL, &call);
			return;
		}
	}
	if (nnames == 0)
		return;
	pressure = adaptive_pressure(&tag);
	for (int i = 0; i < nnames; i++)
	{
		bool		adaptive;
		bool		ran;

		if (!sem_adapt_tick(&call, NULL, names[i], server_tag(), pressure, tag,
							&adaptive, &ran))
		{
			tick_failed(names[i], &call);
			return;
		}
	}
}
