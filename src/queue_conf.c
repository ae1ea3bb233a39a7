/*
 * queue_conf.c
 *		The statement queues' settings: redsem.queues (the definitions) and
 *		redsem.queue (a session's queue), parsed and checked once per
 *		change, never per statement.
 *
 * redsem.queues is a list of definitions separated by ';':
 *
 *	  name: active_statements=N [min_cost=C] [max_wait=DURATION]
 *			[on_redis_error=fail|run] [utility=off|on]
 *			[application_name=PATTERN|PATTERN...]
 *			[application_priority=PATTERN:N|PATTERN:N...]
 */
#include "postgres.h"

#include <math.h>

#include "common/hashfn.h"
#include "commands/dbcommands.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "common/shortest_dec.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "bounds.h"
#include "clock.h"
#include "compat.h"
#include "guc.h"
#include "queue_conf.h"
#include "shmem.h"
#include "sqlargs.h"
#include "timing.h"
#include "textenc.h"

/* The session's queue (redsem.queue) and the definitions (redsem.queues) */
static char *queue_setting = NULL;
static int	queue_priority_setting = 0;
static char *queue_tenant_setting = NULL;
static char *queues_setting = NULL;
int			queue_poll_interval_ms = QUEUE_FLEET_POLL_MS;
static const QueueConfig *config = NULL;
static uint64 config_generation = 0;	/* bumped at every change of merged */

/*
 * The definitions in effect: the fleet's, kept in Redis (queue_fleet.c),
 * then those of redsem.queues that name other queues.  The one before is
 * kept until the next change: a caller may still point into it.
 */
static QueueConfig *merged = NULL;
/* When merged, or config without it, was made (queue_view_since; redsem's clock) */
static TimestampTz view_made_at = 0;
static QueueConfig *retired = NULL;
static uint64 guc_generation = 0;	/* bumped at every assignment of config */
static uint64 merged_guc = 0;	/* guc_generation merged in */
static uint64 merged_fleet = 0; /* generation of the fleet's merged in */
static char unapplied[QUEUE_MAX_QUEUES * (QUEUE_MAX_NAME_BYTES + 2)];	/* names
																		 * of redsem.queues
																		 * left out */

/* The definition of name in conf, or NULL */
const QueueDef *
queue_def_in(const QueueConfig *conf, const char *name)
{
	for (int i = 0; conf != NULL && i < conf->count; i++)
		if (strcmp(conf->queues[i].name, name) == 0)
			return &conf->queues[i];
	return NULL;
}

/* queue_def_in, for a definition to change */
static QueueDef *
find_def(QueueConfig *conf, const char *name)
{
	return unconstify(QueueDef *, queue_def_in(conf, name));
}

/* Where the fleet's definitions come from (queue_fleet.c), once preloaded */
static QueueFleetSource fleet_source = NULL;

/* From _PG_init: fn gives the fleet's definitions and their generation */
void
queue_conf_set_fleet_source(QueueFleetSource fn)
{
	fleet_source = fn;
}

/* Make merged anew from the fleet's definitions and redsem.queues */
static void
merge_definitions(const QueueConfig *fleet)
{
	QueueConfig *next = MemoryContextAllocZero(TopMemoryContext,
											   offsetof(QueueConfig, queues) +
											   sizeof(QueueDef) * QUEUE_MAX_QUEUES);

	for (int i = 0; fleet != NULL && i < fleet->count; i++)
	{
		next->queues[next->count] = fleet->queues[i];
		next->queues[next->count++].fleet = true;
	}
	unapplied[0] = '\0';
	for (int i = 0; config != NULL && i < config->count; i++)
	{
		QueueDef   *f = find_def(next, config->queues[i].name);

		if (f != NULL)
			f->setting_differs = !queue_def_same(f, &config->queues[i]);
		else if (next->count < QUEUE_MAX_QUEUES)
			next->queues[next->count++] = config->queues[i];
		else
			snprintf(unapplied + strlen(unapplied), sizeof(unapplied) - strlen(unapplied),
					 "%s%s", unapplied[0] ? "," : "", config->queues[i].name);
	}
	if (retired)
		pfree(retired);
	retired = merged;
	merged = next;
	view_made_at = redsem_now();
	config_generation++;
}

