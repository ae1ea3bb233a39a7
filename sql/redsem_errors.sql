--
-- redsem_errors: argument checks.  Every bad argument gives its documented
-- SQLSTATE, and nothing is left behind in Redis.
-- This file works in Redis database 1, so a scan of it sees only its keys.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;
SET redsem.database = 1;

-- Run a statement; report "ok" or "SQLSTATE: message (detail)"
CREATE FUNCTION pg_temp.try(cmd text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    res text;
    detail text;
BEGIN
    EXECUTE cmd INTO res;
    RETURN 'ok' || CASE WHEN res IS NULL THEN ' (NULL)'
                        WHEN res IN ('true', 'false') THEN ': ' || res
                        ELSE '' END;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || SQLERRM ||
        CASE WHEN detail <> '' THEN ' (' || detail || ')' ELSE '' END;
END
$$;

CREATE TEMP TABLE bad_calls (n serial, call text);
INSERT INTO bad_calls (call) VALUES
-- NULL arguments: 22004 (max_holders NULL means the stored limit, and
-- there is none: 22023)
    ($$redsem_acquire(NULL, 1)$$),
    ($$redsem_acquire('err', NULL)$$),
    ($$redsem_acquire('err', 1, NULL)$$),
    ($$redsem_acquire_xact(NULL, 1)$$),
    ($$redsem_acquire_xact('err', NULL)$$),
    ($$redsem_acquire_xact('err', 1, NULL)$$),
    ($$redsem_guard(NULL, 1)$$),
    ($$redsem_guard('err', NULL)$$),
    ($$redsem_guard('err', 1, NULL)$$),
    ($$redsem_release(NULL, 'a.1')$$),
    ($$redsem_release('err', NULL)$$),
    ($$redsem_refresh(NULL, 'a.1')$$),
    ($$redsem_refresh('err', NULL)$$),
-- names: empty or more than 200 bytes
    ($$redsem_acquire('', 1)$$),
    ($$redsem_acquire(repeat('n', 201), 1)$$),
    ($$redsem_acquire(repeat('é', 101), 1)$$),
    ($$redsem_acquire(repeat('n', 199) || 'é', 1)$$),
    ($$redsem_acquire(repeat('n', 10000), 1)$$),
    ($$redsem_acquire_xact('', 1)$$),
    ($$redsem_guard(repeat('n', 201), 1)$$),
    ($$redsem_release('', 'a.1')$$),
    ($$redsem_release(repeat('n', 201), 'a.1')$$),
    ($$redsem_refresh('', 'a.1')$$),
    ($$redsem_refresh(repeat('n', 201), 'a.1')$$),
-- max_holders outside 1..1000000
    ($$redsem_acquire('err', 0)$$),
    ($$redsem_acquire('err', -1)$$),
    ($$redsem_acquire('err', 1000001)$$),
    ($$redsem_acquire('err', -2147483648)$$),
    ($$redsem_acquire_xact('err', 0)$$),
    ($$redsem_guard('err', 1000001)$$),
-- lease outside 1 s..24 h (the keeper cannot keep shorter leases)
    ($$redsem_acquire('err', 1, '0')$$),
    ($$redsem_acquire('err', 1, '0.5 ms')$$),
    ($$redsem_acquire('err', 1, '1 ms')$$),
    ($$redsem_acquire('err', 1, '999 ms')$$),
    ($$redsem_acquire('err', 1, '999.999 ms')$$),
    ($$redsem_acquire('err', 1, '-1 s')$$),
    ($$redsem_acquire('err', 1, '25 hours')$$),
    ($$redsem_acquire('err', 1, '24 hours 1 ms')$$),
    ($$redsem_acquire('err', 1, '1 mon')$$),
    ($$redsem_acquire('err', 1, '1000 years')$$),
    ($$redsem_acquire('err', 1, '-1000 years')$$),
    ($$redsem_acquire('err', 1, '24 hours 1 us')$$),
    ($$redsem_acquire_xact('err', 1, '0')$$),
    ($$redsem_guard('err', 1, '25 hours')$$),
    ($$redsem_refresh('err', 'a.1', '0')$$),
    ($$redsem_refresh('err', 'a.1', '0.5 ms')$$),
    ($$redsem_refresh('err', 'a.1', '999 ms')$$),
    ($$redsem_refresh('err', 'a.1', '-1 s')$$),
    ($$redsem_refresh('err', 'a.1', '25 hours')$$),
-- wait outside 0..24 h
    ($$redsem_acquire('err', 1, '1 s', '-1 s')$$),
    ($$redsem_acquire('err', 1, '1 s', '-1 ms')$$),
    ($$redsem_acquire('err', 1, '1 s', '-1 us')$$),
    ($$redsem_acquire('err', 1, '1 s', '25 hours')$$),
    ($$redsem_acquire('err', 1, '1 s', '1 day 1 s')$$),
    ($$redsem_acquire_xact('err', 1, '1 s', '-1 s')$$),
    ($$redsem_guard('err', 1, '1 s', '25 hours')$$),
-- malformed holder ids: 1..100 of [A-Za-z0-9._:-]
    ($$redsem_release('err', '')$$),
    ($$redsem_release('err', 'a b')$$),
    ($$redsem_release('err', ' a')$$),
    ($$redsem_release('err', 'a''b')$$),
    ($$redsem_release('err', 'a"b')$$),
    ($$redsem_release('err', '*')$$),
    ($$redsem_release('err', 'a?')$$),
    ($$redsem_release('err', '{a}')$$),
    ($$redsem_release('err', 'a}{b')$$),
    ($$redsem_release('err', 'a/b')$$),
    ($$redsem_release('err', E'a\nb')$$),
    ($$redsem_release('err', 'é')$$),
    ($$redsem_release('err', repeat('a', 101))$$),
    ($$redsem_release('err', repeat('a', 41) || ' ')$$),
    ($$redsem_refresh('err', 'a b')$$),
    ($$redsem_refresh('err', '{a}')$$),
    ($$redsem_refresh('err', repeat('a', 101))$$),
-- permits outside 1..max_holders
    ($$redsem_acquire('err', 1, '1 s', '0', NULL)$$),
    ($$redsem_acquire('err', 1, '1 s', '0', 0)$$),
    ($$redsem_acquire('err', 1, '1 s', '0', -1)$$),
    ($$redsem_acquire('err', 1, '1 s', '0', 1000001)$$),
    ($$redsem_acquire('err', 2, '1 s', '0', 3)$$),
    ($$redsem_acquire_xact('err', 1, permits => 2)$$),
    ($$redsem_guard('err', 5, permits => 6)$$),
-- limits: NULL removes a stored one; bounds as max_holders
    ($$redsem_set_limit(NULL, 1)$$),
    ($$redsem_set_limit('', 1)$$),
    ($$redsem_set_limit('err', 0)$$),
    ($$redsem_set_limit('err', 1000001)$$),
    ($$redsem_limit(NULL)$$),
    ($$redsem_limit(repeat('n', 201))$$),
-- the arguments are checked in order: the name first
    ($$redsem_acquire('', 0, '0', '-1 s')$$),
    ($$redsem_acquire('err', 0, '0', '-1 s')$$),
    ($$redsem_acquire('err', 1, '0', '-1 s')$$),
    ($$redsem_release('', '*')$$);

SELECT n, call, pg_temp.try('SELECT ' || call) AS result FROM bad_calls ORDER BY n;

-- None of that reached Redis
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 1 --scan | wc -l

-- Errors inside a transaction abort it, and leave no hold behind
BEGIN;
SELECT redsem_acquire_xact('err', 0);
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT redsem_acquire('err', 1, '25 hours');
ROLLBACK TO SAVEPOINT s;
SELECT redsem_release_all() AS released_all;
COMMIT;

-- The default error report: message, detail
SELECT redsem_acquire(NULL, 1);
SELECT redsem_acquire(repeat('n', 201), 1);
SELECT redsem_acquire('err', 0);
SELECT redsem_acquire('err', 1, '0.5 ms');
SELECT redsem_acquire('err', 1, '1 s', '25 hours');
SELECT redsem_release('err', 'a b');
SELECT redsem_release('err', repeat('a', 101));
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 1 --scan | wc -l

--
-- The bounds themselves are accepted
--
-- A lease above redsem.max_lease (1 hour by default: it bounds the grace
-- after Redis forgets, I15) is refused; a superuser may raise it
SELECT redsem_acquire('err_lease_cap', 1, '1 hour 1 ms');
SET redsem.max_lease = '24h';

CREATE TEMP TABLE good_calls (n serial, call text);
INSERT INTO good_calls (call) VALUES
    ($$redsem_acquire(repeat('n', 200), 1)$$),
    ($$redsem_acquire(repeat('é', 100), 1)$$),
    ($$redsem_acquire(repeat('n', 198) || 'é', 1)$$),
    ($$redsem_acquire('n', 1)$$),
    ($$redsem_acquire('err_max', 1000000)$$),
    ($$redsem_acquire('err_lease_min', 1, '1 s')$$),
    ($$redsem_acquire('err_lease_frac', 1, '1000.5 ms')$$),
    ($$redsem_acquire('err_lease_max', 1, '24 hours')$$),
    ($$redsem_acquire('err_lease_day', 1, '1 day')$$),
    ($$redsem_acquire('err_wait_0', 1, '1 s', '0')$$),
    ($$redsem_acquire('err_wait_max', 1, '1 s', '24 hours')$$),
    ($$redsem_acquire('err_wait_null', 1, '1 s', NULL)$$),
    ($$redsem_acquire('err_permits', 1000000, '1 s', '0', 1000000)$$),
    ($$redsem_limit('err_nothing')$$),
    ($$redsem_refresh('err_max', repeat('a', 100))$$),
    ($$redsem_refresh('err_max', 'Az09._:-', '24 hours')$$),
    ($$redsem_refresh('err_max', 'a', '1 s')$$),
    ($$redsem_release(repeat('n', 200), 'a')$$),
    ($$redsem_release('err_max', 'a:b-c_d.e')$$);
-- (well-formed ids that this session does not hold: false, with a WARNING)
\set VERBOSITY terse
SELECT n, call, pg_temp.try('SELECT ' || call) AS result FROM good_calls ORDER BY n;
\set VERBOSITY default
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 1 --scan --pattern '*:owner' | LC_ALL=C sort | cut -c1-60
SELECT redsem_release_all() AS released_all;

-- After the last lease (and its 1 s grace) nothing is left but the
-- generation key (I15: one per prefix, without a TTL)
SELECT pg_sleep(1.2);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 1 --scan | grep -Evc '^redsem:gen(\{[0-9]+\})?$'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 1 --scan --pattern 'redsem:gen*'
