/*
 * secret.c
 *		The Redis password, kept out of everything SQL can read or the log
 *		can print.
 *
 * The documented way to give it is redsem.password_file: the path of a
 * file that only the server's operating system user can read, like
 * PGPASSFILE or Redis's own ACL files.  The path is not a secret; the file
 * is read each time a connection is opened (so a new password takes effect
 * at the next reconnect) and its content lives on the stack only while AUTH
 * is sent.  The permissions are checked as PostgreSQL checks ssl_key_file:
 * owned by the server's user with no group or world access, or owned by
 * root with at most group read.
 *
 * redsem.password still works, but SHOW shows it masked, and what stays
 * visible elsewhere is listed in the README.
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "utils/guc.h"

#include "guc.h"
#include "profile.h"
#include "report.h"
#include "secret.h"

char	   *redsem_password = NULL;
char	   *redsem_password_file = NULL;

/* Refuse a password file (of the setting named) that others could read */
static bool
check_file_mode(const struct stat *st, const char *setting, const char *path,
				RedisOutcome *o)
{
	if (!S_ISREG(st->st_mode))
		return redis_note(o, RS_PASSWORD_FILE, "%s \"%s\" is not a regular file", setting, path);
	if (st->st_uid != geteuid() && st->st_uid != 0)
		return redis_note(o, RS_PASSWORD_FILE, "%s \"%s\" must be owned by the database server's user or root", setting, path);
	if (st->st_uid == geteuid() && (st->st_mode & (S_IRWXG | S_IRWXO)))
		return redis_note(o, RS_PASSWORD_FILE, "%s \"%s\" has group or world access; permissions should be u=rw (0600) or less", setting, path);
	if (st->st_uid == 0 && (st->st_mode & (S_IWGRP | S_IXGRP | S_IRWXO)))
		return redis_note(o, RS_PASSWORD_FILE, "%s \"%s\" has group write or world access; permissions should be u=rw,g=r (0640) or less", setting, path);
	return true;
}

/*
 * Read the first line of the password file path, given by the setting
 * named, into buf; false, with the outcome filled in, if it cannot be used.
 */
bool
secret_from_file(const char *setting, const char *path, char *buf, size_t len,
				 RedisOutcome *o)
{
	struct stat st;
	ssize_t		n;
	size_t		used = 0;
	int			fd = open(path, O_RDONLY | O_CLOEXEC);
	bool		ok;

	if (fd < 0)
		return redis_note(o, RS_PASSWORD_FILE, "could not open %s \"%s\": %m", setting, path);
	ok = (fstat(fd, &st) == 0) ? check_file_mode(&st, setting, path, o) :
		redis_note(o, RS_PASSWORD_FILE, "could not stat %s \"%s\": %m", setting, path);
	while (ok && used < len && (n = read(fd, buf + used, len - used)) != 0)
	{
		if (n < 0 && errno != EINTR)
			ok = redis_note(o, RS_PASSWORD_FILE, "could not read %s \"%s\": %m", setting, path);
		else if (n > 0)
			used += n;
	}
	close(fd);
	if (ok && used == len)
		ok = redis_note(o, RS_PASSWORD_FILE, "%s \"%s\" is longer than %d bytes",
						  setting, path, (int) len - 1);
	if (ok)
	{
		buf[used] = '\0';
		buf[strcspn(buf, "\r\n")] = '\0';
		if (buf[0] == '\0')
			ok = redis_note(o, RS_PASSWORD_FILE, "%s \"%s\" is empty", setting, path);
	}
	if (!ok)
		explicit_bzero(buf, len);
	return ok;
}

/*
 * The password to send with AUTH: the forced profile's (the broker's
 * client's, read by its session), else from redsem.password_file when set,
 * else redsem.password.  *have is false when there is none.  Returns false,
 * with the outcome filled in, if the file cannot be used.
 */
bool
redis_password(char *buf, size_t len, bool *have, RedisOutcome *o)
{
	const RedisProfile *forced = redis_profile_forced();

	*have = false;
	if (forced != NULL)
	{
		strlcpy(buf, forced->password, len);
		*have = forced->password[0] != '\0';
	}
	else if (redsem_password_file && redsem_password_file[0] != '\0')
	{
		if (!secret_from_file("redsem.password_file", redsem_password_file,
							  buf, len, o))
			return false;
		*have = true;
	}
	else if (redsem_password && redsem_password[0] != '\0')
	{
		strlcpy(buf, redsem_password, len);
		*have = true;
	}
	return true;
}

/* SHOW redsem.password: never the password itself */
const char *
show_password(void)
{
	return (redsem_password && redsem_password[0] != '\0') ? "********" : "";
}

/*
 * Check a value of redsem.password: refused where it would be stored for
 * every role to read (pg_db_role_setting, pg_proc.proconfig are readable by
 * PUBLIC): ALTER ROLE/DATABASE ... SET and a function's SET clause are
 * validated with source PGC_S_TEST, and their stored values come back as
 * PGC_S_GLOBAL (ALTER ROLE ALL), PGC_S_DATABASE, PGC_S_USER or
 * PGC_S_DATABASE_USER.  The message never
 * shows the value (the default one would).
 */
static bool
check_password(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	if (source != PGC_S_TEST && source != PGC_S_GLOBAL && source != PGC_S_DATABASE &&
		source != PGC_S_USER && source != PGC_S_DATABASE_USER)
		return true;
	GUC_check_errmsg("redsem.password cannot be set with ALTER ROLE, ALTER DATABASE or a function's SET clause");
	GUC_check_errdetail("Such values are stored in pg_db_role_setting or pg_proc, which every role can read.");
	GUC_check_errhint("Give the password in redsem.password_file (a file only the server's user can read), or in postgresql.conf.");
	return false;
}

/* Define the password settings */
void
secret_define_gucs(void)
{
	DefineCustomStringVariable("redsem.password_file",
							   "File holding the Redis password (AUTH); empty means none.",
							   "The file must be readable by the server's operating system user only (0600), like PGPASSFILE.",
							   &redsem_password_file, "",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
	DefineCustomStringVariable("redsem.password",
							   "Redis password (AUTH); prefer redsem.password_file.",
							   "Shown masked; ignored when redsem.password_file is set.",
							   &redsem_password, "",
							   PGC_SUSET, GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL,
							   check_password, redsem_assign_connection_string, show_password);
}
