/*
 * textenc.c
 *		Text between a database's encoding and Redis's (UTF-8).
 *
 * Semaphore and tenant names are kept in Redis, and in shared memory, in
 * UTF-8 whatever the encoding of the database that gave them, so that one
 * name is one semaphore for every database and server of a fleet (a LATIN1
 * "café" and a UTF-8 one are the same).  A SQL_ASCII database may pass
 * any bytes, so what it gives must be UTF-8 already.  Text read back
 * (names, tenants, and what other servers wrote: user, database and
 * application names) is shown in the reader's encoding and is always
 * valid there: a character it cannot represent is shown as \uXXXX, and
 * bytes that are not UTF-8 as \xNN.  This never raises, so one such
 * name cannot break a listing.  Messages that name a semaphore name it in
 * UTF-8; in a database whose encoding that is not valid in (EUC_JP, say)
 * such a message would fail to reach the client and turn a WARNING into
 * an ERROR 22021, so its text is escaped the same way first, without the
 * catalogs (textenc_fix_report, from the emit_log_hook).
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "textenc.h"

static int	utf8_char_len(const char *s);

/* True if s has only ASCII bytes (valid in every server encoding) */
static bool
all_ascii(const char *s)
{
	for (; *s; s++)
		if (IS_HIGHBIT_SET(*s))
			return false;
	return true;
}

/*
 * s (what: "semaphore name", "tenant name"), in this database's encoding,
 * as UTF-8 for Redis; 22021 if a SQL_ASCII database gives bytes that are
 * not UTF-8
 */
char *
text_to_redis(const char *s, const char *what)
{
	int			len = strlen(s);

	if (all_ascii(s) || GetDatabaseEncoding() == PG_UTF8)
		return (char *) s;
	if (GetDatabaseEncoding() == PG_SQL_ASCII)
	{
		if (!pg_verify_mbstr(PG_UTF8, s, len, true))
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("%s is not valid UTF-8", what),
					 errdetail("redsem keeps names in UTF-8, so that every database and server sharing the Redis means the same name; a SQL_ASCII database passes its bytes as they are."),
					 errhint("Give the name in UTF-8, or in ASCII.")));
		return (char *) s;
	}
	return pg_server_to_any(s, len, PG_UTF8);
}

/*
 * s, in this database's encoding, as UTF-8 for Redis, never raising (a
 * name made from a template, not given by the caller: queue tenants): a
 * character with no UTF-8 form, or a byte a SQL_ASCII database holds that
 * is not UTF-8, becomes \xNN
 */
char *
text_to_redis_quiet(const char *s)
{
	int			enc = GetDatabaseEncoding();
	Oid			proc = InvalidOid;
	StringInfoData out;

	if (all_ascii(s) || enc == PG_UTF8)
		return (char *) s;
	if (enc != PG_SQL_ASCII)
		proc = FindDefaultConversionProc(enc, PG_UTF8);
	initStringInfo(&out);
	while (*s)
	{
		int			l;
		unsigned char buf[MAX_CONVERSION_GROWTH * 4 + 1];

		if (!IS_HIGHBIT_SET(*s))
		{
			appendStringInfoChar(&out, *s++);
			continue;
		}
		l = enc == PG_SQL_ASCII ? utf8_char_len(s) :
			pg_encoding_verifymbchar(enc, s, strnlen(s, 4));
		if (l > 0 && enc == PG_SQL_ASCII)
			appendBinaryStringInfo(&out, s, l);
		else if (l > 0 && l <= 4 && OidIsValid(proc) &&
				 pg_do_encoding_conversion_buf(proc, enc, PG_UTF8, (unsigned char *) s, l,
											   buf, sizeof(buf), true) == l)
			appendStringInfoString(&out, (char *) buf);
		else
		{
			/* (not a character: one byte escaped, and on) */
			appendStringInfo(&out, "\\x%02X", (unsigned char) *s);
			l = 1;
		}
		s += l;
	}
	return out.data;
}

