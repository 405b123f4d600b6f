# A distributed pipeline on three real clusters: a coordinator and two
# nodes, linked by postgres_fdw.  The trade-risk stream (duplicates, moves,
# tombstones, stale resends) goes into the coordinator's ingest, which
# routes each event to the node of its key; each node's workers drain it.
# A node stopped with -m immediate mid-stream makes the inserts for its
# keys and the reads of the aggregates fail, naming it, while the other
# node takes its own keys; the producer resends after the restart.  The
# coordinator's aggregates equal the oracle, and the accounting identity
# holds on each node and in total.  flush, pause, resume and drop act on
# every node; a flush waiting for a node is interrupted by statement_timeout,
# which cancels it there, and so is a statement connecting to a node that
# stopped answering.
#
# Keys move while a producer keeps sending through the coordinator: a range
# to a third node (added then), another to the other node; a move cut off
# after both nodes prepared it is finished by calling move_keys() again,
# one cut off after the first node prepared it is undone and made again.
# A node refuses the keys it gave away; the aggregates still equal the
# oracle and each key lives on one node, the node of its range.

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
# mismatches(agg, oracle): how many rows of the query agg (a pipeline's
# cells at the coordinator) and of the query oracle (the same computed from
# the events) are not in the other
sub mismatches
{
	my ($agg, $oracle) = @_;
	return $coord->safe_psql(
		$db, qq{
WITH agg AS ($agg), oracle AS ($oracle)
SELECT (SELECT count(*) FROM (SELECT * FROM agg EXCEPT ALL SELECT * FROM oracle) a)
	+ (SELECT count(*) FROM (SELECT * FROM oracle EXCEPT ALL SELECT * FROM agg) o)});
}

# a node that fails makes the pipelines made on the others dropped again
my $closed = PostgreSQL::Test::Cluster::get_free_port();
$coord->safe_psql($db,
	"CREATE SERVER nowhere FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '"
	  . $nodes[0]->host . "', port '$closed', dbname '$db');
	 CREATE USER MAPPING FOR CURRENT_USER SERVER nowhere OPTIONS (user '$user')");
my ($rc, $out, $err) = $coord->psql($db,
	"SELECT exactonce.create_distributed_pipeline('half', ARRAY['d'], ARRAY['node1', 'nowhere']::name[])");
like($err, qr/could not connect to server "nowhere"/, 'create fails on a node that cannot be reached, naming it');
is($nodes[0]->safe_psql($db, "SELECT count(*) FROM exactonce.pipeline WHERE name = 'half'"),
	'0', 'and the pipeline made on node1 is dropped again');
is($coord->safe_psql($db, "SELECT to_regnamespace('half') IS NULL AND NOT EXISTS (SELECT FROM exactonce.distributed_pipeline)"),
	't', 'and nothing of it is left at the coordinator');

$coord->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.create_distributed_pipeline('trades', ARRAY['risk_type', 'region', 'trade_desk'],
	ARRAY['node1', 'node2']::name[]);
CREATE TABLE truth (key text, version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, PRIMARY KEY (key, version));
CREATE TABLE sent (n bigint NOT NULL);
});
is($coord->safe_psql($db, 'SELECT servers FROM exactonce.distributed_pipeline'),
	'{node1,node2}', 'the coordinator registers the pipeline over both nodes');
is(join(',', map { $_->safe_psql($db, "SELECT count(*) FROM exactonce.pipelines WHERE name = 'trades'") } @nodes),
	'1,1', 'each node has the pipeline');

