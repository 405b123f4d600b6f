# pg_repack of every table a pipeline writes while the workers drain: state
# (and seen, in accumulate mode), which the stages write directly and so
# refuse to write while pg_repack's trigger is on them; ledger and
# aggregates, written through the executor; the queue, which pg_repack
# itself refuses (no primary key).  Afterwards the aggregates equal the
# oracle.  (aggregates, whose cells are keyed with NULLs, and the queue
# partitions have no key pg_repack could use: it skips them.)

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('repack', conf => "exactonce.batch_size = 500\n");
eo_setup($node, $db);
$node->safe_psql(
	$db, q{
CREATE EXTENSION pg_repack;
SELECT exactonce.create_pipeline('runs', ARRAY['runner'], 'accumulate');
CREATE TABLE runs_truth (key text, version bigint, value numeric, runner text, PRIMARY KEY (key, version));
});

# readings of runners, every distinct (key, version) once in runs_truth and
# at least once (every third twice) in the queue, shuffled
sub produce_runs
{
	my ($from, $to) = @_;
	$node->safe_psql(
		$db, qq{
BEGIN;
CREATE TEMP TABLE r ON COMMIT DROP AS
SELECT 'r' || (i % 300) AS key, i::bigint AS version, (i % 97)::numeric AS value,
	'runner' || (i % 300) % 7 AS runner FROM generate_series($from, $to) i;
INSERT INTO runs_truth SELECT * FROM r;
INSERT INTO runs.ingest (key, version, value, runner)
	SELECT key, version, value, runner FROM (SELECT * FROM r UNION ALL SELECT * FROM r WHERE version % 3 = 0) e
	ORDER BY md5(key || version || random());
COMMIT;});
	return;
}

# repack a table while both pipelines drain new events; $skipped: pg_repack
# leaves it alone, for want of a key
sub repack
{
	my ($table, $round, $skipped) = @_;
	my $base = 1 + $round * 20000;
	eo_produce($node, $db, $base, $base + 19999);
	produce_runs($base, $base + 19999);
	$node->command_checks_all(
		[ 'pg_repack', '--no-superuser-check', '-d', $node->connstr($db), '-t', $table ],
		0, [qr/^$/],
		[ $skipped ? qr/must have a primary key or not-null unique keys/ : qr/^INFO: repacking table "\Q$table\E"$/m ],
		"pg_repack $table while the workers drain" . ($skipped ? ': skipped, no key' : ''));
	return;
}

repack('trades.state', 0, 0);
repack('runs.seen', 1, 0);
repack('runs.state', 2, 0);
repack('trades.ledger', 3, 0);
repack('trades.aggregates', 4, 1);
repack('trades.ingest_0_0', 5, 1);
# a worker meets pg_repack's trigger only if it writes state while the
# trigger is on: on a busy machine the drain may miss each window, so state
# is repacked again under new events until it has (at most five times)
my $waited = qr/has triggers, which the pipeline's writes would not fire/;
for (my $round = 6; $round < 11 && !$node->log_contains($waited); $round++)
{
	repack('trades.state', $round, 0);
}
ok($node->log_contains($waited), 'the state stage waited while pg_repack followed state or seen');

ok(eo_wait_drained($node, $db), 'the workers drain');
eo_check($node, $db, 'latest mode, repacked');
$node->poll_query_until($db, "SELECT queued = 0 AND staged = 0 FROM exactonce.pipelines WHERE name = 'runs'")
  or die 'runs not drained';
is( $node->safe_psql(
		$db, q{
SELECT count(*) FROM (
	(SELECT runner, level, total, keys FROM runs.aggregates
	 EXCEPT ALL
	 SELECT runner, 1 - GROUPING(runner), sum(value), count(*) FROM runs_truth GROUP BY ROLLUP (runner))
	UNION ALL
	(SELECT runner, 1 - GROUPING(runner), sum(value), count(*) FROM runs_truth GROUP BY ROLLUP (runner)
	 EXCEPT ALL
	 SELECT runner, level, total, keys FROM runs.aggregates)) d}),
	'0', 'accumulate mode, repacked: aggregates equal the oracle');
is( $node->safe_psql(
		$db, q{
SELECT ingested = applied + duplicates AND applied = (SELECT count(*) FROM runs_truth)
FROM exactonce.pipelines WHERE name = 'runs'}),
	't', 'accumulate mode: every reading applied once');

$node->stop;
done_testing();
