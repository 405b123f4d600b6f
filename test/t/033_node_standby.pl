# A node of a distributed pipeline lost, and its streaming standby promoted
# in its place.  The standby stops receiving before the last rounds (as an
# asynchronous standby behind its primary would), so the node takes events
# and applies them that the standby never sees; then the node is stopped
# with -m immediate, the standby promoted, and the coordinator's server
# pointed at it (ALTER SERVER).  The producer resends the rounds since its
# last checkpoint before the loss, through the coordinator: what the
# standby had is a duplicate or stale there, what it had not is applied.
# The coordinator's aggregates equal the oracle, the accounting identity
# holds on each node, verify() is clean on both.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $coord = eo_node('coordinator', preload => 0);
my $node1 = eo_node('node1');
my $node2 = eo_node('node2', init => { allows_streaming => 1 });
$_->safe_psql($db, 'CREATE EXTENSION exactonce') for ($node1, $node2);
my $user = $coord->safe_psql($db, 'SELECT current_user');
$coord->safe_psql($db, 'CREATE EXTENSION exactonce; CREATE EXTENSION postgres_fdw');
for my $n ([ 'node1', $node1 ], [ 'node2', $node2 ])
{
	$coord->safe_psql($db,
		"CREATE SERVER $n->[0] FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '"
		  . $n->[1]->host . "', port '" . $n->[1]->port . "', dbname '$db');
		 CREATE USER MAPPING FOR CURRENT_USER SERVER $n->[0] OPTIONS (user '$user')");
}
$coord->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.create_distributed_pipeline('trades', ARRAY['risk_type', 'region', 'trade_desk'],
	ARRAY['node1', 'node2']::name[]);
CREATE TABLE truth (key text, version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, PRIMARY KEY (key, version));
CREATE TABLE sent (n bigint NOT NULL);
});

# node2's standby, streaming from it
$node2->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('node2_standby');
$standby->init_from_backup($node2, 'b', has_streaming => 1);
$standby->start;

# three rounds the standby receives, drained on both nodes
ExactonceTest::eo_produce($coord, $db, ($_ - 1) * 2000 + 1, $_ * 2000) for 1 .. 3;
ok(eo_wait_drained($_, $db), 'a node drains the first rounds') for ($node1, $node2);
$node2->wait_for_catchup($standby);
is($standby->safe_psql($db, 'SELECT count(*) FROM trades.state'),
	$node2->safe_psql($db, 'SELECT count(*) FROM trades.state'),
	'the standby has node2\'s state');

# the standby falls behind: two rounds node2 takes and applies alone
$standby->stop;
my $received = 6000;
ExactonceTest::eo_produce($coord, $db, ($_ - 1) * 2000 + 1, $_ * 2000) for 4 .. 5;
ok(eo_wait_drained($node2, $db), 'node2 applies rounds 4 and 5, which its standby never receives');

# node2 is lost; its standby is promoted and takes its place
$node2->stop('immediate');
my ($rc, $out, $err) = $coord->psql($db, ExactonceTest::produce_sql(10001, 12000));
like($err, qr/server "node2"/, 'node2 lost: a statement with its keys fails, naming it');
$standby->append_conf('postgresql.conf', "primary_conninfo = ''");
$standby->start;
$standby->promote;
$coord->safe_psql($db,
	"ALTER SERVER node2 OPTIONS (SET host '" . $standby->host . "', SET port '" . $standby->port . "')");
cmp_ok($standby->safe_psql($db, 'SELECT max(version) FROM trades.state'), '<=', $received,
	'the promoted standby has none of rounds 4 and 5');

# the producer resends everything since its checkpoint, in round 3, then
# goes on
my $checkpoint = 4000;
my $before = $standby->safe_psql($db, "SELECT duplicates + stale FROM exactonce.pipelines WHERE name = 'trades'");
my $had = $coord->safe_psql($db,
	"SELECT count(*) FROM truth WHERE version BETWEEN $checkpoint + 1 AND $received
	 AND satisfies_hash_partition('trades.ingest'::regclass, 2, 1, key::text COLLATE \"C\")");
$coord->safe_psql(
	$db, qq{
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted)
	SELECT * FROM truth WHERE version > $checkpoint;
INSERT INTO sent SELECT count(*) FROM truth WHERE version > $checkpoint;
});
ExactonceTest::eo_produce($coord, $db, ($_ - 1) * 2000 + 1, $_ * 2000) for 6 .. 7;
ok(eo_wait_drained($_, $db), 'both nodes drain, the promoted standby with its own workers') for ($node1, $standby);

is(eo_mismatches($coord, $db), '0', 'the coordinator\'s aggregates equal the oracle');
is($coord->safe_psql($db, 'SELECT bool_and(ingested = applied + duplicates + stale + dead_lettered) FROM trades.nodes'),
	't', 'the accounting identity holds on each node');
is(join(',', map { $_->safe_psql($db, "SELECT bool_and(ok) FROM exactonce.verify('trades')") } ($node1, $standby)),
	't,t', 'verify() is clean on node1 and on the promoted standby');
cmp_ok($standby->safe_psql($db, "SELECT duplicates + stale - $before FROM exactonce.pipelines WHERE name = 'trades'"),
	'>=', $had, "the $had resent events of round 3 the standby had are duplicates or stale there");

done_testing();
