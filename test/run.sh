#!/usr/bin/env bash
# test/run.sh: run every exactonce test, as CI does.
#
# Installs what is missing (Debian bookworm), checks that src/ is
# pgindent-clean, builds without warnings and that each header stands alone
# (make headerscheck: no file includes a header of a higher layer, calls
# in a circle, or is named for another; tools/layercheck), then
# builds and installs the
# extension with assertions (-DUSE_ASSERT_CHECKING), so that the tests
# exercise the invariants each function asserts, and runs, each through
# PostgreSQL's own harness and as the postgres OS user (test/as-postgres.sh):
#   - pg_regress (sql/, expected/) on a temporary instance with the library
#     preloaded, and on one without it (make regresscheck[-nopreload]);
#   - the isolation specs (test/isolation/), the same two ways
#     (make isolationcheck[-nopreload]);
#   - the TAP tests (test/t/, PostgreSQL::Test::Cluster; among them the
#     pgTAP suites of test/pgtap/, with and without the preload), through
#     make tapcheck;
#   - the Debian package: built, installed and its autopkgtest run
#     (test/package.sh), after which the build above is installed again;
# and prints one line: "N passed, N failed", counting every assertion (a
# pg_regress or isolation file counts one).  Exits non-zero if anything
# failed.  Each phase says when it starts and, when it ends, how many
# passed and failed in it and how long it took; the TAP phase also each
# test file as it ends.
set -uo pipefail
cd "$(dirname "$0")/.."

DIR=${EXACTONCE_TEST_DIR:-/tmp/exactonce-test}

bash test/deps.sh || exit 1

passed=0
failed=0
failures=()

# phase NAME: a phase starts; phase_end: what it passed and failed, and
# how long it took
phase() {
	phase_name=$1
	phase_start=$SECONDS
	phase_passed=$passed
	phase_failed=$failed
	echo "== $phase_name"
}
phase_end() {
	echo "== $phase_name: $((passed - phase_passed)) passed, $((failed - phase_failed)) failed, $((SECONDS - phase_start)) s"
}

# record NAME OK: one assertion
record() {
	if [ "$2" = ok ]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failures+=("$1")
	fi
}

# count_tap NAME OUTPUT RC: count "ok N" / "not ok N" lines of a TAP stream;
# a run that failed without a failing assertion counts as one failure
count_tap() {
	local name=$1 out=$2 rc=$3 ok notok
	ok=$(grep -c -E '^ *ok [0-9]+' <<<"$out")
	notok=$(grep -c -E '^ *not ok [0-9]+' <<<"$out")
	passed=$((passed + ok))
	failed=$((failed + notok))
	if [ "$rc" -ne 0 ] || [ "$notok" -ne 0 ]; then
		[ "$notok" -eq 0 ] && failed=$((failed + 1))
		failures+=("$name")
		echo "$out" | grep -v -E '^ *ok [0-9]+' | tail -80
	fi
}

# run_suite TARGET: a pg_regress or isolation target of the Makefile, on its
# temporary instance; one assertion per test file
run_suite() {
	local target=$1 dir=$DIR-$1 log
	log=$(bash test/as-postgres.sh "$dir" make -s "$target" 2>&1)
	while read -r name result; do
		record "$target/$name" "$result"
	done < <(sed -n -E 's/^(test| ) +([a-z0-9_]+) +\.\.\. +(ok|FAILED|failed).*/\2 \3/p' <<<"$log")
	if ! grep -q -E "^ *All [0-9]+ tests passed" <<<"$log"; then
		grep -q -E '\.\.\. +(FAILED|failed)' <<<"$log" || record "$target (did not run)" failed
		echo "$log" | tail -20
		cat "$dir"/test/*_out/regression.diffs 2>/dev/null | head -200
	fi
}

# 1. the tree: formatted as pgindent would, free of warnings
phase "the tree: pgindent, -Werror, headers"
out=$(tools/pgindent --check 2>&1)
record "pgindent --check" "$([ $? -eq 0 ] && echo ok || echo failed)"
[ -z "$out" ] || echo "$out" | head -100
make -s clean
make -s COPT=-Werror >/dev/null 2>&1
record "build with -Werror" "$([ $? -eq 0 ] && echo ok || echo failed)"
make -s headerscheck
record "headers stand alone, without a cycle" "$([ $? -eq 0 ] && echo ok || echo failed)"
phase_end

# 2. the build the tests run: with assertions
phase "the build with assertions, installed"
make -s clean
make -s COPT="-Werror -DUSE_ASSERT_CHECKING" || exit 1
make -s install >/dev/null || exit 1
phase_end

# 3. pg_regress and isolation, with and without the preload
for suite in regresscheck regresscheck-nopreload isolationcheck isolationcheck-nopreload; do
	phase "$suite"
	run_suite "$suite"
	phase_end
done

# 4. TAP tests, each starting clusters of its own; each file's count is
# printed as the next one starts
phase "TAP tests (test/t/, about half an hour)"
tap_log=$DIR-tap.log
: >"$tap_log"	# before tail follows it: the background job may not have made it yet
bash test/tap.sh "$DIR-tap" >>"$tap_log" 2>&1 &
tap_pid=$!
tail -n +1 -f --pid=$tap_pid "$tap_log" | awk '
	function done_file() { if (f != "") { printf "   %s: %d ok, %d not ok\n", f, ok, nok; fflush() } }
	/^test\/t\/[^ ]+\.pl \.\./ { done_file(); f = $1; ok = 0; nok = 0; next }
	/^ *ok [0-9]+/ { ok++ }
	/^ *not ok [0-9]+/ { nok++ }
	END { done_file() }'
wait $tap_pid
tap_rc=$?
out=$(cat "$tap_log")
count_tap "tap" "$out" $tap_rc
[ "$failed" -eq 0 ] || echo "TAP logs: $DIR-tap/tmp_check/log"
phase_end

# 5. the Debian package, then the tested build again
phase "the Debian package"
out=$(bash test/package.sh 2>&1)
count_tap "package" "$out" $?
make -s install >/dev/null || exit 1
phase_end

for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
