/*
 * queue_fleet.c
 *		The statement queues' definitions for the whole fleet: kept in Redis
 *		(<prefix>{queues}, X3 in src/redsem.lua), created, changed and dropped
 *		with redsem_create_queue(), redsem_alter_queue() and
 *		redsem_drop_queue(), validated when they are set.
 *
 * Each server's keeper reads them every QUEUE_FLEET_POLL_MS (timing.h)
 * into shared memory, from where backends take them at their next
 * statement; queue_conf.c puts them before redsem.queues, whose
 * definitions of the same names are then not applied (the keeper logs it
 * once, redsem_queues.setting_differs shows it).  A queue's cap is its
 * semaphore's stored limit, which the SQL functions set themselves, so a
 * cap changes for every server at once (queue_caps.c leaves these queues
 * alone).  The keeper also keeps a copy in the data directory, read when
 * the server starts, and stores it back if Redis forgot the definitions
 * (the hash is gone: dropping the last queue leaves it): so neither a
 * restart of PostgreSQL while Redis is away nor a Redis that lost its data
 * leaves a queue silently unapplied.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include <unistd.h>

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "bounds.h"
#include "clock.h"
#include "compat.h"
#include "guc.h"
#include "hold.h"
#include "queue_fleet.h"
#include "redis/conn.h"
#include "script.h"
#include "shmem.h"
#include "sqlargs.h"
#include "textenc.h"
#include "timing.h"

/* Room for every definition, each written out in full */
#define QUEUE_FLEET_TEXT_BYTES	(QUEUE_MAX_QUEUES * 1024)
/* The copy in the data directory, and the first line it starts with */
#define QUEUE_FLEET_FILE		"redsem_queues.cache"
#define QUEUE_FLEET_MAGIC		"redsem queue definitions 2"
/* Tries of a change whose definition another change replaced meanwhile */
#define QUEUE_ALTER_TRIES		5

/* The fleet's definitions as this server's keeper last read them */
typedef struct QueueFleetShared
{
	LWLock	   *lock;
	pg_atomic_uint64 generation;	/* moves at every change of text */
	pg_atomic_uint64 reads_asked;	/* reads a change asked of the keeper */
	pg_atomic_uint64 reads_done;	/* the last of them it has made */
	bool		from_redis;		/* read from Redis (else from the copy) */
	uint64		target;			/* redis_target_signature() read from */
	char		prefix[REDSEM_MAX_PREFIX_BYTES + 1];	/* key prefix read under */
	int64		version;		/* the changes Redis had counted then */
	char		text[QUEUE_FLEET_TEXT_BYTES];	/* "name: options; ..." */
} QueueFleetShared;

static QueueFleetShared *fleet = NULL;

/* The keeper's own: when it reads next, what it said last */
static TimestampTz next_poll = 0;
static bool trouble_logged = false;
static uint32 conflicts_logged = 0;
static char *own_queues = NULL;	/* only redsem.queues defines them here */
static char *differing_queues = NULL;	/* ...defines them otherwise */
static TimestampTz next_cap_check = 0;

/*
 * Queues dropped lately, whose cap a late change may have stored again, and
 * whose line's open limit (free_line) is removed when the entry's time is up
 */
typedef struct DroppedQueue
{
	char		semaphore[QUEUE_MAX_NAME_BYTES + 7];
	int			active;			/* its cap when it was dropped */
	TimestampTz until;
	bool		done;			/* its time is up, the open limit removed */
} DroppedQueue;
static DroppedQueue dropped[QUEUE_MAX_QUEUES];
static int	ndropped = 0;

static char *def_text(const QueueDef *q);
static char *stored_def(RedisCall *call, const char *name, bool wait);
static void wait_for_restore(int tries);

PG_FUNCTION_INFO_V1(redsem_create_queue);
PG_FUNCTION_INFO_V1(redsem_alter_queue);
PG_FUNCTION_INFO_V1(redsem_drop_queue);
PG_FUNCTION_INFO_V1(redsem_queue_servers);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* A new, empty set of definitions (palloc'd) */
static QueueConfig *
new_config(void)
{
	QueueConfig *conf = palloc0(offsetof(QueueConfig, queues) +
								sizeof(QueueDef) * QUEUE_MAX_QUEUES);

	return conf;
}

/*
 * Read the copy in the data directory into shared memory (the postmaster,
 * at start): a copy that cannot be read or parsed is logged and ignored.
 */
static void
load_copy(void)
{
	FILE	   *f = AllocateFile(QUEUE_FLEET_FILE, PG_BINARY_R);
	char	   *buf;
	size_t		len;
	char	   *target_line;
	char	   *prefix_line;
	char	   *text;
	QueueConfig *conf;

	if (f == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("redsem: could not read \"%s\": %m", QUEUE_FLEET_FILE)));
		return;
	}
	buf = palloc0(QUEUE_FLEET_TEXT_BYTES + 256);
	len = fread(buf, 1, QUEUE_FLEET_TEXT_BYTES + 255, f);
	FreeFile(f);
	buf[len] = '\0';
	target_line = strchr(buf, '\n');
	prefix_line = target_line ? strchr(target_line + 1, '\n') : NULL;
	text = prefix_line ? strchr(prefix_line + 1, '\n') : NULL;
	conf = new_config();
	if (text == NULL || strncmp(buf, QUEUE_FLEET_MAGIC "\n", strlen(QUEUE_FLEET_MAGIC) + 1) != 0 ||
		prefix_line - target_line - 1 > 41 || text - prefix_line - 1 > REDSEM_MAX_PREFIX_BYTES ||
		strlen(text + 1) >= QUEUE_FLEET_TEXT_BYTES || !queue_parse_list(text + 1, conf))
	{
		ereport(LOG,
				(errmsg("redsem: ignoring \"%s\": it is not a copy of statement queue definitions",
						QUEUE_FLEET_FILE)));
		return;
	}
	*prefix_line = *text = '\0';
	fleet->target = strtou64(target_line + 1, &target_line, 16);
	fleet->version = strtoi64(target_line, NULL, 10);
	strlcpy(fleet->prefix, prefix_line + 1, sizeof(fleet->prefix));
	strlcpy(fleet->text, text + 1, sizeof(fleet->text));
	pg_atomic_write_u64(&fleet->generation, 1);
}

/* Ask for the shared definitions' memory and lock */
static void
fleet_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(QueueFleetShared)));
	RequestNamedLWLockTranche("redsem queue definitions", 1);
}

/* Attach to (or make, and fill from the copy) the shared definitions */
static void
fleet_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	fleet = ShmemInitStruct("redsem queue definitions", sizeof(QueueFleetShared), &found);
	if (!found)
	{
		memset(fleet, 0, sizeof(QueueFleetShared));
		fleet->lock = &GetNamedLWLockTranche("redsem queue definitions")[0].lock;
		pg_atomic_init_u64(&fleet->generation, 0);
		pg_atomic_init_u64(&fleet->reads_asked, 0);
		pg_atomic_init_u64(&fleet->reads_done, 0);
		if (!IsUnderPostmaster)
			load_copy();
	}
	LWLockRelease(AddinShmemInitLock);
}

