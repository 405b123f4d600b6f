#!/usr/bin/env bash
# tools/feed-mirror.sh PIPELINE [CONSUMER]: a consumer of a pipeline's change
# feed, in SQL.  It keeps table public.feed_mirror equal to the pipeline's
# aggregates (level, cell, total, keys), exactly once: each transaction reads
# up to 1000 changes with exactonce.feed_read() and applies them to the
# mirror in the same transaction, so a consumer killed at any instant, or a
# transaction rolled back, leaves mirror and position together, and the next
# run goes on from there.
#
# Connection: the usual libpq variables (PGHOST, PGPORT, PGDATABASE, ...).
# Options (environment):
#   FEED_MIRROR_ONCE=1   stop once a read returns no change (default: read
#                        again a second later; a client library with LISTEN
#                        would wait for NOTIFY exactonce_feed instead)
# The pipeline's feed must be on: SELECT exactonce.set_feed('PIPELINE', true,
# notify => true).
set -euo pipefail

pipeline=${1:?usage: tools/feed-mirror.sh PIPELINE [CONSUMER]}
consumer=${2:-feed-mirror}
psql=(psql -X -q -At -v ON_ERROR_STOP=1 -v pipeline="$pipeline" -v consumer="$consumer")

"${psql[@]}" <<'SQL'
CREATE TABLE IF NOT EXISTS public.feed_mirror (
	pipeline text NOT NULL, level integer NOT NULL, cell text[] NOT NULL,
	total numeric NOT NULL, keys bigint NOT NULL, seq bigint NOT NULL,
	PRIMARY KEY (pipeline, level, cell));
SQL

while :; do
	# one batch: the changes and what they do to the mirror, in one transaction
	n=$("${psql[@]}" <<'SQL'
BEGIN;
CREATE TEMP TABLE changes ON COMMIT DROP AS
	SELECT * FROM exactonce.feed_read(:'pipeline', :'consumer', 1000);
DELETE FROM public.feed_mirror m USING
	(SELECT DISTINCT ON (level, cell) * FROM changes ORDER BY level, cell, seq DESC) c
WHERE m.pipeline = :'pipeline' AND m.level = c.level AND m.cell = c.cell AND c.new_keys = 0;
INSERT INTO public.feed_mirror
	SELECT :'pipeline', level, cell, new_total, new_keys, seq
	FROM (SELECT DISTINCT ON (level, cell) * FROM changes ORDER BY level, cell, seq DESC) c
	WHERE new_keys > 0
ON CONFLICT (pipeline, level, cell) DO UPDATE
	SET total = excluded.total, keys = excluded.keys, seq = excluded.seq;
SELECT count(*) FROM changes;
COMMIT;
SQL
)
	if [ "$n" = 0 ]; then
		[ "${FEED_MIRROR_ONCE:-0}" = 1 ] && exit 0
		sleep 1
	fi
done
