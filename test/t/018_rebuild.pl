# rebuild() online: with the workers draining, a rebuild of damaged
# aggregates holds the pipeline until it commits while producers go on
# inserting; afterwards the workers drain what came meanwhile, and the
# aggregates equal the oracle computed from the events produced.  A killed
# rebuild changes nothing.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('rebuild');
eo_setup($node, $db);

my $batch = 0;
sub produce
{
	$batch++;
	eo_produce($node, $db, ($batch - 1) * 3000 + 1, $batch * 3000);
	return;
}

produce();
ok(eo_wait_drained($node, $db), 'the workers drain the first events');
eo_check($node, $db, 'before any damage');

for my $round (1 .. 3)
{
	# damage: a cell's total, a lost cell, the grand total's key count
	$node->safe_psql(
		$db, q{
UPDATE trades.aggregates SET total = total + 1 WHERE level = 3 AND ctid = (SELECT min(ctid) FROM trades.aggregates WHERE level = 3);
DELETE FROM trades.aggregates WHERE level = 2 AND ctid = (SELECT min(ctid) FROM trades.aggregates WHERE level = 2);
UPDATE trades.aggregates SET keys = keys + 7 WHERE level = 0;
});
	ok($node->safe_psql($db, "SELECT count(*) FROM exactonce.verify('trades') WHERE NOT ok") >= 3,
		"round $round: verify reports the damaged cells");

	# the rebuild holds the pipeline; producers insert meanwhile
	my $rebuilder = $node->background_psql($db);
	$rebuilder->query_safe('BEGIN');
	$rebuilder->query_safe("SELECT exactonce.rebuild('trades')");
	produce();
	is($node->safe_psql($db, "SELECT queued >= 3000 FROM exactonce.pipelines WHERE name = 'trades'"),
		't', "round $round: inserts go on during the rebuild, and the workers wait for it");
	$rebuilder->query_safe('COMMIT');
	$rebuilder->quit;
	ok(eo_wait_drained($node, $db), "round $round: after the rebuild the workers drain what came meanwhile");
	eo_check($node, $db, "round $round, rebuilt online");
	is($node->safe_psql($db, "SELECT count(*) FROM exactonce.verify('trades') WHERE NOT ok"),
		'0', "round $round: verify finds nothing");
}

# a rebuild killed half way leaves the damage as it was, and nothing else
$node->safe_psql($db, 'UPDATE trades.aggregates SET total = total + 1 WHERE level = 0');
my $killed = $node->background_psql($db, on_error_stop => 0);
$killed->query_safe('BEGIN');
my $pid = $killed->query_safe('SELECT pg_backend_pid()');
$killed->query_safe("SELECT exactonce.rebuild('trades')");
$node->safe_psql($db, "SELECT pg_terminate_backend($pid)");
$killed->quit;
is($node->safe_psql($db, "SELECT count(*) FROM exactonce.verify('trades') WHERE NOT ok AND item = 'cell'"),
	'1', 'a rebuild killed before its commit changed nothing');
$node->safe_psql($db, "SELECT exactonce.rebuild('trades')");
produce();
ok(eo_wait_drained($node, $db), 'the pipeline drains after the kill');
eo_check($node, $db, 'after a killed rebuild and a rebuild');

done_testing();
