# Memory is bounded by the batch, never by the backlog: flush() of 2M queued
# events over 500k distinct cells stays under 256 MB resident (VmHWM, with
# the default 128 MB of shared buffers), and creating and dropping 1,000
# pipelines frees the plans kept for them.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('memory');

# kB of a /proc/<pid>/status field
sub proc_kb
{
	my ($pid, $field) = @_;
	my ($kb) = slurp_file("/proc/$pid/status") =~ /^$field:\s+(\d+) kB/m;
	return $kb;
}

$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('big', ARRAY['a', 'b', 'c']);
SELECT exactonce.pause('big');
INSERT INTO big.ingest (key, version, value, a, b, c)
	SELECT 'k' || (i % 1000000), i / 1000000, 1, 'a' || (i % 100), 'b' || (i / 100 % 100), 'c' || (i / 10000 % 50)
	FROM generate_series(0, 1999999) i;
});
my $session = $node->background_psql($db);
my $pid = $session->query_safe('SELECT pg_backend_pid()');
is($session->query_safe("SELECT exactonce.flush('big')"), '2000000', 'flush takes 2M events');
my $hwm = proc_kb($pid, 'VmHWM');
cmp_ok($hwm, '<', 256 * 1024, "the flushing backend's peak resident memory stays under 256 MB ($hwm kB)");
is( $node->safe_psql($db,
		"SELECT count(*) FILTER (WHERE level = 3) || ' ' || sum(total) FILTER (WHERE level = 0) FROM big.aggregates"),
	'500000 1000000', 'over 500k cells, exactly (the second version of each key replaced the first)');
$session->quit;

# 1,000 pipelines created, fed, flushed and dropped in one session: the
# plans kept for them go with them.  (PostgreSQL's own catalog caches keep
# negative entries for the names looked up in the dropped schemas, which it
# never prunes, so the session's total memory grows by some kB per
# pipeline; see README.)
my $cycle = q{
SELECT exactonce.create_pipeline('cycle', ARRAY['d']);
INSERT INTO cycle.ingest (key, version, value, d) VALUES ('k', 1, 1, 'x');
SELECT exactonce.flush('cycle');
SELECT exactonce.drop_pipeline('cycle');
};
$session = $node->background_psql($db);
$session->query_safe('SET client_min_messages = warning');
my $plans = q{
SELECT count(*) FILTER (WHERE name = 'CachedPlanSource') || ' plans, '
	|| sum(total_bytes) FILTER (WHERE name = 'exactonce plans') || ' bytes of plan cache'
FROM pg_backend_memory_contexts};
my $total = 'SELECT sum(total_bytes) FROM pg_backend_memory_contexts';
$session->query_safe($cycle) for 1 .. 100;
my $plans_before = $session->query_safe($plans);
my $total_before = $session->query_safe($total);
$session->query_safe($cycle) for 1 .. 900;
is($session->query_safe($plans), $plans_before,
	"1,000 pipelines created, flushed and dropped: the kept plans of the dropped ones are freed ($plans_before)");
note('session memory after 100 and 1,000 pipelines: ' . $total_before . ' and '
	  . $session->query_safe($total) . ' bytes');
$session->quit;

$node->stop;
done_testing();
