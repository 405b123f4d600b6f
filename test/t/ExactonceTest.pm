
# ExactonceTest: what the TAP tests of exactonce share.
#
# A test's producer writes each event it makes once into table "truth" and
# sends it to the queue of pipeline "trades" at least once: with duplicates,
# late stale versions and in shuffled order, recording in table "sent" how
# many rows it queued, all in one transaction.  The oracle is computed from
# "truth" alone, never from the pipeline's state: a key counts with its
# highest version, in that version's cell, unless it is a tombstone.  A test
# is decided by eo_check: aggregates equal the oracle row for row, and the
# pipeline ingested exactly the rows that were sent, each accounted for once.

package ExactonceTest;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(eo_node eo_setup eo_produce eo_produce_aborted eo_wait_drained
  eo_drained_sql eo_mismatches eo_check eo_half_drain eo_pause eo_resume
  eo_queue_partition eo_alter_system eo_queue_empty_sql eo_keys_in_ranges);

# distinct keys of the producer's events
our $KEYS = 1000;

# eo_node(name, preload => 0|1, conf => text, init => {...}, start => 0|1):
# a cluster, by default with the workers preloaded for database postgres.
sub eo_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opt{init} // {} });
	$node->append_conf('postgresql.conf', "max_prepared_transactions = 10\n");
	$node->append_conf(
		'postgresql.conf', q{
shared_preload_libraries = 'exactonce'
exactonce.database = 'postgres'
exactonce.workers = 2
exactonce.naptime = '200ms'
}) if $opt{preload} // 1;
	$node->append_conf('postgresql.conf', $opt{conf}) if $opt{conf};
	$node->start if $opt{start} // 1;
	return $node;
}

# eo_setup(node, db): the extension, pipeline "trades" and the producer's
# record of what it made and sent.
sub eo_setup
{
	my ($node, $db) = @_;
	$node->safe_psql(
		$db, q{
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS exactonce;
SELECT exactonce.create_pipeline('trades', ARRAY['risk_type', 'region', 'trade_desk']);
CREATE TABLE truth (key text, version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, PRIMARY KEY (key, version));
CREATE TABLE sent (n bigint NOT NULL);
});
	return;
}

# The events numbered from .. to: event i is version i of key k<i % KEYS>;
# its cell changes with i (a modification that moves the key), and every
# 17th is a tombstone.
sub events_sql
{
	my ($from, $to) = @_;
	return qq{
SELECT 'k' || (i % $KEYS) AS key, i::bigint AS version, ((i * 7919) % 100000) / 100.0 AS value,
	(ARRAY['Delta', 'Vega', 'Gamma'])[1 + i % 3] AS risk_type,
	(ARRAY['AMER', 'EMEA', 'APAC'])[1 + (i / 3) % 3] AS region,
	(ARRAY['FXSpot', 'Rates', 'Credit', 'Equity'])[1 + (i / 7) % 4] AS trade_desk,
	i % 17 = 0 AS deleted
FROM generate_series(${from}::bigint, ${to}::bigint) i};
}

# The statements that produce events from .. to: recorded in truth, queued
# with every 5th twice and every 7th key's previous version again (stale
# unless it is still the newest), shuffled, and counted in sent.  With id,
# every row is queued with that ingest_id, as a producer may give it
# (OVERRIDING SYSTEM VALUE needs nothing but INSERT).
sub produce_sql
{
	my ($from, $to, $id) = @_;
	my $insert = defined $id
	  ? "INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted, ingest_id)
	OVERRIDING SYSTEM VALUE SELECT *, $id FROM queued;"
	  : "INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted)
	SELECT * FROM queued;";
	my $events = events_sql($from, $to);
	return qq{
BEGIN;
CREATE TEMP TABLE batch ON COMMIT DROP AS $events;
CREATE TEMP TABLE queued ON COMMIT DROP AS
SELECT * FROM (
	SELECT * FROM batch
	UNION ALL SELECT * FROM batch WHERE version % 5 = 0
	UNION ALL SELECT t.* FROM batch b JOIN truth t ON t.key = b.key AND t.version = b.version - $KEYS
		WHERE b.version % 7 = 0) e
ORDER BY md5(key || '/' || version || '/' || random());
INSERT INTO truth SELECT * FROM batch;
$insert
INSERT INTO sent SELECT count(*) FROM queued;
COMMIT;
};
}

