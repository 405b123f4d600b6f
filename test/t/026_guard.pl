# Preloaded, the library refuses an owner's ALTER TABLE of the columns the
# C code reads and writes (the type, a drop, a NOT NULL dropped), of the
# queue's check ingest_slot_open or its partitions before anything is
# altered, with SQLSTATE EO005; changing a column back to its own type and
# columns of the owner's own go through.  Without the preload the same
# ALTER succeeds, and every path then refuses the altered table (EO005)
# until it is changed back, preload or not; the workers log it and go on
# with the other pipelines, and no backend crashes.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('guard');
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
CREATE ROLE guard_owner LOGIN;
GRANT CREATE ON DATABASE postgres TO guard_owner;
SET ROLE guard_owner;
SELECT exactonce.create_pipeline('guarded', ARRAY['d'], measures => ARRAY['qty']);
SELECT exactonce.create_pipeline('other', ARRAY['d']);
SELECT exactonce.create_pipeline('nulled', ARRAY['d']);
INSERT INTO nulled.ingest (key, version, value, d) VALUES ('k', 1, 5, 'a');
SELECT exactonce.flush('nulled');
});

# sqlstate(sql): the SQLSTATE of a statement run as the owner, '' if none
sub sqlstate
{
	my ($sql) = @_;
	my ($rc, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\nSET ROLE guard_owner;\n$sql");
	return $err =~ /ERROR:  ([0-9A-Z]{5}):/ ? $1 : '';
}

is(sqlstate('ALTER TABLE guarded.state ALTER COLUMN value TYPE integer'),
	'EO005', 'a type change of a column exactonce touches is refused');
is(sqlstate('ALTER TABLE guarded.aggregates ALTER COLUMN qty_sum TYPE bigint'),
	'EO005', '... also of a measure\'s column');
is(sqlstate('ALTER TABLE guarded.ledger DROP COLUMN totals'),
	'EO005', 'a drop of such a column is refused');
is(sqlstate('ALTER TABLE guarded.progress ALTER COLUMN applied TYPE numeric, ADD COLUMN note text'),
	'EO005', 'one refused command refuses the whole ALTER');
is($node->safe_psql($db,
		"SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'guarded.progress'::regclass AND attname IN ('applied', 'note') ORDER BY attname"),
	'bigint', 'nothing of the refused ALTER was done');
is( sqlstate(
		'ALTER TABLE guarded.dead_letters ADD COLUMN note text;
		 ALTER TABLE guarded.dead_letters ALTER COLUMN note TYPE varchar;
		 ALTER TABLE guarded.dead_letters DROP COLUMN note'),
	'', 'columns of the owner\'s own change as the owner likes');
is(sqlstate('ALTER TABLE guarded.state ALTER COLUMN value TYPE numeric'),
	'', 'a column set to its own type goes through');

# the new type is the one the statement names in the owner's search_path,
# not in exactonce's: a domain of the owner's over numeric is another type,
# and one called numeric, found before pg_catalog's, another still
$node->safe_psql($db,
	'SET ROLE guard_owner; CREATE SCHEMA mine; CREATE DOMAIN mine.amount AS numeric;
	 CREATE DOMAIN mine."numeric" AS text');
is(sqlstate('SET search_path = mine, public; ALTER TABLE guarded.state ALTER COLUMN value TYPE amount'),
	'EO005', 'a type named by the owner\'s search_path is the owner\'s');
is(sqlstate('SET search_path = mine, pg_catalog; ALTER TABLE guarded.state ALTER COLUMN value TYPE "numeric"'),
	'EO005', 'a type that shadows numeric in the owner\'s search_path is refused');
is($node->safe_psql($db,
		"SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'guarded.state'::regclass AND attname = 'value'"),
	'numeric', 'the column is still numeric');

# a collation that is not deterministic would make two keys one
$node->safe_psql($db,
	"SET ROLE guard_owner; CREATE COLLATION mine.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)");
is(sqlstate('ALTER TABLE guarded.state ALTER COLUMN key TYPE text COLLATE mine.ci'),
	'EO005', 'a collation that is not deterministic is refused');
is(sqlstate('SET search_path = mine, public; ALTER TABLE guarded.ledger ALTER COLUMN source TYPE text COLLATE ci'),
	'EO005', '... also as the owner\'s search_path names it');
is(sqlstate('ALTER TABLE guarded.state ALTER COLUMN key TYPE text COLLATE "C"'),
	'', 'a deterministic one goes through');
is(sqlstate('ALTER TABLE guarded.aggregates ALTER COLUMN total TYPE numeric(12,1)'),
	'EO005', 'a type modifier, which would round what SQL writes there, is refused');
is(sqlstate('ALTER TABLE guarded.state SET UNLOGGED'),
	'EO005', 'a table of the pipeline made unlogged, which a crash would empty alone, is refused');
is(sqlstate('ALTER TABLE guarded.ingest_0_1 SET UNLOGGED'), 'EO005', '... a partition of its queue too');
is(sqlstate('CREATE TABLE guarded.mine (x int); ALTER TABLE guarded.mine SET UNLOGGED'),
	'', 'a table of the owner\'s own in the schema is the owner\'s to make unlogged');
is(sqlstate('ALTER TABLE guarded.state ALTER COLUMN value DROP NOT NULL'),
	'EO005', 'NOT NULL dropped from a column the C code reads as never null is refused');
is(sqlstate('ALTER TABLE guarded.ingest ALTER COLUMN key DROP NOT NULL'), 'EO005', '... in the queue too');
is(sqlstate('ALTER TABLE guarded.aggregates ALTER COLUMN d DROP NOT NULL'),
	'', 'a column made to allow nulls is left alone');
is(sqlstate('ALTER TABLE guarded.ingest DROP CONSTRAINT ingest_slot_open'),
	'EO005', 'the check that holds rows out of a sealed partition cannot be dropped');
is(sqlstate('ALTER TABLE guarded.ingest RENAME CONSTRAINT ingest_slot_open TO renamed'),
	'', 'it may be renamed');
is(sqlstate('ALTER TABLE guarded.ingest DROP CONSTRAINT renamed'), 'EO005', '... and is still refused');
is(sqlstate('ALTER TABLE guarded.ingest RENAME CONSTRAINT renamed TO ingest_slot_open'), '', '... and renamed back');
is(sqlstate('ALTER TABLE guarded.ingest DETACH PARTITION guarded.ingest_0'),
	'EO005', 'a partition of the queue cannot be detached');
is(sqlstate('ALTER TABLE guarded.ingest_1 DETACH PARTITION guarded.ingest_1_0'),
	'EO005', '... nor a shard\'s leaf');

# without the preload the ALTER is made; every path refuses the table
$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "''");
$node->restart;
is(sqlstate('ALTER TABLE guarded.state ALTER COLUMN value TYPE integer'),
	'', 'without the preload the owner can alter the column');
$node->safe_psql($db,
	"INSERT INTO guarded.ingest (key, version, value, d) VALUES ('k', 1, 1, 'a');
	 INSERT INTO other.ingest (key, version, value, d) VALUES ('k', 1, 1, 'a')");
is(sqlstate("SELECT exactonce.flush('guarded')"), 'EO005', 'flush refuses the altered table');

# a null where the C code reads none: until 1.30 a worker crashed on it,
# the server restarted, and the worker crashed again
is(sqlstate("ALTER TABLE nulled.state ALTER COLUMN value DROP NOT NULL;
	UPDATE nulled.state SET value = NULL"), '', 'without the preload NOT NULL can be dropped and a null written');
$node->safe_psql($db, "INSERT INTO nulled.ingest (key, version, value, d) VALUES ('k', 2, 7, 'b')");

# preloaded again: the workers refuse it too, and drain the other pipeline
$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "'exactonce'");
$node->restart;
$node->poll_query_until($db, "SELECT applied = 1 FROM exactonce.pipelines WHERE name = 'other'")
  or die 'the other pipeline was not drained';
$node->poll_query_until($db,
	"SELECT last_error LIKE '%has type integer, not numeric%' FROM exactonce.pipelines WHERE name = 'guarded'")
  or die 'no worker reported the altered table';
is($node->safe_psql($db, "SELECT applied FROM exactonce.pipelines WHERE name = 'guarded'"),
	'0', 'no worker applied an event to the altered table');
$node->poll_query_until($db,
	"SELECT last_error LIKE '%\"value\" of table \"nulled.state\" allows nulls%' FROM exactonce.pipelines WHERE name = 'nulled'")
  or die 'no worker reported the column that allows nulls';
is(sqlstate("UPDATE nulled.state SET value = 5; ALTER TABLE nulled.state ALTER COLUMN value SET NOT NULL"),
	'', 'the owner puts the value back and NOT NULL with it');
$node->poll_query_until($db, "SELECT applied = 2 FROM exactonce.pipelines WHERE name = 'nulled'")
  or die 'the repaired pipeline was not drained';
is($node->safe_psql($db, "SELECT d, total FROM nulled.aggregates WHERE level = 1"),
	'b|7', 'the repaired pipeline drains the new version');
is(sqlstate('ALTER TABLE guarded.state ALTER COLUMN value TYPE numeric'),
	'', 'the owner changes it back, preloaded');
$node->poll_query_until($db, "SELECT applied = 1 FROM exactonce.pipelines WHERE name = 'guarded'")
  or die 'the repaired pipeline was not drained';
is($node->safe_psql($db, "SELECT total FROM guarded.aggregates WHERE level = 0"),
	'1', 'the repaired pipeline drains what was queued');

# a superuser may turn the guard off for a session
is($node->psql($db,
		"SET exactonce.guard_columns = off; ALTER TABLE guarded.state ALTER COLUMN value TYPE integer;
		 ALTER TABLE guarded.state ALTER COLUMN value TYPE numeric"),
	0, 'a superuser can turn the guard off');
my ($rc, $out, $err) = $node->psql($db, 'SET ROLE guard_owner; SET exactonce.guard_columns = off');
isnt($rc, 0, 'a role that is not a superuser cannot');

unlike(slurp_file($node->logfile), qr/terminated by signal/, 'no backend crashed');
done_testing();
