--
-- redsem_xact: transaction-scoped slots (redsem_acquire_xact, redsem_guard),
-- subtransactions, PREPARE TRANSACTION, and waiting in line.
-- Semaphore names here all start with "xa_".
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

--
-- Released at COMMIT
--
BEGIN;
SELECT redsem_acquire_xact('xa_commit', 1) AS x \gset
SELECT :'x' IS NOT NULL AS held, :'x' ~ '^[A-Za-z0-9._:-]{1,100}$' AS id_shape_ok;
SELECT redsem_acquire_xact('xa_commit', 1) IS NULL AS busy_in_same_xact;
SELECT redsem_acquire('xa_commit', 1) IS NULL AS busy_for_session_acquire;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_commit}:owner'
COMMIT;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_commit}:owner'
-- (the session no longer holds it: false, with a WARNING naming the id)
\set VERBOSITY terse
SELECT redsem_release('xa_commit', :'x') AS released_after_commit;
SELECT redsem_refresh('xa_commit', :'x') AS refreshed_after_commit;
\set VERBOSITY default

-- Outside a transaction block, the hold ends with the statement
SELECT redsem_acquire_xact('xa_commit', 1) IS NOT NULL AS held_for_one_statement;
SELECT redsem_acquire_xact('xa_commit', 1) IS NOT NULL AS held_for_one_statement;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_commit}:owner'

--
-- Released at ROLLBACK, and when an error aborts the transaction
--
BEGIN;
SELECT redsem_acquire_xact('xa_rollback', 1) AS x \gset
SELECT redsem_acquire_xact('xa_rollback', 1) IS NULL AS busy;
ROLLBACK;
\set VERBOSITY terse
SELECT redsem_release('xa_rollback', :'x') AS released_after_rollback;
\set VERBOSITY default

BEGIN;
SELECT redsem_acquire_xact('xa_rollback', 1) IS NOT NULL AS held;
SELECT 1 / 0;
SELECT redsem_acquire_xact('xa_rollback', 1);
ROLLBACK;
SELECT redsem_acquire_xact('xa_rollback', 1) IS NOT NULL AS free_after_error;

DO $$
BEGIN
    PERFORM redsem_acquire_xact('xa_rollback', 1);
    RAISE EXCEPTION 'boom';
END
$$;
SELECT redsem_acquire_xact('xa_rollback', 1) IS NOT NULL AS free_after_error_in_statement;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_rollback}:owner'

--
-- An xact hold released early
--
BEGIN;
SELECT redsem_acquire_xact('xa_early', 1) AS x \gset
SELECT redsem_release('xa_early', :'x') AS released_early;
\set VERBOSITY terse
SELECT redsem_release('xa_early', :'x') AS released_twice;
\set VERBOSITY default
SELECT redsem_acquire('xa_early', 1) AS s \gset
SELECT :'s' IS NOT NULL AS session_hold_taken;
COMMIT;
-- COMMIT must not have released the session hold taken in the slot
SELECT redsem_acquire('xa_early', 1) IS NULL AS session_hold_kept;
SELECT redsem_release('xa_early', :'s') AS released;

-- ... and one whose lease ran out before COMMIT (forced from outside)
BEGIN;
SELECT redsem_acquire_xact('xa_early', 1) AS x \gset
\setenv REDSEM_ID :x
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zadd 'redsem:{xa_early}:timeout' XX 1 "$REDSEM_ID" > /dev/null
SELECT redsem_acquire_xact('xa_early', 1) IS NOT NULL AS taken_over;
SELECT redsem_acquire_xact('xa_early', 1) IS NULL AS busy;
COMMIT;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_early}:owner'
SELECT redsem_acquire_xact('xa_early', 1) IS NOT NULL AS free_after_commit;

--
-- Subtransactions
--
BEGIN;
-- ROLLBACK TO releases xact holds taken since the savepoint
SAVEPOINT sp1;
SELECT redsem_acquire_xact('xa_sub1', 1) IS NOT NULL AS held;
SELECT redsem_acquire_xact('xa_sub1', 1) IS NULL AS busy;
ROLLBACK TO SAVEPOINT sp1;
SELECT redsem_acquire_xact('xa_sub1', 1) IS NOT NULL AS free_after_rollback_to;
-- ... but not the ones taken before it
SAVEPOINT sp2;
SELECT redsem_acquire_xact('xa_sub1', 1) IS NULL AS still_held_by_parent;
ROLLBACK TO SAVEPOINT sp2;
SELECT redsem_acquire_xact('xa_sub1', 1) IS NULL AS still_held_by_parent;
-- RELEASE SAVEPOINT hands the hold to the parent
SAVEPOINT sp3;
SELECT redsem_acquire_xact('xa_sub2', 1) IS NOT NULL AS held;
RELEASE SAVEPOINT sp3;
SELECT redsem_acquire_xact('xa_sub2', 1) IS NULL AS kept_after_release_savepoint;
-- ... which then ends with the parent: here a savepoint that rolls back
SAVEPOINT sp4;
SAVEPOINT sp5;
SELECT redsem_acquire_xact('xa_sub3', 1) IS NOT NULL AS held;
RELEASE SAVEPOINT sp5;
SAVEPOINT sp6;
ROLLBACK TO SAVEPOINT sp6;
SELECT redsem_acquire_xact('xa_sub3', 1) IS NULL AS kept_after_inner_rollback;
ROLLBACK TO SAVEPOINT sp4;
SELECT redsem_acquire_xact('xa_sub3', 1) IS NOT NULL AS free_after_outer_rollback;
-- session holds taken in a subtransaction survive its rollback
SAVEPOINT sp7;
SELECT redsem_acquire('xa_sub4', 1) AS s \gset
ROLLBACK TO SAVEPOINT sp7;
SELECT redsem_acquire('xa_sub4', 1) IS NULL AS session_hold_survives;
-- a PL/pgSQL exception block is a subtransaction too
DO $$
DECLARE
    ok boolean;
