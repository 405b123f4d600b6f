# Moving keys while producers and readers go on, on three real clusters: a
# coordinator and two nodes.  The old node parks the range's events while
# the move is under way, so the coordinator's producers and readers are
# held only by its switch.
#
# 1. A move held half way (a prepared transaction on the new node holds
#    the pipeline there): producers insert through the coordinator and
#    readers read its aggregates meanwhile, the old node parks the
#    range's events and still takes the others; once let go, the move
#    ends, the parked events reach the new node, and the aggregates equal
#    the oracle.
# 2. A move that cannot take the coordinator's lock for its switch (a
#    reader's transaction holds the aggregates) gives up after
#    exactonce.move_lock_timeout: both nodes roll back, the parked events
#    go back into the old node's queue, nothing is left half done, and the
#    aggregates equal the oracle; the same move made afterwards succeeds.
# 3. A move whose new node refuses it (lock timeout there) is undone the
#    same way.
# 4. A move cut off after both nodes committed (the coordinator's
#    connection killed at the switch is not reproducible, so the nodes'
#    halves are run as move_keys() would) is finished by move_keys()
#    again: the coordinator's switch and the parked events.
# 5. The old node stopped with -m immediate in the middle of a move: the
#    move is cut off, the events parked survive the crash, and move_keys()
#    again makes the move with them.
# 6. The new node stops reading the parked events the switch copies to it
#    (its COPY waits on a lock): the copy waits on the coordinator's latch,
#    not in libpq, so statement_timeout ends the move, cancelling the
#    statements on both nodes, and move_keys() again finishes it.
# 7. The same before the nodes prepared (the parked events that go with
#    the keys), the new node's pipeline held meanwhile: the move stands
#    on neither node and is given up.
# 8. Keys moved back to the node that gave them away while a producer's
#    transaction through the coordinator has written to both nodes: the
#    node takes the range back by the move's row of key_move, without a
#    lock on its queue, so the producer goes on writing to it while the
#    move is prepared there, and the switch waits only for the producer's
#    commit (before 1.26, the node's refusal was dropped with its queue's
#    ACCESS EXCLUSIVE lock: the move waited on the producer there, or the
#    producer on the prepared move while the switch waited on it, until
#    exactonce.move_lock_timeout gave the move up).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use ExactonceTest;

my $db = 'postgres';
my $coord = eo_node('coordinator', preload => 0);
my @nodes = (eo_node('node1'), eo_node('node2'));
$_->safe_psql($db, 'CREATE EXTENSION exactonce') for @nodes;
my $user = $coord->safe_psql($db, 'SELECT current_user');
$coord->safe_psql($db, 'CREATE EXTENSION exactonce; CREATE EXTENSION postgres_fdw');
for my $i (0, 1)
{
	my $n = $nodes[$i];
	my $server = 'node' . ($i + 1);
	$coord->safe_psql($db,
		"CREATE SERVER $server FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '"
		  . $n->host . "', port '" . $n->port . "', dbname '$db');
		 CREATE USER MAPPING FOR CURRENT_USER SERVER $server OPTIONS (user '$user')");
}
$coord->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.create_distributed_pipeline('trades', ARRAY['risk_type', 'region', 'trade_desk'],
	ARRAY['node1', 'node2']::name[]);
CREATE TABLE truth (key text, version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, PRIMARY KEY (key, version));
CREATE TABLE sent (n bigint NOT NULL);
});
my $round = 0;

# produce(n): n more rounds of 1,000 events through the coordinator
sub produce
{
	my ($n) = @_;
	for (1 .. $n)
	{
		$round++;
		$coord->safe_psql($db, ExactonceTest::produce_sql(($round - 1) * 1000 + 1, $round * 1000));
	}
	return;
}

# exact(label): once every node has applied everything, the coordinator's
# aggregates equal the oracle, each key lives on the node of its range,
# and no node parks anything or holds a prepared move
sub exact
{
	my ($label) = @_;
	$coord->safe_psql($db, "SELECT exactonce.flush('trades')");
	is(eo_mismatches($coord, $db), '0', "$label: the coordinator's aggregates equal the oracle");
	my @left;
	for my $n (@nodes)
	{
		push @left,
		  $n->safe_psql($db,
			    "SELECT (SELECT count(*) FROM pg_prepared_xacts) || '/' || (SELECT count(*) FROM pg_class c"
			  . " JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'trades' AND c.relname LIKE 'moving%')");
	}
	is(join(',', @left), '0/0,0/0', "$label: no node holds a prepared move or parked events");
	return;
}

