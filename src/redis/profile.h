/*
 * profile.h
 *		The settings a Redis connection is opened and set up with, beyond
 *		its address: this session's, or, in the broker, a client's.
 */
#ifndef REDSEM_PROFILE_H
#define REDSEM_PROFILE_H

/*
 * A connection's set-up: SELECT, AUTH and TLS.  Strings are never NULL
 * ("": not set).  The password is the one AUTH sends, already read.
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
} RedisProfile;

extern void redis_profile_force(const RedisProfile *profile);
extern const RedisProfile *redis_profile_forced(void);

#endif							/* REDSEM_PROFILE_H */
