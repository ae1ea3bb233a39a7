--
-- redsem_expiry: leases run out on Redis's clock.  An expired holder is gone
-- for good, and an idle semaphore leaves no keys once its leases end.
--
-- The keeper keeps the leases of this server's live sessions fresh, so a
-- holder that stops refreshing is played here by "another server":
-- test/other_server.sh runs the same Lua library (src/redsem.lua) through
-- redis-cli, with a holder id of our choosing.
-- Semaphore names here all start with "exp_".
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

--
-- A short lease: another caller gets the slot once it has run out
--
\! test/other_server.sh exp_short acquire other.1 1 1 400 0 600 'elsewhere|1|db|user|app' | head -n 1
SELECT redsem_acquire('exp_short', 1) IS NULL AS busy;
SELECT pg_sleep(0.5);
SELECT redsem_acquire('exp_short', 1) AS new \gset
SELECT :'new' IS NOT NULL AS taken_over;
-- the expired holder lost it for good: its own refresh and release (sent
-- by the other server) say 0
\! test/other_server.sh exp_short refresh other.1 0
\! test/other_server.sh exp_short refresh other.1 3600000
\! test/other_server.sh exp_short release other.1
-- and this session cannot refresh or release another's slot: false, with
-- a WARNING, and nothing is sent to Redis
SELECT redsem_refresh('exp_short', 'other.1', '1 hour') AS refresh_not_ours;
SELECT redsem_release('exp_short', 'other.1') AS release_not_ours;
-- and nothing of it is left: only the new holder
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{exp_short}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zscore 'redsem:{exp_short}:owner' other.1
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{exp_short}:timeout'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hlen 'redsem:{exp_short}:info'
SELECT redsem_acquire('exp_short', 1) IS NULL AS busy_again;
SELECT redsem_release('exp_short', :'new') AS released;

-- An expired holder that nobody displaced: refresh removes what is left
\! test/other_server.sh exp_alone acquire other.2 1 1 200 0 600 'elsewhere|1|db|user|app' | head -n 1
SELECT pg_sleep(0.3);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{exp_alone}:owner'
\! test/other_server.sh exp_alone refresh other.2 0
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{exp_alone}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{exp_alone}:timeout'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hlen 'redsem:{exp_alone}:info'

--
-- Leases of different lengths coexist: after 700 ms only the short one is gone
--
\! test/other_server.sh exp_mixed acquire other.3 2 1 500 0 600 'elsewhere|1|db|user|app' | head -n 1
\! test/other_server.sh exp_mixed acquire other.4 2 1 5000 0 600 'elsewhere|1|db|user|app' | head -n 1
SELECT redsem_acquire('exp_mixed', 2) IS NULL AS full;
SELECT pg_sleep(0.7);
SELECT redsem_acquire('exp_mixed', 2) AS n \gset
SELECT :'n' IS NOT NULL AS short_slot_free;
SELECT redsem_acquire('exp_mixed', 2) IS NULL AS full_again;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zrange 'redsem:{exp_mixed}:owner' 0 0
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{exp_mixed}:owner'
\! test/other_server.sh exp_mixed refresh other.3 0
\! test/other_server.sh exp_mixed refresh other.4 0
-- an administrator (here: a superuser) can force-release another's slot
SELECT redsem_force_release('exp_mixed', 'other.4') AS long_force_released,
       redsem_release('exp_mixed', :'n') AS new_released;
-- the other server's next refresh learns that an administrator released it
-- (-1, nothing renewed); the slot still counts until that server, having
-- stopped its holder, gives it back, and its mark goes with it
\! test/other_server.sh exp_mixed refresh other.4 0
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hexists 'redsem:{exp_mixed}:state' 'f:other.4'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{exp_mixed}:owner'
\! test/other_server.sh exp_mixed release other.4
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hexists 'redsem:{exp_mixed}:state' 'f:other.4'

