# Key shards: the shards of one pipeline are drained in parallel by
# different workers, each taking only its own keys.  A shard that is held up
# holds up its own keys (and the next rotation), never the other shard; the
# view counts what each shard still has to take; results are exact with one,
# two and three shards (more shards than workers), and when set_shards()
# changes the shards while the workers drain; the view's count holds with
# the shards part way through a partition, also once it was rewritten.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('shards');
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('sh2', ARRAY['a']);
SELECT exactonce.create_pipeline('sh1', ARRAY['a'], shards => 1);
SELECT exactonce.create_pipeline('sh3', ARRAY['a'], shards => 3);
-- the shard of a key: the hash of its bytes, as hashtext() computes it
CREATE FUNCTION shard_of(key text, shards int) RETURNS int LANGUAGE sql IMMUTABLE
AS $$ SELECT ((hashtext(key)::bigint & 4294967295) % shards)::int $$;
-- what the producer committed, per pipeline
CREATE TABLE produced (pipe text, key text, version bigint, value numeric, a text);
-- rows of a pipeline's aggregates and of the oracle from produced that are
-- not in the other
CREATE FUNCTION mismatches(pipe text) RETURNS bigint LANGUAGE plpgsql AS $f$
DECLARE n bigint;
BEGIN
	EXECUTE format($q$
	  WITH truth AS (
	    SELECT a, 1 - GROUPING(a) AS level, sum(value) AS total, count(*) AS keys
	    FROM (SELECT DISTINCT ON (key) * FROM produced WHERE pipe = %L ORDER BY key, version DESC) s
	    GROUP BY ROLLUP (a))
	  SELECT count(*) FROM ((SELECT a, level, total, keys FROM %I.aggregates EXCEPT ALL SELECT * FROM truth)
	                        UNION ALL
	                        (SELECT * FROM truth EXCEPT ALL SELECT a, level, total, keys FROM %I.aggregates)) m$q$,
	  pipe, pipe, pipe) INTO n;
	RETURN n;
END $f$;
});

# produce(pipeline, batch): one transaction adds 2000 events over 3000 keys,
# with repeats and late versions, in random order; a (key, version) always
# has the same content
sub produce
{
	my ($pipe, $batch) = @_;
	$node->safe_psql(
		$db, qq{
BEGIN;
CREATE TEMP TABLE b ON COMMIT DROP AS
SELECT '$pipe'::text AS pipe, 'k' || k AS key, v::bigint AS version, ((k * 31 + v * 17) % 1000)::numeric / 10 AS value,
       'a' || ((k + v) % 4) AS a
FROM (SELECT i % 3000 AS k, ($batch * 7 + i) % 11 AS v FROM generate_series(1, 2000) i) g;
INSERT INTO produced SELECT * FROM b;
INSERT INTO $pipe.ingest (key, version, value, a) SELECT key, version, value, a FROM b ORDER BY random();
COMMIT;
});
	return;
}

sub sql
{
	my ($sql) = @_;
	return $node->safe_psql($db, $sql);
}

sub ingested
{
	my ($pipe) = @_;
	return sql("SELECT ingested FROM exactonce.pipelines WHERE name = '$pipe'");
}

# 1. shard 1 held up (as a long flush() or a caller of the stages would):
# shard 0's worker drains shard 0's keys meanwhile, and the worker of shard
# 1 skips it and serves its other pipelines
ok( $node->poll_query_until(
		$db, "SELECT worker_pid IS NOT NULL FROM exactonce.pipelines WHERE name = 'sh2'"),
	'drain workers serve the pipeline');
