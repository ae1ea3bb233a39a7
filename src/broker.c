/*
 * broker.c
 *		The redsem broker's process shape: the setting
 *		redsem.connection_mode, a supervisor background worker ("redsem
 *		broker supervisor") and the broker it forks ("redsem broker"), whose
 *		loop is broker_loop.c.
 *
 * Why a forked child and not a background worker of its own: every
 * background worker of PostgreSQL 15 and later is attached to shared
 * memory, and the postmaster restarts the whole server (ending every
 * session) when one dies by a signal.  The broker is a process an operator
 * may kill, or the OOM killer may pick; its death must cost only the
 * connections it carried.  So the supervisor (attached, but doing nothing
 * that may fail) forks it, restarts it when it dies, and stops it at
 * shutdown.  The child never touches shared memory nor takes a lock; it
 * forgets the parent's exit callbacks, has its own latch and signal
 * handlers, dies with its parent (PR_SET_PDEATHSIG), and turns any ERROR
 * into an exit the supervisor reaps.
 */
#include "postgres.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "libpq/pqsignal.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/ps_status.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "broker.h"
#include "broker_loop.h"
#include "clock.h"
#include "compat.h"
#include "guc.h"
#include "link.h"
#include "sockwait.h"
#include "timing.h"

PGDLLEXPORT void redsem_broker_supervisor_main(Datum main_arg);

static const struct config_enum_entry connection_mode_options[] = {
	{"direct", REDSEM_CONNECTION_DIRECT, false},
	{"broker", REDSEM_CONNECTION_BROKER, false},
	{NULL, 0, false}
};

/* Define redsem.connection_mode (a server-start setting: only while preloading) and redsem.broker_poll */
void
broker_define_gucs(void)
{
	DefineCustomEnumVariable("redsem.connection_mode",
							 "How client backends reach Redis: a connection each (direct) or through this server's broker (broker).",
							 "In broker mode one process per server owns the Redis connections of every session; the keeper keeps its own. Only used when redsem is in shared_preload_libraries.",
							 &redsem_connection_mode, REDSEM_CONNECTION_DIRECT,
							 connection_mode_options, PGC_POSTMASTER, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("redsem.broker_poll",
							"Microseconds the broker keeps polling its sockets after it handled anything, before it sleeps.",
							"Calls and answers that come meanwhile are taken without waking the broker; it gives the CPU to others between polls. 0 makes it sleep at once.",
							&redsem_broker_poll_us, BROKER_POLL_US, 0, 10000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
}

/*
 * Without preloading the setting cannot be defined (a server-start setting
 * after start is refused): remember whether broker mode was asked for, so
 * that a call says why it cannot have it (brokerlink.c).
 */
void
broker_note_unpreloaded_setting(void)
{
	const char *mode = GetConfigOption("redsem.connection_mode", true, false);

	redsem_broker_asked_unpreloaded = mode != NULL && pg_strcasecmp(mode, "broker") == 0;
}

/* Register the supervisor (from _PG_init, when preloading in broker mode) */
void
broker_register(void)
{
	BackgroundWorker worker;

	if (redsem_connection_mode != REDSEM_CONNECTION_BROKER)
		return;
	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "redsem");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "redsem_broker_supervisor_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "redsem broker supervisor");
	snprintf(worker.bgw_type, BGW_MAXLEN, "redsem broker supervisor");
	RegisterBackgroundWorker(&worker);
}

/* ---- the broker child ---- */

/* The child's own latch: it must not use the supervisor's (shared) one */
static Latch broker_latch;

/* Set by SIGTERM in the child */
static volatile sig_atomic_t broker_stop_requested = false;

/* SIGTERM in the child: stop at the next turn of the loop */
static void
broker_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	broker_stop_requested = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/* SIGQUIT in the child: the server is going down at once */
static void
broker_sigquit(SIGNAL_ARGS)
{
	_exit(2);
}

/* The child's signal handlers: only what it needs, nothing shared */
static void
broker_set_signals(void)
{
	pqsignal(SIGTERM, broker_sigterm);
	pqsignal(SIGQUIT, broker_sigquit);
	pqsignal(SIGINT, SIG_IGN);
	pqsignal(SIGHUP, SIG_IGN);	/* (reloads come from the supervisor: settings_pipe) */
	pqsignal(SIGUSR1, SIG_IGN);
	pqsignal(SIGUSR2, SIG_IGN);
	pqsignal(SIGALRM, SIG_IGN);
	pqsignal(SIGPIPE, SIG_IGN);
	pqsignal(SIGCHLD, SIG_DFL);
}

/*
 * Forget what the supervisor was: exit callbacks, pid, latch.  The wait
 * event of its waits goes to a variable of its own, not to the
 * supervisor's PGPROC; and the Redis client is told the event to show, so
 * that it never registers a named one (shared memory and a lock, since
 * PostgreSQL 17).
 */
static void
broker_become_own_process(void)
{
	on_exit_reset();
	MyProcPid = getpid();
	MyStartTime = time(NULL);
	pgstat_reset_wait_event_storage();
	InitLatch(&broker_latch);
	MyLatch = &broker_latch;
	redis_set_wait_event(PG_WAIT_EXTENSION);
}

/* Die with the supervisor; exit now if it is already gone */
static void
broker_follow_parent(pid_t supervisor)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != supervisor)
		_exit(1);
}

