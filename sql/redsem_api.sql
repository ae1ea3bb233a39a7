--
-- redsem_api: the basic SQL API with session-scoped slots.
--
-- Holder ids are random, so they are kept in psql variables (\gset) and only
-- their properties are printed.  Semaphore names here all start with "api_".
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

--
-- Acquire up to the limit, then NULL
--
SELECT redsem_acquire('api_basic', 2) AS a1 \gset
SELECT redsem_acquire('api_basic', 2) AS a2 \gset
SELECT :'a1' IS NOT NULL AS a1_held, :'a2' IS NOT NULL AS a2_held,
       :'a1' <> :'a2' AS distinct_ids;
SELECT redsem_acquire('api_basic', 2) IS NULL AS third_refused;
SELECT redsem_acquire('api_basic', 2, '1 s', '0') IS NULL AS third_refused_again;

-- The holder id: 1..100 of [A-Za-z0-9._:-] (what redsem_release accepts),
-- concretely "<16 hex: server tag>.<pid>.<sequence>.<8 hex: random>"
SELECT length(:'a1') BETWEEN 1 AND 100 AS id_length_ok,
       :'a1' ~ '^[A-Za-z0-9._:-]+$' AS id_charset_ok,
       :'a1' ~ '^[0-9a-f]{16}\.[0-9]+\.[0-9]+\.[0-9a-f]{8}$' AS id_format_ok,
       split_part(:'a1', '.', 2)::int = pg_backend_pid() AS id_has_pid,
       split_part(:'a1', '.', 1) = split_part(:'a2', '.', 1) AS same_server_tag,
       split_part(:'a2', '.', 3)::int > split_part(:'a1', '.', 3)::int AS sequence_rises;

-- In Redis: one owner ZSET member per holder
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{api_basic}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{api_basic}:timeout'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hlen 'redsem:{api_basic}:info'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" exists 'redsem:{api_basic}:waiting'

