--
-- redsem_tenants: callers naming a tenant (I12), tenant weights
-- (redsem_set_tenant_weight), what redsem_tenants and redsem_holders show,
-- bad tenants and weights, who may set a weight, and the statement queues'
-- redsem.queue_tenant.  Semaphore names here all start with "ten_".
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
RESET client_min_messages;

--
-- A tenant alone uses the whole limit; each tenant's permits are counted
--
SELECT count(redsem_acquire('ten_a', 3, tenant => 'acme')) AS acme_gets_all_three
  FROM generate_series(1, 4);
SELECT redsem_release_all() AS released;
SELECT redsem_acquire('ten_a', 3, tenant => 'acme', permits => 2) IS NOT NULL AS acme_takes_two;
SELECT redsem_acquire('ten_a', 3, priority => 4) IS NOT NULL AS no_tenant_takes_one;
SELECT * FROM redsem_tenants('ten_a');
SELECT state, permits, priority, tenant FROM redsem_holders('ten_a') ORDER BY position;
SELECT redsem_release_all() AS released;
SELECT * FROM redsem_tenants('ten_a');

--
-- Weights: kept in Redis without a TTL, listed even with nobody holding
--
SELECT redsem_set_tenant_weight('ten_a', 'acme', 3);
SELECT redsem_set_tenant_weight('ten_a', 'small co', 1);
SELECT * FROM redsem_tenants('ten_a');
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" pttl 'redsem:{ten_a}:weights'
SELECT redsem_set_tenant_weight('ten_a', 'acme', NULL);
SELECT redsem_set_tenant_weight('ten_a', 'small co', NULL);
SELECT * FROM redsem_tenants('ten_a');
-- (nothing left but the last ticket, for a second)
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{ten_a}*' | grep -v ':ticket$'

--
-- Bad tenants and weights: refused before Redis is asked
--
SELECT redsem_acquire('ten_bad', 3, tenant => '');
SELECT redsem_acquire('ten_bad', 3, tenant => 'a|b');
SELECT redsem_acquire('ten_bad', 3, tenant => E'a\nb');
-- C1 controls too (U+0085, NEXT LINE)
SELECT redsem_acquire('ten_bad', 3, tenant => E'a\u0085b');
SELECT redsem_acquire('ten_bad', 3, tenant => repeat('x', 65));
SELECT redsem_guard('ten_bad', 3, tenant => repeat('é', 33));
SELECT redsem_acquire_xact('ten_bad', 3, tenant => '');
SELECT redsem_set_tenant_weight('ten_bad', 'acme', 0);
SELECT redsem_set_tenant_weight('ten_bad', 'acme', 10001);
SELECT redsem_set_tenant_weight('ten_bad', NULL, 2);
SELECT redsem_set_tenant_weight('ten_bad', '', 2);
\! redis-cli -s "$REDSEM_TEST_REDIS_SOCKET" --scan --pattern 'redsem:{ten_bad}*'
-- a tenant of 64 bytes is fine
SELECT redsem_acquire('ten_bad', 3, tenant => repeat('x', 64)) IS NOT NULL AS sixty_four_bytes;
SELECT length(tenant) FROM redsem_tenants('ten_bad');
SELECT redsem_release_all() AS released;

--
-- Only administrators set weights; anybody reads them
--
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_redsem_tenants;
RESET client_min_messages;
CREATE ROLE regress_redsem_tenants;
SELECT redsem_set_tenant_weight('ten_admin', 'acme', 2);
SET ROLE regress_redsem_tenants;
SELECT redsem_set_tenant_weight('ten_admin', 'acme', 9);
SELECT redsem_set_tenant_weight('ten_admin', 'acme', NULL);
SELECT tenant, weight FROM redsem_tenants('ten_admin') AS read_by_anybody;
-- and may name any tenant (a tenant is a share of the line, not a right)
SELECT redsem_acquire('ten_admin', 1, tenant => 'acme') IS NOT NULL AS acquired;
SELECT redsem_release_all() AS released;
-- redsem.queue_tenant is set by administrators (ALTER ROLE ... SET)
SET redsem.queue_tenant = 'acme';
RESET ROLE;
SELECT redsem_set_tenant_weight('ten_admin', 'acme', NULL);
DROP ROLE regress_redsem_tenants;

--
-- redsem.queue_tenant: a name, or escapes for the role, database and
-- application_name
--
SET redsem.queue_tenant = 'acme';
SET redsem.queue_tenant = '%u@%d';
SET redsem.queue_tenant = '%a';
SET redsem.queue_tenant = '100%%';
SET redsem.queue_tenant = '%x';
SET redsem.queue_tenant = '50%';
SET redsem.queue_tenant = 'a|b';
RESET redsem.queue_tenant;
