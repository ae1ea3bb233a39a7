/*
 * tls.c
 *		TLS to Redis.
 *
 * Built only against hiredis >= 1.0 with hiredis_ssl (REDSEM_HAVE_TLS,
 * detected by the Makefile); elsewhere the settings exist, and asking for
 * TLS fails every connection with a message naming the missing library.
 *
 * The session is handed to hiredis (redisInitiateSSL) on the non-blocking
 * socket, which only starts the handshake; it is run to its end here,
 * through the latch-aware wait of conn.c, so that it is bounded by
 * redsem.connect_timeout and served by cancel like every other wait.  The server's certificate is always verified: against
 * redsem.tls_ca_file (or the system's trusted authorities), and its name
 * against redsem.tls_server_name (or the host connected to).
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include "hiredis.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "profile.h"
#include "redis_call.h"
#include "report.h"
#include "sockwait.h"
#include "tls.h"

bool		redsem_tls = false;
static char *redsem_tls_ca_file = NULL;
static char *redsem_tls_cert_file = NULL;
static char *redsem_tls_key_file = NULL;
static char *redsem_tls_server_name = NULL;

/* Define the TLS settings (superuser-only, like every connection setting) */
void
tls_define_gucs(void)
{
	DefineCustomBoolVariable("redsem.tls",
							 "Use TLS for the connection to Redis.",
							 "Needs a build against hiredis 1.0 or later with hiredis_ssl.",
							 &redsem_tls, false,
							 PGC_SUSET, 0,
							 NULL, redsem_assign_connection_bool, NULL);
	DefineCustomStringVariable("redsem.tls_ca_file",
							   "File of the certificate authorities that sign Redis's certificate.",
							   "Empty means the system's trusted authorities.",
							   &redsem_tls_ca_file, "",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
	DefineCustomStringVariable("redsem.tls_cert_file",
							   "Client certificate file, for Redis servers that require one (mutual TLS).",
							   NULL,
							   &redsem_tls_cert_file, "",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
	DefineCustomStringVariable("redsem.tls_key_file",
							   "Private key file of the client certificate.",
							   "The file must be readable by the server's operating system user only.",
							   &redsem_tls_key_file, "",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
	DefineCustomStringVariable("redsem.tls_server_name",
							   "Name to verify in Redis's certificate, and to send as SNI.",
							   "Empty means the host connected to.",
							   &redsem_tls_server_name, "",
							   PGC_SUSET, 0,
							   NULL, redsem_assign_connection_string, NULL);
}

/* This session's TLS settings, into profile */
void
tls_session_profile(RedisProfile *profile)
{
	profile->tls = redsem_tls;
	profile->tls_ca_file = redsem_tls_ca_file ? redsem_tls_ca_file : "";
	profile->tls_cert_file = redsem_tls_cert_file ? redsem_tls_cert_file : "";
	profile->tls_key_file = redsem_tls_key_file ? redsem_tls_key_file : "";
	profile->tls_server_name = redsem_tls_server_name ? redsem_tls_server_name : "";
}

/* The TLS settings in force: the forced profile's (broker), or the session's */
static void
tls_in_force(RedisProfile *profile)
{
	const RedisProfile *forced = redis_profile_forced();

	if (forced != NULL)
		*profile = *forced;
	else
		tls_session_profile(profile);
}

/* True if the connections opened now are to speak TLS */
bool
redis_tls_wanted(void)
{
	RedisProfile p;

	tls_in_force(&p);
	return p.tls;
}

#ifndef REDSEM_HAVE_TLS

/* This build has no TLS: say which library it needs */
bool
tls_supported(RedisCall *call)
{
	return redis_note(&call->outcome, RS_CONNECT_FAILED, "redsem.tls is on, but this build of redsem has no TLS support: it needs hiredis 1.0 or later with hiredis_ssl (libhiredis_ssl) at build time");
}

/* Never called in a build without TLS (tls_supported refused) */
const char *
tls_refusal(char *buf, size_t len, const char *fallback)
{
	return fallback;
}

/* Never called in a build without TLS (tls_supported refused) */
bool
tls_start(RedisCall *call, redisContext *c, const char *host,
		  TimestampTz deadline)
{
	return tls_supported(call);
}

/* No TLS connection is ever open: none to relay */
bool
tls_relay_ready(redisContext *c)
{
	return false;
}

/* Never called in a build without TLS (no TLS connection is ever open) */
void
tls_relay(redisContext *c, int plain, int poll_us)
{
	_exit(1);
}

/* No TLS connection is ever open */
bool
tls_idle_input_ok(redisContext *c)
{
	return false;
}

#else							/* REDSEM_HAVE_TLS */

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "hiredis_ssl.h"

/* This build has TLS */
bool
tls_supported(RedisCall *call)
{
	return true;
}

/*
 * The TLS context, made for the settings of generation ctx_generation and
 * the files named in ctx_files (in the broker, clients' profiles differ)
 */
static SSL_CTX *ctx = NULL;
static uint64 ctx_generation = 0;
static char ctx_files[3 * MAXPGPATH + 3];

/*
 * The session tls_start last handed to hiredis, and its socket: the one a
 * broker's opener relays (tls_relay; hiredis does not show it)
 */
static SSL *last_session = NULL;
static int	last_session_fd = -1;

/* OpenSSL's last error, as text (or fallback when it has none) */
static const char *
openssl_error(char *buf, size_t len, const char *fallback)
{
	unsigned long e = ERR_get_error();

	if (e == 0)
		return fallback;
	ERR_error_string_n(e, buf, len);
	return buf;
}

/* Make the TLS context from the settings in force; false with the reason */
static bool
make_context(RedisCall *call)
{
	char		err[200];
	char		files[sizeof(ctx_files)];
	RedisProfile p;
	bool		have_cert;
	bool		have_key;

	tls_in_force(&p);
	have_cert = p.tls_cert_file[0] != '\0';
	have_key = p.tls_key_file[0] != '\0';
	snprintf(files, sizeof(files), "%s\n%s\n%s", p.tls_ca_file, p.tls_cert_file, p.tls_key_file);
	if (ctx != NULL && ctx_generation == redsem_guc_generation_now() &&
		strcmp(files, ctx_files) == 0)
		return true;
	if (ctx != NULL)
		SSL_CTX_free(ctx);
	ctx = NULL;
	if (have_cert != have_key)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "redsem.tls_cert_file and redsem.tls_key_file must be set together");
	ERR_clear_error();
	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "could not make a TLS context: %s",
						openssl_error(err, sizeof(err), "out of memory"));
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (p.tls_ca_file[0] != '\0'
		? SSL_CTX_load_verify_locations(ctx, p.tls_ca_file, NULL) != 1
		: SSL_CTX_set_default_verify_paths(ctx) != 1)
		goto failed;
	if (have_cert &&
		(SSL_CTX_use_certificate_chain_file(ctx, p.tls_cert_file) != 1 ||
		 SSL_CTX_use_PrivateKey_file(ctx, p.tls_key_file, SSL_FILETYPE_PEM) != 1 ||
		 SSL_CTX_check_private_key(ctx) != 1))
		goto failed;
	ctx_generation = redsem_guc_generation_now();
	strlcpy(ctx_files, files, sizeof(ctx_files));
	return true;

failed:
	SSL_CTX_free(ctx);
	ctx = NULL;
	return redis_note(&call->outcome, RS_CONNECT_FAILED, "could not load the TLS files (redsem.tls_ca_file, redsem.tls_cert_file, redsem.tls_key_file): %s",
					openssl_error(err, sizeof(err), "unknown error"));
}

/* True if name is an IPv4 or IPv6 address rather than a host name */
static bool
is_ip_address(const char *name)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

/* A new session on fd that verifies name (a host name or an IP address) */
static SSL *
new_session(int fd, const char *name)
{
	SSL		   *ssl = SSL_new(ctx);
	X509_VERIFY_PARAM *param;

	if (ssl == NULL)
		return NULL;
	param = SSL_get0_param(ssl);
	X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	if (SSL_set_fd(ssl, fd) != 1 ||
		(is_ip_address(name)
		 ? X509_VERIFY_PARAM_set1_ip_asc(param, name) != 1
		 : (SSL_set_tlsext_host_name(ssl, name) != 1 ||
			X509_VERIFY_PARAM_set1_host(param, name, 0) != 1)))
	{
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}

/* Why a handshake failed, the certificate's verdict first */
static bool
handshake_failed(RedisCall *call, SSL *ssl, int ssl_error)
{
	char		err[200];
	long		verdict = SSL_get_verify_result(ssl);

	if (verdict != X509_V_OK)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "the server certificate was not accepted: %s",
						X509_verify_cert_error_string(verdict));
	if (ssl_error == SSL_ERROR_SYSCALL || ssl_error == SSL_ERROR_ZERO_RETURN)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "TLS handshake failed: %s",
						openssl_error(err, sizeof(err), "the server closed the connection (is it serving TLS on this port?)"));
	return redis_note(&call->outcome, RS_CONNECT_FAILED, "TLS handshake failed: %s",
					openssl_error(err, sizeof(err), "unknown error"));
}