my $holder = $node->background_psql($db);
$holder->query_safe('BEGIN');
$holder->query_safe('SELECT * FROM sh2.shard WHERE shard = 1 FOR UPDATE');
sql(q{
INSERT INTO sh2.ingest (key, version, value, a) SELECT 'k' || i, 1, 1, 'a' || (i % 4) FROM generate_series(1, 4000) i;
INSERT INTO produced SELECT 'sh2', 'k' || i, 1, 1, 'a' || (i % 4) FROM generate_series(1, 4000) i;
});
my $s0 = sql("SELECT count(*) FROM produced WHERE pipe = 'sh2' AND shard_of(key, 2) = 0");
ok($node->poll_query_until($db, "SELECT count(*) = $s0 FROM sh2.state"),
	"shard 0's keys are applied while shard 1 is held");
is(sql('SELECT count(*) FROM sh2.state WHERE shard_of(key, 2) = 1'), '0', 'no key of shard 1 is applied');
is(sql("SELECT total = $s0 AND keys = $s0 FROM sh2.aggregates WHERE level = 0"),
	't', 'aggregates hold exactly what shard 0 applied');
is( sql(
		"SELECT queued = 4000 - $s0 AND ingested = $s0 AND applied = $s0 FROM exactonce.pipelines WHERE name = 'sh2'"
	),
	't',
	"the view counts shard 1's events as queued, shard 0's as applied");
is(sql("SELECT array_agg(taken ORDER BY shard) = ARRAY[$s0, 0]::bigint[] FROM sh2.shard"),
	't', 'each shard counts the events it took');
is( sql(
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'exactonce drain' AND wait_event_type = 'Lock'"
	),
	'0',
	'no worker waits for the held shard');

# sh1's only shard goes to the worker of sh2's shard 1 ((id + shard) % 2)
is( sql(
		"SELECT (a.id + 0) % 2 = (b.id + 1) % 2 FROM exactonce.pipeline a, exactonce.pipeline b WHERE a.name = 'sh1' AND b.name = 'sh2'"
	),
	't',
	"sh1's shard and sh2's shard 1 have the same worker");
produce('sh1', 0);
ok(eo_wait_drained($node, $db, 'sh1'), 'the worker of the held shard drains its other pipelines meanwhile');
$holder->query_safe('COMMIT');
$holder->quit;
ok(eo_wait_drained($node, $db, 'sh2'), 'shard 1 is drained once released');
is(sql("SELECT mismatches('sh2')"), '0', 'aggregates equal the oracle');
ok($node->poll_query_until($db, 'SELECT rotation = drain_rotation FROM sh2.progress'),
	'the drained partition is retired once every shard has passed it');
is(sql(eo_queue_empty_sql('sh2')), 't', 'the queue holds no rows, and no more pages than it reuses');

# 2. one, two and three shards (two workers) under a stream of batches
for my $batch (1 .. 6)
{
	produce($_, $batch) for qw(sh1 sh2 sh3);
}
for my $pipe (qw(sh1 sh2 sh3))
{
	ok(eo_wait_drained($node, $db, $pipe), "$pipe: drained");
	is(sql("SELECT mismatches('$pipe')"), '0', "$pipe: aggregates equal the oracle");
	is(sql("SELECT sum(taken) FROM $pipe.shard"),
		ingested($pipe), "$pipe: the shards took every event the counters count");
	is(ingested($pipe), sql("SELECT count(*) FROM produced WHERE pipe = '$pipe'"),
		"$pipe: every event counted once");
}
is(sql('SELECT count(DISTINCT shard_of(key, 3)) FROM sh3.state'), '3', 'sh3: all three shards applied keys');

# 3. set_shards() while the workers drain a stream: 2 -> 3 -> 1 -> 2 shards
my %reshard = (8 => 3, 10 => 1, 12 => 2);
for my $batch (7 .. 14)
{
	produce('sh2', $batch);
	sql("SELECT exactonce.set_shards('sh2', $reshard{$batch})") if $reshard{$batch};
}
ok(eo_wait_drained($node, $db, 'sh2'), 'sh2: drained across three changes of its shards');
is(sql("SELECT mismatches('sh2')"), '0', 'sh2: aggregates equal the oracle');
is(ingested('sh2'), sql("SELECT count(*) FROM produced WHERE pipe = 'sh2'"), 'sh2: every event counted once');
is(sql("SELECT count(*) || ' ' || sum(taken) FROM sh2.shard"),
	'2 ' . ingested('sh2'), 'sh2: two shards, which took every event');