--
-- A waiter gets the slot as soon as the lease ahead of it runs out
--
\! test/other_server.sh exp_wait acquire other.5 1 1 600 0 600 'elsewhere|1|db|user|app' | head -n 1
SELECT clock_timestamp() AS t0 \gset
SELECT redsem_acquire('exp_wait', 1, '10 s', '5 s') AS w \gset
SELECT :'w' IS NOT NULL AS promoted,
       clock_timestamp() - :'t0' >= interval '300 ms' AS waited,
       clock_timestamp() - :'t0' < interval '2 s' AS promptly;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" zcard 'redsem:{exp_wait}:owner'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" exists 'redsem:{exp_wait}:waiting'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{exp_wait}:wake:*'
SELECT redsem_release('exp_wait', :'w') AS released;

--
-- Keys vanish when the last lease ends, plus the 1 s grace and at most as
-- much again as the lease (the slack of a renewal; a minute at most)
--
\! test/other_server.sh exp_keys acquire other.6 2 1 500 0 600 'elsewhere|1|db|user|app' | head -n 1
\! test/other_server.sh exp_keys acquire other.7 2 1 500 0 600 'elsewhere|1|db|user|app' | head -n 1
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{exp_keys}:*' | LC_ALL=C sort
\! for k in owner timeout ticket info; do redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl "redsem:{exp_keys}:$k"; done | awk '{ print (($1 > 1300 && $1 <= 2000) ? "pttl about 2 s" : "unexpected pttl " $1) }'
-- a refused caller does not extend them
SELECT redsem_acquire('exp_keys', 2) IS NULL AS busy;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{exp_keys}:ticket' | awk '{ print (($1 > 1000 && $1 <= 2000) ? "pttl at most 2 s" : "unexpected pttl " $1) }'
SELECT pg_sleep(0.8);
-- leases over, grace not yet: the keys are still there
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" exists 'redsem:{exp_keys}:ticket'
SELECT pg_sleep(1.4);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{exp_keys}*'

--
-- The keeper keeps the leases of live sessions fresh: session and
-- transaction slots with leases much shorter than the transaction
--
SELECT redsem_keeper_active() AS keeper_active;
BEGIN;
SELECT redsem_acquire('exp_kept_s', 1, '2 s') AS s \gset
SELECT redsem_acquire_xact('exp_kept_x', 1, '2 s') IS NOT NULL AS held_x;
SELECT redsem_acquire('exp_kept_short', 1, '1 s') AS short \gset
SELECT name, scope, lease, kept_alive FROM redsem_held() ORDER BY name;
SELECT pg_sleep(2.5);
SELECT redsem_acquire('exp_kept_s', 1) IS NULL AS s_still_held,
       redsem_acquire('exp_kept_x', 1) IS NULL AS x_still_held,
       redsem_acquire('exp_kept_short', 1) IS NULL AS short_still_held;
SELECT name, scope, lease, kept_alive FROM redsem_held() ORDER BY name;
COMMIT;
SELECT redsem_release('exp_kept_s', :'s') AS s_released,
       redsem_release('exp_kept_short', :'short') AS short_released;
SELECT redsem_acquire('exp_kept_x', 1) IS NOT NULL AS x_released_at_commit;
SELECT redsem_release_all() AS released_all;

--
-- A waiter promoted by its own re-check keeps its whole lease, even on a
-- quiet semaphore: the keys live as long as the latest deadline.  (0.1.0
-- left them with the waiter's 31 s place TTL: a newcomer got in after 31 s.)
--
\! test/other_server.sh exp_quiet acquire other.9 1 1 1000 0 600 'elsewhere|1|db|user|app' | head -n 1
SELECT redsem_acquire('exp_quiet', 1, '3 min', '20 s') AS w \gset
SELECT :'w' IS NOT NULL AS promoted;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{exp_quiet}:owner' | awk '{ print ($1 > 170000) ? "keys live about 3 min" : "keys live only " $1 " ms" }'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{exp_quiet}:info' | awk '{ print ($1 > 170000) ? "keys live about 3 min" : "keys live only " $1 " ms" }'
SELECT redsem_release('exp_quiet', :'w') AS released;

-- Nothing of this file is left once the last leases are over
SELECT pg_sleep(1.2);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{exp_*'
