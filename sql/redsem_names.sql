--
-- redsem_names: any non-empty name of up to 200 bytes is its own semaphore,
-- and its Redis keys are "<prefix>{<name, percent-encoded>}:<suffix>" with
-- '%', '{', '}' and control bytes encoded as %XX, so names that look alike
-- once encoded never collide and the hash tag never holds a raw brace.
-- This file works in Redis database 2, so a scan of it sees only its keys.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;
SET redsem.database = 2;

CREATE TEMP TABLE names (n serial, label text, name text, id text);
INSERT INTO names (label, name) VALUES
    ('plain',             'a'),
    ('upper case',        'A'),
    ('open brace',        'a{b'),
    ('encoded open',      'a%7Bb'),
    ('encoded open lc',   'a%7bb'),
    ('close brace',       'a}b'),
    ('encoded close',     'a%7Db'),
    ('close-open',        'a}{b'),
    ('open-close',        'a{}b'),
    ('whole tag',         '{a}'),
    ('lone open',         '{'),
    ('lone close',        '}'),
    ('close-open alone',  '}{'),
    ('percent',           'a%b'),
    ('encoded percent',   'a%25b'),
    ('double encoded',    'a%257Bb'),
    ('lone percent',      '%'),
    ('star',              'a*'),
    ('lone star',         '*'),
    ('question',          'a?'),
    ('brackets',          'a[b]'),
    ('backslash',         E'a\\b'),
    ('newline',           E'a\nb'),
    ('encoded newline',   'a%0Ab'),
    ('cr',                E'a\rb'),
    ('tab',               E'a\tb'),
    ('del',               E'a\x7fb'),
    ('escape',            E'a\x1bb'),
    ('spaces',            ' a b '),
    ('one space',         ' '),
    ('quotes',            $$a'b"c$$),
    ('colon suffix',      'a}:owner'),
    ('unicode',           'sémaphore 日本 🙂'),
    ('200 bytes',         repeat('x', 200)),
    ('200 bytes braces',  repeat('{', 100) || repeat('}', 100)),
    ('200 bytes unicode', repeat('é', 100)),
    ('200 bytes percent', repeat('%', 200));

-- Each name is its own semaphore with limit 1: all first acquires succeed,
-- all second ones find it full.
UPDATE names SET id = redsem_acquire(name, 1);
SELECT n, label, octet_length(name) AS bytes, id IS NOT NULL AS held,
       redsem_acquire(name, 1) IS NULL AS second_busy
  FROM names ORDER BY n;

-- The keys: one owner/timeout/ticket/info set per name, each well formed
-- (prefix, '{', encoded name without braces or control bytes, '}:', suffix)
-- (and the generation key, I15: "redsem:gen", in a Cluster one per slot)
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 2 --scan | grep -Evc '^redsem:gen(\{[0-9]+\})?$'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 2 --scan | LC_ALL=C awk '!/^redsem:\{[^{}\001-\037\177]+\}:(owner|timeout|ticket|info|state)$/ && !/^redsem:gen(\{[0-9]+\})?$/ { bad++; print "malformed: " $0 } END { print "malformed keys: " bad + 0 }'
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 2 --scan --pattern '*:owner' | LC_ALL=C awk '{ print ((length($0) > 70) ? substr($0, 1, 40) "... (" length($0) " bytes)" : $0) }' | LC_ALL=C sort
-- each owner ZSET has exactly the one holder
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 2 --scan --pattern '*:owner' | while IFS= read -r k; do redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 2 zcard "$k"; done | LC_ALL=C sort | uniq -c | sed 's/^ *//'

-- Release and refresh find the same semaphore (the second release: the
-- session no longer holds it, so false with a WARNING, silenced here)
SET client_min_messages = error;
SELECT n, label, redsem_refresh(name, id) AS refreshed,
       redsem_release(name, id) AS released,
       redsem_release(name, id) AS released_twice
  FROM names ORDER BY n;
RESET client_min_messages;
-- a released name is free again, the others untouched
SELECT count(*) FILTER (WHERE redsem_acquire(name, 1) IS NOT NULL) AS reacquired
  FROM names;
SELECT count(*) FILTER (WHERE redsem_acquire(name, 1) IS NULL) AS busy_again
  FROM names;
SELECT redsem_release_all() AS released_all;

-- Two names that encode alike when '%' is not encoded: independent
SELECT redsem_acquire('b%7Bc', 1) IS NOT NULL AS pct_held,
       redsem_acquire('b{c', 1) IS NOT NULL AS brace_held,
       redsem_acquire('b{c', 1) IS NULL AS brace_busy,
       redsem_acquire('b%7Bc', 1) IS NULL AS pct_busy;
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 2 --scan --pattern 'redsem:{b*}:owner' | LC_ALL=C sort
SELECT redsem_release_all() AS released_all;

-- Names under the same prefix as a key suffix cannot reach other keys
SELECT redsem_acquire('c', 1) IS NOT NULL AS c_held,
       redsem_acquire('c}:owner', 1) IS NOT NULL AS tricky_held,
       redsem_acquire('c', 1) IS NULL AS c_busy;
SELECT redsem_release_all() AS released_all;

SELECT pg_sleep(1.2);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" -n 2 --scan | grep -Evc '^redsem:gen(\{[0-9]+\})?$'