/* Show "redsem broker" in ps */
static void
broker_set_title(void)
{
	(void) prctl(PR_SET_NAME, "redsem broker");
	init_ps_display("redsem broker");
}

/*
 * The broker child, right after fork: become a process of its own, then
 * run the loop.  An ERROR is logged and ends the process (the supervisor
 * starts another); it never returns.
 */
pg_noreturn static void
broker_child_main(pid_t supervisor, int settings_fd)
{
	sigjmp_buf	local_sigjmp_buf;

	broker_become_own_process();
	broker_set_signals();
	broker_follow_parent(supervisor);
	broker_set_title();
	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
	{
		error_context_stack = NULL;
		HOLD_INTERRUPTS();
		EmitErrorReport();
		_exit(1);
	}
	PG_exception_stack = &local_sigjmp_buf;
	sigprocmask(SIG_SETMASK, &UnBlockSig, NULL);
	redis_set_connection_purpose("broker");
	redis_name_every_connection();
	broker_loop(&broker_stop_requested, settings_fd);
	_exit(0);
}

/* ---- the supervisor ---- */

static volatile sig_atomic_t supervisor_stop_requested = false;

/* The broker child's pid, 0 while there is none */
static pid_t broker_pid = 0;
static TimestampTz broker_started_at = 0;

/* The write end of its settings pipe, -1 while there is none */
static int	settings_write_fd = -1;

/* When the next broker may start, and the back-off after a quick death */
static TimestampTz next_start_at = 0;
static int	restart_backoff_ms = 0;

/* SIGTERM in the supervisor: stop the broker, then exit */
static void
supervisor_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	supervisor_stop_requested = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/* SIGCHLD in the supervisor: reap in the loop */
static void
supervisor_sigchld(SIGNAL_ARGS)
{
	int			save_errno = errno;

	SetLatch(MyLatch);
	errno = save_errno;
}

/* Fork a broker; on failure try again after the back-off */
static void
start_broker(void)
{
	pid_t		supervisor = getpid();
	pid_t		pid = -1;
	sigset_t	was;
	int			fds[2];			/* the settings pipe: the broker reads fds[0] */

	fflush(stdout);
	fflush(stderr);
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0)
	{
		/* (blocked until the child's own handlers are in: a SIGTERM then waits) */
		sigprocmask(SIG_SETMASK, &BlockSig, &was);
		pid = fork();
		if (pid == 0)
		{
			close(fds[1]);
			broker_child_main(supervisor, fds[0]);
		}
		sigprocmask(SIG_SETMASK, &was, NULL);
		close(fds[0]);
		if (pid < 0)
			close(fds[1]);
	}
	if (pid < 0)
	{
		ereport(LOG,
				(errmsg("redsem broker supervisor could not fork the broker: %m")));
		restart_backoff_ms = BROKER_RESTART_BACKOFF_MS;
		next_start_at = TimestampTzPlusMilliseconds(redsem_now(), restart_backoff_ms);
		return;
	}
	settings_write_fd = fds[1];
	broker_pid = pid;
	broker_started_at = redsem_now();
}

/* The back-off before the next broker, after one that lived lived_ms */
static int
backoff_after(int64 lived_ms)
{
	if (lived_ms >= BROKER_QUICK_DEATH_MS)
		return 0;
	return restart_backoff_ms == 0 ? BROKER_RESTART_BACKOFF_MS :
		Min(restart_backoff_ms * 2, BROKER_RESTART_BACKOFF_MAX_MS);
}

