# The pgTAP suites (test/pgtap/*.sql): randomized runs of the stages against
# an oracle, each file in one session.  They run on a cluster with the
# workers preloaded and serving the database, and on one without the
# preload, where flush() is the only driver.  Every pgTAP assertion is one
# assertion here, and a file must run to its plan.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my @files = sort glob('test/pgtap/*.sql');
ok(@files > 0, 'pgTAP suites found');

for my $preload (1, 0)
{
	my $label = $preload ? 'preloaded' : 'nopreload';
	my $node = eo_node("pgtap_$label", preload => $preload);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pgtap; CREATE EXTENSION exactonce;');

	for my $file (@files)
	{
		my $name = "$label/" . (split m{/}, $file)[-1];
		my ($rc, $out, $err) = $node->psql(
			'postgres', undef,
			extra_params => [ '-v', 'ON_ERROR_STOP=1', '-f', $file ]);
		my ($plan) = $out =~ /^1\.\.(\d+)$/m;
		my $ran = 0;
		for my $line (split /\n/, $out)
		{
			next unless $line =~ /^(not )?ok (\d+)(?: - )?(.*)$/;
			$ran++;
			ok(!defined $1, "$name $2 $3");
		}
		is($rc, 0, "$name ran without error") or diag($err);
		ok(defined $plan && $ran == $plan,
			"$name ran its plan (" . ($plan // '?') . " planned, $ran ran)");
	}
	$node->stop;
}

done_testing();
