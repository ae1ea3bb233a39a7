/*
 * escalate.c
 *		A holder that runs on after its stop is ended (the keeper's).
 *
 * Under redsem.on_slot_lost = cancel the keeper cancels the statement of a
 * holder whose slot is lost (src/keeper.c), and the statement fails with
 * 57014, which PL/pgSQL's WHEN OTHERS does not catch.  Code that catches
 * query_canceled by name could still run on, beside the holder that takes
 * the slot next.  So the keeper watches each backend it cancelled, and
 * each whose session told the stop itself at a statement's start before
 * the keeper's signal (which the keeper then does not send, src/shmem.c):
 * if, REDSEM_STOP_ESCALATE_MS later, the same client statement still runs
 * (pg_stat_activity's state and query_start, and the backend's own word,
 * in its AskSlot, that no client statement ended since: guard.c,
 * for a multi-statement Query, whose statements share a query_start), and
 * the backend is not waiting for its client (a cancel is not acted on
 * then: a COPY FROM STDIN, a client that reads slowly) nor in an
 * extension's wait (a Redis call of redsem's: a release, say), the keeper
 * terminates the backend.  Catch and retry is a pattern to keep: each try
 * to take a slot of that semaphore again (counted in the AskSlot) starts
 * the count again, and a slot of it granted since ends the watch.  The
 * AskSlot has room for ASK_NAMES semaphores, and one more counted aside
 * (aside_name, kept while a watch counts by it); beyond, a try of any semaphore starts the count again, and
 * a statement that lost several slots beyond at once, told by its session,
 * is watched until it ends (which it lost is not kept).  Without redsem's keeper there is no
 * cancel and so no watch; with track_activities off (a superuser's
 * setting) the statement cannot be told apart from the next one, and the
 * keeper does not escalate.
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/backend_status.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "bounds.h"
#include "clock.h"
#include "compat.h"
#include "escalate.h"
#include "shmem.h"
#include "timing.h"

/* One backend the keeper cancelled, and the statement it was running */
typedef struct Watch
{
	int			pid;
	int			procno;			/* its PGPROC's index: its AskSlot */
	TimestampTz statement_start;	/* its query_start then */
	TimestampTz counted_from;	/* the cancel, or its last try since */
	TimestampTz since;			/* the stop (the cancel, or the tell): a
								 * slot granted since ends the watch */
	uint32		asks_seen;		/* its AskSlot's count of tries then */
	uint32		grants_seen;	/* ... and of grants */
	uint32		generation;		/* its AskSlot's when it was armed */
	bool		in_slot;		/* its name is in the AskSlot (room was left) */
	bool		whole;			/* it watches its statement for several
								 * slots lost without room (not named) */
	bool		signalled;		/* armed for the keeper's own signal: since
								 * is that stop's time */
	char		name[REDSEM_MAX_NAME_BYTES + 1];
} Watch;

/*
 * A stop a session told itself, as it asked for its watch: copied from its
 * AskSlot with the ask, under the same lock (a newer tell overwrites them)
 */
typedef struct Tell
{
	TimestampTz in;				/* the statement's query_start */
	TimestampTz at;				/* when it told it */
	uint32		generation;		/* its AskSlot's then */
	bool		named;			/* made with room: counted by its name */
	uint32		asks;			/* ... and its counts then */
	uint32		grants;
	uint32		any_asks;		/* its tries of any semaphore then */
	bool		aside;			/* made without room, counted by name aside */
	uint32		aside_asks;		/* ... and those counts then */
	uint32		aside_grants;
} Tell;

/* The most backends watched at once; more are cancelled, not watched */
#define ESCALATE_MAX_WATCHES	256

static Watch watches[ESCALATE_MAX_WATCHES];
static int	n_watches = 0;
static bool snapshot_read = false;	/* this pass read the backends' status */
static bool full_logged = false;
static bool names_full_logged = false;
static int	find_watch(int pid, const char *name, bool whole);
static Watch replaced;			/* the watch escalate_watch replaced last */
static bool replaced_valid = false;

/* The most semaphores one backend is watched for at once */
#define ASK_NAMES	4

/*
 * Per backend (by its PGPROC's index): the semaphores the keeper watches it
 * for (or is asked to) and, for each, how many times it began to take a
 * slot of it since, and was granted one; and whether a top-level statement
 * of it ended since.  The keeper writes pid and the names, the backend the
 * counts, ended and its asks (escalate_note_told), under mutex.
 */