/* Reap exited children; when the broker is one, plan the next */
static void
reap_broker(void)
{
	pid_t		pid;
	int			status;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
	{
		TimestampTz now = redsem_now();

		if (pid != broker_pid)
			continue;
		broker_pid = 0;
		close(settings_write_fd);
		settings_write_fd = -1;
		restart_backoff_ms = backoff_after((now - broker_started_at) / 1000);
		next_start_at = TimestampTzPlusMilliseconds(now, restart_backoff_ms);
		if (WIFSIGNALED(status))
			ereport(LOG,
					(errmsg("redsem broker (PID %d) ended by signal %d: %s", (int) pid, WTERMSIG(status), strsignal(WTERMSIG(status))),
					 errdetail("A new broker starts in %d ms; sessions whose calls it carried saw the connection lost.", restart_backoff_ms)));
		else if (!supervisor_stop_requested)
			ereport(LOG,
					(errmsg("redsem broker (PID %d) exited with exit code %d", (int) pid, WEXITSTATUS(status)),
					 errdetail("A new broker starts in %d ms.", restart_backoff_ms)));
	}
}

/* Stop the broker: SIGTERM, then SIGKILL after BROKER_STOP_GRACE_MS */
static void
stop_broker(void)
{
	TimestampTz give_up = TimestampTzPlusMilliseconds(redsem_now(), BROKER_STOP_GRACE_MS);

	if (broker_pid == 0)
		return;
	(void) kill(broker_pid, SIGTERM);
	while (broker_pid != 0 && redsem_now() < give_up)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		reap_broker();
	}
	if (broker_pid != 0)
	{
		(void) kill(broker_pid, SIGKILL);
		(void) waitpid(broker_pid, NULL, 0);
		broker_pid = 0;
		close(settings_write_fd);
		settings_write_fd = -1;
	}
}

/* The broker's settings as the supervisor has them now */
static BrokerSettings
current_settings(void)
{
	BrokerSettings s;

	s.command_timeout_ms = redsem_command_timeout_ms;
	s.connect_timeout_ms = redsem_connect_timeout_ms;
	s.poll_us = redsem_broker_poll_us;
	return s;
}

/*
 * A reload (SIGHUP, from the postmaster): read the configuration again, so
 * that a broker started later has it, and send the broker its settings
 * over its pipe.  The broker reads no configuration file itself: another
 * library's check hook may take a lock or touch shared memory (PostgreSQL
 * 17's synchronized_standby_slots takes an LWLock), and the broker, a fork
 * with the supervisor's PGPROC, must never (see the top of this file).
 * (A full pipe, a broker that reads none, keeps what it has.)
 */
static void
supervisor_reload(void)
{
	BrokerSettings s;

	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	s = current_settings();
	if (broker_pid != 0 && settings_write_fd >= 0 &&
		write(settings_write_fd, &s, sizeof(s)) != (ssize_t) sizeof(s))
		ereport(LOG,
				(errmsg("redsem broker supervisor could not pass the reloaded settings to the broker: %m"),
				 errdetail("The broker keeps the settings it had until it is restarted.")));
}

/* Milliseconds the supervisor may sleep: until the next start, or 1 s */
static long
supervisor_sleep_ms(void)
{
	if (broker_pid != 0)
		return 1000;
	return Max(Min(TimestampDifferenceMilliseconds(redsem_now(), next_start_at), 1000), 0);
}

/*
 * The supervisor: keep one broker running, restart it when it dies (at
 * once, or after a back-off if it keeps dying), stop it at shutdown.  It
 * exits with code 1 after a SIGTERM: at shutdown the postmaster starts no
 * worker again, and a SIGTERM from anyone else (pkill -f 'redsem broker'
 * matches it too) must not leave the server without a broker (a worker
 * that exits with 0 is never restarted).
 */
void
redsem_broker_supervisor_main(Datum main_arg)
{
	pqsignal(SIGTERM, supervisor_sigterm);
	pqsignal(SIGCHLD, supervisor_sigchld);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGPIPE, SIG_IGN);
	BackgroundWorkerUnblockSignals();
	for (;;)
	{
		reap_broker();
		if (supervisor_stop_requested)
			break;
		if (ConfigReloadPending)
			supervisor_reload();
		if (broker_pid == 0 && redsem_now() >= next_start_at)
			start_broker();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 supervisor_sleep_ms(), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	stop_broker();
	proc_exit(1);
}