/* From _PG_init, when preloading: the shared definitions' hooks */
void
queue_fleet_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = fleet_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = fleet_shmem_startup;
}

/*
 * The fleet's definitions as this server last read them (NULL without
 * shared memory), parsed again only when they changed; *generation moves
 * whenever they do
 */
const QueueConfig *
queue_fleet_config(uint64 *generation)
{
	static QueueConfig *parsed = NULL;
	static uint64 parsed_generation = 0;
	static char copy[QUEUE_FLEET_TEXT_BYTES];
	uint64		g;

	*generation = 0;
	if (fleet == NULL)
		return NULL;
	g = pg_atomic_read_u64(&fleet->generation);
	if (g != parsed_generation || parsed == NULL)
	{
		if (parsed == NULL)
			parsed = MemoryContextAllocZero(TopMemoryContext,
											offsetof(QueueConfig, queues) +
											sizeof(QueueDef) * QUEUE_MAX_QUEUES);
		LWLockAcquire(fleet->lock, LW_SHARED);
		g = pg_atomic_read_u64(&fleet->generation);
		strlcpy(copy, fleet->text, sizeof(copy));
		LWLockRelease(fleet->lock);
		/* (the keeper published only what it parsed) */
		if (!queue_parse_list(copy, parsed))
			parsed->count = 0;
		parsed_generation = g;
	}
	*generation = g;
	return parsed;
}

/* Whether the keeper should read the definitions now */
bool
queue_fleet_poll_due(void)
{
	return fleet != NULL && (redsem_now() >= next_poll || queue_fleet_read_asked());
}

/* Whether a change on this server asked the keeper for a read not made yet */
bool
queue_fleet_read_asked(void)
{
	return fleet != NULL &&
		pg_atomic_read_u64(&fleet->reads_asked) != pg_atomic_read_u64(&fleet->reads_done);
}

/* Compare two definitions by name, for qsort */
static int
by_name(const void *a, const void *b)
{
	return strcmp(((const QueueDef *) a)->name, ((const QueueDef *) b)->name);
}

/* Write conf as "name: options; ..." (sorted by name, options in full) */
static char *
config_text(QueueConfig *conf)
{
	StringInfoData buf;

	qsort(conf->queues, conf->count, sizeof(QueueDef), by_name);
	initStringInfo(&buf);
	for (int i = 0; i < conf->count; i++)
	{
		appendStringInfo(&buf, "%s%s: ", i > 0 ? "; " : "", conf->queues[i].name);
		queue_options_text(&conf->queues[i], &buf);
	}
	return buf.data;
}

/*
 * Parse one queue's definition as Redis keeps it into q; false if it is
 * not one (a direct writer's), GUC_check_errdetail_string then saying why
 */
static bool
parse_stored(const char *name, const char *text, QueueDef *q)
{
	memset(q, 0, sizeof(*q));
	q->max_wait_ms = -1;
	GUC_check_errdetail_string = NULL;
	if (!queue_valid_name(name))
		return false;
	strlcpy(q->name, name, sizeof(q->name));
	return queue_parse_options(text, q);
}

/*
 * Say once (per set of names) which definitions in Redis are not valid: a
 * direct writer's; first_why: why the first is not
 */
static void
report_invalid(const char *names, int n, const char *first_why)
{
	static uint32 logged = 0;
	uint32		h = n > 0 ? hash_bytes((const unsigned char *) names, strlen(names)) : 0;

	if (h == logged)
		return;
	logged = h;
	if (n > 0)
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 n == 1 ?
				 errmsg("redsem: the definition of statement queue %s in Redis is not valid; it is not applied",
						names) :
				 errmsg("redsem: the definitions of %d statement queues in Redis are not valid (%s); they are not applied",
						n, names),
				 errdetail_internal("%s%sA queue applied before keeps its last valid definition; one never valid is not applied.",
									first_why ? first_why : "", first_why ? " " : ""),
				 errhint("Redefine them with redsem_alter_queue(), or drop them with redsem_drop_queue().")));
}

/* Write the copy in the data directory (a failure is logged) */
static void
write_copy(const char *prefix, uint64 target, int64 version, const char *text)
{
	const char *tmp = QUEUE_FLEET_FILE ".tmp";
	FILE	   *f = AllocateFile(tmp, PG_BINARY_W);

	if (f == NULL)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("redsem: could not write \"%s\": %m", tmp)));
		return;
	}
	fprintf(f, "%s\n%llx %lld\n%s\n%s", QUEUE_FLEET_MAGIC, (unsigned long long) target,
			(long long) version, prefix, text);
	if (FreeFile(f) != 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("redsem: could not write \"%s\": %m", tmp)));
		return;
	}
	/* (a copy that cannot be opened, say after a chmod, is replaced) */
	if (durable_rename(tmp, QUEUE_FLEET_FILE, LOG) != 0 && unlink(QUEUE_FLEET_FILE) == 0)
		(void) durable_rename(tmp, QUEUE_FLEET_FILE, LOG);
}

/*
 * How long a dropped queue is watched: QUEUE_FLEET_CAP_CHECK_MS, or three
 * of this server's reads if that is longer.  A change that raced the drop
 * may store its cap again meanwhile, and a server that has not read the
 * drop yet needs its open limit (reconcile_caps).
 */
static int
drop_window_ms(void)
{
	return Max(QUEUE_FLEET_CAP_CHECK_MS, 3 * queue_poll_interval_ms);
}

/* Remember a dropped queue for drop_window_ms (reconcile_caps) */
static void
note_dropped(const QueueDef *q)
{
	/* (a queue dropped again: its earlier entry goes) */
	for (int i = 0; i < ndropped; i++)
		if (strcmp(dropped[i].semaphore, q->semaphore) == 0)
		{
			memmove(dropped + i, dropped + i + 1, sizeof(DroppedQueue) * (ndropped - i - 1));
			ndropped--;
			break;
		}
	if (ndropped == QUEUE_MAX_QUEUES)
		memmove(dropped, dropped + 1, sizeof(DroppedQueue) * --ndropped);
	strlcpy(dropped[ndropped].semaphore, q->semaphore, sizeof(dropped[ndropped].semaphore));
	dropped[ndropped].active = q->active;
	dropped[ndropped].done = false;
	dropped[ndropped++].until = TimestampTzPlusMilliseconds(redsem_now(), drop_window_ms());
}

/* Log, per queue, how the definitions read now differ from those before */
static void
log_changes(const QueueConfig *before, const QueueConfig *now)
{
	for (int i = 0; i < now->count; i++)
	{
		const QueueDef *q = &now->queues[i];
		const QueueDef *was = queue_def_in(before, q->name);
		StringInfoData buf;

		if (was != NULL && queue_def_same(was, q))
			continue;
		initStringInfo(&buf);
		queue_options_text(q, &buf);
		ereport(LOG,
				(errmsg("redsem: statement queue \"%s\" %s for every server: %s",
						q->name, was ? "changed" : "defined", buf.data)));
	}
	for (int i = 0; before != NULL && i < before->count; i++)
		if (queue_def_in(now, before->queues[i].name) == NULL)
		{
			ereport(LOG,
					(errmsg("redsem: statement queue \"%s\" dropped for every server",
							before->queues[i].name)));
			note_dropped(&before->queues[i]);
		}
}