typedef struct AskSlot
{
	slock_t		mutex;
	int			pid;			/* the backend watched (0: none) */
	uint32		generation;		/* moves when the slot is taken over */
	int			n;
	bool		ended;
	uint32		asks[ASK_NAMES];
	uint32		grants[ASK_NAMES];
	bool		asked[ASK_NAMES];	/* its session told the stop of this
									 * one itself: the keeper is to watch */
	TimestampTz told_in[ASK_NAMES]; /* ... in the statement started then */
	TimestampTz told_at[ASK_NAMES]; /* ... at this time */
	uint32		told_asks[ASK_NAMES];	/* ... and asks and grants then */
	uint32		told_grants[ASK_NAMES];
	char		names[ASK_NAMES][REDSEM_MAX_NAME_BYTES + 1];
	uint32		any_asks;		/* tries to take a slot of any semaphore */
	/* asks that found no room, of one statement: the keeper is to watch */
	bool		over_asked;
	int			over_n;			/* how many (more than one: not named) */
	TimestampTz over_told_in;
	TimestampTz over_told_at;
	uint32		over_told_asks; /* ... any_asks then */
	char		over_name[REDSEM_MAX_NAME_BYTES + 1];	/* the first's */
	/* the one semaphore counted by name without room, while watched so */
	char		aside_name[REDSEM_MAX_NAME_BYTES + 1];
	bool		aside_in_use;	/* a watch counts by it */
	uint32		aside_asks;
	uint32		aside_grants;
	uint32		aside_told_asks;	/* ... at its session's tell */
	uint32		aside_told_grants;
	/* the keeper terminated this backend for running on (its FATAL's words) */
	int			term_pid;
	char		term_name[REDSEM_MAX_NAME_BYTES + 1];
} AskSlot;

/* The AskSlots, and how many watches sessions asked for (escalate_note_told) */
typedef struct AskSlots
{
	pg_atomic_uint32 asked;
	AskSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} AskSlots;

static AskSlots *ask_shared = NULL;
static AskSlot *ask_slots = NULL;
static uint32 asked_seen = 0;	/* the keeper's: ask_shared->asked last read */

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* The shared memory the AskSlots take */
static Size
ask_slots_size(void)
{
	return add_size(offsetof(AskSlots, slots), mul_size(MaxBackends, sizeof(AskSlot)));
}

/* Ask for the AskSlots' shared memory */
static void
escalate_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(ask_slots_size());
}

