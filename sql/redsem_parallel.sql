--
-- redsem_parallel: a slot lives as long as the process that took it, so a
-- parallel worker may not take one (it would end with the worker, and the
-- leader would get the id of a slot that no longer exists).
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

-- A user function wrongly declared PARALLEL SAFE
CREATE FUNCTION par_acquire() RETURNS text LANGUAGE sql PARALLEL SAFE
    AS $$ SELECT redsem_acquire('par', 1, '60 s') $$;
CREATE FUNCTION par_release_all() RETURNS integer LANGUAGE sql PARALLEL SAFE
    AS $$ SELECT redsem_release_all() $$;

-- Run every query in a parallel worker ("regress" also keeps the worker's
-- CONTEXT line out of the output; the setting was renamed in PostgreSQL 16)
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'regress', false) IS NOT NULL AS forced;
SET max_parallel_workers_per_gather = 2;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;

SELECT par_acquire();
SELECT par_release_all();
-- nothing was taken
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" exists 'redsem:{par}:owner'

-- Declared PARALLEL RESTRICTED, the same function runs in the leader: fine
ALTER FUNCTION par_acquire() PARALLEL RESTRICTED;
SELECT par_acquire() IS NOT NULL AS held;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{par}:owner'
SELECT count(*) AS held_in_leader FROM redsem_held() WHERE name = 'par';
RESET max_parallel_workers_per_gather;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'off', false) IS NOT NULL AS unforced;
SELECT redsem_release_all() AS released_all;
DROP FUNCTION par_acquire();
DROP FUNCTION par_release_all();
