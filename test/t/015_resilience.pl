# The resilience soak of the source material, and then some: a trade-risk
# stream with duplicates, modifications that move trades, late stale
# versions and tombstones is loaded at least once (a chunk whose COPY failed
# is sent again), while faults are injected into every stage, drain workers
# are killed with SIGKILL and the server is stopped with -m immediate.  The
# aggregates must then equal the oracle computed from the generated events
# (table truth), the accounting identity must hold, and the queue and
# ledger must be empty.  A second pipeline takes the same stream into the
# cells of a CUBE, with two measures, one of them often missing, keeps min
# and max of value and of that measure, which tombstones and moves retract,
# and counts the distinct counterparties per cell: its sums, counts,
# averages, mins, maxes and distinct counts must equal the oracle too.  A third pipeline, in
# accumulate mode, takes every version as a reading in the ten-minute
# window of its event_time (with a lateness that takes them all), with the
# same measures, min/max and distinct count: its windows must equal the
# oracle as well, and verify() must find nothing wrong in any of them.
#
# Sized for CI by default; bash test/resilience.sh runs it at full scale.
# The environment sizes it:
#   EXACTONCE_SOAK_EVENTS    distinct events (200000), 5 versions per trade
#   EXACTONCE_SOAK_KILLS     SIGKILLs of a drain worker (6)
#   EXACTONCE_SOAK_RESTARTS  immediate shutdowns (2)
#   EXACTONCE_SOAK_FAULTS    failure probabilities of state, map, reduce and
#                            the retirement of a drained queue partition
#                            (0.05,0.05,0.05,0.05)
#   EXACTONCE_SOAK_CHUNK     events per COPY (10000)
#   EXACTONCE_SOAK_BATCH     exactonce.batch_size (2000)
# The kills and shutdowns are spread evenly over the load.  It ends with a
# line of figures: events/s, faults injected, kills survived, the verdict.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ExactonceTest;

my $events = $ENV{EXACTONCE_SOAK_EVENTS} // 200000;
my $kills_wanted = $ENV{EXACTONCE_SOAK_KILLS} // 6;
my $restarts_wanted = $ENV{EXACTONCE_SOAK_RESTARTS} // 2;
my ($f_state, $f_map, $f_reduce, $f_retire) = split /,/, $ENV{EXACTONCE_SOAK_FAULTS} // '0.05,0.05,0.05,0.05';
$f_retire //= 0;
my $chunk_size = $ENV{EXACTONCE_SOAK_CHUNK} // 10000;
my $batch = $ENV{EXACTONCE_SOAK_BATCH} // 2000;

my $db = 'postgres';
my $conf = "restart_after_crash = on\nmax_wal_size = 4GB\n";
# the full-scale run keeps its working set in memory
$conf .= "shared_buffers = 1GB\n" if $events >= 1_000_000;
my $node = eo_node('resilience', conf => $conf);
eo_setup($node, $db);
my $work = PostgreSQL::Test::Utils::tempdir;

# the stream: trades get versions 0..4, content a function of (trade,
# version); 5% of later versions are tombstones; 10% of events are sent
# twice; everything in random order, so late versions arrive after newer
# ones.  The server writes it where this test reads it.
my $trades = int($events / 5);
$node->safe_psql(
	$db, qq{
INSERT INTO truth
SELECT 't' || t, v, round((hashint8(t * 8 + v) % 2000000)::numeric / 100, 2),
       (ARRAY['Delta','Gamma','Vega','Theta','Rho'])[1 + (t + v * (t % 2)) % 5],
       (ARRAY['AMER','EMEA','APAC'])[1 + (t + v / 3) % 3],
       (ARRAY['FXSpot','FXOption','Rates','Credit','Equity','Commodities'])[1 + (t / 7 + v) % 6],
       v > 0 AND abs(hashint8(t * 31 + v)) % 20 = 0
FROM generate_series(1, $trades) t, generate_series(0, 4) v;
SELECT exactonce.create_pipeline('measured', ARRAY['risk_type', 'region', 'trade_desk'],
	measures => ARRAY['qty', 'fee'], min_max => ARRAY['value', 'fee'],
	distinct_counts => ARRAY['cpty'], grouping_sets => 'cube');
SELECT exactonce.create_view('measured', 'delta_desks', ARRAY['trade_desk', 'lower(region) AS area'],
	'risk_type = ''Delta''');
SELECT exactonce.create_pipeline('windowed', ARRAY['risk_type'], 'accumulate',
	measures => ARRAY['qty', 'fee'], min_max => ARRAY['value', 'qty'],
	distinct_counts => ARRAY['cpty'], window_width => '10 minutes',
	allowed_lateness => '36500 days');
CREATE TABLE truth_measured AS
SELECT t.*, (abs(hashint8(v.h)) % 1000)::numeric / 10 AS qty,
       CASE WHEN v.h % 3 = 0 THEN NULL ELSE (abs(hashint8(v.h * 7)) % 50)::numeric / 4 END AS fee,
       CASE WHEN v.h % 7 = 0 THEN NULL ELSE 'cp' || abs(hashint8(v.h * 3)) % 60 END AS cpty
FROM truth t, LATERAL (SELECT hashtext(t.key)::bigint * 16 + t.version AS h) v;
ALTER TABLE truth_measured ADD COLUMN taken timestamptz;
UPDATE truth_measured SET taken = timestamptz '2024-05-01 00:00:00+00'
	+ (abs(hashtext(key || 'taken' || version)) % 86400) * interval '1 second';
SELECT setseed(0.3);
CREATE TABLE stream AS
SELECT row_number() OVER (ORDER BY r) AS n, s.*
FROM (SELECT *, random() AS r
      FROM (SELECT * FROM truth_measured UNION ALL
            SELECT * FROM truth_measured WHERE random() < 0.1) c) s;
COPY (SELECT key, version, value, risk_type, region, trade_desk, deleted
      FROM stream ORDER BY n) TO '$work/stream.tsv';
COPY (SELECT key, version, value, risk_type, region, trade_desk, deleted, qty, fee, cpty
      FROM stream ORDER BY n) TO '$work/stream_measured.tsv';
COPY (SELECT key, version, value, risk_type, qty, fee, cpty, taken
      FROM stream WHERE NOT deleted ORDER BY n) TO '$work/stream_windowed.tsv';
DROP TABLE stream;
});
my $sent = 0;
{
	open my $fh, '<', "$work/stream.tsv" or die "open stream: $!";
	$sent++ while <$fh>;
	close $fh;
}
my $chunks = int(($sent + $chunk_size - 1) / $chunk_size);

