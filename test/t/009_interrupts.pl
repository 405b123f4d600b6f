# A cancel or statement_timeout stops every long call within moments, also
# inside the loops over events, deltas and cells, and leaves nothing half
# done: the queue, state and counters are as before and still add up.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('interrupts', preload => 0);
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('slow', ARRAY['d']);
CREATE TYPE ev AS (key text, version bigint, value numeric, d text);
CREATE TABLE arr AS SELECT array_agg(('k' || i, 1, i, 'x' || i % 1000)::ev) AS a,
	array_agg(i::bigint ORDER BY i) AS o FROM generate_series(1, 2000000) i;
INSERT INTO slow.ingest (key, version, value, d) SELECT 'q' || i, 1, 1, 'y' || i % 1000 FROM generate_series(1, 2000000) i;
});
my $before = $node->safe_psql($db,
	"SELECT (SELECT count(*) FROM slow.ingest) || ' queued, ' || (SELECT count(*) FROM slow.state) || ' in state'");

# each call, canceled by a statement_timeout well inside it (the view,
# which counts the 2M queued rows, takes some 200 ms)
for my $call (
	[ 'state_upsert', '200ms', "SELECT count(*) FROM exactonce.state_upsert('slow', (SELECT a FROM arr))" ],
	[ 'ingest', '200ms', "SELECT exactonce.ingest('slow', 'src', (SELECT a FROM arr), (SELECT o FROM arr))" ],
	[ 'flush', '200ms', "SELECT exactonce.flush('slow')" ],
	[ 'the view', '30ms', "SELECT queued FROM exactonce.pipelines" ],
	[ 'set_shards', '200ms', "SELECT exactonce.set_shards('slow', 3)" ])
{
	my ($name, $timeout, $sql) = @$call;
	my $t0 = time;
	my ($rc, $out, $err) = $node->psql($db, "SET statement_timeout = '$timeout'; $sql");
	my $took = time - $t0;
	like($err, qr/canceling statement due to statement timeout/, "$name: canceled by statement_timeout");
	cmp_ok($took, '<', 5, sprintf("%s: within moments (%.1f s)", $name, $took));
}
is( $node->safe_psql($db,
		"SELECT (SELECT count(*) FROM slow.ingest) || ' queued, ' || (SELECT count(*) FROM slow.state) || ' in state'"),
	$before, 'nothing half done: queue and state as before');
is( $node->safe_psql($db,
		"SELECT ingested = applied + duplicates + stale + dead_lettered AND ingested = 0 FROM exactonce.pipelines"),
	't', 'and the counters unchanged');

# a cancel (pg_cancel_backend, as Ctrl-C sends) of a flush
my $bg = $node->background_psql($db, on_error_stop => 0);
my $pid = $bg->query_safe('SELECT pg_backend_pid()');
$bg->query_until(qr/started/, "\\echo started\nSELECT exactonce.flush('slow');\n");
$node->poll_query_until($db, "SELECT state = 'active' AND query LIKE '%flush%' FROM pg_stat_activity WHERE pid = $pid");
my $t0 = time;
$node->safe_psql($db, "SELECT pg_cancel_backend($pid)");
$node->poll_query_until($db, "SELECT state = 'idle' FROM pg_stat_activity WHERE pid = $pid");
cmp_ok(time - $t0, '<', 5, 'a canceled flush stops within moments');
$bg->quit;
is( $node->safe_psql($db,
		"SELECT (SELECT count(*) FROM slow.ingest) || ' queued, ' || (SELECT count(*) FROM slow.state) || ' in state'"),
	$before, 'and leaves nothing half done');

# reduce_apply given a batch before the one staged ahead of it, which it
# builds on: a clean error, not an internal one
$node->safe_psql(
	$db, q{
CREATE TABLE staged AS
SELECT n, exactonce.map_stage('slow', ARRAY(SELECT d FROM exactonce.state_upsert('slow',
	(SELECT array_agg(e) FROM (SELECT 'one' AS key, n::bigint AS version, n::numeric AS value, 'c' || n AS d) e)) d)) AS token
FROM generate_series(1, 2) n;
});
my ($rc, $out, $err) = $node->psql($db,
	"SELECT exactonce.reduce_apply('slow', ARRAY(SELECT token FROM staged WHERE n = 2))",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  55000: the batches given would leave a cell/,
	'reduce_apply of tokens out of their staging order: 55000 with a reason');
is( $node->safe_psql($db, "SELECT exactonce.reduce_apply('slow', ARRAY(SELECT token FROM staged ORDER BY n DESC))"),
	'2', 'the same tokens together, in any order, apply');

$node->stop;
done_testing();
