# A transaction left open keeps every row version it might see.  Values
# that leave a cell's distinct count and come back delete and insert its
# row of table distincts each time, and the index of distincts keeps an
# entry for each of them, so that one value's entries run from one leaf
# page onto the next.  The key probe of reduce cannot tell from one page
# whether the value has a live row further on; it asks the index the usual
# way then, and the counts stay exact.  Once the transaction ends, VACUUM
# takes the versions away and the probe reads one page again.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('open_snapshot', preload => 0);

sub sql { return $node->safe_psql($db, shift); }

sql(q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
CREATE EXTENSION pageinspect;
SELECT exactonce.create_pipeline('u', ARRAY['d'], distinct_counts => ARRAY['cp']);
CREATE TABLE produced (key text, version bigint, d text, cp text);
});

# the producer: three keys in two cells, their counterparty cycling with
# periods 2, 3 and 5, one version of each per batch, one batch per round
sub rounds
{
	my ($from, $to) = @_;
	my $script = '';
	for my $i ($from .. $to)
	{
		my $rows = join(', ',
			map { "('k$_', $i, 'd' || ($_ % 2), 'c' || ($i % ($_ + 1)))" } (1, 2, 4));
		$script .= "WITH e(key, version, d, cp) AS (VALUES $rows), p AS (INSERT INTO produced SELECT * FROM e)\n"
		  . "INSERT INTO u.ingest (key, version, value, d, cp) SELECT key, version, 1, d, cp FROM e;\n"
		  . "SELECT exactonce.flush('u');\n";
	}
	$node->safe_psql($db, $script);
	return;
}

# the cells the latest version of each key makes, counted from the events
my $mismatches = q{
WITH latest AS (SELECT DISTINCT ON (key) * FROM produced ORDER BY key, version DESC),
truth AS (SELECT d, 1 - GROUPING(d) AS level, count(*) AS keys, count(DISTINCT cp) AS cp_distinct
		  FROM latest GROUP BY ROLLUP (d))
SELECT count(*) FROM ((SELECT d, level, keys, cp_distinct FROM u.aggregates EXCEPT ALL SELECT * FROM truth)
	UNION ALL (SELECT * FROM truth EXCEPT ALL SELECT d, level, keys, cp_distinct FROM u.aggregates)) m};

# the leaf pages of the index of distincts
my $leaves = q{SELECT count(*) FROM generate_series(1, pg_relation_size('u.distincts_pkey') / 8192 - 1) b,
	LATERAL bt_page_stats('u.distincts_pkey', b::int) s WHERE s.type = 'l'};

my $open = $node->background_psql($db);
$open->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$open->query_safe('SELECT count(*) FROM u.distincts');
rounds(1, 600);
my $members = sql('SELECT count(*) FROM u.distincts');
my $pages = sql($leaves);
cmp_ok($pages, '>', $members,
	"with a snapshot open, $members values of distincts have their index entries over $pages leaf pages: some run past a page"
);
is(sql($mismatches), '0', 'the distinct counts equal those of the latest versions');
is($open->query_safe('SELECT count(*) FROM u.distincts'),
	'0', 'the open transaction still sees what it saw');
$open->query_safe('COMMIT');
$open->quit;

sql('VACUUM u.distincts');
rounds(601, 700);
is(sql($mismatches), '0', 'once the transaction ended and VACUUM ran: still exact');
is(sql(q{SELECT count(*) FROM exactonce.verify('u') WHERE NOT ok}), '0', 'verify() finds every cell as state makes it');

$node->stop;
done_testing();
