#!/usr/bin/env bash
# test/as-postgres.sh DIR COMMAND...: run COMMAND in a fresh copy of the
# tree in DIR, as the postgres OS user when run as root (initdb, which
# pg_regress --temp-instance and the TAP tests run, refuses root).  Every
# test command that starts a cluster goes through here.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
rm -rf "$dir"
mkdir -p "$dir"
cp -r Makefile exactonce.control src sql expected test tools "$dir"/
cd "$dir"
if [ "$(id -u)" = 0 ]; then
	chown -R postgres: "$dir"
	exec runuser -u postgres -- "$@"
fi
exec "$@"
