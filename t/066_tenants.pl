# 066_tenants.pl - tenants across servers (I12): two PostgreSQL servers
# share a Redis and a semaphore with a stored limit of 4.  Tenant A keeps
# 16 sessions in line (8 on each server), tenant B 4 (2 on each); each
# session takes a permit, holds it 100 ms, gives it back and asks again,
# for 4 s.  Checked: while both wait, B gets 50% +/- 10% of the
# admissions (each freed permit goes to the tenant holding fewer); with
# A given weight 3, B gets 25% +/- 10%; without tenants (the same
# sessions naming none) B gets what FIFO gives it, about 4 in 20 (shown,
# not checked: the comparison).  Also: a tenant alone takes the whole
# limit; redsem_tenants, redsem_holders and redsem_semaphores show the
# tenants, from either server; a statement queue takes the tenant from redsem.queue_tenant
# ('%u': the role).
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;
my $queues = "redsem.queues = 'qt: active_statements=1'\n";
my $na = create_node('ten_a', $redis, $queues);
my $nb = create_node('ten_b', $redis, $queues);

# A worker: until the epoch second "until", take a permit (as tenant ten),
# hold it for hold seconds, give it back; the epoch of each grant.
my $work = q{
CREATE FUNCTION work(sem text, ten text, until float8, hold float8) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE id text; log text := '';
BEGIN
    WHILE extract(epoch FROM clock_timestamp()) < until LOOP
        id := redsem_acquire(sem, NULL, '60 s', '60 s', tenant => ten);
        IF id IS NULL THEN RAISE EXCEPTION 'no permit'; END IF;
        log := log || extract(epoch FROM clock_timestamp()) || ' ';
        PERFORM pg_sleep(hold);
        PERFORM redsem_release(sem, id);
    END LOOP;
    RETURN log;
END $$;
};
$_->safe_psql('postgres', $work) foreach ($na, $nb);
$na->safe_psql('postgres', q{SELECT redsem_set_limit('tshare', 4);});

