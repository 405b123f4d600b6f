# Distributed pipelines against roles that play foul, on a coordinator and
# one node linked by postgres_fdw.
#
# 1. Every connection to a node uses the pipeline owner's user mapping,
#    whoever calls.  An owner that is not a superuser reaches the node with
#    the password of its mapping: a superuser's flush, pause, resume, drop
#    and move_keys of its pipeline work.  The owner then points the server
#    at a database where it planted exactonce.flush() and company, and maps
#    PUBLIC to the node's superuser without a password: the same calls by a
#    superuser refuse with 2F003 (password required), the planted code never
#    runs as a superuser and no role gains rolsuper.  (Before, the caller's
#    mapping was used, and a superuser caller skipped the password check.)
# 2. A registry row whose schema was dropped by hand never shadows the name:
#    a pipeline of one server made under that name is flushed, paused and
#    dropped as itself, a superuser's drop never removes another role's
#    schema, drop_pipeline(force => true) removes what is left, and
#    create_distributed_pipeline neither takes the name of a pipeline of one
#    server nor trips on a stale row.
# 3. move_keys_in() takes from a peer only what the node's own ingest would
#    take: no NaN or infinite value, measure or total, no key outside the
#    range moved, no row without key or version.
# 4. A node pointed at a database of the owner's that answers a move of
#    keys with nothing (no count of the keys taken out): the move is
#    refused and the coordinator carries on.
# 5. A server pointed at a process that speaks the protocol and sends a
#    binary COPY whose header claims more than the message holds: the read
#    is refused and the coordinator carries on.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IO::Socket::UNIX;
use POSIX ();
use ExactonceTest;

my $db = 'postgres';
my $coord = eo_node('coordinator', preload => 0);
my $node = eo_node('node');
my $other = eo_node('other', preload => 0);
my $su = $coord->safe_psql($db, 'SELECT current_user');

# the nodes: role node_role logs in with a password (SCRAM), everyone else
# of the test as before (trust)
for my $n ($node, $other)
{
	$n->safe_psql(
		$db, q{
CREATE EXTENSION exactonce;
CREATE ROLE node_role LOGIN PASSWORD 'node-secret';
GRANT CREATE ON DATABASE postgres TO node_role;
});
	my $hba = $n->data_dir . '/pg_hba.conf';
	my $rules = slurp_file($hba);
	open(my $fh, '>', $hba) or die "could not write $hba: $!";
	print $fh "local all node_role scram-sha-256\n$rules";
	close($fh);
	$n->reload;
}
# database evil on the node is node_role's
$node->safe_psql($db, 'CREATE DATABASE evil OWNER node_role');

# the coordinator: bob may make foreign servers, bob and dave schemas
$coord->safe_psql(
	$db, q{
CREATE EXTENSION exactonce;
CREATE EXTENSION postgres_fdw;
CREATE ROLE bob;
CREATE ROLE dave;
GRANT USAGE ON FOREIGN DATA WRAPPER postgres_fdw TO bob;
GRANT CREATE ON DATABASE postgres TO bob, dave;
});
my $server = "host '" . $node->host . "', port '" . $node->port . "'";
$coord->safe_psql(
	$db, qq{
SET ROLE bob;
CREATE SERVER bnode FOREIGN DATA WRAPPER postgres_fdw OPTIONS ($server, dbname '$db');
CREATE USER MAPPING FOR bob SERVER bnode OPTIONS (user 'node_role', password 'node-secret');
CREATE SERVER bother FOREIGN DATA WRAPPER postgres_fdw
	OPTIONS (host '@{[ $other->host ]}', port '@{[ $other->port ]}', dbname '$db');
CREATE USER MAPPING FOR bob SERVER bother OPTIONS (user 'node_role', password 'node-secret');
});

