# Physical copies: a base backup of a pipeline half way through a queue
# partition, started in another data directory; a point-in-time recovery
# to a moment inside a load; a streaming standby promoted in the middle of
# a load after the primary was stopped with -m immediate.  Each copy
# drains, with its own workers, every event it holds exactly once.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $primary = eo_node('primary', init => { allows_streaming => 1, has_archiving => 1 });
eo_setup($primary, $db);
eo_produce($primary, $db, 1, 5000);
ok(eo_wait_drained($primary, $db), 'a first load drained');
$primary->backup('before_load');

# base backup half way through a partition, started elsewhere
ok(eo_half_drain($primary, $db, 5001, 35000), 'half way through a partition');
$primary->backup('half');
my $copy = PostgreSQL::Test::Cluster->new('copy');
$copy->init_from_backup($primary, 'half');
$copy->start;
# the copy's workers leave the pipeline paused, as it was when copied
my $taken = $copy->safe_psql($db, 'SELECT sum(drain_count) FROM trades.shard');
sleep 1;
is( $copy->safe_psql(
		$db, "SELECT paused::text || ' ' || (SELECT sum(drain_count) FROM trades.shard) FROM exactonce.pipelines WHERE name = 'trades'"),
	"true $taken", 'base backup: the copy\'s pipeline stays paused, and nothing more is taken');
eo_resume($copy, $db);
eo_produce($copy, $db, 35001, 40000);
ok(eo_wait_drained($copy, $db), 'base backup: its workers drain');
eo_check($copy, $db, 'base backup');
$copy->stop;

# a load in ten transactions with a recovery target after the fifth
eo_resume($primary, $db);
my $target;
for my $i (0 .. 9)
{
	my $from = 40001 + $i * 3000;
	eo_produce($primary, $db, $from, $from + 2999);
	if ($i == 4)
	{
		$target = $primary->safe_psql($db, 'SELECT clock_timestamp()');
		# the next commit is surely later
		$primary->safe_psql($db, 'SELECT pg_sleep(0.01)');
	}
}
ok(eo_wait_drained($primary, $db), 'the primary drains');
eo_check($primary, $db, 'primary');
# the segment pg_switch_wal() completes: the current position may already be
# in the next one, which the workers' own writes keep from being archived
my $archived = $primary->safe_psql($db, 'SELECT pg_walfile_name(pg_switch_wal())');
$primary->poll_query_until($db,
	"SELECT last_archived_wal >= '$archived' FROM pg_stat_archiver")
  or die 'WAL not archived';

my $pitr = PostgreSQL::Test::Cluster->new('pitr');
$pitr->init_from_backup($primary, 'before_load', has_restoring => 1);
$pitr->append_conf('postgresql.conf',
	"recovery_target_time = '$target'\nrecovery_target_action = 'promote'\n");
$pitr->start;
$pitr->poll_query_until($db, 'SELECT NOT pg_is_in_recovery()')
  or die 'recovery did not end';
is($pitr->safe_psql($db, 'SELECT max(version) FROM truth'),
	'55000', 'point in time: the database holds the events committed before the target');
eo_resume($pitr, $db);    # paused by the half drain above, as of then
ok(eo_wait_drained($pitr, $db), 'point in time: its workers resume');
eo_check($pitr, $db, 'point-in-time recovery');
$pitr->stop;

# a standby promoted during a load, the primary gone at once
$primary->backup('for_standby');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'for_standby', has_streaming => 1);
$standby->start;
$primary->safe_psql($db,
	"ALTER SYSTEM SET exactonce.batch_size = 200; SELECT pg_reload_conf()");
eo_produce($primary, $db, 70001, 100000);
$primary->wait_for_catchup('standby');
eo_produce($primary, $db, 100001, 110000);
$primary->stop('immediate');
$standby->promote;
$standby->safe_psql($db, 'ALTER SYSTEM RESET exactonce.batch_size; SELECT pg_reload_conf()');
eo_produce($standby, $db, 110001, 115000);
ok(eo_wait_drained($standby, $db), 'promoted standby: its workers take over the drain');
eo_check($standby, $db, 'promoted standby');
$standby->stop;

done_testing();
