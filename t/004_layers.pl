
# 004_layers.pl - the layering rule of docs/layout.md, checked: in src/, a
# module (x.c with x.h) includes, calls and reads only modules below it, so
# the graph of includes, calls and reads of another module's variables has
# no cycle; and the Redis client's lower layers never reach the ones above
# them.  Calls are read in .c files and in headers' inline functions and
# macros; a function is another module's where it is defined with a body.
# A call, read or include added by a change that runs back up, or closes a
# loop, fails here, naming the modules; so does a function defined in two
# modules.  The checker is shown catching planted ones too, so that a
# change to it cannot quietly blind it.  (It reads text, not symbols: a
# function reached only through a pointer is no edge.)

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

# The definitions in C code (comments and strings gone): { name => static? }
# for functions with a body, PostgreSQL style (the name at the start of a
# line, its type on the line before) or on one line; a declaration ends in
# ';' and is none
sub functions_defined
{
	my ($code) = @_;
	my %fn;
	for my $re (qr/^([^\n;{}#]*)\n([a-z_][a-z0-9_]*)\([^;{}]*?\)\s*\{/m,
		qr/^([A-Za-z_][^\n;{}#(=]*?[\s*])([a-z_][a-z0-9_]*)\([^;{}]*?\)\s*\{/m)
	{
		while ($code =~ /$re/g)
		{
			my ($type, $name) = ($1, $2);
			$fn{$name} = ($type =~ /\bstatic\b/) ? 1 : 0;
		}
	}
	return \%fn;
}

# The variables a header declares extern (no parameter list): names
sub variables_declared
{
	my ($code) = @_;
	return ($code =~ /^extern\s[^;()]*?\b([a-z_][a-z0-9_]*)\s*(?:\[[^\]]*\])?\s*;/gm);
}

# The graph: module => { module it includes, calls or reads => 'include' |
# 'call f' | 'reads v' }, and how many (module, function) calls were read,
# and the names defined in two modules (a checker that took one for the
# other could miss an edge)
sub build_graph
{
	my ($files) = @_;
	my (%deps, %headers, %defined_in, %static_in, %called, %dups, %var_in);
	my %code = map { $_ => code_only($files->{$_}) } keys %$files;

	$headers{ module_of($_) } = 1 for grep { /\.h$/ } keys %$files;
	my %extern_vars = map { $_ => 1 }
	  map { variables_declared($code{$_}) } grep { /\.h$/ } keys %$files;
	for my $f (sort keys %$files)
	{
		my $m = module_of($f);
		$deps{$m} //= {};
		my $fn = functions_defined($code{$f});
		for my $name (sort keys %$fn)
		{
			if ($fn->{$name}) { $static_in{$m}{$name} = 1; next; }
			$dups{$name} = "$defined_in{$name} and $m"
			  if defined $defined_in{$name} && $defined_in{$name} ne $m;
			$defined_in{$name} = $m;
		}
		next unless $f =~ /\.c$/;
		# a variable defined here: at the start of a line, not extern
		for my $v (sort keys %extern_vars)
		{
			$var_in{$v} = $m
			  if $code{$f} =~ /^(?!static\b|extern\b)[A-Za-z_][^\n;{}#()]*?\b\Q$v\E\s*(?:\[[^\]]*\])?\s*(?:=[^;]*)?;/m;
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
		# calls and reads, in a .c file or a header's inline functions and
		# macros (declarations are neither)
		(my $code = $code{$f}) =~ s/^extern\b[^;]*;//gm;
		while ($code =~ /(->|\.)?\s*\b([a-z_][a-z0-9_]*)\b(\s*\()?/g)
		{
			my ($member, $name, $call) = ($1, $2, $3);
			next if $member || $static_in{$m}{$name};
			my $to = $call ? $defined_in{$name} : $var_in{$name};
			$to //= $defined_in{$name} if !$call && $code =~ /&\s*\Q$name\E\b/;
			next if !defined $to || $to eq $m;
			$deps{$m}{$to} //= ($call ? "call $name" : "reads $name");
			$called{"$m $name"} = 1 if $call;
		}
	}
	return (\%deps, scalar(keys %called), \%dups);
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
my @client_low = qw(redis_call profile sockwait report tls resolve secret brokerlink link sentinel cluster);
my @above_client = qw(conn script batch hold acquire keeper queue queue_conf
  sqlfuncs observe fleet shmem stop guard broker broker_open broker_loop);

# The complaints about a tree: its cycle and its Redis client layers that
# reach up ('' each when there are none)
sub complaints
{
	my ($files) = @_;
	my ($deps, $calls, $dups) = build_graph($files);
	my %c = (cycle => join(' -> ', find_cycle($deps)),
		twice => join(', ', map { "$_ ($dups->{$_})" } sort keys %$dups));
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
is($found->{cycle}, '', 'the graph of includes, calls and reads in src/ has no cycle');
is($found->{twice}, '', 'no function is defined in two modules');
is($found->{$_}, '', "$_ reaches none of the layers above it") for @client_low;
is($found->{conn}, '', 'conn reaches nothing of the semaphore layers');

# The Redis client's wing, src/redis/, reaches outside it only the settings
# and constants at the bottom of the tree
my %wing = map { module_of($_) => 1 } grep { m{^redis/} } keys %$files;
my %bottom = map { $_ => 1 } qw(guc compat timing bounds clock);
cmp_ok(scalar(keys %wing), '>=', 10, scalar(keys %wing) . ' modules in src/redis/');
for my $m (sort keys %wing)
{
	my $r = reach($deps, $m);
	my @out = grep { !$wing{$_} && !$bottom{$_} } sort keys %$r;
	is("@out", '', "src/redis/$m reaches nothing outside the wing but the bottom");
}

# The checker on planted faults: each must be found
my $call_up = "\tsem_call_failed(NULL, NULL);\n";
my %plants = (
	'an include back up' => [ 'sockwait.c', qq{#include "script.h"\n} ],
	'a call back up' =>
	  [ 'link.c', "\nstatic void\nplanted(void)\n{\n$call_up}\n" ],
	'a call back up through a declaration of its own' => [
		'sockwait.c',
		"\nextern bool\nsem_call_failed(void *call, const char *name);\n"
		  . "\nstatic void\nplanted(void)\n{\n$call_up}\n"
	],
	'a call back up from a header\'s inline function' =>
	  [ 'link.h', "\nstatic inline void\nplanted(void)\n{\n$call_up}\n" ],
	'a call back up from a header\'s macro' =>
	  [ 'sockwait.h', "\n#define PLANTED() sem_call_failed(NULL, NULL)\n" ],
	'a call back up of a function defined on one line' => [
		'link.c', "\nstatic void planted(void) { hold_planted(); }\n",
		'hold.c', "\nvoid hold_planted(void) { }\n"
	],
	'a read back up of a variable' => [
		'guc.c', "\nstatic bool\nplanted(void)\n{\n\treturn redsem_max_holds_per_session > 0;\n}\n"
	],
	'a loop between two modules' => [
		'queue_conf.c', "\nstatic void\nplanted(void)\n{\n\tqueue_install_hooks();\n}\n"
	],);
for my $what (sort keys %plants)
{
	my %copy = %$files;
	my @edits = @{ $plants{$what} };
	while (my ($file, $text) = splice(@edits, 0, 2))
	{
		my ($path) = grep { basename($_) eq $file } keys %$files;
		$copy{$path} .= $text;
	}
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
