# A COPY into a pipeline's queue, with the library preloaded, inserts its
# rows a page at a time from slots of exactonce's own (src/engine/queuecopy.c).
# It is taken: a COPY that leaves event_time to its default, which
# PostgreSQL's COPY inserts row by row, writes less WAL than with
# exactonce.queue_copy off, and the same rows.  Producers COPY through it
# while the workers drain, one of them killed with SIGKILL in the middle of
# its COPY (the server restarts, and nothing of that COPY is there), and
# the aggregates equal the oracle, every row sent accounted for.

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

# The path is taken: fewer WAL bytes than PostgreSQL's row-by-row insert
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.create_pipeline(p, ARRAY['risk_type', 'region', 'trade_desk'], shards => 1)
	FROM unnest(ARRAY['fast', 'plain']) p;
SELECT exactonce.pause('fast'), exactonce.pause('plain');
});
my %wal;
for my $case ([ 'fast', 'on' ], [ 'plain', 'off' ])
{
	my ($p, $on) = @$case;
	$wal{$p} = $node->safe_psql(
		$db, "SET exactonce.queue_copy = $on;
SELECT pg_current_wal_insert_lsn() AS lsn \\gset
" . copy_sql($p, 1, 3000) . "
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'lsn')::bigint;");
}
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
