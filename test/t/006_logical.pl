# Logical replication into a queue: a subscription whose target is the
# pipeline's ingest table (rows routed by the queue, their ingest_id and
# ingest_slot from the queue's defaults) drains every event once; a
# publisher that sends ingest_slot would put rows where the queue does not
# take them, and is refused.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';

# the publisher: plain tables of the same names, no exactonce
my $pub = PostgreSQL::Test::Cluster->new('publisher');
$pub->init(allows_streaming => 'logical');
$pub->start;
$pub->safe_psql(
	$db, q{
CREATE SCHEMA trades;
CREATE TABLE trades.ingest (key text NOT NULL, version bigint NOT NULL, value numeric NOT NULL,
	risk_type text NOT NULL, region text NOT NULL, trade_desk text NOT NULL,
	deleted boolean NOT NULL DEFAULT false, event_time timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE truth (key text, version bigint, value numeric, risk_type text, region text,
	trade_desk text, deleted boolean, PRIMARY KEY (key, version));
CREATE TABLE sent (n bigint NOT NULL);
CREATE PUBLICATION events FOR TABLE trades.ingest, truth, sent;
});

my $sub = eo_node('subscriber');
eo_setup($sub, $db);
eo_produce($pub, $db, 1, 10000);    # before the subscription: the initial copy
$sub->safe_psql($db,
	"CREATE SUBSCRIPTION events CONNECTION 'host=" . $pub->host . " port=" . $pub->port
	  . " dbname=$db' PUBLICATION events");
$sub->poll_query_until($db,
	"SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')")
  or die 'initial copy did not finish';
eo_produce($pub, $db, 10001, 30000);    # streamed by the apply worker
$pub->wait_for_catchup('events');
ok(eo_wait_drained($sub, $db), 'the workers drain what the subscription brought');
eo_check($sub, $db, 'subscription into the queue');

# a publisher whose rows carry ingest_slot, naming the partition that does
# not take inserts on the subscriber
my $closed = 1 - $sub->safe_psql($db, "SELECT exactonce.ingest_slot('trades')");
$pub->safe_psql($db,
	"ALTER TABLE trades.ingest ADD COLUMN ingest_slot integer NOT NULL DEFAULT $closed");
my $offset = -s $sub->logfile;
$pub->safe_psql($db,
	"INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk) VALUES ('x', 1, 1, 'a', 'b', 'c')");
ok($sub->wait_for_log(qr/queue partition $closed of pipeline "trades" does not take inserts now/, $offset),
	'a replicated row for the partition that does not take inserts is refused');
is($sub->safe_psql($db, "SELECT count(*) FROM trades.ingest WHERE key = 'x'"),
	'0', 'and not queued');

$sub->stop;
$pub->stop;
done_testing();
