/*
 * redsem.c
 *		The module's entry point: _PG_init asks each module to define its
 *		settings and install its hooks; when preloaded, also shared memory,
 *		the keeper and the statement queues' executor hooks.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "adaptive.h"
#include "broker.h"
#include "cluster.h"
#include "compat.h"
#include "conn.h"
#include "escalate.h"
#include "guard.h"
#include "guc.h"
#include "hold.h"
#include "keeper.h"
#include "queue.h"
#include "queue_conf.h"
#include "queue_fleet.h"
#include "secret.h"
#include "sentinel.h"
#include "shmem.h"
#include "sqlargs.h"
#include "stop.h"
#include "tls.h"

REDSEM_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Module load.  When preloaded, also set up shared memory and the keeper;
 * otherwise everything but the keeper, statistics and queues works the same.
 */
void
_PG_init(void)
{
	/* first: the check hooks of the settings defined below read these */
	redsem_preloaded = process_shared_preload_libraries_in_progress;
	redsem_loading = true;
	guc_define();
	secret_define_gucs();
	hold_define_gucs();
	stop_define_gucs();
	tls_define_gucs();
	sentinel_define_gucs();
	cluster_define_gucs();
	queue_define_gucs();
	adaptive_define_gucs();
	hold_install_hooks();
	if (redsem_preloaded)
	{
		shmem_define_gucs();	/* server-start settings: only while preloading */
		broker_define_gucs();
		shmem_init();
		queue_fleet_shmem_init();
		escalate_shmem_init();
		queue_conf_set_fleet_source(queue_fleet_config);
		sqlargs_set_queue_prefix_source(queue_fleet_prefix);
		stats_reserve_room_for(queue_is_semaphore, queue_view_since);
		redis_watch_named_primary(shared_sentinel_named_other, shared_sentinel_moves);
		keeper_register();
		broker_register();
		queue_install_hooks();
	}
	else
		broker_note_unpreloaded_setting();
	guard_install_hooks();		/* last: outermost, around the queues' */
	MarkGUCPrefixReserved("redsem");
	redsem_loading = false;
}
