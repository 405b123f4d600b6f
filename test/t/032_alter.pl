# alter_pipeline_as() under load: a producer keeps inserting, with
# duplicates, stale versions and tombstones, while the pipeline declared as
# a query is declared anew three times (other grouping sets, min and max, a
# WHERE added and narrowed) and the workers drain.  After each change the
# result equals the new query run over the latest version of each key that
# the producer recorded in truth: nothing lost or counted twice across it.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('alter');
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline_as('trades', 'SELECT risk_type, region, trade_desk, sum(value) AS total, count(*) AS n FROM stream GROUP BY ROLLUP (risk_type, region, trade_desk)');
CREATE TABLE truth (key text, version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, PRIMARY KEY (key, version));
CREATE TABLE sent (n bigint NOT NULL);
CREATE VIEW stream AS SELECT * FROM (SELECT DISTINCT ON (key) * FROM truth ORDER BY key, version DESC) l
	WHERE NOT deleted;
});

# differing(query): rows of trades.result and of the query over truth that
# are not in the other
sub differing
{
	my ($query) = @_;
	return $node->safe_psql($db,
		"SELECT count(*) FROM ((SELECT * FROM trades.result EXCEPT ALL $query) UNION ALL ($query EXCEPT ALL SELECT * FROM trades.result)) d"
	);
}

# a producer of 20 transactions of 500 events each, in the background
my $next = 1;
sub start_producer
{
	my $sql = '';
	for (1 .. 20)
	{
		$sql .= ExactonceTest::produce_sql($next, $next + 499);
		$next += 500;
	}
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db) ],
		'<', \$sql, '>', \$out, '2>', \$err);
	return ($h, \$err);
}

my @queries = (
	'SELECT region, trade_desk, min(value), max(value) AS top, count(*) AS n FROM stream GROUP BY GROUPING SETS ((region), (trade_desk), ())',
	'SELECT risk_type, region, sum(value) AS total, avg(value), max(value) FROM stream WHERE value > 200 GROUP BY CUBE (risk_type, region)',
	'SELECT risk_type, trade_desk, sum(value) AS total, count(*) AS n FROM stream WHERE value > 200 AND region <> \'APAC\' GROUP BY ROLLUP (risk_type, trade_desk)',
);
my $q = 'SELECT risk_type, region, trade_desk, sum(value) AS total, count(*) AS n FROM stream GROUP BY ROLLUP (risk_type, region, trade_desk)';

my ($h, $err) = start_producer();
$h->finish or die "producer failed: $$err";
ok(eo_wait_drained($node, $db), 'the workers drain the first events');
is(differing($q), '0', 'the result is the query over the events produced');

for my $i (0 .. $#queries)
{
	my $label = "change " . ($i + 1);
	($h, $err) = start_producer();

	# the change lands while the producer inserts and the workers drain
	$node->poll_query_until($db, "SELECT count(*) >= 2 FROM sent") or die;
	my $quoted = $queries[$i];
	$quoted =~ s/'/''/g;
	my $cells = $node->safe_psql($db, "SELECT exactonce.alter_pipeline_as('trades', '$quoted')");
	ok($cells > 0, "$label: the cells are recomputed from state ($cells)");
	$h->finish or die "producer failed: $$err";
	is($$err, '', "$label: the producer's inserts all went through");

	ok(eo_wait_drained($node, $db), "$label: the workers drain what came during the change");
	is(differing($queries[$i]), '0', "$label: the result is the new query over every event produced");
	is( $node->safe_psql(
			$db, q{
SELECT ingested = (SELECT sum(n) FROM sent) AND ingested = applied + duplicates + stale + dead_lettered
	AND dead_lettered = 0
FROM exactonce.pipelines WHERE name = 'trades'}),
		't',
		"$label: every row sent ingested once, accounted for");
	is($node->safe_psql($db, "SELECT count(*) FROM exactonce.verify('trades') WHERE NOT ok"),
		'0', "$label: verify finds nothing");
}

# a change that state cannot compute leaves the pipeline as it was
my ($ret, $stdout, $stderr) = $node->psql($db,
	"SELECT exactonce.alter_pipeline_as('trades', 'SELECT risk_type, count(*) FROM stream GROUP BY risk_type')"
);
like($stderr, qr/cannot be altered to a query without its WHERE/, 'a wider query is refused');
is(differing($queries[-1]), '0', 'the refused change left the result as it was');

done_testing();