/*
 * Note, for the servers' list (redsem_queue_servers), the queues that only
 * this server's redsem.queues defines, and those it defines otherwise than
 * the fleet (comma-separated, in TopMemoryContext)
 */
static void
note_local_queues(const QueueConfig *fleet_defs, const QueueConfig *local)
{
	StringInfoData own;
	StringInfoData differing;

	initStringInfo(&own);
	initStringInfo(&differing);
	for (int i = 0; local != NULL && i < local->count; i++)
	{
		const QueueDef *f = queue_def_in(fleet_defs, local->queues[i].name);

		if (f == NULL)
			appendStringInfo(&own, "%s%s", own.len > 0 ? "," : "", local->queues[i].name);
		else if (!queue_def_same(f, &local->queues[i]))
			appendStringInfo(&differing, "%s%s", differing.len > 0 ? "," : "", f->name);
	}
	if (own_queues)
		pfree(own_queues);
	if (differing_queues)
		pfree(differing_queues);
	own_queues = MemoryContextStrdup(TopMemoryContext, own.data);
	differing_queues = MemoryContextStrdup(TopMemoryContext, differing.data);
}

/* This server, as the servers' list names it: "host:port/system id" */
static char *
server_id(void)
{
	char		host[256];

	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "?", sizeof(host));
	host[sizeof(host) - 1] = '\0';
	return psprintf("%s:%d/" UINT64_FORMAT, host, PostPortNumber, GetSystemIdentifier());
}

/* A comma-separated list cut to at most 1,000 bytes, at a comma */
static const char *
cut_list(const char *list)
{
	char	   *cut;

	if (list == NULL || strlen(list) <= 1000)
		return list ? list : "";
	cut = pnstrdup(list, 1000);
	*(strrchr(cut, ',') ? strrchr(cut, ',') : cut) = '\0';
	return cut;
}

/*
 * What this server says of itself in the servers' list: "p" or "s"
 * (primary, standby), cluster_name, then tab-separated the queues only its
 * redsem.queues defines and those it defines otherwise
 */
static char *
server_value(void)
{
	char	   *name = psprintf("%s", cluster_name ? cluster_name : "");

	for (char *c = name; *c; c++)
		if (*c == '\t' || *c == '\n' || *c == '\r')
			*c = ' ';
	/* (Redis takes at most 4 kB: the lists are cut, at a name) */
	return psprintf("%s %s\t%s\t%s", RecoveryInProgress() ? "s" : "p", name,
					cut_list(own_queues), cut_list(differing_queues));
}

/*
 * Say once (per set of names) which queues of this server's redsem.queues
 * are not applied for want of room: the fleet defines 64 already
 */
static void
report_unapplied(void)
{
	static uint32 logged = 0;
	const char *names = queue_unapplied_settings();
	uint32		h = names[0] ? hash_bytes((const unsigned char *) names, strlen(names)) : 0;

	if (h == logged)
		return;
	logged = h;
	if (h != 0)
		ereport(WARNING,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("redsem.queues defines statement queues that are not applied: %s", names),
				 errdetail("At most %d queues are in effect on a server, and the definitions in Redis come first.",
						   QUEUE_MAX_QUEUES),
				 errhint("Drop queues with redsem_drop_queue(), or define these in Redis instead.")));
}

/*
 * Say once (per set of names) which queues this server's redsem.queues
 * defines otherwise than the fleet: those of the fleet apply
 */
static void
log_conflicts(const QueueConfig *now)
{
	const QueueConfig *local = queue_setting_config();
	StringInfoData names;
	uint32		h;

	initStringInfo(&names);
	note_local_queues(now, local);
	for (int i = 0; i < now->count; i++)
	{
		const QueueDef *mine = queue_def_in(local, now->queues[i].name);

		if (mine != NULL && !queue_def_same(mine, &now->queues[i]))
			appendStringInfo(&names, "%s\"%s\"", names.len > 0 ? ", " : "", mine->name);
	}
	report_unapplied();
	h = names.len > 0 ? hash_bytes((const unsigned char *) names.data, names.len) : 0;
	if (h == conflicts_logged)
		return;
	conflicts_logged = h;
	if (h != 0)
		ereport(WARNING,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("redsem.queues defines statement queues %s otherwise than their definitions in Redis, which apply",
						names.data),
				 errdetail("The definitions made with redsem_create_queue() or redsem_alter_queue() are the fleet's; this server's redsem.queues is not applied to those queues."),
				 errhint("Remove them from redsem.queues, or make the two agree (redsem_queues.setting_differs).")));
}

/* Publish text (parsed as now) as the fleet's definitions, if it is news */
static void
publish(const char *text, const QueueConfig *now, int64 version, bool from_redis)
{
	uint64		target = redis_target_signature();
	const char *prefix = redsem_prefix_setting();
	uint64		unused;
	bool		same;

	LWLockAcquire(fleet->lock, LW_SHARED);
	same = fleet->from_redis == from_redis && fleet->target == target &&
		fleet->version == version &&
		strcmp(fleet->prefix, prefix) == 0 && strcmp(fleet->text, text) == 0;
	LWLockRelease(fleet->lock);
	if (same)
		return;
	if (fleet->from_redis)
		log_changes(queue_fleet_config(&unused), now);
	else if (now->count > 0)
		ereport(LOG,
				(errmsg_plural("redsem: %d statement queue defined for every server, read from Redis",
							   "redsem: %d statement queues defined for every server, read from Redis",
							   now->count, now->count)));
	LWLockAcquire(fleet->lock, LW_EXCLUSIVE);
	fleet->from_redis = from_redis;
	fleet->target = target;
	strlcpy(fleet->prefix, prefix, sizeof(fleet->prefix));
	strlcpy(fleet->text, text, sizeof(fleet->text));
	fleet->version = version;
	pg_atomic_fetch_add_u64(&fleet->generation, 1);
	LWLockRelease(fleet->lock);
	write_copy(prefix, target, version, text);
}

/* Log once that the definitions cannot be read, or can again */
static void
note_trouble(const RedisCall *call, bool ok)
{
	if (ok && trouble_logged)
		ereport(LOG,
				(errmsg("redsem: the statement queue definitions can be read from Redis again")));
	else if (!ok && !trouble_logged)
		ereport(LOG,
				(errmsg("redsem: could not read the statement queue definitions from Redis; the last ones read stay in effect"),
				 errdetail_internal("%s", redis_outcome_text(&call->outcome))));
	trouble_logged = !ok;
}

/*
 * The key prefix the definitions were read under: a statement queue's
 * slots are taken there, whatever the session's own redsem.key_prefix (one
 * cap for the fleet, which redsem_alter_queue and redsem_drop_queue reach);
 * NULL if there is none (not read yet, not preloaded).  Also when the
 * session's connection settings differ from those the keeper read with:
 * around a reload that reaches the same Redis another way they do for a
 * moment, and the session's own prefix then split the cap (helper-170); on
 * another Redis (docs/statement-queues.md) the prefix matters little.
 */
