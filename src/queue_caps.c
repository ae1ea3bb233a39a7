/*
 * queue_caps.c
 *		A statement queue's cap is its semaphore's stored limit in Redis
 *		("queue:<name>"), the same for every server: statements take the
 *		limit in effect there, and the first one stores its definition's
 *		active_statements if none is stored (acquire.c).  So a cap changes
 *		online, for every server at once, with redsem_set_limit, or by
 *		editing active_statements and reloading: each server's keeper then
 *		stores the new cap (this file).  Raising it admits the waiters that
 *		now fit; lowering it lets the running statements finish.  Nothing
 *		in a change of definition makes a statement fail.
 *
 * The keeper stores a cap only when this server's definition of it
 * changed, or the queue was defined, while the keeper ran (not at its
 * start: a restarted server does not undo a cap set by hand since), and
 * tries again until Redis has taken it.  At its start it replaces only
 * the open limit a drop of a fleet queue of that name may have left
 * (queue_fleet.c, free_line: 1,000,000, removed by the keepers that saw
 * the drop unless they all restarted meanwhile).  Queues defined in Redis
 * (queue_fleet.c) are not its: redsem_create_queue and redsem_alter_queue
 * set their caps.
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "bounds.h"
#include "clock.h"
#include "queue_caps.h"
#include "queue_conf.h"
#include "script.h"
#include "timing.h"

/* One queue's cap as this keeper last applied it (or found it at start) */
typedef struct AppliedCap
{
	char		name[QUEUE_MAX_NAME_BYTES + 1];
	char		semaphore[QUEUE_MAX_NAME_BYTES + 7];	/* "queue:" name */
	int			active;
	bool		pending;		/* changed, not yet stored in Redis */
	bool		check_open;		/* found at start: replace an open limit */
} AppliedCap;

static AppliedCap caps[QUEUE_MAX_QUEUES];
static int	ncaps = 0;

/*
 * Queues this server's redsem.queues no longer defines (a reload while the
 * keeper ran), whose cap is removed from Redis if it is still theirs
 */
static AppliedCap gone[QUEUE_MAX_QUEUES];
static int	ngone = 0;
static uint64 seen_generation = 0;
static bool started = false;
static TimestampTz next_try = 0;

/* This keeper's entry of queue name, or NULL */
static AppliedCap *
applied_cap(const char *name)
{
	for (int i = 0; i < ncaps; i++)
		if (strcmp(caps[i].name, name) == 0)
			return &caps[i];
	return NULL;
}

/*
 * Note the queues of this server's settings that conf no longer defines
 * (their caps go: remove_gone_caps), and forget those defined again
 */
static void
note_gone(const QueueConfig *conf)
{
	int			kept = 0;

	for (int i = 0; i < ngone; i++)
		if (queue_def_in(conf, gone[i].name) == NULL)
			gone[kept++] = gone[i];
	ngone = kept;
	for (int i = 0; started && i < ncaps && ngone < QUEUE_MAX_QUEUES; i++)
		if (queue_def_in(conf, caps[i].name) == NULL)
			gone[ngone++] = caps[i];
}

/* Take in the definitions: queues whose cap changed become pending */
static void
note_definitions(const QueueConfig *conf)
{
	AppliedCap	next[QUEUE_MAX_QUEUES];
	int			n = 0;

	for (int i = 0; conf != NULL && i < conf->count && n < QUEUE_MAX_QUEUES; i++)
	{
		const QueueDef *q = &conf->queues[i];
		AppliedCap *was;

		/* (the fleet's definitions have their caps set by their changes) */
		if (q->fleet)
			continue;
		was = applied_cap(q->name);

		strlcpy(next[n].name, q->name, sizeof(next[n].name));
		strlcpy(next[n].semaphore, q->semaphore, sizeof(next[n].semaphore));
		next[n].active = q->active;
		/* (a queue defined while the keeper runs counts as a change too) */
		next[n].pending = started && (was == NULL || was->pending || was->active != q->active);
		next[n].check_open = !started || (was != NULL && was->check_open);
		n++;
	}
	memcpy(caps, next, sizeof(AppliedCap) * n);
	ncaps = n;
	started = true;
}

