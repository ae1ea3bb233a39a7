
=pod

=head1 NAME

RedsemHistory - a history checker for redsem's limit (issue 48, D)

=head1 SYNOPSIS

  RedsemHistory::install($node);                     # once per server
  my @w = RedsemHistory::start($node, 'h', 4, limit => 2, lease => '3 s',
      hold => 0.3, wait => '20 s', run => 12);        # 4 guarded sessions
  ... inject a fault ...
  RedsemHistory::finish(@w);
  my $r = RedsemHistory::check([ $node, $other ], 'h', 2);
  is($r->{over}, 0, 'never more than 2 at once');

=head1 DESCRIPTION

Each guarded session loops in one procedure on its server: it takes a slot
of the semaphore, logs "start" from inside PostgreSQL, runs its work
(pg_sleep), logs "end", gives the slot back.  When the work is stopped
(the lost-slot error, a cancel), it logs "lost" where the work really
ended: the procedure catches the cancel after PostgreSQL has aborted the
work.  Times are read from /proc/uptime, the machine's boot clock, which
every server on the machine shares and which neither faketime nor a step
of the wall clock moves (10 ms steps: an end and a start read the same
tick count as not overlapping, since the clock never goes back).

The checker reads the "hist" lines of every server's log and asserts, Jepsen
style, that at no instant more than N intervals overlap.  An interval whose
end is unknown (its session died) counts as running until the last time
the history saw.

=cut

package RedsemHistory;

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Utils;
use Carp;

# The machine's boot clock, in seconds (as the procedure reads it)
sub uptime
{
	open(my $fh, '<', '/proc/uptime') or croak "/proc/uptime: $!";
	my ($s) = split / /, scalar <$fh>;
	close $fh;
	return $s + 0;
}

=pod

=over

=item logged_intervals($tag, @nodes)

The work that statements logged in the server logs of @nodes, as a list
of { start, end } (seconds of uptime()): each a "WARNING:  hist $tag start
<t> <pid>" line and the "end" line of the same server and pid after it.
A start without its end is left out.

=cut

