# The background workers: they drain without flush, survive SIGKILL with an
# exact result, reload settings on SIGHUP, honour pause, serve two pipelines
# and two databases, isolate a poison event, act as the pipeline's owner,
# restart after SIGTERM, let an open transaction or a reader hold up only
# its own pipeline, and follow the extension when it is dropped and created
# again.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $db2 = 'db2';
my $node = eo_node('workers',
	conf => "exactonce.database = '$db,$db2'\nrestart_after_crash = on\n");
$node->safe_psql($db, "CREATE DATABASE $db2");
$node->safe_psql($db2, 'CREATE EXTENSION exactonce');
eo_setup($node, $db);
$node->safe_psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_pipeline('wk2', ARRAY['a'])");

# 2000 events per batch of the producer, into pipeline trades
sub produce
{
	my ($batch) = @_;
	eo_produce($node, $db, ($batch - 1) * 2000 + 1, $batch * 2000);
	return;
}

sub worker_pid
{
	return $node->safe_psql($db,
		"SELECT worker_pid FROM exactonce.pipelines WHERE name = 'trades'");
}

# wait (bounded) until a worker other than $pid serves trades
sub new_worker
{
	my ($pid) = @_;
	return $node->poll_query_until($db,
		"SELECT worker_pid IS NOT NULL AND worker_pid <> $pid FROM exactonce.pipelines WHERE name = 'trades'"
	);
}

# 1. events are aggregated without flush
ok( $node->poll_query_until(
		$db, "SELECT worker_pid IS NOT NULL FROM exactonce.pipelines WHERE name = 'trades'"),
	'a drain worker serves the pipeline');
my $wait_event =
  "SELECT backend_type || '/' || wait_event_type FROM pg_stat_activity WHERE pid = (SELECT worker_pid FROM exactonce.pipelines WHERE name = 'trades')";
ok($node->poll_query_until($db, $wait_event, 'exactonce drain/Extension'),
	'pg_stat_activity shows the idle worker and its wait event');
produce(1);
ok(eo_wait_drained($node, $db), 'the worker drained the queue without flush');
eo_check($node, $db, 'without flush');

# 2. SIGKILL the worker several times during a stream; each kill makes the
# postmaster reinitialize, and the launcher starts new workers
my $kills = 0;
for my $batch (2 .. 13)
{
	produce($batch);
	next if $batch % 3;
	my $pid = worker_pid();
	next unless $pid && kill 'KILL', $pid;
	$kills++;
	new_worker($pid) or die "no worker after the SIGKILL of $pid";
}
is($kills, 4, 'killed the worker 4 times during the stream');
ok(eo_wait_drained($node, $db), 'the restarted workers drained everything');
eo_check($node, $db, 'after the kills');

# 3. SIGHUP changes the batch size
eo_alter_system($node, 'exactonce.batch_size' => 100);
$node->poll_query_until($db,
	"SELECT setting = '100' FROM pg_settings WHERE name = 'exactonce.batch_size'")
  or die 'the batch size was not reloaded';
my $batches = "SELECT batches FROM exactonce.pipelines WHERE name = 'trades'";
my $before = $node->safe_psql($db, $batches);
produce(14);
eo_wait_drained($node, $db) or die 'batch 14 was not drained';
my $took = $node->safe_psql($db, $batches) - $before;
cmp_ok($took, '>=', 20, "after SIGHUP 2000 events take at least 20 batches (took $took)");
eo_alter_system($node, 'exactonce.batch_size' => undef);

# 4. pause and resume; the other pipeline goes on meanwhile
eo_pause($node, $db);
produce(15);
$node->safe_psql($db, "INSERT INTO wk2.ingest (key, version, value, a) VALUES ('x', 1, 5, 'a1')");
ok(eo_wait_drained($node, $db, 'wk2'), 'a second pipeline is drained');
is( $node->safe_psql($db,
		"SELECT queued > 0 AND worker_state = 'paused' FROM exactonce.pipelines WHERE name = 'trades'"),
	't', 'the paused pipeline kept its queue');
eo_resume($node, $db);
ok(eo_wait_drained($node, $db), 'resumed, it is drained');
ok( $node->poll_query_until(
		$db, "SELECT worker_state FROM exactonce.pipelines WHERE name = 'trades'", 'idle'),
	'and its worker is idle');
