# Rewrites of a half-drained queue partition (VACUUM FULL, a rewriting ALTER
# TABLE, SET ACCESS METHOD; state, aggregates and ledger rewritten too) move
# its rows; the shards find their positions
# again and every event counts once, also where a producer gave every row
# one ingest_id.  CLUSTER, which reorders the rows, and
# a DELETE of rows a shard took are refused loudly and change nothing.  A trigger on state, whose writes it
# would not see, is refused until it is gone.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $node = eo_node('rewrites');
my $db = 'postgres';
eo_setup($node, $db);
my $next = 1;

# half-drain events (all with ingest_id $id, if given), rewrite with $sql
# (given the partition being drained), produce more, let the workers finish
sub rewrite_mid_drain
{
	my ($label, $sql, $id) = @_;
	ok(eo_half_drain($node, $db, $next, $next + 29999, $id), "$label: half way through a partition");
	$next += 30000;
	my $part = eo_queue_partition($node, $db);
	my $before = $node->safe_psql($db, "SELECT pg_relation_filenode('$part')");
	$node->safe_psql($db, $sql =~ s/PART/$part/gr);
	isnt($node->safe_psql($db, "SELECT pg_relation_filenode('$part')"),
		$before, "$label: the partition was rewritten");
	eo_produce($node, $db, $next, $next + 4999);
	$next += 5000;
	eo_resume($node, $db);
	ok(eo_wait_drained($node, $db), "$label: drained");
	eo_check($node, $db, $label);
	return;
}

my $log_offset = -s $node->logfile;
rewrite_mid_drain('VACUUM FULL', 'VACUUM FULL PART; VACUUM FULL trades.state, trades.aggregates, trades.ledger');
ok($node->log_contains(qr/found its position in rewritten queue partition/, $log_offset),
	'the shards found their positions again');
# a producer may give its rows their ingest_id: OVERRIDING SYSTEM VALUE
# needs nothing but INSERT
$node->safe_psql($db,
	'CREATE ROLE rw_producer; GRANT USAGE ON SCHEMA trades TO rw_producer; GRANT INSERT ON trades.ingest TO rw_producer');
is( $node->psql(
		$db, "SET ROLE rw_producer; BEGIN;
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, ingest_id)
	OVERRIDING SYSTEM VALUE VALUES ('p', 1, 1, 'x', 'x', 'x', 7);
ROLLBACK"),
	0, 'a producer with INSERT alone gives a row its ingest_id');
# a producer that gives every row one ingest_id: after the rewrite the TID
# of each shard's position holds another row of that ingest_id, and only
# the file the position was read from (shard.drain_file) tells the rewrite
rewrite_mid_drain('VACUUM FULL, one ingest_id for every row', 'VACUUM FULL PART', 7);
rewrite_mid_drain('rewriting ALTER TABLE',
	"ALTER TABLE trades.ingest ALTER COLUMN event_time TYPE timestamptz USING event_time + interval '0 s'");
# a second table access method on heap's handler, so that the change rewrites
$node->safe_psql($db, 'CREATE ACCESS METHOD heap2 TYPE TABLE HANDLER heap_tableam_handler');
rewrite_mid_drain('SET ACCESS METHOD', 'ALTER TABLE PART SET ACCESS METHOD heap2');
rewrite_mid_drain('CLUSTER by ingest_id', 'CREATE INDEX by_id ON PART (ingest_id); CLUSTER PART USING by_id; DROP INDEX trades.by_id');

# CLUSTER in another order: the digest of the rows before the position
# differs, and the shards refuse to go on
ok(eo_half_drain($node, $db, $next, $next + 29999), 'CLUSTER by key: half way through a partition');
$next += 30000;
# the whole partition being drained, every shard's table of it
my $whole_sql = q{SELECT 'trades.ingest_' || drain_rotation % 2 FROM trades.shard WHERE shard = 0};
my $part = $node->safe_psql($db, $whole_sql);
my $aggregates = "SELECT string_agg(level || coalesce(risk_type, '') || coalesce(region, '') || total || '/' || keys, ',' ORDER BY 1) FROM trades.aggregates";
my $before = $node->safe_psql($db, $aggregates);
$node->safe_psql($db, "CREATE INDEX by_key ON $part (key DESC); CLUSTER $part USING by_key; DROP INDEX trades.by_key");
eo_resume($node, $db);
ok( $node->poll_query_until(
		$db,
		"SELECT last_error LIKE '%cannot find its position%' FROM exactonce.pipelines WHERE name = 'trades'"),
	'CLUSTER in another order: the workers refuse the partition');
my ($rc, $out, $err) = $node->psql($db, "SELECT exactonce.flush('trades')");
like($err, qr/cannot find its position.*\n.*DETAIL.*\n.*HINT:  Queue partitions must keep their rows and their order/s,
	'flush refuses with the reason and a hint');
is($node->safe_psql($db, $aggregates), $before, 'nothing was counted from the reordered partition');

# a new pipeline: a trigger on state is refused, then dropped
$node->safe_psql($db, q{
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('trades', true);
DROP TABLE truth, sent;
CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
});
eo_setup($node, $db);
$node->safe_psql($db, 'CREATE TRIGGER watch AFTER INSERT OR UPDATE ON trades.state FOR EACH ROW EXECUTE FUNCTION noop()');
eo_produce($node, $db, 1, 3000);
ok( $node->poll_query_until(
		$db,
		"SELECT last_error LIKE '%has triggers%' FROM exactonce.pipelines WHERE name = 'trades'"),
	'a trigger on state: the workers refuse to write state');
is($node->safe_psql($db, 'SELECT count(*) FROM trades.state'), '0', 'and wrote nothing');
$node->safe_psql($db, 'DROP TRIGGER watch ON trades.state');
ok(eo_wait_drained($node, $db), 'with the trigger gone, the pipeline drains');
eo_check($node, $db, 'trigger dropped');

# rows a shard took deleted from a half-drained partition, its last one
# among them: the shard counts its rows again, finds fewer than it took,
# and refuses to go on
$next = 3001;
ok(eo_half_drain($node, $db, $next, $next + 29999), 'DELETE: half way through a partition');
$part = $node->safe_psql($db, $whole_sql);
$before = $node->safe_psql($db, $aggregates);
is( $node->safe_psql(
		$db,
		"WITH d AS (DELETE FROM $part WHERE ingest_id IN (SELECT drain_row FROM trades.shard WHERE drain_count > 0) RETURNING 1)
		 SELECT count(*) > 0 FROM d"),
	't', 'DELETE: the last rows the shards took are deleted');
eo_resume($node, $db);
ok( $node->poll_query_until(
		$db,
		"SELECT last_error LIKE '%cannot find its position%' FROM exactonce.pipelines WHERE name = 'trades'"),
	'DELETE of rows a shard took: the workers refuse the partition');
($rc, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\nSELECT exactonce.flush('trades')");
like($err, qr/55000: shard \d+ of pipeline "trades" cannot find its position.*\n.*DETAIL:  The shard had taken \d+ rows of the partition; the partition now has (other rows before that point|fewer rows of its keys)/,
	'flush refuses with 55000: the rows the shard counts are not the ones it took');
is($node->safe_psql($db, $aggregates), $before, 'nothing more was counted');

$node->stop;
done_testing();
