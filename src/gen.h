/*
 * gen.h
 *		Generations of Redis's semaphores (gen.c; I15 in src/redsem.lua):
 *		the key each Cluster slot keeps its generation in, and what this
 *		server last saw of it, which acquires pass on so that a Redis that
 *		forgot starts a grace period.
 */
#ifndef REDSEM_GEN_H
#define REDSEM_GEN_H

/* The longest generation text: "g", seven int64 with their colons, and a
 * replication id of at most 40 characters (16 are kept: gen_parts and
 * current_era in src/redsem.lua) */
#define GEN_TEXT_LEN 200
/* After how long a generation's lmax starts anew: GEN_WINDOW_MS in
 * src/redsem.lua (src/timing.h says why five minutes) */
#define GEN_WINDOW_MS (INT64CONST(300000))

extern int	gen_slot(const char *prefix, const char *sem_key);
extern char *gen_key(const char *prefix, int slot);
extern bool gen_lmax_below(const char *prefix, int slot, int64 lease_ms,
						   bool unacked);
extern void gen_known(const char *prefix, int slot, int64 lease_ms,
					  bool unacked, char *text, char *flags);
extern void gen_known_text(const char *prefix, int slot, char *text);
extern void gen_note(const char *prefix, int slot, const char *text,
					 bool ue_fresh);
extern void gen_checked(const char *prefix, int slot, uint64 route_changes);

#endif							/* REDSEM_GEN_H */