# the server the coordinator's ingest sends keys (modulus, remainder) to
sub server_of
{
	my ($m, $r) = @_;
	return $coord->safe_psql(
		$db, qq{
SELECT o.option_value FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	JOIN pg_foreign_table f ON f.ftrelid = c.oid, pg_options_to_table(f.ftoptions) o
WHERE i.inhparent = 'trades.ingest'::regclass AND o.option_name = 'server'
	AND pg_get_expr(c.relpartbound, c.oid) = 'FOR VALUES WITH (modulus $m, remainder $r)'});
}

# start_move(lock timeout, modulus, remainder, server): move_keys() at the
# coordinator in the background; its output and errors in $mout and $merr
my ($mout, $merr);
sub start_move
{
	my ($timeout, $m, $r, $server) = @_;
	($mout, $merr) = ('', '');
	return IPC::Run::start(
		[
			'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $coord->connstr($db),
			'-c', "SET exactonce.move_lock_timeout = $timeout",
			'-c', "SELECT exactonce.move_keys('trades', $m, $r, '$server')"
		],
		'>', \$mout, '2>', \$merr);
}

produce(4);
exact('before any move');

# 1. a move held half way: a prepared transaction on node1 (the new node)
# holds the pipeline there, so move_keys_in() waits
$nodes[0]->safe_psql($db, "BEGIN; SELECT * FROM trades.progress FOR UPDATE; PREPARE TRANSACTION 'hold'");
my $move = start_move(0, 4, 1, 'node1');
ok( $nodes[0]->poll_query_until(
		$db,
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%move_keys_in%' AND wait_event_type = 'Lock'"),
	'the move waits on the new node');
is($nodes[1]->safe_psql($db, "SELECT to_regclass('trades.moving_4_1') IS NOT NULL"),
	't', 'the old node parks the range\'s events meanwhile');
produce(2);
pass('producers insert through the coordinator while the keys move');
is($coord->safe_psql($db, 'SELECT count(*) > 0 FROM trades.aggregates'),
	't', 'readers read the coordinator\'s aggregates while the keys move');
$move->pump_nb;
ok($move->pumpable, 'the move is still under way');
my $parked = $nodes[1]->safe_psql($db, 'SELECT count(*) FROM trades.moving_4_1');
cmp_ok($parked, '>', 0, "the old node parked the events of the moving keys ($parked)");
is( $nodes[1]->safe_psql(
		$db, 'SELECT count(*) FROM trades.moving_4_1 WHERE exactonce.key_bucket(key, 4) <> 1'),
	'0', 'and only those');
my $other = $coord->safe_psql(
	$db, q{
SELECT key FROM (SELECT 'other' || i AS key FROM generate_series(1, 100) i) k
WHERE exactonce.key_bucket(key, 4) = 3 LIMIT 1});
$nodes[1]->safe_psql($db,
	"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk) VALUES ('$other', 1, 5, 'Delta', 'AMER', 'FXSpot')");
$coord->safe_psql($db,
	"INSERT INTO truth VALUES ('$other', 1, 5, 'Delta', 'AMER', 'FXSpot', false); INSERT INTO sent VALUES (1)");
pass('the old node\'s queue takes the events of its other keys');
$nodes[0]->safe_psql($db, "ROLLBACK PREPARED 'hold'");
ok($move->finish, 'let go, the move ends') or diag($merr);
($mout) = $mout =~ /(\d+)\s*$/;
cmp_ok($mout, '>', 0, "and moves the keys ($mout)");
is(server_of(4, 1), 'node1', 'the coordinator sends the range to the new node');
is($nodes[1]->safe_psql($db, 'SELECT count(*) FROM trades.state WHERE exactonce.key_bucket(key, 4) = 1'),
	'0', 'the old node keeps no key of the range');
produce(1);
exact('after a move held half way');

# 2. a reader's transaction holds the coordinator's aggregates: the switch
# waits for it exactonce.move_lock_timeout, then the move gives up
my $reader = $coord->background_psql($db);
$reader->query_safe('BEGIN');
$reader->query_safe('SELECT count(*) FROM trades.aggregates');
$move = start_move("'3s'", 4, 3, 'node1');
ok( $nodes[1]->poll_query_until(
		$db, "SELECT to_regclass('trades.moving_4_3') IS NOT NULL"),
	'the move starts: the old node parks');
produce(1);
$move->finish;
like($merr, qr/lock timeout/, 'the move gives up when it cannot switch within exactonce.move_lock_timeout');
$reader->query_safe('COMMIT');
$reader->quit;
is(server_of(4, 3), 'node2', 'the coordinator still sends the range to the old node');
is( $nodes[0]->safe_psql(
		$db, 'SELECT count(*) FROM trades.state WHERE exactonce.key_bucket(key, 4) = 3'),
	'0', 'the new node got none of its keys');
is( $nodes[1]->safe_psql(
		$db, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'trades.ingest'::regclass AND tgname = 'exactonce_moved_4_3'"),
	'0', 'the old node takes the range\'s events again');
exact('after a move given up at the switch');
my $moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 4, 3, 'node1')");
cmp_ok($moved, '>', 0, "the same move made afterwards succeeds ($moved keys)");
exact('after it');

# 3. the new node refuses (its pipeline held past the lock timeout): undone
$nodes[1]->safe_psql($db, "BEGIN; SELECT * FROM trades.progress FOR UPDATE; PREPARE TRANSACTION 'hold'");
$move = start_move("'3s'", 4, 0, 'node2');
ok($nodes[0]->poll_query_until($db, "SELECT to_regclass('trades.moving_4_0') IS NOT NULL"),
	'another move starts');
produce(1);
$move->finish;
like($merr, qr/lock timeout/, 'the move gives up when the new node holds its pipeline past the timeout');
$nodes[1]->safe_psql($db, "ROLLBACK PREPARED 'hold'");
is(server_of(2, 0), 'node1', 'the range stays where it was');
exact('after a move the new node refused');

# 4. cut off after both nodes committed: the nodes' halves as move_keys()
# runs them, with events parked on the way; move_keys() again switches
# the coordinator and sends the parked events on
# halves_committed(modulus, remainder, meanwhile): a move of the keys from
# node1 to node2 as move_keys() runs it on the nodes, both halves prepared
# and committed, the coordinator left out; meanwhile runs once node1 parks
sub halves_committed
{
	my ($m, $r, $meanwhile) = @_;
	my $gid = "exactonce_move:trades:$m:$r:1";
	$nodes[0]->safe_psql($db,
		"SELECT exactonce.move_keys_park('trades', $m, $r, 'node2'); SELECT exactonce.flush('trades')");
	$meanwhile->() if $meanwhile;
	my ($state, $dead, $horizon) = split /\n/, $nodes[0]->safe_psql(
		$db, qq{
BEGIN;
SELECT replace(state, E'\\n', '') || E'\\n' || replace(coalesce(dead_letters, ''), E'\\n', '')
	|| E'\\n' || coalesce(horizon::text, '')
FROM exactonce.move_keys_out('trades', $m, $r, 'node2', '$gid');
PREPARE TRANSACTION '$gid';
}), -1;
	$nodes[1]->safe_psql(
		$db, qq{
BEGIN;
SELECT exactonce.move_keys_in('trades', $m, $r, 'node1', '$gid', \$m\$$state\$m\$, NULL,
	nullif(\$m\$$dead\$m\$, ''), nullif('$horizon', '')::bigint);
PREPARE TRANSACTION '$gid';
});
	$nodes[1]->safe_psql($db, "COMMIT PREPARED '$gid'");
	$nodes[0]->safe_psql($db, "COMMIT PREPARED '$gid'");
	return;
}

halves_committed(4, 2, sub { produce(1) });
produce(1);
$parked = $nodes[0]->safe_psql($db, 'SELECT count(*) FROM trades.moving_4_2');
cmp_ok($parked, '>', 0, "cut off after both nodes committed: the old node still parks the range's events ($parked)");
is($coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 4, 2, 'node2')"),
	'0', 'move_keys() again finishes the move');
