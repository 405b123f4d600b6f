#!/usr/bin/env bash
# test/fuzz.sh: the long fuzz run: test/t/010_fuzz.pl with more sqlsmith
# queries per role (default 50000; pass another number), through the same
# TAP harness.  Run it as root (it builds, installs and runs the test as the
# postgres OS user) or as a user who may install the extension.
set -euo pipefail
cd "$(dirname "$0")/.."
QUERIES=${1:-50000}
bash test/deps.sh
make -s
make -s install >/dev/null
DIR=${EXACTONCE_TEST_DIR:-/tmp/exactonce-fuzz}
rm -rf "$DIR"
mkdir -p "$DIR"
cp -r Makefile exactonce.control src sql expected test "$DIR"/
as_postgres=()
if [ "$(id -u)" = 0 ]; then
	chown -R postgres: "$DIR"
	as_postgres=(runuser -u postgres --)
fi
cd "$DIR"
"${as_postgres[@]}" env EXACTONCE_FUZZ_QUERIES="$QUERIES" PG_TEST_TIMEOUT_DEFAULT=600 \
	make -s tapcheck PROVE_TESTS=test/t/010_fuzz.pl PROVE_FLAGS='-I test/t -v'