# the stream, in rounds; node2 is stopped before round 3
for my $round (1 .. 6)
{
	my ($from, $to) = (($round - 1) * 2000 + 1, $round * 2000);
	if ($round == 3)
	{
		$nodes[1]->stop('immediate');
		($rc, $out, $err) = $coord->psql($db, ExactonceTest::produce_sql($from, $to));
		isnt($rc, 0, 'node2 down: a statement with keys of node2 fails');
		like($err, qr/node2/, 'and the error names node2');
		($rc, $out, $err) = $coord->psql($db, 'SELECT count(*) FROM trades.aggregates');
		like($err, qr/could not connect to server "node2"/,
			'node2 down: reading the aggregates fails and names node2, rather than a partial sum');
		my $k1 = $coord->safe_psql($db,
			"SELECT key FROM (SELECT 'solo' || i AS key FROM generate_series(1, 100) i) k
			 WHERE satisfies_hash_partition('trades.ingest'::regclass, 2, 0, key::text COLLATE \"C\") LIMIT 1");
		($rc, $out, $err) = $coord->psql($db,
			"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
			 VALUES ('$k1', 1, 0, 'Delta', 'AMER', 'FXSpot')");
		is($rc, 0, 'node2 down: events of node1\'s keys still go in') or diag($err);
		$nodes[1]->start;
		$coord->safe_psql($db,
			"INSERT INTO truth VALUES ('$k1', 1, 0, 'Delta', 'AMER', 'FXSpot', false); INSERT INTO sent VALUES (1)");
	}
	# the producer (re)sends the round; a second send is all duplicates
	$coord->safe_psql($db, ExactonceTest::produce_sql($from, $to));
	if ($round == 5)
	{
		$coord->safe_psql($db,
			"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted)
			 SELECT * FROM truth WHERE version BETWEEN $from AND $to;
			 INSERT INTO sent SELECT count(*) FROM truth WHERE version BETWEEN $from AND $to");
	}
}

# one COPY per node per statement: COPY and INSERT through the coordinator
# report every row they take
$coord->safe_psql($db,
	q{CREATE FUNCTION taken(sql text) RETURNS bigint LANGUAGE plpgsql AS $$
	DECLARE n bigint; BEGIN EXECUTE sql; GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END $$});
my $copyfile = $coord->basedir . '/round.copy';
my $round = ExactonceTest::events_sql(30001, 30500);
$coord->safe_psql($db, "COPY ($round) TO '$copyfile'; INSERT INTO truth $round; INSERT INTO sent VALUES (500)");
is( $coord->safe_psql(
		$db,
		"SELECT taken('COPY trades.ingest (key, version, value, risk_type, region, trade_desk, deleted) FROM ''$copyfile''')"
	),
	'500',
	'COPY through the coordinator reports the rows it sent to the nodes');
is( $coord->safe_psql(
		$db,
		"SELECT taken('INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted)
		 SELECT * FROM truth WHERE version BETWEEN 30001 AND 30100'); INSERT INTO sent VALUES (100)"),
	'100',
	'and so does INSERT (the resent rows are duplicates on the nodes)');

# the nodes follow the producer's savepoints: what was rolled back at the
# coordinator never lands; a row a node refuses fails the statement with
# the node's error, naming it, and a savepoint takes it back
$round = ExactonceTest::events_sql(30501, 30600);
$coord->safe_psql(
	$db, qq{
CREATE TABLE caught (state text, msg text);
BEGIN;
INSERT INTO truth $round;
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted) $round;
INSERT INTO sent VALUES (100);
SAVEPOINT s;
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted)
	SELECT key, version + 1000000, value + 1, risk_type, region, trade_desk, deleted FROM ($round) e;
ROLLBACK TO s;
DO \$\$ BEGIN
	INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
		SELECT 'k' || i, 2000000, 1, CASE WHEN i = 50 THEN NULL ELSE 'Delta' END, 'AMER', 'FXSpot'
		FROM generate_series(1, 100) i;
EXCEPTION WHEN others THEN INSERT INTO caught VALUES (SQLSTATE, SQLERRM);
END \$\$;
COMMIT});
like($coord->safe_psql($db, q{SELECT state || ' ' || msg FROM caught}),
	qr/^23502 on server "node[12]": .*null value in column "risk_type"/,
	'a row a node refuses fails the statement with the node\'s error, naming the node');

# savepoints taken before a transaction's first event reach the nodes with
# it: a released one keeps its events, one rolled back takes them back,
# also from a node that had not been sent anything before it
$round = ExactonceTest::events_sql(30601, 30700);
$coord->safe_psql(
	$db, qq{
BEGIN;
SAVEPOINT a;
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted) $round;
RELEASE a;
SAVEPOINT b;
SAVEPOINT c;
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk, deleted)
	SELECT key, version + 1000000, value + 1, risk_type, region, trade_desk, deleted FROM ($round) e;
RELEASE c;
ROLLBACK TO b;
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
	SELECT 'late' || i, 1, 1, 'Delta', 'AMER', 'FXSpot' FROM generate_series(1, 10) i;
ROLLBACK TO b;
DO \$\$ BEGIN
	INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
		SELECT 'late' || i, 1, 1 / (50 - i), 'Delta', 'AMER', 'FXSpot' FROM generate_series(1, 100) i;
EXCEPTION WHEN division_by_zero THEN NULL;
END \$\$;
INSERT INTO truth $round;
INSERT INTO sent VALUES (100);
COMMIT});
is( join('',
		map {
			$_->safe_psql($db,
				"SELECT (SELECT count(*) FROM trades.ingest WHERE key LIKE 'late%' OR version > 1000000)
				      + (SELECT count(*) FROM trades.state WHERE key LIKE 'late%' OR version > 1000000)")
		} @nodes[ 0, 1 ]),
	'00',
	'the events of savepoints rolled back are on no node, nor those of a statement that failed at the coordinator');

# a transaction that sent events cannot be prepared: the nodes commit with
# the coordinator's own commit, which a prepared transaction would defer;
# the events are rolled back on the nodes with it
my (undef, undef, $prepare_err) = $coord->psql(
	$db, q{
BEGIN;
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
	SELECT 'prep' || i, 1, 1, 'Delta', 'AMER', 'FXSpot' FROM generate_series(1, 10) i;
PREPARE TRANSACTION 'eo_prepared';
});
like($prepare_err, qr/cannot prepare a transaction that sent events to server "node[12]"/,
	'PREPARE TRANSACTION is refused once the transaction sent events to a node');
is( $coord->safe_psql($db, 'SELECT count(*) FROM pg_prepared_xacts')
	  . join('',
		map {
			$_->safe_psql($db,
				"SELECT (SELECT count(*) FROM trades.ingest WHERE key LIKE 'prep%')
				      + (SELECT count(*) FROM trades.state WHERE key LIKE 'prep%')")
		} @nodes[ 0, 1 ]),
	'000', 'nothing of it is prepared, nor queued or applied on a node');

# a node that goes away while a transaction has sent it events fails that
# transaction with an error naming it; nothing of it lands anywhere
my $k2 = $coord->safe_psql($db,
	"SELECT key FROM (SELECT 'solo' || i AS key FROM generate_series(1, 100) i) k
	 WHERE satisfies_hash_partition('trades.ingest'::regclass, 2, 1, key::text COLLATE \"C\") LIMIT 1");
my ($bin, $bout, $berr) = ('', '', '');
my $bpsql = IPC::Run::start([ 'psql', '-XAtq', '-d', $coord->connstr($db), '-f', '-' ],
	'<', \$bin, '>', \$bout, '2>', \$berr);
$bin .= "BEGIN; INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
	SELECT '$k2', i, 1, 'Delta', 'AMER', 'FXSpot' FROM generate_series(1, 10) i; SELECT 'sent';\n";
$bpsql->pump until $bout =~ /sent/;
$nodes[1]->stop('immediate');
$bin .= "COMMIT;\n";
$bpsql->finish;
like($berr, qr/server "node2"/, 'node2 gone mid-transaction: the commit fails, naming node2');
$nodes[1]->start;

# and one that goes away while a transaction reads the nodes fails its next
# read with an error naming it
($bin, $bout, $berr) = ('', '', '');
$bpsql = IPC::Run::start([ 'psql', '-XAtq', '-d', $coord->connstr($db), '-f', '-' ],
	'<', \$bin, '>', \$bout, '2>', \$berr);
$bin .= "BEGIN; SELECT 'read ' || count(*) FROM trades.aggregates;\n";
$bpsql->pump until $bout =~ /read \d+/;
$nodes[1]->stop('immediate');
$bin .= "SELECT count(*) FROM trades.aggregates;\nCOMMIT;\n";
$bpsql->finish;
like($berr, qr/server "node2"/, 'node2 gone while a transaction reads the nodes: the next read fails, naming node2');
$nodes[1]->start;

# keys move while a producer sends rounds 7 to 10 through the coordinator
push @nodes, eo_node('node3');
$nodes[2]->safe_psql($db, 'CREATE EXTENSION exactonce');
$coord->safe_psql($db,
	"CREATE SERVER node3 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '"
	  . $nodes[2]->host . "', port '" . $nodes[2]->port . "', dbname '$db');
	 CREATE USER MAPPING FOR CURRENT_USER SERVER node3 OPTIONS (user '$user')");
my $script = $coord->basedir . '/rounds.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	join('', map { ExactonceTest::produce_sql(($_ - 1) * 2000 + 1, $_ * 2000) } 7 .. 10));
my ($pout, $perr) = ('', '');
my $producer = IPC::Run::start(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $coord->connstr($db), '-f', $script ],
	'>', \$pout, '2>', \$perr);
$coord->poll_query_until($db, 'SELECT max(version) > 12000 FROM truth WHERE version <= 20000');
my $moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 4, 3, 'node3')");
cmp_ok($moved, '>', 0, "keys (4, 3) move from node2 to node3, a new node, while events arrive ($moved keys)");
$coord->poll_query_until($db, 'SELECT max(version) > 14000 FROM truth WHERE version <= 20000');
$moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 4, 2, 'node2')");
cmp_ok($moved, '>', 0, "keys (4, 2) move from node1 to node2 while events arrive ($moved keys)");
ok($producer->finish, 'the producer sent every round') or diag($perr);
is($coord->safe_psql($db, 'SELECT max(version) FROM truth WHERE version <= 20000'), '20000', 'round 10 included');
is($coord->safe_psql($db, 'SELECT servers FROM exactonce.distributed_pipeline'),
	'{node1,node2,node3}', 'node3 is a node of the pipeline now');

# a move cut off after both nodes prepared it (the coordinator gone):
# move_keys() again commits it on both and repoints the partition
my $gid = 'exactonce_move:trades:8:7:1';
my ($state, $dead, $horizon) = split /\n/, $nodes[2]->safe_psql(
	$db, qq{
BEGIN;
SELECT replace(state, E'\\n', '') || E'\\n' || replace(coalesce(dead_letters, ''), E'\\n', '')
	|| E'\\n' || coalesce(horizon::text, '')
FROM exactonce.move_keys_out('trades', 8, 7, 'node1', '$gid');
PREPARE TRANSACTION '$gid';
}), -1;
$nodes[0]->safe_psql(
	$db, qq{
BEGIN;
SELECT exactonce.move_keys_in('trades', 8, 7, 'node3', '$gid', \$m\$$state\$m\$, NULL,
	nullif(\$m\$$dead\$m\$, ''), nullif('$horizon', '')::bigint);
PREPARE TRANSACTION '$gid';
});
is($coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 8, 7, 'node1')"),
	'0', 'move_keys() again finishes a move both nodes had prepared');
