
# 004_layers.pl - the layering rule of docs/layout.md, checked: in src/, a
# module (x.c with x.h) includes and calls only modules below it, so the
# graph of includes and calls together has no cycle; and the Redis
# client's lower layers never reach the ones above them.  A call or an
# include added by a change that runs back up, or closes a loop, fails
# here, naming the modules.  The checker is shown catching planted ones
# too, so that a change to it cannot quietly blind it.

use strict;
use warnings FATAL => 'all';

use File::Basename;
use FindBin;
use Test::More;

my $src = "$FindBin::RealBin/../src";

# The source files under a directory, recursively: { relative path => text }
sub read_tree
{
	my ($dir) = @_;
	my %files;
	my @todo = ($dir);
	while (defined(my $d = shift @todo))
	{
		opendir(my $dh, $d) or die "cannot list $d: $!";
		for my $e (sort grep { !/^\./ } readdir($dh))
		{
			my $path = "$d/$e";
			if (-d $path) { push @todo, $path; next; }
			next unless $e =~ /\.[ch]$/;
			open(my $fh, '<', $path) or die "cannot read $path: $!";
			local $/;
			$files{ substr($path, length($dir) + 1) } = <$fh>;
			close($fh);
		}
		closedir($dh);
	}
	return \%files;
}