const char *
queue_fleet_prefix(void)
{
	static char prefix[REDSEM_MAX_PREFIX_BYTES + 1];
	bool		read;

	if (fleet == NULL)
		return NULL;
	LWLockAcquire(fleet->lock, LW_SHARED);
	read = fleet->target != 0;
	if (read)
		strlcpy(prefix, fleet->prefix, sizeof(prefix));
	LWLockRelease(fleet->lock);
	return read ? prefix : NULL;
}

/*
 * Whether the published definitions are of the Redis and prefix used now
 * (in a statement queue's acquire, the prefix that stands in: queue.c)
 */
static bool
read_from_here(void)
{
	return fleet->target == redis_target_signature() &&
		strcmp(fleet->prefix, redsem_prefix_or_setting(NULL)) == 0;
}

/* Whether this server's copy is of the Redis and prefix it uses now */
static bool
copy_matches(void)
{
	return fleet->version > 0 && read_from_here();
}

/*
 * Redis has no definitions (it forgot them: exists 0), or older ones than
 * this server's copy (of version redis_version): store the copy, if it is
 * of this Redis and prefix and there is one (it has a version), and say
 * what it replaced.  A copy of another Redis or prefix (the server was
 * pointed elsewhere: redsem.key_prefix, redsem.host, ...) is stored by the
 * keeper alone (may_move; a session's own prefix or Redis is no move),
 * only where there are no definitions at all, and only if it defines
 * queues: the server takes its queues along, rather than running their
 * statements uncapped.  It is stored as of version 0, since its count of
 * changes is another place's: a copy of that place's own, a first change
 * there, or another moved copy is never replaced by it.  False if there
 * is nothing to store.
 */
static bool
restore_copy(RedisCall *call, int exists, int64 redis_version, bool may_move)
{
	uint64		unused;
	const QueueConfig *copy = queue_fleet_config(&unused);
	char	  **names;
	char	  **texts;
	bool		restored = false;
	char	   *replaced = NULL;

	bool		moved = !copy_matches();

	if (copy == NULL || (moved && (!may_move || exists != 0 || copy->count == 0)) ||
		(!moved && fleet->version <= 0))
		return false;
	names = palloc(sizeof(char *) * (copy->count + 1));
	texts = palloc(sizeof(char *) * (copy->count + 1));
	for (int i = 0; i < copy->count; i++)
	{
		names[i] = pstrdup(copy->queues[i].name);
		texts[i] = def_text(&copy->queues[i]);
	}
	if (!sem_queues_restore(call, NULL, moved ? 0 : fleet->version, copy->count, names, texts,
							&restored, &replaced))
		note_trouble(call, false);
	else if (restored && moved)
		ereport(WARNING,
				(errmsg_plural("redsem: the Redis or key prefix now in use had no statement queue definitions; this server stored there its copy of %d queue, read under key prefix \"%s\"",
							   "redsem: the Redis or key prefix now in use had no statement queue definitions; this server stored there its copy of %d queues, read under key prefix \"%s\"",
							   copy->count, copy->count, fleet->prefix),
				 errdetail("Its statements stay queued, under the caps of those definitions."),
				 errhint("Change or drop them with redsem_alter_queue() and redsem_drop_queue() if this Redis or prefix should have others.")));
	else if (restored && exists == 0)
		ereport(LOG,
				(errmsg_plural("redsem: Redis had lost the statement queue definitions; this server stored its copy of %d queue again",
							   "redsem: Redis had lost the statement queue definitions; this server stored its copy of %d queues again",
							   copy->count, copy->count),
				 errdetail("The copy is of version " INT64_FORMAT " (changes counted).", fleet->version)));
	else if (restored)
		ereport(WARNING,
				(errmsg("redsem: Redis held older statement queue definitions than this server's copy (version " INT64_FORMAT " < " INT64_FORMAT "); this server stored its copy of %d queue(s)",
						redis_version, fleet->version, copy->count),
				 replaced[0] ? errdetail("Definitions it replaced or removed: %s.", replaced) : 0,
				 errhint("Redis lost writes (an older snapshot, a failover), or a server without this copy changed the definitions meanwhile: check redsem_queues.")));
	/* (what Redis has now is read at the next poll, at once) */
	next_poll = redsem_now();
	return true;
}

/*
 * Whether to store this server's copy: Redis has no definitions, or older
 * ones than ours (a copy stored back, or a Redis that lost writes)
 */
static bool
copy_wanted(int exists, int64 version)
{
	return exists == 0 || fleet->version > version;
}

/*
 * Remove the open limits whose removal is due, as noted in Redis by the
 * drops that left them (free_line): any keeper does it, so that one left
 * when every keeper that saw the drop restarted within its window goes
 * too.  A queue defined in Redis again keeps its cap; one this server's
 * redsem.queues defines gets that cap in place of the open limit.
 */
static void
remove_due_opens(RedisCall *call, const QueueConfig *now)
{
	char	  **names;
	char	  **dues;
	int			n;

	if (!sem_queue_opens(call, &names, &dues, &n))
		return;
	for (int i = 0; i < n; i++)
	{
		char	   *semaphore = psprintf("%s%s", REDSEM_QUEUE_PREFIX, names[i]);
		const QueueDef *local = queue_def_in(queue_setting_config(), names[i]);
		int			to = local ? local->active : 0;	/* (0: removed) */
		SemLimit	limit;

		/* (defined in Redis again: reconcile_caps stored its cap) */
		if (queue_def_in(now, names[i]) == NULL &&
			(!sem_limit(call, semaphore, &limit) ||
			 (limit.stored == REDSEM_MAX_HOLDERS && to != REDSEM_MAX_HOLDERS &&
			  (!sem_set_limit_if(call, semaphore, to, REDSEM_MAX_HOLDERS, &limit) ||
			   limit.stored == REDSEM_MAX_HOLDERS))))
			continue;
		(void) sem_queue_open_done(call, names[i], dues[i]);
	}
}

/*
 * Make each queue's stored limit its definition's active_statements where
 * they differ (two changes at once may leave the cap of the first beside
 * the definition of the second): only if the stored limit is still the
 * one read, and the definition read after it still says so, so that a
 * change made meanwhile is never undone.  Dropped queues whose cap a late
 * change stored again lose it the same way; once their time is up, the
 * open limit their drop left (free_line) goes too.
 */
