/*
 * profile.c
 *		Whose settings the connections opened next are set up with.
 *
 * A backend's connections use its session's settings (redsem.database,
 * redsem.user, the password, redsem.tls...).  The broker opens connections
 * for its clients, each of which names the settings of its own session in
 * its link's header: while it opens one, the broker forces that client's
 * profile, so that link.c, secret.c and tls.c set the connection up as the
 * client's session would have (a role's own Redis user stays its own).
 */
#include "postgres.h"

#include "profile.h"

/* The profile forced for the connections opened now; NULL: the settings */
static const RedisProfile *forced = NULL;

/* Set up the connections opened from now on with profile (NULL: the settings) */
void
redis_profile_force(const RedisProfile *profile)
{
	forced = profile;
}

/* The profile forced now, or NULL when the session's settings apply */
const RedisProfile *
redis_profile_forced(void)
{
	return forced;
}
