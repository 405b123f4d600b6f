# A flush killed with SIGKILL half way leaves nothing half done: the queue
# keeps every event, no counter moved, no state, aggregate or ledger row is
# left.  Counters and aggregates survive an immediate shutdown, and nothing
# is drained twice.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('crash_flush', preload => 0, conf => "restart_after_crash = on\n");
eo_setup($node, $db);
eo_produce($node, $db, 1, 150000);
my $sent = $node->safe_psql($db, 'SELECT sum(n) FROM sent');

# kill the backend running flush while it works: a session holding the
# aggregates makes it wait there, past its first batch's state and staging,
# so that the kill cannot come after a flush that was quicker than the test
my $holder = $node->background_psql($db, on_error_stop => 0);
$holder->query_safe('BEGIN; LOCK TABLE trades.aggregates IN ACCESS EXCLUSIVE MODE');
my $flush = $node->background_psql($db, on_error_stop => 0);
my $pid = $flush->query_safe('SELECT pg_backend_pid()');
$flush->query_until(qr/started/, "\\echo started\nSET exactonce.batch_size = 5000;\nSELECT exactonce.flush('trades');\n");
ok( $node->poll_query_until($db,
		"SELECT state = 'active' AND query LIKE '%flush%' AND wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $pid"),
	'flush is running, and waits for the aggregates');
kill 'KILL', $pid;
$flush->{run}->kill_kill;
$holder->{run}->kill_kill;
ok($node->poll_query_until($db, 'SELECT 1', '1'), 'the server recovers from the SIGKILL of the flushing backend');

is($node->safe_psql($db, "SELECT queued FROM exactonce.pipelines WHERE name = 'trades'"),
	$sent, 'every event is still queued');
is( $node->safe_psql($db,
		"SELECT ingested + applied + duplicates + stale + dead_lettered + batches FROM exactonce.pipelines WHERE name = 'trades'"),
	'0', 'no counter moved');
is( $node->safe_psql($db,
		'SELECT (SELECT count(*) FROM trades.aggregates) + (SELECT count(*) FROM trades.state) + (SELECT count(*) FROM trades.ledger)'),
	'0', 'no state, aggregate or ledger row is left behind');

is($node->safe_psql($db, "SELECT exactonce.flush('trades')"), $sent, 'flush after the crash takes every event');
eo_check($node, $db, 'after the crash');
my $counters = "SELECT ingested || '/' || applied || '/' || duplicates || '/' || stale || '/' || batches FROM exactonce.pipelines WHERE name = 'trades'";
my $before = $node->safe_psql($db, $counters);

# an immediate shutdown (no checkpoint) loses nothing committed
$node->stop('immediate');
$node->start;
is($node->safe_psql($db, $counters), $before, 'counters survive an immediate shutdown');
eo_check($node, $db, 'after an immediate shutdown');
is($node->safe_psql($db, "SELECT exactonce.flush('trades')"), '0', 'nothing is drained twice');

$node->stop;
done_testing();
