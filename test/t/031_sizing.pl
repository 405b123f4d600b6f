# Defaults sized from the machine: exactonce.workers = -1 (the default)
# starts one drain worker per CPU core, at most half of
# max_worker_processes; a reload changes the number without a restart (the
# launcher stops the workers, whose open transactions roll back, and starts
# the new number); a pipeline created without shards gets one per worker of
# its database, between 2 and 16; max_worker_processes left at its default
# is raised to two per core.  Every event is applied once through the
# changes.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('sizing', conf => "exactonce.workers = -1\nmax_worker_processes = 12\n");

sub sql { return $node->safe_psql($db, shift); }

my $drainers = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'exactonce drain'};

is(sql('SHOW max_worker_processes'), '12', 'a max_worker_processes that is set is kept');
is(sql(q{SELECT boot_val FROM pg_settings WHERE name = 'exactonce.workers'}),
	'-1', 'exactonce.workers defaults to -1, sized from the machine');
my $cores = `nproc` + 0;
$cores = 2 if $cores < 1;
my $sized = $cores < 6 ? $cores : 6;    # half of max_worker_processes
ok($node->poll_query_until($db, "SELECT ($drainers) = $sized"),
	"one drain worker per core ($cores), at most half of max_worker_processes: $sized");
like(slurp_file($node->logfile), qr/exactonce starts $sized drain workers for each of 1 databases/,
	'the launcher says how many it starts');

eo_setup($node, $db);
my $shards = $sized < 2 ? 2 : $sized;
is(sql(q{SELECT shards FROM exactonce.pipelines WHERE name = 'trades'}),
	$shards, "a pipeline created without shards has one per worker: $shards");
sql(q{SELECT exactonce.create_pipeline('two', ARRAY['d'], shards => 2)});
is(sql(q{SELECT shards FROM exactonce.pipelines WHERE name = 'two'}),
	'2', 'one created with shards has those');

my $started = sql('SELECT pg_postmaster_start_time()');
eo_produce($node, $db, 1, 3000);

# while events queue, fewer workers, then more, by reload alone
my $next = 3001;
for my $workers (3, 1, 4)
{
	my $log_offset = -s $node->logfile;
	my $before = sql(
		q{SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE backend_type = 'exactonce drain'});
	eo_alter_system($node, 'exactonce.workers' => $workers);
	ok( $node->poll_query_until(
			$db, qq{SELECT ($drainers) = $workers AND NOT EXISTS
			(SELECT FROM pg_stat_activity WHERE backend_type = 'exactonce drain' AND pid IN ($before))}
		),
		"exactonce.workers = $workers on reload: the workers are replaced by $workers");
	like(slurp_file($node->logfile, $log_offset),
		qr/exactonce starts $workers drain workers/, '... as the log says');
	eo_produce($node, $db, $next, $next + 1999);
	$next += 2000;
}
my (undef, undef, $too_many) = $node->psql($db, 'ALTER SYSTEM SET exactonce.workers = 65');
like($too_many, qr/65 is outside the valid range for parameter "exactonce.workers" \(-1 \.\. 64\)/,
	'at most 64 drain workers');
ok(eo_wait_drained($node, $db), 'drained through the changes');
eo_check($node, $db, 'workers changed on reload');
is(sql('SELECT pg_postmaster_start_time()'), $started, 'the server was never restarted');

# where max_worker_processes holds the workers back, the log says which
# setting to raise
SKIP:
{
	skip 'one core: no worker is held back', 1 if $cores < 2;
	sql(q{ALTER SYSTEM RESET exactonce.workers});
	$node->append_conf('postgresql.conf', "max_worker_processes = 2\n");
	my $log_offset = -s $node->logfile;
	$node->restart;
	ok( $node->wait_for_log(
			qr/exactonce starts 1 drain workers for each of 1 databases, on $cores cores.*\n.*HINT:  Raise max_worker_processes to @{[ 2 * $cores ]}/,
			$log_offset),
		'held back by max_worker_processes, the launcher says which setting to raise');
}

$node->stop;

# left at PostgreSQL's default (8), max_worker_processes is raised to two
# per core, so that -1 gives every core a worker; on four cores or fewer 8
# is room enough and stays
my $plain = eo_node('room', conf => "exactonce.workers = -1\n");
my $room = 2 * $cores > 8 ? 2 * $cores : 8;
is($plain->safe_psql($db, 'SHOW max_worker_processes'),
	$room, "max_worker_processes left unset: room for a worker per core ($room)");
is($plain->safe_psql($db, q{SELECT source FROM pg_settings WHERE name = 'max_worker_processes'}),
	'default', '... as a computed default, which a setting in the file overrides');
my $workers = $cores < $room / 2 ? $cores : $room / 2;
ok($plain->poll_query_until($db, "SELECT ($drainers) = $workers"), "$workers drain workers");
if ($room > 8)
{
	like(slurp_file($plain->logfile), qr/exactonce raises max_worker_processes from 8 to $room/,
		'the log says it was raised');
}
else
{
	unlike(slurp_file($plain->logfile), qr/exactonce raises max_worker_processes/,
		'not raised where 8 is room enough');
}
$plain->stop;
done_testing();
