# Metrics where operators look: Debian's prometheus-postgres-exporter with
# tools/queries.yaml, scraped over HTTP.  The endpoint shows, per pipeline,
# the queue depth, the lag, the counters whose rate is events per second,
# the p99 latency and the dead letters, equal to exactonce.pipelines; the
# counters are the same after a restart and after an immediate shutdown.
# The exporter's role has nothing but CONNECT.

use strict;
use warnings;

use HTTP::Tiny;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('metrics');
eo_setup($node, $db);
eo_produce($node, $db, 1, 5000);
# three events that cannot be applied
$node->safe_psql($db,
	"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
	 VALUES ('bad1', 1, 'NaN', 'x', 'x', 'x'), ('bad2', 1, 'NaN', 'x', 'x', 'x'), ('bad3', 1, 'Infinity', 'x', 'x', 'x')");
ok(eo_wait_drained($node, $db), 'the workers drain the events');

# the exporter logs in as a role with nothing but CONNECT
$node->safe_psql($db, 'CREATE ROLE eo_exporter LOGIN');
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $exporter;
sub start_exporter
{
	$exporter = IPC::Run::start(
		[
			'prometheus-postgres-exporter', "--web.listen-address=127.0.0.1:$port",
			'--extend.query-path=tools/queries.yaml', '--disable-default-metrics',
			'--disable-settings-metrics'
		],
		'>', \my $out, '2>', \my $err,
		init => sub {
			$ENV{DATA_SOURCE_NAME} =
			  'host=' . $node->host . ' port=' . $node->port . " dbname=$db user=eo_exporter sslmode=disable";
		});
	return;
}

# scrape until the endpoint has the pipeline's series (bounded)
sub scrape
{
	my $http = HTTP::Tiny->new(timeout => 5);
	for (1 .. $PostgreSQL::Test::Utils::timeout_default * 2)
	{
		my $r = $http->get("http://127.0.0.1:$port/metrics");
		return $r->{content}
		  if $r->{success} && $r->{content} =~ /^exactonce_pipeline_applied\{/m;
		select(undef, undef, undef, 0.5);
	}
	return '';
}

# metric NAME from a scrape, for pipeline trades
sub metric
{
	my ($text, $name) = @_;
	return $1
	  if $text =~ /^exactonce_pipeline_$name\{[^}]*pipeline="trades"[^}]*\} (\S+)$/m;
	return undef;
}

start_exporter();
my $text = scrape();
ok($text ne '', 'the exporter serves metrics with tools/queries.yaml');
my %want = split /\|/, $node->safe_psql($db,
	"SELECT 'ingested|' || ingested || '|applied|' || applied || '|duplicates|' || duplicates
	 || '|stale|' || stale || '|dead_lettered|' || dead_lettered || '|queued|' || queued
	 FROM exactonce.pipelines WHERE name = 'trades'");
for my $name (sort keys %want)
{
	is(metric($text, $name) + 0, $want{$name} + 0, "exactonce_pipeline_$name equals exactonce.pipelines");
}
is(metric($text, 'dead_lettered'), '3', 'the dead letters of the pipeline');
like(metric($text, 'lag_seconds'), qr/^[0-9.e+-]+$/, 'the lag');
cmp_ok(metric($text, 'latency_p99_seconds'), '>', 0, 'the p99 insert-to-aggregate latency');
is(metric($text, 'worker_running'), '1', 'a worker serves the pipeline');
like($text, qr/^# TYPE exactonce_pipeline_applied counter$/m, 'applied is a counter: its rate is events per second');

# queue depth while the pipeline is paused
$node->safe_psql($db, "SELECT exactonce.pause('trades')");
eo_produce($node, $db, 5001, 6000);
my $queued = $node->safe_psql($db, "SELECT queued FROM exactonce.pipelines WHERE name = 'trades'");
cmp_ok($queued, '>', 0, 'events wait in the paused pipeline');
is(metric(scrape(), 'queued') + 0, $queued + 0, 'the queue depth of the paused pipeline');
$node->safe_psql($db, "SELECT exactonce.resume('trades')");
ok(eo_wait_drained($node, $db), 'resumed, the workers drain them');

# the counters survive a restart and an immediate shutdown
my $applied = $node->safe_psql($db, "SELECT applied FROM exactonce.pipelines WHERE name = 'trades'");
$node->restart;
is(metric(scrape(), 'applied') + 0, $applied + 0, 'the counters are the same after a restart');
$node->stop('immediate');
$node->start;
is(metric(scrape(), 'applied') + 0, $applied + 0, 'and after an immediate shutdown');

$exporter->kill_kill;
done_testing();
