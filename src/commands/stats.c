/*-------------------------------------------------------------------------
 *
 * stats.c
 *		The exactonce.pipelines view: one row per pipeline with its counters,
 *		queue depth and lag.
 *
 * Counters live in each pipeline's shard rows (what each shard drained)
 * and its progress row (what came in another way: replayed dead letters,
 * callers of the stages, moved keys), and move in the transaction that does
 * the work, so they survive restarts and crashes and always obey
 * ingested = applied + duplicates + stale + dead_lettered.  The view reads
 * them, with a fixed query, as each pipeline's owner (never as a superuser:
 * the tables are the owner's, and CheckOwnership has made sure they are
 * plain tables), so that any role can monitor every pipeline (as
 * pg_stat_user_tables lets it) without rights on the pipelines' tables.
 * The queue is counted without waiting for locks (QueueDepth), so the view
 * never waits behind a drain.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "utils/acl.h"
#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/resowner.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog/pipeline.h"
#include "catalog/shape.h"
#include "catalog/statement.h"
#include "engine/progress.h"
#include "engine/queue.h"
#include "utils/shmem.h"


PG_FUNCTION_INFO_V1(exactonce_pipeline_stats);

#define STATS_COLUMNS 22

/*
 * DoubleCmp orders doubles for qsort.
 */
static int
DoubleCmp(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/*
 * MsInterval turns milliseconds into an interval datum.
 */
static Datum
MsInterval(double ms)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = (TimeOffset) (ms * 1000.0);
	return IntervalPGetDatum(iv);
}

/*
 * StatsWorkerColumns fills worker_pid, worker_state, latency_p50, latency_p99 and
 * last_error of a pipeline from the slots of the workers that serve its
 * shards: the pid of shard 0's worker, "draining" if any of them drains it,
 * the latencies of all their recent batches, the error of a failing one.
 * A pipeline whose progress could not be read (its tables are missing, or
 * not what exactonce made) is "unreadable", whatever its workers do.
 */
static void
StatsWorkerColumns(int32 id, int nshards, bool paused, bool unreadable, Datum *values, bool *nulls)
{
	double		latencies[EXACTONCE_LATENCY_SAMPLES * EXACTONCE_MAX_SHARDS];
	int			nlatency = 0;
	bool		draining = false,
				backoff = false,
				waiting = false;

	/* without workers, say why: flush() is then what drains */
	values[1] = CStringGetTextDatum(unreadable ? "unreadable" : paused ? "paused" :
									exactonce_shared == NULL ? "not preloaded" : "no worker");
	nulls[1] = false;
	if (exactonce_shared == NULL)
		return;
	LWLockAcquire(exactonce_shared->lock, LW_SHARED);
	for (int s = 0; s < nshards; s++)
	{
		for (int i = 0; i < EXACTONCE_MAX_WORKERS; i++)
		{
			WorkerSlot *slot = &exactonce_shared->slots[i];
			PipelineStat *st = NULL;

			if (slot->pid == 0 || slot->dboid != MyDatabaseId || slot->nworkers == 0 ||
				!ShmemWorkerServes(id, s, slot->nworkers, slot->index))
				continue;
			if (nulls[0])
			{
				values[0] = Int32GetDatum(slot->pid);
				nulls[0] = false;
			}
			/* a worker serving several shards has one entry for them all */
			if (s >= slot->nworkers)
				break;
			for (int j = 0; j < EXACTONCE_WORKER_PIPELINES; j++)
				if (slot->pipes[j].id == id)
					st = &slot->pipes[j];
			draining |= slot->state == WORKER_DRAINING && slot->pipeline_id == id;
			if (st && st->retry_at > GetCurrentTimestamp())
			{
				backoff = true;
				waiting |= st->waiting;
			}
			if (st && st->failures > 0 && nulls[4])
			{
				values[4] = CStringGetTextDatum(st->last_error);
				nulls[4] = false;
			}
			if (st)
			{
				memcpy(&latencies[nlatency], st->latency_ms, sizeof(double) * st->nlatency);
				nlatency += st->nlatency;
			}
			break;
		}
	}
	LWLockRelease(exactonce_shared->lock);

	if (nulls[0])
		return;
	values[1] = CStringGetTextDatum(unreadable ? "unreadable" : paused ? "paused" :
									draining ? "draining" : waiting ? "waiting" :
									backoff ? "backoff" : "idle");
	nulls[1] = false;
	if (nlatency > 0)
	{
		qsort(latencies, nlatency, sizeof(double), DoubleCmp);
		values[2] = MsInterval(latencies[(nlatency - 1) / 2]);
		values[3] = MsInterval(latencies[(nlatency * 99 + 99) / 100 - 1]);
		nulls[2] = nulls[3] = false;
	}
}

/*
 * ReadProgress fills the columns paused .. last_batch_at of one pipeline
 * (StatsProgressColumns callback, in a subtransaction).
 */
typedef struct StatsProgress
{
	int32		id;
	Datum	   *values;
	bool	   *nulls;
} StatsProgress;

