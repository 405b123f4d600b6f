# A distributed pipeline on three real clusters: a coordinator and two
# nodes, linked by postgres_fdw.  The trade-risk stream (duplicates, moves,
# tombstones, stale resends) goes into the coordinator's ingest, which
# routes each event to the node of its key; each node's workers drain it.
# A node stopped with -m immediate mid-stream makes the inserts for its
# keys and the reads of the aggregates fail, naming it, while the other
# node takes its own keys; the producer resends after the restart.  The
# coordinator's aggregates equal the oracle, and the accounting identity
# holds on each node and in total.  flush, pause, resume and drop act on
# every node; a flush waiting for a node is interrupted by statement_timeout,
# which cancels it there.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $coord = eo_node('coordinator', preload => 0);
my @nodes = (eo_node('node1'), eo_node('node2'));
$_->safe_psql($db, 'CREATE EXTENSION exactonce') for @nodes;
my $user = $coord->safe_psql($db, 'SELECT current_user');
$coord->safe_psql($db, 'CREATE EXTENSION exactonce; CREATE EXTENSION postgres_fdw');
for my $i (0, 1)
{
	my $n = $nodes[$i];
	my $server = 'node' . ($i + 1);
	$coord->safe_psql($db,
		"CREATE SERVER $server FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '"
		  . $n->host . "', port '" . $n->port . "', dbname '$db');
		 CREATE USER MAPPING FOR CURRENT_USER SERVER $server OPTIONS (user '$user')");
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
is($coord->safe_psql($db, 'SELECT servers FROM exactonce.distributed_pipeline'),
	'{node1,node2}', 'the coordinator registers the pipeline over both nodes');
is(join(',', map { $_->safe_psql($db, "SELECT count(*) FROM exactonce.pipelines WHERE name = 'trades'") } @nodes),
	'1,1', 'each node has the pipeline');

# the stream, in rounds; node2 is stopped before round 3
for my $round (1 .. 6)
{
	my ($from, $to) = (($round - 1) * 2000 + 1, $round * 2000);
	if ($round == 3)
	{
		$nodes[1]->stop('immediate');
		my ($rc, $out, $err) = $coord->psql($db, ExactonceTest::produce_sql($from, $to));
		isnt($rc, 0, 'node2 down: a statement with keys of node2 fails');
		like($err, qr/node2/, 'and the error names node2');
		($rc, $out, $err) = $coord->psql($db, 'SELECT count(*) FROM trades.aggregates');
		like($err, qr/could not connect to server "node2"/,
			'node2 down: reading the aggregates fails and names node2, rather than a partial sum');
		my $k1 = $coord->safe_psql($db,
			"SELECT key FROM (SELECT 'solo' || i AS key FROM generate_series(1, 100) i) k
			 WHERE satisfies_hash_partition('trades.ingest'::regclass, 2, 0, key::text COLLATE \"C\") LIMIT 1");
		($rc, $out, $err) = $coord->psql($db,
			"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
			 VALUES ('$k1', 1, 0, 'Delta', 'AMER', 'FXSpot')");
		is($rc, 0, 'node2 down: events of node1\'s keys still go in') or diag($err);
		$nodes[1]->start;
		$coord->safe_psql($db,
			"INSERT INTO truth VALUES ('$k1', 1, 0, 'Delta', 'AMER', 'FXSpot', false); INSERT INTO sent VALUES (1)");
	}
	# the producer (re)sends the round; a second send is all duplicates
	$coord->safe_psql($db, ExactonceTest::produce_sql($from, $to));
	if ($round == 5)
	{
		$coord->safe_psql($db,
			"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted)
			 SELECT * FROM truth WHERE version BETWEEN $from AND $to;
			 INSERT INTO sent SELECT count(*) FROM truth WHERE version BETWEEN $from AND $to");
	}
}

# pause and resume reach every node
$coord->safe_psql($db, "SELECT exactonce.pause('trades')");
is($coord->safe_psql($db, 'SELECT string_agg(paused::text, \',\' ORDER BY server) FROM trades.nodes'),
	'true,true', 'pause at the coordinator pauses every node');
$coord->safe_psql($db, "SELECT exactonce.resume('trades')");
is($coord->safe_psql($db, 'SELECT bool_or(paused) FROM trades.nodes'), 'f', 'resume resumes them');

# flush at the coordinator drains every node
$coord->safe_psql($db, "SELECT exactonce.flush('trades')");
is($coord->safe_psql($db, 'SELECT sum(queued) FROM trades.nodes'), '0', 'flush drains every node');
is(eo_mismatches($coord, $db), '0', 'the coordinator\'s aggregates equal the oracle');
is( $coord->safe_psql(
		$db, q{
SELECT bool_and(ingested = applied + duplicates + stale + dead_lettered)
   AND sum(ingested) = (SELECT sum(n) FROM sent) AND sum(dead_lettered) = 0
FROM trades.nodes}),
	't', 'the accounting identity holds on each node and in total, every event sent ingested once');
is( join(',', map { $_->safe_psql($db, "SELECT count(*) > 0 FROM trades.state") } @nodes),
	't,t', 'both nodes hold keys');
# each key lives on the node of its hash partition
my $keys1 = $nodes[0]->safe_psql($db, "SELECT string_agg(quote_literal(key), ',') FROM trades.state");
is( $coord->safe_psql(
		$db, "SELECT bool_and(satisfies_hash_partition('trades.ingest'::regclass, 2, 0, k::text COLLATE \"C\"))
			  FROM unnest(ARRAY[$keys1]) k"),
	't', 'every key of node1 is in hash partition 0');

# a node holding its pipeline keeps flush waiting; statement_timeout at the
# coordinator ends the wait and cancels the flush on the node
my $holder = $nodes[0]->background_psql($db);
$holder->query_safe('BEGIN');
$holder->query_safe('SELECT * FROM trades.progress FOR UPDATE');
my ($rc, $out, $err) = $coord->psql($db, "SET statement_timeout = '1s'; SELECT exactonce.flush('trades')");
like($err, qr/canceling statement due to statement timeout/,
	'a flush waiting for a node is interrupted by statement_timeout');
ok( $nodes[0]->poll_query_until(
		$db, "SELECT count(*) = 0 FROM pg_stat_activity WHERE query LIKE 'SELECT exactonce.flush%'"),
	'and the flush on the node is cancelled');
$holder->query_safe('ROLLBACK');
$holder->quit;

# drop at the coordinator drops every node's pipeline
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('trades')");
is(join(',', map { $_->safe_psql($db, "SELECT count(*) FROM exactonce.pipelines WHERE name = 'trades'") } @nodes),
	'0,0', 'drop_pipeline at the coordinator drops the pipeline on every node');
is($coord->safe_psql($db, "SELECT to_regnamespace('trades') IS NULL AND NOT EXISTS (SELECT FROM exactonce.distributed_pipeline)"),
	't', 'and the coordinator\'s schema and registry row');

done_testing();