sub logged_intervals
{
	my ($tag, @nodes) = @_;
	my (@iv, %open);

	for my $k (0 .. $#nodes)
	{
		for my $line (split /\n/, slurp_file($nodes[$k]->logfile))
		{
			next unless $line =~ /WARNING:  hist \Q$tag\E (start|end) ([\d.]+) (\d+)/;
			my ($what, $t, $key) = ($1, $2 + 0, "$k/$3");
			if ($what eq 'start') { $open{$key} = { start => $t }; next; }
			my $i = delete $open{$key} or next;
			$i->{end} = $t;
			push @iv, $i;
		}
	}
	return @iv;
}

=item install($node)

Create the guarded loop (procedure hist_loop) in database postgres.

=cut

sub install
{
	my ($node) = @_;
	$node->safe_psql('postgres', <<'SQL');
CREATE OR REPLACE FUNCTION hist_uptime() RETURNS numeric LANGUAGE sql
AS $$ SELECT split_part(pg_read_file('/proc/uptime'), ' ', 1)::numeric $$;
CREATE OR REPLACE PROCEDURE hist_loop(sem text, lim int, lease interval,
                                      hold_s float8, wait interval, run_s float8)
LANGUAGE plpgsql AS $$
DECLARE
  stop_at numeric := hist_uptime() + run_s;
  id text;
BEGIN
  WHILE hist_uptime() < stop_at LOOP
    BEGIN
      id := redsem_acquire(sem, lim, lease, wait);
      IF id IS NOT NULL THEN
        RAISE WARNING 'hist % start % %', sem, hist_uptime(), pg_backend_pid();
        BEGIN
          PERFORM pg_sleep(hold_s);
          RAISE WARNING 'hist % end % %', sem, hist_uptime(), pg_backend_pid();
        EXCEPTION WHEN query_canceled THEN
          RAISE WARNING 'hist % lost % % %', sem, hist_uptime(), pg_backend_pid(), SQLERRM;
        END;
        PERFORM redsem_release(sem, id);
      END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
      -- Redis unreachable, or stopped outside the work: note it, go on
      RAISE WARNING 'hist % error % % %', sem, hist_uptime(), pg_backend_pid(), SQLSTATE;
      PERFORM pg_sleep(0.05);
    END;
  END LOOP;
END $$;
SQL
	return;
}

=pod

=item start($node, $sem, $n, %opt)

Start $n sessions on $node, each running hist_loop for $opt{run} seconds
(limit, lease, hold, wait as named; no limit: the stored one; %opt{setup}:
SQL run first, such as a SET).  Returns the sessions.

=cut

sub start
{
	my ($node, $sem, $n, %o) = @_;
	my @s;
	for my $i (1 .. $n)
	{
		my $s = RedsemTest::Session->new($node, name => "hist-$sem-$i");
		$s->query_ok($o{setup}) if defined $o{setup};
		$s->send(sprintf("CALL hist_loop('%s', %s, '%s', %s, '%s', %s);",
			$sem, $o{limit} // 'NULL', $o{lease} // '3 s', $o{hold} // 0.3,
			$o{wait} // '20 s', $o{run} // 10));
		push @s, $s;
	}
	return @s;
}

=pod

=item finish(@sessions)

Wait for the sessions' loops to end, and quit them.

=cut

sub finish
{
	for my $s (@_)
	{
		$s->wait_done(120);
		$s->quit;
	}
	return;
}

=pod

=item check(\@nodes, $sem, $limit, %opt)

Read the history of $sem from the nodes' logs and return a hash: grants
(intervals), lost (intervals ended by a stop), over (starts that made more
than $limit run at once), max_inside, over_s (seconds with more than
$limit running), errors (failed tries), and, with $opt{fault_at} (an
uptime), late (the longest a stopped interval ran after it).

=cut

sub check
{
	my ($nodes, $sem, $limit, %o) = @_;
	my (@iv, %open, $last);
	my $errors = 0;

	for my $k (0 .. $#$nodes)
	{
		for my $line (split /\n/, slurp_file($nodes->[$k]->logfile))
		{
			next unless $line =~ /WARNING:  hist (\S+) (start|end|lost|error) ([\d.]+) (\d+)/;
			next unless $1 eq $sem;
			my ($what, $t, $key) = ($2, $3 + 0, "$k/$4");
			$last = $t if !defined $last || $t > $last;
			if ($what eq 'error') { $errors++; next; }
			if ($what eq 'start')
			{
				croak "two starts without an end in $key" if $open{$key};
				$open{$key} = { start => $t, key => $key };
				next;
			}
			my $i = delete $open{$key} or next;
			$i->{end} = $t;
			$i->{lost} = ($what eq 'lost');
			push @iv, $i;
		}
	}
	# an end never seen: running until the last moment the history knows
	for my $i (values %open) { $i->{end} = $last; push @iv, $i; }

	# at one tick, ends (-1) before starts (+1): half-open intervals
	my @ev = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] }
	  (map { ([ $_->{start}, 1 ], [ $_->{end}, -1 ]) } @iv);
	my ($inside, $max, $over, $over_s, $since) = (0, 0, 0, 0, undef);
	for my $e (@ev)
	{
		$inside += $e->[1];
		$max = $inside if $inside > $max;
		if ($e->[1] > 0 && $inside > $limit) { $over++; $since //= $e->[0]; }
		if ($inside <= $limit && defined $since) { $over_s += $e->[0] - $since; $since = undef; }
	}
	my %r = (grants => scalar(@iv), lost => scalar(grep { $_->{lost} } @iv),
		over => $over, max_inside => $max, over_s => $over_s, errors => $errors);
	if (defined $o{fault_at})
	{
		my @late = map { $_->{end} - $o{fault_at} } grep { $_->{lost} } @iv;
		$r{late} = @late ? (sort { $b <=> $a } @late)[0] : 0;
	}
	return \%r;
}

=pod

=item line($fault, $r)

The result as one line of the README's table.

=cut

sub line
{
	my ($fault, $r) = @_;
	return sprintf("| %s | %d | %d | %d | %s |", $fault, $r->{grants}, $r->{over},
		$r->{lost}, defined $r->{late} ? sprintf('%.2f s', $r->{late}) : '-');
}

=pod

=back

=cut

1;
