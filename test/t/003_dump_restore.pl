# pg_dump of a pipeline half way through a queue partition, restored with
# pg_restore (custom format) and psql (plain format) into another database
# and into another cluster: the restored copy drains every event once, from
# where the dump left it, and goes on with new events; idempotency tokens
# claimed before the dump stay claimed; the change feed, its consumer's
# position, a named view and the retention horizon come back with it.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $node = eo_node('dump');
my $db = 'postgres';
eo_setup($node, $db);
$node->safe_psql($db, "SELECT exactonce.once('payments', 'order-1')");
$node->safe_psql(
	$db, q{
SELECT exactonce.set_feed('trades', true);
SELECT exactonce.create_view('trades', 'delta_desks', ARRAY['trade_desk'], $$risk_type = 'Delta'$$);
SELECT exactonce.prune('trades', 0);
});
eo_produce($node, $db, 1, 5000);
ok(eo_wait_drained($node, $db), 'a first load drained');
# the consumer's position: the seq of the 20th change it read (the workers
# may have folded the feed before, leaving gaps in seq; if the load drained
# in one step, the feed holds a change per cell, 49)
is($node->safe_psql($db, "SELECT count(*) FROM exactonce.feed_read('trades', 'mirror', 20)"),
	'20', 'a consumer reads 20 changes');
my $position = $node->safe_psql($db,
	"SELECT position FROM exactonce.feed_consumers WHERE consumer = 'mirror'");
ok(eo_half_drain($node, $db, 5001, 35000), 'half way through a partition');
my $part = eo_queue_partition($node, $db);

my $dir = PostgreSQL::Test::Utils::tempdir;
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr($db), '-f', "$dir/dump.custom" ],
	'pg_dump -Fc');
$node->command_ok([ 'pg_dump', '-Fp', '-d', $node->connstr($db), '-f', "$dir/dump.sql" ],
	'pg_dump -Fp');

# the copy that is dumped goes on too
eo_resume($node, $db);
ok(eo_wait_drained($node, $db), 'the dumped database drains');
eo_check($node, $db, 'dumped database');

# restore: the rows of the half-drained partition are loaded again without
# the aborted rows before them, so every TID has moved
sub check_restored
{
	my ($target, $tdb, $label) = @_;
	is( $target->safe_psql($tdb,
			"SELECT (SELECT sum(drain_count) FROM trades.shard) > 0 AND paused FROM exactonce.pipelines"),
		't', "$label: restored half way, paused");
	is($target->safe_psql($tdb, "SELECT exactonce.once('payments', 'order-1')"),
		'f', "$label: a token claimed before the dump stays claimed");
	$target->safe_psql($tdb, "SELECT exactonce.resume('trades')");
	$target->safe_psql($tdb, "SELECT exactonce.flush('trades')");
	eo_check($target, $tdb, "$label, drained");
	eo_produce($target, $tdb, 35001, 40000);
	$target->safe_psql($tdb, "SELECT exactonce.flush('trades')");
	eo_check($target, $tdb, "$label, more events");
	is( $target->safe_psql(
			$tdb, qq{
SELECT $position >= 20
   AND (SELECT position FROM exactonce.feed_consumers WHERE consumer = 'mirror') = $position
   AND (SELECT min(seq) FROM trades.feed WHERE seq > $position)
	 = (SELECT min(seq) FROM exactonce.feed_read('trades', 'mirror', 10))
   AND (SELECT retention_horizon FROM exactonce.pipelines) = 0}),
		't', "$label: the feed consumer goes on from its position; the retention horizon is kept");
	is( $target->safe_psql(
			$tdb, q{
SELECT (SELECT count(*) FROM
	(SELECT level, risk_type, region, trade_desk, total, keys FROM trades.aggregates
	 EXCEPT ALL SELECT level, risk_type, region, trade_desk, sum(new_total - old_total), sum(new_keys - old_keys)
	 FROM trades.feed GROUP BY 1, 2, 3, 4 HAVING sum(new_keys - old_keys) <> 0) f)
	+ (SELECT count(*) FROM
	(SELECT trade_desk, total FROM trades.delta_desks
	 EXCEPT ALL SELECT trade_desk, sum(total) FROM trades.aggregates
	 WHERE level = 3 AND risk_type = 'Delta' GROUP BY trade_desk) v)}),
		'0', "$label: the feed replayed rebuilds the aggregates, and the view reads them");
	return;
}

$node->safe_psql($db, 'CREATE DATABASE custom; CREATE DATABASE plain');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('custom'), "$dir/dump.custom" ],
	'pg_restore into another database');
check_restored($node, 'custom', 'pg_restore, same cluster');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('plain'), '-f', "$dir/dump.sql" ],
	'plain dump restored with psql');
check_restored($node, 'plain', 'plain format');

my $other = eo_node('restored', preload => 0);
$other->safe_psql('postgres', 'CREATE DATABASE copy');
$other->command_ok([ 'pg_restore', '-d', $other->connstr('copy'), "$dir/dump.custom" ],
	'pg_restore into another cluster');
check_restored($other, 'copy', 'pg_restore, other cluster');

$node->stop;
$other->stop;
done_testing();
