/*
 * gen.c
 *		Generations of Redis's semaphores (I15 in src/redsem.lua).
 *
 * Every semaphore call names its generation key (second, or in a Cluster
 * seventh): "<prefix>gen" outside a Cluster, and in a Cluster that of its
 * slot, "<prefix>gen{<tag>}", where tag is a short number that hashes to
 * that slot, so the key lives on the same node as the semaphore (one per
 * slot in use).  Acquires pass
 * the generation this server last saw there; the script makes everybody
 * wait out a grace period when the one it finds is another, or there is
 * none (Redis forgot), as long as the longest lease the caller knew of.
 * What this server saw is kept in shared memory (shmem.c), in an entry per
 * Cluster slot (outside a Cluster, one chosen by the signature), with the
 * Redis target, database, user and prefix it was seen under: a server that
 * moves to another Redis, or uses another prefix, has seen nothing there.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "clock.h"
#include "gen.h"
#include "guc.h"
#include "redis/cluster.h"
#include "redis/conn.h"
#include "shmem.h"
#include "timing.h"

static uint64 gen_signature(const char *prefix);
static bool seen_text(const char *prefix, int slot, char *text, SharedGenSeen *g);
static bool ue_due(const SharedGenSeen *g, int64 lease_ms);
static bool window_due(const SharedGenSeen *g);

/* Per backend: the tag of each slot's key, once found (0: not yet; tags
 * are stored plus one) */
static uint32 *slot_tags;
/* The next number to hash when a slot's tag is still missing */
static uint32 next_candidate;
/* Per backend and slot: check_token() of the prefix's signature and
 * redis_route_changes() when an acquire of this backend last checked the
 * slot's era (0: never); outside a Cluster only slot 0, in era_checked_one */
static uint64 *era_checked;
static uint64 era_checked_one;

/* A number whose decimal text hashes to slot (found once per backend) */
static uint32
slot_tag(int slot)
{
	char		text[16];

	if (slot_tags == NULL)
		slot_tags = MemoryContextAllocZero(TopMemoryContext,
										   sizeof(uint32) * CLUSTER_SLOTS);
	/* each number hashed fills the slot it falls in, so this is done once */
	while (slot_tags[slot] == 0)
	{
		int			len = snprintf(text, sizeof(text), "%u", next_candidate);
		int			s = cluster_key_slot(text, len);

		if (slot_tags[s] == 0)
			slot_tags[s] = next_candidate + 1;
		next_candidate++;
	}
	return slot_tags[slot] - 1;
}

/*
 * Where a semaphore's generation is, from any of its keys: its Cluster
 * slot, or 0 outside a Cluster (one generation per prefix)
 */
int
gen_slot(const char *prefix, const char *sem_key)
{
	return cluster_enabled() ? cluster_key_slot(sem_key, strlen(sem_key)) : 0;
}

/*
 * The entry of the shared table that slot's generation under sig is noted
 * in: spread by the signature too, so that sessions using other
 * databases, users or prefixes do not overwrite each other's (but for the
 * rare two that fall on one entry)
 */
static int
gen_entry(int slot, uint64 sig)
{
	return (int) ((slot + sig) % CLUSTER_SLOTS);
}

/* The generation key of slot under prefix (NULL: redsem.key_prefix) */
char *
gen_key(const char *prefix, int slot)
{
	prefix = redsem_prefix_or_setting(prefix);
	if (!cluster_enabled())
		return psprintf("%sgen", prefix);
	return psprintf("%sgen{%u}", prefix, slot_tag(slot));
}

/*
 * True unless this server saw slot's generation with a lmax of lease_ms at
 * least and, unacked (a lease that waits for no replica), with an ul of it
 * and a ue not due to move on (a refresh that lengthens a lease raises them
 * first: gen_raise).  A generation not seen under these settings counts as
 * below: a slot the keeper found under new settings (keeper.c), or whose
 * entry another took, may be lengthened before any acquire saw it.
 */
bool
gen_lmax_below(const char *prefix, int slot, int64 lease_ms, bool unacked)
{
	SharedGenSeen g;

	uint64		sig = gen_signature(prefix);

	return !shared_gen_read(gen_entry(slot, sig), sig, &g) ||
		g.lmax < lease_ms || (unacked && ue_due(&g, lease_ms));
}

/* Which Redis and prefix a generation was seen under */
static uint64
gen_signature(const char *prefix)
{
	prefix = redsem_prefix_or_setting(prefix);
	return redis_target_signature() ^
		hash_bytes_extended((const unsigned char *) prefix, strlen(prefix), 0x9e37);
}

