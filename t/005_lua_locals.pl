
# 005_lua_locals.pl - redsem's Lua library stays far from Lua 5.1's limit on
# local variables (issue 47), measured by the engine that enforces it.
#
# Redis's and Valkey's Lua 5.1 refuses a function, the main chunk included,
# with more than 200 locals active at once (LUAI_MAXVARS): FUNCTION LOAD of
# the library fails on every server.  The main chunk of src/redsem.lua is
# where names pile up (it had 186 in 0.2.0); it is now in sections whose own
# helpers are locals of a do ... end block (see CONTENTS in the script).
# What the engine checks is the most locals active at any point of the
# main chunk (the peak): the top-level ones, plus, inside a section, that
# section's own.  So this test loads the library into a private Redis with
# K locals planted at its very top, active through the whole chunk, and
# finds by bisection the largest K that still loads: the peak is 200 - K.
# It fails once the peak passes THRESHOLD.  (The same with K planted at the
# end, just before the registration, where only top-level locals are
# active, gives their count: shown, not checked, as it misses a section's
# locals: the self-test below shows it.)
#
# Self-test: the same measure on the script with an excess planted, as a
# change could bring it (more top-level names; a section with more
# helpers), must report it past THRESHOLD.
#
# Last, every entry of the operation tables holds its functions: a table
# made at load takes the values names have then, and a name of a section
# below is still nil (CONTENTS).
#
# REDSEM_TEST_SCRIPT=path measures another version of the script (e.g. git
# show 747a46d:src/redsem.lua, before the sections: it fails).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

# Lua 5.1's limit (LUAI_MAXVARS), as the engine's refusal names it.
use constant LIMIT => 200;

# The most locals the main chunk may have active at once.  The limit is
# 200; the script had 186 in 0.2.0 (issue 47) and about 120 once in
# sections.  150 leaves room for new shared names (the tenants of I12, the
# largest feature so far, share 16 with other sections) and makes this test
# fail while 50 are still free: the library then still loads everywhere
# (t/020's checked library adds 2), and there is time to give a section its
# own names instead of an emergency.
use constant THRESHOLD => 150;

my $redis = RedsemTest::Redis->new;
my $r = RedsemTest::RESP->new($redis->socket);
my $path = $ENV{REDSEM_TEST_SCRIPT} || "$FindBin::RealBin/../src/redsem.lua";
my $body = PostgreSQL::Test::Utils::slurp_file($path);

# One local statement declaring $k names (none if $k is 0).
sub planted
{
	my ($k, $tag) = @_;
	return '' unless $k;
	return 'local ' . join(', ', map { "planted_$tag$_" } 1 .. $k) . "\n";
}

# The library as src/script.c builds it from $text, with $top locals
# planted before the script and $end after it, before the registration.
sub library
{
	my ($text, $top, $end) = @_;
	return "#!lua name=locals_probe\n"
	  . planted($top, 'top')
	  . "$text\n"
	  . planted($end, 'end')
	  . "redis.register_function('locals_probe', dispatch)\n";
}

# '' if Redis loads the library, else its error.
sub load_error
{
	my ($lib) = @_;
	my $reply = $r->cmd('FUNCTION', 'LOAD', 'REPLACE', $lib);
	return RedsemTest::RESP::is_error($reply) ? $reply->{msg} : '';
}

# The main chunk's locals active at once, measured with locals planted at
# $where: 'top' (the peak) or 'end' (the top-level ones).  Dies if the
# library fails to load for any other reason.
sub measure
{
	my ($text, $where) = @_;
	my $lib = sub {
		my ($k) = @_;
		return library($text, $where eq 'top' ? $k : 0, $where eq 'end' ? $k : 0);
	};
	my $err = load_error($lib->(0));
	die "the library does not load: $err\n" if $err ne '';
	# $lo planted locals load; LIMIT + 1 never do
	my ($lo, $hi) = (0, LIMIT + 1);
	while ($hi - $lo > 1)
	{
		my $k = int(($lo + $hi) / 2);
		$err = load_error($lib->($k));
		if ($err eq '')
		{
			$lo = $k;
		}
		elsif ($err =~ /main function has more than ${\LIMIT} local variables/)
		{
			$hi = $k;
		}
		else
		{
			die "with $k locals planted at the $where: $err\n";
		}
	}
	return LIMIT - $lo;
}

# The check: a peak within THRESHOLD.
sub within { my ($peak) = @_; return $peak <= THRESHOLD; }

my $peak = measure($body, 'top');
my $end = measure($body, 'end');
note "main chunk of $path: at most $peak locals active at once, "
  . "$end at its end (top-level); Lua 5.1 allows " . LIMIT;
ok(within($peak), "the main chunk has at most $peak locals active at once, "
	  . "within " . THRESHOLD . ' (Lua 5.1: ' . LIMIT . ')');
cmp_ok($end, '<=', $peak, "its top-level locals ($end) are among them");

note 'self-test: an excess planted in the script is reported';

# More top-level names: each counts everywhere after it.
# (as many as take it past THRESHOLD; one if it is past already)
my $n = THRESHOLD - $peak + 1;
$n = 1 if $n < 1;
my $more = "local extra_name_" . join(', extra_name_', 1 .. $n) . "\n";
my $p2 = measure($more . $body, 'top');
is($p2, $peak + $n, "$n more top-level local(s): the peak is $p2");
is(measure($more . $body, 'end'), $end + $n, '... and the top-level count as much more');
ok(!within($p2), '... past ' . THRESHOLD . ': the check fails');

# A section with more locals of its own: they count only inside it, where
# every top-level local is active too; the count at the end does not see them.
$n = THRESHOLD - $end + 1;
$n = 1 if $n < 1;
my $section = "\ndo\nlocal section_own_" . join(', section_own_', 1 .. $n) . "\nend\n";
my $p3 = measure($body . $section, 'top');
my $expect = $end + $n > $peak ? $end + $n : $peak;
is($p3, $expect, "a section with $n local(s) of its own: the peak is $p3");
is(measure($body . $section, 'end'), $end, '... where the top-level count stays as it was');
ok(!within($p3), '... past ' . THRESHOLD . ': the check fails');

note 'the operation tables hold functions';
my $tables = <<'LUA';
redis.register_function('locals_tables', function()
    local bad, n = {}, 0
    for tname, t in pairs({OPS = OPS, INDEX_OPS = INDEX_OPS}) do
        for name, op in pairs(t) do
            n = n + 1
            if type(op.read) ~= 'function' or type(op.run) ~= 'function' or
               (op.fast ~= nil and type(op.fast) ~= 'function') then
                bad[#bad + 1] = tname .. '.' .. name
            end
        end
    end
    table.sort(bad)
    return {n, unpack(bad)}
end)
LUA
is(load_error(library($body, 0, 0) . $tables), '', 'the library loads with a function that reads them');
my $reply = $r->cmd('FCALL', 'locals_tables', 0);
my ($count, @bad) = ref $reply eq 'ARRAY' ? @$reply : (0);
cmp_ok($count, '>=', 21, "OPS and INDEX_OPS have $count entries");
is(join(' ', @bad), '', 'each has its read and run functions, and fast if any');

$r->cmd('FUNCTION', 'DELETE', 'locals_probe');
done_testing();
