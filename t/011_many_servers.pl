
# 011_many_servers.pl - one semaphore shared by several PostgreSQL servers.
#
# Two independent primaries (a, b: separate initdb) and a hot standby of a
# (a_standby), all preloading redsem and using the same Redis.  The limit
# holds across all of them at once, holders show which server they are on,
# and a server's crash-restart cleanup only ever releases its own holds.
#
# How "inside" is tracked without redsem: the servers share no table (and
# the standby is read-only), so every client is a psql script that, after
# each successful acquire, reads clock_timestamp() (t1) in a statement of
# its own, sleeps a little, reads clock_timestamp() again (t2), and only then
# releases; it prints "IN server client t1 t2 released".  All servers run on
# this one machine and read the same clock, and t1 is read after Redis
# granted the slot while t2 is read before Redis took it back, so each
# [t1, t2] lies inside the real holding period.  If redsem ever let more
# than the limit in at once, those periods would overlap more than the
# limit.  The converse cannot happen: the check never reports a violation
# that did not occur (it may miss very short ones, which the many
# iterations make up for).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time);

my $LIMIT = 3;

my $redis = RedsemTest::Redis->new;
my $sock = $redis->socket;

# Like RedsemTest::create_node, but with init options (a needs WAL for a
# standby).  The node name becomes cluster_name, which redsem reports as
# the holder's server.
sub make_node
{
	my ($name, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf('postgresql.conf', <<"EOC");
shared_preload_libraries = 'redsem'
redsem.unix_socket = '$sock'
max_connections = 50
log_min_messages = warning
restart_after_crash = on
EOC
	$node->append_conf('postgresql.conf', connection_mode_conf());
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION redsem');
	return $node;
}

my $node_a = make_node('a', allows_streaming => 1);
my $node_b = make_node('b');
$node_a->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('a_standby');
$standby->init_from_backup($node_a, 'bk', has_streaming => 1);
$standby->start;
$node_a->wait_for_catchup($standby, 'replay', $node_a->lsn('insert'));
my @servers = ($node_a, $node_b, $standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'a_standby is a hot standby');
ok($_->poll_query_until('postgres', 'SELECT redsem_keeper_active()'),
	$_->name . ': the keeper runs')
  foreach @servers;

sub session
{
	my ($node, $label) = @_;
	return RedsemTest::Session->new($node, name => $label);
}

###########################################################################
note 'acquire works on the standby';

my $st = session($standby, 'standby');
my $sid = $st->query_ok(q{SELECT redsem_acquire('on_standby', 1, '60 s');});
like($sid, qr/^[0-9a-f]{16}\.\d+\./, 'the standby acquires a slot');
is($node_a->safe_psql('postgres', q{SELECT redsem_acquire('on_standby', 1, '60 s') IS NULL}),
	't', 'which a primary then cannot get');
is($st->query_ok(qq{SELECT redsem_release('on_standby', '$sid');}),
	't', 'the standby releases it');
is($node_b->safe_psql('postgres', q{SELECT redsem_acquire('on_standby', 1, '60 s') IS NOT NULL}),
	't', 'then another server gets it');
$st->quit;

###########################################################################
note 'concurrent load on all three servers';

# One client: $iters rounds of acquire (try-once, or waiting up to 10 s),
# and when granted: t1, a short stay inside, t2, release.
sub client_script
{
	my ($server, $client, $iters, $wait) = @_;
	my $round = <<"EOS";
SELECT coalesce(x, '-') AS id, x IS NOT NULL AS got FROM redsem_acquire('many', $LIMIT, '30 s', '$wait') x \\gset
\\if :got
SELECT extract(epoch FROM clock_timestamp()) AS t1 \\gset
SELECT pg_sleep(0.002) AS z \\gset
SELECT extract(epoch FROM clock_timestamp()) AS t2 \\gset
SELECT redsem_release('many', :'id') AS rel \\gset
\\echo IN $server $client :t1 :t2 :rel
\\else
\\echo OUT $server $client
\\endif
EOS
	return $round x $iters;
}

my @clients;
foreach my $node (@servers)
{
	foreach my $i (1 .. 4)
	{
		my $waiting = $i > 2;
		my $name = $node->name . "_$i";
		my $file = $node->basedir . "/client_$i.sql";
		PostgreSQL::Test::Utils::append_to_file($file,
			client_script($node->name, $name,
				$waiting ? 80 : 300, $waiting ? '10 s' : '0'));
		my %c = (name => $name, server => $node->name, waiting => $waiting,
			out => '', err => '');
		$c{h} = IPC::Run::start(
			[
				$node->installed_command('psql'), '-XAtq',
				'-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr('postgres'), '-f', $file
			],
			'<', '/dev/null', '>', \$c{out}, '2>', \$c{err},
			IPC::Run::timeout(180));
		push @clients, \%c;
	}
}

my $t0 = time;
my (@intervals, %got, %refused);
my $bad_release = 0;
foreach my $c (@clients)
{
	my $ok = eval { $c->{h}->finish; 1 } && $c->{h}->result == 0;
	ok($ok, "client $c->{name} finished without error")
	  or diag("stderr of $c->{name}: $c->{err}");
	foreach my $line (split /\n/, $c->{out})
	{
		if ($line =~ /^IN (\S+) (\S+) ([\d.]+) ([\d.]+) (\w)$/)
		{
			push @intervals, [ $3, $4, $1, $2 ];
			$got{ $c->{name} }++;
			$bad_release++ if $5 ne 't';
		}
		elsif ($line =~ /^OUT /)
		{
			$refused{ $c->{name} }++;
		}
	}
}
note sprintf('load ran %.1f s', time - $t0);
note join(', ', map {
	sprintf('%s: %d in, %d refused', $_->{name}, $got{ $_->{name} } // 0,
		$refused{ $_->{name} } // 0)
} @clients);

foreach my $c (@clients)
{
	my $n = ($got{ $c->{name} } // 0) + ($refused{ $c->{name} } // 0);
	is($n, $c->{waiting} ? 80 : 300, "client $c->{name} reported every round");
	is($refused{ $c->{name} } // 0, 0, "waiting client $c->{name} always got in")
	  if $c->{waiting};
}
is($bad_release, 0, 'every release of a granted slot returned true');

# Sweep over the [t1, t2] periods; at equal times an end counts before a
# start (so the check can only err on the side of too few).
my @events = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] }
  ((map { [ $_->[0], +1, $_ ] } @intervals),
	(map { [ $_->[1], -1, $_ ] } @intervals));
my ($inside, $max, $cross_server) = (0, 0, 0);
my %open;
foreach my $e (@events)
{
	if ($e->[1] > 0)
	{
		$open{ $e->[2] } = $e->[2];
		$inside++;
		my %srv = map { $_->[2] => 1 } values %open;
		$cross_server = 1 if keys %srv > 1;
	}
	else
	{
		delete $open{ $e->[2] };
		$inside--;
	}
	$max = $inside if $inside > $max;
}
note sprintf('%d periods inside; at most %d at once', scalar @intervals, $max);
cmp_ok(scalar @intervals, '>=', 100, 'a meaningful number of acquires succeeded');
cmp_ok($max, '<=', $LIMIT, "never more than $LIMIT inside at once across the three servers (max $max)");
cmp_ok($max, '>=', 2, 'clients really were inside together');
ok($cross_server, 'clients of different servers were inside at the same time');
my %servers_in = map { $_->[2] => 1 } @intervals;
is(join(',', sort keys %servers_in), 'a,a_standby,b', 'clients of every server got in');
is($redis->zcard('many', 'owner'), 0, 'no holder left behind in Redis');

###########################################################################
note 'redsem_holders shows holders of every server';

my %s;
$s{$_->name} = session($_, $_->name) foreach @servers;
my %ids;
foreach my $name (qw(a b a_standby))
{
	$ids{$name} = $s{$name}->query_ok(qq{SELECT redsem_acquire('mix', 5, '60 s');});
	like($ids{$name}, qr/^[0-9a-f]{16}\./, "$name holds a slot of mix");
}
my %tag = map { $_ => substr($ids{$_}, 0, 16) } keys %ids;
is(scalar(keys %{ { reverse %tag } }), 3, 'each server has its own holder-id tag');
my $expected = join("\n",
	map { "$_|holding|$ids{$_}|" . $s{$_}->backend_pid } qw(a b a_standby));
is($node_b->safe_psql('postgres',
		q{SELECT server, state, id, pid FROM redsem_holders('mix') ORDER BY position}),
	$expected, 'redsem_holders, seen from b, lists the holders of a, b and a_standby in order');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM redsem_holders('mix')}),
	'3', '... and the standby sees the same three');