is(server_of(4, 2), 'node2', 'the coordinator sends the range to the new node');
exact('after a move finished by move_keys() again');

# 5. the old node killed (-m immediate) in the middle of a move, its
# events parked: the move is cut off, the parked events survive the crash,
# and move_keys() again makes the move, those events with it
$nodes[1]->safe_psql($db, "BEGIN; SELECT * FROM trades.progress FOR UPDATE; PREPARE TRANSACTION 'hold'");
$move = start_move(0, 8, 0, 'node2');
ok( $nodes[1]->poll_query_until(
		$db,
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%move_keys_in%' AND wait_event_type = 'Lock'"),
	'a move waits on the new node');
produce(1);
$parked = $nodes[0]->safe_psql($db, 'SELECT count(*) FROM trades.moving_8_0');
cmp_ok($parked, '>', 0, "the old node parks the range's events ($parked)");
$nodes[0]->stop('immediate');
$nodes[1]->safe_psql($db, "ROLLBACK PREPARED 'hold'");
$move->finish;
like($merr, qr/is cut off half way: on server "node1"/, 'the old node killed: the move is cut off half way, naming it');
$nodes[0]->start;
is($nodes[0]->safe_psql($db, 'SELECT count(*) FROM trades.moving_8_0'),
	$parked, 'the parked events survive the crash');
produce(1);
$moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 8, 0, 'node2')");
cmp_ok($moved, '>', 0, "move_keys() again makes the move ($moved keys)");
is(server_of(8, 0), 'node2', 'the coordinator sends the range to the new node');
exact('after the old node was killed in the middle of a move');

