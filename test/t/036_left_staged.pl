# A batch left staged.  A worker that finds another worker holding the
# pipeline's progress row (applying the staged batches, through its commit)
# leaves its own batch staged for that one and commits without waiting its
# turn; the holder looks for staged batches once it has committed.  Here a
# trigger on the aggregates makes one reduce take 3 s, so that the other
# shard's worker leaves its batch: a snapshot then has the batch staged, its
# keys in state and not in the aggregates.  With nothing more inserted it
# is applied all the same; wait_applied() returns only once it is;
# verify() in a read-only transaction reports it, and otherwise takes the
# pipeline and applies it; pause() applies it before it pauses; the
# counters add up.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('left_staged');
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('ls', ARRAY['a'], shards => 2);
CREATE TABLE produced (key text, version bigint, value numeric, a text);
-- the next reduce to upsert the aggregates sleeps this long
CREATE TABLE hold (secs float8);
CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	s float8;
BEGIN
	DELETE FROM public.hold RETURNING secs INTO s;
	IF s IS NOT NULL THEN
		PERFORM pg_sleep(s);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER slow AFTER INSERT ON ls.aggregates FOR EACH STATEMENT EXECUTE FUNCTION slow();
-- which transaction staged each batch, and which applied it
CREATE TABLE staged_by (token bytea, xid xid8);
CREATE TABLE applied_by (token bytea, xid xid8);
CREATE FUNCTION record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO public.staged_by VALUES (NEW.token, pg_current_xact_id());
	ELSIF OLD.applied_at IS NULL AND NEW.applied_at IS NOT NULL THEN
		INSERT INTO public.applied_by VALUES (NEW.token, pg_current_xact_id());
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER record AFTER INSERT OR UPDATE ON ls.ledger FOR EACH ROW EXECUTE FUNCTION record();
});

my $version = 0;

# produce(): one transaction of 2,000 events over both shards' keys, every
# key a new version, after making the next reduce sleep 3 s
sub produce
{
	$version++;
	$node->safe_psql(
		$db, qq{
INSERT INTO hold VALUES (3);
BEGIN;
INSERT INTO produced SELECT 'k' || i, $version, (i * $version) % 97, 'a' || ((i + $version) % 5)
FROM generate_series(1, 2000) i;
INSERT INTO ls.ingest (key, version, value, a)
SELECT key, version, value, a FROM produced WHERE version = $version;
COMMIT;
});
	return;
}

# rows of the aggregates and of the oracle from produced that are not in
# the other
my $mismatch_sql = q{
WITH truth AS (
	SELECT a, 1 - GROUPING(a) AS level, sum(value) AS total, count(*) AS keys
	FROM (SELECT DISTINCT ON (key) * FROM produced ORDER BY key, version DESC) s
	GROUP BY ROLLUP (a))
SELECT count(*) FROM ((SELECT a, level, total, keys FROM ls.aggregates EXCEPT ALL SELECT * FROM truth)
	UNION ALL (SELECT * FROM truth EXCEPT ALL SELECT a, level, total, keys FROM ls.aggregates)) m};

sub mismatches
{
	return $node->safe_psql($db, $mismatch_sql);
}

# a snapshot in which a worker's batch is staged, its keys in state with
# the newest version, and the aggregates behind
my $left = q{
SELECT EXISTS (SELECT FROM ls.ledger WHERE applied_at IS NULL AND source = 'queue')
	AND EXISTS (SELECT FROM ls.state WHERE version = (SELECT max(version) FROM produced))
	AND (SELECT total FROM ls.aggregates WHERE level = 0)
		IS DISTINCT FROM (SELECT sum(value) FROM produced WHERE version = (SELECT max(version) FROM produced))};

# the batches one transaction staged and another applied
my $handed = q{SELECT count(*) FROM staged_by s JOIN applied_by a USING (token) WHERE s.xid <> a.xid};

# 1: left and applied with nothing more inserted
produce();
ok($node->poll_query_until($db, $left), 'a worker leaves its batch staged while another applies')
  or diag($node->safe_psql($db, 'SELECT * FROM exactonce.pipelines; SELECT token, source, applied_at FROM ls.ledger'));
ok(eo_wait_drained($node, $db, 'ls'), 'and it is applied with nothing more inserted');
is(mismatches(), '0', 'aggregates equal the oracle');
ok($node->safe_psql($db, $handed) > 0, 'a batch was applied by another transaction than the one that staged it');

# 2: wait_applied() waits for the batch left staged
produce();
is( $node->safe_psql(
		$db, "SELECT exactonce.wait_applied('ls', '60s'); SELECT ($mismatch_sql),"
		  . " (SELECT count(*) FROM ls.ledger WHERE applied_at IS NULL)"),
	"\n0|0", 'wait_applied() returns once the batch left staged is applied');

# 3: verify() in a read-only transaction reports the batch; otherwise it
# takes the pipeline and applies it
produce();
ok($node->poll_query_until($db, $left), 'a batch is left staged again');
is( $node->safe_psql(
		$db, q{
BEGIN READ ONLY;
SELECT detail, ok FROM exactonce.verify('ls') WHERE item = 'ledger';
COMMIT;
}), '1 batches staged and not applied|f', 'verify() in a read-only transaction reports it');
is($node->safe_psql($db, "SELECT count(*) FROM exactonce.verify('ls') WHERE NOT ok"),
	'0', 'verify() otherwise takes the pipeline, applies it, and finds all well');
is(mismatches(), '0', 'aggregates equal the oracle');

# 4: pause() applies the batch before it pauses
produce();
ok($node->poll_query_until($db, $left), 'a batch is left staged once more');
$node->safe_psql($db, "SELECT exactonce.pause('ls')");
is( $node->safe_psql(
		$db, q{SELECT paused, staged, ingested = applied + duplicates + stale + dead_lettered
FROM exactonce.pipelines WHERE name = 'ls'}), 't|0|t', 'pause() applies it: nothing staged');
is(mismatches(), '0', 'the paused pipeline\'s aggregates equal the oracle');
$node->safe_psql($db, "SELECT exactonce.resume('ls')");

# the counters: every event once, in the shard rows
is( $node->safe_psql(
		$db, q{SELECT ingested, applied, (SELECT sum(ingested) FROM ls.shard), (SELECT ingested FROM ls.progress)
FROM exactonce.pipelines WHERE name = 'ls'}), '8000|8000|8000|0',
	'each shard counted what it drained, and the view adds them up');

$node->stop;
done_testing();
