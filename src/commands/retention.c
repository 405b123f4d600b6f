/*-------------------------------------------------------------------------
 *
 * retention.c
 *		Forgetting what a pipeline keeps only to recognize resends, without
 *		ever counting an event twice.
 *
 * A pipeline keeps tombstones in state (latest mode) and every applied
 * (key, version) in seen (accumulate mode) so that a resend is recognized
 * however late it comes.  prune(pipeline, below_version) deletes the
 * tombstones, or the seen rows, of versions below a horizon, and records
 * the horizon, which never goes down.  From then on the state stage
 * dead-letters, with its reason, every event below the horizon that it can
 * no longer tell from a resend (BelowHorizon in state.c): in latest mode an
 * event below it of a key with no state row, in accumulate mode a (key,
 * version) below it that seen does not have.  Live keys keep their rows, so
 * their resends stay stale or duplicates.  The horizon is meant for
 * versions that grow with time (a timestamp, a log offset): it says "no
 * producer resends anything older than this".
 *
 * prune() also deletes dead letters older than an interval, if asked; the
 * counters keep counting them as dead-lettered, as they were.
 *
 * It runs in the caller's transaction and holds the pipeline (as flush()
 * does), so no batch runs between the rows deleted and the horizon set.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/progress.h"

PG_FUNCTION_INFO_V1(exactonce_prune);

/*
 * Delete runs one DELETE and returns how many rows it deleted.
 */
static int64
Delete(Pipeline *p, const char *sql, int nargs, Oid *types, Datum *values)
{
	if (SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not forget rows of pipeline \"%s\"", p->name);
	return (int64) SPI_processed;
}

/*
 * exactonce_prune deletes the tombstones (latest mode) or seen rows
 * (accumulate mode) of versions below below_version and raises the
 * pipeline's retention horizon to it, deletes dead letters older than
 * dead_letters_older_than if that is not NULL, and returns how many rows of
 * each it deleted.
 */
Datum
exactonce_prune(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Pipeline   *p;
	int			nestlevel;
	int64		rotation,
				drain_rotation;
	bool		paused;
	int64		horizon;
	int64		forgotten;
	int64		dead = 0;
	Oid			types[1];
	Datum		values[3];
	bool		nulls[3] = {0};
	const char *s;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(0) ? "pipeline" : "below_version")));
	horizon = PG_GETARG_INT64(1);
	PipelineRequireReadCommitted("exactonce.prune()");
	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	s = quote_identifier(p->name);
	PipelineActAsOwner(p);
	ProgressLockAll(p, NULL, &rotation, &drain_rotation, &paused);

	/* never below a horizon set before: what was forgotten stays forgotten */
	if (p->has_horizon)
		horizon = Max(horizon, p->horizon);
	types[0] = INT8OID;
	values[0] = Int64GetDatum(horizon);
	if (p->mode == PIPELINE_LATEST)
		forgotten = Delete(p, psprintf("DELETE FROM %s.state WHERE deleted AND version OPERATOR(pg_catalog.<) $1", s),
						   1, types, values);
	else
		forgotten = Delete(p, psprintf("DELETE FROM %s.seen WHERE version OPERATOR(pg_catalog.<) $1", s),
						   1, types, values);
	if (!PG_ARGISNULL(2))
	{
		types[0] = INTERVALOID;
		values[0] = PG_GETARG_DATUM(2);
		dead = Delete(p, psprintf("DELETE FROM %s.dead_letters"
								  " WHERE failed_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $1)", s),
					  1, types, values);
	}
	PipelineActAsCaller(p);
	PipelineSetHorizon(p, horizon);

	StatementUnpinSearchPath(nestlevel);
	SPI_finish();

	values[0] = Int64GetDatum(horizon);
	values[1] = Int64GetDatum(forgotten);
	values[2] = Int64GetDatum(dead);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}