/* Run the handshake of ssl on fd until done, failed or past the deadline */
static bool
handshake(RedisCall *call, SSL *ssl, int fd, TimestampTz deadline)
{
	for (;;)
	{
		int			rc,
					e,
					events;

		ERR_clear_error();
		rc = SSL_do_handshake(ssl);
		if (rc == 1)
			return true;
		e = SSL_get_error(ssl, rc);
		if (e == SSL_ERROR_WANT_READ)
			events = WL_SOCKET_READABLE;
		else if (e == SSL_ERROR_WANT_WRITE)
			events = WL_SOCKET_WRITEABLE;
		else
			return handshake_failed(call, ssl, e);
		if ((redis_wait_socket(fd, events, deadline, call->interruptible) & WL_TIMEOUT) &&
			redis_past(deadline))
			return redis_note(&call->outcome, RS_CONNECT_FAILED, "no TLS handshake within %d ms (redsem.connect_timeout); is the server serving TLS on this port?",
							redsem_connect_timeout_ms);
	}
}

/*
 * Set up TLS on c, freshly connected to host: make the context, hand a new
 * session to hiredis (which, the socket being non-blocking, only starts the
 * handshake) and run the handshake to its end here.  False, with the reason
 * in the call's outcome (08001), if the server or its certificate is not
 * accepted; the caller closes c, and the session with it.
 */
