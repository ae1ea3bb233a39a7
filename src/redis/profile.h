/*
 * profile.h
 *		The settings a Redis connection is opened and set up with, beyond
 *		its address: this session's, or, in the broker, a client's.
 */
#ifndef REDSEM_PROFILE_H
#define REDSEM_PROFILE_H

/*
 * A connection's set-up: SELECT, AUTH and TLS, and where it goes through
 * sentinels (sentinel.c: the address is then the primary they name).
 * Strings are never NULL ("": not set).  The passwords are the ones AUTH
 * sends, already read.
 */
typedef struct RedisProfile
{
	int			database;
	const char *user;
	const char *password;
	bool		tls;
	const char *tls_ca_file;
	const char *tls_cert_file;
	const char *tls_key_file;
	const char *tls_server_name;
	const char *sentinels;		/* "": none, the address is used */
	const char *sentinel_master;
	const char *sentinel_user;
	const char *sentinel_password;
} RedisProfile;

extern void redis_profile_force(const RedisProfile *profile);
extern const RedisProfile *redis_profile_forced(void);

#endif							/* REDSEM_PROFILE_H */
