# Retiring drained queue partitions.  The workers empty a drained partition
# where it stands: its files and pg_class rows stay, rotation after
# rotation; a small one keeps its pages, emptied, a large one is cut to
# zero pages.  TRUNCATE empties it where it is not a bare heap (its TOAST
# table holds pages, an index was added to it), where a publication or a
# TRUNCATE trigger must hear of it, and where its relfrozenxid or
# relminmxid grew old.  A
# retirement that fails after the cut rolls back and is done again, and a
# server killed while the workers rotate loses and repeats nothing: every
# event counts once, and the queue ends empty.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('retire');
eo_setup($node, $db);

sub sql { return $node->safe_psql($db, shift); }

# the tables that hold the queue's rows: both partitions, or with more than
# one shard their tables per shard (ingest_<partition>_<shard>)
my $leaves = q{SELECT relid FROM pg_partition_tree('trades.ingest') WHERE isleaf};
# the files of those tables and of their TOAST tables
my $files_sql = qq{
SELECT string_agg(c.relfilenode || '/' || t.relfilenode, ' ' ORDER BY c.relname)
FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid
WHERE c.oid IN ($leaves)};
# the pages of those tables and of their TOAST tables
my $queue_bytes_sql = qq{
SELECT sum(pg_relation_size(c.oid) + pg_relation_size(c.reltoastrelid))
FROM pg_class c WHERE c.oid IN ($leaves)};
cmp_ok(sql("SELECT count(*) FROM ($leaves) l"), '>', 2, 'the queue has a table per shard in each partition');

sub rotation { return sql('SELECT rotation FROM trades.progress'); }

# wait until the pipeline is drained and every drained partition retired
sub settle
{
	my ($what) = @_;
	ok(eo_wait_drained($node, $db), $what // 'drained');
	ok($node->poll_query_until($db, 'SELECT rotation = drain_rotation FROM trades.progress'),
		'every drained partition retired');
	return;
}

# produce batches first .. last of 500 events, each its own transaction
# and so, with the workers keeping up, mostly its own rotation
my $next = 1;

sub produce_batches
{
	my ($n) = @_;
	for (1 .. $n)
	{
		eo_produce($node, $db, $next, $next + 499);
		$next += 500;
	}
	return;
}

# 1. bare partitions are emptied in place
my $files = sql($files_sql);
my $r0 = rotation();
produce_batches(6);
settle();
cmp_ok(rotation() - $r0, '>=', 2, 'the queue rotated through both partitions');
eo_check($node, $db, 'in place');
is(sql($files_sql), $files, 'emptied in place: the partitions and their TOAST tables keep their files');
is(sql(eo_queue_empty_sql()), 't', 'the queue holds no rows, and no more pages than it reuses');
cmp_ok(sql($queue_bytes_sql), '>', 0, 'a small drained partition keeps its pages, emptied, for the next rotations');
produce_batches(12);
settle();
eo_check($node, $db, 'pages reused');
is(sql($files_sql), $files, 'the rotations after fill the pages kept, in the same files');
is(sql(eo_queue_empty_sql()), 't', 'the queue holds no rows, and no more pages than it reuses');

# 1b. a partition larger than the pages a partition keeps is cut to zero
# pages, in place too
my $keep = sql(q{SELECT least(1024, setting::bigint / 512) FROM pg_settings WHERE name = 'shared_buffers'});
eo_pause($node, $db);
my $big = sql(q{SELECT min(relid::regclass::text) FROM pg_partition_tree('trades.ingest_' || (SELECT rotation % 2 FROM trades.progress))
	WHERE isleaf});
eo_produce($node, $db, $next, $next + 19999);
$next += 20000;
cmp_ok(sql("SELECT pg_relation_size('$big') / 8192"), '>', $keep,
	"a partition larger than the $keep pages a drained partition keeps");
eo_resume($node, $db);
settle();
eo_check($node, $db, 'a large partition');
is(sql("SELECT pg_relation_size('$big')"), '0', 'drained, it is cut to zero pages');
is(sql($files_sql), $files, 'in place: it keeps its files');

# 2. TOAST pages: TRUNCATE empties the partition and its TOAST table.  The
# events carry a wide note in a column the queue was given (with a
# default, as more columns may be).
sql(q{ALTER TABLE trades.ingest ADD COLUMN note text NOT NULL DEFAULT ''});
eo_pause($node, $db);
my $wide = $next;
sql(qq{
BEGIN;
CREATE TEMP TABLE wide ON COMMIT DROP AS
SELECT 'wide' || i AS key, 1::bigint AS version, 1.00 AS value, 'Delta' AS risk_type,
	'AMER' AS region, 'Rates' AS trade_desk, false AS deleted,
	(SELECT string_agg(md5(i || '/' || j), '') FROM generate_series(1, 200) j) AS note
FROM generate_series($wide, $wide + 19) i;
INSERT INTO truth SELECT key, version, value, risk_type, region, trade_desk, deleted FROM wide;
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted, note)
	SELECT * FROM wide;
INSERT INTO sent VALUES (20);
COMMIT;
});
is( sql(
		qq{SELECT bool_or(pg_relation_size(reltoastrelid) > 0) FROM pg_class
		  WHERE oid IN ($leaves)}
	),
	't',
	'the events with wide values are in a TOAST table');
