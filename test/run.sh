#!/usr/bin/env bash
# test/run.sh: run every exactonce test.
#
# Installs what is missing (Debian bookworm), builds and installs the
# extension, then:
#   - on a throwaway cluster with shared_preload_libraries = 'exactonce' (run
#     as the postgres OS user): the pg_regress suite (sql/, expected/), the
#     isolation specs (test/isolation/), the pgTAP suites (test/pgtap/) and
#     the scripted tests (test/scripts/, which restart or kill the server);
#   - on a second throwaway cluster without the preload, where flush() is
#     the driver: the pg_regress, isolation and pgTAP suites again;
#   - the TAP tests (test/t/, PostgreSQL::Test::Cluster, each on clusters of
#     its own) through "make tapcheck", as the postgres OS user;
# and prints one line: "N passed, N failed", counting every assertion.
# Exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

DIR=${EXACTONCE_TEST_DIR:-/tmp/exactonce-test}
PORT=${EXACTONCE_TEST_PORT:-54329}
DIR_NOPRELOAD=$DIR-nopreload
PORT_NOPRELOAD=$((PORT + 1))
DB=exactonce_test

bash test/deps.sh || exit 1
# the build must be free of warnings
make -s clean
make -s COPT=-Werror || exit 1
make -s install >/dev/null || exit 1

passed=0
failed=0
failures=()

# count "ok N" / "not ok N" lines of a TAP stream; a run that failed
# without a failing assertion counts as one failure
count_tap() {
	local name=$1 out=$2 rc=$3 ok notok
	ok=$(grep -c -E '^ *ok [0-9]+' <<<"$out")
	notok=$(grep -c -E '^ *not ok [0-9]+' <<<"$out")
	passed=$((passed + ok))
	failed=$((failed + notok))
	if [ "$rc" -ne 0 ] || [ "$notok" -ne 0 ]; then
		[ "$notok" -eq 0 ] && failed=$((failed + 1))
		failures+=("$name")
		echo "$out" | grep -v -E '^ *ok [0-9]+' | tail -60
	fi
}

# pg_regress (make regresscheck, sql/) or pg_isolation_regress (make
# isolationcheck, test/isolation/specs) against the cluster in
# PGHOST/PGPORT: one test per file
run_suite() {
	local kind=$1 label=$2 target=$3 diffs=$4 log=test/regress_out/$3-$2.log
	mkdir -p test/regress_out
	make -s "$target" >"$log" 2>&1
	while read -r name result; do
		if [ "$result" = ok ]; then
			passed=$((passed + 1))
		else
			failed=$((failed + 1))
			failures+=("$kind/$label/$name")
		fi
	done < <(sed -n -E 's/^(test| ) +([a-z0-9_]+) +\.\.\. +(ok|FAILED|failed).*/\2 \3/p' "$log")
	if grep -q "FAILED\|failed" "$log"; then
		head -200 "$diffs" 2>/dev/null
	fi
}

# pgTAP: every assertion counts
run_pgtap() {
	local label=$1 f out
	createdb "$DB"
	psql -X -q -d "$DB" -c "CREATE EXTENSION pgtap; CREATE EXTENSION exactonce;" >/dev/null
	for f in test/pgtap/*.sql; do
		[ -e "$f" ] || continue
		out=$(pg_prove -v -d "$DB" "$f" 2>&1)
		grep -q "^Result: PASS" <<<"$out"
		count_tap "pgtap/$label/$(basename "$f")" "$out" $?
	done
}

trap 'test/cluster.sh stop "$DIR" 2>/dev/null; test/cluster.sh stop "$DIR_NOPRELOAD" 2>/dev/null' EXIT

# 1. with the workers preloaded
test/cluster.sh start "$DIR" "$PORT" "exactonce.database = '$DB,${DB}2'" "exactonce.workers = 2" || {
	cat "$DIR/server.log" 2>/dev/null
	exit 1
}
export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres
export EXACTONCE_TEST_DIR=$DIR EXACTONCE_TEST_PORT=$PORT
run_suite regress preloaded regresscheck test/regress_out/regression.diffs
run_suite isolation preloaded isolationcheck test/isolation_out/regression.diffs
run_pgtap preloaded

# scripted tests: each prints TAP lines ("ok N - ..." / "not ok N - ...")
for f in test/scripts/*.sh; do
	[ -e "$f" ] || continue
	out=$(bash "$f" 2>&1)
	count_tap "scripts/$(basename "$f")" "$out" $?
done
test/cluster.sh stop "$DIR"

# 2. without the preload: the same suites, flush() draining
test/cluster.sh start "$DIR_NOPRELOAD" "$PORT_NOPRELOAD" "shared_preload_libraries = ''" || {
	cat "$DIR_NOPRELOAD/server.log" 2>/dev/null
	exit 1
}
export PGHOST=$DIR_NOPRELOAD PGPORT=$PORT_NOPRELOAD
run_suite regress nopreload regresscheck test/regress_out/regression.diffs
run_suite isolation nopreload isolationcheck test/isolation_out/regression.diffs
run_pgtap nopreload
test/cluster.sh stop "$DIR_NOPRELOAD"

# 3. TAP tests, each starting clusters of its own
TAPDIR=$DIR-tap
out=$(bash test/tap.sh "$TAPDIR" 2>&1)
count_tap "tap" "$out" $?
[ "$failed" -eq 0 ] || echo "TAP logs: $TAPDIR/tmp_check/log"

for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
