/*
 * redsem.h
 *		What every part of redsem shares: argument bounds, settings, and the
 *		test-only fault injection.  Each module has its own header (conn.h,
 *		script.h, hold.h, shmem.h, keeper.h, secret.h); timing constants are
 *		in timing.h, PostgreSQL and hiredis version differences in compat.h.
 */
#ifndef REDSEM_H
#define REDSEM_H

#include "fmgr.h"

/* Bounds on arguments, documented in README.md */
#define REDSEM_MAX_NAME_BYTES	200
#define REDSEM_MAX_ID_BYTES		100
#define REDSEM_MAX_PREFIX_BYTES	64
#define REDSEM_MAX_HOLDERS		1000000

/* The role whose members may force-release slots and see every holder id */
#define REDSEM_ADMIN_ROLE		"redsem_admin"

/* Settings (guc.c) */
extern char *redsem_host;
extern int	redsem_port;
extern char *redsem_unix_socket;
extern int	redsem_database;
extern char *redsem_user;
extern char *redsem_key_prefix;
extern int	redsem_connect_timeout_ms;
extern int	redsem_command_timeout_ms;
extern int	redsem_grant_replicas;
extern int	redsem_grant_replica_timeout_ms;
extern int	redsem_max_holds_per_session;
extern uint64 redsem_guc_generation;
extern bool redsem_preloaded;
extern bool redsem_loading;

extern void guc_define(bool preloading);

extern void redsem_assign_connection_string(const char *newval, void *extra);
extern void redsem_assign_connection_bool(bool newval, void *extra);

extern void redsem_fault(const char *point);

/* SQL argument helpers (sqlfuncs.c) */
extern char *name_arg(FunctionCallInfo fcinfo, int argno);
extern char *id_arg(FunctionCallInfo fcinfo, int argno);
extern int	count_arg(FunctionCallInfo fcinfo, int argno, const char *argname);
extern bool redsem_is_admin(void);
extern void require_admin(const char *what);

#endif							/* REDSEM_H */
