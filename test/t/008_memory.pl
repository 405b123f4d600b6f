# Memory is bounded by the batch, never by the backlog: flush() of 2M queued
# events over 500k distinct cells stays under 256 MB resident (VmHWM, with
# the default 128 MB of shared buffers and batch_memory at 64MB), and
# creating and dropping 1,000 pipelines keeps a session's and the workers'
# memory flat.

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
# the bound below is for a budget of 64MB (the default is 128MB); what is
# tested is that the backlog does not move it
$session->query_safe("SET exactonce.batch_memory = '64MB'");
is($session->query_safe("SELECT exactonce.flush('big')"), '2000000', 'flush takes 2M events');
my $hwm = proc_kb($pid, 'VmHWM');
cmp_ok($hwm, '<', 256 * 1024, "the flushing backend's peak resident memory stays under 256 MB ($hwm kB)");
is( $node->safe_psql($db,
		"SELECT count(*) FILTER (WHERE level = 3) || ' ' || sum(total) FILTER (WHERE level = 0) FROM big.aggregates"),
	'500000 1000000', 'over 500k cells, exactly (the second version of each key replaced the first)');
$session->quit;

# 1,000 pipelines created, fed, flushed and dropped in one session while
# the workers run: the plans kept for them go with them, and neither the
# session nor the workers grow
my @workers = split /\n/, $node->safe_psql($db,
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'exactonce drain' ORDER BY pid");
my $cycle = q{
SELECT exactonce.create_pipeline('cycle', ARRAY['d']);
INSERT INTO cycle.ingest (key, version, value, d) VALUES ('k', 1, 1, 'x');
SELECT exactonce.flush('cycle');
SELECT pg_sleep(0.005);
SELECT exactonce.drop_pipeline('cycle');
};
$session = $node->background_psql($db);
$session->query_safe('SET client_min_messages = warning');
my $plans = q{SELECT count(*) FROM pg_backend_memory_contexts WHERE name = 'CachedPlanSource'};
my $total = 'SELECT sum(total_bytes) FROM pg_backend_memory_contexts';
$session->query_safe($cycle) for 1 .. 100;
my $plans_before = $session->query_safe($plans);
my $total_before = $session->query_safe($total);
my @workers_before = map { proc_kb($_, 'RssAnon') } @workers;
$session->query_safe($cycle) for 1 .. 900;
my $plans_after = $session->query_safe($plans);
# (the plans of the last pipeline dropped go at the next sweep: a few either way)
cmp_ok($plans_after, '<', $plans_before + 20,
	"1,000 pipelines created, flushed and dropped: the plans kept for them are freed ($plans_before, then $plans_after plans)");
my $total_after = $session->query_safe($total);
cmp_ok($total_after - $total_before, '<', 1024 * 1024,
	"and the session's memory stays flat ($total_before -> $total_after bytes after 100 and 1,000)");
for my $i (0 .. $#workers)
{
	my $after = proc_kb($workers[$i], 'RssAnon');
	cmp_ok($after - $workers_before[$i], '<', 1024,
		"and drain worker ${i}'s ($workers_before[$i] -> $after kB)");
}
$session->quit;

$node->stop;
done_testing();
