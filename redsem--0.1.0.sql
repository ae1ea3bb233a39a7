/* redsem--0.1.0.sql: distributed fair counting semaphores kept in Redis */

\echo Use "CREATE EXTENSION redsem" to load this file. \quit

-- Holding a slot

CREATE FUNCTION redsem_acquire(name text, max_holders integer,
                               lease interval DEFAULT '10 seconds',
                               wait interval DEFAULT '0')
RETURNS text
AS 'MODULE_PATHNAME', 'redsem_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_acquire(text, integer, interval, interval) IS
'take a session-scoped slot of semaphore name, waiting in line up to wait; returns the holder id, or NULL';

CREATE FUNCTION redsem_acquire_xact(name text, max_holders integer,
                                    lease interval DEFAULT '10 seconds',
                                    wait interval DEFAULT '0')
RETURNS text
AS 'MODULE_PATHNAME', 'redsem_acquire_xact'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_acquire_xact(text, integer, interval, interval) IS
'take a slot held until the end of the current transaction; returns the holder id, or NULL';

CREATE FUNCTION redsem_guard(name text, max_holders integer,
                             lease interval DEFAULT '10 seconds',
                             wait interval DEFAULT '0')
RETURNS text
AS 'MODULE_PATHNAME', 'redsem_guard'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_guard(text, integer, interval, interval) IS
'take a transaction-scoped slot or raise SQLSTATE 55P03; returns the holder id';

-- Giving it back, keeping it

CREATE FUNCTION redsem_release(name text, id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redsem_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_release(text, text) IS
'release a slot; false if it had expired or was never held';

CREATE FUNCTION redsem_refresh(name text, id text, lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redsem_refresh'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_refresh(text, text, interval) IS
'extend a lease (NULL: by its original length); false if the slot was already lost';

CREATE FUNCTION redsem_release_all()
RETURNS integer
AS 'MODULE_PATHNAME', 'redsem_release_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION redsem_release_all() IS
'release every session-scoped slot of this session; returns how many were live';