/* The definitions in effect; never NULL once the settings are defined */
const QueueConfig *
queue_config(void)
{
	uint64		fleet_generation = 0;
	const QueueConfig *fleet = fleet_source ? fleet_source(&fleet_generation) : NULL;

	if (config == NULL)
		return NULL;
	if (merged == NULL || merged_guc != guc_generation || merged_fleet != fleet_generation)
	{
		merge_definitions(fleet);
		merged_guc = guc_generation;
		merged_fleet = fleet_generation;
	}
	return merged;
}

/*
 * The queues this server's redsem.queues defines that are not applied: 64
 * queues are in effect already (comma-separated; "" if none)
 */
const char *
queue_unapplied_settings(void)
{
	(void) queue_config();
	return unapplied;
}

/* This server's redsem.queues alone (NULL before it is defined) */
const QueueConfig *
queue_setting_config(void)
{
	return config;
}

StaticAssertDecl(QUEUE_MAX_QUEUES <= STATS_RESERVED_ROOM,
				 "every queue has room in the statistics table");

/*
 * When this backend's view of the queues (queue_is_semaphore's) was made:
 * a queue made later is not in it, and a queue counted since may still be
 * defined though not in it (0: no view)
 */
TimestampTz
queue_view_since(void)
{
	return (merged != NULL || config != NULL) ? view_made_at : 0;
}

/*
 * Whether name is the semaphore of a queue redsem.queues defines (not
 * merely a name that looks like one: any role can make Redis errors be
 * counted under a name it picks)
 */
bool
queue_is_semaphore(const char *name)
{
	const QueueConfig *conf = merged ? merged : config;

	for (int i = 0; conf != NULL && i < conf->count; i++)
		if (strcmp(conf->queues[i].semaphore, name) == 0)
			return true;
	return false;
}

/* The queue the session belongs to by redsem.queue, or "" */
const char *
queue_session_setting(void)
{
	return queue_setting ? queue_setting : "";
}

/*
 * True if name matches the glob pattern ('*' matches any run).  Greedy,
 * going back only to the last '*': O(pattern x name) at worst, so no
 * pattern (however many stars) makes a client's application_name costly.
 */
bool
queue_glob_match(const char *pattern, const char *name)
{
	const char *star = NULL;	/* the last '*' seen, and where it took over */
	const char *resume = NULL;

	while (*name)
	{
		if (*pattern == '*')
		{
			star = pattern++;
			resume = name;
		}
		else if (*pattern == *name)
		{
			pattern++;
			name++;
		}
		else if (star)
		{
			pattern = star + 1;		/* let the last '*' take one more byte */
			name = ++resume;
		}
		else
			return false;
	}
	while (*pattern == '*')
		pattern++;
	return *pattern == '\0';
}

/*
 * True for an ASCII blank.  Not isspace(): a backend's LC_CTYPE is its
 * database's, so a Latin-1 locale would take byte 0xA0 for a blank where the
 * postmaster (another locale) does not, and read one setting two ways.
 */
static bool
is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Skip blanks */
static const char *
skip_blanks(const char *p)
{
	while (*p && is_blank(*p))
		p++;
	return p;
}

/* Copy the word at *p (up to a blank, ';', '=' or ':') into buf */
static bool
take_word(const char **p, char *buf, size_t size, const char *stops)
{
	size_t		n = 0;

	while (**p && !is_blank(**p) && strchr(stops, **p) == NULL)
	{
		if (n + 1 >= size)
			return false;
		buf[n++] = *(*p)++;
	}
	buf[n] = '\0';
	return n > 0;
}

/*
 * True if name is a valid queue name: ASCII letters, digits, '_', '.', '-'
 * (not isalnum(), which follows the database's locale: a Latin-1 one would
 * let in bytes that are not UTF-8 in Redis)
 */
