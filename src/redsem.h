/*
 * redsem.h
 *		Declarations shared by the redsem source files.
 */
#ifndef REDSEM_H
#define REDSEM_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

/* hiredis types, kept opaque outside conn.c and script.c */
struct redisReply;

/* Bounds on arguments, documented in README.md */
#define REDSEM_MAX_NAME_BYTES	200
#define REDSEM_MAX_ID_BYTES		100
#define REDSEM_MAX_PREFIX_BYTES	64
#define REDSEM_MAX_HOLDERS		1000000
#define REDSEM_MAX_LEASE_MS		(INT64CONST(24) * 3600 * 1000)
#define REDSEM_MAX_WAIT_MS		(INT64CONST(24) * 3600 * 1000)

/* How long commit/abort cleanup may spend on Redis before deferring */
#define REDSEM_XACT_CLEANUP_MS	50
/* Leases longer than this get a NOTICE when no keeper runs */
#define REDSEM_UNKEPT_LEASE_NOTICE_MS	(INT64CONST(5) * 60 * 1000)

/* How long session-exit cleanup may spend on Redis in total */
#define REDSEM_EXIT_CLEANUP_MS	1000

/* GUC variables (guc.c) */
extern char *redsem_host;
extern int	redsem_port;
extern char *redsem_unix_socket;
extern int	redsem_database;
extern char *redsem_user;
extern char *redsem_password;
extern char *redsem_key_prefix;
extern int	redsem_connect_timeout_ms;
extern int	redsem_command_timeout_ms;
extern uint64 redsem_guc_generation;

/* conn.c: the backend's Redis connection */
typedef enum RedisStatus
{
	REDIS_STATUS_OK,
	REDIS_STATUS_CONNECT_FAILED,
	REDIS_STATUS_IO_FAILED,
	REDIS_STATUS_TIMED_OUT
} RedisStatus;

extern struct redisReply *redis_command(int argc, const char **argv,
										const size_t *argvlen,
										int extra_wait_ms);
extern RedisStatus redis_command_quiet(int argc, const char **argv,
									   const size_t *argvlen,
									   TimestampTz deadline,
									   struct redisReply **reply);
extern void redis_disconnect(void);
extern uint64 redis_failures;
extern char *redis_target_description(void);

/* script.c: the semaphore operations, one EVALSHA each */
typedef enum SemState
{
	SEM_HELD,					/* caller holds a slot */
	SEM_WAITING,				/* caller is in line */
	SEM_BUSY,					/* full, caller not queued */
	SEM_GONE,					/* caller left the line */
	SEM_LOST					/* caller's entry no longer exists */
} SemState;

typedef struct SemResult
{
	SemState	state;
	int64		ticket;			/* fencing token / place in line */
	int64		ms;				/* HELD: lease left; WAITING: look again in */
	int64		position;		/* WAITING: waiters ahead beyond the window */
} SemResult;

extern void sem_acquire(const char *name, const char *id, int max_holders,
						int64 lease_ms, bool wait, int64 keepalive_ms,
						SemResult *result);
extern void sem_wait_check(const char *name, const char *id,
						   int64 keepalive_ms, SemResult *result);
extern void sem_give_up(const char *name, const char *id, SemResult *result);
extern bool sem_release(const char *prefix, const char *name, const char *id);
extern bool sem_release_quiet(const char *prefix, const char *name,
							  const char *id, TimestampTz deadline,
							  bool *was_held);
extern int64 sem_refresh(const char *prefix, const char *name, const char *id,
						 int64 lease_ms);
extern int64 sem_wait_for_wake(const char *name, const char *id,
							  int64 timeout_ms);
extern uint64 redis_target_signature(void);
extern int64 sem_token(const char *name, const char *id);
extern struct redisReply *sem_list(const char *name);

/* hold.c: this session's holds and their scopes */
typedef enum HoldScope
{
	HOLD_SESSION,
	HOLD_XACT
} HoldScope;

extern void hold_init(void);
extern void *hold_begin(const char *name, const char *id, HoldScope scope,
						int64 lease_ms);
