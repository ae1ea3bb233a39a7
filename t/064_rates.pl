# 064_rates.pl - a rate stored with a semaphore holds across servers: two
# PostgreSQL servers share a Redis; one stores "10/s" with a burst of 2;
# sessions on both take slots in a loop, each waiting in line.  Checked:
# every session gets its turns; over the run, and over every span between
# two grants, no more callers got in than the burst plus the rate allow
# (grant times by Redis's clock: a grant's fencing token is the clock in
# microseconds when it was granted, so no slack for a loaded machine is
# needed); waiters kept out by the rate are woken when their turn
# comes, not by polling (the script calls per admission are counted); a
# caller that does not wait is refused with the time the rate names; the
# other server sees the rate in redsem_rate() and redsem_semaphores().
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my ($RATE, $BURST, $PER_SESSION) = (10, 2, 5);

my $redis = RedsemTest::Redis->new;
my $na = create_node('rate_a', $redis);
my $nb = create_node('rate_b', $redis);

# a loop of turns: take a slot (waiting up to 30 s), note its fencing token
# (Redis's clock at the grant, in microseconds), give it back
my $turns = q{
CREATE FUNCTION take_turns(n int) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. n LOOP
        IF redsem_acquire('rt_x', 10, wait => '30 s') IS NULL THEN
            RAISE EXCEPTION 'no turn within 30 s';
        END IF;
        RETURN QUERY SELECT token FROM redsem_held() WHERE name = 'rt_x';
        PERFORM redsem_release_all();
    END LOOP;
END $$;
};
$_->safe_psql('postgres', $turns) foreach ($na, $nb);

$na->safe_psql('postgres', qq{SELECT redsem_set_rate('rt_x', '$RATE/s', burst => $BURST);});
is($nb->safe_psql('postgres', q{SELECT rate || ' ' || burst FROM redsem_rate('rt_x');}), "$RATE/s $BURST",
	'the other server reads the rate stored on the first');

# the script calls made from now on
$redis->cli('CONFIG', 'RESETSTAT');

my @sessions = map {
	RedsemTest::Session->new($_->[0], name => $_->[1])
} ([ $na, 'a1' ], [ $na, 'a2' ], [ $na, 'a3' ], [ $nb, 'b1' ], [ $nb, 'b2' ], [ $nb, 'b3' ]);
$_->send("SELECT * FROM take_turns($PER_SESSION);") foreach @sessions;
my @grants;
my $all_got = 1;
foreach my $s (@sessions)
{
	my ($out, $err) = $s->wait_done(120);
	my @t = defined $out ? map { $_ / 1e6 } grep { /^\d+$/ } split /\n/, $out : ();
	$all_got = 0 unless @t == $PER_SESSION;
	diag("$s->{name}: $err") if @t != $PER_SESSION;
	push @grants, @t;
}
my $n = @grants;
ok($all_got, "every session of both servers got its $PER_SESSION turns ($n in all)");
@grants = sort { $a <=> $b } @grants;

my $span = $grants[-1] - $grants[0];
my $need = ($n - $BURST) / $RATE;
cmp_ok($span, '>=', $need - 1e-6,
	sprintf('%d grants took %.2f s: the rate (%d/s, burst %d) needs at least %.1f s', $n, $span, $RATE, $BURST, $need));

my $worst = '';
for my $j (0 .. $#grants)
{
	for my $i (0 .. $j)
	{
		my $allowed = $BURST + ($grants[$j] - $grants[$i] + 1e-6) * $RATE;
		$worst = sprintf('%d grants within %.3f s', $j - $i + 1, $grants[$j] - $grants[$i])
		  if $j - $i + 1 > $allowed;
	}
}
is($worst, '', 'no span between two grants saw more than the burst plus the rate allows');

my ($stats) = $redis->cli('INFO', 'commandstats');
my ($fcalls) = $stats =~ /cmdstat_fcall:calls=(\d+)/;
$fcalls //= 0;
cmp_ok($fcalls, '<=', 8 * $n,
	sprintf('waiters were woken in time, not polling: %d script calls for %d turns (%.1f each)', $fcalls, $n, $fcalls / $n));

# a caller that does not wait
$na->safe_psql('postgres', q{SELECT redsem_set_rate('rt_y', '1/hour');});
is($nb->safe_psql('postgres', q{SELECT redsem_acquire('rt_y', 3) IS NOT NULL; SELECT redsem_acquire('rt_y', 3) IS NULL;}),
	"t\nt", 'on the other server, one caller gets in and the next, not waiting, is refused with slots free');
my ($ret, $out, $err) = $nb->psql('postgres', q{SELECT redsem_guard('rt_y', 3);});
like($err, qr/ERROR:  could not obtain a slot of semaphore "rt_y".*\n.*DETAIL:  A slot was free, but the semaphore's rate \(redsem_set_rate\) lets the next caller in only 3[56]\d{5} ms from now\./,
	'redsem_guard says the rate kept it out, and for how long');
is($nb->safe_psql('postgres', q{SELECT name || ' ' || rate FROM redsem_semaphores() WHERE rate IS NOT NULL ORDER BY name;}),
	"rt_x $RATE/s\nrt_y 1/h", 'redsem_semaphores() on either server lists the rates');

$na->safe_psql('postgres', q{SELECT redsem_set_rate('rt_x', NULL); SELECT redsem_set_rate('rt_y', NULL);});
node_log_is_clean($_, $_->name . "'s log shows no crash") foreach ($na, $nb);

$_->stop foreach ($na, $nb);
$redis->stop;
done_testing();
