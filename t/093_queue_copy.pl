
# 093_queue_copy.pl - COPY table TO/FROM with utility=on while the queue
# is full queues like any utility statement (README: "COPY table TO is a
# utility statement (it queues only with utility=on)"); it used to pass,
# counted as a statement that runs one query (found by review).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time);

my $redis = RedsemTest::Redis->new;
my $node = create_node('review095', $redis,
	"redsem.queues = 'rep: active_statements=1 max_wait=300ms utility=on'\n");
$node->safe_psql('postgres', q{
CREATE ROLE hostile LOGIN;
ALTER ROLE hostile SET redsem.queue = 'rep';
CREATE TABLE facts AS SELECT g AS id, md5(g::text) AS body FROM generate_series(1, 1000) g;
CREATE TABLE sink (id int, body text);
GRANT SELECT ON facts TO hostile;
GRANT INSERT ON sink TO hostile;
});
my $h = RedsemTest::Session->new($node, name => 'hostile', user => 'hostile');
my $report = RedsemTest::Session->new($node, name => 'report', user => 'hostile');
$report->send(q{SELECT pg_sleep(60) FROM facts LIMIT 1;});
my $admin = RedsemTest::Session->new($node, name => 'admin');
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '1' }),
	'a report holds the only slot of "rep"');
my ($out, $err) = $h->query(q{COPY (SELECT * FROM facts) TO STDOUT;}, 30);
like($err, qr/55P03/, 'COPY (query) TO queues');
($out, $err) = $h->query(q{COPY facts TO STDOUT;}, 30);
diag 'COPY facts TO STDOUT: ' . length($out) . " bytes out, err=[$err]";
like($err, qr/55P03/, 'COPY table TO queues with utility=on (README)');
($out, $err) = $h->query(q{CREATE TEMP TABLE x (a int);}, 30);
diag "CREATE TEMP TABLE: err=[$err]";
like($err, qr/55P03/, 'other utility statements queue with utility=on');
# (its statement would run on: quitting waits for it)
$admin->query_ok('SELECT pg_cancel_backend(' . $report->backend_pid . ');');
$report->quit;
$_->quit foreach ($h, $admin);
$node->stop;
$redis->stop;
done_testing();