eo_alter_system(
	$node,
	'exactonce.batch_size' => $batch,
	'exactonce.fault_state' => $f_state,
	'exactonce.fault_map' => $f_map,
	'exactonce.fault_reduce' => $f_reduce,
	'exactonce.fault_retire' => $f_retire);

# failures injected since the server (re)started: the counters live in
# shared memory, so they are added up before each kill and shutdown
sub faults_now
{
	my ($rc, $out) = $node->psql($db, 'SELECT coalesce(sum(injected), 0) FROM exactonce.faults_injected()');
	return $rc == 0 && $out =~ /^\d+$/ ? $out : 0;
}

# how many of $n actions are due once $i of the chunks are loaded, spread
# evenly, the first after a fraction $start of the spacing
sub due
{
	my ($i, $n, $start) = @_;
	return 0 if $n == 0;
	my $due = int($i * $n / $chunks + $start);
	return $due > $n ? $n : $due;
}

# send_chunk(file, pipeline, columns): COPY a chunk until one COPY of it
# commits; only a server that went away is a reason to send it again.
# Returns whether it committed.
my $resends = 0;
sub send_chunk
{
	my ($file, $pipeline, $columns) = @_;
	for (1 .. 50)
	{
		my ($rc, $out, $err) = $node->psql($db,
			"\\copy $pipeline.ingest ($columns) FROM '$file'");
		return 1 if $rc == 0;
		if ($err !~ /server closed|terminat|connect|shutting down|starting up|recovery mode/)
		{
			diag "chunk $file: $err";
			return 0;
		}
		$resends++;
		$node->poll_query_until($db, 'SELECT 1', '1');
	}
	return 0;
}

