# The soak: nothing grows without bound.  A steady stream runs for
# EXACTONCE_SOAK_SECONDS (CI: 240; the documented run: 3600) into two
# pipelines, with everything a long-lived installation does:
#  - trades (latest mode, change feed on): INSERTs with duplicates, late
#    stale versions, moves between cells and tombstones, and a prune of
#    tombstones below a trailing version;
#  - readings (accumulate mode): batches through ingest() with source
#    offsets, each batch sent twice (the replay skipped by its offsets), a
#    NaN reading per batch (a dead letter), and a prune of seen and of old
#    dead letters;
#  - two feed consumers (one every tick, one every sixth), once() callers
#    with forget(), a session that waits on a paused pipeline with
#    wait_applied() all along (20 s at a time) while the workers wake it,
#    and faults injected into every stage.
# Every EXACTONCE_SOAK_SAMPLE seconds it samples each table's heap, index
# and TOAST size and dead tuples (the pipelines', the extension's, and the
# catalogs a rotation would touch), the rows of pg_class, and the private
# memory (RssAnon) of each worker and of the long-lived sessions.  A series
# fails if it keeps growing after warm-up: the least-squares slope over the
# last half of the run, times that half's length, must stay under a
# tolerance (10% of its largest value there, and at least 256 kB of a size,
# 2 MB of memory, 2,000 dead tuples or 100 rows); dead tuples pass where a
# vacuum took more than that away in the last half.  It prints the table of
# the series over time with a plot of each, and writes every sample to
# soak.csv in the test's output directory.  At the end both pipelines equal
# their oracles.

use strict;
use warnings;

use IPC::Run;
use List::Util qw(max min sum);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ExactonceTest;

my $seconds = $ENV{EXACTONCE_SOAK_SECONDS} // 240;
my $sample_every = $ENV{EXACTONCE_SOAK_SAMPLE} // max(5, int($seconds / 24));
my $rate = $ENV{EXACTONCE_SOAK_RATE} // 1000;    # trades events a second

my $db = 'postgres';
my $node = eo_node(
	'soak', conf => q{
autovacuum_naptime = '5s'
exactonce.fault_state = 0.005
exactonce.fault_map = 0.005
exactonce.fault_reduce = 0.005
exactonce.fault_retire = 0.005
log_min_messages = warning
});
eo_setup($node, $db);
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.set_feed('trades', true);
SELECT exactonce.create_pipeline('readings', ARRAY['d'], mode => 'accumulate');
CREATE TABLE readings_truth (key text, version bigint, value numeric, d text);
CREATE TABLE soak_batch (key text, version bigint, value numeric, d text, off bigint);
SELECT exactonce.create_pipeline('idle', ARRAY['d']);
SELECT exactonce.pause('idle');
INSERT INTO idle.ingest (key, version, value, d) VALUES ('waits', 1, 1, 'x');
});

# the long-lived sessions: a feed consumer and once() caller, and a
# wait_applied() that lasts the run
my $session = $node->background_psql($db);
$session->set_query_timer_restart;
my $session_pid = $session->query_safe('SELECT pg_backend_pid()');
# (20 s at a time: a statement holds back VACUUM's horizon while it runs,
# and one that lasted the run would hold back every table's)
my ($wout, $werr) = ('', '');
my $waits = $node->basedir . '/waits.sql';
PostgreSQL::Test::Utils::append_to_file($waits,
	join('', map { "SELECT exactonce.wait_applied('idle', '20 s');\n" } 1 .. int($seconds / 20) + 30));
