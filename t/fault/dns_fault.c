/*
 * dns_fault.c - an LD_PRELOAD shim for t/015_host_names.pl: a resolver
 * that hangs or fails on demand, for host names under redsem.test:
 *
 *   *.slow.redsem.test  getaddrinfo() sleeps $REDSEM_FAULT_DNS_SLEEP seconds
 *                       (default 30), signals or not, then fails (EAI_AGAIN)
 *   *.none.redsem.test  fails at once: no such name (EAI_NONAME)
 *   *.here.redsem.test  resolves to 127.0.0.1
 *
 * Every other name goes to the real getaddrinfo().  The file named by
 * $REDSEM_FAULT_DNS_LOG, when set, gets a line per lookup of a test name.
 *
 * While the file named by $REDSEM_FAULT_WRITE_DELAY exists, an 8-byte
 * write() to an eventfd (the lookup thread waking its backend) first
 * sleeps the milliseconds the file holds, then logs "eventfd write
 * delayed", and "eventfd write to a descriptor that is no longer an
 * eventfd" if the descriptor was closed or reused meanwhile.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* True if name ends with suffix */
static int
ends_with(const char *name, const char *suffix)
{
	size_t		n = strlen(name),
				s = strlen(suffix);

	return n >= s && strcmp(name + n - s, suffix) == 0;
}

/* Note a lookup in the log file, if there is one */
static void
log_lookup(const char *name)
{
	const char *path = getenv("REDSEM_FAULT_DNS_LOG");
	FILE	   *f;

	if (path == NULL || (f = fopen(path, "a")) == NULL)
		return;
	fprintf(f, "%s\n", name);
	fclose(f);
}

/* Sleep the whole time, whatever signals come */
static void
sleep_through(int seconds)
{
	struct timespec left = {seconds, 0};

	while (nanosleep(&left, &left) != 0 && errno == EINTR)
		;
}

int
getaddrinfo(const char *node, const char *service,
			const struct addrinfo *hints, struct addrinfo **res)
{
	static int	(*real) (const char *, const char *,
						 const struct addrinfo *, struct addrinfo **) = NULL;

	if (real == NULL)
		real = dlsym(RTLD_NEXT, "getaddrinfo");
	if (node != NULL && ends_with(node, ".redsem.test"))
		log_lookup(node);
	if (node != NULL && ends_with(node, ".slow.redsem.test"))
	{
		const char *s = getenv("REDSEM_FAULT_DNS_SLEEP");

		sleep_through(s ? atoi(s) : 30);
		return EAI_AGAIN;
	}
	if (node != NULL && ends_with(node, ".none.redsem.test"))
		return EAI_NONAME;
	if (node != NULL && ends_with(node, ".here.redsem.test"))
		return real("127.0.0.1", service, hints, res);
	return real(node, service, hints, res);
}

/* True if fd is an eventfd right now */
static int
is_eventfd(int fd)
{
	char		path[64],
				target[128];
	ssize_t		n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return 0;
	target[n] = '\0';
	return strcmp(target, "anon_inode:[eventfd]") == 0;
}

/* The delay the trigger file asks for, in ms, or 0 */
static int
write_delay_ms(void)
{
	const char *path = getenv("REDSEM_FAULT_WRITE_DELAY");
	FILE	   *f;
	int			ms = 0;

	if (path == NULL || (f = fopen(path, "r")) == NULL)
		return 0;
	if (fscanf(f, "%d", &ms) != 1)
		ms = 0;
	fclose(f);
	return ms;
}

ssize_t
write(int fd, const void *buf, size_t count)
{
	static ssize_t (*real) (int, const void *, size_t) = NULL;
	int			ms;

	if (real == NULL)
		real = dlsym(RTLD_NEXT, "write");
	if (count == 8 && is_eventfd(fd) && (ms = write_delay_ms()) > 0)
	{
		struct timespec left = {ms / 1000, (ms % 1000) * 1000000L};

		while (nanosleep(&left, &left) != 0 && errno == EINTR)
			;
		log_lookup("eventfd write delayed");
		if (!is_eventfd(fd))
		{
			log_lookup("eventfd write to a descriptor that is no longer an eventfd");
			errno = EBADF;
			return -1;			/* the bug shown; don't corrupt the socket */
		}
	}
	return real(fd, buf, count);
}
