
# 062_readme_examples.pl - every SQL example in README.md and docs/*.md
# runs as written, and every link between them lands on what it names.
#
# Each ```sql block is run with psql (ON_ERROR_STOP, so \gset and friends
# work) against a server that preloads redsem.  Blocks under the same
# heading of a file share a database, made fresh for that heading (with
# CREATE EXTENSION redsem unless a block of the heading does it), so a later
# block may use what an earlier one created, as a reader would.  What an
# example assumes of the reader's own database (a table, a role) is given in
# an HTML comment just above the block, which GitHub does not show:
#   <!-- readme-test setup: CREATE ROLE alice; -->
# Links: a relative link must name a file of the repository, and its
# #fragment an anchor of that file (a heading, as GitHub makes its id, or an
# <a id="...">).
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $top = "$FindBin::RealBin/..";
my @docs = ('README.md', map { s{^\Q$top\E/}{}r } sort glob("$top/docs/*.md"));

# The SQL blocks: [file: heading, setup SQL, block SQL, line]
my @blocks;
foreach my $file (@docs)
{
	my ($heading, $setup, $in, $sql, $start) = ("$file: (top)", '', 0, '', 0);
	my $n = 0;
	foreach my $line (split /\n/, slurp_file("$top/$file"))
	{
		$n++;
		if ($in)
		{
			if ($line =~ /^```\s*$/)
			{
				push @blocks, [ $heading, $setup, $sql, "$file line $start" ] if $in eq 'sql';
				($in, $sql, $setup) = (0, '', '');
			}
			else { $sql .= "$line\n"; }
			next;
		}
		if ($line =~ /^```(\w*)/) { ($in, $start) = ($1 || 'other', $n); next; }
		if ($line =~ /^#{1,4} (.*)/) { ($heading, $setup) = ("$file: $1", ''); next; }
		if ($line =~ /^<!-- readme-test setup: (.*) -->\s*$/) { $setup .= "$1\n"; next; }
		$setup = '' if $line =~ /\S/;
	}
}

# The anchors of a Markdown file: its headings' ids (GitHub's way: lower
# case, punctuation dropped, blanks made '-', a repeated id numbered) and
# its <a id>s
sub anchors_of
{
	my ($text) = @_;
	my (%a, %seen);
	my $in = 0;
	foreach my $line (split /\n/, $text)
	{
		if ($line =~ /^```/) { $in = !$in; next; }
		next if $in;
		if ($line =~ /^#{1,6} (.*)/)
		{
			my $id = lc $1;
			$id =~ s/<[^>]*>//g;
			$id =~ s/[^\w\- ]//g;
			$id =~ s/ /-/g;
			my $k = $seen{$id}++;
			$a{ $k ? "$id-$k" : $id } = 1;
		}
		$a{$1} = 1 while $line =~ /<a id="([^"]+)"><\/a>/g;
	}
	return \%a;
}

my $links = 0;
foreach my $file (@docs)
{
	my $text = slurp_file("$top/$file");
	(my $dir = $file) =~ s{[^/]*$}{};
	# (outside code: a block's brackets are not links)
	(my $prose = $text) =~ s/^```.*?^```//msg;
	while ($prose =~ /\[([^\]]*)\]\(([^)\s]+)\)/g)
	{
		my ($label, $target) = ($1, $2);
		next if $target =~ /^(https?|mailto):/;
		$links++;
		my ($path, $frag) = split /#/, $target, 2;
		my $full = $path eq '' ? $file : "$dir$path";
		1 while $full =~ s{[^/]+/\.\./}{};
		if (!-e "$top/$full")
		{
			fail("$file: link to $target: no file $full");
			next;
		}
		next unless defined $frag && $full =~ /\.md$/;
		next if anchors_of(slurp_file("$top/$full"))->{$frag};
		fail("$file: link [$label]($target): $full has no anchor $frag");
	}
}
cmp_ok($links, '>=', 50, "$links links between README.md and docs/ were checked");

cmp_ok(scalar @blocks, '>=', 8, 'README.md and docs/ have ' . scalar(@blocks) . ' SQL examples');

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
	is($ret, 0, "$line ($heading) runs as written")
	  or diag("SQL:\n$sql\nstderr:\n$err");
	unlike($err // '', qr/ERROR/, "... without an error ($line)");
}

$node->stop;
done_testing();