# a move cut off after the first node prepared it: undone, then made
$gid = 'exactonce_move:trades:8:2:1';
$nodes[1]->safe_psql($db,
	"BEGIN; SELECT keys FROM exactonce.move_keys_out('trades', 8, 2, 'node3', '$gid'); PREPARE TRANSACTION '$gid'");
$moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 8, 2, 'node3')");
cmp_ok($moved, '>', 0, "move_keys() undoes a move only the first node had prepared and makes it ($moved keys)");
is(join(',', map { $_->safe_psql($db, 'SELECT count(*) FROM pg_prepared_xacts') } @nodes),
	'0,0,0', 'no prepared transaction is left on any node');
is( $coord->safe_psql(
		$db, q{
SELECT string_agg(pg_get_expr(c.relpartbound, c.oid) || ' ' || o.option_value, '; '
	ORDER BY pg_get_expr(c.relpartbound, c.oid))
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	JOIN pg_foreign_table f ON f.ftrelid = c.oid JOIN pg_foreign_server s ON s.oid = f.ftserver,
	pg_options_to_table(f.ftoptions) o
WHERE i.inhparent = 'trades.ingest'::regclass AND s.srvname = 'exactonce_forward' AND o.option_name = 'server'}),
	'FOR VALUES WITH (modulus 4, remainder 0) node1; FOR VALUES WITH (modulus 4, remainder 1) node2; '
	  . 'FOR VALUES WITH (modulus 8, remainder 2) node3; FOR VALUES WITH (modulus 8, remainder 3) node3; '
	  . 'FOR VALUES WITH (modulus 8, remainder 6) node2; FOR VALUES WITH (modulus 8, remainder 7) node1',
	'the coordinator\'s ingest routes each range to its node');