static bool
valid_name(const char *name)
{
	return *name != '\0' &&
		strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == strlen(name);
}

/* Parse a boolean word */
static bool
parse_onoff(const char *value, bool *result)
{
	if (pg_strcasecmp(value, "on") == 0 || pg_strcasecmp(value, "true") == 0)
		*result = true;
	else if (pg_strcasecmp(value, "off") == 0 || pg_strcasecmp(value, "false") == 0)
		*result = false;
	else
		return false;
	return true;
}

/*
 * Walk an application_priority list, "PATTERN:N|PATTERN:N...": *priority
 * is the N of the first entry whose pattern app matches (app NULL: none
 * does).  1 if one matched, 0 if none, -1 if the list is malformed (an
 * entry without a pattern, or whose N is not a priority).
 */
int
queue_app_priority(const char *list, const char *app, int *priority)
{
	char		buf[QUEUE_MAX_APPS_BYTES + 1];
	char	   *save;

	strlcpy(buf, list, sizeof(buf));
	for (char *e = strtok_r(buf, "|", &save); e; e = strtok_r(NULL, "|", &save))
	{
		char	   *colon = strrchr(e, ':');
		char	   *end = NULL;
		long		n = 0;

		errno = 0;
		if (colon)
			n = strtol(colon + 1, &end, 10);
		if (colon == NULL || colon == e || colon[1] == '\0' || *end != '\0' || errno != 0 ||
			n < -REDSEM_MAX_PRIORITY || n > REDSEM_MAX_PRIORITY)
			return -1;
		*colon = '\0';
		if (app != NULL && queue_glob_match(e, app))
		{
			*priority = (int) n;
			return 1;
		}
	}
	return 0;
}

/* True if value is an application_priority list; else say why */
static bool
valid_app_priorities(const QueueDef *q, const char *value)
{
	int			unused;

	if (strlen(value) > QUEUE_MAX_APPS_BYTES)
	{
		GUC_check_errdetail("Queue \"%s\": application_priority must be at most %d bytes.",
							q->name, QUEUE_MAX_APPS_BYTES);
		return false;
	}
	if (queue_app_priority(value, NULL, &unused) < 0)
	{
		GUC_check_errdetail("Queue \"%s\": application_priority must be PATTERN:N entries separated by \"|\", N from %d to %d (e.g. grafana*:10|airflow*:-5).",
							q->name, -REDSEM_MAX_PRIORITY, REDSEM_MAX_PRIORITY);
		return false;
	}
	return true;
}

/* Apply one key=value to q; false with the detail set if it is wrong */
static bool
apply_option(QueueDef *q, const char *key, const char *value)
{
	char	   *end;

	if (strcmp(key, "active_statements") == 0)
	{
		long		n = strtol(value, &end, 10);

		if (*end != '\0' || n < 1 || n > 1000000)
		{
			GUC_check_errdetail("Queue \"%s\": active_statements must be an integer from 1 to 1000000.", q->name);
			return false;
		}
		q->active = (int) n;
	}
	else if (strcmp(key, "min_cost") == 0)
	{
		q->min_cost = strtod(value, &end);
		if (*end != '\0' || !(q->min_cost >= 0) || isinf(q->min_cost))
		{
			GUC_check_errdetail("Queue \"%s\": min_cost must be a number of at least 0.", q->name);
			return false;
		}
	}
	else if (strcmp(key, "max_wait") == 0)
	{
		if (!parse_int(value, &q->max_wait_ms, GUC_UNIT_MS, NULL) ||
			q->max_wait_ms < -1)
		{
			GUC_check_errdetail("Queue \"%s\": max_wait must be a duration such as 30s or 5min, or -1 for no limit.", q->name);
			return false;
		}
	}
	else if (strcmp(key, "on_redis_error") == 0)
	{
		if (strcmp(value, "run") == 0)
			q->run_on_error = true;
		else if (strcmp(value, "fail") == 0)
			q->run_on_error = false;
		else
		{
			GUC_check_errdetail("Queue \"%s\": on_redis_error must be \"fail\" or \"run\".", q->name);
			return false;
		}
	}
	else if (strcmp(key, "utility") == 0)
	{
		if (!parse_onoff(value, &q->utility))
		{
			GUC_check_errdetail("Queue \"%s\": utility must be on or off.", q->name);
			return false;
		}
	}
	else if (strcmp(key, "application_name") == 0)
	{
		if (strlen(value) > QUEUE_MAX_APPS_BYTES)
		{
			GUC_check_errdetail("Queue \"%s\": application_name patterns must be at most %d bytes.",
								q->name, QUEUE_MAX_APPS_BYTES);
			return false;
		}
		strlcpy(q->apps, value, sizeof(q->apps));
	}
	else if (strcmp(key, "application_priority") == 0)
	{
		if (!valid_app_priorities(q, value))
			return false;
		strlcpy(q->app_priorities, value, sizeof(q->app_priorities));
	}
	else
	{
		GUC_check_errdetail("Queue \"%s\": unknown option \"%s\"; the options are active_statements, min_cost, max_wait, on_redis_error, utility, application_name, application_priority.",
							q->name, key);
		return false;
	}
	return true;
}

