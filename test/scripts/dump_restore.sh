#!/usr/bin/env bash
# pg_dump and restore keep a pipeline working: its registry row, counters,
# state and aggregates, and the idempotency tokens already claimed.
set -u
. "$(dirname "$0")/lib.sh"
SRC=exactonce_dump_src
DST=exactonce_dump_dst
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $SRC" -c "DROP DATABASE IF EXISTS $DST" \
	-c "CREATE DATABASE $SRC" -c "CREATE DATABASE $DST" >/dev/null 2>&1
psql -X -q -d $SRC >/dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('d', ARRAY['x']);
INSERT INTO d.ingest (key, version, value, x) VALUES ('a', 1, 5, 'p'), ('b', 1, 7, 'q');
SELECT exactonce.flush('d');
SELECT exactonce.once('s', 't1');
SQL
pg_dump -d $SRC -f "$WORK/dump.sql"
ok $? "pg_dump of a database with a pipeline"
psql -X -q -d $DST -v ON_ERROR_STOP=1 -f "$WORK/dump.sql" >/dev/null 2>&1
ok $? "the dump restores without error"
is "$(q $DST "SELECT name || ' ' || ingested || ' ' || applied FROM exactonce.pipelines")" "d 2 2" "the pipeline and its counters are restored"
is "$(q $DST "SELECT exactonce.once('s', 't1')")" f "a token claimed before the dump stays claimed"
psql -X -q -d $DST -c "INSERT INTO d.ingest (key, version, value, x) VALUES ('a', 2, 6, 'p'), ('b', 1, 7, 'q')" >/dev/null
is "$(q $DST "SELECT exactonce.flush('d')")" 2 "the restored queue drains"
is "$(q $DST "SELECT string_agg(level || ':' || coalesce(x, '-') || '=' || total || '/' || keys, ' ' ORDER BY level, x) FROM d.aggregates")" \
	"0:-=13/2 1:p=6/1 1:q=7/1" "and the restored state still tells new versions from duplicates"
psql -X -q -d postgres -c "DROP DATABASE $SRC" -c "DROP DATABASE $DST" >/dev/null
