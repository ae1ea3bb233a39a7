
# 000_release.pl - one version everywhere, and an install script for every
# released version plus an upgrade path to the current one.

use strict;
use warnings FATAL => 'all';

use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/..";

sub slurp
{
	my ($path) = @_;
	open(my $fh, '<', "$root/$path") or die "cannot read $path: $!";
	local $/;
	return <$fh>;
}

my ($version) = slurp('Makefile') =~ /^EXTVERSION = (\S+)$/m;
ok(defined $version, "the Makefile says EXTVERSION = " . ($version // '?'));
like(slurp('redsem.control'), qr/^default_version = '\Q$version\E'$/m,
	'redsem.control: default_version');
like(slurp('META.json'), qr/"version": "\Q$version\E"/, 'META.json: version');
like(slurp('META.json'), qr/"file": "redsem--\Q$version\E.sql"/, 'META.json: the install script');
like(slurp('src/compat.h'), qr/\.version = "\Q$version\E"/, 'src/compat.h: PostgreSQL 18 module magic');
like(slurp('debian/changelog'), qr/^redsem \(\Q$version\E(-\d+)?\)/, 'debian/changelog: the top entry');
like(slurp('CHANGELOG.md'), qr/^## \Q$version\E /m, 'CHANGELOG.md has an entry for it');
ok(-f "$root/redsem--$version.sql", "redsem--$version.sql exists");

# every released version can be installed, and updated to the current one
my @released = map { /^## (\d+\.\d+\.\d+) \((\d{4}-\d\d-\d\d)\)/ ? $1 : () }
  split /\n/, slurp('CHANGELOG.md');
ok(@released >= 1, 'released versions: @released');
foreach my $old (@released)
{
	ok(-f "$root/redsem--$old.sql", "redsem--$old.sql is kept (CREATE EXTENSION ... VERSION '$old')");
	next if $old eq $version;
	my %path = ($old => 1);
	my @todo = ($old);
	while (my $v = shift @todo)
	{
		foreach my $f (glob "$root/redsem--$v--*.sql")
		{
			my ($to) = $f =~ /--\Q$v\E--([^-]+)\.sql$/;
			push @todo, $to unless $path{$to}++;
		}
	}
	ok($path{$version}, "an upgrade path leads from $old to $version");
}
done_testing();
