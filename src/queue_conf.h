/*
 * queue_conf.h
 *		The statement queues' settings (queue_conf.c): the definitions
 *		(redsem.queues), a session's queue (redsem.queue) and how a session
 *		is matched to one.  Below queue.c, which applies them.
 */
#ifndef REDSEM_QUEUE_CONF_H
#define REDSEM_QUEUE_CONF_H

#include "lib/stringinfo.h"

/* Bounds of a queue definition (redsem.queues) */
#define QUEUE_MAX_QUEUES		64
#define QUEUE_MAX_NAME_BYTES	63
#define QUEUE_MAX_APPS_BYTES	255

/* One queue, as redsem.queues or the fleet's definitions define it */
typedef struct QueueDef
{
	char		name[QUEUE_MAX_NAME_BYTES + 1];
	char		semaphore[QUEUE_MAX_NAME_BYTES + 7];	/* "queue:" name */
	int			active;			/* statements running at once */
	double		min_cost;		/* cheaper statements pass */
	int			max_wait_ms;	/* -1: no limit */
	bool		run_on_error;	/* Redis unusable: run (true) or fail */
	bool		utility;		/* queue utility statements too */
	char		apps[QUEUE_MAX_APPS_BYTES + 1]; /* application_name patterns,
												 * '|'-separated, '*' wildcards */
	char		app_priorities[QUEUE_MAX_APPS_BYTES + 1];	/* "PATTERN:N|..." */
	bool		fleet;			/* defined in Redis (queue_fleet.c) */
	bool		setting_differs;	/* fleet: redsem.queues here defines it
									 * otherwise (and is not applied) */
} QueueDef;

/* Every queue in effect, or those of one source */
typedef struct QueueConfig
{
	int			count;
	QueueDef	queues[FLEXIBLE_ARRAY_MEMBER];
} QueueConfig;

/* The fleet's definitions (NULL if none) and their generation */
typedef const QueueConfig *(*QueueFleetSource) (uint64 *generation);

extern int	queue_poll_interval_ms;

extern void queue_define_gucs(void);
extern void queue_conf_set_fleet_source(QueueFleetSource fn);
extern const QueueConfig *queue_config(void);
extern const QueueConfig *queue_setting_config(void);
extern const char *queue_unapplied_settings(void);
extern bool queue_parse_list(const char *p, QueueConfig *parsed);
extern bool queue_parse_options(const char *options, QueueDef *q);
extern bool queue_valid_name(const char *name);
extern void queue_options_text(const QueueDef *q, StringInfo buf);
extern bool queue_def_same(const QueueDef *a, const QueueDef *b);
extern const QueueDef *queue_def_in(const QueueConfig *conf, const char *name);
extern uint64 queue_config_generation(void);
extern bool queue_is_semaphore(const char *name);
extern TimestampTz queue_view_since(void);
extern const char *queue_session_setting(void);
extern int	queue_session_priority(void);
extern char *queue_session_tenant(void);
extern bool queue_glob_match(const char *pattern, const char *name);
extern int	queue_app_priority(const char *list, const char *app, int *priority);

#endif							/* REDSEM_QUEUE_CONF_H */