/*
 * Replace the open limit a dropped fleet queue of c's name left, if that
 * is what is stored (compare-and-set: a cap set meanwhile stays); false
 * if Redis failed
 */
static bool
replace_open_limit(RedisCall *call, AppliedCap *c)
{
	SemLimit	limit;

	if (!sem_limit(call, c->semaphore, &limit))
		return false;
	if (limit.stored == REDSEM_MAX_HOLDERS && c->active != REDSEM_MAX_HOLDERS &&
		!sem_set_limit_if(call, c->semaphore, c->active, REDSEM_MAX_HOLDERS, &limit))
		return false;
	c->check_open = false;
	return true;
}

/*
 * Remove from Redis the caps of the queues this server's settings no longer
 * define, where the stored limit is still the cap they had (compare-and-set:
 * one set by hand, or by a server whose definition differs, stays), so that
 * no key is left for good; the limit in effect stays until the semaphore is
 * idle (its waiters still wait for the statements that run).  Another
 * server that still defines the queue stores its cap again with its next
 * statement (acquire.c), so a removal there costs nothing.
 */
static void
remove_gone_caps(void)
{
	while (ngone > 0 && redsem_now() >= next_try)
	{
		AppliedCap *c = &gone[ngone - 1];
		RedisCall	call;
		SemLimit	limit;
		bool		theirs;

		redis_call_init(&call, TimestampTzPlusMilliseconds(redsem_now(), QUEUE_CAP_TRY_MS), true, 0);
		if (!sem_limit(&call, c->semaphore, &limit) ||
			((theirs = (limit.stored == c->active)) &&
			 !sem_set_limit_if(&call, c->semaphore, 0, c->active, &limit)))
		{
			next_try = TimestampTzPlusMilliseconds(redsem_now(), QUEUE_CAP_RETRY_MS);
			return;
		}
		if (theirs && limit.stored <= 0)
		{
			sem_pin_configured(&call, c->semaphore);
			ereport(LOG,
					(errmsg("redsem: statement queue \"%s\" is no longer in this server's redsem.queues: its cap of %d was removed from Redis",
							c->name, c->active)));
		}
		ngone--;
	}
}

/* Store the pending caps in Redis (each cycle of the keeper) */
void
queue_caps_apply(void)
{
	const QueueConfig *conf = queue_config();

	if (!started || seen_generation != queue_config_generation())
	{
		note_gone(conf);
		note_definitions(conf);
		seen_generation = queue_config_generation();
	}
	remove_gone_caps();
	for (int i = 0; i < ncaps && redsem_now() >= next_try; i++)
	{
		RedisCall	call;
		SemLimit	limit;

		if (caps[i].check_open && !caps[i].pending)
		{
			redis_call_init(&call, TimestampTzPlusMilliseconds(redsem_now(), QUEUE_CAP_TRY_MS), true, 0);
			if (!replace_open_limit(&call, &caps[i]))
			{
				next_try = TimestampTzPlusMilliseconds(redsem_now(), QUEUE_CAP_RETRY_MS);
				break;
			}
		}
		if (!caps[i].pending)
			continue;
		redis_call_init(&call, TimestampTzPlusMilliseconds(redsem_now(), QUEUE_CAP_TRY_MS), true, 0);
		/*
		 * (a cap set ends an adaptive limit: its mark goes first, so that
		 * one made adaptive meanwhile, state then mark, keeps its mark)
		 */
		(void) sem_adapt_note(&call, caps[i].semaphore, false);
		if (!sem_set_limit(&call, caps[i].semaphore, caps[i].active, false, &limit))
		{
			next_try = TimestampTzPlusMilliseconds(redsem_now(), QUEUE_CAP_RETRY_MS);
			ereport(LOG,
					(errmsg("redsem: statement queue \"%s\": could not set its cap to %d yet; trying again",
							caps[i].name, caps[i].active),
					 errdetail_internal("%s", redis_outcome_text(&call.outcome))));
			break;
		}
		caps[i].pending = false;
		caps[i].check_open = false;
		ereport(LOG,
				(errmsg("redsem: statement queue \"%s\": cap set to %d for every server, from this server's redsem.queues",
						caps[i].name, caps[i].active)));
	}
}
