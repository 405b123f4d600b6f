# A producer's COPY into a coordinator's ingest, with the library preloaded
# there, is routed line by line by its key and parsed on the nodes
# (src/distributed/route.c): keys with tabs, newlines, backslashes, quotes
# and commas, in text and CSV, columns in another order and a client
# encoding other than the database's each reach the node of their hash
# partition (a line without a backslash in the default text format as it
# came, any other written anew from its fields), and the coordinator's
# aggregates equal the oracle computed from the same lines copied into a
# plain table; so do those of another delimiter.  COPY reports the rows it
# sent.  A field the node cannot parse fails the statement with the node's
# error, naming it, also from a server file, and nothing of the statement
# lands anywhere; with exactonce.route_copy off, the coordinator parses
# and refuses it itself.
# A COPY without every column (defaults made at the coordinator), one into
# an ingest with a trigger, and binary COPY go through PostgreSQL's COPY;
# one without the right to insert is refused; one rolled back leaves
# nothing on the nodes.  Routed COPYs go on while keys move between the
# nodes, and each key ends on the node of its range.  A partitioned table
# called ingest in a database without exactonce is left to PostgreSQL.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use ExactonceTest;

my $db = 'postgres';
my %utf8 = (init => { extra => [ '--encoding=UTF8', '--locale=C' ] });
my $coord = eo_node('coordinator', %utf8);
my @nodes = (eo_node('node1', %utf8), eo_node('node2', %utf8));
$_->safe_psql($db, 'CREATE EXTENSION exactonce') for @nodes;
my $user = $coord->safe_psql($db, 'SELECT current_user');
$coord->safe_psql($db, 'CREATE EXTENSION exactonce; CREATE EXTENSION postgres_fdw');
for my $i (0, 1)
{
	my $n = $nodes[$i];
	$coord->safe_psql($db,
		"CREATE SERVER node" . ($i + 1) . " FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '"
		  . $n->host . "', port '" . $n->port . "', dbname '$db');
		 CREATE USER MAPPING FOR CURRENT_USER SERVER node" . ($i + 1) . " OPTIONS (user '$user')");
}
$coord->safe_psql(
	$db, q{
SET client_min_messages = warning;
SELECT exactonce.create_distributed_pipeline('trades', ARRAY['risk_type', 'region', 'trade_desk'],
	ARRAY['node1', 'node2']::name[]);
CREATE TABLE truth (key text COLLATE "C", version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, event_time timestamptz);
});
my $cols = 'key, version, value, risk_type, region, trade_desk, deleted, event_time';

# COPY's text format of a field
sub text_field
{
	my ($s) = @_;
	$s =~ s/\\/\\\\/g;
	$s =~ s/\t/\\t/g;
	$s =~ s/\n/\\n/g;
	$s =~ s/\r/\\r/g;
	return $s;
}

# events(from, to): events from .. to over a few odd keys and k0 .. k299,
# every 5th sent twice, every 13th a tombstone, each a list of its fields
# in the order of $cols
my @odd = ("tab\tkey", "new\nline", "cr\rkey", "back\\slash", "\\N", "comma,key", "quote\"key", "caf\x{e9}");
sub events
{
	my ($from, $to) = @_;
	my @keys = (@odd, map { "k$_" } 0 .. 299);
	my @rows;
	for my $i ($from .. $to)
	{
		my @f = ($keys[ $i % @keys ], $i, sprintf('%.2f', ($i * 7919 % 100000) / 100),
			(qw(Delta Vega Gamma))[ $i % 3 ], (qw(AMER EMEA APAC))[ int($i / 3) % 3 ],
			(qw(FXSpot Rates Credit Equity))[ int($i / 7) % 4 ], ($i % 13 == 0 ? 't' : 'f'),
			'2026-11-28 10:00:00+00');
		push @rows, \@f;
		push @rows, \@f if $i % 5 == 0;
	}
	return \@rows;
}

# as_text(rows, order) and as_csv(rows, order): the rows, their fields in
# the order given, as COPY's text or CSV format writes them, in UTF-8
sub as_text
{
	my ($rows, $order) = @_;
	my $out = join('', map { join("\t", map { text_field($_) } @$_[@$order]) . "\n" } @$rows);
	utf8::encode($out);
	return $out;
}

sub as_csv
{
	my ($rows, $order) = @_;
	my $out = join('', map { join(',', map { (my $v = $_) =~ s/"/""/g; "\"$v\"" } @$_[@$order]) . "\n" } @$rows);
	utf8::encode($out);
	return $out;
}

# lines(from, to): events from .. to as text, in the order of $cols
sub lines
{
	my ($from, $to) = @_;
	return as_text(events($from, $to), [ 0 .. 7 ]);
}

# copy(sql, data): run a COPY FROM STDIN with its data; returns psql's
# exit code, what it printed ("COPY n") and its errors
sub copy
{
	my ($sql, $data, $pre) = @_;
	my ($rc, $out, $err) = $coord->psql($db, ($pre // '') . "\\set QUIET off\n$sql;\n$data\\.\n");
	return ($rc, $out, $err);
}

sub truth
{
	my ($data, $list) = @_;
	$coord->safe_psql($db, "COPY truth (" . ($list // $cols) . ") FROM STDIN;\n$data\\.\n");
	return;
}

sub drained
{
	for my $n (@nodes)
	{
		$n->poll_query_until($db, ExactonceTest::eo_drained_sql()) or return 0;
	}
	return 1;
}

# each node holds the keys of its hash partition, and only those
sub keys_placed
{
	my $ok = 1;
	for my $i (0, 1)
	{
		my $want = $coord->safe_psql($db,
			"SELECT md5(string_agg(key, '/' ORDER BY key)) FROM (SELECT DISTINCT key FROM truth
			 WHERE satisfies_hash_partition('trades.ingest'::regclass, 2, $i, key)) k");
		my $have = $nodes[$i]->safe_psql($db, "SELECT md5(string_agg(key, '/' ORDER BY key COLLATE \"C\")) FROM trades.state");
		$ok &&= $want eq $have;
	}
	return $ok;
}

# text, every column: routed
my $data = lines(1, 3000);
my ($rc, $out, $err) = copy("COPY trades.ingest ($cols) FROM STDIN", $data);
is($rc, 0, 'COPY of text through the coordinator') or diag($err);
is($out, 'COPY 3600', 'COPY reports every line it sent');
truth($data);
ok(drained(), 'the nodes drained');
is(eo_mismatches($coord, $db), '0', 'text: the aggregates equal the oracle');
ok(keys_placed(), 'text: each key, tabs, newlines, backslashes and all, is on the node of its partition');

# CSV with a header, the columns in another order
my $rows = events(3001, 4000);
($rc, $out, $err) = copy(
	"COPY trades.ingest (version, key, value, risk_type, region, trade_desk, deleted, event_time)
	 FROM STDIN (FORMAT csv, HEADER true)",
	"version,key,value,risk_type,region,trade_desk,deleted,event_time\n" . as_csv($rows, [ 1, 0, 2 .. 7 ]));
is($out, 'COPY 1200', 'CSV with a header and its columns in another order') or diag($err);
truth(as_text($rows, [ 0 .. 7 ]));
ok(drained(), 'the nodes drained');
is(eo_mismatches($coord, $db), '0', 'CSV: the aggregates equal the oracle');
ok(keys_placed(), 'CSV: each key is on the node of its partition');

# the client's encoding is not the database's
my $latin1 = "caf\xe9-latin1\t4001\t1.00\tDelta\tAMER\tFXSpot\tf\t2026-11-28 10:00:00+00\n";
($rc, $out, $err) = copy("COPY trades.ingest ($cols) FROM STDIN", $latin1, "SET client_encoding = 'LATIN1';\n");
is($out, 'COPY 1', 'COPY in LATIN1') or diag($err);
$coord->safe_psql($db, "INSERT INTO truth VALUES (U&'caf\\00e9-latin1', 4001, 1.00, 'Delta', 'AMER', 'FXSpot', false)");
ok(drained(), 'the nodes drained');
is(join('', map { $_->safe_psql($db, "SELECT count(*) FROM trades.state WHERE key = U&'caf\\00e9-latin1'") } @nodes),
	$coord->safe_psql($db, "SELECT satisfies_hash_partition('trades.ingest'::regclass, 2, 1, U&'caf\\00e9-latin1'::text)")
	  eq 't' ? '01' : '10',
	'a key sent in LATIN1 reaches its node in the database\'s encoding');

# another delimiter: a line without a backslash is not sent as it came (a
# tab in it is data, which the node's COPY would take for a delimiter)
my $piped = join('', map { "raw\ttab$_|" . (4100 + $_) . "|2.50|Vega|EMEA|Rates|f|2026-11-28 10:00:00+00\n" } 1 .. 20);
($rc, $out, $err) = copy("COPY trades.ingest ($cols) FROM STDIN (DELIMITER '|')", $piped);
is($out, 'COPY 20', 'COPY of text with another delimiter, tabs in its keys') or diag($err);
(my $piped_text = $piped) =~ s/\t/\\t/g;
$piped_text =~ s/\|/\t/g;
truth($piped_text);
ok(drained(), 'the nodes drained');
is(eo_mismatches($coord, $db), '0', 'another delimiter: the aggregates equal the oracle');
ok(keys_placed(), 'another delimiter: each key, its tab and all, is on the node of its partition');

# a field the node cannot parse: the node's error, nothing lands
my $bad = lines(5001, 5100);
$bad =~ s/2026-11-28 10:00:00\+00\n$/not a time\n/;
($rc, $out, $err) = copy("COPY trades.ingest ($cols) FROM STDIN", $bad);
like($err, qr/on server "node[12]".*invalid input syntax for type timestamp with time zone/s,
	'a bad field fails the COPY with the error of the node that parsed it');
($rc, $out, $err) = copy("COPY trades.ingest ($cols) FROM STDIN", $bad, "SET exactonce.route_copy = off;\n");
like($err, qr/invalid input syntax for type timestamp with time zone/,
	'with exactonce.route_copy off, the coordinator parses the field and refuses it');
unlike($err, qr/on server/, 'itself');
($rc, $out, $err) = copy("COPY trades.ingest ($cols) FROM STDIN", lines(5101, 5200), "BEGIN;\n");
$coord->safe_psql($db, 'SELECT 1');
is( join(',',
		map {
			$_->safe_psql($db,
				"SELECT (SELECT count(*) FROM trades.ingest WHERE version BETWEEN 5001 AND 5200)
				      + (SELECT count(*) FROM trades.state WHERE version BETWEEN 5001 AND 5200)")
		}
		  @nodes),
	'0,0',
	'nothing of the failed COPYs, nor of one whose transaction never commits, is on a node');

# a server file, for a role that may read them, goes the same way
my $badfile = $coord->basedir . '/bad.copy';
open(my $fh, '>', $badfile) or die;
print $fh $bad;
close $fh;
chmod 0644, $badfile;
($rc, $out, $err) = $coord->psql($db, "COPY trades.ingest ($cols) FROM '$badfile'");
like($err, qr/on server "node[12]".*invalid input syntax for type timestamp with time zone/s,
	'a COPY from a server file is routed too');

# every column or PostgreSQL's COPY: the defaults are the coordinator's
my $short = join('', map { "short$_\t$_\t2.50\tVega\tEMEA\tRates\n" } 1 .. 50);
($rc, $out, $err) = copy("COPY trades.ingest (key, version, value, risk_type, region, trade_desk) FROM STDIN", $short);
is($out, 'COPY 50', 'a COPY without every column goes through PostgreSQL\'s COPY') or diag($err);
truth($short, 'key, version, value, risk_type, region, trade_desk');
$coord->safe_psql($db, 'UPDATE truth SET deleted = false WHERE deleted IS NULL');

# binary, and an ingest with a trigger: PostgreSQL's COPY, the trigger fires
my $file = $coord->basedir . '/binary.copy';
$coord->safe_psql($db,
	"COPY (SELECT 'bin' || i, i::bigint, 3.25::numeric, 'Gamma', 'APAC', 'Credit', false, now() FROM generate_series(1, 40) i)
	 TO '$file' (FORMAT binary);
	 COPY trades.ingest ($cols) FROM '$file' (FORMAT binary);
	 INSERT INTO truth SELECT 'bin' || i, i, 3.25, 'Gamma', 'APAC', 'Credit', false FROM generate_series(1, 40) i;
	 CREATE TABLE fired (n int);
	 CREATE FUNCTION fire() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN INSERT INTO fired VALUES (1); RETURN NULL; END \$\$;
	 CREATE TRIGGER fire AFTER INSERT ON trades.ingest FOR EACH STATEMENT EXECUTE FUNCTION fire();");
$data = lines(6001, 6100);
($rc, $out, $err) = copy("COPY trades.ingest ($cols) FROM STDIN", $data);
is($out, 'COPY 120', 'a COPY into an ingest with a trigger') or diag($err);
truth($data);
is($coord->safe_psql($db, 'SELECT count(*) FROM fired'), '1', 'goes through PostgreSQL\'s COPY: the trigger fired');
$coord->safe_psql($db, 'DROP TRIGGER fire ON trades.ingest');
ok(drained(), 'the nodes drained');
is(eo_mismatches($coord, $db), '0', 'every path: the aggregates equal the oracle');

# routed COPYs go on while keys (4, 1) move from node2 to node1
my ($script, $moving) = ('', '');
for my $b (0 .. 19)
{
	my $d = lines(8001 + $b * 200, 8200 + $b * 200);
	$script .= "COPY trades.ingest ($cols) FROM STDIN;\n$d\\.\n";
	$moving .= $d;
}
my ($stdout, $stderr) = ('', '');
my $producer = IPC::Run::start([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $coord->connstr($db), '-f', '-' ],
	'<', \$script, '>', \$stdout, '2>', \$stderr);
$coord->safe_psql($db, "SELECT exactonce.move_keys('trades', 4, 1, 'node1')");
$producer->finish;
is($producer->result(0), 0, 'routed COPYs went on while keys moved') or diag($stderr);
truth($moving);
ok(drained(), 'the nodes drained');
is(eo_mismatches($coord, $db), '0', 'after the move: the aggregates equal the oracle');
my %ranges = (0 => '(2, 0), (4, 1)', 1 => '(4, 3)');
for my $i (0, 1)
{
	is(eo_keys_in_ranges($nodes[$i], $db, $ranges{$i}),
		't', 'every key of node' . ($i + 1) . " is in its ranges $ranges{$i}");
}
my $held = 0;
$held += $_->safe_psql($db, 'SELECT count(*) FROM trades.state') for @nodes;
is($held, $coord->safe_psql($db, 'SELECT count(DISTINCT key) FROM truth'), 'the nodes hold each key once');

# the rights to insert, as COPY checks them
$coord->safe_psql($db, 'CREATE ROLE reader; GRANT USAGE ON SCHEMA trades TO reader; GRANT INSERT (key) ON trades.ingest TO reader');
($rc, $out, $err) = copy("COPY trades.ingest ($cols) FROM STDIN", lines(7001, 7010), "SET ROLE reader;\n");
like($err, qr/permission denied for table ingest/, 'a role without the right to insert every column is refused');
ok(drained(), 'the nodes drained');
is(eo_mismatches($coord, $db), '0', 'and nothing of it landed');

# a table of that name elsewhere is PostgreSQL's: in a database without
# exactonce, partitions of postgres_fdw take the COPY
$coord->safe_psql($db, 'CREATE DATABASE other');
$coord->safe_psql(
	'other', qq{
CREATE EXTENSION postgres_fdw;
CREATE SERVER self FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '@{[ $coord->host ]}', port '@{[ $coord->port ]}', dbname 'other');
CREATE USER MAPPING FOR CURRENT_USER SERVER self OPTIONS (user '$user');
CREATE TABLE target (key text);
CREATE TABLE ingest (key text) PARTITION BY HASH (key);
CREATE FOREIGN TABLE ingest_0 PARTITION OF ingest FOR VALUES WITH (MODULUS 1, REMAINDER 0)
	SERVER self OPTIONS (table_name 'target');
});
($rc, $out, $err) = $coord->psql('other', "\\set QUIET off\nCOPY ingest FROM STDIN;\na\nb\nc\n\\.\n");
is($out, 'COPY 3', 'a COPY into another ingest of foreign tables, in a database without exactonce') or diag($err);
is($coord->safe_psql('other', 'SELECT string_agg(key, \',\' ORDER BY key) FROM target'), 'a,b,c', 'lands where PostgreSQL puts it');

$coord->stop;
$_->stop for @nodes;
done_testing();
