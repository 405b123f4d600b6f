#!/usr/bin/env bash
# test/run.sh: run every exactonce test on a throwaway cluster.
#
# Installs what is missing (Debian bookworm), builds and installs the
# extension, starts a cluster as the postgres OS user with
# shared_preload_libraries = 'exactonce', runs the pg_regress suite (sql/,
# expected/), the pgTAP suites (test/pgtap/) and the scripted tests
# (test/scripts/, which restart or kill the server), stops the cluster and
# prints one line: "N passed, N failed".  Exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

DIR=${EXACTONCE_TEST_DIR:-/tmp/exactonce-test}
PORT=${EXACTONCE_TEST_PORT:-54329}
DB=exactonce_test

bash test/deps.sh || exit 1
make -s || exit 1
make -s install >/dev/null || exit 1

test/cluster.sh start "$DIR" "$PORT" "exactonce.database = '$DB,${DB}2'" "exactonce.workers = 2" || {
	cat "$DIR/server.log" 2>/dev/null
	exit 1
}
trap 'test/cluster.sh stop "$DIR"' EXIT
export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres
export EXACTONCE_TEST_DIR=$DIR EXACTONCE_TEST_PORT=$PORT

passed=0
failed=0
failures=()

# pg_regress: one test per file in sql/
mkdir -p test/regress_out
make -s installcheck >test/regress_out/installcheck.log 2>&1
while read -r name result; do
	if [ "$result" = ok ]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failures+=("regress/$name")
	fi
done < <(sed -n -E 's/^(test| ) +([a-z0-9_]+) +\.\.\. +(ok|FAILED|failed).*/\2 \3/p' test/regress_out/installcheck.log)
if grep -q "FAILED\|failed" test/regress_out/installcheck.log; then
	cat test/regress_out/regression.diffs 2>/dev/null | head -200
fi

# pgTAP: every assertion counts
createdb "$DB"
psql -X -q -d "$DB" -c "CREATE EXTENSION pgtap; CREATE EXTENSION exactonce;" >/dev/null
for f in test/pgtap/*.sql; do
	[ -e "$f" ] || continue
	out=$(pg_prove -v -d "$DB" "$f" 2>&1)
	ok=$(grep -c -E '^ *ok [0-9]+' <<<"$out")
	notok=$(grep -c -E '^ *not ok [0-9]+' <<<"$out")
	passed=$((passed + ok))
	failed=$((failed + notok))
	if ! grep -q "^Result: PASS" <<<"$out"; then
		[ "$notok" -eq 0 ] && failed=$((failed + 1))
		failures+=("pgtap/$(basename "$f")")
		echo "$out" | grep -v -E '^ *ok [0-9]+' | head -60
	fi
done

# scripted tests: each prints TAP lines ("ok N - ..." / "not ok N - ...")
for f in test/scripts/*.sh; do
	[ -e "$f" ] || continue
	out=$(bash "$f" 2>&1)
	rc=$?
	ok=$(grep -c -E '^ok [0-9]+' <<<"$out")
	notok=$(grep -c -E '^not ok [0-9]+' <<<"$out")
	passed=$((passed + ok))
	failed=$((failed + notok))
	if [ $rc -ne 0 ] || [ "$notok" -ne 0 ]; then
		[ "$notok" -eq 0 ] && failed=$((failed + 1))
		failures+=("scripts/$(basename "$f")")
		echo "$out" | grep -v -E '^ok [0-9]+' | tail -40
	fi
done

for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