# A module's name: its file's base name without .c or .h
sub module_of { my ($f) = @_; my $b = basename($f); $b =~ s/\.[ch]$//; return $b; }

# C text without comments, string and character literals
sub code_only
{
	my ($text) = @_;
	$text =~ s{/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'}
	  { my $m = $&; $m =~ tr/\n//cd; $m }gse;
	return $text;
}

# The graph: module => { module it includes or calls => 'include' | 'call' }
sub build_graph
{
	my ($files) = @_;
	my (%deps, %headers, %defined_in, %static_in, %called);

	$headers{ module_of($_) } = 1 for grep { /\.h$/ } keys %$files;
	for my $f (keys %$files)
	{
		my $m = module_of($f);
		$deps{$m} //= {};
		next unless $f =~ /\.c$/;
		my $code = code_only($files->{$f});
		# Functions defined here, PostgreSQL style: the name at the start
		# of a line, its type on the line before (static if so)
		while ($code =~ /^(static\s+)?[^\n;{}#]*\n([a-z_][a-z0-9_]*)\(/gm)
		{
			my ($static, $name) = ($1, $2);
			if ($static) { $static_in{$m}{$name} = 1; }
			else { $defined_in{$name} = $m; }
		}
	}
	for my $f (sort keys %$files)
	{
		my $m = module_of($f);
		for my $line (split /\n/, $files->{$f})
		{
			next unless $line =~ /^#include "([a-z_]+)\.h"/;
			next if $1 eq $m || !$headers{$1};
			$deps{$m}{$1} = 'include';
		}
		next unless $f =~ /\.c$/;
		my $code = code_only($files->{$f});
		while ($code =~ /(->|\.)?\s*\b([a-z_][a-z0-9_]*)\s*\(/g)
		{
			my ($member, $name) = ($1, $2);
			next if $member || $static_in{$m}{$name};
			my $to = $defined_in{$name};
			next if !defined $to || $to eq $m;
			$deps{$m}{$to} //= "call $name";
			$called{"$m $name"} = 1;
		}
	}
	return (\%deps, scalar(keys %called));
}

# Depth-first search; the first cycle found, as a list of steps (each module
# with the include or call that leads on), or ()
sub find_cycle
{
	my ($deps) = @_;
	my (%state, @path);
	my $visit;
	$visit = sub {
		my ($m) = @_;
		$state{$m} = 1;
		push @path, $m;
		for my $d (sort keys %{ $deps->{$m} })
		{
			next unless exists $deps->{$d};
			if (($state{$d} // 0) == 1)
			{
				my ($at) = grep { $path[$_] eq $d } 0 .. $#path;
				my @loop = (@path[ $at .. $#path ], $d);
				return [ (map { "$loop[$_] -($deps->{$loop[$_]}{$loop[$_ + 1]})" }
						0 .. $#loop - 1), $d ];
			}
			next if ($state{$d} // 0) == 2;
			my $c = $visit->($d);
			return $c if $c;
		}
		pop @path;
		$state{$m} = 2;
		return undef;
	};
	for my $m (sort keys %$deps)
	{
		next if $state{$m};
		my $c = $visit->($m);
		undef $visit if $c;
		return @$c if $c;
	}
	undef $visit;
	return ();
}

# Everything a module reaches through its includes and calls
sub reach
{
	my ($deps, $m) = @_;
	my %seen;
	my @todo = keys %{ $deps->{$m} };
	while (defined(my $d = shift @todo))
	{
		next if $seen{$d}++;
		push @todo, keys %{ $deps->{$d} // {} };
	}
	return \%seen;
}

# The Redis client, bottom up: the layers that may reach none above them
my @client_low = qw(redis_call sockwait report tls resolve secret link sentinel cluster);
my @above_client = qw(conn script batch hold acquire keeper queue queue_conf
  sqlfuncs observe fleet shmem);

# The complaints about a tree: its cycle and its Redis client layers that
# reach up ('' each when there are none)
sub complaints
{
	my ($files) = @_;
	my ($deps, $calls) = build_graph($files);
	my %c = (cycle => join(' -> ', find_cycle($deps)));
	for my $low (@client_low, 'conn')
	{
		my $r = reach($deps, $low);
		my @up = grep { $r->{$_} } ($low eq 'conn' ? @above_client[ 1 .. $#above_client ] : @above_client);
		$c{$low} = "@up";
	}
	return (\%c, $deps, $calls);
}

my $files = read_tree($src);
my ($found, $deps, $calls) = complaints($files);
cmp_ok(scalar(keys %$deps), '>=', 25, scalar(keys %$deps) . ' modules read');
cmp_ok($calls, '>=', 200, "$calls functions called from other modules read");
is($found->{cycle}, '', 'the graph of includes and calls in src/ has no cycle');
is($found->{$_}, '', "$_ reaches none of the layers above it") for @client_low;
is($found->{conn}, '', 'conn reaches nothing of the semaphore layers');

# The Redis client's wing, src/redis/, reaches outside it only the settings
# and constants at the bottom of the tree
my %wing = map { module_of($_) => 1 } grep { m{^redis/} } keys %$files;
my %bottom = map { $_ => 1 } qw(guc compat timing bounds);
cmp_ok(scalar(keys %wing), '>=', 10, scalar(keys %wing) . ' modules in src/redis/');
for my $m (sort keys %wing)
{
	my $r = reach($deps, $m);
	my @out = grep { !$wing{$_} && !$bottom{$_} } sort keys %$r;
	is("@out", '', "src/redis/$m reaches nothing outside the wing but the bottom");
}

# The checker on planted faults: each must be found
my %plants = (
	'an include back up' => [ 'sockwait.c', qq{#include "script.h"\n} ],
	'a call back up' => [
		'link.c', "\nstatic void\nplanted(void)\n{\n\tsem_call_failed(NULL, 0, NULL);\n}\n"
	],
	'a loop between two modules' => [
		'queue_conf.c', "\nstatic void\nplanted(void)\n{\n\tqueue_install_hooks();\n}\n"
	],);
for my $what (sort keys %plants)
{
	my ($file, $text) = @{ $plants{$what} };
	my ($path) = grep { basename($_) eq $file } keys %$files;
	my %copy = %$files;
	$copy{$path} .= $text;
	my ($c) = complaints(\%copy);
	my $all = join(' | ', map { "$_: $c->{$_}" } grep { $c->{$_} ne '' } sort keys %$c);
	isnt($c->{cycle}, '', "a planted fault is caught: $what ($all)");
}

# A static function of the same name as another module's is no call
{
	my %copy = %$files;
	my ($path) = grep { basename($_) eq 'sockwait.c' } keys %$files;
	$copy{$path} .= "\nstatic void\nsem_call_failed(void)\n{\n}\n\nstatic void\nuse(void)\n{\n\tsem_call_failed();\n}\n";
	my ($c) = complaints(\%copy);
	is($c->{cycle}, '', 'a static function named like an upper one is not taken for a call');
}

done_testing();
