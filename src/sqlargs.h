/*
 * sqlargs.h
 *		Checked arguments for the SQL-callable functions, and who counts
 *		as an administrator (sqlargs.c).
 */
#ifndef REDSEM_SQLARGS_H
#define REDSEM_SQLARGS_H

#include "fmgr.h"

extern void reject_null(const char *argname);
extern char *name_arg(FunctionCallInfo fcinfo, int argno);
extern void sqlargs_set_queue_prefix_source(const char *(*source) (void));
extern char *id_arg(FunctionCallInfo fcinfo, int argno);
extern int	count_arg(FunctionCallInfo fcinfo, int argno, const char *argname);
extern const char *tenant_problem(const char *tenant);
extern char *tenant_arg(FunctionCallInfo fcinfo, int argno);
extern bool redsem_is_admin(void);
extern void require_admin(const char *what);
extern void require_queue_admin(const char *what);
extern void require_admin_for(const char *what, FunctionCallInfo fcinfo);
extern void refuse_queue_semaphore(const char *name);

#endif							/* REDSEM_SQLARGS_H */
