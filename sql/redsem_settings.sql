--
-- redsem_settings: connection settings, who may change them, connection
-- failures and recovery, and the key prefix.
-- Semaphore names here all start with "set_".
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

SELECT set_config('redsem_test.socket', current_setting('redsem.unix_socket'), false) IS NOT NULL AS socket_noted;

-- Run a statement; report "ok" or "SQLSTATE: message", with the Redis
-- socket of the test setup (a temporary path) replaced by <socket>
CREATE FUNCTION pg_temp.try(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    res text;
    sock text := current_setting('redsem_test.socket');
BEGIN
    EXECUTE cmd INTO res;
    RETURN 'ok' || CASE WHEN res IS NULL THEN ' (NULL)'
                        WHEN res IN ('true', 'false') THEN ': ' || res
                        ELSE '' END;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' ||
        CASE WHEN sock <> '' THEN replace(SQLERRM, sock, '<socket>') ELSE SQLERRM END;
END
$$;

-- Run a statement; report "ok" or its SQLSTATE only
CREATE FUNCTION pg_temp.sqlstate(cmd text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE cmd;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$$;

-- The settings and their defaults (unix_socket comes from the test setup)
SELECT name, setting, unit, context, vartype
  FROM pg_settings WHERE name LIKE 'redsem.%' AND name <> 'redsem.unix_socket'
  ORDER BY name;
SHOW redsem.password;

--
-- Redis unreachable: 08001 naming the target; fixing the setting is enough
--
SELECT redsem_acquire('set_conn', 1) AS h \gset
SET redsem.unix_socket = '/nonexistent/redis.sock';
SELECT redsem_acquire('set_conn', 1);
\echo :LAST_ERROR_SQLSTATE
-- the slot taken before lives on the Redis of the old settings: refused
SELECT redsem_refresh('set_conn', :'h');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT redsem_acquire_xact('set_conn', 1);
ROLLBACK;
RESET redsem.unix_socket;
-- the hold taken before is intact, and the next calls just work
SELECT redsem_acquire('set_conn', 1) IS NULL AS still_held;
SELECT redsem_refresh('set_conn', :'h') AS refreshed;

-- TCP to a closed loopback port
SET redsem.unix_socket = '';
SET redsem.host = '127.0.0.1';
SET redsem.port = 1;
SELECT redsem_acquire('set_conn', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT redsem_guard('set_conn', 1);
\echo :LAST_ERROR_SQLSTATE
RESET redsem.host;
RESET redsem.port;
RESET redsem.unix_socket;
-- a slot taken under other connection settings than the current ones is
-- refused (55000) and kept: the Redis they name now would say "not held"
-- and the session would forget a slot that still counts where it was taken
-- (a release Redis fails is not undone: t/010)
SET redsem.unix_socket = '/nonexistent/redis.sock';
SELECT redsem_release('set_conn', :'h');
\echo :LAST_ERROR_SQLSTATE
SELECT redsem_release_all() AS nothing_released;
RESET redsem.unix_socket;
SELECT count(*) AS still_the_sessions FROM redsem_held() WHERE name = 'set_conn';
-- under the settings it was taken with, it is released
SELECT redsem_release('set_conn', :'h') AS released;
-- the failed acquires above left nothing in line
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{set_conn}:owner'

-- A bad setting in a transaction, and SET LOCAL
BEGIN;
SET LOCAL redsem.unix_socket = '/nonexistent/redis.sock';
SELECT pg_temp.try($$SELECT redsem_acquire_xact('set_conn', 1)$$) AS result;
COMMIT;
SELECT redsem_acquire_xact('set_conn', 1) IS NOT NULL AS works_after_set_local;

-- Out-of-range values of the settings themselves (22023; PostgreSQL's
-- wording of the message differs between majors)
SELECT pg_temp.sqlstate($$SET redsem.port = 0$$) AS port_0,
       pg_temp.sqlstate($$SET redsem.port = 65536$$) AS port_65536,
       pg_temp.sqlstate($$SET redsem.database = -1$$) AS database_minus_1,
       pg_temp.sqlstate($$SET redsem.command_timeout = 0$$) AS command_timeout_0,
       pg_temp.sqlstate($$SET redsem.connect_timeout = '0'$$) AS connect_timeout_0;

--
-- Who may change what: connection settings and the key prefix are for
-- superusers; timeouts are for everyone; the password cannot be read.
--
CREATE ROLE regress_redsem_user;
SET ROLE regress_redsem_user;
SELECT pg_temp.try($$SET redsem.host = '127.0.0.1'$$) AS host;
SELECT pg_temp.try($$SET redsem.port = 6380$$) AS port;
SELECT pg_temp.try($$SET redsem.unix_socket = ''$$) AS unix_socket;
SELECT pg_temp.try($$SET redsem.database = 5$$) AS database;
-- ("user" is a reserved word: the setting's name needs quotes in SET)
SELECT pg_temp.try($$SET redsem."user" = 'x'$$) AS "user";
SELECT pg_temp.try($$SET redsem.password = 'x'$$) AS password;
SELECT pg_temp.try($$SET redsem.key_prefix = 'mine:'$$) AS key_prefix;
-- nor raise (or turn off) its role's bound on the server's hold table
SELECT pg_temp.try($$SET redsem.max_holds_per_role = 0$$) AS max_holds_per_role;
SELECT pg_temp.sqlstate($$SHOW redsem.password$$) AS show_password;
SELECT pg_temp.sqlstate($$SELECT current_setting('redsem.password')$$) AS read_password;
SELECT count(*) AS password_rows FROM pg_settings WHERE name = 'redsem.password';
SET redsem.command_timeout = '3s';
SET redsem.connect_timeout = 1500;
SHOW redsem.command_timeout;
SHOW redsem.connect_timeout;
-- and the functions work for an ordinary user
SELECT redsem_acquire('set_user', 1) AS u \gset
SELECT :'u' IS NOT NULL AS held;
SELECT redsem_release('set_user', :'u') AS released;
RESET redsem.command_timeout;
RESET redsem.connect_timeout;
RESET ROLE;
DROP ROLE regress_redsem_user;

--
-- The password is never shown: not to superusers, not to members of
-- pg_read_all_settings (e.g. pg_monitor), not in pg_settings.  (Set here
-- only to be looked at: no redsem call runs while it is set.)
--
SET redsem.password = 'not-to-be-seen';
SHOW redsem.password;
SELECT current_setting('redsem.password') AS current_setting;
SELECT count(*) AS password_rows FROM pg_settings WHERE name = 'redsem.password';
CREATE ROLE regress_redsem_monitor IN ROLE pg_read_all_settings;
SET ROLE regress_redsem_monitor;
SHOW redsem.password;
SELECT current_setting('redsem.password') AS current_setting;
SELECT count(*) AS password_rows FROM pg_settings WHERE name = 'redsem.password';
SELECT count(*) AS rows_showing_it FROM pg_settings WHERE setting LIKE '%not-to-be-seen%' OR reset_val LIKE '%not-to-be-seen%';
RESET ROLE;
DROP ROLE regress_redsem_monitor;
RESET redsem.password;
SHOW redsem.password;
-- never stored where every role reads it (pg_db_role_setting, pg_proc)
ALTER ROLE CURRENT_USER SET redsem.password = 'not-to-be-stored';
ALTER ROLE ALL SET redsem.password = 'not-to-be-stored';
SELECT current_database() AS db \gset
ALTER DATABASE :"db" SET redsem.password = 'not-to-be-stored';
CREATE FUNCTION pg_temp.with_password() RETURNS int LANGUAGE sql
  SET redsem.password = 'not-to-be-stored' AS 'SELECT 1';
ALTER ROLE CURRENT_USER SET redsem.password = '';
ALTER ROLE CURRENT_USER RESET redsem.password;
SELECT count(*) AS rows_storing_it FROM pg_db_role_setting
  WHERE array_to_string(setconfig, ' ') LIKE '%not-to-be-stored%';
-- the password file's path is not a secret
SHOW redsem.password_file;

--
-- The key prefix: no braces; another prefix is another namespace
--
SET redsem.key_prefix = 'a{b:';
\echo :LAST_ERROR_SQLSTATE
SET redsem.key_prefix = 'a}b:';
\echo :LAST_ERROR_SQLSTATE
SHOW redsem.key_prefix;

SELECT redsem_acquire('set_kp', 1) AS d \gset
SET redsem.key_prefix = 'redsem_alt:';
SELECT redsem_acquire('set_kp', 1, '2 s') AS a \gset
SELECT :'a' IS NOT NULL AS held_in_other_namespace;
SELECT redsem_acquire('set_kp', 1) IS NULL AS busy_in_other_namespace;
SET redsem.key_prefix = '';
SELECT redsem_acquire('set_kp', 1) AS e \gset
SELECT :'e' IS NOT NULL AS held_with_empty_prefix;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern '*{set_kp}:owner' | LC_ALL=C sort
-- the keeper keeps the lease fresh in the namespace the slot was taken in
SELECT pg_sleep(2.5);
SET redsem.key_prefix = 'redsem_alt:';
SELECT redsem_acquire('set_kp', 1) IS NULL AS kept_alive_in_other_namespace;
-- every hold is released in the namespace it was taken in, whatever the
-- prefix is at the time of release
SET redsem.key_prefix = 'redsem_other:';
SELECT redsem_release_all() AS released_all;
RESET redsem.key_prefix;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{set_kp}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem_alt:{set_kp}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard '{set_kp}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem_other:{set_kp}:owner'
SELECT redsem_acquire('set_kp', 1) IS NOT NULL AS default_namespace_free;
SELECT redsem_release_all() AS released_all;
-- same for a transaction-scoped hold when the prefix changes before COMMIT
BEGIN;
SELECT redsem_acquire_xact('set_kp_x', 1) IS NOT NULL AS held;
SET LOCAL redsem.key_prefix = 'redsem_alt:';
COMMIT;
SELECT redsem_acquire('set_kp_x', 1) IS NOT NULL AS free_after_commit;
SELECT redsem_release_all() AS released_all;

--
-- The connection comes back by itself after Redis dropped it
--
SELECT redsem_acquire('set_drop', 1) AS h \gset
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" client kill type normal > /dev/null
SELECT redsem_refresh('set_drop', :'h') AS refreshed_after_reconnect;

-- Dropped while waiting in line (as a failover would): the caller looks at
-- its place again and waits on; NULL when its wait ends, its place gone
\! (sleep 0.3; redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" client kill type normal) > /dev/null 2>&1 &
SELECT pg_temp.try($$SELECT redsem_acquire('set_drop', 1, '10 s', '2 s')$$) AS result;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{set_drop}:owner'
SELECT redsem_release('set_drop', :'h') AS released;

-- Redis too slow: 08006 after redsem.command_timeout; the slot taken by the
-- request that timed out is given back by the next call
SET redsem.command_timeout = 100;
-- (DEBUG SLEEP stalls the whole server for 1 s on every Redis and Valkey;
-- the test harness starts Redis with --enable-debug-command local)
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" debug sleep 1 > /dev/null 2>&1 &
SELECT pg_sleep(0.3);
SELECT pg_temp.try($$SELECT redsem_acquire('set_slow', 1)$$) AS result;
SELECT pg_sleep(1.0);
RESET redsem.command_timeout;
SELECT redsem_acquire('set_slow', 1) IS NOT NULL AS not_leaked;
SELECT redsem_release_all() AS released_all;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{set_slow}:owner'

SELECT pg_sleep(1.2);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern '*{set_*' | LC_ALL=C sort