# a node refuses the keys it gave away: once the move is done, with a
# check on its queue, where the row trigger that parked them during the
# move would make COPY insert row by row.  The switch waits at most 100 ms
# for a node's queue to put the check in; where that was too short, the
# coordinator logged it and move_keys_settle() there puts it in.
my $coord_log = slurp_file($coord->logfile);
my %gave = (0 => [ '4_2' ], 1 => [ '4_3', '8_2' ], 2 => [ '8_7' ]);
for my $i (sort keys %gave)
{
	my $refusers = sub {
		$nodes[$i]->safe_psql(
			$db, q{
SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'trades.ingest'::regclass AND tgname LIKE 'exactonce_moved%')
	|| ' ' || (SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
	WHERE conrelid = 'trades.ingest'::regclass AND conname LIKE 'exactonce_moved%')});
	};
	for my $range (@{ $gave{$i} })
	{
		my ($m, $r) = split /_/, $range;
		next if $refusers->() =~ /exactonce_moved_$range/;
		like($coord_log, qr/server "node@{[$i + 1]}" refuses the keys \($m, $r\) of pipeline "trades" with a trigger/,
			"node@{[$i + 1]}'s queue was busy at the switch of ($m, $r): the coordinator says so");
		$nodes[$i]->safe_psql($db, "SELECT exactonce.move_keys_settle('trades', $m, $r)");
	}
	is($refusers->(), '0 ' . join(',', map { "exactonce_moved_$_" } @{ $gave{$i} }),
		"node@{[$i + 1]} refuses the ranges it gave away with checks, and has no trigger of them");
}

