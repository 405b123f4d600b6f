/*-------------------------------------------------------------------------
 *
 * stats.c
 *		The exactonce.pipelines view: one row per pipeline with its counters,
 *		queue depth and lag.
 *
 * Counters live in each pipeline's progress row and move in the transaction
 * that does the work, so they survive restarts and crashes and always obey
 * ingested = applied + duplicates + stale + dead_lettered.  The view reads
 * them as the extension's owner, so that any role can monitor every pipeline
 * (as pg_stat_user_tables lets it) without rights on the pipelines' tables.
 *
 *-------------------------------------------------------------------------
 */
#include "exactonce.h"

#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(exactonce_pipeline_stats);

#define STATS_COLUMNS 18

/*
 * exactonce_pipeline_stats returns the rows of exactonce.pipelines.
 */
Datum
exactonce_pipeline_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SPITupleTable *registry;
	uint64		npipelines;
	Oid			save_userid;
	int			save_sec;
	int			nestlevel;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	nestlevel = SpiPinSearchPath();
	if (SPI_execute("SELECT name, mode, dimensions, owner FROM exactonce.pipeline ORDER BY name",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	registry = SPI_tuptable;
	npipelines = SPI_processed;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	for (uint64 i = 0; i < npipelines; i++)
	{
		HeapTuple	reg = registry->vals[i];
		Datum		values[STATS_COLUMNS];
		bool		nulls[STATS_COLUMNS];
		char	   *name = SPI_getvalue(reg, registry->tupdesc, 1);
		const char *s = quote_identifier(name);
		bool		isnull;

		memset(nulls, true, sizeof(nulls));
		for (int c = 0; c < 4; c++)
		{
			values[c] = SPI_getbinval(reg, registry->tupdesc, c + 1, &isnull);
			nulls[c] = isnull;
		}

		if (OidIsValid(get_namespace_oid(name, true)))
		{
			HeapTuple	tup;
			TupleDesc	desc;

			SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
								   save_sec | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
			if (SPI_execute(psprintf("SELECT pr.paused, q.n, q.oldest, now() - q.oldest,"
									 " pr.ingested, pr.applied, pr.duplicates, pr.stale,"
									 " pr.dead_lettered, pr.batches,"
									 " (SELECT count(*) FROM %s.ledger WHERE applied_at IS NULL),"
									 " pr.last_batch_at"
									 " FROM %s.progress pr,"
									 " (SELECT count(*) AS n, min(event_time) AS oldest FROM %s.ingest) q",
									 s, s, s), true, 1) != SPI_OK_SELECT || SPI_processed != 1)
				elog(ERROR, "could not read progress of pipeline \"%s\"", name);
			SetUserIdAndSecContext(save_userid, save_sec);
			tup = SPI_tuptable->vals[0];
			desc = SPI_tuptable->tupdesc;
			for (int c = 0; c < 12; c++)
			{
				values[4 + c] = SPI_getbinval(tup, desc, c + 1, &isnull);
				nulls[4 + c] = isnull;
			}
		}
		/* worker_pid and worker_state stay NULL: no worker serves it */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	SpiUnpinSearchPath(nestlevel);
	SPI_finish();
	return (Datum) 0;
}