/* True if p is where a value would start but none is given */
static bool
empty_value(const char *p)
{
	return *p == '\0' || *p == ';' || is_blank(*p);
}

/* True if key's value may be empty ("application_name=": none) */
static bool
resettable(const char *key, char *value)
{
	value[0] = '\0';
	return strcmp(key, "application_name") == 0 ||
		strcmp(key, "application_priority") == 0;
}

/* The most options one definition has (each given once) */
#define QUEUE_MAX_OPTIONS	8

/* Parse "key=value key=value ..." up to ';' or the end into q */
static bool
parse_options(const char **p, QueueDef *q)
{
	char		key[64];
	char		value[QUEUE_MAX_APPS_BYTES + 2];
	char		seen[QUEUE_MAX_OPTIONS][64];
	int			n_seen = 0;

	for (;;)
	{
		*p = skip_blanks(*p);
		if (**p == '\0' || **p == ';')
			return true;
		if (!take_word(p, key, sizeof(key), "=;") || **p != '=')
		{
			GUC_check_errdetail("Queue \"%s\": expected key=value.", q->name);
			return false;
		}
		(*p)++;
		if (!take_word(p, value, sizeof(value), ";") &&
			!(empty_value(*p) && resettable(key, value)))
		{
			GUC_check_errdetail("Queue \"%s\": option \"%s\" has no value, or a value that is too long.",
								q->name, key);
			return false;
		}
		for (int i = 0; i < n_seen; i++)
		{
			if (strcmp(seen[i], key) == 0)
			{
				GUC_check_errdetail("Queue \"%s\": option \"%s\" is given twice.", q->name, key);
				return false;
			}
		}
		if (!apply_option(q, key, value))
			return false;
		if (n_seen < QUEUE_MAX_OPTIONS)
			strlcpy(seen[n_seen++], key, sizeof(seen[0]));
	}
}

/* Check that q, parsed, is whole (active_statements given); name its semaphore */
static bool
complete_definition(QueueDef *q)
{
	if (q->active == 0)
	{
		GUC_check_errdetail("Queue \"%s\": active_statements is required.", q->name);
		return false;
	}
	snprintf(q->semaphore, sizeof(q->semaphore), REDSEM_QUEUE_PREFIX "%s", q->name);
	return true;
}