/* Attach to (or make) the AskSlots */
static void
escalate_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	ask_shared = ShmemInitStruct("redsem ask slots", ask_slots_size(), &found);
	ask_slots = ask_shared->slots;
	if (!found)
	{
		memset(ask_shared, 0, ask_slots_size());
		pg_atomic_init_u32(&ask_shared->asked, 0);
		for (int i = 0; i < MaxBackends; i++)
			SpinLockInit(&ask_slots[i].mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* From _PG_init, when preloading: the AskSlots' hooks */
void
escalate_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = escalate_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = escalate_shmem_startup;
}

/* The index of proc among the PGPROCs with an AskSlot, or -1 */
static int
procno_of(PGPROC *proc)
{
	long		i;

	if (ask_slots == NULL || proc == NULL)
		return -1;
	i = proc - ProcGlobal->allProcs;
	return (i >= 0 && i < MaxBackends) ? (int) i : -1;
}

/* This backend's AskSlot if the keeper watches it (one unlocked read), or NULL */
static AskSlot *
own_watched_slot(void)
{
	int			i = procno_of(MyProc);

	if (i < 0 || ask_slots[i].pid != MyProcPid)
		return NULL;
	return &ask_slots[i];
}

/*
 * This backend begins to take a slot of semaphore name (granted false), or
 * was granted one (true): count it if watched
 */
void
escalate_note_try(const char *name, bool granted)
{
	AskSlot    *a = own_watched_slot();

	if (a == NULL)
		return;
	SpinLockAcquire(&a->mutex);
	for (int i = 0; i < a->n && a->pid == MyProcPid; i++)
		if (strcmp(a->names[i], name) == 0)
			(granted ? a->grants : a->asks)[i]++;
	if (a->pid == MyProcPid && strcmp(a->aside_name, name) == 0)
		(*(granted ? &a->aside_grants : &a->aside_asks))++;
	if (!granted && a->pid == MyProcPid)
		a->any_asks++;
	SpinLockRelease(&a->mutex);
}

/*
 * True if the keeper terminated this backend for running on after a stop
 * (terminate), with the semaphore's name in name; for the words of the
 * FATAL (src/guard.c)
 */
bool
escalate_terminated(char *name, size_t size)
{
	int			i = procno_of(MyProc);
	bool		mine;

	if (i < 0)
		return false;
	SpinLockAcquire(&ask_slots[i].mutex);
	mine = ask_slots[i].term_pid == MyProcPid;
	if (mine)
		strlcpy(name, ask_slots[i].term_name, size);
	SpinLockRelease(&ask_slots[i].mutex);
	return mine;
}

/* A top-level statement of this backend ended (guard.c): say so if watched */
void
escalate_statement_ended(void)
{
	AskSlot    *a = own_watched_slot();

	if (a == NULL)
		return;
	SpinLockAcquire(&a->mutex);
	if (a->pid == MyProcPid)
		a->ended = true;
	SpinLockRelease(&a->mutex);
}

/*
 * Add semaphore name to AskSlot a for backend pid, under a's mutex (a slot
 * left by another backend, or by a statement that ended, is taken over: a
 * new generation, which ends the watches armed before); the index of name
 * there, or -1 without room; *created (if not NULL): the entry is new
 */
static int
ask_slot_add_locked(AskSlot *a, int pid, const char *name, bool *created)
{
	int			i;

	if (created != NULL)
		*created = false;

	if (a->pid != pid || a->ended)
	{
		a->pid = pid;
		a->generation++;
		a->n = 0;
		a->ended = false;
		a->over_asked = false;
		a->aside_name[0] = '\0';
		a->aside_in_use = false;
	}
	for (i = 0; i < a->n && strcmp(a->names[i], name) != 0; i++)
		;
	if (i < a->n)
		return i;
	if (a->n == ASK_NAMES)
		return -1;
	a->asks[i] = 0;
	a->grants[i] = 0;
	a->asked[i] = false;
	a->told_in[i] = 0;
	a->told_asks[i] = 0;
	a->told_grants[i] = 0;
	a->told_at[i] = 0;
	strlcpy(a->names[i], name, sizeof(a->names[i]));
	a->n++;
	if (created != NULL)
		*created = true;
	return i;
}

/*
 * True if semaphore name, watched without room in AskSlot a, is counted by
 * name there (under a's mutex): a told one is, from its tell on
 * (escalate_note_told); one the keeper watches takes the place if no ask
 * waits for it and no other watch of the backend counts there (in use, or
 * other_aside).  Else a try of any semaphore counts, and no grant.
 */
static bool
aside_name_locked(AskSlot *a, const char *name, bool told, bool other_aside)
{
	if (strcmp(a->aside_name, name) != 0 &&
		(told || a->over_asked || other_aside || a->aside_in_use))
		return false;
	if (strcmp(a->aside_name, name) != 0)
	{
		strlcpy(a->aside_name, name, sizeof(a->aside_name));
		a->aside_asks = a->aside_grants = 0;
		a->aside_told_asks = a->aside_told_grants = 0;
	}
	a->aside_in_use = true;
	return true;
}

/*
 * Add w's semaphore to its backend's AskSlot; without room, a try to take a
 * slot of any semaphore starts w's count again, and one of its semaphore
 * held again ends it (shared_hold_fresh); w->whole (several of one
 * statement without room: which is not kept) only the statement's end
 * ends.  told: its session asked
 * for the watch, with its AskSlot armed then: false if a top-level
 * statement ended since (the one told, before the keeper came to watch).
 */
static bool
ask_slot_watch(Watch *w, const Tell *tell)
{
	AskSlot    *a = &ask_slots[w->procno];
	bool		told = tell != NULL;
	bool		other_aside = false;
	bool		created = false;
	int			i;

	for (int j = 0; j < n_watches; j++)
		other_aside = other_aside ||
			(watches[j].pid == w->pid && !watches[j].in_slot &&
			 !watches[j].whole && strcmp(watches[j].name, w->name) != 0);
	SpinLockAcquire(&a->mutex);
	/* (another generation: the told statement is over, its names gone) */
	if (told && (a->pid != w->pid || a->generation != tell->generation || a->ended))
	{
		SpinLockRelease(&a->mutex);
		return false;
	}
	i = w->whole ? -1 : ask_slot_add_locked(a, w->pid, w->name, &created);
	w->in_slot = i >= 0;
	/*
	 * (a told ask made without room, counted by name aside since its tell,
	 * that finds room now, a keeper's restart having freed the names: its
	 * counts move into the new name, or a grant since the tell would be
	 * missed; never into one a watch reads)
	 */
	if (told && created && tell->aside && strcmp(a->aside_name, w->name) == 0)
	{
		a->asks[i] = a->aside_asks;
		a->grants[i] = a->aside_grants;
		a->told_asks[i] = tell->aside_asks;
		a->told_grants[i] = tell->aside_grants;
		a->told_at[i] = tell->at;
	}
	/* (counted by its name now, not aside: the place aside is free again) */
	if (w->in_slot && strcmp(a->aside_name, w->name) == 0)
		a->aside_in_use = false;
	/* (a told one counts from the tell: a try or grant since ends it) */
	w->since = told ? tell->at : w->counted_from;
	if (w->in_slot)
	{
		w->asks_seen = !told ? a->asks[i] : tell->named ? tell->asks : a->told_asks[i];
		w->grants_seen = !told ? a->grants[i] : tell->named ? tell->grants : a->told_grants[i];
	}
	else if (!w->whole && aside_name_locked(a, w->name, told, other_aside))
	{
		/* (the one without room is counted by name: aside_name_locked) */
		w->asks_seen = !told ? a->aside_asks :
			tell->aside ? tell->aside_asks : a->aside_told_asks;
		w->grants_seen = !told ? a->aside_grants :
			tell->aside ? tell->aside_grants : a->aside_told_grants;
	}
	else
	{
		/* (without room: a try of any semaphore starts the count again) */
		w->asks_seen = told ? tell->any_asks : a->any_asks;
		w->grants_seen = 0;
	}
	w->generation = a->generation;
	SpinLockRelease(&a->mutex);
	if (!w->in_slot && !names_full_logged)
		ereport(LOG,
				(errmsg("redsem keeper watches process %d for more than %d lost slots at once: %s",
						w->pid, ASK_NAMES,
						w->whole ?
						"its statement is watched until it ends (the slots it takes again are not told apart)" :
						"a try to take a slot of any semaphore again counts as a try of each beyond")));
	names_full_logged = names_full_logged || !w->in_slot;
	return true;
}

/*
 * This backend told its session of the stop of its slot of semaphore name
 * itself (src/hold.c), in the statement that started at told_in: the keeper
 * is asked to watch it (escalate_look, once the caller woke it), and its
 * AskSlot is armed now, so that the end of that statement, and its tries
 * and grants, before the keeper comes to watch, are seen.  Without room for
 * the name, the ask is kept aside: the keeper watches the statement alone.
 * Without a statement's status (track_activities off) there is nothing to
 * watch (the keeper could not tell the statement from the next): true, as
 * for an ask made.  False only for a backend without an AskSlot: the keeper
 * is then to cancel it as before.
 */
bool
escalate_note_told(const char *name, TimestampTz told_in)
{
	int			i = procno_of(MyProc);
	AskSlot    *a;
	int			at;
	TimestampTz now;

	if (i < 0)
		return false;
	if (told_in == 0)
		return true;
	a = &ask_slots[i];
	now = redsem_now();
	SpinLockAcquire(&a->mutex);
	at = ask_slot_add_locked(a, MyProcPid, name, NULL);
	if (at >= 0)
	{
		a->asked[at] = true;
		a->told_in[at] = told_in;
		a->told_at[at] = now;
		a->told_asks[at] = a->asks[at];
		a->told_grants[at] = a->grants[at];
	}
	else if (!a->over_asked || a->over_told_in != told_in)
	{
		a->over_asked = true;
		a->over_n = 1;
		a->over_told_in = told_in;
		a->over_told_at = now;
		a->over_told_asks = a->any_asks;
		strlcpy(a->over_name, name, sizeof(a->over_name));
		/* (counted by name aside, unless a watch counts another there) */
		if (!a->aside_in_use && strcmp(a->aside_name, name) != 0)
		{
			strlcpy(a->aside_name, name, sizeof(a->aside_name));
			a->aside_asks = a->aside_grants = 0;
		}
		/* (another's place: its counts at its own tell stay) */
		if (strcmp(a->aside_name, name) == 0)
		{
			a->aside_told_asks = a->aside_asks;
			a->aside_told_grants = a->aside_grants;
		}
	}
	else
		a->over_n++;			/* (one watch, of the whole statement) */
	SpinLockRelease(&a->mutex);
	pg_atomic_fetch_add_u32(&ask_shared->asked, 1);
	return true;
}

/*
 * Read w's AskSlot: false if the watch is over there (its statement ended,
 * or its slot was taken over); else *asks and *grants, its counts of tries
 * and grants
 */
static bool
ask_slot_read(const Watch *w, uint32 *asks, uint32 *grants)
{
	AskSlot    *a = &ask_slots[w->procno];
	bool		on = false;

	SpinLockAcquire(&a->mutex);
	if (a->pid == w->pid && a->generation == w->generation && !a->ended)
	{
		*asks = w->in_slot ? w->asks_seen : a->any_asks;
		*grants = w->grants_seen;
		on = !w->in_slot;
		if (!w->in_slot && !w->whole && strcmp(a->aside_name, w->name) == 0)
		{
			*asks = a->aside_asks;
			*grants = a->aside_grants;
		}
		for (int i = 0; i < a->n && w->in_slot; i++)
		{
			if (strcmp(a->names[i], w->name) == 0)
			{
				*asks = a->asks[i];
				*grants = a->grants[i];
				on = true;
			}
		}
	}
	SpinLockRelease(&a->mutex);
	return on;
}

/* Remove the i-th semaphore of AskSlot a, under its mutex (the last moves in) */
static void
ask_slot_remove_locked(AskSlot *a, int i)
{
	int			j = --a->n;

	if (i == j)
		return;
	a->asks[i] = a->asks[j];
	a->grants[i] = a->grants[j];
	a->asked[i] = a->asked[j];
	a->told_in[i] = a->told_in[j];
	a->told_at[i] = a->told_at[j];
	a->told_asks[i] = a->told_asks[j];
	a->told_grants[i] = a->told_grants[j];
	memcpy(a->names[i], a->names[j], sizeof(a->names[i]));
}

/*
 * A keeper (re)started: the watches of one before it are gone with its
 * memory, so what they kept in the AskSlots goes too (their names, the
 * place aside); the asks sessions made and no keeper took up stay, and
 * are armed at its first look (watch_asked)
 */
void
escalate_keeper_start(void)
{
	if (ask_slots == NULL)
		return;
	for (int i = 0; i < MaxBackends; i++)
	{
		AskSlot    *a = &ask_slots[i];

		SpinLockAcquire(&a->mutex);
		a->aside_in_use = false;
		for (int j = a->n - 1; j >= 0; j--)
			if (!a->asked[j])
				ask_slot_remove_locked(a, j);
		if (a->n == 0 && !a->over_asked)
			a->pid = 0;
		SpinLockRelease(&a->mutex);
	}
}

/* True if the keeper watches backend pid at procno in generation gen */
static bool
slot_watched(int procno, int pid, uint32 gen)
{
	for (int i = 0; i < n_watches; i++)
		if (watches[i].procno == procno && watches[i].pid == pid &&
			watches[i].generation == gen)
			return true;
	return false;
}

/* True if the keeper watches pid for semaphore name by name, armed in generation gen */
static bool
named_watch_in(int pid, const char *name, uint32 gen)
{
	int			at = find_watch(pid, name, false);

	return at >= 0 && watches[at].generation == gen;
}

/*
 * Remove semaphore name (NULL: none) from backend pid's AskSlot at procno,
 * if that is still its generation gen and the session asked for no watch
 * of it since (escalate_note_told); the slot is freed with its last name,
 * unless a watch of the statement alone (no room was left for its name)
 * or an ask of one is left
 */
static void
ask_slot_drop(int procno, int pid, uint32 gen, const char *name)
{
	AskSlot    *a = &ask_slots[procno];
	bool		watched = slot_watched(procno, pid, gen);
	bool		named = name != NULL && named_watch_in(pid, name, gen);

	SpinLockAcquire(&a->mutex);
	if (a->pid == pid && a->generation == gen)
	{
		/* (no watch counts by the name aside any more: free its place) */
		if (name != NULL && !named && strcmp(a->aside_name, name) == 0)
			a->aside_in_use = false;
		for (int i = 0; i < a->n && name != NULL; i++)
		{
			if (strcmp(a->names[i], name) == 0)
			{
				if (!a->asked[i])
					ask_slot_remove_locked(a, i);
				break;
			}
		}
		if (a->n == 0 && !watched && !a->over_asked)
			a->pid = 0;
	}
	SpinLockRelease(&a->mutex);
}

/* Remove w's semaphore from its AskSlot (its watch ended, and is unlisted) */
static void
ask_slot_forget(const Watch *w)
{
	/* (a whole statement's watch holds no name: its first's may be another's) */
	ask_slot_drop(w->procno, w->pid, w->generation, w->whole ? NULL : w->name);
}

/*
 * True if backend pid waits where a cancel is not acted on or is not its
 * code running on: for its client, or in an extension's wait (a Redis call
 * of redsem's; before PostgreSQL 17 every extension's wait is one)
 */
static bool
waiting_aside(int pid)
{
	PGPROC	   *proc = BackendPidGetProc(pid);
	uint32		class;

	if (proc == NULL)
		return false;
	class = *((volatile uint32 *) &proc->wait_event_info) & 0xFF000000;
	return class == PG_WAIT_CLIENT || class == PG_WAIT_EXTENSION;
}

/*
 * pid's query_start, if it runs a client statement (its status as this
 * pass of the keeper read it); false if not, or if the status could not
 * be read (an ERROR, out of memory say, is swallowed: the keeper goes on)
 */
static bool
running_statement(int pid, TimestampTz *start)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint32		holdoff = InterruptHoldoffCount;
	volatile bool found = false;

	PG_TRY();
	{
		int			n;

		if (!snapshot_read)
			pgstat_clear_backend_activity_snapshot();
		snapshot_read = true;
		n = pgstat_fetch_stat_numbackends();
		for (int i = 1; i <= n && !found; i++)
		{
			LocalPgBackendStatus *local = redsem_local_beentry(i);
			PgBackendStatus *st = local ? &local->backendStatus : NULL;

			if (st != NULL && st->st_procpid == pid &&
				(st->st_state == STATE_RUNNING || st->st_state == STATE_FASTPATH))
			{
				*start = st->st_activity_start_timestamp;
				found = true;
			}
		}
	}
	PG_CATCH();
	{
		InterruptHoldoffCount = holdoff;
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		found = false;
	}
	PG_END_TRY();
	return found;
}

