/* redsem--0.1.0--0.2.0.sql: from 0.1.0 to 0.2.0 */

\echo Use "ALTER EXTENSION redsem UPDATE TO '0.2.0'" to load this file. \quit

-- The administrator role (see redsem--0.2.0.sql)
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'redsem_admin') THEN
        CREATE ROLE redsem_admin NOLOGIN;
    END IF;
END
$$;

-- redsem_held() gains keeper_error.  (A view of yours that uses it must be
-- dropped before the update and created again after it.)
DROP FUNCTION redsem_held();
CREATE FUNCTION redsem_held(
    OUT name text, OUT id text, OUT scope text, OUT acquired_at timestamptz,
    OUT lease interval, OUT lease_expires_at timestamptz, OUT token bigint,
    OUT kept_alive boolean, OUT keeper_error text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redsem_held'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_held() IS
'the slots this session holds';

-- Slots are owned: release and refresh serve the session's own slots only;
-- administrators force-release
CREATE FUNCTION redsem_force_release(name text, id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redsem_force_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_force_release(text, text) IS
'release anybody''s slot or place in line (administrators); true if it was a live slot';
REVOKE ALL ON FUNCTION redsem_force_release(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redsem_force_release(text, text) TO redsem_admin;

GRANT EXECUTE ON FUNCTION redsem_stats_reset(text) TO redsem_admin;

COMMENT ON FUNCTION redsem_release(text, text) IS
'release a slot this session holds; false if its lease had run out (a WARNING if the session does not hold it)';
COMMENT ON FUNCTION redsem_refresh(text, text, interval) IS
'extend the lease of a slot this session holds (NULL: by its original length); false if the slot was already lost';
COMMENT ON FUNCTION redsem_holders(text) IS
'holders then waiters of a semaphore, in line order, as Redis sees them (ids only for administrators and their holder)';