# the load, with the kills and immediate shutdowns spread over it
my ($faults, $kills, $restarts, $ledger_max, $loaded_chunks) = (0, 0, 0, 0, 0);
my $start = time;
open my $stream, '<', "$work/stream.tsv" or die "open stream: $!";
open my $stream_measured, '<', "$work/stream_measured.tsv" or die "open stream: $!";
open my $stream_windowed, '<', "$work/stream_windowed.tsv" or die "open stream: $!";
my $windowed_lines = 0;
{
	open my $fh, '<', "$work/stream_windowed.tsv" or die "open stream: $!";
	$windowed_lines++ while <$fh>;
	close $fh;
}
my $windowed_chunk = int(($windowed_lines + $chunks - 1) / $chunks);
my $columns = 'key, version, value, risk_type, region, trade_desk, deleted';
for my $i (1 .. $chunks)
{
	my $file = "$work/chunk";
	my $file_measured = "$work/chunk_measured";
	my $file_windowed = "$work/chunk_windowed";
	open my $out, '>', $file or die "open $file: $!";
	open my $out_measured, '>', $file_measured or die "open $file_measured: $!";
	for (1 .. $chunk_size)
	{
		my $line = <$stream>;
		last unless defined $line;
		print $out $line;
		print $out_measured scalar <$stream_measured>;
	}
	close $out;
	close $out_measured;
	open my $out_windowed, '>', $file_windowed or die "open $file_windowed: $!";
	for (1 .. $windowed_chunk)
	{
		my $line = <$stream_windowed>;
		last unless defined $line;
		print $out_windowed $line;
	}
	close $out_windowed;
	last unless send_chunk($file, 'trades', $columns);
	last unless send_chunk($file_measured, 'measured', "$columns, qty, fee, cpty");
	last unless send_chunk($file_windowed, 'windowed',
		'key, version, value, risk_type, qty, fee, cpty, event_time');
	$loaded_chunks++;

	my ($rc, $rows) = $node->psql($db, 'SELECT count(*) FROM trades.ledger');
	$ledger_max = $rows if $rc == 0 && $rows > $ledger_max;

	while ($kills < due($i, $kills_wanted, 0))
	{
		# a drain worker of this database, chosen at random
		$node->poll_query_until($db,
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'exactonce drain' AND datname = current_database()"
		) or last;
		my $pid = $node->safe_psql($db,
			"SELECT pid FROM pg_stat_activity WHERE backend_type = 'exactonce drain' AND datname = current_database() ORDER BY random() LIMIT 1"
		);
		my $now = faults_now();
		last unless $pid && kill 'KILL', $pid;
		$kills++;
		$faults += $now;
		# the postmaster reinitializes; wait until the killed worker is gone
		$node->poll_query_until($db, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
		  or last;
	}
	while ($restarts < due($i, $restarts_wanted, 0.5))
	{
		$faults += faults_now();
		$node->stop('immediate');
		$node->start;
		$restarts++;
	}
}
close $stream;
close $stream_measured;
close $stream_windowed;
my $loaded = time;
is($loaded_chunks, $chunks, "every chunk was loaded ($sent events in $chunks chunks, $resends sent again)");
is($kills, $kills_wanted, "a drain worker was killed with SIGKILL $kills times during the load");
is($restarts, $restarts_wanted, "the server was stopped with -m immediate $restarts times during the load");

# drain: wait, bounded by the size, until queue and staging are empty and
# the queue partitions retired
my $drained = qq{
SELECT bool_and(queued = 0 AND staged = 0)
	AND (@{[ eo_queue_empty_sql('trades') ]})
	AND (@{[ eo_queue_empty_sql('measured') ]})
	AND (@{[ eo_queue_empty_sql('windowed') ]})
FROM exactonce.pipelines WHERE name IN ('trades', 'measured', 'windowed')};
my $deadline = time + 120 + $events / 5000;
my $is_drained;
do
{
	$is_drained = $node->poll_query_until($db, $drained);
} until ($is_drained || time > $deadline);
my $done = time;
$faults += faults_now();
eo_alter_system(
	$node,
	'exactonce.batch_size' => undef,
	'exactonce.fault_state' => undef,
	'exactonce.fault_map' => undef,
	'exactonce.fault_reduce' => undef,
	'exactonce.fault_retire' => undef);

is($node->safe_psql($db, $drained), 't', 'the queue and the staged batches are empty');
is(eo_mismatches($node, $db), '0',
	"aggregates equal the oracle after $faults injected faults, $kills worker kills and $restarts immediate shutdowns");
is( $node->safe_psql(
		$db, q{
WITH latest AS (SELECT DISTINCT ON (key) * FROM truth_measured ORDER BY key, version DESC),
oracle AS (
	SELECT risk_type, region, trade_desk,
		3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)) AS level,
		sum(value) AS total, count(*) AS keys, coalesce(sum(qty), 0) AS qty_sum,
		count(qty) AS qty_count, trim_scale(sum(qty)) / nullif(count(qty), 0) AS qty_avg, coalesce(sum(fee), 0) AS fee_sum,
		count(fee) AS fee_count, trim_scale(sum(fee)) / nullif(count(fee), 0) AS fee_avg, min(value) AS value_min,
		max(value) AS value_max, min(fee) AS fee_min, max(fee) AS fee_max,
		count(DISTINCT cpty) AS cpty_distinct
	FROM latest WHERE NOT deleted GROUP BY CUBE (risk_type, region, trade_desk)),
agg AS (SELECT risk_type, region, trade_desk, level, total, keys, qty_sum, qty_count, qty_avg,
		fee_sum, fee_count, fee_avg, value_min, value_max, fee_min, fee_max, cpty_distinct
		FROM measured.aggregates)
SELECT (SELECT count(*) FROM (SELECT * FROM agg EXCEPT ALL SELECT * FROM oracle) a)
	+ (SELECT count(*) FROM (SELECT * FROM oracle EXCEPT ALL SELECT * FROM agg) o)}),
	'0',
	'the cube of measures, averages, mins, maxes and distinct counts of the second pipeline equals the oracle');