static void
reconcile_caps(RedisCall *call, const QueueConfig *now)
{
	for (int i = 0; i < now->count; i++)
	{
		const QueueDef *q = &now->queues[i];
		SemLimit	limit;
		char	   *text;
		QueueDef	again;
		int			was;

		if (!sem_limit(call, q->semaphore, &limit))
			return;
		if (limit.stored == q->active)
			continue;
		was = (int) Max(limit.stored, 0);
		text = stored_def(call, q->name, false);
		if (text == NULL || !parse_stored(q->name, text, &again) || again.active != q->active ||
			!sem_set_limit_if(call, q->semaphore, q->active, was, &limit))
			continue;
		if (limit.stored == q->active)
			ereport(LOG,
					(errmsg("redsem: statement queue \"%s\": cap set to %d, as its definition says (it was %d)",
							q->name, q->active, was)));
	}
	for (int i = 0; i < ndropped; i++)
	{
		DroppedQueue *d = &dropped[i];
		const char *name = d->semaphore + strlen(REDSEM_QUEUE_PREFIX);
		bool		over = d->until < redsem_now();
		SemLimit	limit;

		if (d->done)
			continue;
		/* (defined again: its definition's cap replaces the open limit) */
		if (queue_def_in(now, name) != NULL || queue_def_in(queue_setting_config(), name) != NULL)
		{
			d->done = true;
			continue;
		}
		if (!sem_limit(call, d->semaphore, &limit))
			return;
		if (!over && limit.stored == d->active)
			(void) sem_set_limit_if(call, d->semaphore, 0, d->active, &limit);
		else if (over &&
				 (limit.stored != REDSEM_MAX_HOLDERS ||
				  sem_set_limit_if(call, d->semaphore, 0, REDSEM_MAX_HOLDERS, &limit)))
			d->done = true;
	}
	remove_due_opens(call, now);
}

/* Sort n names, and their texts with them, by name */
static void
sort_by_name(char **names, char **texts, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--)
		{
			char	   *t = names[j];

			names[j] = names[j - 1];
			names[j - 1] = t;
			t = texts[j];
			texts[j] = texts[j - 1];
			texts[j - 1] = t;
		}
}

/*
 * A definition in Redis that is not valid (another program wrote it): the
 * queue's last valid definition, as applied now (read from this Redis and
 * prefix), stays in now (and so in the copy a Redis that forgets gets
 * back); a queue never valid is not applied
 */
static void
keep_last_valid(const char *name, QueueConfig *now)
{
	uint64		unused;
	const QueueDef *was = read_from_here() ? queue_def_in(queue_fleet_config(&unused), name) : NULL;

	if (was != NULL)
		now->queues[now->count++] = *was;
}

/*
 * The keeper's read of the fleet's definitions (every QUEUE_FLEET_POLL_MS,
 * within budget_ms): publish them to this server's backends, restore them
 * to a Redis that forgot them
 */
static void
poll_once(int budget_ms)
{
	static bool read_back = false;	/* reading back a copy just stored */
	RedisCall	call;
	int			exists;
	int64		version;
	bool		must_wait;
	char	  **names;
	char	  **texts;
	int			n;
	QueueConfig *now = new_config();
	StringInfoData invalid;
	int			ninvalid = 0;
	char	   *first_why = NULL;
	uint64		before;

	next_poll = TimestampTzPlusMilliseconds(redsem_now(), queue_poll_interval_ms);
	redis_call_init(&call, TimestampTzPlusMilliseconds(redsem_now(), budget_ms), true, 0);
	/* (a late reply is read later: the keeper keeps its connection) */
	call.owe_late_reply = true;
	/* (a copy of another Redis or prefix is of no version here) */
	if (!sem_queues_poll(&call, NULL, server_id(),
						 Max(QUEUE_FLEET_SERVER_TTL_MS, 3 * queue_poll_interval_ms),
						 copy_matches() ? fleet->version : 0, server_value(),
						 &exists, &version, &must_wait, &names, &texts, &n))
	{
		/* (a Redis too far for the budget: try again less often) */
		if (call.outcome.status == RS_TIMED_OUT)
			next_poll = TimestampTzPlusMilliseconds(redsem_now(),
													Max(queue_poll_interval_ms, QUEUE_FLEET_SLOW_POLL_MS));
		note_trouble(&call, false);
		return;
	}
	note_trouble(&call, true);
	/*
	 * (dropping the last queue leaves '~': gone, Redis forgot them; what
	 * was stored is read back at once, and published where it now is:
	 * statement queues take their slots under the prefix published)
	 */
	if (copy_wanted(exists, version) && restore_copy(&call, exists, version, true))
	{
		if (!read_back)
		{
			read_back = true;
			poll_once(budget_ms);
			read_back = false;
		}
		return;
	}
	initStringInfo(&invalid);
	/* (by name: Redis lists a hash's fields in an order that may change) */
	sort_by_name(names, texts, n);
	for (int i = 0; i < n && now->count < QUEUE_MAX_QUEUES; i++)
	{
		if (parse_stored(names[i], texts[i], &now->queues[now->count]))
			now->count++;
		else
		{
			keep_last_valid(names[i], now);
			if (ninvalid++ < 10)
			{
				appendStringInfo(&invalid, "%s\"%s\"", invalid.len > 0 ? ", " : "", names[i]);
				if (first_why == NULL && GUC_check_errdetail_string)
					first_why = pstrdup(GUC_check_errdetail_string);
			}
		}
	}
	if (ninvalid > 10)
		appendStringInfo(&invalid, ", ...");
	report_invalid(invalid.data, ninvalid, first_why);
	before = pg_atomic_read_u64(&fleet->generation);
	publish(config_text(now), now, version, true);
	log_conflicts(now);
	if (before != pg_atomic_read_u64(&fleet->generation) || redsem_now() >= next_cap_check)
	{
		next_cap_check = TimestampTzPlusMilliseconds(redsem_now(), QUEUE_FLEET_CAP_CHECK_MS);
		reconcile_caps(&call, now);
	}
}

/*
 * The keeper's read of the definitions (poll_once), which also answers the
 * reads a change on this server asked for (read_back)
 */
void
queue_fleet_poll(int budget_ms)
{
	uint64		asked = pg_atomic_read_u64(&fleet->reads_asked);

	PG_TRY();
	{
		poll_once(budget_ms);
	}
	PG_FINALLY();
	{
		pg_atomic_write_u64(&fleet->reads_done, asked);
	}
	PG_END_TRY();
}


/*
 * Before a change: if Redis has no definitions at all (it forgot them,
 * and no keeper has stored its copy yet), store this server's copy first,
 * so that the change does not hide the others
 */
static void
restore_before_change(void)
{
	RedisCall	call = REDIS_SQL_CALL;
	int			exists;
	int64		version;
	bool		must_wait;
	char	  **names;
	char	  **texts;
	int			n;

	if (fleet == NULL ||
		!sem_queues_get(&call, NULL, &exists, &version, &must_wait, &names, &texts, &n) ||
		!copy_wanted(exists, version))
		return;
	(void) restore_copy(&call, exists, version, false);
}

/*
 * Warn the administrator where this server will not apply what they just
 * stored: without preload, or when this session reaches another Redis or
 * prefix than the keeper reads from
 */