/* The length of the valid UTF-8 character at s, or 0 if there is none */
static int
utf8_char_len(const char *s)
{
	int			l = pg_utf_mblen((const unsigned char *) s);

	for (int i = 1; i < l; i++)
		if (s[i] == '\0')
			return 0;
	return pg_utf8_islegal((const unsigned char *) s, l) ? l : 0;
}

/*
 * Append the UTF-8 character c (len bytes) to out in encoding enc, or as
 * \uXXXX: converted only if convert (a message being reported may not
 * reach the catalogs)
 */
static void
append_char(StringInfo out, const char *c, int len, int enc, bool convert)
{
	static Oid	proc = InvalidOid;
	static int	proc_enc = -1;
	unsigned char buf[MAX_CONVERSION_GROWTH * 4 + 1];
	pg_wchar	code = utf8_to_unicode((const unsigned char *) c);

	if (enc == PG_UTF8 || enc == PG_SQL_ASCII)
	{
		appendBinaryStringInfo(out, c, len);
		return;
	}
	if (convert && proc_enc != enc)
	{
		proc = FindDefaultConversionProc(PG_UTF8, enc);
		proc_enc = enc;
	}
	if (convert && OidIsValid(proc) &&
		pg_do_encoding_conversion_buf(proc, PG_UTF8, enc, (unsigned char *) c, len,
									  buf, sizeof(buf), true) == len)
		appendStringInfoString(out, (char *) buf);
	else if (code <= 0xFFFF)
		appendStringInfo(out, "\\u%04X", (unsigned int) code);
	else
		appendStringInfo(out, "\\U%08X", (unsigned int) code);
}

/*
 * s (UTF-8, or whatever another server or program wrote) in this
 * database's encoding: append_char for each character, \xNN for a byte
 * that is not UTF-8 (kept as it is in SQL_ASCII, where any byte is valid)
 */
static char *
utf8_to_database(const char *s, bool convert)
{
	StringInfoData out;
	int			enc = GetDatabaseEncoding();

	initStringInfo(&out);
	while (*s)
	{
		int			l = IS_HIGHBIT_SET(*s) ? utf8_char_len(s) : 1;

		if (l == 0 && enc == PG_SQL_ASCII)
			appendStringInfoChar(&out, *s);
		else if (l == 0)
			appendStringInfo(&out, "\\x%02X", (unsigned char) *s);
		else if (l == 1)
			appendStringInfoChar(&out, *s);
		else
			append_char(&out, s, l, enc, convert);
		s += Max(l, 1);
	}
	return out.data;
}

/*
 * s, read from Redis or shared memory (UTF-8, or whatever another server
 * wrote), as text valid in this database's encoding; never raises
 */
char *
text_from_redis(const char *s)
{
	return all_ascii(s) ? (char *) s : utf8_to_database(s, true);
}

/* text_from_redis(s) as a text Datum */
Datum
text_datum_from_redis(const char *s)
{
	return CStringGetTextDatum(text_from_redis(s));
}

/*
 * s (a semaphore's name in a message, or a message) escaped for a
 * database whose encoding s is not valid in: ASCII kept,
 * UTF-8 characters as \uXXXX, other bytes as \xNN (no catalog access:
 * safe while an error is reported); s itself if it is valid
 */
char *
text_for_message(const char *s)
{
	if (s == NULL || all_ascii(s) ||
		pg_verify_mbstr(GetDatabaseEncoding(), s, strlen(s), true))
		return (char *) s;
	return utf8_to_database(s, false);
}

/*
 * Make a report valid in the database's encoding (text_for_message): from
 * the emit_log_hook, in ErrorContext, before the report is logged and
 * sent; never raises.  (Any report's: PostgreSQL keeps only the base name
 * of the file that raised it, so redsem's are not told apart; one that is
 * not valid would otherwise be replaced by a 22021 ERROR when sent.)
 */
void
textenc_fix_report(ErrorData *edata)
{
	int			enc = GetDatabaseEncoding();

	if (enc == PG_UTF8 || enc == PG_SQL_ASCII)
		return;
	edata->message = text_for_message(edata->message);
	edata->detail = text_for_message(edata->detail);
	edata->detail_log = text_for_message(edata->detail_log);
	edata->hint = text_for_message(edata->hint);
	edata->context = text_for_message(edata->context);
}