--
-- Release: true once; then the session no longer holds it: false, with a
-- WARNING (like pg_advisory_unlock), and nothing is sent to Redis.  (The
-- WARNING's detail names the random id, so it is hidden here.)
--
\set VERBOSITY terse
SELECT redsem_release('api_basic', :'a1') AS released;
SELECT redsem_release('api_basic', :'a1') AS released_twice;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{api_basic}:owner'
-- the freed slot can be taken again
SELECT redsem_acquire('api_basic', 2) AS a3 \gset
SELECT :'a3' IS NOT NULL AS a3_held, :'a3' NOT IN (:'a1', :'a2') AS new_id;
SELECT redsem_acquire('api_basic', 2) IS NULL AS full_again;
-- an id of another semaphore, or one never handed out: false
SELECT redsem_release('api_other', :'a2') AS wrong_semaphore;
SELECT redsem_release('api_basic', 'deadbeef.1.1.deadbeef') AS unknown_id;
SELECT redsem_release('api_never_used', 'deadbeef.1.1.deadbeef') AS unknown_semaphore;
\set VERBOSITY default
SELECT redsem_release('api_never_used', 'deadbeef.1.1.deadbeef') AS with_detail;
-- ... and those calls left no keys behind
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{api_other}*'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{api_never_used}*'

--
-- Refresh: true while held; NULL lease means the original lease
--
SELECT redsem_refresh('api_basic', :'a2') AS refreshed;
SELECT redsem_refresh('api_basic', :'a2', NULL) AS refreshed_null_lease;
SELECT redsem_refresh('api_basic', :'a2', '1 hour') AS refreshed_1h;
-- the keys now live at least until the longest lease ends, plus 1 s (a
-- renewal covers up to one lease more, a minute at most, so that most calls
-- need none)
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{api_basic}:owner' | awk '{ print ($1 > 3590000 && $1 <= 3661000) ? "pttl about 1 h" : "unexpected pttl " $1 }'
SELECT redsem_refresh('api_basic', :'a2', '2 s') AS refreshed_2s;
-- a3 still has its 10 s default lease: the keys live at least that long
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{api_basic}:owner' | awk '{ print ($1 > 9000) ? "pttl at least 11 s" : "unexpected pttl " $1 }'
\set VERBOSITY terse
SELECT redsem_refresh('api_basic', :'a1') AS refresh_released_id;
SELECT redsem_refresh('api_basic', 'deadbeef.1.1.deadbeef') AS refresh_unknown_id;
SELECT redsem_refresh('api_never_used', 'deadbeef.1.1.deadbeef', '1 s') AS refresh_unknown_semaphore;
\set VERBOSITY default
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{api_never_used}*'
-- refresh does not resurrect a released holder
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{api_basic}:owner'

--
-- A refresh with a new lease sets the lease from now; NULL means the length
-- it was acquired with
--
SELECT redsem_acquire('api_lease', 1, '20 s') AS l \gset
SELECT lease FROM redsem_held() WHERE id = :'l';
SELECT redsem_refresh('api_lease', :'l', '30 s') AS refreshed_longer;
SELECT lease FROM redsem_held() WHERE id = :'l';
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{api_lease}:owner' | awk '{ print ($1 > 29000 && $1 <= 61000) ? "pttl 31 to 61 s" : "unexpected pttl " $1 }'
SELECT redsem_refresh('api_lease', :'l') AS refreshed_as_acquired;
SELECT lease FROM redsem_held() WHERE id = :'l';
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{api_lease}:owner' | awk '{ print ($1 > 19000) ? "pttl at least 21 s" : "unexpected pttl " $1 }'
SELECT redsem_acquire('api_lease', 1) IS NULL AS still_held;
SELECT redsem_release('api_lease', :'l') AS released;

-- A lease extended by redsem_refresh is the lease the keeper then keeps
-- (it must not shorten it back to the lease given at acquire time)
SELECT redsem_acquire('api_kept', 1, '3 s') AS k \gset
SELECT redsem_refresh('api_kept', :'k', '1 hour') AS refreshed_1h;
SELECT pg_sleep(1.5);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{api_kept}:owner' | awk '{ print ($1 > 3590000 && $1 <= 3661000) ? "pttl about 1 h" : "unexpected pttl " $1 }'
SELECT lease, lease_expires_at - now() > interval '59 minutes' AS about_1h_left
  FROM redsem_held() WHERE id = :'k';
SELECT redsem_release('api_kept', :'k') AS released;

--
-- Callers of one semaphore agree on its limit (more in redsem_limits)
--
SELECT redsem_acquire('api_limits', 1) IS NOT NULL AS first_limit_1;
SELECT redsem_acquire('api_limits', 1) IS NULL AS second_limit_1;

--
-- redsem_release_all: the session-scoped holds that are still live
--
SELECT redsem_release_all() AS released_all;
SELECT redsem_release_all() AS released_nothing;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{api_basic}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{api_limits}:owner'

SELECT redsem_acquire('api_all_a', 5) IS NOT NULL AS a,
       redsem_acquire('api_all_a', 5) IS NOT NULL AS a,
       redsem_acquire('api_all_b', 1) IS NOT NULL AS b;
SELECT redsem_acquire('api_all_c', 1) AS c \gset
SELECT redsem_acquire('api_all_d', 1) AS d \gset
SELECT redsem_release('api_all_c', :'c') AS c_released_by_hand;
-- make d's lease end now, as if nobody had refreshed it in time
\setenv REDSEM_ID :d
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zadd 'redsem:{api_all_d}:timeout' XX 1 "$REDSEM_ID" > /dev/null
-- d has expired, c was released: neither counts
SELECT redsem_release_all() AS released_all;
SELECT redsem_acquire('api_all_b', 1) AS b \gset
SELECT :'b' IS NOT NULL AS b_free_again;
SELECT redsem_release('api_all_b', :'b') AS released;

-- A transaction-scoped hold is not touched by redsem_release_all
BEGIN;
SELECT redsem_acquire_xact('api_all_x', 1) AS x \gset
SELECT redsem_acquire('api_all_s', 1) IS NOT NULL AS session_hold;
SELECT redsem_release_all() AS released_all;
SELECT redsem_acquire('api_all_x', 1) IS NULL AS xact_hold_kept;
SELECT redsem_acquire('api_all_s', 1) AS s \gset
COMMIT;
\set VERBOSITY terse
SELECT redsem_release('api_all_x', :'x') AS xact_hold_ended_at_commit;
\set VERBOSITY default
SELECT redsem_release_all() AS released_all;

--
-- Session holds are not transactional (like advisory locks)
--
BEGIN;
SELECT redsem_acquire('api_sess', 1) AS s \gset
ROLLBACK;
SELECT redsem_acquire('api_sess', 1) IS NULL AS survives_rollback;
BEGIN;
SELECT redsem_acquire('api_sess2', 1) AS s2 \gset
SELECT 1 / 0;
ROLLBACK;
SELECT redsem_acquire('api_sess2', 1) IS NULL AS survives_error;
DO $$
BEGIN
    PERFORM redsem_acquire('api_sess3', 1);
    RAISE EXCEPTION 'boom';
END
$$;
SELECT redsem_acquire('api_sess3', 1) IS NULL AS survives_error_in_same_statement;
-- a release inside a transaction that rolls back stays done
BEGIN;
SELECT redsem_release('api_sess', :'s') AS released;
ROLLBACK;
SELECT redsem_acquire('api_sess', 1) AS s \gset
SELECT :'s' IS NOT NULL AS free_after_rolled_back_release;
SELECT redsem_release_all() AS released_all;

-- Nothing of this file is left once the last leases are over
SELECT pg_sleep(1.2);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{api_*'