static void
ReadProgress(void *arg)
{
	StatsProgress *pr = arg;
	Pipeline   *p = PipelineLoadById(pr->id, SHAPE_MONITOR);
	const char *s;
	HeapTuple	tup;
	TupleDesc	desc;
	int64		depth;
	QueuePosition shards[EXACTONCE_MAX_SHARDS];
	TimestampTz oldest;
	bool		isnull;

	if (p == NULL)
		return;
	s = quote_identifier(p->name);

	/* as the pipeline's owner, whose tables these are (CheckOwnership) */
	PipelineActAsOwner(p);
	if (SPI_execute(psprintf("SELECT paused, c.ingested, c.applied, c.duplicates, c.stale,"
							 " c.dead_lettered, c.batches,"
							 " (SELECT count(*) FROM %s.ledger WHERE applied_at IS NULL),"
							 " c.last_batch_at, rotation, drain_rotation"
							 " FROM %s.progress, %s c", s, s, ProgressCounters(p)),
					true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read progress of pipeline \"%s\"", p->name);
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	ProgressShardsRead(p, false, shards);
	depth = QueueDepth(p, DatumGetInt64(SPI_getbinval(tup, desc, 10, &isnull)),
					   DatumGetInt64(SPI_getbinval(tup, desc, 11, &isnull)),
					   shards, NULL, &oldest, 0, NULL, NULL);
	PipelineActAsCaller(p);

	pr->values[4] = SPI_getbinval(tup, desc, 1, &isnull);
	pr->nulls[4] = false;
	pr->values[5] = Int64GetDatum(depth);
	pr->nulls[5] = depth < 0;
	if (depth >= 0 && oldest != DT_NOEND)
	{
		pr->values[6] = TimestampTzGetDatum(oldest);
		pr->values[7] = DirectFunctionCall2(timestamp_mi,
											TimestampTzGetDatum(GetCurrentTimestamp()),
											TimestampTzGetDatum(oldest));
		pr->nulls[6] = pr->nulls[7] = false;
	}
	for (int c = 0; c < 8; c++)
	{
		pr->values[8 + c] = SPI_getbinval(tup, desc, c + 2, &isnull);
		pr->nulls[8 + c] = isnull;
	}
}

/*
 * StatsProgressColumns reads one pipeline's progress into values; a pipeline
 * whose relations are broken keeps NULLs there and does not break the view.
 */
static void
StatsProgressColumns(int32 id, Datum *values, bool *nulls)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	StatsProgress pr = {id, values, nulls};

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		ReadProgress(&pr);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *err;

		MemoryContextSwitchTo(cxt);
		err = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		CurrentResourceOwner = owner;

		/* a cancel, a timeout or a shutdown is not about this pipeline */
		if (ERRCODE_TO_CATEGORY(err->sqlerrcode) == ERRCODE_TO_CATEGORY(ERRCODE_QUERY_CANCELED) ||
			ERRCODE_TO_CATEGORY(err->sqlerrcode) == ERRCODE_TO_CATEGORY(ERRCODE_OUT_OF_MEMORY))
			ReThrowError(err);
		for (int c = 4; c < 16; c++)
			nulls[c] = true;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
}

/*
 * exactonce_pipeline_stats returns the rows of exactonce.pipelines.
 */
Datum
exactonce_pipeline_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SPITupleTable *registry;
	uint64		npipelines;
	int			nestlevel;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	if (SPI_execute("SELECT name, mode, dimensions, owner, id, shards FROM exactonce.pipeline ORDER BY name",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	registry = SPI_tuptable;
	npipelines = SPI_processed;

	for (uint64 i = 0; i < npipelines; i++)
	{
		HeapTuple	reg = registry->vals[i];
		Datum		values[STATS_COLUMNS];
		bool		nulls[STATS_COLUMNS];
		char	   *name = SPI_getvalue(reg, registry->tupdesc, 1);
		bool		isnull;

		memset(nulls, true, sizeof(nulls));
		for (int c = 0; c < 4; c++)
		{
			values[c] = SPI_getbinval(reg, registry->tupdesc, c + 1, &isnull);
			nulls[c] = isnull;
		}

		if (OidIsValid(get_namespace_oid(name, true)))
			StatsProgressColumns(DatumGetInt32(SPI_getbinval(reg, registry->tupdesc, 5, &isnull)),
								 values, nulls);
		values[21] = SPI_getbinval(reg, registry->tupdesc, 6, &isnull);
		nulls[21] = false;
		StatsWorkerColumns(DatumGetInt32(SPI_getbinval(reg, registry->tupdesc, 5, &isnull)),
						   DatumGetInt32(values[21]), !nulls[4] && DatumGetBool(values[4]), nulls[4],
						   &values[16], &nulls[16]);

		/*
		 * an error can quote event data: the owner's, as
		 * pg_stat_activity.query is
		 */
		if (!nulls[20] &&
			!has_privs_of_role(GetUserId(), DatumGetObjectId(values[3])) &&
			!has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS))
			values[20] = CStringGetTextDatum("<insufficient privilege>");
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	return (Datum) 0;
}
