/*
 * textenc.h
 *		Text between a database's encoding and Redis's (UTF-8).
 */
#ifndef REDSEM_TEXTENC_H
#define REDSEM_TEXTENC_H

#include "postgres.h"

extern char *text_to_redis(const char *s, const char *what);
extern char *text_to_redis_quiet(const char *s);
extern char *text_from_redis(const char *s);
extern Datum text_datum_from_redis(const char *s);
extern char *text_for_message(const char *s);
extern void textenc_fix_report(ErrorData *edata);

#endif
