--
-- redsem_rates: a rate stored with the semaphore (a burst, then one
-- admission per interval, waiters let in when the rate allows), bad rates,
-- and who may set one.  Semaphore names here all start with "rate_".
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

--
-- A burst of 2, then one an hour
--
SELECT * FROM redsem_rate('rate_h');
SELECT redsem_set_rate('rate_h', '1/hour', burst => 2);
SELECT rate, burst, next_admission_in FROM redsem_rate('rate_h');
SELECT redsem_acquire('rate_h', 5) IS NOT NULL AS first_of_the_burst;
SELECT redsem_acquire('rate_h', 5) IS NOT NULL AS second_of_the_burst;
SELECT redsem_acquire('rate_h', 5) IS NULL AS third_refused_with_slots_free;
SELECT rate, burst, next_admission_in BETWEEN '59 min' AND '60 min' AS in_about_an_hour
  FROM redsem_rate('rate_h');
SELECT * FROM redsem_semaphore('rate_h');
\set VERBOSITY terse
SELECT redsem_guard('rate_h', 5);
SELECT redsem_guard('rate_h', 5, wait => '0.1 s');
\set VERBOSITY default
-- the limit still has to agree
SELECT redsem_acquire('rate_h', 6);
SELECT redsem_release_all() AS released;
-- the rate is configuration: kept without a TTL, with its clock, once
-- nobody holds (x: the script reads rt, I13)
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{rate_h}:state'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hkeys 'redsem:{rate_h}:state' | sort
SELECT name, stored_limit, permits_held, rate FROM redsem_semaphores() WHERE name = 'rate_h';

--
-- A faster rate: the burst spent counts at the new rate; waiters are let
-- in one interval apart, each woken when its turn comes
--
SELECT redsem_set_rate('rate_h', '20/s');
SELECT rate, burst FROM redsem_rate('rate_h');
SELECT clock_timestamp() AS t0 \gset
SELECT count(redsem_acquire('rate_h', 5, wait => '5 s')) AS let_in FROM generate_series(1, 4);
SELECT clock_timestamp() - :'t0' >= interval '0.15 s' AS took_three_intervals_at_least;
SELECT redsem_release_all() AS released;

--
-- Removing it
--
SELECT redsem_set_rate('rate_h', NULL);
SELECT * FROM redsem_rate('rate_h');
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" exists 'redsem:{rate_h}:state'
SELECT count(redsem_acquire('rate_h', 5, wait => '0')) AS let_in_at_once FROM generate_series(1, 5);
SELECT redsem_release_all() AS released;

--
-- A rate beside a stored limit: removing one keeps the other
--
SELECT redsem_set_limit('rate_l', 3);
SELECT redsem_set_rate('rate_l', '100/min', 10);
SELECT redsem_set_limit('rate_l', NULL);
SELECT rate, burst FROM redsem_rate('rate_l');
SELECT redsem_set_limit('rate_l', 3);
SELECT redsem_set_rate('rate_l', NULL);
SELECT redsem_limit('rate_l') AS limit_kept;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hkeys 'redsem:{rate_l}:state'
SELECT redsem_set_limit('rate_l', NULL);

--
-- Bad rates and bursts
--
SELECT redsem_set_rate('rate_bad', '');
SELECT redsem_set_rate('rate_bad', 'fast');
SELECT redsem_set_rate('rate_bad', '10');
SELECT redsem_set_rate('rate_bad', '10/fortnight');
SELECT redsem_set_rate('rate_bad', '-1/s');
SELECT redsem_set_rate('rate_bad', '1e3/s');
SELECT redsem_set_rate('rate_bad', '0/s');
SELECT redsem_set_rate('rate_bad', '2000000/s');
-- (above 1000000 a second even when its interval rounds to 1 us: helper-162)
SELECT redsem_set_rate('rate_bad', '1000001/s');
SELECT redsem_set_rate('rate_bad', '1999999/s');
-- an interval is rounded up to a whole microsecond, never admitting faster
-- than written: 3/s is one every 333334 us, 0.1/s every 10 s exactly
SELECT redsem_set_rate('rate_round', '1000000/s');
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hget 'redsem:{rate_round}:state' rt
SELECT redsem_set_rate('rate_round', '3/s');
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hget 'redsem:{rate_round}:state' rt
SELECT redsem_set_rate('rate_round', '0.1/s');
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hget 'redsem:{rate_round}:state' rt
SELECT redsem_set_rate('rate_round', '10/min');
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hget 'redsem:{rate_round}:state' rt
SELECT redsem_set_rate('rate_round', NULL);
SELECT redsem_set_rate('rate_bad', '1/day', 0);
SELECT redsem_set_rate('rate_bad', '1/day', NULL);
SELECT redsem_set_rate('rate_bad', '1/day', 1000000);
SELECT redsem_set_rate('rate_bad', repeat('1', 50) || '/s');
SELECT redsem_set_rate('', '1/s');
SELECT redsem_set_rate('rate_bad', ' 2.5 / Hours ', 3);
SELECT rate, burst FROM redsem_rate('rate_bad');
SELECT redsem_set_rate('rate_bad', NULL);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{rate_bad}*'

--
-- Only administrators store rates; anybody reads them
--
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_redsem_rate;
RESET client_min_messages;
CREATE ROLE regress_redsem_rate;
SELECT redsem_set_rate('rate_admin', '5/s');
SET ROLE regress_redsem_rate;
SELECT redsem_set_rate('rate_admin', '500/s');
SELECT redsem_set_rate('rate_admin', NULL);
SELECT rate FROM redsem_rate('rate_admin') AS read_by_anybody;
RESET ROLE;
SELECT redsem_set_rate('rate_admin', NULL);
DROP ROLE regress_redsem_rate;