/* The index of the watch of pid for semaphore name (or its whole statement), or -1 */
static int
find_watch(int pid, const char *name, bool whole)
{
	for (int i = 0; i < n_watches; i++)
		if (watches[i].pid == pid && watches[i].whole == whole &&
			strcmp(watches[i].name, name) == 0)
			return i;
	return -1;
}

/* End the watch at index i */
static void
drop_watch(int i)
{
	Watch		w = watches[i];

	watches[i] = watches[--n_watches];
	ask_slot_forget(&w);
}

/*
 * True if the keeper's watch w, of its own signal, is of a stop newer than
 * tell, in the same statement: that watch goes on (the told stop is older,
 * and a grant since it may be of the slot the newer stop took away)
 */
static bool
newer_than_tell(const Watch *w, const Watch *cand, const Tell *tell)
{
	return w->signalled && w->statement_start == cand->statement_start &&
		w->generation == tell->generation && tell->at != 0 && tell->at < w->since;
}

/*
 * Watch pid, whose slot of semaphore name is lost and whose statement the
 * keeper is about to cancel (before the signal, so that the statement
 * watched is the one cancelled; signalled: it sends one), if it is running
 * one; tell (not NULL): its session told the stop itself, in the statement
 * of query_start tell->in, watched only if that still runs (and, in a
 * multi-statement Query, whose statements share a query_start, had not
 * ended: escalate_note_told); whole: several slots it told lost in it
 * found no room in its AskSlot (name is the first's), the statement is
 * watched until it ends
 */
