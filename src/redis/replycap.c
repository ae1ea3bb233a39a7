/*
 * replycap.c
 *		A bound on the arrays a Redis reply may claim: each context's
 *		reader makes arrays through hiredis's own function, but refuses
 *		one that claims more than REDIS_REPLY_MAX_ELEMENTS or nests deeper
 *		than REDIS_REPLY_MAX_DEPTH (replycap.h says why).  hiredis then
 *		fails the read ("Out of memory"), and redis_context_error says
 *		what happened instead.
 */
#include "postgres.h"

#include "hiredis.h"

#include "compat.h"
#include "replycap.h"

/* hiredis's reply functions with createArray bounded; hiredis's own array maker */
static redisReplyObjectFunctions capped;
static void *(*make_array) (const redisReadTask *task, redsem_reply_elements n) = NULL;

/* Why an array was last refused (NULL: none since the error was told) */
static const char *refused = NULL;

/* How many arrays enclose task's */
static int
depth_of(const redisReadTask *task)
{
	int			depth = 0;

	for (const redisReadTask *t = task->parent; t != NULL && depth <= REDIS_REPLY_MAX_DEPTH; t = t->parent)
		depth++;
	return depth;
}

/*
 * hiredis's createArray, for at most REDIS_REPLY_MAX_ELEMENTS elements and
 * REDIS_REPLY_MAX_DEPTH arrays around it
 */
static void *
capped_array(const redisReadTask *task, redsem_reply_elements n)
{
	if ((uint64) n > REDIS_REPLY_MAX_ELEMENTS)
		refused = "Redis sent a reply with an array of more than " CppAsString2(REDIS_REPLY_MAX_ELEMENTS) " elements";
	else if (depth_of(task) > REDIS_REPLY_MAX_DEPTH)
		refused = "Redis sent a reply with arrays nested more than " CppAsString2(REDIS_REPLY_MAX_DEPTH) " deep";
	else
		return make_array(task, n);
	return NULL;				/* (hiredis fails the read: no slot made) */
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
	refused = NULL;				/* (a refusal no error told: not this one's) */
}

/* c's error, in words: the bound's, if an array was refused */
const char *
redis_context_error(const redisContext *c)
{
	const char *why = refused;

	if (c->err == REDIS_ERR_OOM && why != NULL)
	{
		refused = NULL;
		return why;
	}
	return c->errstr;
}