# 4. the view counts what each shard has still to take while both shards
# stand part way through a partition: by the TIDs of their positions, and,
# once a rewrite moved the rows to other TIDs, by the counts of their rows
eo_alter_system($node, 'exactonce.batch_size' => 50);
sql(q{SELECT exactonce.create_pipeline('sh4', ARRAY['a'], shards => 2)});
# a key of each shard half way through the queue, held by an uncommitted
# insert of its state row, stops that shard's worker there (it waits on the
# key's index entry) until the pause is in place
my @held = map {
	sql("SELECT 'k' || i FROM generate_series(10000, 20000) i WHERE shard_of('k' || i, 2) = $_ LIMIT 1")
} (0, 1);
my $stopper = $node->background_psql($db);
$stopper->query_safe('BEGIN');
$stopper->query_safe(
	"INSERT INTO sh4.state (key, a, deleted, version, value, updated_at) VALUES ('$held[0]', 'a0', false, 0, 0, now()), ('$held[1]', 'a0', false, 0, 0, now())"
);
sql(q{
INSERT INTO sh4.ingest (key, version, value, a) SELECT 'k' || i, 1, 1, 'a' || (i % 4) FROM generate_series(1, 20000) i;
INSERT INTO produced SELECT 'sh4', 'k' || i, 1, 1, 'a' || (i % 4) FROM generate_series(1, 20000) i;
});
ok($node->poll_query_until($db, 'SELECT bool_and(taken > 0) FROM sh4.shard'), 'sh4: both shards take batches');
sql(q{SELECT exactonce.pause('sh4')});
$stopper->query_safe('ROLLBACK');
$stopper->quit;
my ($taken, $before) = (-1, -2);
while ($taken != $before)
{
	$before = $taken;
	sleep 1;
	$taken = sql('SELECT sum(taken) FROM sh4.shard');
}
ok($taken > 0 && $taken < 20000, "sh4: paused part way through the partition ($taken of 20000 taken)");
is(sql(q{SELECT queued FROM exactonce.pipelines WHERE name = 'sh4'}),
	20000 - $taken, 'sh4: the view counts the rows the shards have still to take');
# the table of shard 0's rows in the partition being drained
my $part = sql(q{SELECT relid::regclass FROM pg_partition_tree((SELECT 'sh4.ingest_' || drain_rotation % 2 FROM sh4.progress)::regclass)
	WHERE isleaf ORDER BY relid::regclass::text LIMIT 1});
my $moved = sql("SELECT ctid FROM $part ORDER BY ctid OFFSET 1000 LIMIT 1");
sql("ALTER TABLE $part SET (fillfactor = 40); VACUUM FULL $part; ALTER TABLE $part RESET (fillfactor)");
isnt(sql("SELECT ctid FROM $part ORDER BY ctid OFFSET 1000 LIMIT 1"), $moved, 'sh4: VACUUM FULL moved the rows');
is(sql(q{SELECT queued FROM exactonce.pipelines WHERE name = 'sh4'}),
	20000 - $taken, '... and the view counts the same rows still to take');
my $log_offset = -s $node->logfile;
sql(q{SELECT exactonce.resume('sh4')});
ok(eo_wait_drained($node, $db, 'sh4'), 'sh4: drained once resumed');
like(slurp_file($node->logfile, $log_offset), qr/found its position in rewritten queue partition/,
	'sh4: the shards found their positions again');
is(sql("SELECT mismatches('sh4')"), '0', 'sh4: aggregates equal the oracle');
eo_alter_system($node, 'exactonce.batch_size' => undef);

$node->stop;
done_testing();
