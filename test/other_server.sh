#!/usr/bin/env bash
#
# test/other_server.sh SEMAPHORE OPERATION [ARG...]
#
# For the regression tests: run one operation of redsem's Lua library on a
# semaphore's keys (default prefix), as another server would, through
# redis-cli on $REDSEM_TEST_REDIS_SOCKET.  The library is loaded first,
# named and registered as src/script.c does (Redis answers "already exists"
# when it is there).
set -euo pipefail
name=$1
shift
here=$(dirname "${BASH_SOURCE[0]}")
body=$here/../src/redsem.lua
lib=redsem_$(sha1sum <"$body" | cut -c1-16)
cli() { redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" "$@"; }
cli -x FUNCTION LOAD < <(printf '#!lua name=%s\n' "$lib"; cat "$body"
    printf "\nredis.register_function('%s', dispatch)\n" "$lib"
    printf "redis.register_function{function_name='%s_keep', flags={'allow-oom'}, callback=function(keys, args) return dispatch(keys, args, true) end}\n" "$lib") >/dev/null
# (the owner key: the script makes the semaphore's other keys from it)
cli FCALL "$lib" 1 "redsem:{$name}:owner" "$@"