static bool
watch_arm(int pid, const char *name, TimestampTz now, const Tell *tell,
		  bool whole, bool signalled)
{
	Watch		cand;
	int			at = find_watch(pid, name, whole);
	TimestampTz told_in = tell != NULL ? tell->in : 0;

	cand.pid = pid;
	cand.procno = procno_of(BackendPidGetProc(pid));
	cand.counted_from = now;
	cand.whole = whole;
	cand.signalled = signalled;
	strlcpy(cand.name, name, sizeof(cand.name));
	if (cand.procno < 0 || !running_statement(pid, &cand.statement_start) ||
		(told_in != 0 && cand.statement_start != told_in))
		return false;
	/*
	 * (one listed is armed again: of an earlier statement, it is over; of
	 * this one, the slot was lost again, perhaps after a grant that ends it)
	 */
	if (at < 0 && n_watches >= ESCALATE_MAX_WATCHES)
	{
		if (!full_logged)
			ereport(LOG,
					(errmsg("redsem keeper cancelled more holders at once than it can watch (%d): those beyond are not terminated if they run on",
							ESCALATE_MAX_WATCHES)));
		full_logged = true;
		return false;
	}
	/* (a newer stop's watch goes on: the told one is older, superseded) */
	if (at >= 0 && tell != NULL && newer_than_tell(&watches[at], &cand, tell))
		return true;
	if (!ask_slot_watch(&cand, told_in != 0 ? tell : NULL))
	{
		if (at >= 0)
			drop_watch(at);
		return false;
	}
	replaced_valid = at >= 0;
	if (at >= 0)
		replaced = watches[at];
	else
		at = n_watches++;
	watches[at] = cand;
	return true;
}

