# The change feed under kills: the workers drain a stream with moves and
# tombstones into a pipeline with a feed; two consumers read it meanwhile,
# tools/feed-mirror.sh and one that records every change it reads, and their
# backends are killed in the middle of transactions, and the server is shut
# down with -m immediate once.  Each consumer sees each change once and in
# order, the mirror equals the aggregates, and the feed replayed from its
# start rebuilds them.  A listener hears the NOTIFY of a worker's reduce.
# A feed turned on over existing cells (its first seqs drawn in the
# transaction that made it) keeps its seqs through a crash under
# wal_level = minimal, the test clusters' setting.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('feed');
eo_setup($node, $db);
$node->safe_psql(
	$db, q{
SELECT exactonce.set_feed('trades', true, notify => true);
CREATE TABLE consumed (n bigserial PRIMARY KEY, seq bigint NOT NULL UNIQUE, level integer, cell text[],
	total numeric, keys bigint);
});

my %env = (PGHOST => $node->host, PGPORT => $node->port, PGDATABASE => $db);

# the recording consumer: one transaction of up to 200 changes; a change
# read twice would break consumed's unique seq and roll it back
my $record = q{
BEGIN;
INSERT INTO consumed (seq, level, cell, total, keys) SELECT seq, level, cell, new_total - old_total,
	new_keys - old_keys FROM exactonce.feed_read('trades', 'recorder', 200) ORDER BY seq;
COMMIT;
};