extern void hold_mark_held(void *hold, int64 ticket);
extern void hold_mark_waiting(void *hold);
extern void hold_forget(void *hold);
extern bool hold_release_id(const char *name, const char *id);
extern int64 hold_refresh_id(const char *name, const char *id, int64 lease_ms);

typedef struct HeldInfo
{
	char	   *name;
	char	   *id;
	bool		xact;
	bool		kept_alive;		/* the keeper refreshes it */
	bool		lost;			/* the keeper found it gone */
	TimestampTz acquired_at;
	TimestampTz expires_at;		/* estimate, from the last confirmation */
	int64		lease_ms;
	int64		ticket;
} HeldInfo;

extern int	hold_snapshot(HeldInfo **out);
extern int	hold_release_session(void);
extern void hold_flush_deferred(void);

/* shmem.c: shared state when preloaded */
typedef struct SharedHold
{
	bool		in_use;
	bool		xact;			/* transaction-scoped */
	bool		abandoned;		/* owner could not release: keeper must */
	bool		lost;			/* keeper found the slot gone */
	bool		waiting;		/* still in line: nothing to refresh yet */
	int			pid;
	int64		lease_ms;
	int64		ticket;
	TimestampTz acquired_at;
	TimestampTz refreshed_at;	/* last time Redis confirmed the lease */
	bool		unkept;			/* taken under another Redis target */
	uint64		target;			/* redis_target_signature() at acquire */
	char		prefix[REDSEM_MAX_PREFIX_BYTES + 1];
	char		name[REDSEM_MAX_NAME_BYTES + 1];
	char		id[REDSEM_MAX_ID_BYTES + 1];
} SharedHold;

typedef struct RedsemShared
{
	LWLock	   *holds_lock;
	LWLock	   *stats_lock;
	uint64		incarnation;	/* this server run, part of every holder id */
	uint64		previous_incarnation;	/* run before a crash-restart, or 0 */
	uint64		generation;		/* bumped on every change to holds */
	bool		index_dirty;	/* holds added or abandoned since the keeper
								 * last looked */
	int			keeper_pid;
	Latch	   *keeper_latch;
	int			max_holds;
	SharedHold	holds[FLEXIBLE_ARRAY_MEMBER];
} RedsemShared;

typedef enum StatField
{
	STAT_ACQUIRED,
	STAT_REFUSED,
	STAT_WAITED,
	STAT_WAIT_TIMEOUTS,
	STAT_WAIT_TIME_MS,
	STAT_RELEASED,
	STAT_EXPIRED,
	STAT_LOST,
	STAT_REDIS_ERRORS,
	STAT_NFIELDS
} StatField;

typedef struct SemStats
{
	char		name[REDSEM_MAX_NAME_BYTES + 1];	/* hash key */
	int64		counters[STAT_NFIELDS];
} SemStats;

extern RedsemShared *shared;
extern int	redsem_max_tracked_holds;
extern int	redsem_max_tracked_semaphores;

extern void shmem_install_hooks(void);
extern uint64 redsem_incarnation(void);
extern bool keeper_is_active(void);
extern int	shared_hold_add(const char *prefix, const char *name,
							const char *id, bool xact, bool waiting,
							int64 lease_ms, int64 ticket);
extern void shared_hold_now_held(int slot, const char *id, int64 ticket);
extern SharedHold *tracked_hold(int slot, const char *id);
extern void shared_hold_remove(int slot, const char *id);
extern void shared_hold_abandon(int slot, const char *id);
extern void shared_hold_refreshed(int slot, const char *id, int64 lease_ms);
extern bool shared_hold_read(int slot, const char *id, SharedHold *copy);
extern void stats_count(const char *name, StatField field, int64 delta);
extern int	stats_snapshot(SemStats **out);
extern void stats_reset(const char *name);

/* worker.c: the keeper */
extern void keeper_register(void);
extern char *incarnation_index_key(uint64 incarnation);

/* sqlfuncs.c */
extern void redsem_make_id(char *buf, size_t len);
extern char *name_arg(FunctionCallInfo fcinfo, int argno);
extern char *id_arg(FunctionCallInfo fcinfo, int argno);

#endif							/* REDSEM_H */
