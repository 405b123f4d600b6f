#!/usr/bin/env bash
# test/tap.sh DIR [TEST...]: run the TAP tests (test/t/*.pl, or those named)
# with "make tapcheck" in a copy of the tree in DIR (test/as-postgres.sh).
# The extension must be installed.  PG_TEST_TIMEOUT_DEFAULT (default 300)
# and the tests' EXACTONCE_* sizes pass through.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
exec bash test/as-postgres.sh "$dir" env PG_TEST_TIMEOUT_DEFAULT="${PG_TEST_TIMEOUT_DEFAULT:-300}" \
	EXACTONCE_FUZZ_QUERIES="${EXACTONCE_FUZZ_QUERIES:-1500}" \
	make -s tapcheck PROVE_FLAGS='-I test/t -v' ${1:+PROVE_TESTS="$*"}