# the events of keys (modulus, remainder) to park: about 30,000 per bucket
# of 8, each its key's first version; and the first of them in order
sub parked_events
{
	my ($prefix, $m, $r) = @_;
	my $events = qq{
SELECT key, 1::bigint AS version, (i % 1000) / 10.0 AS value,
	(ARRAY['Delta', 'Vega', 'Gamma'])[1 + i % 3] AS risk_type, 'EMEA' AS region,
	'Rates' AS trade_desk, false AS deleted
FROM (SELECT '$prefix' || i AS key, i FROM generate_series(1, 240000) i) k
WHERE exactonce.key_bucket(key, $m) = $r};
	return ($events, $coord->safe_psql($db, "SELECT key FROM ($events) e ORDER BY value, key LIMIT 1"));
}

# send_direct(node, events, first): the events inserted into a node's queue
# directly, the first alone before the others, and into the oracle
sub send_direct
{
	my ($node, $events, $first) = @_;
	for my $sql ("$events AND key = '$first'", "$events AND key <> '$first'")
	{
		$node->safe_psql($db,
			"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted) $sql");
		$coord->safe_psql($db, "INSERT INTO truth $sql; INSERT INTO sent SELECT count(*) FROM ($sql) e");
	}
	return;
}

# stall(node, key): a check on the node's queue that waits, at the key, for
# an advisory lock, taken by the session returned; unstall(node, session)
# takes the check away
sub stall
{
	my ($node, $key) = @_;
	$node->safe_psql(
		$db, qq{
CREATE OR REPLACE FUNCTION public.stall(k text) RETURNS boolean LANGUAGE sql
	AS \$\$ SELECT CASE WHEN k = '$key' THEN (SELECT true FROM pg_advisory_xact_lock_shared(64)) ELSE true END \$\$;
ALTER TABLE trades.ingest ADD CONSTRAINT stall CHECK (public.stall(key)) NOT VALID;
});
	my $locker = $node->background_psql($db);
	$locker->query_safe('SELECT pg_advisory_lock(64)');
	return $locker;
}

sub unstall
{
	my ($node, $locker) = @_;
	$locker->quit;
	$node->safe_psql($db, 'ALTER TABLE trades.ingest DROP CONSTRAINT stall; DROP FUNCTION public.stall(text)');
	return;
}

# the copy into a node's queue that waits on the stall
my $stalled = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY trades.ingest%' AND wait_event = 'advisory'";

# start_timed_move(modulus, remainder, server): move_keys() in the
# background with a statement_timeout and no lock timeout
sub start_timed_move
{
	my ($m, $r, $server) = @_;
	($mout, $merr) = ('', '');
	return IPC::Run::start(
		[
			'psql', '-X', '-At', '-d', $coord->connstr($db),
			'-c', "SET statement_timeout = '20s'", '-c', 'SET exactonce.move_lock_timeout = 0',
			'-c', "SELECT exactonce.move_keys('trades', $m, $r, '$server')"
		],
		'>', \$mout, '2>', \$merr, IPC::Run::timeout(90));
}

# finished(move, locker): whether the move ended by itself (if not, the
# stall is let go and the move killed)
sub finished
{
	my ($mv, $locker) = @_;
	return 1 if eval { $mv->finish; 1 };
	$locker->query_safe('SELECT pg_advisory_unlock(64)');
	$mv->kill_kill;
	return 0;
}