# the consumers' backends, killed while they are in a transaction
sub kill_consumers
{
	return $node->safe_psql($db,
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		 WHERE query LIKE '%feed_read%' AND pid <> pg_backend_pid() AND backend_type = 'client backend'");
}

my $kills = 0;
for my $round (1 .. 8)
{
	eo_produce($node, $db, ($round - 1) * 2000 + 1, $round * 2000);
	my $run = IPC::Run::start([ 'bash', 'tools/feed-mirror.sh', 'trades' ],
		'>', \my $out, '2>', \my $err, init => sub { $ENV{$_} = $env{$_} for keys %env; });

	# a recorder killed after its read, before its commit
	my $bg = $node->background_psql($db, on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	$bg->query_safe('BEGIN');
	$bg->query_safe(
		"INSERT INTO consumed (seq) SELECT seq FROM exactonce.feed_read('trades', 'recorder', 200) ORDER BY seq");
	$kills += $node->safe_psql($db, "SELECT pg_terminate_backend($pid)") eq 't';
	$bg->quit;

	# recorders that commit, and the mirror's backend killed if it is in one
	$node->psql($db, $record) for 1 .. 2;
	kill_consumers();
	$run->kill_kill;
	if ($round == 4)
	{
		$node->stop('immediate');
		$node->start;
	}
}
is($kills, 8, 'a recording consumer killed after its read and before its commit, in each of 8 rounds');

# notify: a listener hears the pipeline's name once a worker's reduce commits
my $listener = $node->background_psql($db);
$listener->query_safe('LISTEN exactonce_feed');
eo_produce($node, $db, 16001, 16010);
ok(eo_wait_drained($node, $db), 'the workers drain the stream');
like($listener->query_safe('SELECT 1'), qr/Asynchronous notification "exactonce_feed" with payload "trades" received/,
	'a listener of exactonce_feed hears the pipeline at the commit of a reduce');
$listener->quit;
eo_check($node, $db, 'with the feed on, under kills');

# both consumers catch up
{
	local %ENV = (%ENV, %env, FEED_MIRROR_ONCE => 1);
	system('bash', 'tools/feed-mirror.sh', 'trades') == 0 or die 'feed-mirror.sh failed';
}
1 while $node->safe_psql($db,
	"WITH r AS (INSERT INTO consumed (seq, level, cell, total, keys) SELECT seq, level, cell, new_total - old_total,
	 new_keys - old_keys FROM exactonce.feed_read('trades', 'recorder', 1000) ORDER BY seq RETURNING 1) SELECT count(*) FROM r"
) > 0;

is( $node->safe_psql(
		$db, q{
SELECT NOT EXISTS (SELECT FROM trades.feed f WHERE NOT EXISTS (SELECT FROM consumed c WHERE c.seq = f.seq))
   AND NOT EXISTS (
	(SELECT level, cell, sum(total), sum(keys) FROM consumed GROUP BY 1, 2 HAVING sum(keys) <> 0
	 EXCEPT SELECT level, ARRAY[risk_type, region, trade_desk], total, keys FROM trades.aggregates)
	UNION ALL
	(SELECT level, ARRAY[risk_type, region, trade_desk], total, keys FROM trades.aggregates
	 EXCEPT SELECT level, cell, sum(total), sum(keys) FROM consumed GROUP BY 1, 2))}),
	't', 'the recording consumer read every change of the feed once: the changes it read add up to the aggregates');
is( $node->safe_psql(
		$db, 'SELECT bool_and(seq > prev) FROM (SELECT seq, lag(seq, 1, 0::bigint) OVER (ORDER BY n) AS prev FROM consumed) c'),
	't', 'and in order');
is( $node->safe_psql(
		$db, q{
SELECT count(*) FROM (
	(SELECT level, ARRAY[risk_type, region, trade_desk] AS cell, total, keys FROM trades.aggregates
	 EXCEPT SELECT level, cell, total, keys FROM feed_mirror WHERE pipeline = 'trades')
	UNION ALL
	(SELECT level, cell, total, keys FROM feed_mirror WHERE pipeline = 'trades'
	 EXCEPT SELECT level, ARRAY[risk_type, region, trade_desk], total, keys FROM trades.aggregates)) m}),
	'0', 'the mirror tools/feed-mirror.sh kept equals the aggregates');
is( $node->safe_psql(
		$db, q{
SELECT count(*) FROM (
	(SELECT level, risk_type, region, trade_desk, sum(new_total - old_total), sum(new_keys - old_keys)
	 FROM trades.feed GROUP BY 1, 2, 3, 4 HAVING sum(new_keys - old_keys) > 0
	 EXCEPT SELECT level, risk_type, region, trade_desk, total, keys FROM trades.aggregates)
	UNION ALL
	(SELECT level, risk_type, region, trade_desk, total, keys FROM trades.aggregates
	 EXCEPT SELECT level, risk_type, region, trade_desk, sum(new_total - old_total), sum(new_keys - old_keys)
	 FROM trades.feed GROUP BY 1, 2, 3, 4)) m}),
	'0', 'the feed replayed from its start rebuilds the aggregates');
is( $node->safe_psql(
		$db, q{
SELECT count(*) FROM (SELECT old_total, old_keys,
	lag(new_total, 1, 0::numeric) OVER w AS prev_total, lag(new_keys, 1, 0::bigint) OVER w AS prev_keys
	FROM trades.feed WINDOW w AS (PARTITION BY level, risk_type, region, trade_desk ORDER BY seq)) f
WHERE old_total <> prev_total OR old_keys <> prev_keys}),
	'0', 'each change starts where the cell\'s change before it ended');

# a feed made over existing cells, then an immediate shutdown: its seq
# must not go back (wal_level = minimal logs nothing of the transaction
# that made the sequence)
$node->safe_psql(
	$db, q{
SELECT exactonce.create_pipeline('fresh', ARRAY['d']);
INSERT INTO fresh.ingest (key, version, value, d) VALUES ('a', 1, 1, 'x'), ('b', 1, 2, 'y');
SELECT exactonce.wait_applied('fresh', '60 s');
SELECT exactonce.set_feed('fresh', true);
INSERT INTO fresh.ingest (key, version, value, d) VALUES ('a', 2, 5, 'y');
SELECT exactonce.wait_applied('fresh', '60 s');
});
$node->stop('immediate');
$node->start;
$node->safe_psql($db,
	"INSERT INTO fresh.ingest (key, version, value, d) VALUES ('c', 1, 3, 'x'), ('b', 2, 4, 'x')");
ok($node->poll_query_until($db, "SELECT applied = 5 FROM exactonce.pipelines WHERE name = 'fresh'"),
	'after a crash, a feed made over existing cells takes the next changes');
is($node->safe_psql($db, "SELECT count(*) = count(DISTINCT seq) FROM fresh.feed"), 't',
	'and no seq came twice');

done_testing();
