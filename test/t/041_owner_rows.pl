# A pipeline's owner changes rows of its own tables by hand while the
# workers drain: deletes the progress row, puts back a stale one, renumbers
# a shard row, puts NaN into a key's state, plants a trigger that skips the
# ledger's rows.  The workers refuse that pipeline (EO006, shown in
# last_error), apply nothing of it, and go on draining the other pipeline
# exactly; no backend crashes.  Each change put back, the pipeline drains
# what waited, exact against an oracle of the events sent.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('owner_rows');
eo_setup($node, $db);
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE ROLE rows_owner LOGIN;
GRANT CREATE ON DATABASE postgres TO rows_owner;
CREATE TABLE rows_truth (key text, version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, PRIMARY KEY (key, version));
GRANT ALL ON rows_truth TO rows_owner;
SET ROLE rows_owner;
SELECT exactonce.create_pipeline('byhand', ARRAY['risk_type', 'region', 'trade_desk'], shards => 2);
CREATE TABLE byhand.stale AS SELECT * FROM byhand.progress;
});
my $started = $node->safe_psql($db, 'SELECT pg_postmaster_start_time()');

# send(from, to, change): events from .. to of pipeline byhand (version 1
# of key h<i>, or a newer version of an older key), recorded in rows_truth,
# then the change, in one transaction as the owner
sub send_events
{
	my ($from, $to, $change) = @_;
	$node->safe_psql(
		$db, qq{
SET ROLE rows_owner;
BEGIN;
INSERT INTO rows_truth SELECT 'h' || (i % 300), i, i % 13, 'r' || (i % 3), 'g' || (i % 2), 'd' || (i % 5), false
	FROM generate_series($from, $to) i;
INSERT INTO byhand.ingest (key, version, value, risk_type, region, trade_desk)
	SELECT key, version, value, risk_type, region, trade_desk FROM rows_truth WHERE version BETWEEN $from AND $to;
$change;
COMMIT;
});
	return;
}

# refused(label, pattern): the workers refuse byhand with an error like
# pattern, while trades drains events sent meanwhile, exactly
my $round = 0;
sub refused
{
	my ($label, $pattern) = @_;
	ok( $node->poll_query_until(
			$db,
			"SELECT last_error LIKE '$pattern' FROM exactonce.pipelines WHERE name = 'byhand'"),
		"$label: the workers refuse the pipeline, saying why");
	$round++;
	eo_produce($node, $db, $round * 2000 + 1, $round * 2000 + 2000);
	ok(eo_wait_drained($node, $db), "$label: the other pipeline drains meanwhile");
	eo_check($node, $db, $label);
	is($node->safe_psql($db, "SELECT count(*) FROM byhand.ledger WHERE applied_at IS NULL"),
		'0', "$label: nothing of the refused pipeline is staged");
	return;
}

# restored(label): byhand drains what waited, exact, with no error left
sub restored
{
	my ($label) = @_;
	ok(eo_wait_drained($node, $db, 'byhand'), "$label, put back: the pipeline drains");
	ok( $node->poll_query_until(
			$db, "SELECT last_error IS NULL FROM exactonce.pipelines WHERE name = 'byhand'"),
		"$label, put back: no error is left");
	is(eo_mismatches($node, $db, 'byhand', 'rows_truth'), '0',
		"$label, put back: its aggregates equal the oracle");
	return;
}

send_events(1, 600, 'SELECT 1');
ok(eo_wait_drained($node, $db, 'byhand'), 'the pipeline drains before any change');

send_events(601, 1200,
	'CREATE TABLE byhand.saved AS SELECT * FROM byhand.progress; DELETE FROM byhand.progress');
refused('progress row deleted', '%exactonce touched 0 rows where it touches 1%');

# the row as it was when the pipeline was made, rotations ago: a shard that
# drained the partition it names would take the events there for drained
$node->safe_psql($db, 'SET ROLE rows_owner; INSERT INTO byhand.progress SELECT * FROM byhand.stale');
refused('a stale progress row put back', '%table byhand.shard does not hold what exactonce wrote%');
$node->safe_psql($db,
	'SET ROLE rows_owner; DELETE FROM byhand.progress; INSERT INTO byhand.progress SELECT * FROM byhand.saved');
restored('progress row deleted');

send_events(1201, 1800, 'UPDATE byhand.shard SET shard = shard + 10');
refused('shard rows renumbered', '%table byhand.shard does not hold what exactonce wrote%');
$node->safe_psql($db, 'SET ROLE rows_owner; UPDATE byhand.shard SET shard = shard - 10');
restored('shard rows renumbered');

send_events(1801, 2400,
	"CREATE TABLE byhand.was AS SELECT key, value FROM byhand.state WHERE key = 'h7';
	 UPDATE byhand.state SET value = 'NaN' WHERE key = 'h7'");
refused('NaN in a state', '%table byhand.state does not hold what exactonce wrote%');
$node->safe_psql($db,
	"SET ROLE rows_owner; UPDATE byhand.state s SET value = w.value FROM byhand.was w WHERE s.key = w.key");
restored('NaN in a state');

# a trigger that skips the ledger's rows: each batch the workers stage
# would vanish while state takes its events
send_events(2401, 3000,
	"CREATE FUNCTION byhand.skip() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN RETURN NULL; END \$\$;
	 CREATE TRIGGER skip BEFORE INSERT ON byhand.ledger FOR EACH ROW EXECUTE FUNCTION byhand.skip()");
refused('a trigger that skips the staged batches', '%table byhand.ledger does not hold what exactonce wrote%');
$node->safe_psql($db, 'SET ROLE rows_owner; DROP TRIGGER skip ON byhand.ledger');
restored('a trigger that skips the staged batches');

is($node->safe_psql($db, 'SELECT pg_postmaster_start_time()'), $started,
	'no backend crashed: the server never restarted');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal/, 'no process was terminated by a signal');

$node->stop;
done_testing();
