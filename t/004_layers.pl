
# 004_layers.pl - the layering rule of docs/layout.md, checked: in src/, a
# module (x.c with x.h) includes only modules below it, so the include
# graph has no cycle; and the Redis client's lower layers never include
# the ones above them.  A cycle added by a change fails here, naming it.

use strict;
use warnings FATAL => 'all';

use FindBin;
use Test::More;

my $src = "$FindBin::RealBin/../src";

# module => { module it includes => 1 }
my %deps;
opendir(my $dh, $src) or die "cannot list $src: $!";
for my $file (sort grep { /\.[ch]$/ } readdir($dh))
{
	my ($module) = $file =~ /^(.*)\.[ch]$/;
	$deps{$module} //= {};
	open(my $fh, '<', "$src/$file") or die "cannot read $file: $!";
	while (my $line = <$fh>)
	{
		next unless $line =~ /^#include "([a-z_]+)\.h"/;
		next if $1 eq $module || !-f "$src/$1.h";
		$deps{$module}{$1} = 1;
	}
	close($fh);
}
closedir($dh);
cmp_ok(scalar(keys %deps), '>=', 20, scalar(keys %deps) . ' modules read');

# Depth-first search; the first cycle found, as a list of modules, or ()
sub find_cycle
{
	my (%state, @path);
	my $visit;
	$visit = sub {
		my ($m) = @_;
		$state{$m} = 1;
		push @path, $m;
		for my $d (sort keys %{ $deps{$m} })
		{
			next unless exists $deps{$d};
			if (($state{$d} // 0) == 1)
			{
				my ($at) = grep { $path[$_] eq $d } 0 .. $#path;
				return [ @path[ $at .. $#path ], $d ];
			}
			next if ($state{$d} // 0) == 2;
			my $c = $visit->($d);
			return $c if $c;
		}
		pop @path;
		$state{$m} = 2;
		return undef;
	};
	for my $m (sort keys %deps)
	{
		next if $state{$m};
		my $c = $visit->($m);
		return @$c if $c;
	}
	return ();
}

my @cycle = find_cycle();
is(join(' -> ', @cycle), '', 'the include graph of src/ has no cycle');

# Everything a module reaches through its includes
sub reach
{
	my ($m) = @_;
	my %seen;
	my @todo = keys %{ $deps{$m} };
	while (defined(my $d = shift @todo))
	{
		next if $seen{$d}++;
		push @todo, keys %{ $deps{$d} // {} };
	}
	return \%seen;
}

# The Redis client, bottom up: no layer reaches one above it
my @above = qw(conn script batch hold acquire keeper queue sqlfuncs observe fleet shmem);
for my $low (qw(redis_call sockwait report tls resolve secret link sentinel))
{
	my $r = reach($low);
	my @up = grep { $r->{$_} } @above;
	is("@up", '', "$low.c/.h reaches none of the layers above it");
}
my @conn_up = grep { reach('conn')->{$_} } qw(script batch hold acquire keeper queue sqlfuncs observe fleet shmem);
is("@conn_up", '', 'conn.c reaches nothing of the semaphore layers');

done_testing();