my $waiter = IPC::Run::start([ 'psql', '-X', '-d', $node->connstr($db), '-f', $waits ], '>', \$wout, '2>', \$werr);
$node->poll_query_until($db, "SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%wait_applied(''idle''%'
	AND pid <> pg_backend_pid()")
  or die 'the waiter did not start';
my $waiter_pid = $node->safe_psql($db,
	"SELECT pid FROM pg_stat_activity WHERE query LIKE '%wait_applied(''idle''%' AND pid <> pg_backend_pid()");

# --- the stream --------------------------------------------------------------

my ($next_event, $next_reading, $tokens) = (1, 1, 0);

# one tick's work: trades events, a readings batch sent twice, once()
# tokens, the steady consumer; the slow one every sixth tick
sub tick
{
	my ($n) = @_;
	my $per_tick = int($rate * 1.0);
	ExactonceTest::eo_produce($node, $db, $next_event, $next_event + $per_tick - 1);
	$next_event += $per_tick;

	my ($from, $to) = ($next_reading, $next_reading + 99);
	$next_reading += 100;
	my $batch = qq{
DELETE FROM soak_batch;
INSERT INTO soak_batch SELECT 'r' || (i % 500), i, CASE WHEN i = $to THEN 'NaN'::numeric ELSE i % 7 END, 'd' || (i % 5), i
	FROM generate_series($from, $to) i;
SELECT exactonce.ingest('readings', 'log:0', (SELECT array_agg(b ORDER BY off) FROM soak_batch b),
	(SELECT array_agg(off ORDER BY off) FROM soak_batch));
};
	$node->safe_psql($db,
		"BEGIN; $batch INSERT INTO readings_truth SELECT key, version, value, d FROM soak_batch WHERE value <> 'NaN'; COMMIT;"
		  . "BEGIN; $batch COMMIT;");

	my $claims = join(' UNION ALL ', map { "SELECT exactonce.once('soak', 't" . ($tokens + $_) . "')" } 1 .. 10);
	$tokens += 10;
	$session->query_safe("BEGIN; $claims; COMMIT;");
	$session->query_safe(
		"BEGIN; SELECT count(*) FROM exactonce.feed_read('trades', 'steady', 100000); COMMIT;");
	$node->safe_psql($db, "SELECT count(*) FROM exactonce.feed_read('trades', 'slow', 100000)")
	  if $n % 6 == 0;

	# what a DBA schedules: forget old tokens, prune below a trailing version
	if ($n % 5 == 0)
	{
		$node->safe_psql(
			$db, qq{
SELECT exactonce.forget('soak', '20 seconds');
SELECT * FROM exactonce.prune('trades', greatest($next_event - 20 * $per_tick, 1));
SELECT * FROM exactonce.prune('readings', greatest($next_reading - 2000, 1), dead_letters_older_than => '20 seconds');
});
	}
	return;
}

# --- the samples -------------------------------------------------------------

my (@times, %series, %kind);

sub rss_anon
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return undef;
	while (<$fh>)
	{
		return $1 * 1024 if /^RssAnon:\s+(\d+)\s+kB/;
	}
	return undef;
}

sub sample
{
	my ($t) = @_;
	push @times, $t;
	my $i = $#times;
	my $rows = $node->safe_psql(
		$db, q{
SELECT n.nspname || '.' || c.relname, pg_relation_size(c.oid),
	coalesce((SELECT sum(pg_relation_size(x.indexrelid)) FROM pg_index x WHERE x.indrelid = c.oid), 0),
	coalesce(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0),
	coalesce(s.n_dead_tup, 0)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
WHERE c.relkind IN ('r', 'p', 'm')
	AND (n.nspname IN ('trades', 'readings', 'idle', 'exactonce')
		OR c.oid IN ('pg_class'::regclass, 'pg_attribute'::regclass, 'pg_type'::regclass,
			'pg_depend'::regclass, 'pg_statistic'::regclass))
UNION ALL SELECT 'pg_class rows', count(*), 0, 0, 0 FROM pg_class});
	for my $line (split /\n/, $rows)
	{
		my ($rel, $heap, $idx, $toast, $dead) = split /\|/, $line;
		if ($rel eq 'pg_class rows')
		{
			record('rows', 'pg_class rows', $i, $heap);
			next;
		}
		record('size', "$rel heap", $i, $heap);
		record('size', "$rel indexes", $i, $idx);
		record('size', "$rel toast", $i, $toast);
		record('dead', "$rel dead tuples", $i, $dead);
	}
	my $procs = $node->safe_psql($db,
		"SELECT pid, backend_type FROM pg_stat_activity WHERE backend_type LIKE 'exactonce%' ORDER BY backend_type, pid");
	my %seen;
	for my $line (split /\n/, $procs)
	{
		my ($pid, $type) = split /\|/, $line;
		my $k = ++$seen{$type};
		record('memory', "$type #$k memory", $i, rss_anon($pid));
	}
	record('memory', 'consumer and once() session memory', $i, rss_anon($session_pid));
	record('memory', 'wait_applied() session memory', $i, rss_anon($waiter_pid));
	return;
}

sub record
{
	my ($k, $name, $i, $v) = @_;
	return unless defined $v;
	$kind{$name} = $k;
	$series{$name}[$i] = $v;
	return;
}

my $t0 = time;
my $next_sample = 0;
my $n = 0;
while (time - $t0 < $seconds)
{
	my $start = time;
	tick(++$n);
	if (time - $t0 >= $next_sample)
	{
		sample(time - $t0);
		$next_sample += $sample_every;
	}
	my $left = 1 - (time - $start);
	sleep($left) if $left > 0;
}
sample(time - $t0);
note(sprintf('%d ticks in %.0f s: %d trades events, %d readings batches (each twice), %d once() tokens',
		$n, time - $t0, $next_event - 1, ($next_reading - 1) / 100, $tokens));

# --- the verdict -------------------------------------------------------------

my %floor = (size => 256 * 1024, memory => 2 * 1024 * 1024, dead => 2000, rows => 100);