static void
warn_not_read_here(void)
{
	bool		elsewhere;

	if (!redsem_preloaded || fleet == NULL)
	{
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this server does not apply statement queues"),
				 errdetail("redsem is not in shared_preload_libraries here; servers that preload it apply the definition."),
				 errhint("Add redsem to shared_preload_libraries and restart the server.")));
		return;
	}
	LWLockAcquire(fleet->lock, LW_SHARED);
	elsewhere = fleet->from_redis && !read_from_here();
	LWLockRelease(fleet->lock);
	if (elsewhere)
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session's Redis connection or redsem.key_prefix is not the one this server reads statement queues from"),
				 errdetail("The definition is stored under key prefix \"%s\"; servers read them with the Redis connection and key prefix of their configuration files.",
						   redsem_prefix_setting()),
				 errhint("Run this from a session without a redsem.key_prefix or Redis connection of its own.")));
}

/*
 * Warn that this server's redsem.queues defines q's queue otherwise (or,
 * dropped, at all: that definition applies here again)
 */
static void
warn_setting_differs(const QueueDef *q, bool dropped)
{
	const QueueDef *mine = queue_def_in(queue_setting_config(), q->name);

	if (mine != NULL && dropped)
		ereport(WARNING,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("redsem.queues on this server still defines statement queue \"%s\"", mine->name),
				 errdetail("Its definition there applies again on this server, and on every server whose redsem.queues defines it."),
				 errhint("Remove the queue from redsem.queues on every server.")));
	else if (mine != NULL && !queue_def_same(mine, q))
		ereport(WARNING,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("redsem.queues on this server defines statement queue \"%s\" otherwise", mine->name),
				 errdetail("The definition in Redis applies on every server; this server's redsem.queues is not applied to this queue."),
				 errhint("Remove the queue from redsem.queues on every server.")));
}

/* The queue name argument: a valid name, or 22023 */
static char *
queue_name_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *name;

	if (PG_ARGISNULL(argno))
		reject_null("name");
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (!queue_valid_name(name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid statement queue name \"%s\"", name),
				 errdetail("A queue name is 1 to %d ASCII letters, digits, \"_\", \".\" or \"-\".",
						   QUEUE_MAX_NAME_BYTES)));
	return name;
}

/* Apply options to q (a new queue, or as it is defined), or raise 22023 */
static void
apply_options(QueueDef *q, const char *options)
{
	GUC_check_errdetail_string = NULL;
	if (!queue_parse_options(options, q))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid options for statement queue \"%s\"", q->name),
				 GUC_check_errdetail_string ? errdetail_internal("%s", GUC_check_errdetail_string) : 0,
				 errhint("Options are key=value separated by blanks: active_statements, min_cost, max_wait, on_redis_error, utility, application_name, application_priority.")));
}

/* A queue named name, with nothing set (max_wait: none) */
static void
blank_def(QueueDef *q, const char *name)
{
	memset(q, 0, sizeof(*q));
	q->max_wait_ms = -1;
	strlcpy(q->name, name, sizeof(q->name));
}

/* q's options as Redis keeps them */
static char *
def_text(const QueueDef *q)
{
	StringInfoData buf;

	initStringInfo(&buf);
	queue_options_text(q, &buf);
	return buf.data;
}

/*
 * The definition of queue name in Redis (palloc'd), or NULL.  wait: first
 * wait while a server has a newer copy to store back (a session; never
 * the keeper).
 */
static char *
stored_def(RedisCall *call, const char *name, bool wait)
{
	int			exists;
	int64		version;
	bool		must_wait;
	char	  **names;
	char	  **texts;
	int			n;

	for (int waits = 0;; waits++)
	{
		if (!sem_queues_get(call, NULL, &exists, &version, &must_wait, &names, &texts, &n))
			return NULL;
		if (!wait || !must_wait)
			break;
		wait_for_restore(waits);
	}
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return texts[i];
	return NULL;
}

/*
 * Whether queue name is defined, in redsem.queues or in Redis; true when
 * Redis cannot say (the session reaches another Redis or prefix than the
 * server reads from, the definitions are gone, older than the server's
 * copy or about to be stored back, or the call failed), so that only a
 * drop counts as none (queue.c: a statement whose queue's cap went twice
 * while it waited)
 */
bool
queue_fleet_defines(const char *name)
{
	RedisCall	call = REDIS_SQL_CALL;
	int			exists;
	int64		version;
	bool		must_wait;
	char	  **names;
	char	  **texts;
	int			n;
	bool		here;
	int64		mine;

	if (queue_def_in(queue_setting_config(), name) != NULL || fleet == NULL)
		return true;
	LWLockAcquire(fleet->lock, LW_SHARED);
	here = read_from_here();
	mine = fleet->version;
	LWLockRelease(fleet->lock);
	call.elevel = LOG;
	if (!here ||
		!sem_queues_get(&call, NULL, &exists, &version, &must_wait, &names, &texts, &n) ||
		exists == 0 || must_wait || version < mine)
		return true;
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

/* Raise 42704: queue name is not defined in Redis */
static void
no_such_queue(const char *name)
{
	bool		local = queue_def_in(queue_setting_config(), name) != NULL;

	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("statement queue \"%s\" does not exist", name),
			 local ? errdetail("Only this server's redsem.queues defines it; that definition is changed there.") : 0,
			 errhint("Create it with redsem_create_queue().")));
}

/*
 * Before a cap of q is set, which ends an adaptive limit: its mark goes
 * first, so that an adaptive limit set meanwhile (state, then mark) keeps
 * its mark; a mark left on a fixed limit only costs a keeper a look
 */
static void
cap_to_be_set(RedisCall *call, const QueueDef *q)
{
	(void) sem_adapt_note(call, q->semaphore, false);
}

/*
 * A queue of q's name created again while its drop raised the limit: give
 * it its cap back (compare-and-set on the open limit)
 */
static void
recap_if_created(const QueueDef *q)
{
	RedisCall	call = REDIS_SQL_CALL;
	SemLimit	limit;
	QueueDef	again;
	char	   *text;

	call.elevel = WARNING;
	text = stored_def(&call, q->name, false);
	if (text != NULL && parse_stored(q->name, text, &again))
		(void) sem_set_limit_if(&call, q->semaphore, again.active, REDSEM_MAX_HOLDERS, &limit);
}

/*
 * Note in Redis when the open limit free_line is about to leave on q's
 * semaphore is to be removed, for the keepers that did not see the drop (a
 * failure is logged: this server's keeper removes it anyway, unless it
 * restarts; a note without an open limit is only forgotten)
 */
static void
note_open(const QueueDef *q)
{
	RedisCall	call = REDIS_SQL_CALL;

	call.elevel = LOG;
	(void) sem_queue_open(&call, q->name, drop_window_ms());
}

/*
 * Let every statement waiting in dropped queue q's line in at once: raise
 * its semaphore's stored limit, if it is still the cap read, to the most
 * there can be, which admits them all (they run, as statements arriving
 * now run unqueued).  That open limit stays stored for a while, so that a
 * server that has not read the drop yet lets its statements in too,
 * instead of storing the old cap again; each keeper that saw the drop
 * removes it after QUEUE_FLEET_CAP_CHECK_MS (reconcile_caps).  False if
 * nothing was raised (no cap stored, a change raced the drop, an adaptive
 * limit, which a compare-and-set leaves alone, or Redis failed, which
 * warns): the caller removes the cap as before, and
 * the line is let in as the running statements end.
 */
