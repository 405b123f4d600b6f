/*-------------------------------------------------------------------------
 *
 * drain.c
 *		Drive events from the queue through state, map and reduce.
 *
 * Each batch runs its state and map stages in a subtransaction.  When that
 * fails, the subtransaction rolls back and nothing of the batch remains:
 *	 - a transient failure (injected fault, serialization failure, deadlock,
 *	   lock timeout) is retried, with backoff, a bounded number of times and
 *	   then raised, so the whole transaction rolls back and runs again later;
 *	   a worker does not wait out a lock, though: it gives the pipeline up at
 *	   once and serves the others (its lock_timeout is short);
 *	 - a failure about the data (classes 22 and 23) is retried once, then
 *	   the batch is split in halves, down to single events, and an event
 *	   that fails alone is a poison event: it goes to dead_letters with the
 *	   error message;
 *	 - anything else (a cancel, a missing right, a full disk) ends the
 *	   transaction: it is about the environment, not about the events.
 * Nothing is lost either way, and a poison event never blocks its queue.
 *
 * The shard's queue position and the counters move in the transaction that
 * applies the batch, so after a crash the batch is either wholly done or not
 * at all.
 *
 * Batch size adapts to the load.  A batch takes what is queued for its
 * shard, up to a limit: at a low rate that is a few events, for latency.
 * With a backlog, each full batch doubles the shard's limit, up to
 * exactonce.batch_size, because a large batch writes a key that comes back
 * within it once and its cells once, for throughput; a batch whose memory
 * exceeded exactonce.batch_memory halves it, since cells, not events, drive
 * memory.  Memory is thus bounded by the batch, never by the backlog.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/drain.h"
#include "engine/event.h"
#include "engine/feed.h"
#include "engine/ledger.h"
#include "engine/map.h"
#include "engine/progress.h"
#include "engine/queue.h"
#include "engine/reduce.h"
#include "engine/state.h"
#include "utils/fault.h"
#include "utils/subxact.h"

/* exactonce.batch_size, exactonce.batch_memory (kB), exactonce.batch_delay (ms) */
static int	exactonce_batch_size = 100000;
static int	exactonce_batch_delay = 0;
static int	exactonce_batch_memory = 131072;

/* the first limit of a shard, and the smallest that memory may force */
#define BATCH_FIRST			10000
#define BATCH_SMALLEST		1000

/* The batch limit of a shard of a pipeline in this process. */
typedef struct BatchLimit
{
	int32		id;				/* hash key: pipeline and shard */
	int32		shard;
	int			limit;
} BatchLimit;

static HTAB *batch_limits = NULL;

/* One context for every batch of the process's life, reset for each. */
static MemoryContext batch_cxt = NULL;

#define TRANSIENT_RETRIES	8
#define DATA_RETRIES		1

/* the counts of a step that moves the queue on without taking events */
static const StageCounts no_counts = {0};

/* When this worker first saw each pipeline's queue at its rotation. */
typedef struct RotationSeen
{
	int32		pipeline_id;	/* hash key */
	int64		rotation;
	TimestampTz at;
} RotationSeen;

static HTAB *rotations_seen = NULL;

/*
 * DrainInit registers exactonce.batch_size, batch_delay and batch_memory.
 */