($rc, $out, $err) = $nodes[0]->psql($db,
	"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
	 SELECT 'k' || i, 1, 0, 'Delta', 'AMER', 'FXSpot' FROM generate_series(1, 100) i
	 WHERE exactonce.key_bucket('k' || i, 4) = 2");
like($err, qr/has moved to server "node2"/, 'node1 refuses a key of the range it gave to node2, naming node2');

# and a round after the moves goes where the keys are now
$coord->safe_psql($db, ExactonceTest::produce_sql(20001, 22000));

# pause and resume reach every node
$coord->safe_psql($db, "SELECT exactonce.pause('trades')");
is($coord->safe_psql($db, 'SELECT string_agg(paused::text, \',\' ORDER BY server) FROM trades.nodes'),
	'true,true,true', 'pause at the coordinator pauses every node');
$coord->safe_psql($db, "SELECT exactonce.resume('trades')");
is($coord->safe_psql($db, 'SELECT bool_or(paused) FROM trades.nodes'), 'f', 'resume resumes them');

# flush at the coordinator drains every node
$coord->safe_psql($db, "SELECT exactonce.flush('trades')");
is($coord->safe_psql($db, 'SELECT sum(queued) FROM trades.nodes'), '0', 'flush drains every node');
is(eo_mismatches($coord, $db), '0', 'the coordinator\'s aggregates equal the oracle');
is( $coord->safe_psql(
		$db, q{
SELECT bool_and(ingested = applied + duplicates + stale + dead_lettered)
   AND sum(ingested) = (SELECT sum(n) FROM sent) AND sum(dead_lettered) = 0
FROM trades.nodes}),
	't', 'the accounting identity holds on each node and in total, every event sent ingested once');
is( join(',', map { $_->safe_psql($db, "SELECT count(*) > 0 FROM trades.state") } @nodes),
	't,t,t', 'every node holds keys');
# each key lives on one node, the node of its range
my %ranges = (0 => '(4, 0), (8, 7)', 1 => '(4, 1), (8, 6)', 2 => '(8, 2), (8, 3)');
for my $i (0 .. 2)
{
	is(eo_keys_in_ranges($nodes[$i], $db, $ranges{$i}),
		't', 'every key of node' . ($i + 1) . " is in its ranges $ranges{$i}");
}
my $held = 0;
$held += $_->safe_psql($db, 'SELECT count(*) FROM trades.state') for @nodes;
is($held, $coord->safe_psql($db, 'SELECT count(DISTINCT key) FROM truth'),
	'the nodes hold each key of the stream once');

# a node holding its pipeline keeps flush waiting; statement_timeout at the
# coordinator ends the wait and cancels the flush on the node
my $holder = $nodes[0]->background_psql($db);
$holder->query_safe('BEGIN');
$holder->query_safe('SELECT * FROM trades.progress FOR UPDATE');
($rc, $out, $err) = $coord->psql($db, "SET statement_timeout = '1s'; SELECT exactonce.flush('trades')");
like($err, qr/canceling statement due to statement timeout/,
	'a flush waiting for a node is interrupted by statement_timeout');
ok( $nodes[0]->poll_query_until(
		$db, "SELECT count(*) = 0 FROM pg_stat_activity WHERE query LIKE 'SELECT exactonce.flush%'"),
	'and the flush on the node is cancelled');
$holder->query_safe('ROLLBACK');

# and when the node stops answering meanwhile (its postmaster stopped, so
# that a cancel request is accepted by the kernel and never served), the
# cancel gives up after a while rather than waiting for the node for good
$holder->query_safe('BEGIN');
$holder->query_safe('SELECT * FROM trades.progress FOR UPDATE');
my ($fin, $fout, $ferr) = ('', '', '');
my $flush = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $coord->connstr($db), '-c', "SET statement_timeout = '3s'; SELECT exactonce.flush('trades')" ],
	'<', \$fin, '>', \$fout, '2>', \$ferr,
	IPC::Run::timeout(120));
ok( $nodes[0]->poll_query_until(
		$db, "SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'SELECT exactonce.flush%' AND wait_event_type = 'Lock'"),
	'a flush through the coordinator waits for the node');
kill 'STOP', $nodes[0]->{_pid};
my $flush_hung = !eval { $flush->finish; 1 };
kill 'CONT', $nodes[0]->{_pid};
$flush->kill_kill if $flush_hung;
ok(!$flush_hung, 'statement_timeout ends the flush at the coordinator though the node\'s postmaster stopped');
like($ferr, qr/canceling statement due to statement timeout/, 'with the timeout\'s error');
$holder->query_safe('ROLLBACK');
$holder->quit;
ok( $nodes[0]->poll_query_until(
		$db, "SELECT count(*) = 0 FROM pg_stat_activity WHERE query LIKE 'SELECT exactonce.flush%'"),
	'and the node lets the flush go once it answers again');

# drop at the coordinator drops every node's pipeline
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('trades')");
is(join(',', map { $_->safe_psql($db, "SELECT count(*) FROM exactonce.pipelines WHERE name = 'trades'") } @nodes),
	'0,0,0', 'drop_pipeline at the coordinator drops the pipeline on every node');
is($coord->safe_psql($db, "SELECT to_regnamespace('trades') IS NULL AND NOT EXISTS (SELECT FROM exactonce.distributed_pipeline)"),
	't', 'and the coordinator\'s schema and registry row');

# accumulate mode: a key's share of the cells stays where it was counted,
# its state and seen rows move; a resend of every reading after the move is
# all duplicates, the moved keys' on their new node
$coord->safe_psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_distributed_pipeline('readings', ARRAY['d'], ARRAY['node1', 'node2']::name[], 'accumulate',
		distinct_counts => ARRAY['u'])");
