# A batch left staged.  A worker that finds another worker holding the
# pipeline's progress row (applying the staged batches, through its commit)
# leaves its own batch staged for that one and commits without waiting its
# turn; the holder looks for staged batches once it has committed.  Here a
# trigger on the aggregates makes one reduce take 3 s, so that the other
# shard's worker leaves its batch: a snapshot then has the batch staged, its
# keys in state and not in the aggregates.  With nothing more inserted it
# is applied all the same; wait_applied() returns only once it is;
# verify() in a read-only transaction reports it, and otherwise takes the
# pipeline and applies it, also in a transaction that holds the progress
# row already; pause() and drop_pipeline() apply it; the
# counters add up; and a reserve of extremes is not filled from a state
# ahead of the aggregates.

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
	IF s = 'Infinity' THEN
		WHILE NOT EXISTS (SELECT FROM public.gate) LOOP
			PERFORM pg_sleep(0.02);
		END LOOP;
		DELETE FROM public.gate;
	ELSIF s IS NOT NULL THEN
		PERFORM pg_sleep(s);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER slow AFTER INSERT ON ls.aggregates FOR EACH STATEMENT EXECUTE FUNCTION slow();
-- a hold of 'Infinity' lasts until a row is put in gate
CREATE TABLE gate (opened boolean);
-- while fail has a row, every reduce that upserts the aggregates fails
CREATE TABLE fail (failing boolean);
CREATE FUNCTION failing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT FROM public.fail) THEN
		RAISE EXCEPTION 'reduce failing on purpose';
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER failing AFTER INSERT ON ls.aggregates FOR EACH STATEMENT EXECUTE FUNCTION failing();
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
# key a new version, after making the next reduce sleep 3 s (or as long as
# the hold given)
sub produce
{
	my $hold = shift // '3';
	$version++;
	$node->safe_psql(
		$db, qq{
INSERT INTO hold VALUES ($hold);
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

# 3b: verify() in a transaction that holds the progress row already (a
# caller of the stages, here release()) applies the batch left staged
# under the lock it has, taking no shard row after it.  The holder's
# reduce waits at the gate until the batch is left; from then on every
# reduce fails, so the batch stays left until the caller applies it.
produce(q{'Infinity'});
ok($node->poll_query_until($db, $left), 'a batch is left staged while the holder waits at the gate');
$node->safe_psql($db, 'INSERT INTO fail VALUES (true); INSERT INTO gate VALUES (true)');
ok( $node->poll_query_until(
		$db, q{SELECT NOT EXISTS (SELECT FROM gate)
	AND (SELECT last_error LIKE '%reduce failing on purpose%' FROM exactonce.pipelines WHERE name = 'ls')
	AND EXISTS (SELECT FROM ls.ledger WHERE applied_at IS NULL AND source = 'queue')}),
	'the holder committed, and the reduce of the batch left fails');
is( $node->safe_psql(
		$db, qq{
BEGIN;
SELECT exactonce.release('ls', 'elsewhere', 0);
DELETE FROM fail;
SELECT count(*) FROM exactonce.verify('ls') WHERE NOT ok;
SELECT (SELECT count(*) FROM ls.ledger WHERE applied_at IS NULL), ($mismatch_sql);
COMMIT;
}), "0\n0\n0|0", 'verify() in a transaction holding the progress row applies it and finds all well');
is(mismatches(), '0', 'aggregates equal the oracle once it commits');

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
FROM exactonce.pipelines WHERE name = 'ls'}), '10000|10000|10000|0',
	'each shard counted what it drained, and the view adds them up');

# drop_pipeline() without force applies a batch left staged rather than
# refuse to discard it
produce();
ok($node->poll_query_until($db, $left), 'a batch is left staged before a drop');
is($node->safe_psql($db, "SELECT exactonce.drop_pipeline('ls'); SELECT count(*) FROM exactonce.pipeline WHERE name = 'ls'"),
	"\n0", 'drop_pipeline() applies it and drops the pipeline');

