
# 061_prometheus_exporter.pl - monitoring/postgres_exporter.yml with the real
# prometheus-postgres-exporter (the Debian package), started on a free
# loopback port against a test server, connecting as a pg_monitor member.
# The scraped /metrics must carry the redsem series with the values the
# views show, and the exporter must report no query error.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my ($exporter) = grep { -x } ($ENV{REDSEM_TEST_PG_EXPORTER} // (),
	'/usr/bin/prometheus-postgres-exporter', '/usr/sbin/prometheus-postgres-exporter');
plan skip_all => 'prometheus-postgres-exporter is not installed (Debian package prometheus-postgres-exporter; '
  . 'scripts/lib.sh installs it where the Debian release has it)'
  unless defined $exporter;
my $queries = "$FindBin::RealBin/../monitoring/postgres_exporter.yml";

my $redis = RedsemTest::Redis->new;
# room for 16 names' statistics: those beyond add up in one row (name NULL)
my $node = create_node('exported', $redis,
	"redsem.queues = 'reports: active_statements=2'\nredsem.max_tracked_semaphores = 16\n");
$node->safe_psql('postgres', q{CREATE ROLE metrics LOGIN IN ROLE pg_monitor;});

###########################################################################
note 'activity to export';

my $h = RedsemTest::Session->new($node, name => 'holder');
$h->query_ok(q{SELECT redsem_acquire('exp_a', 1, '60 s');});
my $w = RedsemTest::Session->new($node, name => 'waiter');
$w->send(q{SELECT redsem_acquire('exp_a', 1, '60 s', '60 s') IS NOT NULL;});
ok(defined wait_until(20, sub { $redis->zcard('exp_a', 'waiting') == 1 }), 'a session waits for exp_a');
# a wait that times out (about 300 ms), and some quick slots
my ($out, $err) = $node->psql('postgres', q{SELECT redsem_acquire('exp_a', 1, '60 s', '300 ms') IS NULL;});
$node->safe_psql('postgres',
	q{SELECT count(redsem_release('exp_b', redsem_acquire('exp_b', 3))) FROM generate_series(1, 5);});
# 20 names more: 14 get rows, 6 add up in the row whose name is NULL
$node->safe_psql('postgres',
	q{SELECT count(redsem_release('fill' || i, redsem_acquire('fill' || i, 1))) FROM generate_series(1, 20) i;});
is($node->safe_psql('postgres', 'SELECT acquired FROM redsem_stats WHERE name IS NULL'), '6',
	'the statistics table is full: 6 names add up in one row');

# an adaptive limit: the fleet's, from Redis
$node->safe_psql('postgres', q{SELECT redsem_set_adaptive_limit('exp_ad', 2, 6, 3);});
# a role whose queue is not defined: its sessions would run unqueued
$node->safe_psql('postgres', q{CREATE ROLE lost_analyst; ALTER ROLE lost_analyst SET redsem.queue = 'no_such_queue';});
# a queue defined in Redis: the keeper lists its server among those applying them
$node->safe_psql('postgres', q{SELECT redsem_create_queue('fleetq', 'active_statements=1');});
ok(defined wait_until(10, sub { $node->safe_psql('postgres', 'SELECT count(*) FROM redsem_queue_servers()') eq '1' }),
	'the keeper lists its server among those applying the queues of Redis');

###########################################################################
note 'the exporter';

my $port = PostgreSQL::Test::Cluster::get_free_port();
my $dir = PostgreSQL::Test::Utils::tempdir();
my $dsn = sprintf('host=%s port=%d user=metrics dbname=postgres sslmode=disable', $node->host, $node->port);
my $run = IPC::Run::start(
	[ $exporter, "--web.listen-address=127.0.0.1:$port", "--extend.query-path=$queries",
	  '--disable-default-metrics', '--disable-settings-metrics' ],
	'<', '/dev/null', '>', "$dir/exporter.log", '2>&1',
	init => sub { $ENV{DATA_SOURCE_NAME} = $dsn; });
my $http = HTTP::Tiny->new(timeout => 10);
my $metrics;
ok(defined wait_until(30, sub {
			my $r = $http->get("http://127.0.0.1:$port/metrics");
			$metrics = $r->{content} if $r->{success};
			return $r->{success} && $metrics =~ /^redsem_acquired_total/m;
		}), 'the exporter serves /metrics with redsem series')
  or diag(slurp_file("$dir/exporter.log"));
$metrics //= '';