eo_resume($node, $db);
produce_batches(2);
settle();
eo_check($node, $db, 'TOAST');
isnt(sql($files_sql), $files, 'a partition with TOAST pages was truncated: new files');
is(sql(eo_queue_empty_sql()), 't', 'the queue holds no rows, its TOAST tables no pages');

# 3. an index added to the partitions: TRUNCATE empties the index too
sql('CREATE INDEX ingest_0_key ON trades.ingest_0 (key); CREATE INDEX ingest_1_key ON trades.ingest_1 (key)');
$files = sql($files_sql);
produce_batches(4);
settle();
eo_check($node, $db, 'indexed');
isnt(sql($files_sql), $files, 'an indexed partition was truncated: new files');
eo_pause($node, $db);
produce_batches(1);
my $range = q{SELECT string_agg(key || '/' || version, ' ' ORDER BY key, version)
	FROM trades.ingest WHERE key BETWEEN 'k1' AND 'k2'};
is(sql("SET enable_seqscan = off; SET enable_bitmapscan = off; $range"),
	sql("SET enable_indexscan = off; SET enable_bitmapscan = off; $range"),
	'the index finds the rows of the next rotation, and only those');
eo_resume($node, $db);
ok(eo_wait_drained($node, $db), 'drained');
sql('DROP INDEX trades.ingest_0_key, trades.ingest_1_key');

# 4. what must hear of a truncation hears of one: a publication of the
# queue, a TRUNCATE trigger on a partition
sql(q{CREATE TABLE truncations (n int);
CREATE FUNCTION count_truncation() RETURNS trigger LANGUAGE plpgsql
AS $$ BEGIN INSERT INTO public.truncations VALUES (1); RETURN NULL; END $$;
SET client_min_messages = error;
CREATE PUBLICATION queue_pub FOR TABLE trades.ingest});
$files = sql($files_sql);
produce_batches(4);
settle();
eo_check($node, $db, 'published');
isnt(sql($files_sql), $files, 'a published partition was truncated: new files');
sql('DROP PUBLICATION queue_pub');
# on the partitions, whose tables are emptied (PostgreSQL fires a
# partitioned table's TRUNCATE triggers only when it is truncated itself),
# then on the tables
sql(q{CREATE TRIGGER counted BEFORE TRUNCATE ON trades.ingest_0
	FOR EACH STATEMENT EXECUTE FUNCTION count_truncation();
CREATE TRIGGER counted BEFORE TRUNCATE ON trades.ingest_1
	FOR EACH STATEMENT EXECUTE FUNCTION count_truncation()});
produce_batches(4);
settle();
eo_check($node, $db, 'with TRUNCATE triggers on the partitions');
cmp_ok(sql('SELECT count(*) FROM truncations'), '>', 0, 'the partitions\' TRUNCATE triggers fired');
sql('DROP TRIGGER counted ON trades.ingest_0; DROP TRIGGER counted ON trades.ingest_1; TRUNCATE truncations');
sql(qq{DO \$\$ DECLARE t regclass; BEGIN
	FOR t IN $leaves LOOP
		EXECUTE format('CREATE TRIGGER counted BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION count_truncation()', t);
	END LOOP;
END \$\$});
produce_batches(4);
settle();
eo_check($node, $db, 'with TRUNCATE triggers on the tables');
cmp_ok(sql('SELECT count(*) FROM truncations'), '>', 0, 'the tables\' TRUNCATE triggers fired');
sql(qq{DO \$\$ DECLARE t regclass; BEGIN
	FOR t IN $leaves LOOP EXECUTE format('DROP TRIGGER counted ON %s', t); END LOOP;
END \$\$});