# 5: a reserve of extremes is not filled from a state ahead of the
# aggregates.  In pipeline mm (min and max of value, two shards) leaf x has
# 100 keys of shard 0 with values 1..100 and 100 of shard 1 with 101..200,
# so its reserve of least values is all shard 0's.  Then one transaction
# tombstones shard 0's twenty least and adds five keys of shard 1 with
# values below them.  Shard 1's batch names leaf m1 too, and a trigger on
# the ledger holds its staging for 1.5 s, so shard 0's worker reduces
# first; a trigger on the aggregates holds that reduce for 3 s after its
# upsert, during which shard 1's worker leaves its batch staged and
# commits.  Shard 0's reduce then finds leaf x's reserve spent and reads
# the leaf's keys in state, shard 1's new ones among them: a reserve kept
# from that read would count them twice once their batch is applied.
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('mm', ARRAY['d'], min_max => ARRAY['value'], shards => 2);
CREATE FUNCTION shard_of(key text) RETURNS int LANGUAGE sql IMMUTABLE
AS $$ SELECT ((hashtext(key)::bigint & 4294967295) % 2)::int $$;
CREATE TABLE mm_keys AS
SELECT key, shard_of(key) AS shard, row_number() OVER (PARTITION BY shard_of(key) ORDER BY n) AS r
FROM (SELECT 'mk' || n AS key, n FROM generate_series(1, 1000) n) k;
CREATE TABLE mm_produced (key text, version bigint, value numeric, d text, deleted boolean);
INSERT INTO mm_produced
SELECT key, 1, CASE shard WHEN 0 THEN r ELSE 100 + r END, 'x', false FROM mm_keys WHERE r <= 100;
INSERT INTO mm.ingest (key, version, value, d) SELECT key, version, value, d FROM mm_produced;
CREATE FUNCTION slow_staging() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF 'm1' = ANY (NEW.cells) THEN
		PERFORM pg_sleep(1.5);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER slow_staging AFTER INSERT ON mm.ledger FOR EACH ROW EXECUTE FUNCTION slow_staging();
CREATE TRIGGER slow AFTER INSERT ON mm.aggregates FOR EACH STATEMENT EXECUTE FUNCTION slow();
CREATE TRIGGER record AFTER INSERT OR UPDATE ON mm.ledger FOR EACH ROW EXECUTE FUNCTION record();
});
ok(eo_wait_drained($node, $db, 'mm'), 'mm: the first 200 keys are drained');
$node->safe_psql(
	$db, q{
TRUNCATE staged_by, applied_by;
INSERT INTO hold VALUES (3);
BEGIN;
INSERT INTO mm_produced
SELECT key, 2, 0, 'x', true FROM mm_keys WHERE shard = 0 AND r <= 20
UNION ALL SELECT key, 1, r / 10.0, 'x', false FROM mm_keys WHERE shard = 1 AND r BETWEEN 201 AND 205
UNION ALL SELECT key, 1, 7, 'm1', false FROM mm_keys WHERE shard = 1 AND r = 206;
INSERT INTO mm.ingest (key, version, value, d, deleted)
SELECT key, version, value, d, deleted FROM mm_produced WHERE version = 2 OR key IN
	(SELECT key FROM mm_keys WHERE shard = 1 AND r BETWEEN 201 AND 206);
COMMIT;
});
ok(eo_wait_drained($node, $db, 'mm'), 'mm: drained');
ok($node->safe_psql($db, $handed) > 0, 'mm: shard 1\'s batch was applied by another transaction');
is( $node->safe_psql(
		$db, q{
WITH live AS (SELECT DISTINCT ON (key) * FROM mm_produced ORDER BY key, version DESC),
truth AS (SELECT d, min(value) AS lo, max(value) AS hi, count(*) AS keys FROM live WHERE NOT deleted GROUP BY d)
SELECT count(*) FROM truth t FULL JOIN (SELECT * FROM mm.aggregates WHERE level = 1) a USING (d)
WHERE a.value_min IS DISTINCT FROM t.lo OR a.value_max IS DISTINCT FROM t.hi OR a.keys IS DISTINCT FROM t.keys}),
	'0', 'mm: the leaves\' min, max and keys equal the oracle');
is( $node->safe_psql(
		$db, q{SELECT coalesce(string_agg(item || ' ' || coalesce(cell, '') || ': ' || detail, '; '), '')
FROM exactonce.verify('mm') WHERE NOT ok}),
	'', 'mm: verify() finds every reserve of extremes as the leaf\'s live keys make it');

$node->stop;
done_testing();