# eo_produce(node, db, from, to[, id]): produce events from .. to (all with
# ingest_id id, if given).
sub eo_produce
{
	my ($node, $db, $from, $to, $id) = @_;
	$node->safe_psql($db, produce_sql($from, $to, $id));
	return;
}

# eo_produce_aborted(node, db, n): a transaction that queues n rows and
# rolls back, leaving dead rows that a rewrite of the partition removes,
# which moves every row after them.
sub eo_produce_aborted
{
	my ($node, $db, $n) = @_;
	$node->safe_psql(
		$db, qq{
BEGIN;
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
	SELECT 'aborted', i, 1, 'x', 'x', 'x' FROM generate_series(1, $n) i;
ROLLBACK;
});
	return;
}

sub eo_pause
{
	my ($node, $db) = @_;
	$node->safe_psql($db, "SELECT exactonce.pause('trades')");
	return;
}

sub eo_resume
{
	my ($node, $db) = @_;
	$node->safe_psql($db, "SELECT exactonce.resume('trades')");
	return;
}

# eo_alter_system(node, setting => value, ...): ALTER SYSTEM SET each
# setting (RESET where the value is undef) and reload the configuration.
sub eo_alter_system
{
	my ($node, %settings) = @_;
	my $sql = '';
	for my $name (sort keys %settings)
	{
		my $value = $settings{$name};
		$sql .=
		  defined $value
		  ? "ALTER SYSTEM SET $name = '$value';\n"
		  : "ALTER SYSTEM RESET $name;\n";
	}
	$node->safe_psql('postgres', $sql . 'SELECT pg_reload_conf();');
	return;
}

# eo_queue_partition(node, db): the table of the queue partition shard 0 is
# draining that holds shard 0's rows: the partition itself, or with more
# than one shard its table ingest_<partition>_0.
sub eo_queue_partition
{
	my ($node, $db) = @_;
	return $node->safe_psql(
		$db, q{
SELECT t.relid::regclass FROM trades.shard s,
	pg_partition_tree(('trades.ingest_' || s.drain_rotation % 2)::regclass) t
WHERE s.shard = 0 AND t.isleaf ORDER BY t.relid::regclass::text LIMIT 1});
}

# eo_half_drain(node, db, from, to[, id]): with the workers, leave the
# pipeline paused half way through a queue partition of events from .. to
# (after some aborted rows; all with ingest_id id, if given), every shard
# having taken some, and tell whether it is: some rows taken, some queued.
sub eo_half_drain
{
	my ($node, $db, $from, $to, $id) = @_;
	eo_pause($node, $db);
	eo_produce_aborted($node, $db, 2000);
	eo_produce($node, $db, $from, $to, $id);
	# a batch of one event per transaction: the shards are still far from
	# the partition's end when the poll below has seen each take one and
	# pauses them, however fast the drain and however slow the machine
	eo_alter_system($node, 'exactonce.batch_size' => 1);
	# a new session sees the setting once the postmaster has reloaded it,
	# which it does after signalling the workers: each takes it at the top
	# of its next round, before the resume below can reach it
	$node->poll_query_until($db, "SELECT current_setting('exactonce.batch_size') = '1'")
	  or die "the setting was not reloaded";
	eo_resume($node, $db);
	$node->poll_query_until($db,
		"SELECT bool_and(drain_count > 0) FROM trades.shard")
	  or die "a shard took nothing:\n" . $node->safe_psql(
		$db, q{
SELECT backend_type, state, wait_event_type, wait_event, left(query, 60) FROM pg_stat_activity;
SELECT * FROM exactonce.pipelines;
SELECT * FROM trades.progress;
SELECT * FROM trades.shard;
SELECT locktype, relation::regclass, mode, granted, pid, virtualtransaction FROM pg_locks WHERE locktype <> 'virtualxid';});
	eo_pause($node, $db);
	eo_alter_system($node, 'exactonce.batch_size' => undef);
	return $node->safe_psql(
		$db, q{
SELECT (SELECT sum(drain_count) FROM trades.shard) > 0 AND queued > 0
FROM exactonce.pipelines WHERE name = 'trades'}) eq 't';
}

