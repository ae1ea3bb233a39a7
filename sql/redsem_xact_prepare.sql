--
-- redsem_xact_prepare: PREPARE TRANSACTION and redsem slots.
--
-- Needs max_prepared_transactions > 0 (set in test/redsem_test.conf).  With
-- max_prepared_transactions = 0 every PREPARE fails anyway; the output then
-- matches expected/redsem_xact_prepare_1.out.  (The refusal of PREPARE
-- while holding an xact slot is tested in redsem_xact, for any setting.)
-- Semaphore names here all start with "pr_".
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

-- An xact slot released before PREPARE: no longer in the way
BEGIN;
SELECT redsem_acquire_xact('pr_x', 1) AS x \gset
SELECT redsem_release('pr_x', :'x') AS released;
-- a session slot taken in the transaction stays with the session
SELECT redsem_acquire('pr_s', 1) AS s \gset
PREPARE TRANSACTION 'redsem_pr_1';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'redsem_pr_1';
SELECT redsem_acquire('pr_s', 1) IS NULL AS session_slot_kept;
COMMIT PREPARED 'redsem_pr_1';
SELECT redsem_acquire('pr_s', 1) IS NULL AS session_slot_kept_after_commit_prepared;
SELECT redsem_release('pr_s', :'s') AS released;

BEGIN;
SELECT redsem_acquire('pr_s', 1) AS s \gset
PREPARE TRANSACTION 'redsem_pr_2';
ROLLBACK PREPARED 'redsem_pr_2';
SELECT redsem_acquire('pr_s', 1) IS NULL AS session_slot_kept_after_rollback_prepared;
SELECT redsem_release('pr_s', :'s') AS released;

-- An xact slot taken in a subtransaction that rolled back: not in the way
BEGIN;
SAVEPOINT a;
SELECT redsem_acquire_xact('pr_x', 1) IS NOT NULL AS held;
ROLLBACK TO SAVEPOINT a;
PREPARE TRANSACTION 'redsem_pr_3';
COMMIT PREPARED 'redsem_pr_3';

-- ... but one from a subtransaction that committed is: refused, rolled back
BEGIN;
SAVEPOINT a;
SELECT redsem_acquire_xact('pr_x', 1) IS NOT NULL AS held;
RELEASE SAVEPOINT a;
PREPARE TRANSACTION 'redsem_pr_4';
\echo :LAST_ERROR_SQLSTATE
SELECT redsem_acquire_xact('pr_x', 1) IS NOT NULL AS released_by_failed_prepare;

SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid LIKE 'redsem_pr_%';
SELECT redsem_release_all() AS released_all;
SELECT pg_sleep(1.2);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{pr_*'
