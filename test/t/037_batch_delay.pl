# exactonce.batch_delay: the workers rotate a pipeline's queue at most once
# in that time, so the events of many small transactions are drained in a
# few large batches.  A queue that sat idle rotates at once: with a delay
# of a minute, the first transaction is drained well within it.  With a
# delay of 3 s, ten producer transactions in about half a second take at
# most two rotations, where each would otherwise have had its own; every
# event counts once all the same; flush() does not wait for the delay; and
# with the delay set back to 0 an insert is drained as it comes.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('batch_delay', conf => "exactonce.batch_delay = '1min'\n");
eo_setup($node, $db);
is($node->safe_psql($db, 'SHOW exactonce.batch_delay'), '1min', 'the delay is set');

# a first transaction, drained at once, not after the delay: the queue sat
# idle
eo_produce($node, $db, 1, 200);
my $drained = 0;
for (1 .. 300)
{
	last if ($drained = $node->safe_psql($db, eo_drained_sql('trades')) eq 't');
	usleep(100_000);
}
ok($drained, 'the first events are drained within half the delay');

# a delay of 3 s from here on; it runs from the rotation just made
$node->safe_psql($db, q{ALTER SYSTEM SET exactonce.batch_delay = '3s'; SELECT pg_reload_conf()});
ok($node->poll_query_until($db, q{SELECT current_setting('exactonce.batch_delay') = '3s'}),
	'the delay is 3 s');
my $r0 = $node->safe_psql($db, 'SELECT rotation FROM trades.progress');

# ten transactions, about 50 ms apart
my $started = time;
for my $t (0 .. 9)
{
	eo_produce($node, $db, 201 + $t * 100, 300 + $t * 100);
	usleep(50_000);
}
my $took = sprintf("%.1f", time - $started);
ok(eo_wait_drained($node, $db, 'trades'), 'the ten transactions are drained');
my $rotations = $node->safe_psql($db, 'SELECT rotation FROM trades.progress') - $r0;
cmp_ok($rotations, '<=', 2 + int($took / 3),
	"ten transactions in ${took} s took $rotations rotations of the queue");
eo_check($node, $db, 'with a batch delay');

# flush() drains at once, whatever the delay
eo_produce($node, $db, 1201, 1300);
is( $node->safe_psql(
		$db, q{SELECT exactonce.flush('trades') >= 0;
SELECT queued FROM exactonce.pipelines WHERE name = 'trades'}), "t\n0",
	'flush() does not wait for the delay');
eo_check($node, $db, 'after a flush');

# without the delay, the next transactions are drained as they come
$node->safe_psql($db, q{ALTER SYSTEM SET exactonce.batch_delay = 0; SELECT pg_reload_conf()});
ok($node->poll_query_until($db, q{SELECT current_setting('exactonce.batch_delay') = '0'}),
	'the delay is off');
$r0 = $node->safe_psql($db, 'SELECT rotation FROM trades.progress');
for my $t (0 .. 4)
{
	eo_produce($node, $db, 1301 + $t * 100, 1400 + $t * 100);
	ok(eo_wait_drained($node, $db, 'trades'), "transaction $t drained before the next");
}
cmp_ok($node->safe_psql($db, 'SELECT rotation FROM trades.progress') - $r0,
	'>=', 5, 'each transaction had a rotation of its own');
eo_check($node, $db, 'without the delay');

$node->stop;
done_testing();