static bool
free_line(const QueueDef *q)
{
	RedisCall	call = REDIS_SQL_CALL;
	SemLimit	limit;
	int			cap;

	call.elevel = WARNING;
	if (!sem_limit(&call, q->semaphore, &limit) || limit.stored <= 0)
		return false;
	cap = (int) limit.stored;
	/* (noted first: a raise is never left without its note) */
	note_open(q);
	cap_to_be_set(&call, q);
	if (!sem_set_limit_if(&call, q->semaphore, REDSEM_MAX_HOLDERS, cap, &limit) ||
		limit.stored != REDSEM_MAX_HOLDERS)
		return false;
	sem_pin_configured(&call, q->semaphore);
	recap_if_created(q);
	return true;
}

/*
 * Make the stored limit of q's semaphore its cap: it is what admissions
 * follow, on every server.  A failure warns (the definition is stored; the
 * first statement stores the cap if none is).
 */
static void
apply_cap(const QueueDef *q, int cap)
{
	RedisCall	call = REDIS_SQL_CALL;
	SemLimit	limit;

	call.elevel = WARNING;
	cap_to_be_set(&call, q);
	if (sem_set_limit(&call, q->semaphore, cap, false, &limit))
	{
		sem_pin_configured(&call, q->semaphore);
		return;
	}
	ereport(WARNING,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("the cap of statement queue \"%s\" is not applied yet", q->name),
			 errdetail("Its definition is stored in Redis, but its semaphore's limit could not be set."),
			 errhint("Run redsem_set_limit('%s%s', %d), which stores it.", REDSEM_QUEUE_PREFIX, q->name, q->active)));
}

/*
 * After a change: if another change came at once, the cap stored last may
 * be the other's while its definition is ours (or the reverse).  Make the
 * cap the definition's as it is now, unless yet another change moves it
 * meanwhile (compare-and-set; the keepers check again later).
 */
static void
settle_cap(const QueueDef *q)
{
	RedisCall	call = REDIS_SQL_CALL;

	call.elevel = WARNING;
	for (int tries = 0; tries < QUEUE_ALTER_TRIES; tries++)
	{
		SemLimit	limit;
		QueueDef	now;
		char	   *text;
		int64		was;

		if (!sem_limit(&call, q->semaphore, &limit))
			return;
		was = limit.stored;
		text = stored_def(&call, q->name, false);
		if (text == NULL)
		{
			/* dropped: a change that raced the drop may have set its cap */
			if (limit.stored > 0 && queue_def_in(queue_setting_config(), q->name) == NULL)
				(void) sem_set_limit_if(&call, q->semaphore, 0, (int) limit.stored, &limit);
			return;
		}
		if (!parse_stored(q->name, text, &now) || now.active == limit.stored)
			return;
		/* (refused with the limit unchanged: an adaptive limit, left alone) */
		if (!sem_set_limit_if(&call, q->semaphore, now.active, (int) Max(was, 0), &limit) ||
			limit.stored == was)
			return;
	}
}

/*
 * A change found the definitions gone (or a copy stored back) while a
 * server has a newer copy that its keeper stores back within a read: wait
 * for that a little (interruptibly), then tell the administrator
 */
static void
wait_for_restore(int tries)
{
	if (tries >= QUEUE_RESTORE_WAIT_MS / 100)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("the statement queue definitions are being restored"),
				 errdetail("Redis lost them, or holds older ones than a server's copy, and that server has not stored its copy back yet."),
				 errhint("Try again in a few seconds.")));
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 100,
					 redsem_wait_event());
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * Change queue name's definition by options (alter) and return its new
 * text: read, changed, and stored only if nobody changed it meanwhile;
 * *new_cap: its active_statements changed (or the old text was unreadable)
 */
static char *
alter_def(const char *name, const char *options, QueueDef *q, bool *new_cap)
{
	RedisCall	call = REDIS_SQL_CALL;

	for (int tries = 0, waits = 0; tries < QUEUE_ALTER_TRIES; tries++)
	{
		char	   *was = stored_def(&call, name, true);
		char	   *text;
		char	   *existing;
		int			result;
		int			old_active = -1;

		if (was == NULL)
			no_such_queue(name);
		blank_def(q, name);
		GUC_check_errdetail_string = NULL;
		if (queue_parse_options(was, q))
			old_active = q->active;
		else
			blank_def(q, name); /* (a direct writer's: begin anew) */
		apply_options(q, options);
		*new_cap = q->active != old_active;
		text = def_text(q);
		(void) sem_queue_put(&call, name, text, was, &result, &existing);
		if (result == 1)
			return text;
		if (result == -2)
		{
			wait_for_restore(waits++);
			tries--;
			continue;
		}
		if (existing == NULL)
			no_such_queue(name);
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_IN_USE),
			 errmsg("statement queue \"%s\" is being changed by other sessions", name),
			 errhint("Try again.")));
	return NULL;				/* keep the compiler quiet */
}

/*
 * After a change: ask the keeper to read the definitions now, and wait (at
 * most QUEUE_READ_BACK_WAIT_MS) until it has, so that this server applies
 * the change when the function returns (an ALTER ROLE ... SET
 * redsem.queue right after a create finds the queue defined).  Without
 * preload, or a keeper, nothing to wait for.
 */
static void
read_back(void)
{
	uint64		want;
	TimestampTz until = TimestampTzPlusMilliseconds(redsem_now(), QUEUE_READ_BACK_WAIT_MS);

	if (fleet == NULL || !shared_keeper_is_active())
		return;
	want = pg_atomic_add_fetch_u64(&fleet->reads_asked, 1);
	shared_keeper_wake();
	while (pg_atomic_read_u64(&fleet->reads_done) < want && redsem_now() < until)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
						 redsem_wait_event());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * After a definition was stored: its cap for every server if new_cap (a
 * queue created, its active_statements changed, or a limit set by hand:
 * the other options leave an adaptive limit adaptive), checked against a
 * change made at once (settle_cap, which leaves an adaptive limit alone),
 * the log line (what: "created"...), and this server's read of it
 * (read_back)
 */
static void
changed(const QueueDef *q, const char *what, const char *text, bool new_cap)
{
	if (new_cap)
		apply_cap(q, q->active);
	settle_cap(q);
	ereport(LOG,
			(errmsg("redsem: statement queue \"%s\" %s by role \"%s\": %s",
					q->name, what, GetUserNameFromId(GetUserId(), false), text)));
	read_back();
}

/*
 * redsem_create_queue(name, options): define a statement queue for every
 * server, in Redis; its cap takes effect at once.  Administrators.  Logged.
 */