is( $node->safe_psql(
		$db, q{
WITH latest AS (SELECT DISTINCT ON (key) * FROM truth_measured ORDER BY key, version DESC),
oracle AS (
	SELECT trade_desk, lower(region) AS area, sum(value) AS total, count(*) AS keys,
		coalesce(sum(fee), 0) AS fee_sum, count(fee) AS fee_count,
		trim_scale(sum(fee)) / nullif(count(fee), 0) AS fee_avg, min(value), max(value), min(fee), max(fee)
	FROM latest WHERE NOT deleted AND risk_type = 'Delta' GROUP BY 1, 2),
v AS (SELECT trade_desk, area, total, keys, fee_sum, fee_count, fee_avg, value_min, value_max,
		fee_min, fee_max FROM measured.delta_desks)
SELECT (SELECT count(*) FROM (SELECT * FROM v EXCEPT ALL SELECT * FROM oracle) a)
	+ (SELECT count(*) FROM (SELECT * FROM oracle EXCEPT ALL SELECT * FROM v) o)
	+ (SELECT count(*) FROM v WHERE keys = 0)}),
	'0',
	'the named view of the second pipeline (Delta only, per desk and computed area) equals the oracle');
is( $node->safe_psql(
		$db, q{
WITH readings AS (SELECT DISTINCT key, version, value, risk_type, qty, fee, cpty,
		date_bin('10 minutes', taken, timestamptz '1970-01-01 00:00:00+00') AS window_start
	FROM truth_measured WHERE NOT deleted),
oracle AS (
	SELECT window_start, risk_type, 2 - GROUPING(risk_type) AS level, sum(value) AS total,
		count(*) AS keys, coalesce(sum(qty), 0), count(qty),
		trim_scale(sum(qty)) / nullif(count(qty), 0), coalesce(sum(fee), 0), count(fee),
		trim_scale(sum(fee)) / nullif(count(fee), 0), min(value), max(value), min(qty), max(qty),
		count(DISTINCT cpty)
	FROM readings GROUP BY ROLLUP (window_start, risk_type) HAVING GROUPING(window_start) = 0),
win AS (SELECT window_start, risk_type, level, total, keys, qty_sum, qty_count, qty_avg, fee_sum,
		fee_count, fee_avg, value_min, value_max, qty_min, qty_max, cpty_distinct FROM windowed.windows)
SELECT (SELECT count(*) FROM (SELECT * FROM win EXCEPT ALL SELECT * FROM oracle) a)
	+ (SELECT count(*) FROM (SELECT * FROM oracle EXCEPT ALL SELECT * FROM win) o)}),
	'0',
	'the windows of the third pipeline equal the oracle');
is( $node->safe_psql(
		$db,
		"SELECT bool_and(ingested = applied + duplicates + stale + dead_lettered AND dead_lettered = 0 AND ingested >= CASE name WHEN 'windowed' THEN $windowed_lines ELSE $sent END) FROM exactonce.pipelines WHERE name IN ('trades', 'measured', 'windowed')"
	),
	't',
	'accounting identity holds, nothing dead-lettered, every event ingested, in all three pipelines');
# verify() squares the cells with state, and the leaves' reserves of
# extremes with their live keys: none was filled from a state ahead of the
# aggregates (a batch a worker left staged for another to apply)
is( $node->safe_psql(
		$db,
		"SELECT string_agg(v.item || ' ' || coalesce(v.cell, '') || ': ' || v.detail, '; ') FROM unnest(ARRAY['trades', 'measured', 'windowed']) p, exactonce.verify(p) v WHERE NOT v.ok"
	),
	'',
	'verify() finds nothing wrong in the three pipelines, reserves of extremes included');
# the ledger keeps the tokens of the two queue partitions at most: its
# bound is set by how far the workers lag, not by the volume
is($node->safe_psql($db, 'SELECT (SELECT count(*) FROM trades.ledger) + (SELECT count(*) FROM measured.ledger) + (SELECT count(*) FROM windowed.ledger)'), '0',
	'the ledgers are empty once everything is drained');
cmp_ok($ledger_max, '<=', 2 * $events / $batch / 4 + 50,
	"the ledger stayed bounded during the load (at most $ledger_max rows)");
cmp_ok($faults, '>', 0, "faults were injected ($faults)");

my $secs = $done - $start;
diag(
	sprintf(
		'resilience: %d events (%d distinct) loaded in %.1f s, exact aggregates after %.1f s (%d events/s end to end); ledger at most %d rows; faults injected %d, kills survived %d, immediate shutdowns %d, chunks resent %d; verdict: %s',
		$sent, $events, $loaded - $start, $secs, $sent / $secs, $ledger_max, $faults, $kills,
		$restarts, $resends, Test::More->builder->is_passing ? 'exact' : 'FAILED'));

$node->stop;
done_testing();