eo_check($node, $db, 'after pause and resume');

# 5. a second database has its own worker
$node->safe_psql(
	$db2, q{
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('other', ARRAY['d']);
INSERT INTO other.ingest (key, version, value, d) SELECT 'k' || i, 1, 2, 'x' FROM generate_series(1, 100) i;
});
ok(eo_wait_drained($node, $db2, 'other'),
	'the worker of the second database drained its pipeline');
is($node->safe_psql($db2, "SELECT total || '/' || keys FROM other.aggregates WHERE level = 0"),
	'200/100', 'with the exact result');
# a database that exactonce.database leaves out has no worker: its
# pipelines say so, and flush() drains them
$node->safe_psql($db, 'CREATE DATABASE unserved');
$node->safe_psql('unserved', q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('u', ARRAY['d']);
INSERT INTO u.ingest (key, version, value, d) VALUES ('a', 1, 1, 'x'), ('b', 1, 2, 'x');
});
is($node->safe_psql('unserved', "SELECT worker_state || ', ' || queued FROM exactonce.pipelines WHERE name = 'u'"),
	'no worker, 2', 'a database no worker serves: worker_state says so');
is($node->safe_psql('unserved', "SELECT exactonce.flush('u')"), '2', 'and flush() drains it');

# 6. a poison event ends in dead_letters, the rest of its batch is applied
eo_alter_system($node, 'exactonce.fault_poison_key' => 'poison');
$node->poll_query_until($db, "SELECT current_setting('exactonce.fault_poison_key') = 'poison'")
  or die 'the poison key was not reloaded';
$node->safe_psql($db,
	"INSERT INTO wk2.ingest (key, version, value, a) SELECT 'p' || i, 1, 1, 'a9' FROM generate_series(1, 99) i UNION ALL SELECT 'poison', 1, 1000, 'a9'"
);
ok(eo_wait_drained($node, $db, 'wk2'), 'the batch with the poison event was drained');
is( $node->safe_psql($db, "SELECT key || ': ' || reason FROM wk2.dead_letters"),
	'poison: error: injected poison event with key "poison"',
	'the poison event is a dead letter with the error');
is($node->safe_psql($db, "SELECT total || '/' || keys FROM wk2.aggregates WHERE level = 1 AND a = 'a9'"),
	'99/99', 'the rest of its batch was applied');
is($node->safe_psql($db, 'SELECT max(updated_at) > min(updated_at) FROM wk2.aggregates WHERE level = 1'),
	't', 'each step of a worker has its own now()');
eo_alter_system($node, 'exactonce.fault_poison_key' => undef);

# 7. the worker acts as the owner: an owner without rights on its own table
# fails, and backs off, while the other pipelines go on
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE ROLE regress_eo_worker_owner;
GRANT CREATE ON DATABASE postgres TO regress_eo_worker_owner;
SET ROLE regress_eo_worker_owner;
SELECT exactonce.create_pipeline('owned', ARRAY['d']);
REVOKE UPDATE ON owned.aggregates FROM regress_eo_worker_owner;
INSERT INTO owned.ingest (key, version, value, d) VALUES ('k', 1, 1, 'x'), ('k2', 1, 1, 'x');
});
ok( $node->poll_query_until(
		$db,
		"SELECT last_error LIKE 'permission denied for table aggregates%' FROM exactonce.pipelines WHERE name = 'owned'"
	),
	"the worker runs with the owner's rights (permission denied, reported in last_error)");
$node->safe_psql($db, 'CREATE ROLE regress_eo_nosy; CREATE ROLE regress_eo_stats IN ROLE pg_read_all_stats');
is( join(',',
		map {
			$node->safe_psql($db,
				"SET ROLE $_; SELECT CASE WHEN last_error LIKE 'permission denied%' THEN 'shown' ELSE last_error END FROM exactonce.pipelines WHERE name = 'owned'")
		} qw(regress_eo_worker_owner regress_eo_stats regress_eo_nosy)),
	'shown,shown,<insufficient privilege>',
	'last_error is shown to the owner and pg_read_all_stats, not to another role');