bool
tls_start(RedisCall *call, redisContext *c, const char *host,
		  TimestampTz deadline)
{
	RedisProfile p;
	const char *name;
	char		err[200];
	SSL		   *ssl;

	tls_in_force(&p);
	name = p.tls_server_name[0] != '\0' ? p.tls_server_name : host;
	if (!make_context(call))
		return false;
	ERR_clear_error();
	ssl = new_session(c->fd, name);
	if (ssl == NULL)
		return redis_note(&call->outcome, RS_CONNECT_FAILED, "could not start a TLS session: %s",
						openssl_error(err, sizeof(err), "out of memory"));
	if (redisInitiateSSL(c, ssl) != REDIS_OK)
	{
		/*
		 * hiredis took no ownership.  Its first step of the handshake can
		 * already get the server's answer (loopback): say why, as below.
		 */
		bool		verdict = SSL_get_verify_result(ssl) != X509_V_OK;

		if (verdict)
			(void) handshake_failed(call, ssl, SSL_ERROR_SSL);
		else
			(void) redis_note(&call->outcome, RS_CONNECT_FAILED, "TLS handshake failed: %s", c->errstr);
		SSL_free(ssl);
		return false;
	}
	last_session = ssl;
	last_session_fd = c->fd;
	return handshake(call, ssl, c->fd, deadline);
}

/*
 * Why OpenSSL closed a session (a TLS alert from the server, such as a
 * client certificate refused), or fallback if it does not say.
 */
const char *
tls_refusal(char *buf, size_t len, const char *fallback)
{
	return openssl_error(buf, len, fallback);
}

/*
 * Bytes arrived on an idle TLS connection: they may be a record that is no
 * reply (TLS 1.3 session tickets), read and dropped here, or the server's
 * goodbye.  True if the connection is still good.
 */
bool
tls_idle_input_ok(redisContext *c)
{
	void	   *reply = NULL;

	if (redisBufferRead(c) != REDIS_OK)
		return false;
	if (redisGetReplyFromReader(c, &reply) != REDIS_OK || reply != NULL)
	{
		if (reply != NULL)
			freeReplyObject(reply);
		return false;
	}
	return true;
}

/* One direction of a relay: bytes read and not yet all written on */
typedef struct RelayBuf
{
	char		data[16384];
	int			len;
	int			off;
} RelayBuf;

/* The relay's two directions (static: a relay is a process of its own) */
static RelayBuf relay_from_redis;
static RelayBuf relay_from_broker;

/*
 * After an SSL_read or SSL_write that returned rc <= 0: add to *events what
 * the session waits for; false if it ended or failed instead
 */
static bool
relay_wants(SSL *ssl, int rc, short *events)
{
	int			e = SSL_get_error(ssl, rc);

	if (e == SSL_ERROR_WANT_READ)
		*events |= POLLIN;
	else if (e == SSL_ERROR_WANT_WRITE)
		*events |= POLLOUT;
	else
		return false;
	return true;
}

