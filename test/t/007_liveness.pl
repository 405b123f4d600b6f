# A pipeline keeps flowing whatever other sessions do to another one (hold
# its progress row, keep a transaction open, lock one of its tables), the
# workers shut down at once whatever sessions hold, and a reader that keeps
# a drained queue partition from being truncated does not make them spin.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('liveness');
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('held', ARRAY['d']);
SELECT exactonce.create_pipeline('free', ARRAY['d']);
});

my $n = 0;

# insert $count events of value 1 into a pipeline, new keys each time
sub feed
{
	my ($pipeline, $count) = @_;
	$node->safe_psql($db,
		"INSERT INTO $pipeline.ingest (key, version, value, d) SELECT 'k' || (i + $n), 1, 1, 'x' FROM generate_series(1, $count) i");
	$n += $count;
	return;
}

sub total
{
	my ($pipeline) = @_;
	return $node->safe_psql($db, "SELECT coalesce(sum(total), 0) FROM $pipeline.aggregates WHERE level = 0");
}

sub drained
{
	my ($pipeline, $want) = @_;
	return $node->poll_query_until($db,
		"SELECT coalesce(sum(total), 0) = $want FROM $pipeline.aggregates WHERE level = 0");
}

feed('held', 100);
feed('free', 100);
ok(drained('held', 100) && drained('free', 100), 'both pipelines drain');

# 1. a session left idle in transaction holding held's progress row
my $idle = $node->background_psql($db);
$idle->query_safe('BEGIN');
my $idle_pid = $idle->query_safe('SELECT pg_backend_pid()');
$idle->query_safe('SELECT * FROM held.progress FOR UPDATE');
feed('held', 50);
feed('free', 50);
ok(drained('free', 150), 'idle in transaction on held: free drains');
ok( $node->poll_query_until(
		$db,
		"SELECT worker_state = 'waiting' AND last_error LIKE '%held by process $idle_pid%' FROM exactonce.pipelines WHERE name = 'held'"),
	'held shows as waiting, with the pid that holds it');
is(total('held'), '100', 'held takes nothing meanwhile');
$node->safe_psql($db, 'CREATE ROLE regress_reader; CREATE ROLE regress_stats IN ROLE pg_read_all_stats');
is( $node->safe_psql($db,
		"SET ROLE regress_reader; SELECT last_error FROM exactonce.pipelines WHERE name = 'held'"),
	'<insufficient privilege>', 'another role does not see the error, which can quote event data');
like( $node->safe_psql($db,
		"SET ROLE regress_stats; SELECT last_error FROM exactonce.pipelines WHERE name = 'held'"),
	qr/held by process/, 'a member of pg_read_all_stats does');
$idle->query_safe('COMMIT');
ok(drained('held', 150), 'once that transaction ends, held drains');

# 2. a prepared transaction and an idle transaction hold held; fast
# shutdown still ends at once
$idle->query_safe('BEGIN');
$idle->query_safe('SELECT exactonce.pause(\'free\')');
$node->safe_psql($db,
	"BEGIN; SELECT * FROM held.progress FOR UPDATE; PREPARE TRANSACTION 'holds_held'");
feed('held', 10);
$node->poll_query_until($db,
	"SELECT worker_state = 'waiting' FROM exactonce.pipelines WHERE name = 'held'")
  or die 'held not waiting';
$idle->quit;
my $t0 = time;
$node->command_ok([ 'pg_ctl', '-D', $node->data_dir, '-m', 'fast', '-w', '-t', '5', 'stop' ],
	'fast shutdown ends within 5 s with a prepared and an idle transaction holding a pipeline');
$node->_update_pid(0);
$node->start;
$node->safe_psql($db, "COMMIT PREPARED 'holds_held'");
ok(drained('held', 160), 'after the restart, held drains');

# 3. a reader holds a drained queue partition (it cannot be truncated, so
# the queue cannot rotate): the workers sleep instead of spinning
my $reader = $node->background_psql($db);
$reader->query_safe('BEGIN');
$reader->query_safe('LOCK TABLE held.ingest IN ACCESS SHARE MODE');
feed('held', 10);
feed('free', 10);
ok(drained('free', 160), 'a reader on held: free drains');
my @pids = split /\n/, $node->safe_psql($db,
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'exactonce drain'");
sub cpu_ticks
{
	my $ticks = 0;
	for my $pid (@pids)
	{
		my @f = split / /, slurp_file("/proc/$pid/stat") =~ s/^.*\) //r;
		$ticks += $f[11] + $f[12];
	}
	return $ticks;
}
my $before = cpu_ticks();
sleep 3;
my $used = cpu_ticks() - $before;
cmp_ok($used, '<', 60, "the workers sleep while the partition is held ($used ticks of CPU in 3 s)");
$reader->query_safe('COMMIT');
ok(drained('held', 170), 'once the reader is gone, held drains');

