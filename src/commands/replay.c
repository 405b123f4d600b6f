/*-------------------------------------------------------------------------
 *
 * replay.c
 *		Dead letters sent back through the stages, once the cause is fixed.
 *
 * replay_dead_letters() deletes the chosen rows of dead_letters and takes
 * the events they hold through the three stages, in the caller's
 * transaction, holding the pipeline as flush() does: the rows go and the
 * events are applied together or not at all, so a replay happens once, and
 * a second replay finds nothing to send.  An event that fails again goes
 * back to dead_letters with its new reason.  The state stage counts each
 * event as it would from the queue; the events were counted as ingested and
 * dead-lettered when they first failed, so those two counters are moved
 * back by the number replayed: the accounting identity holds, with
 * dead_lettered moved to applied (or duplicates, stale) for each event
 * that now goes through.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/drain.h"
#include "engine/event.h"
#include "engine/progress.h"

PG_FUNCTION_INFO_V1(exactonce_replay_dead_letters);

/*
 * AppendReplayable appends the condition of a dead letter that holds a
 * whole event: key, version, value, deleted, event_time and the
 * dimensions an event brings.
 */
static void
AppendReplayable(StringInfo sql, Pipeline *p)
{
	appendStringInfoString(sql, "key IS NOT NULL AND version IS NOT NULL AND value IS NOT NULL"
						   " AND deleted IS NOT NULL AND event_time IS NOT NULL");
	for (int i = PIPELINE_FIRST_INPUT_DIM(p); i < p->ndims; i++)
		appendStringInfo(sql, " AND %s IS NOT NULL", quote_identifier(p->dims[i]));
}

/*
 * exactonce_replay_dead_letters sends the dead letters that pass filter (an
 * SQL expression over the columns of dead_letters, NULL: all) back through
 * the stages, and returns what became of them.
 */
Datum
exactonce_replay_dead_letters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const char *filter = "true";
	Pipeline   *p;
	int			nestlevel;
	int64		rotation,
				drain_rotation;
	bool		paused;
	int64		skipped;
	bool		isnull;
	StringInfoData sql;
	SPITupleTable *rows;
	int			n;
	Event	   *events;
	AttrNumber	attnums[EV_ATTNUMS];
	TupleTableSlot *slot;
	StageCounts counts = {0};
	StageCounts moved;
	Datum		values[6];
	bool		nulls[6] = {0};

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline must not be NULL")));
	if (!PG_ARGISNULL(1))
	{
		filter = text_to_cstring(PG_GETARG_TEXT_PP(1));
		(void) StatementParsePiece("SELECT 1 WHERE ", filter, "filter");
	}
	PipelineRequireReadCommitted("exactonce.replay_dead_letters()");
	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PipelineActAsOwner(p);
	ProgressLockAll(p, NULL, &rotation, &drain_rotation, &paused);

	/* a newline after the filter ends a trailing comment in it */
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT pg_catalog.count(*) FROM %s.dead_letters WHERE (%s\n) AND NOT (",
					 quote_identifier(p->name), filter);
	AppendReplayable(&sql, p);
	appendStringInfoChar(&sql, ')');
	if (SPI_execute(sql.data, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the dead letters of pipeline \"%s\"", p->name);
	skipped = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	resetStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s.dead_letters WHERE (%s\n) AND ",
					 quote_identifier(p->name), filter);
	AppendReplayable(&sql, p);
	appendStringInfoString(&sql, " RETURNING *");
	if (SPI_execute(sql.data, false, 0) != SPI_OK_DELETE_RETURNING)
		elog(ERROR, "could not take the dead letters of pipeline \"%s\"", p->name);
	rows = SPI_tuptable;
	n = (int) SPI_processed;

	events = palloc0(sizeof(Event) * Max(n, 1));
	EventAttnums(p, rows->tupdesc, attnums);
	slot = MakeSingleTupleTableSlot(rows->tupdesc, &TTSOpsHeapTuple);
	for (int i = 0; i < n; i++)
	{
		const char *missing;

		ExecStoreHeapTuple(rows->vals[i], slot, false);
		missing = EventFromSlot(p, slot, attnums, &events[i]);
		if (missing)
			elog(ERROR, "dead letter of pipeline \"%s\" has no %s", p->name, missing);
		events[i].ord = i;
	}
	ExecDropSingleTupleTableSlot(slot);

	DrainEvents(p, events, n, rotation, &counts);

	/* counted as ingested and dead-lettered when they first failed */
	moved = counts;
	moved.ingested -= n;
	moved.dead_lettered -= n;
	ProgressRecord(p, &moved, n > 0 ? 1 : 0, -1);

	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();

	values[0] = Int64GetDatum(n);
	values[1] = Int64GetDatum(counts.applied);
	values[2] = Int64GetDatum(counts.duplicates);
	values[3] = Int64GetDatum(counts.stale);
	values[4] = Int64GetDatum(counts.dead_lettered);
	values[5] = Int64GetDatum(skipped);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}