/* Watch pid for its lost slot of semaphore name (watch_arm) */
bool
escalate_watch(int pid, const char *name, TimestampTz now, bool signalled)
{
	return watch_arm(pid, name, now, NULL, false, signalled);
}

/*
 * A watch put back that counted by its name aside takes that place again;
 * false if another semaphore took it meanwhile (the watch would count any
 * semaphore's try, and no grant)
 */
static bool
aside_restore(const Watch *w)
{
	AskSlot    *a = &ask_slots[w->procno];
	bool		kept = false;

	if (w->in_slot || w->whole)
		return true;
	SpinLockAcquire(&a->mutex);
	if (a->pid == w->pid && a->generation == w->generation &&
		strcmp(a->aside_name, w->name) == 0)
	{
		a->aside_in_use = true;
		kept = true;
	}
	SpinLockRelease(&a->mutex);
	return kept;
}

/*
 * Undo the last escalate_watch of pid for semaphore name (armed before a
 * signal not sent): the watch it replaced is put back, if that one's
 * AskSlot was not taken over since (its statement ended, it is over)
 */
void
escalate_unwatch(int pid, const char *name)
{
	int			at = find_watch(pid, name, false);

	if (at < 0)
		return;
	if (replaced_valid && replaced.pid == pid && !replaced.whole &&
		strcmp(replaced.name, name) == 0 &&
		replaced.generation == watches[at].generation)
	{
		if (aside_restore(&replaced))
			watches[at] = replaced;
		else
		{
			/*
			 * (its place aside was taken: the new watch, counting by the
			 * name, goes on for the statement and the stop put back)
			 */
			watches[at].statement_start = replaced.statement_start;
			watches[at].since = replaced.since;
			watches[at].signalled = replaced.signalled;
			/* (its count starts now: tries since its last look are not seen) */
			watches[at].counted_from = redsem_now();
		}
	}
	else
		drop_watch(at);
	replaced_valid = false;
}