# The value of one series (labels as given, in the exporter's order), or undef
sub series
{
	my ($name, $labels) = @_;
	foreach my $line (split /\n/, $metrics)
	{
		next unless $line =~ /^\Q$name\E\{([^}]*)\}\s+(\S+)\s*$/;
		my ($l, $v) = ($1, $2);
		my %have = map { /^(\w+)="(.*)"$/ ? ($1 => $2) : () } split /,/, $l;
		return $v + 0 unless grep { ($have{$_} // '') ne $labels->{$_} } keys %$labels;
	}
	return undef;
}

my %stats;
@stats{qw(acquired refused waited timeouts released wait_s longest_s)} = split /\|/, $node->safe_psql('postgres',
	q{SELECT acquired, refused, waited, wait_timeouts, released,
	         extract(epoch FROM total_wait_time), extract(epoch FROM longest_wait)
	  FROM redsem_stats WHERE name = 'exp_a'});
is(series('redsem_acquired_total', { semaphore => 'exp_a' }), $stats{acquired}, 'redsem_acquired_total = redsem_stats.acquired');
is(series('redsem_wait_timeouts_total', { semaphore => 'exp_a' }), $stats{timeouts}, 'redsem_wait_timeouts_total (1)');
is(series('redsem_released_total', { semaphore => 'exp_b' }), 5, 'redsem_released_total of exp_b: 5');
is(series('redsem_wait_seconds_count', { semaphore => 'exp_a' }), $stats{waited}, 'the wait histogram counts every wait');
cmp_ok(abs((series('redsem_wait_seconds_sum', { semaphore => 'exp_a' }) // -1) - $stats{wait_s}), '<', 0.01,
	'... and sums their seconds');
is(series('redsem_wait_seconds_bucket', { semaphore => 'exp_a', le => '+Inf' }), $stats{waited}, '... +Inf bucket = count');
is(series('redsem_wait_seconds_bucket', { semaphore => 'exp_a', le => '0.1' }), 0, '... the 300 ms wait is not in le=0.1');
is(series('redsem_wait_seconds_bucket', { semaphore => 'exp_a', le => '1' }), $stats{waited}, '... but in le=1');
cmp_ok(series('redsem_longest_wait_seconds', { semaphore => 'exp_a' }) // 0, '>=', 0.3, 'redsem_longest_wait_seconds');
is(series('redsem_server_holding', { semaphore => 'exp_a' }), 1, 'redsem_server_holding: 1 (redsem_activity)');
is(series('redsem_server_waiting', { semaphore => 'exp_a' }), 1, 'redsem_server_waiting: 1');
cmp_ok(series('redsem_server_oldest_wait_seconds', { semaphore => 'exp_a' }) // 0, '>', 0, 'redsem_server_oldest_wait_seconds');
is(series('redsem_acquired_total', { semaphore => '' }), 6,
	'the names beyond redsem.max_tracked_semaphores: one series, semaphore=""');
is(series('redsem_wait_seconds_bucket', { semaphore => '', le => '+Inf' }), 0, '... in the histogram too');
is(series('redsem_keeper_up', {}), 1, 'redsem_keeper_up: 1');
is(series('redsem_queue_active_statements', { queue => 'reports' }), 2, 'redsem_queue_active_statements of "reports"');
is(series('redsem_queue_running', { queue => 'reports' }), 0, 'redsem_queue_running (from Redis)');
is(series('redsem_queue_setting_differs', { queue => 'reports' }), 0, 'redsem_queue_setting_differs');
is(series('redsem_queue_defined_in_redis', { queue => 'reports' }), 0, 'redsem_queue_defined_in_redis (by redsem.queues here)');
is(series('redsem_queue_config_undefined_settings', {}), 1, 'redsem_queue_config_undefined_settings: a role naming no queue');
is(series('redsem_queue_config_servers', {}), 1, 'redsem_queue_config_servers: this server applies the queues of Redis');
my $ad = series('redsem_adaptive_limit', { semaphore => 'exp_ad' });
ok(defined $ad && $ad >= 2 && $ad <= 6, 'redsem_adaptive_limit of an adaptive semaphore, within its bounds');
is(series('redsem_adaptive_max', { semaphore => 'exp_ad' }), 6, 'redsem_adaptive_max: its upper bound');
like($metrics, qr/^redsem_adaptive_last_move_age_seconds\{[^}]*last_move="(set|cpu)"[^}]*semaphore="exp_ad"/m,
	'redsem_adaptive_last_move_age_seconds, labelled with why it last moved');
like($metrics, qr/^pg_exporter_last_scrape_error(\{[^}]*\})? 0$/m, 'the exporter reports no scrape error');
unlike($metrics, qr/^pg_exporter_user_queries_load_error\{[^}]*\} 1$/m, 'and loaded the queries file');
# every series the Grafana dashboard draws is one the exporter serves
my $dashboard = JSON::PP::decode_json(slurp_file("$FindBin::RealBin/../monitoring/grafana-dashboard.json"));
my %used;
foreach my $panel (@{ $dashboard->{panels} })
{
	$used{$_} = 1 foreach map { $_->{expr} =~ /\b(redsem_\w+)/g } @{ $panel->{targets} // [] };
}
my @missing = grep { $metrics !~ /^\Q$_\E[{ ]/m } sort keys %used;
cmp_ok(scalar(keys %used), '>=', 10, 'the dashboard draws ' . scalar(keys %used) . ' redsem series');
is("@missing", '', 'and the exporter serves every one of them');

my $log = slurp_file("$dir/exporter.log");
unlike($log, qr/error running query|Error running query|level=error/i, 'and logged no query error')
  or diag($log);

$run->kill_kill;
$h->quit;
$w->quit;
$node->stop;
done_testing();