###########################################################################
note "a crash-restart of b releases only b's holds";

# (b's hold is in b's hold table, which outlives the crash-restart)
my $off = -s $node_b->logfile;
kill 'KILL', $s{b}->backend_pid;
ok(defined wait_until(60, sub {
	slurp_file($node_b->logfile, $off) =~ /released 1 slot\(s\) held before the server restarted/ }),
	"b crash-restarted and its keeper released b's 1 slot");
ok(poll_through_restart($node_b, 'SELECT redsem_keeper_active()'),
	"b is back, with its keeper");
is($node_a->safe_psql('postgres',
		q{SELECT server, id FROM redsem_holders('mix') ORDER BY position}),
	"a|$ids{a}\na_standby|$ids{a_standby}",
	"the holds of a and a_standby are still listed");
is($s{a}->query_ok(q{SELECT kept_alive FROM redsem_held();}), 't',
	'a still keeps its hold alive');
is($s{a}->query_ok(qq{SELECT redsem_release('mix', '$ids{a}');}), 't',
	'a releases its slot: it was live');
is($s{a_standby}->query_ok(qq{SELECT redsem_release('mix', '$ids{a_standby}');}), 't',
	'a_standby releases its slot: it was live');
is($redis->zcard('mix', 'owner'), 0, 'mix is empty');
is(slurp_file($node_a->logfile) =~ /terminated by signal/ ? 1 : 0, 0, 'a did not crash');
$s{$_}->quit foreach qw(a a_standby);
$s{b}->quit;

node_log_is_clean($node_a, 'a: no crash in the log');
node_log_is_clean($standby, 'a_standby: no crash in the log');

$standby->stop;
$node_a->stop;
$node_b->stop;
$redis->stop;
done_testing();
