--
-- redsem_queues: the settings of statement queues are checked when they
-- are set, with a message that says what is wrong.  (What queues do is
-- tested in t/040_queues.pl.)
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

-- no queue defined: the view is empty
SELECT count(*) AS queues FROM redsem_queues;

-- malformed definitions are refused
ALTER SYSTEM SET redsem.queues = 'bad name: active_statements=1';
ALTER SYSTEM SET redsem.queues = 'q1 active_statements=1';
ALTER SYSTEM SET redsem.queues = 'q1: min_cost=5';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=0';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=two';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 min_cost=-1';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 max_wait=soon';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 on_redis_error=maybe';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 utility=perhaps';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 colour=blue';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 min_cost';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 active_statements=2';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1; q1: active_statements=2';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 application_priority=grafana*';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 application_priority=grafana*:101';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 application_priority=:5';
ALTER SYSTEM SET redsem.queues = 'q1: active_statements=1 application_priority=a:1|b:x';
-- and good ones accepted
ALTER SYSTEM SET redsem.queues = 'reports: active_statements=3 min_cost=10000 max_wait=5min on_redis_error=run utility=on application_name=tableau*|metabase application_priority=tableau*:10|metabase:-5; etl: active_statements=2;';
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SELECT name, active_statements, min_cost, max_wait, on_redis_error, utility, application_name,
       application_priority
  FROM redsem_queues ORDER BY name;
ALTER SYSTEM RESET redsem.queues;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SELECT count(*) AS queues FROM redsem_queues;

-- a session's queue: a name, set only by superusers and roles granted SET
SET redsem.queue = 'no spaces';
SET redsem.queue = 'café';
SET redsem.queue = 'reports';
RESET redsem.queue;
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_redsem_q;
RESET client_min_messages;
CREATE ROLE regress_redsem_q;
-- a queue named where none is defined is not applied, and says so: when
-- it is set for a role (to the administrator), and in the server log (no
-- queue is defined at all here: not to the session, as on a standby that
-- inherits role settings and queues nothing)
ALTER ROLE regress_redsem_q SET redsem.queue = 'no_such_queue';
ALTER ROLE regress_redsem_q RESET redsem.queue;
SET redsem.queue = 'no_such_queue';
SELECT 1 AS runs_unqueued;
SELECT 2 AS warned_once;
RESET redsem.queue;
SET ROLE regress_redsem_q;
SET redsem.queue = '';
-- a queue's semaphore is "queue:<name>": an ordinary role may neither take
-- its slots nor wait in its line, whichever function it calls, and leaves
-- nothing in Redis; names that only look alike are ordinary semaphores
SELECT redsem_acquire('queue:reports', 1);
SELECT redsem_acquire_xact('queue:reports', 1, wait => '1s');
SELECT redsem_guard('queue:', 5);
SELECT redsem_acquire('queue:reports', 1, '10s', NULL, 1, 0, 'tenant');
SELECT redsem_release(n, redsem_acquire(n, 1)) AS ordinary
  FROM unnest(ARRAY['Queue:reports', 'queues', ' queue:reports', 'xqueue:']) AS n;
RESET ROLE;
SELECT permits_held, waiting FROM redsem_semaphore('queue:reports');
-- a superuser may (an administrator pausing a queue by hand), under the
-- queue's cap (stored in Redis: by the keeper when the queue was defined,
-- and here by hand)
SELECT 1 AS cap_set FROM redsem_set_limit('queue:reports', 2);
SELECT redsem_release('queue:reports', redsem_acquire('queue:reports', NULL)) AS admin_took;
DROP ROLE regress_redsem_q;
