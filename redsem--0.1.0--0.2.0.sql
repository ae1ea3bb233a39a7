/* redsem--0.1.0--0.2.0.sql: from 0.1.0 to 0.2.0 */

\echo Use "ALTER EXTENSION redsem UPDATE TO '0.2.0'" to load this file. \quit

-- Functions this update replaces (their signatures or result columns
-- change) must not be used by objects outside the extension: stop with a
-- clear error naming them, before anything changes.
DO $$
DECLARE
    users text;
BEGIN
    SELECT string_agg(DISTINCT CASE
               WHEN d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
               THEN (SELECT 'view ' || r.ev_class::pg_catalog.regclass::text
                       FROM pg_catalog.pg_rewrite r WHERE r.oid = d.objid)
               ELSE pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
           END, ', ')
      INTO users
      FROM pg_catalog.pg_depend d
     WHERE d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND d.deptype = 'n'
       AND d.refobjid IN (SELECT p.oid FROM pg_catalog.pg_proc p
                            JOIN pg_catalog.pg_depend e
                              ON e.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                             AND e.objid = p.oid AND e.deptype = 'e'
                            JOIN pg_catalog.pg_extension x
                              ON x.oid = e.refobjid AND x.extname = 'redsem'
                           WHERE p.proname IN ('redsem_acquire', 'redsem_acquire_xact', 'redsem_guard',
                                               'redsem_held', 'redsem_holders', 'redsem_stats'))
       -- the extension's own redsem_stats view is rebuilt below
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_rewrite r
                         JOIN pg_catalog.pg_depend e
                           ON e.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                          AND e.objid = r.ev_class AND e.deptype = 'e'
                        WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                          AND r.oid = d.objid);
    IF users IS NOT NULL THEN
        RAISE EXCEPTION 'redsem 0.2.0 replaces functions that objects outside the extension use: %', users
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = 'redsem_acquire, redsem_acquire_xact and redsem_guard gain arguments, and redsem_held, redsem_holders and redsem_stats gain columns, so the update drops and creates them again. Nothing was changed.',
                  HINT = 'Save the definitions of those objects (for a view: SELECT pg_get_viewdef(''name'')), drop them, run ALTER EXTENSION redsem UPDATE, and create them again. Do not use DROP ... CASCADE on redsem''s functions.';
    END IF;
END
$$;

-- The administrator role (see redsem--0.2.0.sql)
DO $$
DECLARE
    granted text;
    admins text;
    owns boolean;
    why text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'redsem_admin') THEN
        -- (another database's CREATE EXTENSION may make it meanwhile)
        BEGIN
            CREATE ROLE redsem_admin NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    -- (made meanwhile by a transaction this one's snapshot cannot see:
    -- REPEATABLE READ or SERIALIZABLE; it could not be checked)
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'redsem_admin') THEN
        RAISE EXCEPTION 'role "redsem_admin" was made by another transaction while this one ran'
            USING ERRCODE = 'serialization_failure',
                  HINT = 'Run the command again in a new transaction.';
    END IF;
    -- A role of that name made by somebody else is not adopted: a CREATEROLE
    -- role may make it first (and on PostgreSQL 16 and later then holds
    -- ADMIN OPTION on it), and its members would act on every slot.  Only
    -- superusers may have granted it, directly or through a role that is a
    -- member of it, only superusers may grant it on, and it owns nothing (a
    -- SECURITY DEFINER function it owned would run with its rights).  A
    -- grantor that no longer exists counts as no superuser.
    WITH RECURSIVE tree(roleid) AS (
        SELECT oid FROM pg_catalog.pg_roles WHERE rolname = 'redsem_admin'
        UNION
        SELECT m.member FROM pg_catalog.pg_auth_members m JOIN tree t ON m.roleid = t.roleid
    ), edges AS (
        SELECT m.member, m.admin_option, coalesce(g.rolsuper, false) AS by_superuser
          FROM pg_catalog.pg_auth_members m
          JOIN tree t ON m.roleid = t.roleid
          LEFT JOIN pg_catalog.pg_roles g ON g.oid = m.grantor
    )
    SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(u.rolname), ', '
                                 ORDER BY pg_catalog.quote_ident(u.rolname))
               FILTER (WHERE NOT e.by_superuser),
           pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(u.rolname), ', '
                                 ORDER BY pg_catalog.quote_ident(u.rolname))
               FILTER (WHERE e.admin_option AND NOT u.rolsuper)
      INTO granted, admins
      FROM edges e
      JOIN pg_catalog.pg_roles u ON u.oid = e.member;
    SELECT EXISTS (SELECT FROM pg_catalog.pg_shdepend d
                    WHERE d.refclassid = 'pg_catalog.pg_authid'::pg_catalog.regclass
                      AND d.refobjid = r.oid AND d.deptype = 'o')
      INTO owns
      FROM pg_catalog.pg_roles r
     WHERE r.rolname = 'redsem_admin';
    SELECT CASE
             WHEN r.rolcanlogin OR r.rolsuper OR r.rolcreaterole OR r.rolreplication OR r.rolbypassrls THEN
                 'It has attributes that redsem does not give it (LOGIN, SUPERUSER, CREATEROLE, REPLICATION or BYPASSRLS).'
             WHEN granted IS NOT NULL THEN
                 'A role that is not a superuser (or no longer exists) granted it, directly or through a role that is a member of it, to ' || granted || '.'
             WHEN admins IS NOT NULL THEN
                 'A role that is not a superuser may grant it on (ADMIN OPTION on it or on a role that is a member of it): ' || admins || '.'
             WHEN owns THEN
                 'It owns objects (in this or another database), which redsem never gives it: code it owns would run with its rights.'
           END
      INTO why
      FROM pg_catalog.pg_roles r
     WHERE r.rolname = 'redsem_admin';
    IF why IS NOT NULL THEN
        RAISE EXCEPTION 'role "redsem_admin" exists and redsem cannot adopt it'
            USING ERRCODE = 'duplicate_object',
                  DETAIL = why || ' Its members may force-release any slot and change any limit or statement queue.',
                  HINT = 'If redsem did not make it (no database has redsem installed), drop it with DROP ROLE redsem_admin; otherwise remove what the detail names (a grant: REVOKE it, and GRANT it again as a superuser). Then run the command again.';
    END IF;