# 6. both halves of a move of (8, 4) committed, as in 4, and 30,000 events
# parked after; node2's queue takes none of them while a lock is held (a
# check on it waits for the lock at the first parked key, with no lock
# timeout), so the switch's COPY stops being read once the sockets'
# buffers are full
halves_committed(8, 4);
my ($events, $first) = parked_events('parked', 8, 4);
send_direct($nodes[0], $events, $first);
$parked = $nodes[0]->safe_psql($db, 'SELECT count(*) FROM trades.moving_8_4');
cmp_ok($parked, '>', 25000, "events parked after both halves committed ($parked)");
my $locker = stall($nodes[1], $first);
$move = start_timed_move(8, 4, 'node2');
ok($nodes[1]->poll_query_until($db, $stalled, 1),
	'the switch copies the parked events to node2, which stops taking them');
ok(finished($move, $locker), "statement_timeout ends the switch's copy while node2 takes nothing");
like($merr, qr/is cut off half way: .*canceling statement due to statement timeout/,
	'the move is cut off half way by the timeout, saying so');
ok($nodes[1]->poll_query_until($db, $stalled, 0), 'and the copy on node2 is cancelled, though node2 still holds the lock');
is($nodes[0]->safe_psql($db, 'SELECT count(*) FROM trades.moving_8_4'),
	$parked, 'node1 keeps the parked events');
unstall($nodes[1], $locker);
is($coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 8, 4, 'node2')"),
	'0', 'move_keys() again finishes the move');
is(server_of(8, 4), 'node2', 'the coordinator sends the range to the new node');
exact('after a switch whose copy the new node stopped taking');

# 7. the same stop before the nodes prepared: the events parked while the
# new node held the move go with the keys, and the new node stops taking
# them; statement_timeout ends the move, which stands on neither node and
# is given up (the old node's COPY out read to its end), the parked events
# back in the old node's queue.  Keys (4, 2) go back from node2 to node1,
# which gave them.
($events, $first) = parked_events('held', 4, 2);
$locker = stall($nodes[0], $first);
$nodes[0]->safe_psql($db, "BEGIN; SELECT * FROM trades.progress FOR UPDATE; PREPARE TRANSACTION 'hold'");
$move = start_timed_move(4, 2, 'node1');
ok( $nodes[0]->poll_query_until(
		$db,
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%move_keys_in%' AND wait_event_type = 'Lock'"),
	'a move of (4, 2) back to node1 waits there');
send_direct($nodes[1], $events, $first);
$parked = $nodes[1]->safe_psql($db, 'SELECT count(*) FROM trades.moving_4_2');
cmp_ok($parked, '>', 25000, "node2 parks the events sent meanwhile ($parked)");
$nodes[0]->safe_psql($db, "ROLLBACK PREPARED 'hold'");
ok($nodes[0]->poll_query_until($db, $stalled, 1),
	'the parked events go with the keys to node1, which stops taking them');
ok(finished($move, $locker), 'statement_timeout ends the move while node1 takes nothing');
like($merr, qr/is given up: canceling statement due to statement timeout/,
	'the move is given up: it stood on neither node');
ok($nodes[0]->poll_query_until($db, $stalled, 0), 'the copy on node1 is cancelled');
is( $nodes[1]->safe_psql($db, "SELECT to_regclass('trades.moving_4_2') IS NULL") . ' '
	  . $nodes[0]->safe_psql($db, 'SELECT count(*) FROM trades.state WHERE exactonce.key_bucket(key, 4) = 2'),
	't 0', 'node2 parks nothing any more, node1 got none of the keys');
unstall($nodes[0], $locker);
is(server_of(4, 2), 'node2', 'the coordinator still sends the range to node2');
exact('after a move given up while the new node took none of its parked events');
$moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 4, 2, 'node1')");
cmp_ok($moved, '>', 0, "the same move made afterwards succeeds ($moved keys)");
exact('after it');

# 8. keys (4, 2), on node S (node1) since 7, go back to node T, which
# gave them away in 7, then come back to S while a producer's transaction
# is open: S's pipeline is held (a prepared transaction) so that the
# move's half there waits until the producer has written to both nodes
my $holder = $coord->safe_psql(
	$db, q{
SELECT o.option_value FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	JOIN pg_foreign_table f ON f.ftrelid = c.oid, pg_options_to_table(f.ftoptions) o,
	regexp_match(pg_get_expr(c.relpartbound, c.oid), 'modulus (\d+), remainder (\d+)') b
WHERE i.inhparent = 'trades.ingest'::regclass AND o.option_name = 'server'
	AND 4 % b[1]::int = 0 AND 2 % b[1]::int = b[2]::int});
