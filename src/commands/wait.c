/*-------------------------------------------------------------------------
 *
 * wait.c
 *		Read your writes: wait until what was committed is in the aggregates.
 *
 * wait_applied() takes a snapshot as it starts, without the caller's own
 * uncommitted rows, and waits until no row of the queue visible to it is
 * left for a shard to take.  A shard's position moves in the transaction
 * that takes its events through state and map and stages the batch; that
 * transaction applies it too, unless another worker held the pipeline's
 * reduce and was left the batch (DrainReduceOrLeave).  So the waiter then
 * waits until no batch a worker staged by then is left staged: then every
 * event committed before the call is in the aggregates.  Each transaction
 * that moves a position or the rotation on, or applies batches, broadcasts
 * a condition variable in shared memory as it commits
 * (WakeWaitersAtCommit), on which the waiter sleeps: it looks again only
 * when something changed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/ledger.h"
#include "engine/progress.h"
#include "engine/queue.h"
#include "utils/shmem.h"

PG_FUNCTION_INFO_V1(exactonce_wait_applied);

/*
 * CheckWaiter lets in a role that may insert into the queue or read the
 * aggregates: a producer waiting for its own events, or a reader.
 */
static void
CheckWaiter(Pipeline *p)
{
	Oid			aggregates = get_relname_relid("aggregates", p->nspid);

	if (pg_class_aclcheck(p->ingest, GetUserId(), ACL_INSERT) != ACLCHECK_OK &&
		(!OidIsValid(aggregates) ||
		 pg_class_aclcheck(aggregates, GetUserId(), ACL_SELECT) != ACLCHECK_OK))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to wait for pipeline \"%s\"", p->name),
				 errdetail("Waiting needs INSERT on %s.ingest or SELECT on %s.aggregates.",
						   p->name, p->name)));
}

/*
 * RequireNoInsert refuses to wait in a transaction that inserted into the
 * pipeline's queue: the workers cannot seal a queue partition while it has
 * an inserter in progress, so the events committed before the call that
 * share its partition would wait for this very transaction.
 */
static void
RequireNoInsert(Pipeline *p)
{
	Oid			rels[1 + EXACTONCE_PARTITIONS];

	rels[0] = p->ingest;
	for (int i = 0; i < EXACTONCE_PARTITIONS; i++)
		rels[1 + i] = p->partitions[i];
	for (int i = 0; i < lengthof(rels); i++)
	{
		LOCKTAG		tag;

		SET_LOCKTAG_RELATION(tag, MyDatabaseId, rels[i]);
		if (LockHeldByMe(&tag, RowExclusiveLock))
			ereport(ERROR,
					(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
					 errmsg("exactonce.wait_applied() cannot wait in a transaction that inserted into the queue of pipeline \"%s\"",
							p->name),
					 errdetail("The workers cannot take the queue's events while this transaction inserts into it."),
					 errhint("Commit the insert first, then call exactonce.wait_applied().")));
	}
}

/*
 * Unapplied counts the rows visible to before that a shard has still to
 * take, up to limit (0: all), or -1 while a partition is being truncated.
 * *last is the rotation that took inserts when before was taken (-1: not
 * read yet): the later partitions hold no row visible to it and are not
 * scanned.
 */
static int64
Unapplied(Pipeline *p, Snapshot before, int64 *last, bool *paused, int64 limit)
{
	QueuePosition shards[EXACTONCE_MAX_SHARDS];
	int64		rotation,
				drain_rotation;
	TimestampTz oldest;

	/* positions first: read before the rotation, they are never ahead of it */
	ProgressShardsRead(p, false, shards);
	ProgressRead(p, &rotation, &drain_rotation, paused);
	if (*last < 0)
		*last = rotation;
	return QueueDepth(p, Min(rotation, *last), drain_rotation, shards, before, &oldest, limit, NULL, NULL);
}

/*
 * exactonce_wait_applied waits until every event committed before the call
 * is in the pipeline's aggregates, or raises an error once timeout is over.
 */
Datum
exactonce_wait_applied(PG_FUNCTION_ARGS)
{
	Interval   *timeout;
	TimestampTz deadline;
	Snapshot	before;
	Pipeline   *p;
	int			nestlevel;
	int64		left;
	int64		staged = 0;
	int64		last = -1;
	bool		paused;
	TimestampTz taken_by = DT_NOEND;	/* when the queue was found through */

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(0) ? "pipeline" : "timeout")));
	timeout = PG_GETARG_INTERVAL_P(1);
	deadline = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
													   TimestampTzGetDatum(GetCurrentTimestamp()),
													   IntervalPGetDatum(timeout)));
	PipelineRequireReadCommitted("exactonce.wait_applied()");

	/*
	 * The events committed before the call: not the caller's own rows, which
	 * no worker can take before the caller commits.
	 */
	before = RegisterSnapshot(GetLatestSnapshot());
	before->curcid = FirstCommandId;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	CheckWaiter(p);
	RequireNoInsert(p);
	if (exactonce_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("exactonce.wait_applied() needs exactonce in shared_preload_libraries"),
				 errdetail("Without it no background worker drains the pipelines."),
				 errhint("Call exactonce.flush() to apply what is queued now.")));

	ConditionVariablePrepareToSleep(&exactonce_shared->applied);
	for (;;)
	{
		long		ms;
		TimestampTz now = GetCurrentTimestamp();

		/*
		 * each look in an SPI connection of its own, whose memory it frees;
		 * one row left is enough to go on waiting, and all are counted only
		 * for the error; once the queue is through, the batches staged by
		 * then
		 */
		ms = TimestampDifferenceMilliseconds(now, deadline);
		SPI_connect();
		PipelineActAsOwner(p);
		if (taken_by == DT_NOEND)
		{
			left = Unapplied(p, before, &last, &paused, ms > 0 ? 1 : 0);
			/* a transaction whose position that look saw began before */
			if (left == 0)
				taken_by = GetCurrentTimestamp();
		}
		if (taken_by != DT_NOEND)
		{
			left = 0;
			staged = LedgerStagedCount(p, EXACTONCE_SOURCE_QUEUE, taken_by);
		}
		PipelineActAsCaller(p);
		SPI_finish();
		if (left == 0 && staged == 0)
			break;
		if (ms <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_EXACTONCE_WAIT_TIMEOUT),
					 errmsg("events of pipeline \"%s\" not applied within the timeout", p->name),
					 staged > 0 ?
					 errdetail_plural(INT64_FORMAT " batch taken from the queue is staged and not applied yet%s.",
									  INT64_FORMAT " batches taken from the queue are staged and not applied yet%s.",
									  staged, staged, paused ? "; the pipeline is paused" : "") :
					 left > 0 ?
					 errdetail_plural(INT64_FORMAT " event committed before the call is still queued%s.",
									  INT64_FORMAT " events committed before the call are still queued%s.",
									  left, left, paused ? "; the pipeline is paused" : "") :
					 errdetail("A queue partition is being truncated%s.",
							   paused ? "; the pipeline is paused" : ""),
					 errhint("%s", paused ? "Resume it with exactonce.resume()." :
							 "exactonce.pipelines shows the workers and the lag; exactonce.flush() applies the queue now.")));
		(void) ConditionVariableTimedSleep(&exactonce_shared->applied, ms, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();

	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	UnregisterSnapshot(before);
	PG_RETURN_VOID();
}