Datum
redsem_create_queue(PG_FUNCTION_ARGS)
{
	QueueDef	q;
	char	   *stored;
	char	   *existing;
	int			result;
	RedisCall	call = REDIS_SQL_CALL;

	require_queue_admin("create a statement queue");
	blank_def(&q, queue_name_arg(fcinfo, 0));
	if (PG_ARGISNULL(1))
		reject_null("options");
	apply_options(&q, text_to_cstring(PG_GETARG_TEXT_PP(1)));
	stored = def_text(&q);
	hold_init();
	restore_before_change();
	for (int waits = 0;; waits++)
	{
		(void) sem_queue_put(&call, q.name, stored, NULL, &result, &existing);
		if (result != -2)
			break;
		wait_for_restore(waits);
	}
	if (result == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("statement queue \"%s\" already exists", q.name),
				 errdetail("Its definition is: %s.", existing ? existing : ""),
				 errhint("Change it with redsem_alter_queue().")));
	if (result < 0)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many statement queues"),
				 errdetail("At most %d can be defined.", QUEUE_MAX_QUEUES)));
	changed(&q, "created", stored, true);
	warn_not_read_here();
	warn_setting_differs(&q, false);
	PG_RETURN_DATUM(text_datum_from_redis(stored));
}

/*
 * redsem_alter_queue(name, options): change the options given, keep the
 * others; a new cap takes effect at once on every server (raised: waiters
 * that now fit are admitted; lowered: running statements finish).
 * Administrators.  Logged.
 */
Datum
redsem_alter_queue(PG_FUNCTION_ARGS)
{
	QueueDef	q;
	char	   *name;
	char	   *stored;
	bool		new_cap;

	require_queue_admin("change a statement queue");
	name = queue_name_arg(fcinfo, 0);
	if (PG_ARGISNULL(1))
		reject_null("options");
	hold_init();
	restore_before_change();
	stored = alter_def(name, text_to_cstring(PG_GETARG_TEXT_PP(1)), &q, &new_cap);
	changed(&q, "changed", stored, new_cap);
	warn_not_read_here();
	warn_setting_differs(&q, false);
	PG_RETURN_DATUM(text_datum_from_redis(stored));
}

/*
 * redsem_drop_queue(name, if_exists): drop a statement queue for every
 * server, and its cap; running statements finish, the next ones are not
 * queued.  Administrators.  Logged.
 */
Datum
redsem_drop_queue(PG_FUNCTION_ARGS)
{
	QueueDef	q;
	bool		if_exists = !PG_ARGISNULL(1) && PG_GETARG_BOOL(1);
	bool		dropped;
	int			result;
	RedisCall	call = REDIS_SQL_CALL;

	require_queue_admin("drop a statement queue");
	blank_def(&q, queue_name_arg(fcinfo, 0));
	snprintf(q.semaphore, sizeof(q.semaphore), REDSEM_QUEUE_PREFIX "%s", q.name);
	hold_init();
	restore_before_change();
	for (int waits = 0;; waits++)
	{
		(void) sem_queue_drop(&call, q.name, &result);
		if (result != -2)
			break;
		wait_for_restore(waits);
	}
	dropped = result == 1;
	if (!dropped && !if_exists)
		no_such_queue(q.name);
	if (!dropped)
	{
		ereport(NOTICE,
				(errmsg("statement queue \"%s\" does not exist, skipping", q.name)));
		PG_RETURN_BOOL(false);
	}
	/*
	 * (a queue this server's redsem.queues defines too stays, with its cap:
	 * its line is not let in)
	 */
	if (queue_def_in(queue_setting_config(), q.name) != NULL || !free_line(&q))
	{
		apply_cap(&q, 0);
		settle_cap(&q);
	}
	ereport(LOG,
			(errmsg("redsem: statement queue \"%s\" dropped by role \"%s\"",
					q.name, GetUserNameFromId(GetUserId(), false))));
	read_back();
	warn_setting_differs(&q, true);
	PG_RETURN_BOOL(true);
}

/*
 * redsem_set_limit on a queue's semaphore (by: "redsem_set_limit"), or
 * redsem_set_adaptive_limit fixing its limit: if Redis defines that queue,
 * change its definition's active_statements instead (the same operation as
 * redsem_alter_queue's, cap included) and return true; false to let the
 * caller store the limit alone.  A definition that cannot be read is
 * reported with a WARNING, and the limit stored alone.  (Without it, the
 * keepers would set the cap back to the definition's: reconcile_caps.)
 */
bool
queue_fleet_set_limit(const char *semaphore, int active, const char *by)
{
	const char *name = redsem_queue_of_semaphore(semaphore);
	RedisCall	call = REDIS_SQL_CALL;
	QueueDef	q;
	char	   *text;
	bool		new_cap;

	if (active <= 0 || name == NULL || !queue_valid_name(name))
		return false;
	call.elevel = WARNING;
	if (stored_def(&call, name, true) == NULL)
		return false;
	text = alter_def(name, psprintf("active_statements=%d", active), &q, &new_cap);
	/* (a limit set by hand is fixed, even at the same cap) */
	changed(&q, psprintf("changed (%s)", by), text, true);
	return true;
}

/* The i-th tab-separated part of text (palloc'd; "" if there is none) */
static char *
tab_part(const char *text, int i)
{
	const char *p = text;

	for (; i > 0 && p != NULL; i--)
	{
		p = strchr(p, '\t');
		if (p != NULL)
			p++;
	}
	if (p == NULL)
		return pstrdup("");
	return pnstrdup(p, strcspn(p, "\t"));
}

/* A comma-separated list as a text[] datum */
static Datum
names_array(const char *list)
{
	ArrayBuildState *astate = NULL;
	char	   *copy = pstrdup(list);
	char	   *save;

	for (char *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save))
		astate = accumArrayResult(astate, text_datum_from_redis(e), false, TEXTOID,
								  CurrentMemoryContext);
	if (astate == NULL)
		return PointerGetDatum(construct_empty_array(TEXTOID));
	return makeArrayResult(astate, CurrentMemoryContext);
}

/*
 * redsem_queue_servers(): the servers whose keeper read the statement
 * queues' definitions from this Redis and key prefix within the last
 * QUEUE_FLEET_SERVER_TTL_MS: those that apply them.  A server missing
 * here does not (no preload, no keeper, another Redis or prefix, cut off).
 */
Datum
redsem_queue_servers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RedisCall	call = REDIS_SQL_CALL;
	int64		now_ms;
	char	  **servers;
	char	  **values;
	int			n;

	hold_init();
	(void) sem_queue_servers(&call, &now_ms, &servers, &values, &n);
	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		Datum		row[6];
		bool		nulls[6] = {0};
		char	   *rest;
		int64		read_ms;
		char	   *head;
		char	   *name;

		(void) strtoi64(values[i], &rest, 10);	/* (until when it is listed) */
		read_ms = strtoi64(rest, &rest, 10);
		(void) strtoi64(rest, &rest, 10);	/* (the version of its copy) */
		head = tab_part(rest, 0);

		while (*head == ' ')
			head++;
		name = strchr(head, ' ');
		row[0] = text_datum_from_redis(servers[i]);
		row[1] = BoolGetDatum(head[0] == 's');
		nulls[2] = name == NULL || name[1] == '\0';
		row[2] = text_datum_from_redis(name ? name + 1 : "");
		row[3] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																  read_ms - now_ms));
		row[4] = names_array(tab_part(rest, 1));
		row[5] = names_array(tab_part(rest, 2));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
	}
	return (Datum) 0;
}