# the same with a long pg_dump: it holds every table it dumps while it
# waits for one that is locked
$node->safe_psql($db, 'CREATE TABLE zzz_last (x int)');
my $locker = $node->background_psql($db);
$locker->query_safe('BEGIN');
$locker->query_safe('LOCK TABLE zzz_last IN ACCESS EXCLUSIVE MODE');
my $dump = IPC::Run::start([ 'pg_dump', '-d', $node->connstr($db), '-f', '/dev/null' ]);
$node->poll_query_until($db,
	"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE 'LOCK TABLE public.zzz_last%' AND wait_event_type = 'Lock'")
  or die 'pg_dump is not waiting';
feed('held', 10);
feed('free', 10);
ok(drained('free', 170), 'a pg_dump in progress: free drains');
$before = cpu_ticks();
sleep 3;
$used = cpu_ticks() - $before;
cmp_ok($used, '<', 60, "the workers sleep while pg_dump holds the queue ($used ticks of CPU in 3 s)");
$locker->query_safe('COMMIT');
$dump->finish;
ok(drained('held', 180), 'once pg_dump is done, held drains');
$locker->quit;
$reader->quit;

# 4. a lock on one of held's tables other than its progress row: the
# workers wait for it at most lock_timeout, then back off held
my $ddl = $node->background_psql($db);
$ddl->query_safe('BEGIN');
$ddl->query_safe('LOCK TABLE held.state IN ACCESS EXCLUSIVE MODE');
feed('held', 5);
feed('free', 5);
ok(drained('free', 175), 'a lock on held.state: free drains');
ok( $node->poll_query_until(
		$db,
		"SELECT worker_state = 'waiting' AND last_error LIKE '%lock timeout%' FROM exactonce.pipelines WHERE name = 'held'"),
	'held waits, after a lock timeout');
$ddl->query_safe('COMMIT');
$ddl->quit;
ok(drained('held', 185), 'once the lock is released, held drains');
ok($node->log_contains(qr/CONTEXT:  exactonce drain of pipeline "held", shard \d/),
	"the workers' errors name the pipeline and shard");

# 5. the workers wake for free's inserts; held, drained, has nothing to do:
# its steps read and lock nothing (a row lock would take a transaction id
# and a commit to flush, for nothing, at every wake-up)
$node->poll_query_until($db,
	"SELECT drain_rotation = rotation AND NOT EXISTS (SELECT FROM held.ingest) FROM held.progress")
  or die 'held does not settle';
my $next_xid = $node->safe_psql($db, 'SELECT pg_snapshot_xmax(pg_current_snapshot())');
for my $i (1 .. 10)
{
	feed('free', 1);
	drained('free', 175 + $i) or die 'free does not drain';
}
is( $node->safe_psql($db,
		"SELECT count(*) FROM (SELECT xmax FROM held.progress UNION ALL SELECT xmax FROM held.shard) r"
		  . " WHERE xmax::text::bigint >= $next_xid"),
	'0',
	'ten wake-ups for another pipeline lock no row of a drained one');

# code an owner plants on the tables the workers write runs as the owner
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE ROLE regress_planter;
GRANT CREATE ON DATABASE postgres TO regress_planter;
SET ROLE regress_planter;
SELECT exactonce.create_pipeline('planted', ARRAY['d']);
CREATE TABLE planted.ran_as (who name, what text);
CREATE FUNCTION planted.on_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO planted.ran_as VALUES (current_user, TG_TABLE_NAME);
	BEGIN
		ALTER ROLE regress_planter SUPERUSER;
	EXCEPTION WHEN OTHERS THEN
		NULL;
	END;
	RETURN NULL;
END $$;
CREATE TRIGGER planted AFTER INSERT OR UPDATE ON planted.aggregates FOR EACH ROW EXECUTE FUNCTION planted.on_row();
CREATE TRIGGER planted AFTER INSERT OR UPDATE ON planted.ledger FOR EACH ROW EXECUTE FUNCTION planted.on_row();
INSERT INTO planted.ingest (key, version, value, d) SELECT 'k' || i, 1, 1, 'x' FROM generate_series(1, 100) i;
});
ok(drained('planted', 100), 'the workers drain a pipeline whose owner planted triggers');
is($node->safe_psql($db, 'SELECT DISTINCT who FROM planted.ran_as'), 'regress_planter',
	'the triggers ran in the workers as the owner');
is($node->safe_psql($db, "SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_planter'"), 'f',
	'and gained nothing');

$node->stop;
done_testing();
