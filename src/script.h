/*
 * script.h
 *		The semaphore operations: one FCALL of the src/redsem.lua library each.
 *
 * Every operation takes a RedisCall (see conn.h): from SQL it raises on
 * failure; from callbacks and the keeper it returns false with the reason in
 * call->outcome.  prefix NULL means the current redsem.key_prefix.
 */
#ifndef REDSEM_SCRIPT_H
#define REDSEM_SCRIPT_H

#include "conn.h"
#include "gen.h"

typedef enum SemState
{
	SEM_HELD,					/* caller holds a slot */
	SEM_WAITING,				/* caller is in line */
	SEM_BUSY,					/* full, caller not queued */
	SEM_GONE,					/* caller left the line */
	SEM_LOST,					/* caller's entry no longer exists */
	SEM_OTHER_LIMIT,			/* caller's limit is not the one in effect */
	SEM_NO_LIMIT,				/* no limit passed, none stored */
	SEM_TOO_LARGE,				/* more permits than the limit */
	SEM_REMOVED					/* an administrator removed the caller from
								 * the line (redsem_force_release) */
} SemState;

typedef struct SemResult
{
	SemState	state;
	int64		ticket;			/* fencing token / place in line */
	int64		ms;				/* HELD: lease left; WAITING: look again in */
	int64		confirm_ms;		/* HELD by a wake-up nobody confirmed yet:
								 * its window (the keeper confirms it) */
	int64		position;		/* WAITING: members that must leave, less one */
	int64		limit;			/* the limit in effect, or 0 if not told */
	bool		stored;			/* OTHER_LIMIT: the limit in effect is stored */
	bool		reserve;		/* TOO_LARGE: limit is what a reserve leaves
								 * to the caller's priority */
	bool		adaptive;		/* TOO_LARGE: limit is an adaptive limit's
								 * lower bound */
	bool		has_rate;		/* BUSY, WAITING: the semaphore has a stored rate */
	int64		rate_ms;		/* ...and then the ms until it lets the caller
								 * in, if that is all that keeps it out; or -1 */
	int64		share;			/* BUSY, WAITING: the permits a reserve leaves
								 * to the caller's priority, or -1: all */
	char		gen[GEN_TEXT_LEN];	/* an acquire's: the generation of the
								 * semaphore's slot (I15), or "" */
} SemResult;

/* A semaphore's limits, as the "limit" operation reports them */
typedef struct SemLimit
{
	int64		stored;			/* the stored limit, or 0 */
	int64		in_effect;		/* the limit in effect, or 0 */
	int64		held;			/* permits held */
	int64		waiting;		/* members in line */
} SemLimit;

/* A semaphore's stored rate, as the "rate" operation reports it */
typedef struct SemRate
{
	char	   *text;			/* as it was given ("10/min"), or NULL: none */
	int64		us;				/* microseconds per admission */
	int64		burst;			/* admissions at once */
	int64		wait_ms;		/* until it lets the next caller in */
} SemRate;

/* A semaphore's stored reserve, as the "reserve" operation reports it */
typedef struct SemReserve
{
	int64		permits;		/* permits kept, or 0: none */
	int64		min_priority;	/* for callers of this priority and up */
	int64		held;			/* permits those callers hold */
} SemReserve;

/* A tenant of a semaphore, as the "tenants" operation reports it (I12) */
typedef struct SemTenant
{
	char	   *tenant;			/* NULL: the callers without one */
	int64		weight;
	int64		held;			/* permits its holders take */
	int64		waiting;		/* its waiters */
} SemTenant;

/* One member of a semaphore, as the "list" operation reports it */
typedef struct SemMember
{
	char	   *id;
	int64		ticket;
	int64		ms_left;		/* until its deadline; -1 if unknown */
	bool		waiting;
	char	   *info;			/* "lease|max_holders|since|origin" */
	int64		permits;
	int64		age_ms;			/* since granted (a holder) or since it asked
								 * (a waiter); -1 if unknown */
} SemMember;

