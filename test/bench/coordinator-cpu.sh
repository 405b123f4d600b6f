#!/usr/bin/env bash
# test/bench/coordinator-cpu.sh: what a producer's INSERT of 100 events
# through a coordinator costs the coordinator's backend, per statement,
# for each build of the library given, taking turns on this machine.  The
# coordinator and two nodes (test/bench/three-clusters.sh), the nodes'
# pipelines paused; one pgbench client runs test/bench/coordinator-load.sql
# (which inserts the 100 rows into a local table too) for SECS seconds
# (default 14), and the backend's CPU (from /proc) is divided by the
# statements committed between a look 2 s in and one 2 s before the end.
#
#   bash test/bench/coordinator-cpu.sh [ROUNDS] LIB.so...
#
# Run as root (it installs each library, the one given last stays), after
# "make install".
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=1
if [[ ${1:-} =~ ^[0-9]+$ ]]; then ROUNDS=$1; shift; fi
[ $# -gt 0 ] || { sed -n '2,14p' "$0"; exit 2; }
SECS=${SECS:-14}
BASE=/tmp/exactonce-coordinator-cpu; PORT0=55690
PGBIN=$(pg_config --bindir)
D=$BASE; P=$PORT0
. test/bench/cases.sh
source test/bench/three-clusters.sh
for i in 1 2; do psql_on "$BASE/${names[$i]}" $((PORT0 + i)) -c "SELECT exactonce.pause('dtrades')" >/dev/null; done
lib=$(pg_config --pkglibdir)/exactonce.so
# look: the backend's CPU (1/100 s) and the statements committed so far
look() { echo "$(cpu "$1") $(psql_on "${C[@]}" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'")"; }
for r in $(seq 1 "$ROUNDS"); do
	for so in "$@"; do
		cp "$so" "$lib.tmp" && mv -f "$lib.tmp" "$lib"
		for n in "${names[@]}"; do runuser -u postgres -- "$PGBIN/pg_ctl" -D "$BASE/$n/data" -l "$BASE/$n/server.log" -w restart >/dev/null; done
		( cd "$BASE" && PGHOST="${C[0]}" PGPORT="${C[1]}" pgbench -n -U postgres -c 1 -T "$SECS" -f load.sql postgres >"$BASE/pgbench.out" 2>&1 ) &
		sleep 2
		pid=$(psql_on "${C[@]}" -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'")
		read -r c0 x0 < <(look "$pid")
		sleep $((SECS - 4))
		read -r c1 x1 < <(look "$pid")
		wait
		printf 'round %d %-28s %8s statements/s  %s ms of the backend'"'"'s CPU per statement\n' "$r" "$so" \
			"$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$BASE/pgbench.out")" \
			"$(awk -v c=$((c1 - c0)) -v x=$((x1 - x0 - 2)) 'BEGIN { printf "%.3f", c * 10 / x }')"
	done
done