/* Parse one "name: options" definition into q */
static bool
parse_definition(const char **p, QueueDef *q, const QueueConfig *so_far)
{
	memset(q, 0, sizeof(*q));
	q->max_wait_ms = -1;
	*p = skip_blanks(*p);
	if (!take_word(p, q->name, sizeof(q->name), ":;") || !valid_name(q->name))
	{
		GUC_check_errdetail("A queue definition starts with a name of 1 to %d ASCII letters, digits, \"_\", \".\" or \"-\", then \":\".",
							QUEUE_MAX_NAME_BYTES);
		return false;
	}
	*p = skip_blanks(*p);
	if (**p != ':')
	{
		GUC_check_errdetail("Queue \"%s\": expected \":\" after the name.", q->name);
		return false;
	}
	(*p)++;
	for (int i = 0; i < so_far->count; i++)
		if (strcmp(so_far->queues[i].name, q->name) == 0)
		{
			GUC_check_errdetail("Queue \"%s\" is defined twice.", q->name);
			return false;
		}
	return parse_options(p, q) && complete_definition(q);
}

/*
 * Parse definitions "name: options; ..." into parsed (room for
 * QUEUE_MAX_QUEUES); false with GUC_check_errdetail set if one is wrong
 */
bool
queue_parse_list(const char *p, QueueConfig *parsed)
{
	parsed->count = 0;
	for (;;)
	{
		p = skip_blanks(p);
		if (*p == '\0')
			return true;
		if (*p == ';')
		{
			p++;
			continue;
		}
		if (parsed->count == QUEUE_MAX_QUEUES)
		{
			GUC_check_errdetail("At most %d queues can be defined.", QUEUE_MAX_QUEUES);
			return false;
		}
		if (!parse_definition(&p, &parsed->queues[parsed->count], parsed))
			return false;
		parsed->count++;
	}
}

/*
 * Apply options "key=value ..." to q (its name set; the rest as a base to
 * change, or zeroed with max_wait_ms -1 for a new queue); false with
 * GUC_check_errdetail set if one is wrong, or if active_statements is
 * still missing
 */
bool
queue_parse_options(const char *options, QueueDef *q)
{
	const char *p = options;

	if (!parse_options(&p, q))
		return false;
	if (*p == ';')
	{
		GUC_check_errdetail("Queue \"%s\": options are separated by blanks, not \";\".", q->name);
		return false;
	}
	return complete_definition(q);
}

/* True if name is a queue's name (letters, digits, '_', '.', '-') */
bool
queue_valid_name(const char *name)
{
	return strlen(name) <= QUEUE_MAX_NAME_BYTES && valid_name(name);
}

/*
 * Append q's options to buf in the form queue_parse_options reads, every
 * option written out (the text kept in Redis, and compared)
 */
void
queue_options_text(const QueueDef *q, StringInfo buf)
{
	char		cost[DOUBLE_SHORTEST_DECIMAL_LEN];

	/* (the shortest text that reads back the same: no session setting) */
	double_to_shortest_decimal_buf(q->min_cost, cost);
	appendStringInfo(buf, "active_statements=%d min_cost=%s", q->active, cost);
	if (q->max_wait_ms >= 0)
		appendStringInfo(buf, " max_wait=%dms", q->max_wait_ms);
	appendStringInfo(buf, " on_redis_error=%s utility=%s",
					 q->run_on_error ? "run" : "fail", q->utility ? "on" : "off");
	if (q->apps[0] != '\0')
		appendStringInfo(buf, " application_name=%s", q->apps);
	if (q->app_priorities[0] != '\0')
		appendStringInfo(buf, " application_priority=%s", q->app_priorities);
}

/* True if a and b define the same queue the same way */
bool
queue_def_same(const QueueDef *a, const QueueDef *b)
{
	return strcmp(a->name, b->name) == 0 && a->active == b->active &&
		a->min_cost == b->min_cost && a->max_wait_ms == b->max_wait_ms &&
		a->run_on_error == b->run_on_error && a->utility == b->utility &&
		strcmp(a->apps, b->apps) == 0 &&
		strcmp(a->app_priorities, b->app_priorities) == 0;
}

/*
 * Say (once per value and process) that a queue setting does nothing here:
 * redsem is not preloaded.  A reload gets a server log line; SET, ALTER
 * ROLE/SYSTEM and a session's first use of redsem (the module load) get a
 * WARNING.
 */
