# exactonce.database is checked when it is set: a list that is not one, or
# that names a database twice, is reported in the server log with the
# setting named and why, and the default is used instead, as PostgreSQL
# does for any extension's setting read from postgresql.conf.  A good list
# starts the workers of each database it names.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $node = eo_node('settings');
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->stop;

for my $case (
	[ q{'postgres, postgres'}, qr/Database "postgres" is listed twice/ ],
	[ q{'postgres,,other'},    qr/List syntax is invalid/ ],
	[ q{'"postgres'},          qr/List syntax is invalid/ ])
{
	my ($value, $detail) = @$case;
	$node->append_conf('postgresql.conf', "exactonce.database = $value\n");
	my $log_offset = -s $node->logfile;
	$node->start;
	my $log = slurp_file($node->logfile, $log_offset);
	like($log, qr/invalid value for parameter "exactonce.database"/,
		"exactonce.database = $value is refused, naming the setting");
	like($log, $detail, '... and saying why');
	is($node->safe_psql('postgres', 'SHOW exactonce.database'),
		'postgres', '... and the default is used instead');
	$node->stop;
}

$node->append_conf('postgresql.conf', "exactonce.database = 'postgres, other'\n");
$node->start;
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(DISTINCT datname) = 2 FROM pg_stat_activity WHERE backend_type = 'exactonce drain'"
	),
	'a good list starts the workers of each database');
$node->stop;

done_testing();
