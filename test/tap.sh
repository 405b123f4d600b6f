#!/usr/bin/env bash
# test/tap.sh DIR [TEST...]: run the TAP tests (test/t/*.pl, or those named)
# with "make tapcheck" from a copy of the tree in DIR, as the postgres OS
# user when run as root (initdb refuses root).  The extension must be
# installed.  PG_TEST_TIMEOUT_DEFAULT (default 300) and
# EXACTONCE_FUZZ_QUERIES pass through to the tests.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
rm -rf "$dir"
mkdir -p "$dir"
cp -r Makefile exactonce.control src sql expected test "$dir"/
as_postgres=()
if [ "$(id -u)" = 0 ]; then
	chown -R postgres: "$dir"
	as_postgres=(runuser -u postgres --)
fi
cd "$dir"
exec "${as_postgres[@]}" env PG_TEST_TIMEOUT_DEFAULT="${PG_TEST_TIMEOUT_DEFAULT:-300}" \
	EXACTONCE_FUZZ_QUERIES="${EXACTONCE_FUZZ_QUERIES:-1500}" \
	make -s tapcheck PROVE_FLAGS='-I test/t -v' ${1:+PROVE_TESTS="$*"}