static uint32 queue_warned = 0;	/* hash of the value last warned about */
static uint32 queues_warned = 0;

static void
warn_not_applied(const char *setting, const char *value, GucSource source,
				 uint32 *last_hash)
{
	uint32		h;

	if (redsem_preloaded || process_shared_preload_libraries_in_progress)
		return;
	if (value == NULL || value[0] == '\0')
	{
		*last_hash = 0;
		return;
	}
	h = hash_bytes((const unsigned char *) value, strlen(value));
	if (h == *last_hash)
		return;
	*last_hash = h;
	ereport(source == PGC_S_FILE && !redsem_loading ? LOG : WARNING,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("%s is set, but this server does not apply statement queues", setting),
			 errdetail("redsem is not in shared_preload_libraries: statements run without waiting for a queue slot."),
			 errhint("Add redsem to shared_preload_libraries and restart the server.")));
}

/* Check hook of redsem.queues: parse it into *extra */
static bool
check_queues(char **newval, void **extra, GucSource source)
{
	QueueConfig *parsed;
	const char *p = *newval ? *newval : "";

	parsed = redsem_guc_malloc(offsetof(QueueConfig, queues) +
							   sizeof(QueueDef) * QUEUE_MAX_QUEUES);
	if (parsed == NULL)
		return false;
	if (!queue_parse_list(p, parsed))
	{
		redsem_guc_free(parsed);
		return false;
	}
	*extra = parsed;
	warn_not_applied("redsem.queues", *newval, source, &queues_warned);
	return true;
}

/* Assign hook of redsem.queues */
static void
assign_queues(const char *newval, void *extra)
{
	config = (const QueueConfig *) extra;
	if (merged == NULL)
		view_made_at = redsem_now();
	config_generation++;
	guc_generation++;
}

/* Changes whenever the definitions may have changed */
uint64
queue_config_generation(void)
{
	return config_generation;
}

/* True if the definitions in effect here name queue name */
static bool
queue_defined(const char *name)
{
	return queue_def_in(queue_config(), name) != NULL;
}

/*
 * Check hook of redsem.queue: a name, or empty.  Checked when it is set
 * for a role or database (ALTER ROLE/DATABASE ... SET: PGC_S_TEST), a name
 * the definitions here lack gets a WARNING then, where the administrator
 * sees it, not only in the sessions it applies to.
 */
static bool
check_queue(char **newval, void **extra, GucSource source)
{
	if (*newval && (*newval)[0] != '\0' &&
		(strlen(*newval) > QUEUE_MAX_NAME_BYTES || !valid_name(*newval)))
	{
		GUC_check_errdetail("A queue name is 1 to %d ASCII letters, digits, \"_\", \".\" or \"-\".",
							QUEUE_MAX_NAME_BYTES);
		return false;
	}
	warn_not_applied("redsem.queue", *newval, source, &queue_warned);
	if (source == PGC_S_TEST && *newval && (*newval)[0] != '\0' && !queue_defined(*newval))
		ereport(WARNING,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("statement queue \"%s\" is not defined", *newval),
				 errdetail("Until it is, statements of the sessions it applies to run without queueing."),
				 errhint("Define it with redsem_create_queue(), or correct the name.")));
	return true;
}

/*
 * Check hook of redsem.queue_tenant: empty, or a tenant name in which
 * "%u" (the session's role), "%d" (the database), "%a" (application_name)
 * and "%%" are the only escapes.
 */
static bool
check_queue_tenant(char **newval, void **extra, GucSource source)
{
	const char *v = *newval ? *newval : "";
	const char *problem;

	for (const char *c = v; *c; c++)
	{
		if (*c != '%')
			continue;
		c++;
		if (*c != 'u' && *c != 'd' && *c != 'a' && *c != '%')
		{
			GUC_check_errdetail("Only %%u (the role), %%d (the database), %%a (application_name) and %%%% may follow \"%%\".");
			return false;
		}
	}
	if (v[0] != '\0' && strchr(v, '%') == NULL && (problem = tenant_problem(v)) != NULL)
	{
		GUC_check_errdetail("%s", problem);
		return false;
	}
	return true;
}