/* Move Redis's bytes on to the broker as far as they go now; false at the end */
static bool
relay_down(SSL *ssl, int plain, RelayBuf *b, struct pollfd *p, bool *moved)
{
	if (b->off == b->len)
	{
		int			n;

		ERR_clear_error();
		n = SSL_read(ssl, b->data, sizeof(b->data));
		if (n <= 0)
			return relay_wants(ssl, n, &p[0].events);
		b->len = n;
		b->off = 0;
		*moved = true;
	}
	while (b->off < b->len)
	{
		ssize_t		w = write(plain, b->data + b->off, b->len - b->off);

		if (w < 0 && (errno == EAGAIN || errno == EINTR))
		{
			p[1].events |= POLLOUT;
			return true;
		}
		if (w <= 0)
			return false;
		b->off += w;
		*moved = true;
	}
	return true;
}

/* Move the broker's bytes on to Redis as far as they go now; false at the end */
static bool
relay_up(SSL *ssl, int plain, RelayBuf *b, struct pollfd *p, bool *moved)
{
	int			n;

	if (b->off == b->len)
	{
		ssize_t		r = read(plain, b->data, sizeof(b->data));

		if (r < 0 && (errno == EAGAIN || errno == EINTR))
		{
			p[1].events |= POLLIN;
			return true;
		}
		if (r <= 0)
			return false;		/* (the broker closed its end) */
		b->len = (int) r;
		b->off = 0;
		*moved = true;
	}
	/* (a write that must be retried is retried with the same bytes) */
	ERR_clear_error();
	n = SSL_write(ssl, b->data + b->off, b->len - b->off);
	if (n <= 0)
		return relay_wants(ssl, n, &p[0].events);
	b->off += n;
	*moved = true;
	return true;
}

/* The session of TLS connection c, set up by this process; NULL if unknown */
static SSL *
session_of(redisContext *c)
{
	return c->fd == last_session_fd ? last_session : NULL;
}

/* True if TLS connection c, set up by this process, can be relayed */
bool
tls_relay_ready(redisContext *c)
{
	return session_of(c) != NULL;
}

/*
 * End the relay; a TLS failure (an alert, a broken record: OpenSSL has an
 * error queued) is logged first, as the broker sees only a closed socket
 */
pg_noreturn static void
relay_end(void)
{
	char		err[200];

	if (ERR_peek_error() != 0)
		ereport(LOG,
				(errmsg("redsem relay: the TLS connection to Redis failed: %s",
						openssl_error(err, sizeof(err), "unknown error"))));
	_exit(0);
}

/*
 * True while the relay is to poll rather than sleep: within poll_us
 * microseconds of when bytes last moved (moved_at), as the broker polls
 * after activity (redsem.broker_poll); it yields the CPU first
 */
static bool
relay_polling(const instr_time *moved_at, int poll_us)
{
	instr_time	now;

	if (poll_us <= 0)
		return false;
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, *moved_at);
	if ((int64) INSTR_TIME_GET_MICROSEC(now) >= poll_us)
		return false;
	sched_yield();
	return true;
}

/*
 * Become the relay of TLS connection c (tls_relay_ready), set up by this
 * process (a broker's opener), for the broker, which has the other end of
 * the non-blocking socket pair whose end plain is: what either sends is
 * passed on, decrypted or encrypted, until either closes.  A TLS session
 * is the state of the process that made it and cannot be handed over, as
 * a socket can; so the broker opens TLS connections without waiting for
 * them, as it does the others, and talks to them in the clear over a local
 * socket.  Like the broker, it polls for poll_us microseconds after bytes
 * moved before it sleeps (the broker's redsem.broker_poll when it was
 * forked): a request's answer mostly comes within that, and is passed on
 * without two wake-ups.  Never returns.
 */
void
tls_relay(redisContext *c, int plain, int poll_us)
{
	SSL		   *ssl = session_of(c);
	instr_time	moved_at;

	if (ssl == NULL)
		_exit(1);
	INSTR_TIME_SET_CURRENT(moved_at);
	for (;;)
	{
		struct pollfd p[2] = {{c->fd, 0, 0}, {plain, 0, 0}};
		bool		moved = false;

		if (!relay_down(ssl, plain, &relay_from_redis, p, &moved) ||
			!relay_up(ssl, plain, &relay_from_broker, p, &moved))
			relay_end();
		if (moved)
			INSTR_TIME_SET_CURRENT(moved_at);
		if (moved || relay_polling(&moved_at, poll_us))
			continue;
		/*
		 * (a socket nothing is waited for is left out: poll reports an
		 * error or hang-up on it at once, which would spin)
		 */
		for (int i = 0; i < 2; i++)
			if (p[i].events == 0)
				p[i].fd = -1;
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			_exit(1);
		/* (the broker's end closed: nothing more is asked for) */
		if (p[1].revents & (POLLHUP | POLLERR | POLLNVAL))
			_exit(0);
	}
}

#endif							/* REDSEM_HAVE_TLS */