void
DrainInit(void)
{
	DefineCustomIntVariable("exactonce.batch_size",
							"Maximum number of events taken from a queue in one batch.",
							"Workers pick up a new value on reload; a session may set its own for flush().",
							&exactonce_batch_size,
							100000, 1, 1000000,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("exactonce.batch_delay",
							"How long the workers let a queue gather events before they take them.",
							"The workers rotate a pipeline's queue at most once in this time: larger batches cost less per event, at up to this much latency. 0 takes events as they come.",
							&exactonce_batch_delay,
							0, 0, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("exactonce.batch_memory",
							"Memory a batch may use before the next batch of its shard is made smaller.",
							"Batches grow toward exactonce.batch_size while they stay within this.",
							&exactonce_batch_memory,
							131072, 1024, MAX_KILOBYTES,
							PGC_USERSET,
							GUC_UNIT_KB,
							NULL, NULL, NULL);
}

/*
 * BatchLimitOf returns the adaptive batch limit of a shard (see the file
 * header), kept for the life of the process.
 */
static int *
BatchLimitOf(Pipeline *p, int shard)
{
	BatchLimit	key = {p->id, shard, 0};
	BatchLimit *bl;
	bool		found;

	if (batch_limits == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = 2 * sizeof(int32);
		ctl.entrysize = sizeof(BatchLimit);
		batch_limits = hash_create("exactonce batch limits", 16, &ctl,
								   HASH_ELEM | HASH_BLOBS);
	}
	bl = hash_search(batch_limits, &key, HASH_ENTER, &found);
	if (!found)
		bl->limit = BATCH_FIRST;
	bl->limit = Min(bl->limit, exactonce_batch_size);
	return &bl->limit;
}

/*
 * BatchMemory is the memory a batch holds once reduced: its events, deltas
 * and cells, and the transaction's (SPI's statements and their results).
 */
static Size
BatchMemory(void)
{
	return MemoryContextMemAllocated(batch_cxt, true) +
		MemoryContextMemAllocated(TopTransactionContext, true);
}

/*
 * BatchAdapt sets a shard's next limit from the batch just reduced: halved
 * if it used more than exactonce.batch_memory, doubled if it was full and
 * used less than half of it.
 */
static void
BatchAdapt(int *limit, int64 taken, Size used)
{
	Size		budget = (Size) exactonce_batch_memory * 1024;

	if (used > budget)
		*limit = Max(*limit / 2, Min(BATCH_SMALLEST, exactonce_batch_size));
	else if (taken >= *limit && used < budget / 2)
		*limit = Min(*limit * 2, exactonce_batch_size);
	elog(DEBUG1, "exactonce batch of " INT64_FORMAT " events used %zu kB; next limit %d",
		 taken, used / 1024, *limit);
}

/*
 * IsTransient tells whether an error may go away when the work is retried.
 */
static bool
IsTransient(int sqlerrcode)
{
	return sqlerrcode == ERRCODE_EXACTONCE_INJECTED_FAULT ||
		sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ||
		sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED ||
		(sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE && !IsBackgroundWorker);
}

/*
 * MustPropagate tells whether an error must end the transaction rather than
 * be retried here: anything that is neither transient nor about the data of
 * the batch (data exceptions, class 22, and integrity violations, class 23)
 * says something about the environment -- a cancel, a missing right, a full
 * disk -- and must not turn good events into dead letters.
 */
static bool
MustPropagate(int sqlerrcode)
{
	int			class = ERRCODE_TO_CATEGORY(sqlerrcode);

	return !IsTransient(sqlerrcode) &&
		class != ERRCODE_TO_CATEGORY(ERRCODE_DATA_EXCEPTION) &&
		class != ERRCODE_TO_CATEGORY(ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION);
}

/*
 * SleepBeforeRetry sleeps before retry number attempt (1, 2, ...): 10 ms doubling up
 * to one second, interruptible.
 */
static void
SleepBeforeRetry(int attempt)
{
	long		ms = 10L << Min(attempt - 1, 7);

	CHECK_FOR_INTERRUPTS();
	pg_usleep(Min(ms, 1000L) * 1000L);
	CHECK_FOR_INTERRUPTS();
}

/*
 * Retryable tells whether an error leaves the transaction to go on: one
 * that may go away, or one about the batch's data.
 */
static bool
Retryable(int sqlerrcode)
{
	return !MustPropagate(sqlerrcode);
}

/* A batch on its way through state and map. */
typedef struct BatchWork
{
	Pipeline   *p;
	Event	   *events;
	int			n;
	int64		rotation;
	StageCounts counts;
} BatchWork;

/*
 * DrainStateAndMap runs stages 1 and 2 on a batch (SubxactRun callback).
 */
static void
DrainStateAndMap(void *arg)
{
	BatchWork  *b = arg;
	int			ndeltas;
	Delta	   *deltas;
	uint8		token[EXACTONCE_TOKEN_LEN];

	memset(&b->counts, 0, sizeof(StageCounts));
	deltas = StateApply(b->p, b->events, b->n, &ndeltas, &b->counts);
	MapStage(b->p, deltas, ndeltas, EXACTONCE_SOURCE_QUEUE, b->rotation, token);
}

/*
 * AddCounts adds the counts of a batch to a total.
 */
static void
AddCounts(StageCounts *total, const StageCounts *c)
{
	total->ingested += c->ingested;
	total->applied += c->applied;
	total->duplicates += c->duplicates;
	total->stale += c->stale;
	total->dead_lettered += c->dead_lettered;
}

/*
 * ProcessBatch applies a batch through state and map, retrying and splitting
 * as the file header describes.
 */
static void
ProcessBatch(Pipeline *p, Event *events, int n, int64 rotation, StageCounts *counts)
{
	int			transient = 0;
	int			data = 0;

	BatchWork	b = {p, events, n, rotation};

	for (;;)
	{
		ErrorData  *err = SubxactRun(DrainStateAndMap, &b, Retryable);

		if (err == NULL)
		{
			AddCounts(counts, &b.counts);
			return;
		}
		if (IsTransient(err->sqlerrcode))
		{
			if (++transient > TRANSIENT_RETRIES)
				ReThrowError(err);
			SleepBeforeRetry(transient);
			continue;
		}
		if (++data <= DATA_RETRIES)
		{
			SleepBeforeRetry(data);
			continue;
		}
		if (n == 1)
		{
			DeadLetter	dl = {events, psprintf("error: %s", err->message)};

			EventDeadLetters(p, &dl, 1);
			counts->ingested++;
			counts->dead_lettered++;
			return;
		}
		ProcessBatch(p, events, n / 2, rotation, counts);
		ProcessBatch(p, events + n / 2, n - n / 2, rotation, counts);
		return;
	}
}

/*
 * DrainReduce runs stage 3 on all staged batches (SubxactRun callback).
 */
static void
DrainReduce(void *arg)
{
	ReduceApply((Pipeline *) arg, (Datum) 0, false);
}

/*
 * DrainReduceWithRetry runs stage 3, retrying transient failures.
 */
static void
DrainReduceWithRetry(Pipeline *p)
{
	for (int attempt = 1;; attempt++)
	{
		ErrorData  *err = SubxactRun(DrainReduce, p, Retryable);

		if (err == NULL)
			return;
		if (!IsTransient(err->sqlerrcode) || attempt > TRANSIENT_RETRIES)
			ReThrowError(err);
		SleepBeforeRetry(attempt);
	}
}

/* The progress row, as a worker locks it. */
typedef struct DrainProgressRow
{
	Pipeline   *p;
	int64		rotation;
	int64		drain_rotation;
	bool		paused;
} DrainProgressRow;

/*
 * DrainLockProgress locks and reads the progress row (SubxactRun callback).
 */
static void
DrainLockProgress(void *arg)
{
	DrainProgressRow *row = arg;

	ProgressLock(row->p, &row->rotation, &row->drain_rotation, &row->paused);
}

/*
 * IsLockTimeout tells whether an error is a lock wait given up.
 */
static bool
IsLockTimeout(int sqlerrcode)
{
	return sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE;
}

/*
 * DrainLockProgressPatiently is ProgressLock for the workers.  The shards of a
 * pipeline hold its progress row from reduce to commit, which is short; a
 * caller may hold it for long (a flush, pause() in a transaction left open,
 * a prepared transaction).  So the worker waits on the row lock, woken the
 * moment its holder ends, but no longer than its lock_timeout (about a
 * second); then it gives up with an error that names the holder
 * (ProgressHeld), backs off this pipeline and serves the others.
 */
static void
DrainLockProgressPatiently(Pipeline *p, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	DrainProgressRow row = {p, 0, 0, false};

	if (SubxactRun(DrainLockProgress, &row, IsLockTimeout) != NULL)
		ProgressHeld(p);
	*rotation = row.rotation;
	*drain_rotation = row.drain_rotation;
	*paused = row.paused;
}

/*
 * DrainReduceOrLeave reduces the batch a step staged, with the others staged,
 * unless another worker holds the progress row: then it leaves the batch
 * staged for that worker, which looks for staged batches once it has
 * committed (DrainFinish), and this one commits without waiting its turn.
 * For anyone else it waits, as a drain does.
 */
static void
DrainReduceOrLeave(Pipeline *p)
{
	int64		rotation,
				drain_rotation;
	bool		paused;

	if (!ProgressTryLock(p, &rotation, &drain_rotation, &paused))
	{
		if (ProgressHeldByWorker(p))
			return;
		DrainLockProgressPatiently(p, &rotation, &drain_rotation, &paused);
	}
	DrainReduceWithRetry(p);
}

/*
 * DrainApplyLeft applies the batches workers left staged (DrainReduceOrLeave),
 * with any others staged, as a worker would: for a caller that holds the
 * pipeline (ProgressLockAll) and wants its aggregates to hold all that state
 * does: pause(), verify(), a move of keys.
 */
void
DrainApplyLeft(Pipeline *p)
{
	Assert(p->progress_locked);
	if (LedgerStagedCount(p, EXACTONCE_SOURCE_QUEUE, DT_NOEND) > 0)
		DrainReduceWithRetry(p);
}

/*
 * DrainBatch takes up to max events of a shard from the partition of
 * pos->rotation, after pos, through state and map, adding what happened to
 * counts.  It moves pos past the rows it read; when the batch comes up short
 * the partition is exhausted for the shard.
 */
static DrainResult
DrainBatch(Pipeline *p, int shard, QueuePosition *pos, int max, StageCounts *counts)
{
	MemoryContext old;
	Event	   *events;
	DrainResult r = {false, 0, DT_NOEND, false, false, false};

	/* its first 8 MB stay allocated: a batch does not fault them in anew */
	if (batch_cxt == NULL)
		batch_cxt = AllocSetContextCreate(TopMemoryContext, "exactonce batch",
										  8 * 1024 * 1024, 8 * 1024 * 1024,
										  8 * 1024 * 1024);
	MemoryContextReset(batch_cxt);
	old = MemoryContextSwitchTo(batch_cxt);
	events = palloc(sizeof(Event) * max);

	CHECK_FOR_INTERRUPTS();
	r.taken = QueueReadBatch(p, shard, pos, max, events);
	for (int i = 0; i < r.taken; i++)
		r.oldest = Min(r.oldest, events[i].event_time);
	if (r.taken > 0)
		ProcessBatch(p, events, (int) r.taken, pos->rotation, counts);
	r.exhausted = r.taken < max;
	r.worked = r.taken > 0 || r.exhausted;
	MemoryContextSwitchTo(old);
	return r;
}

/*
 * DrainSlot drains a partition for one shard from pos to its end, batch by
 * batch, adding what happened to counts and the batches to *batches, and
 * returns the number of events taken.
 */
static int64
DrainSlot(Pipeline *p, int shard, QueuePosition *pos, StageCounts *counts, int64 *batches)
{
	int64		total = 0;
	int		   *limit = BatchLimitOf(p, shard);

	/*
	 * Each batch is reduced at once, in an SPI connection of its own whose
	 * memory goes with it, so that memory is bounded by the batch, not by the
	 * backlog.
	 */
	for (;;)
	{
		DrainResult r;

		SPI_connect();
		r = DrainBatch(p, shard, pos, *limit, counts);
		if (r.taken > 0)
		{
			DrainReduceWithRetry(p);
			(*batches)++;
		}
		BatchAdapt(limit, r.taken, BatchMemory());
		SPI_finish();
		total += r.taken;
		if (r.exhausted)
			return total;
	}
}

/*
 * DrainPipeline takes every committed event of the queue through the three
 * stages, in this transaction, and returns how many it took.  The pipeline
 * and its queue are locked for the rest of the transaction.
 */
int64
DrainPipeline(Pipeline *p)
{
	QueuePosition shards[EXACTONCE_MAX_SHARDS];
	int64		rotation,
				drain_rotation;
	bool		paused;
	int64		total = 0;

	ProgressLockAll(p, shards, &rotation, &drain_rotation, &paused);
	QueueFreeze(p);

	/*
	 * Each shard takes what it has left of a partition a worker sealed, then
	 * its events in the partition taking inserts (frozen); both partitions
	 * are truncated once all shards are through.
	 */
	for (int s = 0; s < p->nshards; s++)
	{
		int64		taken = 0;
		int64		batches = 0;
		StageCounts counts = {0};
		QueuePosition end;

		for (int64 r = shards[s].rotation; r <= rotation; r++)
		{
			QueuePosition pos = shards[s];

			if (r != shards[s].rotation)
				QueuePositionStart(&pos, r);
			taken += DrainSlot(p, s, &pos, &counts, &batches);
		}
		QueuePositionStart(&end, rotation);
		ProgressShardRecord(p, s, &end, taken, &counts, batches);
		total += taken;
	}
	DrainReduceWithRetry(p);

	QueueRetire(p, drain_rotation, rotation, false);
	ProgressRecord(p, &no_counts, 0, rotation);
	return total;
}

/*
 * DrainEvents takes events from elsewhere than the queue (dead letters sent
 * back) through the three stages in this transaction, batch by batch as a
 * drain does, and adds what the state stage did with them to counts.  The
 * caller holds the pipeline (ProgressLockAll).
 */
void
DrainEvents(Pipeline *p, Event *events, int n, int64 rotation, StageCounts *counts)
{
	Assert(p->progress_locked);
	for (int first = 0; first < n; first += exactonce_batch_size)
		ProcessBatch(p, events + first, Min(exactonce_batch_size, n - first), rotation, counts);
	if (n > 0)
		DrainReduceWithRetry(p);
}

/*
 * RotationSeenAt returns when this process first saw the queue of p at
 * rotation, noting now if it had not: each step notes the rotation it
 * reads, and the rotation wakes every worker as it commits.  A pipeline first seen counts
 * as seen long ago, so that its queue may rotate at once.  The table is a
 * hint: emptied once it holds many pipelines, it costs a delay run once
 * more.
 */
static TimestampTz
RotationSeenAt(Pipeline *p, int64 rotation)
{
	RotationSeen *seen;
	bool		found;

	if (rotations_seen != NULL && hash_get_num_entries(rotations_seen) > 1024)
	{
		hash_destroy(rotations_seen);
		rotations_seen = NULL;
	}
	if (rotations_seen == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(int32);
		ctl.entrysize = sizeof(RotationSeen);
		rotations_seen = hash_create("exactonce rotations seen", 16, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	seen = hash_search(rotations_seen, &p->id, HASH_ENTER, &found);
	if (!found || seen->rotation != rotation)
	{
		seen->rotation = rotation;
		seen->at = found ? GetCurrentTimestamp() : 0;
	}
	return seen->at;
}

/*
 * RotationWait returns how many milliseconds are left before the queue of p,
 * at rotation, may rotate again (exactonce.batch_delay), or 0: a queue that
 * sat idle past the delay rotates at once, so the first events after a
 * pause wait for nothing.
 */
static int
RotationWait(Pipeline *p, int64 rotation)
{
	if (exactonce_batch_delay == 0)
		return 0;
	return (int) Max(exactonce_batch_delay -
					 TimestampDifferenceMilliseconds(RotationSeenAt(p, rotation), GetCurrentTimestamp()), 0);
}

/*
 * FinishRotation is the step of a shard that has drained every sealed
 * partition: once all shards have, it truncates the oldest partition, and
 * when the partition taking inserts has rows, it rotates the queue so that
 * the shards can drain it.  The caller holds the progress row lock.
 */
static DrainResult
FinishRotation(Pipeline *p, int64 rotation, int64 drain_rotation)
{
	DrainResult r = {false, 0, DT_NOEND, false, false, false};

	if (drain_rotation < rotation)
	{
		QueuePosition shards[EXACTONCE_MAX_SHARDS];
		int			slotno = (int) (drain_rotation % EXACTONCE_PARTITIONS);

		/* the last shard to finish does this */
		ProgressShardsRead(p, false, shards);
		for (int s = 0; s < p->nshards; s++)
		{
			ProgressCheckShard(p, s, shards[s].rotation, rotation, drain_rotation);
			if (shards[s].rotation < rotation)
				return r;
		}

		/*
		 * Do not wait for a reader of the partition (pg_dump, a long query)
		 * to truncate it: try again soon, while other pipelines go on.
		 */
		if (!QueueLockPartition(p, slotno))
		{
			r.sealing = true;
			return r;
		}
		QueueRetire(p, drain_rotation, drain_rotation, true);
		ProgressRecord(p, &no_counts, 0, rotation);
		FaultMaybeFail(FAULT_RETIRE);
		r.worked = true;
	}
	if (QueueHasRows(p, (int) (rotation % EXACTONCE_PARTITIONS), false) &&
		(r.wait_ms = RotationWait(p, rotation)) == 0)
	{
		ProgressRotate(p);
		r.worked = r.rotated = true;
	}
	return r;
}

/*
 * DrainIdle tells whether a step of shard would find nothing to do yet: the
 * partition it is to drain next is not sealed (r->sealing), or it has
 * drained every sealed partition and FinishRotation would do nothing:
 * another shard still drains the partition to retire, or none is left to
 * retire and no row waits to rotate the queue for; and no worker left a
 * batch staged (DrainReduceOrLeave).  It reads, locking nothing, and sets
 * *finishing when the step is to finish a rotation or apply what was left
 * (DrainFinish), rather than drain a batch, which applies it as well.
 */
static bool
DrainIdle(Pipeline *p, int shard, int64 rotation, int64 drain_rotation,
		  SealState **seal, bool *finishing, DrainResult *r)
{
	QueuePosition pos;
	bool		all;
	bool		staged;
	bool		idle;

	*finishing = false;
	if (!ProgressShardsAt(p, shard, rotation, &pos, &all, &staged))
		return false;
	ProgressCheckShard(p, shard, pos.rotation, rotation, drain_rotation);
	*finishing = pos.rotation >= rotation;
	if (pos.rotation < rotation)
		idle = r->sealing = pos.tid == 0 && !QueueSealed(p, rotation, seal);
	/* as FinishRotation: the last shard to finish retires, then rotates */
	else if (drain_rotation < rotation)
		idle = !all;
	else
		idle = !QueueHasRows(p, (int) (rotation % EXACTONCE_PARTITIONS), true) ||
			(r->wait_ms = RotationWait(p, rotation)) > 0;
	if (idle && staged)
	{
		*finishing = true;
		return false;
	}
	return idle;
}

/*
 * DrainFinish applies the batches other workers left staged and finishes a
 * rotation (FinishRotation) for a shard that has drained every sealed
 * partition.  Where another shard's worker holds the progress row it leaves
 * the work to it rather than wait: every shard that saw the last one finish
 * comes to do the same, and waiting would add a turn on the progress row,
 * held through a flush, to find the work done (the rotation wakes every
 * worker, and so does an insert; the holder looks for staged batches once
 * it has committed).  For anyone else it waits, as a drain does, and in a
 * drain's order: its shard row first, without waiting (whoever holds it,
 * set_shards() or a flush, holds every shard row and may wait for a table
 * the step has open); with the progress row had at once it needs none,
 * since whoever changes the shards takes the progress row too.  Having held
 * the progress row, the worker takes another step at once: a batch left
 * staged while it held the row, by a worker that saw it held, is its to
 * apply.
 */
static DrainResult
DrainFinish(Pipeline *p, int shard)
{
	DrainResult r = {false, 0, DT_NOEND, false, false, false};
	int64		rotation,
				drain_rotation;
	bool		paused = false;
	QueuePosition pos;

	if (!ProgressTryLock(p, &rotation, &drain_rotation, &paused))
	{
		if (ProgressHeldByWorker(p) || !ProgressShardLock(p, shard, &pos))
			return r;
		DrainLockProgressPatiently(p, &rotation, &drain_rotation, &paused);
	}
	if (paused)
		return r;
	/* set_shards() and alter_pipeline_as() hold the rows until they commit */
	if (!PipelineIsCurrent(p))
	{
		r.worked = true;
		return r;
	}
	DrainReduceWithRetry(p);
	r = FinishRotation(p, rotation, drain_rotation);
	r.worked |= !r.sealing;
	return r;
}

/*
 * DrainStep is one unit of a worker's work on a shard of a pipeline, for one
 * transaction: drain a batch of the shard's keys from the sealed partition
 * and reduce it, or, with nothing sealed left for the shard, finish the
 * rotation (FinishRotation), or apply the batches other workers left staged.
 *
 * The shard's row lock, taken first and held throughout, makes the worker
 * the only writer of the shard's keys in state, so shards run their state
 * and map stages in parallel; the shard's counters move with its position.
 * The progress row lock, taken last, serializes reduce and rotations; it is
 * held only from reduce to commit.  A worker that finds another worker
 * holding it leaves its batch staged for that one (DrainReduceOrLeave), so
 * the shards' commits do not wait for one another.  A step with nothing to
 * do yet takes neither lock (DrainIdle), and one that finishes a rotation
 * or applies what was left takes the progress row first (DrainFinish).
 */
DrainResult
DrainStep(Pipeline *p, int shard, SealState **seal)
{
	int64		rotation,
				drain_rotation;
	QueuePosition pos;
	bool		paused;
	StageCounts counts = {0};
	DrainResult r = {false, 0, DT_NOEND, false, false, false};
	int		   *limit;
	bool		finishing;

	/*
	 * A paused pipeline costs a look, not a row lock: a lock would give the
	 * step a transaction id and a commit record, which a synchronous standby
	 * that does not answer would hold up, and with it whoever waits for the
	 * shard (move_keys_out).
	 */
	ProgressRead(p, &rotation, &drain_rotation, &paused);
	if (paused)
		return r;
	if (exactonce_batch_delay > 0)
		(void) RotationSeenAt(p, rotation);

	/*
	 * Nor does a shard with nothing to do yet: a row lock would give the step
	 * a transaction id and a commit to flush, for nothing, at each look while
	 * the partition is being sealed and at each wake-up after (the progress
	 * row's would also hold every other shard's reduce until that flush).
	 * Whoever makes work wakes the workers after it (an insert's trigger), or
	 * takes its own next step at once (the drain that finishes the last
	 * shard), and that step locks and looks again.
	 */
	if (DrainIdle(p, shard, rotation, drain_rotation, seal, &finishing, &r))
		return r;
	if (finishing)
	{
		bool		sealing = r.sealing;	/* and a batch was left staged */

		r = DrainFinish(p, shard);
		r.sealing |= sealing && !r.worked;
		return r;
	}

	/*
	 * Whoever else holds the shard (a flush, a caller of the stages) may hold
	 * it for long: skip it rather than keep the worker's other pipelines
	 * waiting.  The next round, at the latest after naptime, looks again.
	 */
	if (!ProgressShardLock(p, shard, &pos))
		return r;

	/*
	 * set_shards() and alter_pipeline_as() hold every shard row until they
	 * commit: with this one locked, the registry read now is the last word on
	 * the shards and the cells, which the pipeline loaded before may not have
	 * seen.  Keys must not be cut two ways at once, nor cells.
	 */
	if (!PipelineIsCurrent(p))
	{
		r.worked = true;
		return r;
	}
	ProgressRead(p, &rotation, &drain_rotation, &paused);
	if (paused)
		return r;
	ProgressCheckShard(p, shard, pos.rotation, rotation, drain_rotation);

	if (pos.rotation < rotation)
	{
		/*
		 * The partition is sealed once no transaction may insert into it:
		 * each inserter took its lock on the queue before reading the
		 * rotation, and the rotation that sent inserts elsewhere has
		 * committed.  Until then, come back later rather than wait: one
		 * transaction left open must not hold up the worker's other
		 * pipelines.
		 */
		if (pos.tid == 0 && !QueueSealed(p, rotation, seal))
		{
			r.sealing = true;
			return r;
		}
		limit = BatchLimitOf(p, shard);
		r = DrainBatch(p, shard, &pos, *limit, &counts);
		if (r.exhausted)
			QueuePositionStart(&pos, pos.rotation + 1);
		ProgressShardRecord(p, shard, &pos, r.taken, &counts, r.taken > 0 ? 1 : 0);
		if (r.taken > 0)
			DrainReduceOrLeave(p);
		BatchAdapt(limit, r.taken, BatchMemory());
		return r;
	}

	DrainLockProgressPatiently(p, &rotation, &drain_rotation, &paused);
	if (paused)
		return r;
	return FinishRotation(p, rotation, drain_rotation);
}
