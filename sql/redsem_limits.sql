--
-- redsem_limits: weighted permits, limits stored with the semaphore, and
-- callers of one semaphore agreeing on its limit.  Semaphore names here all
-- start with "lim_".
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

--
-- Weighted permits: a caller takes several units of the limit at once
--
SELECT redsem_acquire('lim_w', 5, permits => 3) AS a \gset
SELECT redsem_acquire('lim_w', 5, permits => 2) IS NOT NULL AS two_more_fit;
SELECT redsem_acquire('lim_w', 5) IS NULL AS a_sixth_does_not;
SELECT scope, permits FROM redsem_held() WHERE name = 'lim_w' ORDER BY permits;
SELECT position, state, permits FROM redsem_holders('lim_w') ORDER BY position;
SELECT * FROM redsem_semaphore('lim_w');
SELECT redsem_release('lim_w', :'a') AS released_three;
SELECT redsem_acquire('lim_w', 5, permits => 3) IS NOT NULL AS three_fit_again;
SELECT redsem_acquire_xact('lim_w', 5, permits => 1) IS NULL AS xact_refused;
SELECT redsem_release_all() AS released;

--
-- Callers of one semaphore agree on its limit
--
SELECT redsem_acquire('lim_agree', 2) IS NOT NULL AS first_with_2;
SELECT redsem_acquire('lim_agree', 3);
SELECT redsem_acquire('lim_agree');
SELECT redsem_guard('lim_agree', 1);
SELECT count(*) AS members FROM redsem_holders('lim_agree');
SELECT redsem_release_all() AS released;
SELECT redsem_acquire('lim_agree', 3) IS NOT NULL AS empty_takes_another_limit;
SELECT redsem_release_all() AS released;

--
-- A limit stored with the semaphore, for every server
--
SELECT redsem_limit('lim_s') IS NULL AS none_stored;
SELECT redsem_set_limit('lim_s', 2);
SELECT redsem_limit('lim_s') AS stored;
SELECT redsem_acquire('lim_s') IS NOT NULL AS first_without_limit;
SELECT redsem_acquire('lim_s', 2) IS NOT NULL AS second_agreeing;
SELECT redsem_acquire('lim_s') IS NULL AS third_refused;
SELECT redsem_acquire('lim_s', 3);
SELECT redsem_acquire('lim_s', permits => 3);
SELECT redsem_guard('lim_s', permits => 2, wait => '0.1 s');
SELECT * FROM redsem_semaphore('lim_s');
-- lowering it evicts nobody; the holders drain below it
SELECT redsem_set_limit('lim_s', 1);
SELECT * FROM redsem_semaphore('lim_s');
SELECT redsem_release_all() AS released;
SELECT * FROM redsem_semaphore('lim_s');
-- the limit is configuration: kept without a TTL, alone once nobody holds
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{lim_s}:state'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" hgetall 'redsem:{lim_s}:state'
SELECT redsem_set_limit('lim_s', NULL);
SELECT redsem_limit('lim_s') IS NULL AS removed;
SELECT redsem_acquire('lim_s');

--
-- Statistics count acquisitions and permits
--
SELECT name, acquired, refused, acquired_permits
  FROM redsem_stats WHERE name LIKE 'lim_%' ORDER BY name;

--
-- Only administrators store limits; anybody reads them
--
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_redsem_lim;
RESET client_min_messages;
CREATE ROLE regress_redsem_lim;
SELECT redsem_set_limit('lim_admin', 4);
SET ROLE regress_redsem_lim;
SELECT redsem_set_limit('lim_admin', 40);
SELECT redsem_limit('lim_admin') AS read_by_anybody;
SELECT redsem_acquire('lim_admin', 40);
SELECT redsem_acquire('lim_admin', permits => 4) IS NOT NULL AS anybody_uses_it;
SELECT redsem_release_all() AS released;
RESET ROLE;
GRANT redsem_admin TO regress_redsem_lim;
SET ROLE regress_redsem_lim;
SELECT redsem_set_limit('lim_admin', NULL);
RESET ROLE;
SELECT redsem_limit('lim_admin') IS NULL AS removed_by_an_administrator;
DROP ROLE regress_redsem_lim;

--
-- Adaptive limits: bounds, a start, the limit in effect, and the controller's
-- view (the keeper's ticks are tested in t/101_adaptive.pl)
--
SELECT redsem_set_adaptive_limit('lim_ad', 2, 8, 4);
SELECT stored_limit, limit_in_effect, adaptive_min, adaptive_max, last_move,
       last_move_at IS NOT NULL AS moved_at_known
  FROM redsem_semaphore('lim_ad');
SELECT limit_in_effect, min_holders, max_holders, base_hold, last_interval_releases,
       last_move FROM redsem_adaptive_limit('lim_ad');
SELECT redsem_acquire('lim_ad') IS NOT NULL AS uses_it;
SELECT redsem_acquire('lim_ad', 4) IS NOT NULL AS same_limit_passed;
SELECT redsem_acquire('lim_ad', 5);
SELECT redsem_release_all() AS released;
SELECT name, stored_limit, adaptive_min, adaptive_max, last_move
  FROM redsem_semaphores() WHERE name = 'lim_ad';
-- new bounds bring the limit into them; a start outside them too
SELECT redsem_set_adaptive_limit('lim_ad', 5, 6);
SELECT redsem_limit('lim_ad') AS raised_into_bounds;
SELECT redsem_set_adaptive_limit('lim_ad', 1, 3, 10);
SELECT redsem_limit('lim_ad') AS start_brought_into_bounds;
-- bad bounds
SELECT redsem_set_adaptive_limit('lim_ad', 4, 2);
SELECT redsem_set_adaptive_limit('lim_ad', 0, 2);
SELECT redsem_set_adaptive_limit('lim_ad', 1, NULL);
SELECT redsem_set_adaptive_limit('lim_ad', NULL, NULL, 3);
SELECT redsem_set_adaptive_limit('lim_ad', 1, 2000000);
SELECT min_holders, max_holders FROM redsem_adaptive_limit('lim_ad') AS still_adaptive;
-- NULL bounds: fixed where it is; a limit set by hand ends it too
SELECT redsem_set_adaptive_limit('lim_ad', NULL, NULL);
SELECT limit_in_effect, min_holders FROM redsem_adaptive_limit('lim_ad');
SELECT redsem_set_adaptive_limit('lim_ad', 1, 9);
SELECT redsem_set_limit('lim_ad', 7);
SELECT limit_in_effect, min_holders, last_move FROM redsem_adaptive_limit('lim_ad');
SELECT stored_limit, adaptive_min, last_move FROM redsem_semaphore('lim_ad');
SELECT redsem_set_limit('lim_ad', NULL);
-- a semaphore never made adaptive
SELECT * FROM redsem_adaptive_limit('lim_never');
-- only administrators make a limit adaptive
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_redsem_ad;
RESET client_min_messages;
CREATE ROLE regress_redsem_ad;
SET ROLE regress_redsem_ad;
SELECT redsem_set_adaptive_limit('lim_ad', 1, 4);
RESET ROLE;
DROP ROLE regress_redsem_ad;
