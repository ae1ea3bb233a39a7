/*
 * sqlargs.c
 *		Checked arguments for the SQL-callable functions (names, holder ids,
 *		counts) and who counts as an administrator.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "bounds.h"
#include "guc.h"
#include "sqlargs.h"
#include "textenc.h"

/* Raise the error for a NULL argument */
void
reject_null(const char *argname)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("argument \"%s\" must not be null", argname)));
}

/* A text argument that must not be NULL, as a C string */
static char *
text_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		reject_null(argname);
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/* The prefix statement queues take their slots under (queue_fleet_prefix, once preloaded) */
static const char *(*queue_prefix_source) (void) = NULL;

/* From _PG_init: where statement queues take their slots */
void
sqlargs_set_queue_prefix_source(const char *(*source) (void))
{
	queue_prefix_source = source;
}

/*
 * Raise 55000 if name is a statement queue's semaphore and this session's
 * own redsem.key_prefix is not the one its slots are taken under (the
 * server's: queue.c): the call would act on keys no queue uses
 */
static void
refuse_queue_elsewhere(const char *name)
{
	const char *fleet;

	if (redsem_queue_of_semaphore(name) == NULL || queue_prefix_source == NULL ||
		(fleet = queue_prefix_source()) == NULL ||
		strcmp(fleet, redsem_prefix_setting()) == 0)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("semaphore \"%s\" is a statement queue's, whose slots are under key prefix \"%s\", not this session's \"%s\"",
					name, fleet, redsem_prefix_setting()),
			 errdetail("Statement queues take their slots under the key prefix the server reads their definitions under, whatever a session's own redsem.key_prefix."),
			 errhint("Run it from a session without a redsem.key_prefix of its own (one set for its database or role).")));
}

/* The semaphore name argument, checked, in UTF-8 (textenc.c) */
char *
name_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *name = text_to_redis(text_arg(fcinfo, argno, "name"), "semaphore name");
	size_t		len = strlen(name);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("semaphore name must not be empty")));
	if (len > REDSEM_MAX_NAME_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("semaphore name is too long"),
				 errdetail("The name is %zu bytes long; the limit is %d bytes.",
						   len, REDSEM_MAX_NAME_BYTES)));
	refuse_queue_elsewhere(name);
	return name;
}

/* The holder id argument, checked for the shape redsem_make_id produces */
char *
id_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *id = text_arg(fcinfo, argno, "id");
	size_t		len = strlen(id);

	if (len == 0 || len > REDSEM_MAX_ID_BYTES ||
		strspn(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-_:") != len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid holder id \"%s\"", len > 40 ? "(too long)" : id),
				 errdetail("A holder id is the text returned by redsem_acquire: 1 to %d letters, digits, \".\", \"-\", \"_\" or \":\".",
						   REDSEM_MAX_ID_BYTES)));
	return id;
}

/*
 * What is wrong with a tenant name, as an errdetail sentence, or NULL if
 * nothing: 1 to REDSEM_MAX_TENANT_BYTES bytes, without control characters
 * (C0, DEL and, as the name is UTF-8 by now, C1) or "|" (the script keeps it
 * in a "|"-separated field).
 */
const char *
tenant_problem(const char *tenant)
{
	size_t		len = strlen(tenant);

	if (len == 0)
		return "A tenant name must not be empty; pass NULL for none.";
	if (len > REDSEM_MAX_TENANT_BYTES)
		return psprintf("A tenant name is 1 to %d bytes long; this one has %zu.",
						REDSEM_MAX_TENANT_BYTES, len);
	for (const unsigned char *c = (const unsigned char *) tenant; *c; c++)
		if (*c < 0x20 || *c == 0x7f || *c == '|' ||
			(c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f))	/* U+0080-U+009F */
			return "A tenant name must not contain control characters or \"|\".";
	return NULL;
}

/* The tenant argument: NULL for none, else a name tenant_problem accepts */
char *
tenant_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *tenant;
	const char *problem;

	if (PG_ARGISNULL(argno))
		return NULL;
	tenant = text_to_redis(text_to_cstring(PG_GETARG_TEXT_PP(argno)), "tenant name");
	problem = tenant_problem(tenant);
	if (problem)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid tenant name"),
				 errdetail_internal("%s", problem)));
	return tenant;
}

/* True for superusers and members of the redsem_admin role */
bool
redsem_is_admin(void)
{
	Oid			admin = get_role_oid(REDSEM_ADMIN_ROLE, true);

	return superuser() || (OidIsValid(admin) && has_privs_of_role(GetUserId(), admin));
}

/* Raise 42501 for what, with hint, unless the user is an administrator */
static void
refuse_unless_admin(const char *what, const char *hint)
{
	if (!redsem_is_admin())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to %s", what),
				 errdetail("Only superusers and members of role %s may.", REDSEM_ADMIN_ROLE),
				 errhint("%s", hint)));
}

/*
 * Raise 42501 unless the user is a superuser or a member of
 * redsem_admin (the functions that act on others' slots or on shared
 * configuration are EXECUTE-able by everyone, so that the refusal can say
 * how to get the right).
 */
void
require_admin(const char *what)
{
	if (!redsem_is_admin())
		refuse_unless_admin(what, psprintf("An administrator can run: GRANT %s TO %s;", REDSEM_ADMIN_ROLE,
										   quote_identifier(GetUserNameFromId(GetUserId(), false))));
}

/*
 * As require_admin, for statement queues: the hint does not suggest granting
 * redsem_admin, which would let a queued role change the queue that holds it.
 */
void
require_queue_admin(const char *what)
{
	refuse_unless_admin(what, "Ask an administrator to make the change: a member of role "
						REDSEM_ADMIN_ROLE " may change every queue, those that govern its own statements too.");
}

/*
 * require_admin for a function whose first argument names a semaphore: a
 * statement queue's gets require_queue_admin's hint
 */
void
require_admin_for(const char *what, FunctionCallInfo fcinfo)
{
	if (!PG_ARGISNULL(0) && redsem_queue_of_semaphore(text_to_cstring(PG_GETARG_TEXT_PP(0))) != NULL)
		require_queue_admin(what);
	else
		require_admin(what);
}

/*
 * Raise 42501 if name is a statement queue's semaphore and the user is no
 * administrator: an ordinary role that took its slots, or waited in its
 * line, would hold up the statements of every role in that queue.
 */
void
refuse_queue_semaphore(const char *name)
{
	if (redsem_queue_of_semaphore(name) == NULL || redsem_is_admin())
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to take a slot of semaphore \"%s\"", name),
			 errdetail("Semaphores named \"%s...\" are the slots of statement queues (redsem.queues); only superusers and members of role %s may take them from SQL.",
					   REDSEM_QUEUE_PREFIX, REDSEM_ADMIN_ROLE),
			 errhint("Pick a name that does not begin with \"%s\".", REDSEM_QUEUE_PREFIX)));
}

/* A count argument between 1 and REDSEM_MAX_HOLDERS */
int
count_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	int			n;

	if (PG_ARGISNULL(argno))
		reject_null(argname);
	n = PG_GETARG_INT32(argno);
	if (n < 1 || n > REDSEM_MAX_HOLDERS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" is out of range", argname),
				 errdetail("\"%s\" must be between 1 and %d; it is %d.",
						   argname, REDSEM_MAX_HOLDERS, n)));
	return n;
}