END
$$;

-- Weighted permits, and max_holders may be left out for a stored limit:
-- the acquire functions gain arguments (permits, priority).
DROP FUNCTION redsem_acquire(text, integer, interval, interval);
CREATE FUNCTION redsem_acquire(name text, max_holders integer DEFAULT NULL,
                               lease interval DEFAULT '10 seconds',
                               wait interval DEFAULT '0',
                               permits integer DEFAULT 1,
                               priority integer DEFAULT 0,
                               tenant text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'redsem_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_acquire(text, integer, interval, interval, integer, integer, text) IS
'take permits (default 1) of semaphore name for the session, waiting in line up to wait (higher priority first, a second per level; tenants share the line by weight); max_holders NULL: the stored limit; returns the holder id, or NULL';

DROP FUNCTION redsem_acquire_xact(text, integer, interval, interval);
CREATE FUNCTION redsem_acquire_xact(name text, max_holders integer DEFAULT NULL,
                                    lease interval DEFAULT '10 seconds',
                                    wait interval DEFAULT '0',
                                    permits integer DEFAULT 1,
                                    priority integer DEFAULT 0,
                                    tenant text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'redsem_acquire_xact'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_acquire_xact(text, integer, interval, interval, integer, integer, text) IS
'take permits (default 1) of semaphore name until the end of the current transaction; returns the holder id, or NULL';

DROP FUNCTION redsem_guard(text, integer, interval, interval);
CREATE FUNCTION redsem_guard(name text, max_holders integer DEFAULT NULL,
                             lease interval DEFAULT '10 seconds',
                             wait interval DEFAULT '0',
                             permits integer DEFAULT 1,
                             priority integer DEFAULT 0,
                             tenant text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'redsem_guard'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_guard(text, integer, interval, interval, integer, integer, text) IS
'take transaction-scoped permits (default 1) or raise SQLSTATE 55P03; returns the holder id';

-- Limits kept with the semaphore, in Redis, for every server
CREATE FUNCTION redsem_set_limit(name text, max_holders integer)
RETURNS void
AS 'MODULE_PATHNAME', 'redsem_set_limit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_set_limit(text, integer) IS
'store the limit of semaphore name for every server (NULL: remove it); raising it admits waiters at once (administrators)';

CREATE FUNCTION redsem_limit(name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'redsem_limit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_limit(text) IS
'the stored limit of semaphore name, or NULL';

-- Adaptive limits: a stored limit that a controller in Redis moves
-- within bounds, from the holders' hold times and the servers' pressure
-- (see README, "Adaptive limits")

CREATE FUNCTION redsem_set_adaptive_limit(name text, min_holders integer,
    max_holders integer, start_holders integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'redsem_set_adaptive_limit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_set_adaptive_limit(text, integer, integer, integer) IS
'make the stored limit of semaphore name adaptive between min_holders and max_holders for every server, starting at start_holders (NULL: where it is); NULL bounds: fixed where it is (administrators)';

CREATE FUNCTION redsem_adaptive_limit(name text,
    OUT limit_in_effect integer, OUT min_holders integer, OUT max_holders integer,
    OUT base_hold interval, OUT mean_hold interval, OUT last_interval_hold interval,
    OUT last_interval_releases bigint, OUT pressure double precision,
    OUT servers_reporting integer, OUT last_move text, OUT last_move_at timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'redsem_adaptive_limit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_adaptive_limit(text) IS
'the adaptive limit of semaphore name as its controller sees it: limit, bounds, best recent and mean hold time, the last second''s, the highest pressure reported (1: a server''s line), why the limit last moved and when (NULLs: not adaptive)';

-- Rates kept with the semaphore, in Redis, for every server

CREATE FUNCTION redsem_set_rate(name text, rate text, burst integer DEFAULT 1)
RETURNS void
AS 'MODULE_PATHNAME', 'redsem_set_rate'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_set_rate(text, text, integer) IS
'store the rate of semaphore name for every server (''100/s'', ''10/min''; NULL: remove it), admitting at most burst at once (administrators)';

CREATE FUNCTION redsem_rate(name text,
    OUT rate text, OUT burst integer, OUT next_admission_in interval)
RETURNS record
AS 'MODULE_PATHNAME', 'redsem_rate'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_rate(text) IS
'the stored rate of semaphore name, its burst, and how long until it lets the next caller in (NULLs: none)';

-- Reserved capacity kept with the semaphore, in Redis, for every server

CREATE FUNCTION redsem_set_reserve(name text, permits integer, min_priority integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'redsem_set_reserve'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_set_reserve(text, integer, integer) IS
'keep permits of the limit of semaphore name for callers of priority min_priority and above, on every server (NULL: remove the reserve) (administrators)';

CREATE FUNCTION redsem_reserve(name text,
    OUT permits integer, OUT min_priority integer, OUT permits_held_by_class bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'redsem_reserve'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_reserve(text) IS
'the stored reserve of semaphore name: permits kept, the priority they are kept for, and the permits the callers of that priority hold (NULLs: none)';

-- Tenants share a semaphore's line by weight (weights kept in Redis)

CREATE FUNCTION redsem_set_tenant_weight(name text, tenant text, weight integer)
RETURNS void
AS 'MODULE_PATHNAME', 'redsem_set_tenant_weight'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_set_tenant_weight(text, text, integer) IS
'give tenant a weight (1 to 10000, default 1) on semaphore name: while tenants wait, a freed permit goes to the one holding the fewest permits per weight, on every server (NULL: remove it) (administrators)';

CREATE FUNCTION redsem_tenants(name text,
    OUT tenant text, OUT weight integer, OUT permits_held bigint, OUT waiting bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_tenants'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_tenants(text) IS
'the tenants of semaphore name holding, waiting or with a stored weight (NULL: callers naming none): weight, permits held, waiters';

CREATE FUNCTION redsem_semaphore(name text,
    OUT stored_limit integer, OUT limit_in_effect integer,
    OUT permits_held bigint, OUT waiting bigint,
    OUT adaptive_min integer, OUT adaptive_max integer,
    OUT last_move text, OUT last_move_at timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'redsem_semaphore'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_semaphore(text) IS
'a semaphore as Redis sees it now: stored limit, limit in effect, permits held, members in line, and for an adaptive limit its bounds, why it last moved and when';

-- redsem_held() gains keeper_error and permits, redsem_holders() permits,
-- redsem_stats acquired_permits and key_prefix.  (A view of yours that uses one of them
-- must be dropped before the update and created again after it.)
DROP FUNCTION redsem_held();
CREATE FUNCTION redsem_held(
    OUT name text, OUT id text, OUT scope text, OUT acquired_at timestamptz,
    OUT lease interval, OUT lease_expires_at timestamptz, OUT token bigint,
    OUT kept_alive boolean, OUT keeper_error text, OUT permits integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_held'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_held() IS
'the slots this session holds';

DROP FUNCTION redsem_holders(text);
CREATE FUNCTION redsem_holders(name text,
    OUT "position" integer, OUT state text, OUT id text, OUT ticket bigint,
    OUT lease_expires_at timestamptz, OUT server text, OUT pid integer,
    OUT database text, OUT username text, OUT application_name text,
    OUT permits integer, OUT acquired_at timestamptz, OUT waiting_since timestamptz,
    OUT priority integer, OUT tenant text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_holders'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The view gains its column in place (a view may grow at the end), so views
-- of yours over redsem_stats keep working: it moves to a stand-in function
-- while redsem_stats() is made again.
CREATE FUNCTION redsem_stats_0_2_0(
    OUT name text, OUT acquired bigint, OUT refused bigint, OUT waited bigint,
    OUT wait_timeouts bigint, OUT total_wait_time interval, OUT released bigint,
    OUT expired bigint, OUT lost bigint, OUT redis_errors bigint,
    OUT acquired_permits bigint, OUT waits_le_1ms bigint, OUT waits_le_10ms bigint,
    OUT waits_le_100ms bigint, OUT waits_le_1s bigint, OUT waits_le_10s bigint,
    OUT waits_over_10s bigint, OUT longest_wait interval, OUT key_prefix text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE OR REPLACE VIEW redsem_stats AS SELECT * FROM redsem_stats_0_2_0();
DROP FUNCTION redsem_stats();
CREATE FUNCTION redsem_stats(
    OUT name text, OUT acquired bigint, OUT refused bigint, OUT waited bigint,
    OUT wait_timeouts bigint, OUT total_wait_time interval, OUT released bigint,
    OUT expired bigint, OUT lost bigint, OUT redis_errors bigint,
    OUT acquired_permits bigint, OUT waits_le_1ms bigint, OUT waits_le_10ms bigint,
    OUT waits_le_100ms bigint, OUT waits_le_1s bigint, OUT waits_le_10s bigint,
    OUT waits_over_10s bigint, OUT longest_wait interval, OUT key_prefix text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE OR REPLACE VIEW redsem_stats AS SELECT * FROM redsem_stats();
DROP FUNCTION redsem_stats_0_2_0();
COMMENT ON VIEW redsem_stats IS
'per-semaphore counters of this server since the last reset, one row per name and key prefix (needs shared_preload_libraries)';
COMMENT ON FUNCTION redsem_stats_reset(text) IS
'forget the statistics of one semaphore name (under every key prefix), or of all when name is NULL';

-- Slots are owned: release and refresh serve the session's own slots only;
-- administrators force-release
CREATE FUNCTION redsem_force_release(name text, id text, holder_gone boolean DEFAULT false)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redsem_force_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_force_release(text, text, boolean) IS
'release anybody''s slot or place in line (administrators); the slot counts until its holder is stopped, unless holder_gone; true if it was a live slot';


COMMENT ON FUNCTION redsem_release(text, text) IS
'release a slot this session holds; false if its lease had run out (a WARNING if the session does not hold it)';
COMMENT ON FUNCTION redsem_refresh(text, text, interval) IS
'extend the lease of a slot this session holds (NULL: by its original length); false if the slot was already lost';
-- 0.1.0 revoked it from PUBLIC: the function checks for itself now (its
-- refusal can then say how to get the right)
GRANT EXECUTE ON FUNCTION redsem_stats_reset(text) TO PUBLIC;

COMMENT ON FUNCTION redsem_holders(text) IS
'holders then waiters of a semaphore, in line order, as Redis sees them (ids only for administrators and their holder)';

-- Statement queues (settings redsem.queues and redsem.queue; they need
-- redsem in shared_preload_libraries)

CREATE FUNCTION redsem_queues(
    OUT name text, OUT active_statements integer, OUT min_cost float8,
    OUT max_wait interval, OUT on_redis_error text, OUT utility boolean,
    OUT application_name text, OUT application_priority text,
    OUT running bigint, OUT waiting bigint,
    OUT admitted bigint, OUT waited bigint, OUT timed_out bigint,
    OUT total_wait_time interval, OUT bypassed bigint, OUT ran_unqueued bigint,
    OUT cap integer, OUT defined_in text, OUT setting_differs boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_queues'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW redsem_queues AS SELECT * FROM redsem_queues();
GRANT SELECT ON redsem_queues TO PUBLIC;
COMMENT ON VIEW redsem_queues IS
'statement queues: definition, the cap in effect and the statements running and waiting on every server (Redis), and this server''s counters';

-- Statement queues defined for every server, in Redis (administrators)

CREATE FUNCTION redsem_create_queue(name text, options text)
RETURNS text
AS 'MODULE_PATHNAME', 'redsem_create_queue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_create_queue(text, text) IS
'define statement queue name for every server: options as in redsem.queues (''active_statements=4 min_cost=100000''); returns the definition stored (administrators)';

CREATE FUNCTION redsem_alter_queue(name text, options text)
RETURNS text
AS 'MODULE_PATHNAME', 'redsem_alter_queue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_alter_queue(text, text) IS
'change the options given of statement queue name, for every server at once, keeping the others; returns the definition stored (administrators)';

CREATE FUNCTION redsem_drop_queue(name text, if_exists boolean DEFAULT false)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redsem_drop_queue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_drop_queue(text, boolean) IS
'drop statement queue name for every server: its running statements finish, the next ones are not queued (administrators)';

CREATE FUNCTION redsem_queue_servers(
    OUT server text, OUT standby boolean, OUT cluster_name text,
    OUT last_read timestamptz, OUT queues_of_its_own text[],
    OUT setting_differs text[])
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_queue_servers'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_queue_servers() IS
'the servers that apply the statement queues defined in Redis (their keeper read them within 10 seconds), with the queues only their redsem.queues defines and those it defines otherwise';
REVOKE ALL ON FUNCTION redsem_queue_servers() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redsem_queue_servers() TO pg_monitor, redsem_admin;

-- This server's holds and places in line, with their sessions (for
-- pg_monitor and redsem_admin; ids only for administrators and their own
-- session)

CREATE FUNCTION redsem_server_holds(
    OUT pid integer, OUT name text, OUT id text, OUT scope text, OUT state text,
    OUT permits integer, OUT lease interval, OUT acquired_at timestamptz,
    OUT waiting_since timestamptz, OUT lease_expires_at timestamptz,
    OUT keeper_error text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_server_holds'
-- (a server's slots: fewer than the planner's default of 1000 rows, so
-- that redsem_activity's estimate keeps it a light statement in a queue)
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;
REVOKE ALL ON FUNCTION redsem_server_holds() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redsem_server_holds() TO pg_monitor, redsem_admin;
COMMENT ON FUNCTION redsem_server_holds() IS
'every slot and place in line of this server''s sessions, from the keeper''s table (needs shared_preload_libraries)';

-- (relation_locks and blocking_pids: what a session waiting for a slot
-- holds, and who waits for it, so that the root of a pile-up behind a
-- queued statement shows in one query; each is computed only when it is
-- read, the waiters taken from pg_locks, which no role's view filters)
CREATE VIEW redsem_activity AS
SELECT h.pid, h.name, h.id, h.scope, h.state, h.permits, h.lease,
       h.acquired_at, h.waiting_since, h.lease_expires_at, h.keeper_error,
       a.datname, a.usename, a.application_name, a.client_addr,
       a.backend_start, a.xact_start, a.query_start,
       a.state AS backend_state, a.wait_event_type, a.wait_event, a.query,
       (SELECT count(*)::integer FROM pg_catalog.pg_locks l
         WHERE l.pid = h.pid AND l.granted AND l.locktype = 'relation') AS relation_locks,
       ARRAY(SELECT DISTINCT w.pid FROM pg_catalog.pg_locks w
              WHERE NOT w.granted AND w.pid IS NOT NULL
                AND h.pid = ANY (pg_catalog.pg_blocking_pids(w.pid))
              ORDER BY 1) AS blocking_pids
  FROM redsem_server_holds() h
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = h.pid;
REVOKE ALL ON redsem_activity FROM PUBLIC;
GRANT SELECT ON redsem_activity TO pg_monitor, redsem_admin;
COMMENT ON VIEW redsem_activity IS
'this server''s slots and places in line, with pg_stat_activity of their sessions, the relation locks they hold and the sessions waiting for those (pg_monitor, redsem_admin)';

-- Every semaphore in use under the key prefix, from any server (an index
-- the keepers keep; see README, "Looking at it")

CREATE FUNCTION redsem_semaphores(max_semaphores integer DEFAULT 1000,
    OUT name text, OUT stored_limit integer, OUT limit_in_effect integer,
    OUT permits_held bigint, OUT holders bigint, OUT waiting bigint,
    OUT oldest_wait_started timestamptz, OUT rate text,
    OUT reserved_permits integer, OUT reserved_for_priority integer,
    OUT tenants_waiting bigint, OUT adaptive_min integer, OUT adaptive_max integer,
    OUT last_move text, OUT last_move_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_semaphores'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_semaphores(integer) IS
'every semaphore in use under the key prefix, as Redis sees it now (from the index the keepers keep)';
