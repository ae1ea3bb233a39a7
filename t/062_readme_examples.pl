
# 062_readme_examples.pl - every SQL example in README.md runs as written.
#
# Each ```sql block is run with psql (ON_ERROR_STOP, so \gset and friends
# work) against a server that preloads redsem.  Blocks under the same
# heading share a database, made fresh for that heading (with CREATE
# EXTENSION redsem unless a block of the heading does it), so a later block
# may use what an earlier one created, as a reader would.  What an example
# assumes of the reader's own database (a table, a role) is given in an HTML
# comment just above the block, which GitHub does not show:
#   <!-- readme-test setup: CREATE ROLE alice; -->
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $readme = slurp_file("$FindBin::RealBin/../README.md");

# The README's SQL blocks: [heading, setup SQL, block SQL, line]
my @blocks;
{
	my ($heading, $setup, $in, $sql, $start) = ('(top)', '', 0, '', 0);
	my $n = 0;
	foreach my $line (split /\n/, $readme)
	{
		$n++;
		if ($in)
		{
			if ($line =~ /^```\s*$/)
			{
				push @blocks, [ $heading, $setup, $sql, $start ] if $in eq 'sql';
				($in, $sql, $setup) = (0, '', '');
			}
			else { $sql .= "$line\n"; }
			next;
		}
		if ($line =~ /^```(\w*)/) { ($in, $start) = ($1 || 'other', $n); next; }
		if ($line =~ /^#{2,3} (.*)/) { ($heading, $setup) = ($1, ''); next; }
		if ($line =~ /^<!-- readme-test setup: (.*) -->\s*$/) { $setup .= "$1\n"; next; }
		$setup = '' if $line =~ /\S/;
	}
}
cmp_ok(scalar @blocks, '>=', 8, 'README.md has ' . scalar(@blocks) . ' SQL examples');

my $redis = RedsemTest::Redis->new;
my $node = create_node('readme', $redis);

my %db_of;
my $dbs = 0;
foreach my $b (@blocks)
{
	my ($heading, $setup, $sql, $line) = @$b;
	my $db = $db_of{$heading};
	if (!defined $db)
	{
		$db = $db_of{$heading} = 'readme_' . ++$dbs;
		$node->safe_psql('postgres', qq{CREATE DATABASE $db;});
		my $creates = grep { $_->[0] eq $heading && $_->[2] =~ /CREATE EXTENSION redsem/ } @blocks;
		$node->safe_psql($db, 'CREATE EXTENSION redsem;') unless $creates;
	}
	$node->safe_psql($db, $setup) if $setup ne '';
	my ($ret, $out, $err) = $node->psql($db, $sql, on_error_stop => 1);
	is($ret, 0, "README.md line $line ($heading) runs as written")
	  or diag("SQL:\n$sql\nstderr:\n$err");
	unlike($err // '', qr/ERROR/, "... without an error (line $line)");
}

$node->stop;
done_testing();
