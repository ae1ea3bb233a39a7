/*
 * replycap.c
 *		A bound on the arrays a Redis reply may claim: each context's
 *		reader makes arrays through hiredis's own function, but refuses
 *		one that claims more than REDIS_REPLY_MAX_ELEMENTS (replycap.h says
 *		why).  hiredis then fails the read ("Out of memory"), and
 *		redis_context_error says what happened instead.
 */
#include "postgres.h"

#include "hiredis.h"

#include "compat.h"
#include "replycap.h"

/* hiredis's reply functions with createArray bounded; hiredis's own array maker */
static redisReplyObjectFunctions capped;
static void *(*make_array) (const redisReadTask *task, redsem_reply_elements n) = NULL;

/* Set when an array was refused, until the error is next told */
static bool refused = false;

/* hiredis's createArray, for at most REDIS_REPLY_MAX_ELEMENTS elements */
static void *
capped_array(const redisReadTask *task, redsem_reply_elements n)
{
	if ((uint64) n > REDIS_REPLY_MAX_ELEMENTS)
	{
		refused = true;
		return NULL;			/* (hiredis fails the read: no slot made) */
	}
	return make_array(task, n);
}

/* Bound the arrays c's replies may claim (hiredis's functions otherwise) */
void
redis_cap_replies(redisContext *c)
{
	if (c == NULL || c->reader == NULL || c->reader->fn == NULL)
		return;
	if (make_array == NULL)
	{
		capped = *c->reader->fn;
		make_array = capped.createArray;
		capped.createArray = capped_array;
	}
	if (c->reader->fn->createArray == make_array)
		c->reader->fn = &capped;
}

/* c's error, in words: the bound's, if an array was refused */
const char *
redis_context_error(const redisContext *c)
{
	if (c->err == REDIS_ERR_OOM && refused)
	{
		refused = false;
		return "Redis sent a reply with an array of more than " CppAsString2(REDIS_REPLY_MAX_ELEMENTS) " elements";
	}
	return c->errstr;
}