/*
 * Arm a watch a session asked for (watch_arm), at procno; one this pass's
 * status, read before, does not see running (its statement may have
 * started since: the ask would be lost) is tried once more on a fresh
 * read, unless its AskSlot says the statement told in ended (the common
 * case: a session idle when it was told)
 */
static bool
arm_asked(int procno, int pid, const char *name, TimestampTz now,
		  const Tell *tell, bool whole)
{
	bool		fresh = !snapshot_read;
	AskSlot    *a = &ask_slots[procno];
	bool		over;

	if (watch_arm(pid, name, now, tell, whole, false))
		return true;
	if (fresh)
		return false;
	SpinLockAcquire(&a->mutex);
	over = a->pid != pid || a->generation != tell->generation || a->ended;
	SpinLockRelease(&a->mutex);
	if (over)
		return false;
	pgstat_clear_backend_activity_snapshot();
	snapshot_read = false;
	return watch_arm(pid, name, now, tell, whole, false);
}

/*
 * Arm the watches sessions asked for, having told a stop themselves
 * (escalate_note_told), if any was asked for since the last look; an ask
 * declined (its statement ended) leaves nothing in the AskSlot
 */
static void
watch_asked(TimestampTz now)
{
	uint32		asked = pg_atomic_read_u32(&ask_shared->asked);

	if (asked == asked_seen)
		return;
	asked_seen = asked;
	/* (the backends' status read afresh: an ask may be newer than a read) */
	if (snapshot_read)
		pgstat_clear_backend_activity_snapshot();
	snapshot_read = false;
	for (int i = 0; i < MaxBackends; i++)
	{
		AskSlot    *a = &ask_slots[i];

		for (;;)
		{
			char		name[REDSEM_MAX_NAME_BYTES + 1];
			int			pid = 0;
			Tell		tell = {0};
			bool		whole = false;

			SpinLockAcquire(&a->mutex);
			tell.generation = a->generation;
			tell.any_asks = a->any_asks;
			for (int j = 0; j < a->n && pid == 0; j++)
			{
				if (!a->asked[j])
					continue;
				a->asked[j] = false;
				pid = a->pid;
				tell.in = a->told_in[j];
				tell.at = a->told_at[j];
				tell.named = true;
				tell.asks = a->told_asks[j];
				tell.grants = a->told_grants[j];
				strlcpy(name, a->names[j], sizeof(name));
			}
			if (pid == 0 && a->over_asked)
			{
				a->over_asked = false;
				pid = a->pid;
				tell.in = a->over_told_in;
				tell.at = a->over_told_at;
				tell.any_asks = a->over_told_asks;
				tell.aside = strcmp(a->aside_name, a->over_name) == 0;
				tell.aside_asks = a->aside_told_asks;
				tell.aside_grants = a->aside_told_grants;
				whole = a->over_n > 1;
				strlcpy(name, a->over_name, sizeof(name));
			}
			SpinLockRelease(&a->mutex);
			if (pid == 0)
				break;
			/* (a watch of an earlier generation is over: it keeps no name) */
			if (!arm_asked(i, pid, name, now, &tell, whole) &&
				!named_watch_in(pid, name, tell.generation))
				ask_slot_drop(i, pid, tell.generation, whole ? NULL : name);
		}
	}
}