# eo_queue_empty_sql(pipeline): a query that is true once the queue of the
# pipeline (default "trades") holds no rows, its TOAST tables no pages, and
# each table of its partitions no more pages than a drained one keeps, emptied, for
# the next rotations (queue.c, QUEUE_REUSE_MAX_PAGES): the queue takes no
# more space than that, whatever went through it.
sub eo_queue_empty_sql
{
	my ($pipeline) = @_;
	$pipeline //= 'trades';
	return qq{
SELECT (SELECT count(*) = 0 FROM $pipeline.ingest)
	AND bool_and(pg_relation_size(c.oid) <= s.cap
		AND coalesce(pg_relation_size(c.reltoastrelid), 0) = 0)
FROM pg_class c,
	(SELECT least(1024, setting::bigint / 512) * 8192 AS cap
	 FROM pg_settings WHERE name = 'shared_buffers') s
WHERE c.oid IN (SELECT relid FROM pg_partition_tree('$pipeline.ingest') WHERE isleaf)};
}

# eo_drained_sql(pipeline): a query that is true once the pipeline
# (default "trades") has nothing queued or staged and its counters account
# for every event it ingested.
sub eo_drained_sql
{
	my ($pipeline) = @_;
	$pipeline //= 'trades';
	return qq{
SELECT queued = 0 AND staged = 0 AND ingested = applied + duplicates + stale + dead_lettered
FROM exactonce.pipelines WHERE name = '$pipeline'};
}

# eo_wait_drained(node, db, pipeline): wait (bounded) until the pipeline
# (default "trades") is drained, as eo_drained_sql says.
sub eo_wait_drained
{
	my ($node, $db, $pipeline) = @_;
	return $node->poll_query_until($db, eo_drained_sql($pipeline));
}

# eo_keys_in_ranges(node, db, ranges): 't' if every key of the node's
# trades.state is in one of the ranges of keys given, as '(4, 0), (8, 7)'
# (modulus, remainder), the buckets of exactonce.key_bucket().
sub eo_keys_in_ranges
{
	my ($node, $db, $ranges) = @_;
	return $node->safe_psql(
		$db, "SELECT bool_and(EXISTS (SELECT FROM (VALUES $ranges) r(m, b)
			  WHERE exactonce.key_bucket(key, m) = b)) FROM trades.state");
}

# eo_mismatches(node, db, pipeline, truth): how many rows of the pipeline's
# aggregates (default "trades") and of the oracle computed from the table
# of events truth (default "truth", with eo_setup's columns) are not in the
# other.
sub eo_mismatches
{
	my ($node, $db, $pipeline, $truth) = @_;
	$pipeline //= 'trades';
	$truth //= 'truth';
	return $node->safe_psql(
		$db, qq{
WITH latest AS (SELECT DISTINCT ON (key) * FROM $truth ORDER BY key, version DESC),
oracle AS (
	SELECT risk_type, region, trade_desk,
		3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)) AS level,
		sum(value) AS total, count(*) AS keys
	FROM latest WHERE NOT deleted GROUP BY ROLLUP (risk_type, region, trade_desk)),
agg AS (SELECT risk_type, region, trade_desk, level, total, keys FROM $pipeline.aggregates)
SELECT (SELECT count(*) FROM (SELECT * FROM agg EXCEPT ALL SELECT * FROM oracle) a)
	+ (SELECT count(*) FROM (SELECT * FROM oracle EXCEPT ALL SELECT * FROM agg) o)});
}

# eo_check(node, db, label): the aggregates equal the oracle, and every row
# sent was ingested once and accounted for.
sub eo_check
{
	my ($node, $db, $label) = @_;
	is(eo_mismatches($node, $db), '0', "$label: aggregates equal the oracle");
	my $acct = $node->safe_psql(
		$db, q{
SELECT ingested || ' of ' || (SELECT coalesce(sum(n), 0) FROM sent) || ' sent; '
	|| (ingested = applied + duplicates + stale + dead_lettered) || ', dead ' || dead_lettered
FROM exactonce.pipelines WHERE name = 'trades'});
	my $sent = $node->safe_psql($db, "SELECT coalesce(sum(n), 0) FROM sent");
	is($acct, "$sent of $sent sent; true, dead 0",
		"$label: every row sent ingested once, accounted for");
	return;
}

1;