my $readings = q{SELECT 'r' || (i % 300) AS key, i::bigint AS version, (i % 97)::numeric AS value, 'd' || (i % 4) AS d,
	'u' || (i % 11) AS u
FROM generate_series(1, 6000) i};
$coord->safe_psql($db, "INSERT INTO readings.ingest (key, version, value, d, u) $readings");
$moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('readings', 4, 1, 'node3')");
cmp_ok($moved, '>', 0, "accumulate: keys (4, 1) move from node2 to node3 ($moved keys)");
$coord->safe_psql($db, "INSERT INTO readings.ingest (key, version, value, d, u) $readings");
$coord->safe_psql($db, "SELECT exactonce.flush('readings')");
is( mismatches(
		'SELECT d, level, total, keys, u_distinct FROM readings.aggregates',
		"SELECT d, 2 - (GROUPING(d) + 1) AS level, sum(value) AS total, count(*) AS keys, count(DISTINCT u) AS u_distinct
		 FROM ($readings) r GROUP BY ROLLUP (d)"),
	'0', 'accumulate: the coordinator\'s aggregates equal the oracle after the move and a resend of everything');
is($coord->safe_psql($db, 'SELECT sum(duplicates) FROM readings.nodes'),
	'6000', 'accumulate: every resent reading is a duplicate, on whichever node its key is now');
is(join(',', map { $_->safe_psql($db, "SELECT bool_and(ok) FROM exactonce.verify('readings')") } @nodes),
	't,t,t', 'accumulate: verify() squares each node\'s cells with its state and moves')
  or diag(join("\n", map { $_->safe_psql($db, "SELECT * FROM exactonce.verify('readings'); SELECT * FROM exactonce.key_move") } @nodes));
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('readings')");

# measures: the coordinator sums the nodes' sums and counts, averages from
# them, and takes the min of their mins and the max of their maxes; exact
# against the latest version of each key, before and after a move
$coord->safe_psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_distributed_pipeline('positions', ARRAY['d'],
		ARRAY['node1', 'node2']::name[], measures => ARRAY['qty'], min_max => ARRAY['value', 'qty'],
		distinct_counts => ARRAY['u'])");
my $positions = q{SELECT 'p' || (i % 500) AS key, i::bigint AS version, (i * 31 % 1000) / 10.0 AS value,
	'd' || (i % 3) AS d, CASE WHEN i % 11 = 0 THEN NULL ELSE (i % 17)::numeric END AS qty, i % 13 = 0 AS deleted,
	CASE WHEN i % 23 = 0 THEN NULL ELSE 'u' || (i * 7 % 19) END AS u
FROM generate_series(1, 5000) i};
$coord->safe_psql($db,
	"INSERT INTO positions.ingest (key, version, value, d, qty, deleted, u) SELECT * FROM ($positions) e WHERE version <= 2500");
$coord->safe_psql($db, "SELECT exactonce.move_keys('positions', 4, 3, 'node3')");
$coord->safe_psql($db,
	"INSERT INTO positions.ingest (key, version, value, d, qty, deleted, u) SELECT * FROM ($positions) e WHERE version > 2000");
$coord->safe_psql($db, "SELECT exactonce.flush('positions')");
is( mismatches(
		'SELECT d, level, total, keys, qty_sum, qty_count, qty_avg, value_min, value_max, qty_min, qty_max, u_distinct
		 FROM positions.aggregates',
		"SELECT d, 2 - (GROUPING(d) + 1) AS level, sum(value) AS total, count(*) AS keys,
			coalesce(sum(qty), 0) AS qty_sum, count(qty) AS qty_count,
			trim_scale(coalesce(sum(qty), 0)) / NULLIF(count(qty), 0) AS qty_avg,
			min(value) AS value_min, max(value) AS value_max, min(qty) AS qty_min, max(qty) AS qty_max,
			count(DISTINCT u) AS u_distinct
		 FROM (SELECT DISTINCT ON (key) * FROM ($positions) e ORDER BY key, version DESC) latest
		 WHERE NOT deleted GROUP BY ROLLUP (d)"),
	'0',
	'measures: sums, counts, averages, min, max and distinct counts at the coordinator equal the oracle, across a move');
# a move takes the keys out of the old node's cells and into the new one's
# as their tombstones and first versions would: each node's cells are what
# its state computes
is( join(',',
		map { $_->safe_psql($db, "SELECT bool_and(ok) FROM exactonce.verify('positions') WHERE item = 'cells'") }
		  @nodes),
	't,t,t',
	'a move leaves each node\'s cells, min, max and distinct counts as its state computes them')
  or diag(join("\n", map { $_->safe_psql($db, "SELECT * FROM exactonce.verify('positions')") } @nodes));
my $summed = 0;
$summed += $_->safe_psql($db, q{SELECT coalesce(sum(u_distinct), 0) FROM positions.aggregates WHERE level = 0}) for @nodes;
cmp_ok($summed,
	'>', $coord->safe_psql($db, q{SELECT u_distinct FROM positions.aggregates WHERE level = 0}),
	'distinct counts: values seen on two nodes count once, not in each node\'s count');
unlike($coord->safe_psql($db, 'EXPLAIN (COSTS OFF) SELECT d, level, total FROM positions.aggregates'),
	qr/distincts_/, 'distinct counts: a query that selects none does not read the nodes\' values');
($rc, $out, $err) = $coord->psql($db,
	"SELECT exactonce.alter_pipeline_as('positions', 'SELECT d, sum(value) FROM positions GROUP BY d')");
like($err, qr/does not change distributed pipeline "positions"/,
	'alter_pipeline_as() at the coordinator refuses a distributed pipeline, naming it');
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('positions')");

# event-time windows: the coordinator sums each window's cells, and a
# window is final there when it is final on every node (one shard per
# node, which applies the readings in the order sent: with two, one could
# run an hour ahead and make the other's readings too late)
$coord->safe_psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_distributed_pipeline('runs', ARRAY['d'],
		ARRAY['node1', 'node2']::name[], 'accumulate', shards => 1, window_width => '1 hour')");
my $runs = q{SELECT 'w' || (i % 40) AS key, i::bigint AS version, (i % 13)::numeric AS value, 'd' || (i % 3) AS d,
	timestamptz '2026-01-01 00:00+00' + (i / 200) * interval '1 hour' + (i % 200) * interval '10 seconds' AS event_time
FROM generate_series(0, 999) i};
$coord->safe_psql($db, "INSERT INTO runs.ingest (key, version, value, d, event_time) $runs");
$coord->safe_psql($db, "SELECT exactonce.flush('runs')");
is( mismatches(
		'SELECT window_start, d, level, total, keys FROM runs.windows',
		"SELECT to_timestamp(floor(extract(epoch FROM event_time) / 3600) * 3600) AS w, d,
			2 - GROUPING(d) AS level, sum(value) AS total, count(*) AS keys
		 FROM ($runs) r GROUP BY ROLLUP (to_timestamp(floor(extract(epoch FROM event_time) / 3600) * 3600), d)
		 HAVING GROUPING(to_timestamp(floor(extract(epoch FROM event_time) / 3600) * 3600)) = 0"),
	'0', 'windows: the coordinator\'s windows equal the oracle');
is($coord->safe_psql($db, 'SELECT sum(dead_lettered) FROM runs.nodes'), '0', 'windows: no reading was too late');
is($coord->safe_psql($db, 'SELECT count(*) FILTER (WHERE final) || \'/\' || count(*) FROM runs.windows WHERE level = 1'),
	'4/5', 'windows: the four hours before the latest are final on both nodes, so at the coordinator');
my $k1 = $coord->safe_psql($db,
	"SELECT key FROM (SELECT 'w' || i AS key FROM generate_series(0, 39) i) k
	 WHERE satisfies_hash_partition('runs.ingest'::regclass, 2, 0, key::text COLLATE \"C\") LIMIT 1");
$coord->safe_psql($db,
	"INSERT INTO runs.ingest (key, version, value, d, event_time) VALUES ('$k1', 5000, 1, 'd0', '2026-01-01 06:30+00')");
$coord->safe_psql($db, "SELECT exactonce.flush('runs')");
my $hour4 = "window_start = '2026-01-01 04:00+00' AND level = 1";
is($nodes[0]->safe_psql($db, "SELECT final FROM runs.windows WHERE $hour4") . '/'
	  . $coord->safe_psql($db, "SELECT final FROM runs.windows WHERE $hour4"),
	't/f', 'windows: a window final on node1 alone is not final at the coordinator');
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('runs')");

# outgrowing one server: node1's own pipeline, with its events, is adopted
# as the one node of a distributed pipeline, then half its keys move to
# node2; resends of everything are duplicates wherever their key is
$nodes[0]->safe_psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_pipeline('solo', ARRAY['d'])");
my $solo = q{SELECT 's' || (i % 400) AS key, i::bigint AS version, (i % 89)::numeric AS value,
	'd' || (i % 5) AS d, i % 19 = 0 AS deleted FROM generate_series(1, 4000) i};
$nodes[0]->safe_psql($db,
	"INSERT INTO solo.ingest (key, version, value, d, deleted) SELECT * FROM ($solo) e WHERE version <= 2000;
	 SELECT exactonce.flush('solo')");
($rc, $out, $err) = $coord->psql($db,
	"SELECT exactonce.create_distributed_pipeline('solo', ARRAY['other'], ARRAY['node1']::name[], adopt => true)");
like($err, qr/is not the one described/, 'adopting a pipeline of other dimensions is refused');
is($nodes[0]->safe_psql($db, "SELECT count(*) FROM exactonce.pipeline WHERE name = 'solo'"),
	'1', 'and the node keeps its pipeline');
# over two servers, node1 would be the second, whose keys are half of its
# own: refused, node1's pipeline kept with its keys, nothing left on node2
my $solo_keys = $nodes[0]->safe_psql($db, 'SELECT count(*) FROM solo.state');
($rc, $out, $err) = $coord->psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_distributed_pipeline('solo', ARRAY['d'], ARRAY['node2', 'node1']::name[], adopt => true)");
like($err, qr/pipeline "solo" on server "node1" holds \d+ keys of other nodes/,
	'adopting a pipeline that holds keys of another node\'s partition is refused');
is( $nodes[0]->safe_psql($db, "SELECT (SELECT count(*) FROM exactonce.pipeline WHERE name = 'solo') || '/' || count(*) FROM solo.state")
	  . ' ' . $nodes[1]->safe_psql($db, "SELECT count(*) FROM exactonce.pipeline WHERE name = 'solo'"),
	"1/$solo_keys 0", 'the adopted pipeline is not dropped, the one made on node2 is');
# node1 adoptable as the first of two (its keys all of bucket (2, 0)) and
# node2's pipeline of that name not: refused, node1's adopted pipeline kept
$nodes[0]->safe_psql($db, q{
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('pair', ARRAY['d']);
INSERT INTO pair.ingest (key, version, value, d)
	SELECT 'p' || i, 1, i, 'x' FROM generate_series(1, 400) i WHERE exactonce.key_bucket('p' || i, 2) = 0;
SELECT exactonce.flush('pair');
});
$nodes[1]->safe_psql($db, "SET client_min_messages = warning; SELECT exactonce.create_pipeline('pair', ARRAY['other'])");
($rc, $out, $err) = $coord->psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_distributed_pipeline('pair', ARRAY['d'], ARRAY['node1', 'node2']::name[], adopt => true)");
like($err, qr/pipeline "pair" on server "node2" is not the one described/,
	'adopting over two servers, the second refused');
is( $nodes[0]->safe_psql($db, "SELECT count(*) FROM pair.state") . ' '
	  . $nodes[1]->safe_psql($db, "SELECT dimensions FROM exactonce.pipeline WHERE name = 'pair'"),
	$nodes[0]->safe_psql($db, "SELECT count(*) FROM generate_series(1, 400) i WHERE exactonce.key_bucket('p' || i, 2) = 0")
	  . ' {other}',
	'the pipeline adopted on node1 is kept when the creation fails on node2, and node2\'s own is untouched');
$_->safe_psql($db, "SET client_min_messages = warning; SELECT exactonce.drop_pipeline('pair')") for @nodes[0, 1];
$coord->safe_psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_distributed_pipeline('solo', ARRAY['d'], ARRAY['node1']::name[], adopt => true)");
$moved = $coord->safe_psql($db, "SELECT exactonce.move_keys('solo', 2, 1, 'node2')");
cmp_ok($moved, '>', 0, "one server's pipeline adopted, then half its keys moved to node2 ($moved keys)");
$coord->safe_psql($db, "INSERT INTO solo.ingest (key, version, value, d, deleted) SELECT * FROM ($solo) e");
$coord->safe_psql($db, "SELECT exactonce.flush('solo')");
is( mismatches(
		'SELECT d, level, total, keys FROM solo.aggregates',
		"SELECT d, 2 - (GROUPING(d) + 1) AS level, sum(value) AS total, count(*) AS keys
		 FROM (SELECT DISTINCT ON (key) * FROM ($solo) e ORDER BY key, version DESC) latest
		 WHERE NOT deleted GROUP BY ROLLUP (d)"),
	'0', 'the adopted and spread pipeline\'s aggregates equal the oracle');
is($coord->safe_psql($db, 'SELECT sum(duplicates), sum(stale), bool_and(ingested = applied + duplicates + stale + dead_lettered) FROM solo.nodes'),
	'400|1600|t', 'the first 2000 events, sent again, are duplicates (each key\'s latest) or stale, on whichever node their key is');
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('solo')");

# drop, forced, goes on past a node that cannot be reached
$coord->safe_psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_distributed_pipeline('gone', ARRAY['d'], ARRAY['node1', 'node2']::name[])");
$nodes[1]->stop('immediate');
($rc, $out, $err) = $coord->psql($db, "SELECT exactonce.drop_pipeline('gone')");
like($err, qr/node2/, 'drop fails on a node that cannot be reached, naming it');
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('gone', force => true)");
is($nodes[0]->safe_psql($db, "SELECT count(*) FROM exactonce.pipeline WHERE name = 'gone'"),
	'0', 'drop with force drops the pipeline on the nodes it reaches');
is($coord->safe_psql($db, "SELECT to_regnamespace('gone') IS NULL AND NOT EXISTS (SELECT FROM exactonce.distributed_pipeline)"),
	't', 'and the coordinator\'s schema and registry row');
$nodes[1]->start;
is($nodes[1]->safe_psql($db, "SELECT count(*) FROM exactonce.pipeline WHERE name = 'gone'"),
	'1', 'the pipeline stays on the node that was down, to drop there');

# a node that stops answering (its postmaster stopped: the kernel accepts
# the connection, nothing serves it) holds a producer at the coordinator no
# longer than its statement_timeout, which interrupts the connection's wait
$coord->safe_psql($db,
	"SET client_min_messages = warning; SELECT exactonce.create_distributed_pipeline('hung', ARRAY['d'], ARRAY['node1', 'node2']::name[])");
my $hung = "INSERT INTO hung.ingest (key, version, value, d) SELECT 'k' || i, 1, 1, 'x' FROM generate_series(1, 50) i";
kill 'STOP', $nodes[1]->{_pid};
my $timed_out = 0;
($rc, $out, $err) = $coord->psql($db, "SET statement_timeout = '2s'; $hung", timeout => 120, timed_out => \$timed_out);
my ($rc2, $out2, $err2);
my $timed_out2 = 0;
$coord->safe_psql($db, "ALTER SERVER node2 OPTIONS (ADD connect_timeout '2')");
($rc2, $out2, $err2) = $coord->psql($db, $hung, timeout => 120, timed_out => \$timed_out2);
$coord->safe_psql($db, "ALTER SERVER node2 OPTIONS (DROP connect_timeout)");
kill 'CONT', $nodes[1]->{_pid};
ok(!$timed_out, 'a statement through the coordinator does not wait on a node that stopped answering');
like($err, qr/statement timeout/, 'statement_timeout cancels it while it connects');
ok(!$timed_out2 && $err2 =~ /could not connect to server "node2".*\n.*connect_timeout/,
	'so does the server\'s connect_timeout, naming the server');
$coord->safe_psql($db, $hung);
$coord->safe_psql($db, "SELECT exactonce.flush('hung')");
is($coord->safe_psql($db, "SELECT sum(keys) FROM hung.aggregates WHERE level = 0"),
	'50', 'once the node answers again, the statement sent again is taken whole');
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('hung')");

done_testing();
