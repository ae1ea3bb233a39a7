--
-- redsem_reserve: permits of the limit kept for callers of a priority and
-- up (redsem_set_reserve), bad arguments, and who may set one.  Semaphore
-- names here all start with "res_".
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

--
-- 2 of 4 permits kept for priority 5 and up
--
SELECT * FROM redsem_reserve('res_a');
SELECT redsem_set_reserve('res_a', 2, 5);
SELECT * FROM redsem_reserve('res_a');
SELECT count(redsem_acquire('res_a', 4, wait => '0')) AS priority_0_gets_two
  FROM generate_series(1, 4);
SELECT redsem_acquire('res_a', 4, priority => 5) IS NOT NULL AS priority_5_gets_in;
SELECT redsem_acquire('res_a', 4, priority => 9) IS NOT NULL AS priority_9_too;
SELECT redsem_acquire('res_a', 4, priority => 9) IS NULL AS then_the_limit_is_reached;
SELECT * FROM redsem_reserve('res_a');
SELECT permits_held, waiting FROM redsem_semaphore('res_a');
SELECT redsem_release_all() AS released;
-- priority 0 can never take more than the reserve leaves it
SELECT redsem_acquire('res_a', 4, permits => 3);
SELECT redsem_acquire('res_a', 4, permits => 3, priority => 5) IS NOT NULL AS priority_5_may;
SELECT redsem_release_all() AS released;
-- the reserve is configuration: kept without a TTL once nobody holds (x:
-- the script reads rk, I13)
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{res_a}:state'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hkeys 'redsem:{res_a}:state' | sort
SELECT name, reserved_permits, reserved_for_priority FROM redsem_semaphores() WHERE name = 'res_a';
-- a reserve as large as the limit leaves one permit to everybody else
SELECT redsem_set_reserve('res_a', 10, 5);
SELECT count(redsem_acquire('res_a', 4, wait => '0')) AS priority_0_gets_one
  FROM generate_series(1, 2);
SELECT redsem_release_all() AS released;
SELECT redsem_set_reserve('res_a', NULL);
SELECT * FROM redsem_reserve('res_a');
-- (nothing left but the last ticket, for a second)
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{res_a}*' | grep -v ':ticket$'

--
-- Bad reserves
--
SELECT redsem_set_reserve('res_bad', 0, 5);
SELECT redsem_set_reserve('res_bad', -1, 5);
SELECT redsem_set_reserve('res_bad', 2, NULL);
SELECT redsem_set_reserve('res_bad', 2, 101);
SELECT redsem_set_reserve('res_bad', 2, -101);
SELECT redsem_set_reserve('', 2, 5);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{res_bad}*'

--
-- Only administrators store reserves; anybody reads them
--
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_redsem_reserve;
RESET client_min_messages;
CREATE ROLE regress_redsem_reserve;
SELECT redsem_set_reserve('res_admin', 1, 10);
SET ROLE regress_redsem_reserve;
SELECT redsem_set_reserve('res_admin', 3, -100);
SELECT redsem_set_reserve('res_admin', NULL);
SELECT permits, min_priority FROM redsem_reserve('res_admin') AS read_by_anybody;
RESET ROLE;
SELECT redsem_set_reserve('res_admin', NULL);
DROP ROLE regress_redsem_reserve;
