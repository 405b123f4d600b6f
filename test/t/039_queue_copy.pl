# A COPY into a pipeline's queue, with the library preloaded, inserts its
# rows a page at a time from slots of exactonce's own (src/engine/queuecopy.c).
# It is taken: a COPY that leaves event_time to its default, which
# PostgreSQL's COPY inserts row by row, writes less WAL than with
# exactonce.queue_copy off, and the same rows; a user's own table called
# ingest is left to PostgreSQL's COPY.  A partition that gains a trigger
# while a COPY is under way fails the COPY once it reaches it, and nothing
# lands.  Producers COPY through it while the workers drain, one of them
# killed with SIGKILL in the middle of its COPY (the server restarts, and
# nothing of that COPY is there), and the aggregates equal the oracle,
# every row sent accounted for.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('queue_copy', conf => "restart_after_crash = on\n");
eo_setup($node, $db);
my $cols = 'key, version, value, risk_type, region, trade_desk, deleted';

# copy_sql(pipeline, from, to): a COPY of events from .. to (as events_sql
# makes them) into the pipeline's queue, its rows inline
sub copy_sql
{
	my ($pipeline, $from, $to) = @_;
	my $rows = $node->safe_psql($db, "COPY (" . ExactonceTest::events_sql($from, $to) . ") TO STDOUT");
	return "COPY $pipeline.ingest ($cols) FROM STDIN;\n$rows\n\\.\n";
}

# copy_wal(schema, on): the WAL bytes of a COPY of events 1 .. 3000 into
# schema.ingest with exactonce.queue_copy on or off
sub copy_wal
{
	my ($schema, $on) = @_;
	return $node->safe_psql(
		$db, "SET exactonce.queue_copy = $on;
SELECT pg_current_wal_insert_lsn() AS lsn \\gset
" . copy_sql($schema, 1, 3000) . "
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'lsn')::bigint;");
}

# The path is taken: fewer WAL bytes than PostgreSQL's row-by-row insert
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.create_pipeline(p, ARRAY['risk_type', 'region', 'trade_desk'], shards => 1)
	FROM unnest(ARRAY['fast', 'plain']) p;
SELECT exactonce.pause('fast'), exactonce.pause('plain');
});
my %wal = (fast => copy_wal('fast', 'on'), plain => copy_wal('plain', 'off'));
note "WAL of 3,000 rows: $wal{fast} bytes with the path, $wal{plain} without";
cmp_ok($wal{fast} * 5, '<', $wal{plain} * 4,
	'a COPY with event_time left to its default goes a page at a time, not row by row');
is( $node->safe_psql(
		$db, qq{
SELECT count(*) FROM ((SELECT $cols FROM fast.ingest EXCEPT ALL SELECT $cols FROM plain.ingest)
	UNION ALL (SELECT $cols FROM plain.ingest EXCEPT ALL SELECT $cols FROM fast.ingest)) d}),
	'0', 'the same rows either way');
$node->safe_psql($db,
	"SELECT exactonce.drop_pipeline(p, force => true) FROM unnest(ARRAY['fast', 'plain']) p");

# A user's own partitioned table called ingest, no pipeline's queue, is left
# to PostgreSQL's COPY: it writes as much WAL either way
$node->safe_psql(
	$db, q{
CREATE SCHEMA mine;
CREATE TABLE mine.ingest (key text, version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, event_time timestamptz DEFAULT clock_timestamp(), slot integer DEFAULT 0)
	PARTITION BY LIST (slot);
CREATE TABLE mine.ingest_0 PARTITION OF mine.ingest FOR VALUES IN (0);
});
my %mine = (on => copy_wal('mine', 'on'), off => copy_wal('mine', 'off'));
note "WAL of 3,000 rows into mine.ingest: $mine{on} bytes with exactonce.queue_copy on, $mine{off} off";
cmp_ok($mine{on} * 5, '>', $mine{off} * 4, 'a table called ingest that is no queue goes row by row either way');
$node->safe_psql($db, 'DROP SCHEMA mine CASCADE');

# A partition that gains a trigger while a COPY is under way, before the
# COPY reaches it, fails the statement, which this path would not fire it
# for: the COPY is held at a row of the first partition (a check waits on
# an advisory lock) while the trigger is made on the second
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.create_pipeline(p, ARRAY['d'], shards => 2) FROM unnest(ARRAY['probe', 'late']) p;
SELECT exactonce.pause('probe'), exactonce.pause('late');
INSERT INTO probe.ingest (key, version, value, d) SELECT 'a' || i, 1, 1, 'x' FROM generate_series(1, 400) i;
CREATE FUNCTION late_gate(k text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
	$$BEGIN IF k = 'gate' THEN PERFORM pg_advisory_xact_lock_shared(4711); END IF; RETURN true; END$$;
CREATE TABLE late_fired (key text);
CREATE FUNCTION late_row() RETURNS trigger LANGUAGE plpgsql AS
	$$BEGIN INSERT INTO late_fired VALUES (NEW.key); RETURN NULL; END$$;
});
# keys of each partition, as the probe's queue routed them; the gate's key
# must lie in the first
my ($first, $second) = map {
	[ split /\n/, $node->safe_psql($db, "SELECT key FROM probe.ingest WHERE tableoid = 'probe.ingest_0_$_'::regclass ORDER BY key") ]
} 0, 1;
my $gate_part = $node->safe_psql($db,
	"INSERT INTO probe.ingest (key, version, value, d) VALUES ('gate', 1, 1, 'x') RETURNING tableoid::regclass");
