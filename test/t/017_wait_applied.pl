# Read your writes: exactonce.wait_applied() returns once every event
# committed before the call is in the aggregates, while another producer
# keeps the workers busy; it sleeps on a condition variable meanwhile (a
# wait event, no polling), refuses a transaction that inserted into the
# queue, errs at the timeout (EO003) when the pipeline is paused, and refuses a
# role with no rights on the pipeline.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $rounds = 20;
my $per_round = 500;
my $node = eo_node('wait_applied');
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('rw', ARRAY['round', 'd']);
CREATE TABLE noise_sent (n bigint NOT NULL);
CREATE TABLE stop_noise ();
});

# another producer: 5,000 events a transaction, about 50,000 a second, until
# told to stop
my $noise = IPC::Run::start(
	[
		'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db), '-c', q{
DO $$
DECLARE
	n bigint := 0;
BEGIN
	WHILE NOT EXISTS (SELECT FROM stop_noise) LOOP
		INSERT INTO rw.ingest (key, version, value, round, d)
		SELECT 'noise' || (n + i), 1, 1, 'noise', 'd' || i % 7 FROM generate_series(1, 5000) i;
		INSERT INTO noise_sent VALUES (5000);
		n := n + 5000;
		COMMIT;
		PERFORM pg_sleep(0.1);
	END LOOP;
END $$}
	],
	'>', \my $noise_out, '2>', \my $noise_err);

# each round commits its events, waits, and reads them in the aggregates
my $session = $node->background_psql($db);
$session->set_query_timer_restart();
my ($exact, $waited) = (0, 0);
my $want = $per_round * ($per_round + 1) / 2;
for my $r (1 .. $rounds)
{
	$session->query_safe(
		"INSERT INTO rw.ingest (key, version, value, round, d)
		 SELECT 'r$r-' || j, 1, j, 'r$r', 'd' || j % 5 FROM generate_series(1, $per_round) j");
	my $total_sql =
	  "SELECT coalesce((SELECT total || '/' || keys FROM rw.aggregates WHERE level = 1 AND round = 'r$r'), 'none')";
	$waited++ if $session->query_safe($total_sql) ne "$want/$per_round";
	$session->query_safe("SELECT exactonce.wait_applied('rw', '120 seconds')");
	$exact++ if $session->query_safe($total_sql) eq "$want/$per_round";
}
is($exact, $rounds,
	"after wait_applied, each of $rounds rounds of $per_round events is in the aggregates, exactly");
cmp_ok($waited, '>=', 1, "in $waited rounds the events were not applied yet when the wait began");

# a wait on a paused pipeline sleeps on the condition variable until resume
$node->safe_psql($db, "SELECT exactonce.pause('rw')");
$session->query_safe(
	"INSERT INTO rw.ingest (key, version, value, round, d) VALUES ('late', 1, 42, 'late', 'x')");
my $waiter = $node->background_psql($db);
$waiter->set_query_timer_restart();
my $waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_until(qr/waiting/, "\\echo waiting\nSELECT exactonce.wait_applied('rw', '120 seconds');\n");
ok( $node->poll_query_until(
		$db,
		"SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE pid = $waiter_pid",
		'Extension/Extension'),
	'the waiter sleeps on a wait event, not in a loop');
$node->safe_psql($db, "SELECT exactonce.resume('rw')");
ok( $node->poll_query_until(
		$db, "SELECT state = 'idle' FROM pg_stat_activity WHERE pid = $waiter_pid"),
	'resume wakes the waiter, which returns');
# (the output of the wait, an empty line, comes first)
like($waiter->query_safe("SELECT total FROM rw.aggregates WHERE level = 1 AND round = 'late'"),
	qr/^\s*42$/, 'and the event it waited for is in the aggregates');
$waiter->quit;

# the timeout, on a paused pipeline
$node->safe_psql($db, "SELECT exactonce.pause('rw')");
$node->safe_psql($db,
	"INSERT INTO rw.ingest (key, version, value, round, d) VALUES ('later', 1, 1, 'late', 'x')");
my ($rc, $out, $err) =
  $node->psql($db, "\\set VERBOSITY verbose\nSELECT exactonce.wait_applied('rw', '200 milliseconds')");
like($err, qr/ERROR:  EO003: events of pipeline "rw" not applied within the timeout/,
	'a paused pipeline: the wait ends at the timeout with EO003');
like($err, qr/DETAIL:  \d+ events? committed before the call (is|are) still queued; the pipeline is paused/,
	'the error says how many events wait and that the pipeline is paused');
$node->safe_psql($db, "SELECT exactonce.resume('rw')");

# a transaction that inserted into the queue is refused: the workers could
# not take the events of that partition before it ends
($rc, $out, $err) = $node->psql(
	$db, "BEGIN;
INSERT INTO rw.ingest (key, version, value, round, d) VALUES ('own', 1, 1, 'own', 'x');
SELECT exactonce.wait_applied('rw', '60 seconds');
COMMIT;");
like($err, qr/cannot wait in a transaction that inserted into the queue of pipeline "rw"/,
	'a transaction that inserted into the queue is refused at once, not left to time out');

# rights
$node->safe_psql($db, 'CREATE ROLE regress_nobody');
($rc, $out, $err) = $node->psql($db,
	"SET ROLE regress_nobody; SELECT exactonce.wait_applied('rw', '1 second')");
like($err, qr/permission denied to wait for pipeline "rw"/,
	'a role that may neither insert nor read is refused');
$node->safe_psql($db, 'GRANT USAGE ON SCHEMA rw TO regress_nobody; GRANT INSERT ON rw.ingest TO regress_nobody');
($rc, $out, $err) = $node->psql($db,
	"SET ROLE regress_nobody; SELECT exactonce.wait_applied('rw', '60 seconds')");
is($rc, 0, 'a producer with INSERT on the queue may wait') or diag($err);
$node->safe_psql($db, 'CREATE ROLE regress_reader; GRANT USAGE ON SCHEMA rw TO regress_reader; GRANT SELECT ON rw.aggregates TO regress_reader');
($rc, $out, $err) = $node->psql($db,
	"SET ROLE regress_reader; SELECT exactonce.wait_applied('rw', '60 seconds')");
is($rc, 0, 'a reader with SELECT on the aggregates alone may wait') or diag($err);

# stop the noise; after a last wait everything sent is in the aggregates
$node->safe_psql($db, 'INSERT INTO stop_noise DEFAULT VALUES');
$noise->finish;
is($noise_err, '', 'the other producer ran without errors');
$node->safe_psql($db, "SELECT exactonce.wait_applied('rw', '120 seconds')");
is( $node->safe_psql(
		$db, "SELECT (SELECT keys FROM rw.aggregates WHERE level = 0)
		= (SELECT sum(n) FROM noise_sent) + $rounds * $per_round + 2"),
	't', 'after the last wait, every event sent is in the aggregates');

$session->quit;
done_testing();
