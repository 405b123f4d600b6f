#!/usr/bin/env bash
# test/fuzz.sh [QUERIES]: the long fuzz run, test/t/010_fuzz.pl with QUERIES
# sqlsmith queries per role (default 50000), through the same TAP harness.
# Run it as root (it installs what is missing, builds and installs the
# extension, and runs the test as the postgres OS user).
set -euo pipefail
cd "$(dirname "$0")/.."
bash test/deps.sh
make -s
make -s install >/dev/null
EXACTONCE_FUZZ_QUERIES=${1:-50000} PG_TEST_TIMEOUT_DEFAULT=600 \
	bash test/tap.sh "${EXACTONCE_TEST_DIR:-/tmp/exactonce-fuzz}" test/t/010_fuzz.pl