# growth(name): the least-squares slope of the series over the last half of
# the run, times that half's length, and the tolerance
sub growth
{
	my ($name) = @_;
	my $half = $times[-1] / 2;
	my @pts = grep { $times[$_] >= $half && defined $series{$name}[$_] } 0 .. $#times;
	return (0, 1) if @pts < 3;
	my @x = map { $times[$_] } @pts;
	my @y = map { $series{$name}[$_] } @pts;
	my ($mx, $my) = (sum(@x) / @x, sum(@y) / @y);
	my $sxx = sum(map { ($_ - $mx)**2 } @x);
	my $slope = $sxx ? sum(map { ($x[$_] - $mx) * ($y[$_] - $my) } 0 .. $#x) / $sxx : 0;
	my $tol = max($floor{ $kind{$name} }, 0.10 * max(@y));

	# dead tuples rise between two runs of autovacuum and fall at each: they
	# are bounded where a vacuum took them away in the last half, whatever
	# phase of its cycle the run ended in
	if ($kind{$name} eq 'dead')
	{
		my $peak = $y[0];
		for my $v (@y)
		{
			return (0, $tol) if $v < $peak - $tol;
			$peak = max($peak, $v);
		}
	}
	return ($slope * ($x[-1] - $x[0]), $tol);
}

sub human
{
	my ($k, $v) = @_;
	return '-' unless defined $v;
	return sprintf('%d', $v) unless $k eq 'size' || $k eq 'memory';
	return $v >= 1048576 ? sprintf('%.1fM', $v / 1048576) : sprintf('%.0fk', $v / 1024);
}

sub plot
{
	my ($name) = @_;
	my @v = map { $_ // 0 } @{ $series{$name} };
	my ($lo, $hi) = (min(@v), max(@v));
	my @bars = split //, '_.:-=+*#';
	return join('', map { $hi > $lo ? $bars[ int(7 * ($_ - $lo) / ($hi - $lo)) ] : '_' } @v);
}

my @grew;
my @cols = map { int($_ * $#times / 6) } 0 .. 6;
my $report = sprintf("%-48s %s %9s %9s  %s\n", 'series', join(' ', map { sprintf('%7ss', int($times[$_])) } @cols),
	'growth', 'tolerance', 'plot');
for my $name (sort keys %series)
{
	my ($g, $tol) = growth($name);
	my $k = $kind{$name};
	my $max = max(map { $_ // 0 } @{ $series{$name} });
	push @grew, sprintf('%s grew %s over the last half (tolerance %s)', $name, human($k, $g), human($k, $tol))
	  if $g > $tol;
	next if $max == 0;
	$report .= sprintf("%-48s %s %9s %9s  %s%s\n",
		substr($name, 0, 48), join(' ', map { sprintf('%8s', human($k, $series{$name}[$_])) } @cols),
		human($k, $g), human($k, $tol), plot($name), $g > $tol ? '  GROWS' : '');
}
diag("the soak, $seconds s, a sample every $sample_every s:\n$report");

my $csv = "$PostgreSQL::Test::Utils::tmp_check/soak.csv";
open(my $fh, '>', $csv) or die "could not write $csv: $!";
print $fh join(',', 'seconds', map { "\"$_\"" } sort keys %series), "\n";
for my $i (0 .. $#times)
{
	print $fh join(',', sprintf('%.1f', $times[$i]), map { $series{$_}[$i] // '' } sort keys %series), "\n";
}
close $fh;
note("every sample: $csv");

is(scalar(@grew), 0, 'after warm-up no table, catalog or process keeps growing')
  or diag(join("\n", @grew));

# --- and it was exact --------------------------------------------------------

$node->safe_psql($db, "SELECT pg_terminate_backend($waiter_pid)");
$waiter->finish;
my $timeouts = () = $werr =~ /events of pipeline "idle" not applied within the timeout/g;
cmp_ok($timeouts, '>=', int($seconds / 20) - 1, "the session waited on a paused pipeline all along ($timeouts waits of 20 s)");
$session->quit;
$node->append_conf('postgresql.conf',
	"exactonce.fault_state = 0\nexactonce.fault_map = 0\nexactonce.fault_reduce = 0\nexactonce.fault_retire = 0\n");
$node->reload;
ok(eo_wait_drained($node, $db), 'the workers drain the stream');
ok(eo_wait_drained($node, $db, 'readings'), 'and the readings');
eo_check($node, $db, 'the soak');
is( $node->safe_psql(
		$db, q{
SELECT count(*) FROM (
	(SELECT d, sum(value), count(*) FROM readings_truth GROUP BY d
	 EXCEPT SELECT d, total, keys FROM readings.aggregates WHERE level = 1)
	UNION ALL
	(SELECT d, total, keys FROM readings.aggregates WHERE level = 1
	 EXCEPT SELECT d, sum(value), count(*) FROM readings_truth GROUP BY d)) m}),
	'0', 'the readings equal their oracle: each reading once, the replays skipped, the NaN dead-lettered');

done_testing();