my ($s, $t) = $holder eq 'node1' ? (0, 1) : (1, 0);
my ($sname, $tname) = ("node" . ($s + 1), "node" . ($t + 1));
$moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 4, 2, '$tname')");
cmp_ok($moved, '>', 0, "keys (4, 2) go back from $sname to $tname ($moved keys)");
is( $nodes[$s]->safe_psql(
		$db, "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
		  . " WHERE conrelid = 'trades.ingest'::regclass AND conname = 'exactonce_moved_4_2'"),
	"CHECK (exactonce.key_stays(key, 'trades'::name, 4, 2)) NOT VALID",
	"$sname refuses them with a check of key_move");
# as a settle that found the queue busy leaves it, S refuses them with
# its trigger too, which would keep COPY into its queue row by row
$nodes[$s]->safe_psql($db,
	"CREATE TRIGGER exactonce_moved_4_2 BEFORE INSERT ON trades.ingest FOR EACH ROW"
	  . " EXECUTE FUNCTION exactonce.refuse_moved_key('4', '2', '$tname')");
$nodes[$s]->safe_psql($db, "BEGIN; SELECT * FROM trades.progress FOR UPDATE; PREPARE TRANSACTION 'hold'");
$move = start_move(10000, 4, 2, $sname);
ok( $nodes[$s]->poll_query_until(
		$db,
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%move_keys_in%' AND wait_event_type = 'Lock'"),
	"the move back waits on ${sname}'s held pipeline");

# open_round(session): one more round of events written in the session's
# open transaction, to both nodes, within 5 s
sub open_round
{
	my ($session) = @_;
	$round++;
	my ($from, $to) = (($round - 1) * 1000 + 1, $round * 1000);
	$session->query_safe("SET LOCAL statement_timeout = '5s'");
	$session->query_safe('INSERT INTO truth ' . ExactonceTest::events_sql($from, $to));
	$session->query_safe(
		"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted)"
		  . " SELECT key, version, value, risk_type, region, trade_desk, deleted FROM truth"
		  . " WHERE version BETWEEN $from AND $to");
	$session->query_safe("INSERT INTO sent VALUES (1000)");
	return;
}
my $producer = $coord->background_psql($db);
$producer->query_safe('BEGIN');
open_round($producer);
$nodes[$s]->safe_psql($db, "ROLLBACK PREPARED 'hold'");
my $at_switch =
  "SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%move_keys%' AND wait_event_type = 'Lock'";
my $waited = 0;
until ($coord->safe_psql($db, $at_switch) eq 't' || !$move->pumpable || $waited++ > 600)
{
	select(undef, undef, undef, 0.1);
	$move->pump_nb;
}
ok($move->pumpable, "the move is prepared on both nodes, and its switch waits for the producer") or diag($merr);
is( $nodes[$s]->safe_psql($db, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'exactonce_move:trades:4:2:%'"),
	'1', "the move is prepared on $sname");
ok(eval { open_round($producer); 1 }, "the producer writes to both nodes again meanwhile, unblocked") or diag($@);
$producer->query_safe('COMMIT');
$producer->quit;
ok($move->finish, 'the producer committed, the move ends') or diag($merr);
($mout) = $mout =~ /(\d+)\s*$/;
cmp_ok($mout, '>', 0, "and moves the keys back ($mout)");
is(server_of(4, 2), $sname, "the coordinator sends the range to $sname again");
# refusals(node): its trigger and its check of the range (4, 2)
sub refusals
{
	my ($n) = @_;
	return $n->safe_psql($db,
		    "SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'trades.ingest'::regclass"
		  . "  AND tgname = 'exactonce_moved_4_2') || '/' || (SELECT count(*) FROM pg_constraint"
		  . "  WHERE conrelid = 'trades.ingest'::regclass AND conname = 'exactonce_moved_4_2')");
}
is(refusals($nodes[$s]), '0/0',
	"the switch settled $sname, which had a trigger of the range: neither it nor the lifted check is left");
exact('after keys moved back under an open producer');
$moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 4, 2, '$tname')");
cmp_ok($moved, '>', 0, "the keys go back to $tname again ($moved keys)");
is(refusals($nodes[$t]), '0/1', "$tname keeps its check, lifted by the move's row");
is(refusals($nodes[$s]), '0/1', "$sname refuses them with a check");
produce(1);
exact('after they left again');
is($nodes[$t]->safe_psql($db, "SELECT exactonce.move_keys_settle('trades', 4, 2)") . ' ' . refusals($nodes[$t]),
	"t 0/0", "settled, $tname drops the lifted check");

done_testing();