my $state = "SELECT worker_state FROM exactonce.pipelines WHERE name = 'owned'";
$node->poll_query_until($db, $state, 'backoff');
is($node->safe_psql($db, $state), 'backoff', 'the failing pipeline backs off');
$node->safe_psql($db, "INSERT INTO wk2.ingest (key, version, value, a) VALUES ('y', 1, 5, 'a1')");
ok(eo_wait_drained($node, $db, 'wk2'), 'a failing pipeline does not stop the others');
$node->safe_psql($db, 'GRANT UPDATE ON owned.aggregates TO regress_eo_worker_owner');
ok(eo_wait_drained($node, $db, 'owned'), 'once the right is back, the pipeline recovers');

# 8. SIGTERM stops a worker, the launcher starts another
my $pid = worker_pid();
kill 'TERM', $pid;
ok(new_worker($pid), 'after SIGTERM the launcher restarted the worker');

# 9. a transaction that inserted and stays open holds up only its own
# pipeline: the worker seals without waiting, and serves its others
# meanwhile (hold and free, two ids apart, share their workers)
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('hold', ARRAY['d']);
SELECT exactonce.create_pipeline('skip', ARRAY['d']);
SELECT exactonce.create_pipeline('free', ARRAY['d']);
});
is( $node->safe_psql($db,
		"SELECT count(DISTINCT worker_pid) FROM exactonce.pipelines WHERE name IN ('hold', 'free')"),
	'1', 'pipelines hold and free share a worker');
$node->safe_psql($db, "INSERT INTO hold.ingest (key, version, value, d) VALUES ('a', 1, 1, 'x')");
my $open = $node->background_psql($db);
$open->query_safe('BEGIN');
$open->query_safe("INSERT INTO hold.ingest (key, version, value, d) VALUES ('b', 1, 2, 'x')");
$node->safe_psql(
	$db, q{
INSERT INTO hold.ingest (key, version, value, d) VALUES ('c', 1, 4, 'x');
INSERT INTO free.ingest (key, version, value, d) VALUES ('f', 1, 8, 'y');
});
ok(eo_wait_drained($node, $db, 'free'),
	'with a transaction open on pipeline hold, the same worker drains pipeline free');
$open->query_safe('COMMIT');
ok(eo_wait_drained($node, $db, 'hold'), 'once that transaction commits, hold is drained');
is($node->safe_psql($db, "SELECT total || '/' || keys FROM hold.aggregates WHERE level = 0"),
	'7/3', 'with every event of it, exactly once');

# 10. a long reader of a drained queue partition holds up only that pipeline
$node->safe_psql($db, "INSERT INTO hold.ingest (key, version, value, d) VALUES ('r1', 1, 16, 'x')");
eo_wait_drained($node, $db, 'hold') or die 'hold was not drained';
$open->query_safe('BEGIN');
$open->query_safe('SELECT count(*) FROM hold.ingest');
$node->safe_psql(
	$db, q{
INSERT INTO hold.ingest (key, version, value, d) VALUES ('r2', 1, 32, 'x');
INSERT INTO free.ingest (key, version, value, d) VALUES ('g', 1, 8, 'y');
});
ok($node->poll_query_until($db, 'SELECT total = 16 FROM free.aggregates WHERE level = 0'),
	"with a reader holding pipeline hold's queue, the same worker drains pipeline free");
$open->query_safe('COMMIT');
$open->quit;
ok( $node->poll_query_until(
		$db,
		eo_drained_sql('hold') . ' AND (SELECT total = 55 FROM hold.aggregates WHERE level = 0)'),
	'once the reader is gone, hold is drained, exactly');

# 11. dropping and recreating the extension while the workers run
$node->safe_psql(
	$db2, q{
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('other', true);
DROP EXTENSION exactonce;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('again', ARRAY['d']);
INSERT INTO again.ingest (key, version, value, d) SELECT 'k' || i, 1, 3, 'x' FROM generate_series(1, 10) i;
});
ok(eo_wait_drained($node, $db2, 'again'),
	'after the extension was dropped and created again, a new pipeline is drained');
is($node->safe_psql($db2, "SELECT total || '/' || keys FROM again.aggregates WHERE level = 0"),
	'30/10', 'with the exact result');

$node->stop;
done_testing();