# 5. a partition whose relfrozenxid grew old is truncated, which renews it;
# then it is emptied in place again

# drain new events: the tables whose $what grew past $half (of $age_sql)
# are truncated, which renews it, then emptied in place again
sub renewed_by_truncate
{
	my ($what, $age_sql, $half) = @_;
	produce_batches(4);
	settle();
	eo_check($node, $db, "old $what");
	cmp_ok(sql($age_sql), '<', $half, "TRUNCATE renewed their $what");
	isnt(sql($files_sql), $files, 'new files');
	$files = sql($files_sql);
	produce_batches(4);
	settle();
	is(sql($files_sql), $files, 'emptied in place again');
	return;
}

$node->append_conf('postgresql.conf', "autovacuum_freeze_max_age = 100000\n");
$node->restart;
$files = sql($files_sql);
my $age_sql = qq{SELECT max(age(relfrozenxid)) FROM pg_class WHERE oid IN ($leaves)};
sql(q{CREATE TABLE burn (n int);
DO $$ BEGIN
	FOR i IN 1 .. 60000 LOOP
		BEGIN INSERT INTO burn VALUES (i); EXCEPTION WHEN others THEN NULL; END;
	END LOOP;
END $$});
cmp_ok(sql($age_sql), '>', 50000, 'the partitions are older than half autovacuum_freeze_max_age');
renewed_by_truncate('relfrozenxid', $age_sql, 50000);

# 5b. the same for a relminmxid grown old: multixacts made by two sessions
# sharing the lock of each of 6,000 rows, the second in a subtransaction per
# row (the same lockers would share one multixact)
$node->append_conf('postgresql.conf', "autovacuum_multixact_freeze_max_age = 10000\n");
$node->restart;
$files = sql($files_sql);
my $mxage_sql = qq{SELECT max(mxid_age(relminmxid)) FROM pg_class WHERE oid IN ($leaves)};
sql('CREATE TABLE locked AS SELECT g FROM generate_series(1, 6000) g');
my $sharer = $node->background_psql($db);
$sharer->query_safe('BEGIN');
$sharer->query_safe('SELECT count(*) FROM (SELECT g FROM locked FOR SHARE) s');
sql(q{DO $$ BEGIN
	FOR i IN 1 .. 6000 LOOP
		BEGIN PERFORM 1 FROM locked WHERE g = i FOR SHARE; EXCEPTION WHEN others THEN NULL; END;
	END LOOP;
END $$});
$sharer->query_safe('COMMIT');
$sharer->quit;
cmp_ok(sql($mxage_sql), '>', 5000, 'the partitions\' relminmxid is older than half autovacuum_multixact_freeze_max_age');
renewed_by_truncate('relminmxid', $mxage_sql, 5000);

# 6. retirements that fail after the cut, and roll back
$node->append_conf('postgresql.conf', "exactonce.fault_retire = 0.5\n");
$node->reload;
$files = sql($files_sql);
produce_batches(6);
settle();
cmp_ok(sql("SELECT injected FROM exactonce.faults_injected() WHERE stage = 'retire'"),
	'>', 0, 'retirements failed on purpose');
eo_check($node, $db, 'failed retirements');
is(sql($files_sql), $files, 'emptied in place');
$node->append_conf('postgresql.conf', "exactonce.fault_retire = 0\n");
$node->reload;

# 7. the server killed while the workers drain, retire and rotate
for my $kill (1 .. 4)
{
	produce_batches(3);
	usleep(int(rand(50_000)));
	$node->stop('immediate');
	$node->start;
}
settle('drained after the kills');
eo_check($node, $db, 'killed');
is(sql(eo_queue_empty_sql()), 't', 'the queue holds no rows, and no more pages than it reuses');

# nothing failed but on purpose (a failed retirement is retried after a
# backoff, so it would pass unseen otherwise)
my @errors = grep { !/injected failure/ } (slurp_file($node->logfile) =~ /^.*ERROR:.*$/mg);
is(scalar(@errors), 0, 'no errors in the server log but the injected failures')
  or diag(join("\n", @errors));

$node->stop;
done_testing();
