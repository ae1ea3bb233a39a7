/*
 * secret.h
 *		The Redis password: from redsem.password_file, or redsem.password.
 */
#ifndef REDSEM_SECRET_H
#define REDSEM_SECRET_H

#include "redis_call.h"

#define REDSEM_MAX_SECRET_BYTES	512

extern char *redsem_password;
extern char *redsem_password_file;

extern bool redis_password(char *buf, size_t len, bool *have,
						   RedisOutcome *outcome);
extern bool secret_from_file(const char *setting, const char *path,
							 char *buf, size_t len, RedisOutcome *outcome);
extern const char *show_password(void);

extern void secret_define_gucs(void);

#endif							/* REDSEM_SECRET_H */