/* Define redsem.queues and redsem.queue */
void
queue_define_gucs(void)
{
	DefineCustomStringVariable("redsem.queues",
							   "Statement queues: \"name: active_statements=N [min_cost=C] [max_wait=D] [on_redis_error=fail|run] [utility=off|on] [application_name=P|P]; ...\".",
							   "Needs redsem in shared_preload_libraries. See docs/statement-queues.md.",
							   &queues_setting, "",
							   PGC_SIGHUP, 0,
							   check_queues, assign_queues, NULL);
	DefineCustomIntVariable("redsem.queue_poll_interval",
							"How often the keeper reads the statement queues defined in Redis (and lists its server among those that apply them).",
							"Needs redsem in shared_preload_libraries.",
							&queue_poll_interval_ms, QUEUE_FLEET_POLL_MS, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomStringVariable("redsem.queue",
							   "The statement queue of this session's role or database (ALTER ROLE/DATABASE ... SET).",
							   "Only superusers and roles granted SET on this parameter may change it.",
							   &queue_setting, "",
							   PGC_SUSET, 0,
							   check_queue, NULL, NULL);
	DefineCustomIntVariable("redsem.queue_priority",
							"The priority of this session's statements in their queue: higher first, a second's head start per level.",
							"Only superusers and roles granted SET on this parameter may change it (ALTER ROLE/DATABASE ... SET).",
							&queue_priority_setting, 0,
							-REDSEM_MAX_PRIORITY, REDSEM_MAX_PRIORITY,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("redsem.queue_tenant",
							   "The tenant of this session's statements in their queue: a name, or %u (the role), %d (the database), %a (application_name).",
							   "Only superusers and roles granted SET on this parameter may change it (ALTER ROLE/DATABASE ... SET).",
							   &queue_tenant_setting, "",
							   PGC_SUSET, 0,
							   check_queue_tenant, NULL, NULL);
}

/* The session user's name; its OID if the role was dropped meanwhile */
static const char *
session_user_name(void)
{
	const char *name = GetUserNameFromId(GetSessionUserId(), true);

	return name ? name : psprintf("%u", GetSessionUserId());
}

/*
 * The tenant of this session's queued statements: redsem.queue_tenant with
 * its escapes expanded, bytes a tenant name cannot hold made "_", cut to
 * the longest name; NULL for none (also when it expands to nothing).
 */
char *
queue_session_tenant(void)
{
	StringInfoData buf;
	const char *v = queue_tenant_setting;
	char	   *tenant;
	int			len;

	if (v == NULL || v[0] == '\0')
		return NULL;
	initStringInfo(&buf);
	for (; *v; v++)
	{
		const char *part = NULL;

		if (*v != '%')
		{
			appendStringInfoChar(&buf, *v);
			continue;
		}
		v++;
		if (*v == 'u')
			part = session_user_name();
		else if (*v == 'd')
			part = get_database_name(MyDatabaseId);
		else if (*v == 'a')
			part = application_name;
		else if (*v == '%')
			part = "%";
		else
			break;
		if (part)
			appendStringInfoString(&buf, part);
	}
	/* (in UTF-8, as a tenant given to a function is: textenc.c) */
	tenant = text_to_redis_quiet(buf.data);
	len = strlen(tenant);
	for (int i = 0; i < len; i++)
		if ((unsigned char) tenant[i] < 0x20 || tenant[i] == 0x7f || tenant[i] == '|')
			tenant[i] = '_';
	if (len > REDSEM_MAX_TENANT_BYTES)
		tenant[pg_encoding_mbcliplen(PG_UTF8, tenant, len, REDSEM_MAX_TENANT_BYTES)] = '\0';
	if (tenant[0] == '\0')
		return NULL;
	return tenant;
}

/* The priority of this session's queued statements (redsem.queue_priority) */
int
queue_session_priority(void)
{
	return queue_priority_setting;
}
