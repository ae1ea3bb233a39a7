/*
 * epoll_fault.c - an LD_PRELOAD shim for t/022_callbacks.pl: epoll_create1()
 * fails with EMFILE in the process whose pid is written in the file named by
 * $REDSEM_FAULT_FILE, and works everywhere else.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* True if the fault file names this process */
static int
targeted(void)
{
	const char *path = getenv("REDSEM_FAULT_FILE");
	FILE	   *f;
	long		pid = 0;
	int			hit = 0;

	if (path == NULL || (f = fopen(path, "r")) == NULL)
		return 0;
	if (fscanf(f, "%ld", &pid) == 1 && pid == (long) getpid())
		hit = 1;
	fclose(f);
	return hit;
}

int
epoll_create1(int flags)
{
	static int	(*real) (int) = NULL;

	if (targeted())
	{
		errno = EMFILE;
		return -1;
	}
	if (real == NULL)
		real = (int (*) (int)) dlsym(RTLD_NEXT, "epoll_create1");
	return real(flags);
}