extern bool sem_call_failed(RedisCall *call, const char *name);
extern bool sem_acquire(RedisCall *call, const char *name, const char *id,
						int max_holders, int permits, int64 lease_ms,
						bool wait, int priority, const char *tenant,
						SemResult *result);
extern bool sem_wait_replicas(RedisCall *call, const char *name, int replicas,
							  int timeout_ms, int *acked);
extern bool sem_wait_check(RedisCall *call, const char *name, const char *id,
						   SemResult *result);
extern bool sem_give_up(RedisCall *call, const char *name, const char *id,
						SemResult *result);
extern bool sem_release(RedisCall *call, const char *prefix, const char *name,
						const char *id, bool *was_held);
extern bool sem_release_deferred(RedisCall *call, const char *prefix,
								 const char *name, const char *id,
								 RedisReplyHandler handler, void *arg);
extern bool sem_release_reply(const struct redisReply *reply, bool *was_held);
/* A semaphore as redsem_semaphores() shows it; -1: none */
typedef struct SemSummary
{
	int64		stored_limit;
	int64		limit_in_effect;
	int64		permits_held;
	int64		holders;
	int64		waiting;
	int64		oldest_wait_ms;	/* since the first waiter asked */
	char	   *rate;			/* the stored rate as given, or NULL */
	int64		reserved;		/* permits of a stored reserve, or -1 */
	int64		tenants_waiting;	/* tenants with waiters (I12) */
	int64		reserved_for;	/* ...kept for this priority and up */
	int64		adaptive_min;	/* an adaptive limit's bounds (I16), or 0 */
	int64		adaptive_max;
	char	   *last_move;		/* why the adaptive limit last moved, or NULL */
	int64		last_move_ms;	/* ...how long ago, or -1 */
} SemSummary;

/* An adaptive limit (I16), as the "adapt" operation reports it */
typedef struct SemAdapt
{
	int64		limit;			/* "adapt": the limit in effect; "set_adapt":
								 * the stored limit; or -1: none */
	int64		min;			/* its bounds, or -1: not adaptive */
	int64		max;
	int64		base_us;		/* the controller's best recent mean hold, or -1 */
	int64		mean_us;		/* its smoothed mean hold, or -1 */
	int64		last_us;		/* the last interval's mean hold, or -1 */
	int64		last_n;			/* ...and how many releases it had */
	char	   *why;			/* why the limit last moved, or NULL */
	int64		moved_ms;		/* ...how long ago, or -1 */
	int64		pressure;		/* the highest pressure reported (1000: a
								 * server's line), or -1 */
	int64		servers;		/* servers that reported lately */
} SemAdapt;

/* Names per index_touch call */
#define FLEET_TOUCH_MAX_NAMES	1000

/* One group of names to touch in the index of its prefix (sem_index_touch_many) */
typedef struct IndexTouch
{
	const char *prefix;
	const char **names;
	int			n;
	bool	   *adaptive;		/* out: as sem_index_touch's */
} IndexTouch;

extern bool sem_index_touch_many(RedisCall *call, int n, const IndexTouch *groups,
								 int ttl_ms, char **evicting, bool *touched);
extern bool sem_index_touch(RedisCall *call, const char *prefix,
							const char **names, int n, int ttl_ms,
							char **evicting, bool *adaptive);
extern bool sem_index_pin(RedisCall *call, const char *name, bool pin,
						  int ttl_ms);
extern void sem_pin_configured(RedisCall *call, const char *name);
extern bool sem_index_list(RedisCall *call, int max, int64 from, char ***names,
						   int *count, int64 *total, char **evicting);
extern bool sem_queues_get(RedisCall *call, const char *prefix, int *exists,
						   int64 *version, bool *must_wait, char ***names,
						   char ***texts, int *count);