($first, $second) = ($second, $first) if $gate_part ne 'probe.ingest_0_0';
my $late_part = $gate_part eq 'probe.ingest_0_0' ? 'late.ingest_0_1' : 'late.ingest_0_0';
$node->safe_psql($db, "ALTER TABLE late.ingest ADD CONSTRAINT gate CHECK (late_gate(key))");
my $late_file = $node->basedir . '/late.copy';
open(my $fh, '>', $late_file) or die;
print $fh join('', map { "$_\t1\t1\tx\n" } (@$first, 'gate', @$second));
close $fh;

my ($gin, $gout) = ('', '');
my $holder = IPC::Run::start([ 'psql', '-X', '-q', '-d', $node->connstr($db) ], '<', \$gin, '>', \$gout);
$gin .= "SELECT pg_advisory_lock(4711);\n\\echo held\n";
$holder->pump until $gout =~ /held/;
my ($lout, $lerr) = ('', '');
my $late = IPC::Run::start(
	[ 'psql', '-X', '-q', '-d', $node->connstr($db), '-c',
		"COPY late.ingest (key, version, value, d) FROM '$late_file'" ],
	'>', \$lout, '2>', \$lerr);
ok( $node->poll_query_until(
		$db, "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)"),
	'the COPY waits at the gate, in the first partition');
$node->safe_psql($db, "CREATE TRIGGER late_row AFTER INSERT ON $late_part FOR EACH ROW EXECUTE FUNCTION late_row()");
$gin .= "SELECT pg_advisory_unlock(4711);\n\\q\n";
$holder->finish;
$late->finish;
like($lerr, qr/partition "ingest_0_\d" gained a trigger or an index while events were copied into it/,
	'the COPY that reaches the partition with the new trigger fails');
is($node->safe_psql($db, "SELECT (SELECT count(*) FROM late.ingest) + (SELECT count(*) FROM late_fired)"),
	'0', 'and leaves nothing in the queue');
$node->safe_psql($db, "SELECT exactonce.drop_pipeline(p, force => true) FROM unnest(ARRAY['probe', 'late']) p;
	DROP TABLE late_fired; DROP FUNCTION late_row(), late_gate(text)");

# Producers COPY while the workers drain; one killed in its COPY
my $file = $node->basedir . '/killed.copy';
$node->safe_psql($db, "COPY (" . ExactonceTest::events_sql(900001, 1200000) . ") TO '$file'");
my ($out, $err) = ('', '');
my $killed = IPC::Run::start(
	[ 'psql', '-X', '-q', '-d', $node->connstr($db), '-c',
		"SET application_name = 'killed'; COPY trades.ingest ($cols) FROM '$file'" ],
	'>', \$out, '2>', \$err);
ok( $node->poll_query_until(
		$db, q{SELECT EXISTS (SELECT FROM pg_stat_progress_copy c JOIN pg_stat_activity a USING (pid)
			   WHERE a.application_name = 'killed' AND c.tuples_processed > 1000)}),
	'a COPY of 300,000 events is under way');
my $pid = $node->safe_psql($db, "SELECT pid FROM pg_stat_activity WHERE application_name = 'killed'");
kill 'KILL', $pid;
$killed->finish;
ok($node->poll_query_until($db, 'SELECT 1', '1'), 'the server recovers from the SIGKILL of the copying backend');
is($node->safe_psql($db, "SELECT count(*) FROM trades.ingest WHERE version > 900000"),
	'0', 'nothing of the killed COPY is in the queue');

my @producers;
for my $p (0, 1)
{
	my $sql = '';
	for my $round (0 .. 4)
	{
		my $from = 1 + ($p * 5 + $round) * 4000;
		$sql .= "BEGIN;\n" . copy_sql('trades', $from, $from + 3999)
		  . "INSERT INTO truth " . ExactonceTest::events_sql($from, $from + 3999) . ";
INSERT INTO sent VALUES (4000);\nCOMMIT;\n";
	}
	push @producers,
	  IPC::Run::start([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db) ],
		'<', \$sql, '>', \my $o, '2>', \my $e);
}
ok($_->finish, 'a producer COPYs its rounds') for @producers;
is($node->safe_psql($db, 'SELECT sum(n) FROM sent'), '40000', 'every round sent');
ok(eo_wait_drained($node, $db), 'drained');
eo_check($node, $db, 'COPYs beside the drain and a killed one');

done_testing();