# failure(node, sql, role): the SQLSTATE and message of the error sql
# raises, run as role (default the test's superuser), or "no error"
sub failure
{
	my ($n, $sql, $role, $dbname) = @_;
	my $set = $role ? "SET ROLE $role;\n" : '';
	my ($rc, $out, $err) = $n->psql($dbname // $db, "\\set VERBOSITY verbose\n$set$sql");
	return $rc == 0 ? 'no error' : $err =~ /ERROR:\s+([0-9A-Z]{5}: [^\n]*)/ ? $1 : $err;
}

# as(role, sql): run sql at the coordinator as role
sub as
{
	my ($role, $sql) = @_;
	return $coord->safe_psql($db, "SET client_min_messages = warning; SET ROLE $role;\n$sql");
}

# the node's pipelines of a name
sub on_node
{
	my $name = shift;
	return $node->safe_psql($db, "SELECT count(*) FROM exactonce.pipeline WHERE name = '$name'");
}

# 1. a legitimate owner's pipeline, worked on by a superuser
as('bob', "SELECT exactonce.create_distributed_pipeline('bobs', ARRAY['d'], ARRAY['bnode']::name[])");
is(on_node('bobs'), '1', 'an owner with a password mapping makes a distributed pipeline');
as('bob', "INSERT INTO bobs.ingest (key, version, value, d) SELECT 'k' || i, 1, i, 'x' FROM generate_series(1, 10) i");
like($coord->safe_psql($db, "SELECT exactonce.flush('bobs')"), qr/^\d+$/,
	'a superuser flushes it, through the owner\'s mapping');
is($node->safe_psql($db, 'SELECT count(*) FROM bobs.state'), '10', 'which drains the node');

# a flush of the owner's that waits on the node is cancelled there when the
# coordinator's statement_timeout ends it: the cancel logs in as the
# owner's connection did, with the mapping's password
my $holder = $node->background_psql($db);
$holder->query_safe('BEGIN');
$holder->query_safe('SELECT * FROM bobs.progress FOR UPDATE');
like(failure($coord, "SET statement_timeout = '2s'; SELECT exactonce.flush('bobs')", 'bob'),
	qr/^57014: canceling statement due to statement timeout/, 'the owner\'s flush waiting on the node times out');
ok( $node->poll_query_until(
		$db, "SELECT count(*) = 0 FROM pg_stat_activity WHERE query LIKE 'SELECT exactonce.flush%'"),
	'and is cancelled on the node, the cancel logged in with the password');
$holder->query_safe('ROLLBACK');
$holder->quit;
$coord->safe_psql($db, "SELECT exactonce.pause('bobs')");
is($node->safe_psql($db, "SELECT paused FROM exactonce.pipelines WHERE name = 'bobs'"),
	't', 'a superuser pauses it');
$coord->safe_psql($db, "SELECT exactonce.resume('bobs')");
is($node->safe_psql($db, "SELECT paused FROM exactonce.pipelines WHERE name = 'bobs'"),
	'f', 'and resumes it');
my $range = $node->safe_psql($db, 'SELECT count(*) FROM bobs.state WHERE exactonce.key_bucket(key, 2) = 0');
is($coord->safe_psql($db, "SELECT exactonce.move_keys('bobs', 2, 0, 'bother')"), $range,
	'and moves its keys (2, 0) to another node');
# a node older than 1.13 (it has no move_keys_park) is refused, named
$node->safe_psql($db,
	'ALTER FUNCTION exactonce.move_keys_park(text, integer, integer, text) RENAME TO move_keys_park_hidden');
like(failure($coord, "SELECT exactonce.move_keys('bobs', 2, 1, 'bother')"),
	qr/^0A000: server "bnode" has a version of exactonce before 1.13/, 'a move from a node before 1.13 is refused, naming it');
$node->safe_psql($db,
	'ALTER FUNCTION exactonce.move_keys_park_hidden(text, integer, integer, text) RENAME TO move_keys_park');
like(failure($coord, "SELECT exactonce.move_keys('bobs', 2, 1, 'bother')", 'dave'),
	qr/^42501: must be owner of distributed pipeline "bobs"/, 'another role cannot move its keys');
is($node->safe_psql($db, "SELECT to_regclass('bobs.moving_2_1') IS NULL AND (SELECT count(*) FROM bobs.state) > 0"),
	't', 'and nothing of a move began on the node');

# a move that meets a lock on a node gives up after move_lock_timeout, and
# with it the lock that stalls the coordinator's producers and readers
my $locker = $node->background_psql($db);
$locker->query_safe('BEGIN; LOCK TABLE bobs.state IN ACCESS EXCLUSIVE MODE');
my (undef, undef, $move_err) = $coord->psql($db,
	"\\set VERBOSITY verbose\nSET exactonce.move_lock_timeout = '1s'; SELECT exactonce.move_keys('bobs', 2, 1, 'bother')");
like($move_err, qr/ERROR:  55P03: the move of keys \(2, 1\) of distributed pipeline "bobs" is given up: on server "bnode": ERROR:  canceling statement due to lock timeout/,
	'a move waits for a lock on a node only move_lock_timeout, then is undone');
is($node->safe_psql($db, "SELECT to_regclass('bobs.moving_2_1') IS NULL"),
	't', 'the lock on the old node\'s state does not keep the undone move\'s events aside');
as('bob', "INSERT INTO bobs.ingest (key, version, value, d) VALUES ('after_timeout', 1, 1, 'x')");
is(as('bob', "SELECT count(*) FROM bobs.aggregates WHERE level = 0"), '1',
	'and the coordinator\'s producers and readers go on');
$locker->quit;

# the owner turns hostile: exactonce's functions planted in database evil,
# the server pointed there, PUBLIC mapped to the node's superuser
$node->safe_psql(
	'evil', q{
SET ROLE node_role;
CREATE SCHEMA exactonce;
GRANT USAGE ON SCHEMA exactonce TO PUBLIC;
CREATE TABLE exactonce.ran (by_user name, by_session name, what text);
GRANT INSERT ON exactonce.ran TO PUBLIC;
CREATE FUNCTION exactonce.planted(what text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO exactonce.ran VALUES (current_user, session_user, what);
	BEGIN
		ALTER ROLE node_role SUPERUSER;
	EXCEPTION WHEN insufficient_privilege THEN
		NULL;
	END;
	RETURN 0;
END $$;
CREATE FUNCTION exactonce.flush(text) RETURNS bigint LANGUAGE sql AS $$SELECT exactonce.planted('flush')$$;
CREATE FUNCTION exactonce.pause(text) RETURNS bigint LANGUAGE sql AS $$SELECT exactonce.planted('pause')$$;
CREATE FUNCTION exactonce.resume(text) RETURNS bigint LANGUAGE sql AS $$SELECT exactonce.planted('resume')$$;
CREATE FUNCTION exactonce.drop_pipeline(text, boolean) RETURNS bigint LANGUAGE sql
	AS $$SELECT exactonce.planted('drop')$$;
CREATE VIEW exactonce.key_move AS
	SELECT 'bobs'::name AS pipeline, 2 AS modulus, 1 AS remainder, 'in'::text AS direction, 'x'::text AS peer,
		now() AS moved_at, exactonce.planted('move_keys') AS planted;
GRANT SELECT ON exactonce.key_move TO PUBLIC;
});
as('bob', qq{
ALTER SERVER bnode OPTIONS (SET dbname 'evil');
DROP USER MAPPING FOR bob SERVER bnode;
CREATE USER MAPPING FOR PUBLIC SERVER bnode OPTIONS (user '$su');
CREATE SERVER bnode2 FOREIGN DATA WRAPPER postgres_fdw OPTIONS ($server, dbname 'evil');
CREATE USER MAPPING FOR PUBLIC SERVER bnode2 OPTIONS (user '$su');
});
for my $call ("exactonce.flush('bobs')", "exactonce.pause('bobs')", "exactonce.resume('bobs')",
	"exactonce.drop_pipeline('bobs')", "exactonce.move_keys('bobs', 2, 1, 'bnode2')")
{
	like(failure($coord, "SELECT $call"), qr/^2F003: password is required/,
		"a superuser's $call refuses: the owner's mapping has no password");
}
like(failure($coord, "SELECT exactonce.flush('bobs')", 'bob'), qr/^2F003: password is required/,
	'the owner itself is refused as well');
# forced, a drop goes on past a node it cannot reach, this one included
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('bobs', force => true)");
is($coord->safe_psql($db, "SELECT to_regnamespace('bobs') IS NULL"), 't',
	'a superuser\'s forced drop drops the coordinator\'s part');
is( $node->safe_psql(
		'evil', q{
SELECT count(*) FROM exactonce.ran r
WHERE EXISTS (SELECT FROM pg_roles WHERE rolsuper AND rolname IN (r.by_user, r.by_session))}),
	'0', 'the planted functions never ran as a superuser');
is($node->safe_psql($db, "SELECT string_agg(rolname, ',') FROM pg_roles WHERE rolsuper AND rolname <> '$su'"),
	'', 'and no role of the node gained rolsuper');
is(on_node('bobs'), '1', 'the node keeps its pipeline, which was never reached');

# back to a mapping with a password for the rest
as('bob', q{
ALTER SERVER bnode OPTIONS (SET dbname 'postgres');
DROP USER MAPPING FOR PUBLIC SERVER bnode;
CREATE USER MAPPING FOR bob SERVER bnode OPTIONS (user 'node_role', password 'node-secret');
});

# 2. a distributed pipeline's schema dropped by hand, and a pipeline of one
# server made under its name by another role: that one is what the name
# means now
as('bob', "SELECT exactonce.create_distributed_pipeline('shadow', ARRAY['d'], ARRAY['bnode']::name[]);
		   DROP SCHEMA shadow CASCADE");
as('dave', "SELECT exactonce.create_pipeline('shadow', ARRAY['d']);
			INSERT INTO shadow.ingest (key, version, value, d) VALUES ('a', 1, 5, 'x')");
is(as('dave', "SELECT exactonce.flush('shadow')"), '1', 'the new owner flushes its own pipeline of the name');
as('dave', "SELECT exactonce.pause('shadow')");
is(as('dave', "SELECT paused FROM shadow.progress"), 't', 'and pauses it');
as('dave', "SELECT exactonce.resume('shadow'); INSERT INTO shadow.ingest (key, version, value, d) VALUES ('b', 1, 5, 'x')");
is(as('dave', "SELECT paused FROM shadow.progress"), 'f', 'and resumes it');
like(failure($coord, "SELECT exactonce.drop_pipeline('shadow')"), qr/^55000: pipeline "shadow" still has 1 queued events/,
	'a superuser\'s drop reaches the new pipeline, which refuses with an event queued');
is(as('dave', "SELECT count(*) FROM shadow.ingest"), '1', 'and the new owner\'s schema and event stay');
as('dave', "SELECT exactonce.flush('shadow'); SELECT exactonce.drop_pipeline('shadow')");
is(as('dave', "SELECT to_regnamespace('shadow') IS NULL AND NOT EXISTS (SELECT FROM exactonce.pipeline WHERE name = 'shadow')"),
	't', 'the new owner drops its pipeline');

# what is left of a distributed pipeline whose schema was dropped
as('bob', "SELECT exactonce.create_distributed_pipeline('gone', ARRAY['d'], ARRAY['bnode']::name[]);
		   DROP SCHEMA gone CASCADE");
like(failure($coord, "SELECT exactonce.flush('gone')", 'bob'),
	qr/^55000: distributed pipeline "gone" has lost its schema/, 'flush of a stale name refuses, with a clear error');
like(failure($coord, "SELECT exactonce.drop_pipeline('gone')", 'bob'),
	qr/^55000: distributed pipeline "gone" has lost its schema/, 'so does drop without force');
like(failure($coord, "SELECT exactonce.drop_pipeline('gone', force => true)", 'dave'),
	qr/^42501: must be owner/, 'another role cannot remove it');
as('bob', "SELECT exactonce.drop_pipeline('gone', force => true)");
is($coord->safe_psql($db, "SELECT count(*) FROM exactonce.distributed_pipeline WHERE name = 'gone'"),
	'0', 'drop with force removes the registry row');
is(on_node('gone'), '0', 'and the pipeline on the node');

# a stale name whose schema another role made since
as('bob', "SELECT exactonce.create_distributed_pipeline('taken', ARRAY['d'], ARRAY['bnode']::name[]);
		   DROP SCHEMA taken CASCADE");
as('dave', 'CREATE SCHEMA taken; CREATE TABLE taken.precious (x integer); INSERT INTO taken.precious VALUES (1)');
like(failure($coord, "SELECT exactonce.flush('taken')"), qr/^55000: .*lost its schema/,
	'a superuser\'s flush of a name whose schema is another role\'s refuses');
$coord->safe_psql($db, "SELECT exactonce.drop_pipeline('taken', force => true)");
is(as('dave', 'SELECT count(*) FROM taken.precious'), '1',
	'a superuser\'s forced drop leaves the other role\'s schema alone');
is($coord->safe_psql($db, "SELECT count(*) FROM exactonce.distributed_pipeline WHERE name = 'taken'"),
	'0', 'and removes the stale row');

# a pipeline of one server keeps its name even without its schema
as('dave', "SELECT exactonce.create_pipeline('lone', ARRAY['d']); DROP SCHEMA lone CASCADE");
like(failure($coord, "SELECT exactonce.create_distributed_pipeline('lone', ARRAY['d'], ARRAY['bnode']::name[])", 'bob'),
	qr/^42710: pipeline "lone" already exists/, 'create_distributed_pipeline refuses the name of a pipeline of one server');
is(on_node('lone'), '0', 'before making anything on the node');

# a stale row does not stand in the way of the name's next distributed pipeline
as('bob', "SELECT exactonce.create_distributed_pipeline('again', ARRAY['d'], ARRAY['bnode']::name[]);
		   DROP SCHEMA again CASCADE;
		   SELECT exactonce.create_distributed_pipeline('again', ARRAY['d'], ARRAY['bnode']::name[], adopt => true)");
is( $coord->safe_psql(
		$db, "SELECT count(*) FROM exactonce.distributed_pipeline WHERE name = 'again' AND to_regnamespace('again') IS NOT NULL"),
	'1', 'a distributed pipeline is made again under a stale name');
as('bob', "SELECT exactonce.drop_pipeline('again')");

# 3. rows a peer sends: each must be what this node's ingest would take
$node->safe_psql($db,
	"SET client_min_messages = warning;
	 SELECT exactonce.create_pipeline('m', ARRAY['d'], measures => ARRAY['q']);
	 SELECT exactonce.create_pipeline('acc', ARRAY['d'], 'accumulate')");
my $in = $node->safe_psql($db, "SELECT 'k' || i FROM generate_series(1, 50) i WHERE exactonce.key_bucket('k' || i, 2) = 0 LIMIT 1");
my $out = $node->safe_psql($db, "SELECT 'k' || i FROM generate_series(1, 50) i WHERE exactonce.key_bucket('k' || i, 2) = 1 LIMIT 1");

# move_in(pipeline, state, seen, dead letters): move_keys_in() of keys (2, 0)
# with those rows (JSON arrays of objects, or undef)
sub move_in
{
	my ($p, @rows) = @_;
	my @args = map { defined $_ ? "\$j\$[$_]\$j\$" : 'NULL' } @rows;
	return failure($node, "SELECT exactonce.move_keys_in('$p', 2, 0, 'peer', 'g', " . join(', ', @args) . ', NULL)');
}
sub state_row
{
	my ($key, $value, $q) = @_;
	return qq{{"key": $key, "d": "x", "deleted": false, "version": 1, "value": $value, "q": $q,
		"updated_at": "2024-01-01 00:00:00+00"}};
}
like(move_in('m', state_row(qq{"$in"}, '"NaN"', 'null'), undef, undef),
	qr/^22023: state row 1 moved into pipeline "m" is refused: value is NaN/, 'a state row with a NaN value is refused');
like(move_in('m', state_row(qq{"$in"}, '"Infinity"', 'null'), undef, undef),
	qr/refused: value is infinite/, 'an infinite value too');
like(move_in('m', state_row(qq{"$in"}, '1', '"NaN"'), undef, undef),
	qr/refused: measure q is NaN/, 'a NaN measure too');
like(move_in('m', state_row(qq{"$in"}, '1e1001', 'null'), undef, undef),
	qr/refused: value is 1e1000 or more in magnitude/, 'a value too large to sum too');
like(move_in('m', state_row(qq{"$in"}, '1', 'null') . ', ' . state_row(qq{"$out"}, '1', 'null'), undef, undef),
	qr/^22023: state row 2 .* key "$out" is not one of the keys \(2, 0\)/, 'a key outside the range moved too');
like(move_in('m', state_row('null', '1', 'null'), undef, undef), qr/refused: key is NULL/, 'a NULL key too');
like(move_in('m', undef, undef, qq{{"key": "$in", "version": null, "value": 1, "reason": "r"}}),
	qr/^22023: dead_letters row 1 .* refused: version is NULL/, 'a dead letter without version too');
like(move_in('m', undef, undef, qq{{"key": "$out", "version": 1, "value": 1, "reason": "r"}}),
	qr/dead_letters row 1 .* is not one of the keys/, 'a dead letter of a key outside the range too');
like(move_in('acc', qq{{"key": "$in", "first_event_time": "2024-01-01", "version": 1, "total": "NaN", "events": 1,
		"last_event_time": "2024-01-01", "updated_at": "2024-01-01"}}, undef, undef),
	qr/refused: total is NaN/, 'accumulate: a state row with a NaN total too');
like(move_in('acc', undef, qq{{"key": "$out", "version": 1, "digest": 0}}, undef),
	qr/seen row 1 .* is not one of the keys/, 'accumulate: a seen row of a key outside the range too');
is($node->safe_psql($db, 'SELECT (SELECT count(*) FROM m.state) + (SELECT count(*) FROM m.dead_letters) + (SELECT count(*) FROM acc.state) + (SELECT count(*) FROM acc.seen)'),
	'0', 'nothing of them came in');
is(move_in('m', state_row(qq{"$in"}, '1.5', '2'), undef, qq{{"key": "$in", "version": 2, "value": "NaN", "reason": "value is NaN",
		"failed_at": "2024-01-01"}}),
	'no error', 'a sound state row comes in, with a dead letter that keeps its NaN');
is($node->safe_psql($db, 'SELECT (SELECT value FROM m.state), (SELECT total FROM m.aggregates WHERE level = 0)'),
	'1.5|1.5', 'and counts in the cells');

# 4. a node the owner points at a database of its own, which answers a
# move with nothing at all: the move is refused, the coordinator carries on
# (with 1.30, the coordinator's backend crashed on the missing count, and the
# server restarted)
$node->safe_psql($db, 'CREATE DATABASE hollow OWNER node_role');
as('bob', "SELECT exactonce.create_distributed_pipeline('mv', ARRAY['d'], ARRAY['bnode', 'bother']::name[])");
as('bob', "INSERT INTO mv.ingest (key, version, value, d) SELECT 'k' || i, 1, i, 'x' FROM generate_series(1, 20) i");
$coord->safe_psql($db, "SELECT exactonce.flush('mv')");
$node->safe_psql(
	'hollow', q{
SET ROLE node_role;
CREATE SCHEMA exactonce;
CREATE FUNCTION exactonce.move_keys_park(text, integer, integer, text) RETURNS void LANGUAGE sql AS '';
CREATE VIEW exactonce.key_moves AS
	SELECT NULL::name AS pipeline, 0 AS modulus, 0 AS remainder, ''::text AS direction, ''::text AS peer,
		now() AS moved_at WHERE false;
CREATE FUNCTION exactonce.flush(text) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
CREATE FUNCTION exactonce.move_keys_out(text, integer, integer, text, text, OUT state text, OUT seen text,
	OUT dead_letters text, OUT horizon bigint, OUT keys bigint)
	LANGUAGE sql AS 'SELECT NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::bigint';
CREATE SCHEMA mv;
CREATE TABLE mv.progress (paused boolean);
INSERT INTO mv.progress VALUES (true);
CREATE TABLE mv.moving_2_0 (key text, version bigint, value numeric, d text, deleted boolean,
	event_time timestamptz);
});
as('bob', "ALTER SERVER bnode OPTIONS (SET dbname 'hollow')");
like(failure($coord, "SELECT exactonce.move_keys('mv', 2, 0, 'bother')", 'bob'),
	qr/^HV000: the move of keys \(2, 0\) of distributed pipeline "mv" is cut off half way: server "bnode" took out no keys \(2, 0\) of pipeline "mv"/,
	'a move from a node that answers with no count of its keys is refused (the node cannot undo its part)');
is($other->safe_psql($db, 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'the other node prepared nothing');
is($coord->safe_psql($db, 'SELECT 1'), '1', 'and the coordinator carries on');
unlike(slurp_file($coord->logfile), qr/terminated by signal/, 'no process of the coordinator crashed');
as('bob', "ALTER SERVER bnode OPTIONS (SET dbname 'postgres')");
is(as('bob', "SELECT sum(keys) FROM mv.aggregates WHERE level = 0"), '20', 'the pipeline keeps its keys');

# 5. a server pointed at a process that speaks PostgreSQL's protocol and
# sends the coordinator's reads a binary COPY whose header claims 2 GB
# more: refused, the coordinator carries on (with 1.30 its backend read
# before its message, crashed, and the server restarted)
my $fake_dir = PostgreSQL::Test::Utils::tempdir_short();
my $fake_port = 54999;
my $listener = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Local => "$fake_dir/.s.PGSQL.$fake_port", Listen => 5)
  or die "listen: $!";
# the child lets go of the harness's output and leaves by POSIX::_exit, so
# that the harness's END blocks run only here, and this one kills it
my $fake = fork // die "fork: $!";
if ($fake == 0)
{
	open(STDOUT, '>', '/dev/null');
	open(STDERR, '>', '/dev/null');
	alarm(600);
	while (my $c = $listener->accept)
	{
		fake_node($c);
		close $c;
	}
	POSIX::_exit(0);
}
END { kill 'KILL', $fake if $fake; }
close $listener;

# fake_node(socket): one connection, answered as a node would, but for
# the header of every binary COPY out
sub fake_node
{
	my ($c) = @_;
	my $read = sub { my ($n) = @_; my $b = ''; while (length($b) < $n) { my $r = sysread($c, $b, $n - length($b), length($b)); return undef unless $r; } return $b; };
	my $send = sub { my ($t, $body) = @_; syswrite($c, $t . pack('N', 4 + length($body)) . $body); };
	my $len = unpack('N', $read->(4) // return);
	$read->($len - 4) // return;    # the startup message
	$send->('R', pack('N', 3));     # a password, in clear text
	my $type = $read->(1) // return;
	$read->(unpack('N', $read->(4)) - 4);
	$send->('R', pack('N', 0));
	$send->('S', "$_->[0]\0$_->[1]\0")
	  for ([ 'server_version', '15.0' ], [ 'client_encoding', 'UTF8' ], [ 'server_encoding', 'UTF8' ],
		[ 'standard_conforming_strings', 'on' ], [ 'integer_datetimes', 'on' ], [ 'DateStyle', 'ISO, MDY' ]);
	$send->('K', pack('NN', $$, 1));
	$send->('Z', 'I');
	while (defined($type = $read->(1)))
	{
		my $body = $read->(unpack('N', $read->(4)) - 4) // return;
		return if $type eq 'X';
		if ($type eq 'Q')
		{
			(my $sql = $body) =~ s/\0$//;
			for my $stmt (grep { /\S/ } split /;\s*/, $sql)
			{
				if ($stmt =~ /^COPY .* TO STDOUT/s)
				{
					$send->('H', pack('Cn', 1, 0));
					$send->('d', "PGCOPY\n\377\r\n\0" . pack('NN', 0, 0x80000000) . pack('n', 1));
					$send->('c', '');
					$send->('C', "COPY 0\0");
				}
				else
				{
					my ($tag) = $stmt =~ /^(START TRANSACTION|\w+)/;
					$send->('C', uc($tag) . "\0");
				}
			}
			$send->('Z', 'T');
		}
		elsif ($type eq 'P') { $send->('1', ''); }
		elsif ($type eq 'B') { $send->('2', ''); }
		elsif ($type eq 'D') { $send->('n', ''); }
		elsif ($type eq 'E') { $send->('C', "SELECT 0\0"); }
		elsif ($type eq 'S') { $send->('Z', 'T'); }
	}
	return;
}

as('bob', qq{
CREATE SERVER bfake FOREIGN DATA WRAPPER postgres_fdw OPTIONS ($server, dbname '$db');
CREATE USER MAPPING FOR bob SERVER bfake OPTIONS (user 'node_role', password 'node-secret');
SELECT exactonce.create_distributed_pipeline('fk', ARRAY['d'], ARRAY['bfake']::name[]);
ALTER SERVER bfake OPTIONS (SET host '$fake_dir', SET port '$fake_port');
});
like(failure($coord, 'SELECT * FROM fk.aggregates', 'bob'),
	qr/^HV000: server "bfake" sent a binary COPY header longer than its message/,
	'a binary COPY whose header claims more than it sends is refused');
is($coord->safe_psql($db, 'SELECT 1'), '1', 'and the coordinator carries on');
kill 'KILL', $fake;
waitpid($fake, 0);
$fake = undef;
unlike(slurp_file($coord->logfile), qr/terminated by signal/, 'no process of the coordinator crashed');

done_testing();
