# A paused pipeline costs its workers a look, not a write: no step takes a
# row lock, so none gets a transaction id whose commit a synchronous
# standby would have to confirm.  With synchronous_standby_names naming a
# standby that never answers, the workers of a paused pipeline never wait
# for it (before, each round locked the shard rows and hung on its
# commit), and move_keys_out, which takes the shard rows, is not held up
# by them.  Resumed, the pipeline drains what queued meanwhile.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('paused');
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('p', ARRAY['d'], shards => 2);
INSERT INTO p.ingest (key, version, value, d) SELECT 'k' || i, 1, i, 'a' FROM generate_series(1, 100) i;
});
$node->poll_query_until($db, "SELECT applied = 100 FROM exactonce.pipelines WHERE name = 'p'")
  or die 'not drained';
$node->safe_psql($db, "SELECT exactonce.pause('p')");

# a standby that never answers; producers commit locally
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'nobody'");
$node->reload;
$node->safe_psql($db,
	"SET synchronous_commit = local;
	 INSERT INTO p.ingest (key, version, value, d) SELECT 'k' || i, 2, i, 'b' FROM generate_series(1, 100) i");

# twenty rounds of the workers (naptime 200ms), watched from outside: the
# next transaction id stays where it was and nobody waits for the standby
my $next = "SELECT pg_snapshot_xmax(pg_current_snapshot())";
my $before = $node->safe_psql($db, $next);
my $waiting = 0;
for my $i (1 .. 20)
{
	$node->safe_psql($db, 'SELECT pg_sleep(0.2)');
	$waiting += $node->safe_psql($db,
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'");
}
is($waiting, 0, 'no worker of the paused pipeline waits for the standby');
is($node->safe_psql($db, $next), $before, 'the workers assigned no transaction id');

# move_keys_out locks every shard row: nothing of the workers holds them
my ($rc, $out, $err) = $node->psql($db,
	"SET synchronous_commit = local; SET lock_timeout = '5s';
	 BEGIN; SELECT keys FROM exactonce.move_keys_out('p', 2, 0, 'elsewhere', 'g1'); ROLLBACK");
is($rc, 0, 'move_keys_out takes the shards of the paused pipeline at once') or diag($err);

$node->adjust_conf('postgresql.conf', 'synchronous_standby_names', "''");
$node->reload;
$node->safe_psql($db, "SELECT exactonce.resume('p')");
$node->poll_query_until($db, "SELECT applied = 200 FROM exactonce.pipelines WHERE name = 'p'")
  or die 'not drained after resume';
is($node->safe_psql($db, "SELECT total, keys FROM p.aggregates WHERE level = 0"),
	'5050|100', 'resumed, it drains what queued while paused');
done_testing();
