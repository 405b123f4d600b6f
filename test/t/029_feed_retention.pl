# Feed retention under the workers: consumers that stop, lag and come back.
#
# The workers fold the feed below the least position of its consumers
# (feed.c).  Three consumers read it, each into table got, with the change
# each row makes to its cell:
#  - steady reads after every round;
#  - stopper stops for three rounds: the changes it has not read stay, the
#    older ones are folded, and once it is back and has read them the feed
#    shrinks to a row per cell;
#  - lagger stops for good once exactonce.feed_max_lag is set: the workers
#    invalidate it, its reads fail, exactonce.pipelines counts it, the feed
#    folds past it, and once dropped it reads again from the start.
# The server is shut down with -m immediate in the middle.  Each consumer's
# changes add up to the aggregates, and so does a consumer that starts last.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('feed_retention');
eo_setup($node, $db);
$node->safe_psql(
	$db, q{
SELECT exactonce.set_feed('trades', true);
CREATE TABLE got (consumer text, seq bigint, level integer, cell text[], total numeric, keys bigint,
	PRIMARY KEY (consumer, seq));
});

# read_all(consumer): the consumer reads until nothing is left; returns
# how many changes it read
sub read_all
{
	my ($consumer) = @_;
	my ($n, $total) = (0, 0);
	do
	{
		$n = $node->safe_psql(
			$db, qq{
WITH r AS (INSERT INTO got SELECT '$consumer', seq, level, cell, new_total - old_total, new_keys - old_keys
	FROM exactonce.feed_read('trades', '$consumer', 1000) RETURNING 1)
SELECT count(*) FROM r});
		$total += $n;
	} while ($n > 0);
	return $total;
}

# adds_up(consumer): the consumer's changes, summed per cell, are the
# aggregates (0: every cell)
sub adds_up
{
	my ($consumer) = @_;
	return $node->safe_psql(
		$db, qq{
SELECT count(*) FROM (
	(SELECT level, cell, sum(total), sum(keys) FROM got WHERE consumer = '$consumer' GROUP BY 1, 2
	 HAVING sum(keys) <> 0 OR sum(total) <> 0
	 EXCEPT SELECT level, ARRAY[risk_type, region, trade_desk], total, keys FROM trades.aggregates)
	UNION ALL
	(SELECT level, ARRAY[risk_type, region, trade_desk], total, keys FROM trades.aggregates
	 EXCEPT SELECT level, cell, sum(total), sum(keys) FROM got WHERE consumer = '$consumer' GROUP BY 1, 2)) m});
}

sub position
{
	my ($consumer) = @_;
	return $node->safe_psql($db,
		"SELECT position FROM exactonce.feed_consumers WHERE pipeline = 'trades' AND consumer = '$consumer'");
}

my $round = 0;

sub round
{
	$round++;
	eo_produce($node, $db, ($round - 1) * 2000 + 1, $round * 2000);
	eo_wait_drained($node, $db) or die "round $round not drained";
	return;
}

# --- a consumer that stops and comes back ------------------------------------
read_all($_) for qw(steady stopper);
round();
read_all($_) for qw(steady stopper);
my $stopped_at = position('stopper');
my $per_round = $node->safe_psql($db, 'SELECT max(seq) FROM trades.feed');
for (1 .. 3)
{
	round();
	read_all('steady');
}
# the workers fold below the stopper, and keep every change above it
ok( $node->poll_query_until(
		$db, qq{
SELECT count(*) = 0 FROM (SELECT 1 FROM trades.feed WHERE seq <= $stopped_at
	GROUP BY level, risk_type, region, trade_desk HAVING count(*) > 1) c}),
	'the workers fold the changes every consumer has read');
is( $node->safe_psql(
		$db, qq{
SELECT count(*) FROM got g WHERE consumer = 'steady' AND seq > $stopped_at
	AND NOT EXISTS (SELECT FROM trades.feed f WHERE f.seq = g.seq)}),
	'0', 'and keep every change a stopped consumer has not read');
cmp_ok(read_all('stopper'), '>', 0, 'the stopped consumer comes back and reads what it missed');
is(adds_up('stopper'), '0', 'its changes add up to the aggregates');
ok( $node->poll_query_until(
		$db, 'SELECT (SELECT count(*) FROM trades.feed) = (SELECT count(*) FROM trades.aggregates)'),
	'once every consumer has read everything, the feed is a row per cell');

# --- a consumer past exactonce.feed_max_lag ----------------------------------
# a round makes about $per_round changes: steady, a round behind at most,
# stays; lagger, four rounds behind, goes
read_all('lagger');
eo_alter_system($node, 'exactonce.feed_max_lag' => 3 * $per_round);
for (1 .. 5)
{
	round();
	read_all($_) for qw(steady stopper);
}
ok( $node->poll_query_until(
		$db,
		"SELECT invalidated_at IS NOT NULL FROM exactonce.feed_consumers WHERE consumer = 'lagger'"),
	'the workers invalidate a consumer that lags past exactonce.feed_max_lag');
like(slurp_file($node->logfile), qr/WARNING:  invalidating consumer "lagger" of the feed of pipeline "trades"/,
	'and say so in the log');
is( $node->safe_psql(
		$db,
		"SELECT string_agg(consumer, ',' ORDER BY consumer) FROM exactonce.feed_consumers WHERE invalidated_at IS NOT NULL"
	),
	'lagger',
	'the consumers that keep up are not');
is($node->safe_psql($db, "SELECT feed_consumers_invalidated FROM exactonce.pipelines WHERE name = 'trades'"),
	'1', 'exactonce.pipelines counts it');
my ($rc, $out, $err) = $node->psql($db, "SELECT * FROM exactonce.feed_read('trades', 'lagger')");
like($err, qr/consumer "lagger" of the feed of pipeline "trades" was invalidated/, 'its reads fail');
ok($node->poll_query_until($db, 'SELECT count(*) = 0 FROM (SELECT 1 FROM trades.feed WHERE seq <= '
		  . position('steady') . ' GROUP BY level, risk_type, region, trade_desk HAVING count(*) > 1) c'),
	'it holds nothing back: the workers fold past it');
is($node->safe_psql($db, "SELECT exactonce.drop_feed_consumer('trades', 'lagger')"), 't', 'dropped,');
$node->safe_psql($db, "DELETE FROM got WHERE consumer = 'lagger'");
read_all('lagger');
is(adds_up('lagger'), '0', 'it reads again from the start, and its changes add up to the aggregates');
eo_alter_system($node, 'exactonce.feed_max_lag' => undef);

# --- an immediate shutdown in the middle -------------------------------------
round();
read_all('steady');
$node->stop('immediate');
$node->start;
for (1 .. 2)
{
	round();
	read_all($_) for qw(steady stopper lagger);
}
is(join(',', map { adds_up($_) } qw(steady stopper lagger)), '0,0,0',
	'through an immediate shutdown, each consumer\'s changes add up to the aggregates');
read_all('last');
is(adds_up('last'), '0', 'so do those of a consumer that starts last');
ok( $node->poll_query_until(
		$db, 'SELECT (SELECT count(*) FROM trades.feed) = (SELECT count(*) FROM trades.aggregates)'),
	'and the feed is a row per cell again');
my ($rows, $made) = split /\|/,
  $node->safe_psql($db, 'SELECT (SELECT count(*) FROM trades.feed), (SELECT max(seq) FROM trades.feed)');
note("the feed keeps $rows rows of $made changes made");
eo_check($node, $db, 'feed retention');

done_testing();