/* Terminate w's backend, and log why (its FATAL says why too) */
static void
terminate(const Watch *w, TimestampTz now)
{
	if (BackendPidGetProc(w->pid) == NULL)
		return;
	if (w->procno >= 0 && w->procno < MaxBackends)
	{
		AskSlot    *a = &ask_slots[w->procno];

		SpinLockAcquire(&a->mutex);
		a->term_pid = w->pid;
		strlcpy(a->term_name, w->name, sizeof(a->term_name));
		SpinLockRelease(&a->mutex);
	}
	if (kill(w->pid, SIGTERM) != 0)
		return;
	ereport(LOG,
			(errmsg("redsem keeper terminated process %d: it ran on after its statement was stopped for the lost slot of semaphore \"%s\"",
					w->pid, w->name),
			 errdetail("The same statement still ran " INT64_FORMAT " ms after the stop (or its last try to take a slot of the semaphore again): its code caught the error that told it (query_canceled).",
					   (int64) TimestampDifferenceMilliseconds(w->counted_from, now)),
			 errhint(ESCALATE_HINT)));
}

/*
 * What becomes of watch w now: true to keep watching it.  It ends when its
 * statement did, or a slot of its semaphore was granted to it again (not
 * one of its whole statement); its count starts again at each try to take
 * one; past REDSEM_STOP_ESCALATE_MS its backend is terminated.
 */
static bool
look_at(Watch *w, TimestampTz now)
{
	TimestampTz start;
	uint32		asks;
	uint32		grants;
	HoldFreshness fresh;

	if (BackendPidGetProc(w->pid) == NULL || !ask_slot_read(w, &asks, &grants) ||
		!running_statement(w->pid, &start) || start != w->statement_start)
		return false;
	/* (granted a slot of it again since: held still, or given back) */
	fresh = shared_hold_fresh(w->pid, w->name, w->since);
	if (!w->whole && (fresh == HOLD_FRESH_GRANTED || grants != w->grants_seen))
		return false;
	if (fresh == HOLD_FRESH_WAITING || asks != w->asks_seen)
	{
		w->counted_from = now;
		w->asks_seen = asks;
		return true;
	}
	if (now < TimestampTzPlusMilliseconds(w->counted_from, REDSEM_STOP_ESCALATE_MS) ||
		waiting_aside(w->pid))
		return true;
	terminate(w, now);
	return false;
}

/*
 * Look at the watched backends (the keeper, at least every
 * KEEPER_MAX_SLEEP_MS): keep the watches that go on, end the others
 */
void
escalate_look(TimestampTz now)
{
	int			kept = 0;

	if (ask_shared != NULL)
		watch_asked(now);
	if (n_watches > 0)
	{
		static Watch over[ESCALATE_MAX_WATCHES];
		int			n_over = 0;

		snapshot_read = false;
		for (int i = 0; i < n_watches; i++)
		{
			if (look_at(&watches[i], now))
				watches[kept++] = watches[i];
			else
				over[n_over++] = watches[i];
		}
		n_watches = kept;
		replaced_valid = false;
		/* (unlisted first: an AskSlot is freed when none of its watches is left) */
		for (int i = 0; i < n_over; i++)
			ask_slot_forget(&over[i]);
		full_logged = full_logged && n_watches >= ESCALATE_MAX_WATCHES;
	}
	/* (the next pass reads the status afresh, its watches' and looks') */
	if (snapshot_read)
		pgstat_clear_backend_activity_snapshot();
	snapshot_read = false;
}
