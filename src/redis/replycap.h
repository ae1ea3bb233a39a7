/*
 * replycap.h
 *		Bounds on the arrays a Redis reply may claim (replycap.c): hiredis
 *		makes an array's element slots as the header claims and frees them
 *		one by one, so a header of 2^31 elements from a hostile or broken
 *		Redis held a backend, or the broker and every session it serves,
 *		for seconds per level of nesting, out of reach of cancel.
 */
#ifndef REDSEM_REPLYCAP_H
#define REDSEM_REPLYCAP_H

#include "hiredis.h"

/*
 * The most elements one array of a reply may claim, 2^22 (src/redsem.lua's
 * longest listing, index_list, answers 100,002 at most): a refused header
 * costs nothing, and freeing an array this long takes about 10 ms
 */
#define REDIS_REPLY_MAX_ELEMENTS	4194304

/*
 * The most arrays one reply may nest (hiredis 0.14 allows 7 below the
 * first; hiredis 1.x has no bound, and freeing a reply recurses: 10^6
 * levels of "*1" overflowed the stack, helper-165); redsem's nest 3
 */
#define REDIS_REPLY_MAX_DEPTH		7

extern void redis_cap_replies(redisContext *c);
extern const char *redis_context_error(const redisContext *c);

#endif							/* REDSEM_REPLYCAP_H */
