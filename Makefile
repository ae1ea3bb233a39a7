# redsem: build with PGXS.  `make`, `make install`, and `make installcheck`
# (run through scripts/test.sh, which provides a private Redis and writes
# test/redsem_test.conf).

EXTENSION = redsem
EXTVERSION = 0.2.0
MODULE_big = redsem
# the Redis client (src/redis/, bottom up), then the semaphore above it
OBJS = src/redis/profile.o src/redis/sockwait.o src/redis/report.o src/redis/tls.o src/redis/resolve.o \
       src/redis/secret.o src/redis/replycap.o src/redis/link.o src/redis/sentinel.o src/redis/cluster.o \
       src/redis/brokerlink.o src/redis/conn.o \
       src/redsem.o src/guc.o src/script.o src/batch.o src/hold.o src/acquire.o \
       src/sqlargs.o src/textenc.o src/sqlfuncs.o src/shmem.o src/keeper.o src/observe.o \
       src/queue.o src/queue_conf.o src/queue_cost.o src/queue_light.o src/queue_caps.o src/queue_fleet.o src/deadlock.o src/fleet.o src/stored.o \
       src/stop.o src/watchdog.o src/escalate.o src/guard.o src/gen.o src/adaptive.o src/broker.o src/broker_open.o src/broker_loop.o src/broker_state.o src/broker_wait.o src/broker_cluster.o
# every released install script (CREATE EXTENSION redsem VERSION '0.1.0'
# must keep working) and every upgrade script; paths are relative to
# $(srcdir), so that VPATH builds (pg_buildext) work
DATA = $(notdir $(wildcard $(srcdir)/redsem--*.sql))
PGFILEDESC = "redsem - distributed fair counting semaphores kept in Redis"

PG_CPPFLAGS = -Isrc -I$(srcdir)/src -I$(srcdir)/src/redis $(shell pkg-config --cflags hiredis)
SHLIB_LINK = $(shell pkg-config --libs hiredis) -pthread

# TLS when hiredis_ssl is there (hiredis >= 1.0, e.g. Debian 13); REDSEM_TLS=no
# builds without it
REDSEM_TLS ?= $(shell pkg-config --exists hiredis_ssl openssl && echo yes)
ifeq ($(REDSEM_TLS),yes)
PG_CPPFLAGS += -DREDSEM_HAVE_TLS $(shell pkg-config --cflags hiredis_ssl openssl)
SHLIB_LINK += $(shell pkg-config --libs hiredis_ssl openssl)
endif
PG_CFLAGS += -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -Wno-missing-field-initializers

TEST_CONF = $(CURDIR)/test/redsem_test.conf
REGRESS = $(patsubst $(srcdir)/sql/%.sql,%,$(sort $(wildcard $(srcdir)/sql/*.sql)))
REGRESS_OPTS = --temp-instance=./tmp_check --temp-config=$(TEST_CONF)
ISOLATION = $(patsubst $(srcdir)/specs/%.spec,%,$(sort $(wildcard $(srcdir)/specs/*.spec)))
ISOLATION_OPTS = --temp-instance=./tmp_check_iso --temp-config=$(TEST_CONF)
TAP_TESTS = 1

EXTRA_CLEAN = src/redsem_lua.h src/redsem_lua_sha1.h

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The Lua script, as a C string literal included by src/script.c
src/redsem_lua.h: src/redsem.lua
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@

# The script's SHA1, which names its library: computed here, not by each
# backend at its first call (156 kB hashed took a good part of that call)
# (a failed sha1sum fails the build: an empty hash would give every build,
# whatever its script, the same library name)
src/redsem_lua_sha1.h: src/redsem.lua
	h=$$(sha1sum < $<) && h=$${h%% *} && [ $${#h} -eq 40 ] && \
		printf '#define REDSEM_LUA_SHA1 "%s"\n' "$$h" > $@.tmp && mv $@.tmp $@

src/script.o src/script.bc: src/redsem_lua.h src/redsem_lua_sha1.h
$(OBJS): $(wildcard $(srcdir)/src/*.h $(srcdir)/src/redis/*.h)

# A VPATH build compiles into src/ of the build directory
ifneq ($(srcdir),.)
$(shell mkdir -p src/redis)
endif

# A release tarball of the committed tree, for machines without git:
# redsem-<version>.tar.gz, unpacking into redsem-<version>/
dist:
	git archive --format=tar.gz --prefix=$(EXTENSION)-$(EXTVERSION)/ -o $(EXTENSION)-$(EXTVERSION).tar.gz HEAD
.PHONY: dist