extern bool sem_queues_poll(RedisCall *call, const char *prefix,
							const char *server, int ttl_ms, int64 copy_version,
							const char *value, int *exists, int64 *version,
							bool *must_wait, char ***names, char ***texts,
							int *count);
extern bool sem_queue_servers(RedisCall *call, int64 *now_ms, char ***servers,
							  char ***values, int *count);
extern bool sem_queue_put(RedisCall *call, const char *name, const char *text,
						  const char *was, int *result, char **existing);
extern bool sem_queue_drop(RedisCall *call, const char *name, int *result);
extern bool sem_queue_open(RedisCall *call, const char *name, int ms);
extern bool sem_queue_opens(RedisCall *call, char ***names, char ***dues,
							int *count);
extern bool sem_queue_open_done(RedisCall *call, const char *name,
								const char *due);
extern bool sem_queues_restore(RedisCall *call, const char *prefix,
							   int64 version, int n, char *const *names,
							   char *const *texts, bool *restored,
							   char **replaced);
extern int	sem_node_of(const RedisCall *call, const char *prefix, const char *name);
extern void sem_nodes_of(const RedisCall *call, const char *prefix, char *const *names,
						 int n, int *nodes);
extern bool sem_node_policy(RedisCall *call, const char *prefix,
							const char *name, char **evicting);
extern bool sem_summary(RedisCall *call, const char *name, SemSummary *out);
extern bool sem_adapt(RedisCall *call, const char *name, SemAdapt *out);
extern bool sem_set_adapt(RedisCall *call, const char *name, int lo, int hi,
						  int start, SemAdapt *out);
extern bool sem_adapt_note(RedisCall *call, const char *name, bool on);
extern bool sem_adapt_tick(RedisCall *call, const char *prefix,
						   const char *name, const char *server, int pressure,
						   const char *tag, bool *adaptive, bool *ran);
extern bool sem_force_release(RedisCall *call, const char *name, const char *id,
							  bool holder_gone, bool *was_held, bool *was_waiting);
extern int	sem_gen_slot(const char *prefix, const char *name);
extern bool sem_gen_raise(RedisCall *call, const char *prefix, const char *name,
						  int64 lease_ms, bool unacked);

/* One generation to raise (sem_gen_raise_many): a semaphore of it, and a lease */
typedef struct GenRaise
{
	const char *prefix;
	const char *name;
	int64		lease_ms;
} GenRaise;

extern bool sem_gen_raise_many(RedisCall *call, int n, const GenRaise *gens, bool *raised);
extern bool sem_refresh(RedisCall *call, const char *prefix, const char *name,
						const char *id, int64 lease_ms, int64 *new_lease_ms);
extern bool sem_wait_for_wake(RedisCall *call, const char *name,
							  const char *id, int64 timeout_ms, int64 *ticket,
							  int64 *nudge_ms);
extern bool sem_token(RedisCall *call, const char *name, const char *id,
					  int64 *token);
extern bool sem_list(RedisCall *call, const char *name, SemMember **members,
					 int *count);
extern bool sem_limit(RedisCall *call, const char *name, SemLimit *limit);

extern bool sem_set_limit_if(RedisCall *call, const char *name, int max_holders,
							 int was, SemLimit *limit);
extern bool sem_set_limit(RedisCall *call, const char *name, int max_holders,
						  bool if_none, SemLimit *limit);
extern bool sem_rate(RedisCall *call, const char *name, SemRate *rate);
extern bool sem_set_rate(RedisCall *call, const char *name, const SemRate *set,
						 SemRate *rate);
extern bool sem_reserve(RedisCall *call, const char *name, SemReserve *reserve);
extern bool sem_set_reserve(RedisCall *call, const char *name, int permits,
							int min_priority, SemReserve *reserve);
extern bool sem_tenants(RedisCall *call, const char *name, SemTenant **tenants,
						int *count);
extern bool sem_set_weight(RedisCall *call, const char *name, const char *tenant,
						   int weight, int64 *now);

#endif							/* REDSEM_SCRIPT_H */