# One run: 16 sessions of A and 4 of B (NULL: no tenant, for the FIFO
# baseline), half on each server, for 4 s.  B's share of the admissions
# between 0.5 s and 3.5 s after the start, when all of them keep waiting.
sub b_share
{
	my ($ta, $tb) = @_;
	my $start = time + 1.5;    # (every session has started by then)
	my @s;
	for my $i (1 .. 20)
	{
		my $node = $i % 2 ? $na : $nb;
		my $b = $i <= 4;
		my $ten = $b ? $tb : $ta;
		my $s = RedsemTest::Session->new($node, name => ($b ? 'b' : 'a') . $i);
		$s->send(sprintf(q{SELECT work('tshare', %s, %.3f, 0.1);},
			defined $ten ? "'$ten'" : 'NULL', $start + 4));
		push @s, [ $s, $b ];
	}
	my ($na_, $nb_) = (0, 0);
	foreach my $e (@s)
	{
		my ($out) = $e->[0]->wait_done(60);
		foreach my $t (split / /, $out // '')
		{
			next unless $t >= $start + 0.5 && $t <= $start + 3.5;
			if ($e->[1]) { $nb_++; } else { $na_++; }
		}
		$e->[0]->quit;
	}
	return ($nb_ / (($na_ + $nb_) || 1), $na_ + $nb_);
}

my ($fifo, $n0) = b_share(undef, undef);
note sprintf('without tenants: B has %.0f%% of %d admissions (its 4 of 20 sessions: about 20%%)', 100 * $fifo, $n0);
my ($fair, $n1) = b_share('A', 'B');
ok($fair >= 0.40 && $fair <= 0.60,
	sprintf('tenant B (4 sessions) gets %.0f%% of %d admissions while tenant A (16) waits too: 50%% +/- 10%%', 100 * $fair, $n1));
$na->safe_psql('postgres', q{SELECT redsem_set_tenant_weight('tshare', 'A', 3);});
my ($weighted, $n2) = b_share('A', 'B');
ok($weighted >= 0.15 && $weighted <= 0.35,
	sprintf('with A given weight 3, B gets %.0f%% of %d admissions: 25%% +/- 10%%', 100 * $weighted, $n2));
note sprintf('B share of admissions: FIFO %.2f, tenants %.2f, A weighted 3: %.2f', $fifo, $fair, $weighted);
is($nb->safe_psql('postgres', q{SELECT tenant || ' ' || weight FROM redsem_tenants('tshare');}), 'A 3',
	'redsem_tenants on the other server: only the weight is left');
$na->safe_psql('postgres', q{SELECT redsem_set_tenant_weight('tshare', 'A', NULL);});

# a tenant alone may use the whole limit; both servers see who holds
my @alone = map { RedsemTest::Session->new($_ % 2 ? $na : $nb, name => "alone$_") } 1 .. 5;
$_->send(q{SELECT redsem_acquire('tshare', tenant => 'solo', wait => '60 s') IS NOT NULL;}) foreach @alone;
wait_until(20, sub { $redis->zcard('tshare', 'owner') == 5 }) or diag('the five did not arrive');
is($na->safe_psql('postgres', q{SELECT permits_held || ' ' || waiting FROM redsem_semaphore('tshare');}), '4 1',
	'tenant "solo" alone holds all 4 permits, its fifth session waits');
is($nb->safe_psql('postgres', q{SELECT coalesce(tenant, '-') || ' ' || permits_held || ' ' || waiting FROM redsem_tenants('tshare');}),
	'solo 4 1', 'redsem_tenants on the other server: solo holds 4, 1 waits');
is($na->safe_psql('postgres', q{SELECT string_agg(DISTINCT tenant, ',') FROM redsem_holders('tshare');}), 'solo',
	'redsem_holders shows the tenant of each member');
my $other = RedsemTest::Session->new($nb, name => 'other');
$other->send(q{SELECT redsem_acquire('tshare', tenant => 'other', wait => '60 s') IS NOT NULL;});
wait_until(20, sub { $redis->zcard('tshare', 'waiting') == 2 }) or diag('other did not queue');
is($na->safe_psql('postgres', q{SELECT waiting || ' ' || tenants_waiting FROM redsem_semaphores() WHERE name = 'tshare';}),
	'2 2', 'redsem_semaphores: 2 waiting, of 2 tenants (solo and other)');
my @done;
foreach my $s (@alone)
{
	my ($o) = $s->wait_done(1);
	push @done, $s if defined $o;
}
$done[0]->query(q{SELECT redsem_release_all();});
my ($got) = $other->wait_done(20);
is($got, 't', 'once one of solo\'s permits is free, tenant "other" gets it, though solo\'s fifth came first');
$_->quit foreach @alone, $other;

# statement queues: the tenant from redsem.queue_tenant
$na->safe_psql('postgres', q{
CREATE ROLE acme LOGIN;
ALTER ROLE acme SET redsem.queue = 'qt';
ALTER ROLE acme SET redsem.queue_tenant = '%u';
GRANT EXECUTE ON FUNCTION pg_sleep(float8) TO PUBLIC;
});
# (the statement waits for an advisory lock the test holds until it has
# looked, not for a sleep that a slow machine could outlast)
my $locker = RedsemTest::Session->new($na, name => 'locker');
$locker->query_ok('SELECT pg_advisory_lock(6606);');
my $q = RedsemTest::Session->new($na, name => 'acme', user => 'acme');
$q->send(q{SELECT pg_advisory_xact_lock(6606) IS NULL;});
wait_until(20, sub { $redis->zcard('queue:qt', 'owner') == 1 }) or diag('the statement did not queue');
is($nb->safe_psql('postgres', q{SELECT tenant FROM redsem_holders('queue:qt');}), 'acme',
	'a statement of role acme, queued with redsem.queue_tenant = \'%u\', holds as tenant acme');
$locker->query_ok('SELECT pg_advisory_unlock(6606);');
$q->wait_done(20);
$q->quit;

# '%a': the tenant from application_name, a byte a tenant name cannot hold
# ('|', the script's field separator) made '_'
$na->safe_psql('postgres', q{
CREATE ROLE appy LOGIN;
ALTER ROLE appy SET redsem.queue = 'qt';
ALTER ROLE appy SET redsem.queue_tenant = 'app:%a';
});
$locker->query_ok('SELECT pg_advisory_lock(6606);');
my $qa = RedsemTest::Session->new($na, name => 'appy', user => 'appy', app => 'bi|tool');
$qa->send(q{SELECT pg_advisory_xact_lock(6606) IS NULL;});
wait_until(20, sub { $redis->zcard('queue:qt', 'owner') == 1 }) or diag('the statement did not queue');
is($nb->safe_psql('postgres', q{SELECT tenant FROM redsem_holders('queue:qt');}), 'app:bi_tool',
	'redsem.queue_tenant = \'app:%a\' with application_name "bi|tool": tenant "app:bi_tool"');
$locker->query_ok('SELECT pg_advisory_unlock(6606);');
$qa->wait_done(20);
$qa->quit;
$locker->quit;

node_log_is_clean($_, $_->name . "'s log shows no crash") foreach ($na, $nb);
$_->stop foreach ($na, $nb);
$redis->stop;
done_testing();