/* Milliseconds since 1970 by the wall clock, as Redis's TIME counts */
static int64
unix_ms(void)
{
	return ((int64) GetCurrentTimestamp() +
			(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC) / 1000;
}

/*
 * True if a lease of lease_ms that waits for no replica must move g's ul
 * or ue on: it is longer than ul, or a quarter of it has passed since this
 * server last saw ue moved on for such a lease (by redsem's clock, which
 * no clock step moves: the script moves ue on if half a lease or less of
 * it is left, so every such grant leaves ue at least a quarter lease past
 * it)
 */
static bool
ue_due(const SharedGenSeen *g, int64 lease_ms)
{
	return lease_ms > g->ul ||
		redsem_now() - g->noted >= lease_ms * (USECS_PER_SEC / 1000) / 4;
}

/*
 * True if g's window is due to end: by the wall clock here, once
 * GEN_LOOK_EVERY_MS have passed since it was last noted (a clock ahead of
 * Redis's would find it due at every call), or a window after it was last
 * noted, by redsem's clock (a clock behind Redis's would find it due late)
 */
static bool
window_due(const SharedGenSeen *g)
{
	int64		since_ms = (redsem_now() - g->looked) / (USECS_PER_SEC / 1000);

	return since_ms >= GEN_WINDOW_MS ||
		(unix_ms() - g->rot >= GEN_WINDOW_MS && since_ms >= GEN_LOOK_EVERY_MS);
}

/*
 * What era_checked keeps for a check under signature sig after
 * route_changes (never 0): another prefix, Redis or route is unchecked
 */
static uint64
check_token(uint64 sig, uint64 route_changes)
{
	return (sig ^ ((route_changes + 1) * UINT64CONST(0x9E3779B97F4A7C15))) | 1;
}

/* Where this backend notes when it last checked slot's era */
static uint64 *
era_checked_of(int slot)
{
	if (!cluster_enabled())
		return &era_checked_one;
	if (era_checked == NULL)
		era_checked = MemoryContextAllocZero(TopMemoryContext,
											 sizeof(uint64) * CLUSTER_SLOTS);
	return &era_checked[slot];
}

/*
 * What this server saw of slot's generation, as the script writes it
 * ("" if nothing; never in a grace, so that the script's look at a text
 * it knows cannot skip one), and the flags that make the script look
 * closer: 'g' if lease_ms is longer than its lmax, its window is due to
 * end (window_due), or, unacked, ul or ue must
 * move on (ue_due); 'e'
 * if this backend has not checked the slot's era since it last opened a
 * link or followed a redirection (the primary may be another); 'u' if the
 * grant waits for no replica (unacked).  flags has room for 4 bytes.
 */
void
gen_known(const char *prefix, int slot, int64 lease_ms, bool unacked,
		  char *text, char *flags)
{
	SharedGenSeen g;
	uint64		sig = gen_signature(prefix);
	char	   *f = flags;

	if (*era_checked_of(slot) != check_token(sig, redis_route_changes()))
		*f++ = 'e';
	if (unacked)
		*f++ = 'u';
	if (seen_text(prefix, slot, text, &g) &&
		(lease_ms > g.lmax || window_due(&g) || (unacked && ue_due(&g, lease_ms))))
		*f++ = 'g';
	*f = '\0';
}

/*
 * Write what this server saw of slot's generation under prefix into text
 * (GEN_TEXT_LEN bytes), as the script reads it ("" if nothing), and into
 * *g; false if nothing
 */
static bool
seen_text(const char *prefix, int slot, char *text, SharedGenSeen *g)
{
	uint64		sig = gen_signature(prefix);

	text[0] = '\0';
	if (!shared_gen_read(gen_entry(slot, sig), sig, g))
		return false;
	snprintf(text, GEN_TEXT_LEN, "n" INT64_FORMAT ":" INT64_FORMAT ":0:" INT64_FORMAT ":"
			 INT64_FORMAT ":" INT64_FORMAT ":" INT64_FORMAT ":%s",
			 g->us, g->lmax, g->lprev, g->rot, g->ul, g->ue, g->era);
	return true;
}

/*
 * What this server saw of slot's generation under prefix, in text
 * (GEN_TEXT_LEN bytes; "" if nothing), for a gen_raise to pass on: a
 * keeper that finds Redis forgot starts the grace, as an acquire does
 */
void
gen_known_text(const char *prefix, int slot, char *text)
{
	SharedGenSeen g;

	(void) seen_text(prefix, slot, text, &g);
}

/*
 * An acquire sent with the flag 'e' for slot under prefix was answered:
 * its era was checked on the route as it was after the call
 * (route_changes)
 */
void
gen_checked(const char *prefix, int slot, uint64 route_changes)
{
	*era_checked_of(slot) = check_token(gen_signature(prefix), route_changes);
}

/*
 * Say in the server log that Redis forgot the semaphores of prefix (the
 * generation this server knew under sig was replaced by us: I15), once per
 * process and replacement: what it forgot with them fails open until it is
 * stored again.  Not in a Cluster, where each slot has its generation and
 * a node that forgot would be told once per slot and process.
 */
static void
log_forgot(const char *prefix, uint64 sig, int64 us)
{
	static uint64 logged_sig = 0;
	static int64 logged_us = 0;

	if (cluster_enabled() || (sig == logged_sig && us == logged_us))
		return;
	logged_sig = sig;
	logged_us = us;
	ereport(LOG,
			(errmsg("redsem: Redis at %s forgot the semaphores of key prefix \"%s\" since this server last used them",
					redis_target_description(), redsem_prefix_or_setting(prefix)),
			 errdetail("A restart without persistence, FLUSHALL, eviction, or a failover to a replica that had none of them makes Redis forget. Holders it knew of are stopped; stored limits, rates, reserves and tenant weights are gone until they are stored again."),
			 errhint("Store them again (redsem_set_limit, redsem_set_adaptive_limit, redsem_set_rate, redsem_set_reserve, redsem_set_tenant_weight); statement queue definitions come back by themselves.")));
}

/*
 * Say in the server log that Redis admits no new holder under prefix (in a
 * Cluster, of hash slot) until until_ms (Redis's clock): a grace (I15),
 * told by a reply that the entry before did not tell.  Not one already
 * logged by this process, nor one over by this server's clock (a late
 * reply).  In a Cluster, where each slot has its own, at most once per
 * GEN_GRACE_LOG_MS per process.
 */
static void
log_grace(const char *prefix, int slot, int64 until_ms)
{
	static TimestampTz last_logged = 0;
	static int64 logged_until = 0;
	TimestampTz until = time_t_to_timestamptz((pg_time_t) (until_ms / 1000)) +
		(until_ms % 1000) * INT64CONST(1000);

	if (until_ms == logged_until || until < GetCurrentTimestamp())
		return;
	if (cluster_enabled())
	{
		if (last_logged != 0 && redsem_now() < TimestampTzPlusMilliseconds(last_logged, GEN_GRACE_LOG_MS))
			return;
		last_logged = redsem_now();
	}
	logged_until = until_ms;
	ereport(LOG,
			(cluster_enabled() ?
			 errmsg("redsem: Redis at %s admits no new holder under key prefix \"%s\" in Cluster hash slot %d until %s (by Redis's clock)",
					redis_target_description(), redsem_prefix_or_setting(prefix), slot, timestamptz_to_str(until)) :
			 errmsg("redsem: Redis at %s admits no new holder under key prefix \"%s\" until %s (by Redis's clock)",
					redis_target_description(), redsem_prefix_or_setting(prefix), timestamptz_to_str(until)),
			 errdetail("A grace: Redis forgot slots, or after a change of primary may have lost slots, whose holders may still run until their leases end; it lasts as long as the longest lease asked for under the prefix in the last few minutes. Holders keep their slots; waiters keep their places, and a wait that ends in the grace fails with 55P03."),
			 errhint("See docs/deployment.md, Failover safety.")));
}

/*
 * Note slot's generation as a reply told it (text "" or malformed:
 * nothing); ue_fresh: the call made the script move ue on if it had to
 * (a grant, place or lengthened lease that waits for no replica)
 */
void
gen_note(const char *prefix, int slot, const char *text, bool ue_fresh)
{
	uint64		sig = gen_signature(prefix);
	SharedGenSeen before;
	long long	us;
	long long	lmax;
	long long	until;
	long long	lprev;
	long long	rot;
	long long	ul;
	long long	ue;
	char		flag;
	int			era_at = 0;
	SharedGenSeen g;
	bool		had;

	if (text == NULL ||
		sscanf(text, "%c%lld:%lld:%lld:%lld:%lld:%lld:%lld:%n", &flag, &us, &lmax, &until,
			   &lprev, &rot, &ul, &ue, &era_at) != 8 || era_at == 0 ||
		(flag != 'n' && flag != 'g') || us <= 0 || lmax < 0 || lprev < 0 || rot < 0 ||
		ul < 0 || ue < 0 || strlen(text + era_at) >= sizeof(g.era) ||
		strspn(text + era_at, "0123456789abcdefABCDEF") != strlen(text + era_at))
		return;
	g.us = us;
	g.lmax = lmax;
	g.lprev = lprev;
	g.rot = rot;
	g.ul = ul;
	g.ue = ue;
	had = shared_gen_read(gen_entry(slot, sig), sig, &before);
	/* (ue moved on by another: as fresh as when it moved, about now) */
	g.noted = ue_fresh || !had || before.ue < ue ? redsem_now() : before.noted;
	g.looked = redsem_now();
	strlcpy(g.era, text + era_at, sizeof(g.era));
	g.grace_until = flag == 'g' ? until : 0;
	shared_gen_write(gen_entry(slot, sig), sig, &g);
	if (had && before.us != us)
		log_forgot(prefix, sig, us);
	if (g.grace_until > 0 && !(had && before.grace_until == g.grace_until))
		log_grace(prefix, slot, g.grace_until);
}
