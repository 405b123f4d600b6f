# Without shared_preload_libraries the library loads in any backend and the
# SQL interface works, flush() being the driver: on first use, through
# session_preload_libraries, with LOAD, and in a cluster whose preload was
# removed after its pipelines were made (and put back).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

# never preloaded: the library is loaded on first use
my $node = eo_node('no_preload', preload => 0);
my ($rc, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION exactonce');
is($rc, 0, 'CREATE EXTENSION without the preload') or diag($err);
eo_setup($node, 'postgres');
eo_produce($node, 'postgres', 1, 5000);
is( $node->safe_psql('postgres',
		"SELECT worker_state FROM exactonce.pipelines WHERE name = 'trades'"),
	'not preloaded',
	'the view says that no worker runs');
ok($node->safe_psql('postgres', "SELECT exactonce.flush('trades')") > 5000,
	'flush drains the queue');
eo_check($node, 'postgres', 'loaded on first use');
($rc, $out, $err) = $node->psql('postgres', "SELECT exactonce.wait_applied('trades', '1 second')");
like($err, qr/ERROR:  exactonce.wait_applied\(\) needs exactonce in shared_preload_libraries/,
	'wait_applied refuses at once: no worker would apply anything');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM exactonce.pipelines; SHOW exactonce.batch_size; SHOW exactonce.batch_memory"),
	"1\n100000\n128MB", 'once loaded, the settings of every backend exist');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT count(*) FROM exactonce.pipelines; SHOW exactonce.workers");
isnt($rc, 0, 'the postmaster-only settings do not exist without the preload');

# session_preload_libraries: every new session loads it
$node->append_conf('postgresql.conf',
	"session_preload_libraries = 'exactonce'");
$node->reload;
($rc, $out, $err) = $node->psql('postgres', 'SELECT 1');
is($out, '1', 'a session starts with session_preload_libraries') or diag($err);
eo_produce($node, 'postgres', 5001, 8000);
$node->safe_psql('postgres', "SELECT exactonce.flush('trades')");
eo_check($node, 'postgres', 'session_preload_libraries');
($rc, $out, $err) = $node->psql('postgres', "LOAD 'exactonce'; SELECT 1");
is($out, '1', 'LOAD in a session that has the library');
$node->stop;

# preloaded with pipelines, then the preload removed, then put back
my $pre = eo_node('preload_removed');
eo_setup($pre, 'postgres');
eo_produce($pre, 'postgres', 1, 5000);
eo_wait_drained($pre, 'postgres');
eo_check($pre, 'postgres', 'preloaded');
$pre->adjust_conf('postgresql.conf', 'shared_preload_libraries', "''");
$pre->restart;
($rc, $out, $err) = $pre->psql('postgres', 'SELECT count(*) FROM exactonce.pipelines');
is($out, '1', 'after the preload is removed, sessions use the library')
  or diag($err);
eo_produce($pre, 'postgres', 5001, 9000);
is( $pre->safe_psql('postgres',
		"SELECT worker_state FROM exactonce.pipelines WHERE name = 'trades'"),
	'not preloaded',
	'the view says that no worker runs');
$pre->safe_psql('postgres', "SELECT exactonce.flush('trades')");
eo_check($pre, 'postgres', 'preload removed, flush');
eo_produce($pre, 'postgres', 9001, 12000);
$pre->adjust_conf('postgresql.conf', 'shared_preload_libraries', "'exactonce'");
$pre->restart;
ok(eo_wait_drained($pre, 'postgres'), 'with the preload back, the workers drain what queued meanwhile');
eo_check($pre, 'postgres', 'preload put back');
$pre->stop;

done_testing();