BEGIN
    BEGIN
        PERFORM redsem_acquire_xact('xa_sub5', 1);
        RAISE EXCEPTION 'boom';
    EXCEPTION WHEN raise_exception THEN
        NULL;
    END;
    ok := redsem_acquire_xact('xa_sub5', 1) IS NOT NULL;
    RAISE NOTICE 'free after exception block: %', ok;
    BEGIN
        PERFORM redsem_acquire_xact('xa_sub6', 1);
    END;
    ok := redsem_acquire_xact('xa_sub6', 1) IS NULL;
    RAISE NOTICE 'kept after exception block without error: %', ok;
END
$$;
SELECT redsem_acquire_xact('xa_sub5', 1) IS NULL AS sub5_held_until_commit;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_sub1}:owner'
COMMIT;
-- everything transaction-scoped is gone; the session hold stays
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_sub1}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_sub2}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_sub3}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_sub4}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_sub5}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_sub6}:owner'
SELECT redsem_release('xa_sub4', :'s') AS released;

--
-- PREPARE TRANSACTION is refused while holding an xact slot (whatever
-- max_prepared_transactions is), and the failed PREPARE releases it.
--
BEGIN;
SELECT redsem_acquire_xact('xa_prepare', 1) IS NOT NULL AS held;
PREPARE TRANSACTION 'redsem_xa_prepare';
\echo :LAST_ERROR_SQLSTATE
SELECT redsem_acquire_xact('xa_prepare', 1) IS NOT NULL AS released_by_failed_prepare;
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'redsem_xa_prepare';
-- also for a redsem_guard slot
BEGIN;
SELECT redsem_guard('xa_prepare', 1) IS NOT NULL AS guarded;
PREPARE TRANSACTION 'redsem_xa_prepare';
\echo :LAST_ERROR_SQLSTATE
SELECT redsem_acquire_xact('xa_prepare', 1) IS NOT NULL AS released_by_failed_prepare;

--
-- redsem_guard
--
BEGIN;
SELECT redsem_guard('xa_guard', 2) AS g \gset
SELECT :'g' ~ '^[A-Za-z0-9._:-]{1,100}$' AS id_shape_ok;
SELECT redsem_guard('xa_guard', 2) IS NOT NULL AS second_guard;
-- full: 55P03, message names the semaphore, its limit and the wait
SELECT redsem_guard('xa_guard', 2);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT redsem_acquire('xa_guard', 2) IS NOT NULL AS free_after_rollback,
       redsem_acquire('xa_guard', 2) IS NOT NULL AS free_after_rollback;
DO $$
BEGIN
    PERFORM redsem_guard('xa_guard', 2, '10 s', '200 ms');
EXCEPTION WHEN lock_not_available THEN
    RAISE NOTICE '%: %', SQLSTATE, SQLERRM;
END
$$;
DO $$
BEGIN
    PERFORM redsem_guard('xa_guard', 2, '10 s', '1 s', permits => 2);
EXCEPTION WHEN lock_not_available THEN
    RAISE NOTICE '%: %', SQLSTATE, SQLERRM;
END
$$;
SELECT redsem_release_all() AS released_all;
-- the guard of a function body, released at commit
CREATE FUNCTION redsem_test_guarded_work() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM redsem_guard('xa_guard_fn', 1);
    RETURN 'done';
END
$$;
SELECT redsem_test_guarded_work();
SELECT redsem_test_guarded_work();
BEGIN;
SELECT redsem_test_guarded_work();
SELECT redsem_test_guarded_work();
ROLLBACK;
SELECT redsem_test_guarded_work();
DROP FUNCTION redsem_test_guarded_work();

--
-- Waiting in line (single session: only time-outs and interrupts)
--
SELECT redsem_acquire('xa_wait', 1) AS h \gset
SELECT clock_timestamp() AS t0 \gset
SELECT redsem_acquire('xa_wait', 1, '10 s', '300 ms') IS NULL AS wait_timed_out;
SELECT clock_timestamp() - :'t0' >= interval '300 ms' AS waited_long_enough,
       clock_timestamp() - :'t0' < interval '3 s' AS not_too_long;
-- the waiter left the line: only the holder remains
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_wait}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_wait}:waiting'
-- no limit (wait => NULL): ended by statement_timeout
SET statement_timeout = '300ms';
SELECT redsem_acquire('xa_wait', 1, '10 s', NULL);
RESET statement_timeout;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_wait}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_wait}:waiting'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{xa_wait}:wake:*'
-- same for an xact waiter in a transaction block
BEGIN;
SET LOCAL statement_timeout = '300ms';
SELECT redsem_acquire_xact('xa_wait', 1, '10 s', NULL);
ROLLBACK;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{xa_wait}:owner'
-- a waiter that timed out is not in the way of the next caller
SELECT redsem_release('xa_wait', :'h') AS released;
SELECT redsem_acquire('xa_wait', 1) IS NOT NULL AS free_at_once;
-- a free slot is taken at once, whatever the wait
SELECT redsem_acquire('xa_wait2', 1, '10 s', '24 hours') IS NOT NULL AS no_wait_needed;
SET statement_timeout = '200ms';
SELECT redsem_acquire('xa_wait2', 1, '10 s', NULL);
RESET statement_timeout;
SELECT redsem_release_all() AS released_all;

-- Nothing of this file is left once the last leases are over
SELECT pg_sleep(1.2);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{xa_*'
