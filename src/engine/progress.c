/*-------------------------------------------------------------------------
 *
 * progress.c
 *		A pipeline's progress row and shard rows, and the order in which
 *		they are locked.
 *
 * Table progress has one row: the rotation taking inserts, the oldest
 * rotation not truncated yet, whether the pipeline is paused, and the
 * counters of what came other than through a shard (replayed dead letters,
 * the stage functions' callers, moved keys).  Table shard has a row per key
 * shard (QueueKeyShard): its position in the queue (QueuePosition), the
 * events it took and the counters of what it drained.  A shard's row moves
 * in the transaction that takes a batch through state and map, so after a
 * crash a batch is wholly done or not at all.
 *
 * The locks are the pipeline's concurrency control:
 *	 - the state stage holds the shard rows of the keys it writes: a worker
 *	   holds its shard's row from the moment it reads the queue to commit,
 *	   so it is the only writer of those keys in state, and shards run state
 *	   and map in parallel;
 *	 - the progress row serializes reduce and the queue's rotation; workers
 *	   take it last and hold it only from reduce to commit, and one that
 *	   finds another worker holding it leaves its batch staged for that one
 *	   to apply (drain.c, DrainReduceOrLeave).
 * Lock order: shard rows first, in shard order, then the progress row.
 * Workers, flush(), pause(), set_shards() and callers of the stages all
 * follow it (ProgressLockAll takes every row), so they never deadlock; a
 * worker finishing a rotation or applying batches left staged tries the
 * progress row first, without waiting, and takes no shard row if it has
 * it, which cannot deadlock either.  Workers never wait for a row another
 * session holds: they skip a locked shard row and give up the progress row
 * after about a second.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/subtrans.h"
#include "access/transam.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/progress.h"
#include "utils/shmem.h"
#include "utils/wake.h"

/* the counters a progress row and each shard row keep */
#define PROGRESS_COUNTER_COLUMNS \
	"ingested, applied, duplicates, stale, dead_lettered, batches, last_batch_at"

/* the columns of a shard's position, in the order PositionFromRow reads */
#define SHARD_POSITION_COLUMNS \
	"drain_rotation, drain_position, drain_row, drain_count, drain_digest, drain_file, shard"

/*
 * BuildProgressLock: lock the progress row, which serializes reduce, the
 * counters and the queue's rotation.
 */
static const char *
BuildProgressLock(Pipeline *p)
{
	return psprintf("SELECT rotation, drain_rotation, paused FROM %s.progress FOR UPDATE",
					quote_identifier(p->name));
}

/*
 * BuildProgressTryLock: lock the progress row unless another transaction
 * holds it.
 */
static const char *
BuildProgressTryLock(Pipeline *p)
{
	return psprintf("SELECT rotation, drain_rotation, paused FROM %s.progress"
					" FOR UPDATE SKIP LOCKED", quote_identifier(p->name));
}

/*
 * BuildProgressRead: read the progress row without locking it.
 */
static const char *
BuildProgressRead(Pipeline *p)
{
	return psprintf("SELECT rotation, drain_rotation, paused FROM %s.progress",
					quote_identifier(p->name));
}

/*
 * ProgressFromRow reads the progress row a query returned.  The queue
 * rotates only once the oldest partition is retired, so the rotation taking
 * inserts is the oldest one not truncated or the next: other values, or
 * none, were written by hand.
 */
static void
ProgressFromRow(Pipeline *p, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	HeapTuple	tup = SPI_tuptable->vals[0];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		nulls[3];
	int64		rot = DatumGetInt64(SPI_getbinval(tup, desc, 1, &nulls[0]));
	int64		drain = DatumGetInt64(SPI_getbinval(tup, desc, 2, &nulls[1]));
	bool		is_paused = DatumGetBool(SPI_getbinval(tup, desc, 3, &nulls[2]));

	/* read before any is set: a caller may want only some, at one address */
	if (nulls[0] || nulls[1] || nulls[2] || drain < 0 || rot < drain || rot - drain > 1)
		StatementRowRefused(p->name, "progress",
							psprintf("The progress row has rotation %s and drain_rotation %s, paused %s.",
									 nulls[0] ? "null" : psprintf(INT64_FORMAT, rot),
									 nulls[1] ? "null" : psprintf(INT64_FORMAT, drain),
									 nulls[2] ? "null" : (is_paused ? "true" : "false")));
	*rotation = rot;
	*drain_rotation = drain;
	*paused = is_paused;
}

/*
 * ProgressFetch runs a progress query and reads its row.
 */
static void
ProgressFetch(Pipeline *p, SPIPlanPtr plan, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	StatementExec(plan, NULL, NULL, 1);
	ProgressFromRow(p, rotation, drain_rotation, paused);
}

/*
 * ProgressLock locks the pipeline's progress row until the end of the
 * transaction and reads it: the rotation taking inserts, the oldest
 * rotation whose partition is not truncated yet, and whether it is paused.
 */
void
ProgressLock(Pipeline *p, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	p->progress_locked = true;
	ProgressFetch(p, StatementPrepare(p, BuildProgressLock, 0, NULL),
				  rotation, drain_rotation, paused);
}

/*
 * ProgressTryLock is ProgressLock that returns false, having locked nothing
 * (and so taken no transaction id), when another transaction holds the row.
 */
bool
ProgressTryLock(Pipeline *p, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	StatementExec(StatementPrepare(p, BuildProgressTryLock, 0, NULL), NULL, NULL, -1);
	if (SPI_processed == 0)
		return false;
	p->progress_locked = true;
	ProgressFromRow(p, rotation, drain_rotation, paused);
	return true;
}

/*
 * BuildProgressXmax: the transaction that last locked or updated the
 * progress row.
 */
static const char *
BuildProgressXmax(Pipeline *p)
{
	return psprintf("SELECT xmax FROM %s.progress", quote_identifier(p->name));
}

/*
 * ProgressXmax returns the progress row's xmax (InvalidTransactionId for
 * none), read in a new snapshot: an older one may show a version since
 * updated.
 */
static TransactionId
ProgressXmax(Pipeline *p)
{
	bool		isnull;
	Datum		xmax;

	StatementExec(StatementPrepare(p, BuildProgressXmax, 0, NULL), NULL, NULL, 1);
	xmax = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? InvalidTransactionId : DatumGetTransactionId(xmax);
}

/*
 * ProgressHeldByMe tells whether this transaction holds the progress row.
 */
bool
ProgressHeldByMe(Pipeline *p)
{
	TransactionId xid = ProgressXmax(p);

	return TransactionIdIsValid(xid) && TransactionIdIsCurrentTransactionId(xid);
}

/*
 * ProgressHeldByWorker tells whether a drain worker holds the progress row
 * (in a subtransaction, as DrainLockProgress takes it), as far as can be
 * told: false where the holder is anyone else, or gone.
 */
bool
ProgressHeldByWorker(Pipeline *p)
{
	TransactionId xid = ProgressXmax(p);

	/*
	 * xmax may be a MultiXactId (several lockers): a number past every xid
	 * handed out would count as in progress and have no subtransaction entry,
	 * so only one before the next xid is looked up.  A multixact that passes
	 * for a running xid at worst leaves the rotation, or a batch, to the next
	 * wake-up; one that does not makes the caller wait as for anyone else. (A
	 * windowed pipeline's reduce updates the row it locked in a
	 * subtransaction, so its xmax is a multixact: its workers wait.)
	 */
	if (!TransactionIdIsNormal(xid) ||
		!TransactionIdPrecedes(xid, ReadNextTransactionId()) ||
		!TransactionIdIsInProgress(xid))
		return false;
	return ShmemIsWorker(BackendXidGetPid(SubTransGetTopmostTransaction(xid)));
}

/*
 * ProgressHolder describes the transaction that holds the progress row: a
 * process, a prepared transaction, or one that cannot be told.
 */
static char *
ProgressHolder(Pipeline *p)
{
	TransactionId xid = ProgressXmax(p);
	int			pid;
	Datum		arg[1];
	Oid			argtype[1] = {XIDOID};

	pid = BackendXidGetPid(xid);
	if (pid != 0)
		return psprintf("process %d", pid);
	arg[0] = TransactionIdGetDatum(xid);
	if (SPI_execute_with_args("SELECT gid FROM pg_catalog.pg_prepared_xacts WHERE transaction OPERATOR(pg_catalog.=) $1",
							  1, argtype, arg, NULL, true, 1) == SPI_OK_SELECT && SPI_processed == 1)
		return psprintf("prepared transaction \"%s\"",
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
	return pstrdup("another transaction");
}

/*
 * ProgressHeld reports that the pipeline's progress row is held by another
 * transaction, naming it: a worker that waited for the row as long as its
 * lock_timeout allows gives the pipeline up with this error.
 */
void
ProgressHeld(Pipeline *p)
{
	p->progress_locked = false;
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("pipeline \"%s\" is held by %s", p->name, ProgressHolder(p)),
			 errdetail("It holds the pipeline's progress row; the worker serves the other pipelines meanwhile."),
			 errhint("Commit or roll back that transaction.")));
}

/*
 * ProgressRead reads the progress row as last committed, without a lock.
 */
void
ProgressRead(Pipeline *p, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	ProgressFetch(p, StatementPrepare(p, BuildProgressRead, 0, NULL),
				  rotation, drain_rotation, paused);
}

/*
 * BuildProgressAdd: add a batch's counts, and optionally move the oldest
 * rotation, in one update.
 */
static const char *
BuildProgressAdd(Pipeline *p)
{
	return psprintf("UPDATE %s.progress SET"
					" ingested = ingested + $1, applied = applied + $2,"
					" duplicates = duplicates + $3, stale = stale + $4,"
					" dead_lettered = dead_lettered + $5, batches = batches + $6,"
					" drain_rotation = coalesce($7, drain_rotation),"
					" last_batch_at = CASE WHEN $6 > 0 THEN now() ELSE last_batch_at END",
					quote_identifier(p->name));
}

/*
 * ProgressRecord adds a batch's counts to the pipeline's counters and, if
 * drain_rotation >= 0, records it as the oldest rotation not truncated.
 */
void
ProgressRecord(Pipeline *p, const StageCounts *c, int64 batches, int64 drain_rotation)
{
	Oid			types[7] = {INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID};
	Datum		values[7];
	char		nulls[8] = "       ";
	SPIPlanPtr	plan = StatementPrepare(p, BuildProgressAdd, 7, types);

	Assert(p->progress_locked);
	WakeWaitersAtCommit();

	values[0] = Int64GetDatum(c->ingested);
	values[1] = Int64GetDatum(c->applied);
	values[2] = Int64GetDatum(c->duplicates);
	values[3] = Int64GetDatum(c->stale);
	values[4] = Int64GetDatum(c->dead_lettered);
	values[5] = Int64GetDatum(batches);
	values[6] = Int64GetDatum(drain_rotation);
	if (drain_rotation < 0)
		nulls[6] = 'n';
	StatementExec(plan, values, nulls, 1);
}

/*
 * BuildProgressRotate: send inserts to the other queue partition.
 */
static const char *
BuildProgressRotate(Pipeline *p)
{
	return psprintf("UPDATE %s.progress SET rotation = rotation + 1",
					quote_identifier(p->name));
}

/*
 * BuildProgressSetPaused: pause or resume the pipeline.
 */
static const char *
BuildProgressSetPaused(Pipeline *p)
{
	return psprintf("UPDATE %s.progress SET paused = $1", quote_identifier(p->name));
}

/*
 * ProgressSetPaused pauses the pipeline, or resumes it, once this
 * transaction commits.
 */
void
ProgressSetPaused(Pipeline *p, bool paused)
{
	Oid			types[1] = {BOOLOID};
	Datum		values[1] = {BoolGetDatum(paused)};

	Assert(p->progress_locked);
	StatementExec(StatementPrepare(p, BuildProgressSetPaused, 1, types), values, NULL, 1);
}

/*
 * ProgressCounters returns a subquery with the pipeline's counters
 * (ingested, applied, duplicates, stale, dead_lettered, batches,
 * last_batch_at): those of its progress row and of its shard rows, added up.
 */
char *
ProgressCounters(Pipeline *p)
{
	const char *s = quote_identifier(p->name);

	return psprintf("(SELECT pg_catalog.sum(ingested)::pg_catalog.int8 AS ingested,"
					" pg_catalog.sum(applied)::pg_catalog.int8 AS applied,"
					" pg_catalog.sum(duplicates)::pg_catalog.int8 AS duplicates,"
					" pg_catalog.sum(stale)::pg_catalog.int8 AS stale,"
					" pg_catalog.sum(dead_lettered)::pg_catalog.int8 AS dead_lettered,"
					" pg_catalog.sum(batches)::pg_catalog.int8 AS batches,"
					" pg_catalog.max(last_batch_at) AS last_batch_at FROM ("
					"SELECT " PROGRESS_COUNTER_COLUMNS " FROM %s.progress UNION ALL"
					" SELECT " PROGRESS_COUNTER_COLUMNS " FROM %s.shard) c)", s, s);
}

/*
 * ProgressRotate makes the other queue partition take inserts once this
 * transaction commits.
 */
void
ProgressRotate(Pipeline *p)
{
	Assert(p->progress_locked);
	WakeWaitersAtCommit();
	StatementExec(StatementPrepare(p, BuildProgressRotate, 0, NULL), NULL, NULL, 1);
}

/*
 * BuildShardLock: lock one shard's row, which serializes the state stage of
 * the keys in that shard, unless someone else holds it.
 */
static const char *
BuildShardLock(Pipeline *p)
{
	return psprintf("SELECT " SHARD_POSITION_COLUMNS " FROM %s.shard"
					" WHERE shard = $1 FOR UPDATE SKIP LOCKED", quote_identifier(p->name));
}

/*
 * PositionFromRow reads the position of shard from row i of SPI_tuptable,
 * checking that the row is one exactonce wrote: that shard's, at a rotation
 * and a place in a partition that can be.
 */
static void
PositionFromRow(Pipeline *p, uint64 i, int shard, QueuePosition *pos)
{
	HeapTuple	tup = SPI_tuptable->vals[i];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		nulls[4];
	bool		isnull;
	Datum		d;
	int32		row_shard;

	pos->rotation = DatumGetInt64(SPI_getbinval(tup, desc, 1, &nulls[0]));
	pos->tid = DatumGetInt64(SPI_getbinval(tup, desc, 2, &nulls[1]));
	d = SPI_getbinval(tup, desc, 3, &isnull);
	pos->row = isnull ? 0 : DatumGetInt64(d);
	pos->count = DatumGetInt64(SPI_getbinval(tup, desc, 4, &nulls[2]));
	d = SPI_getbinval(tup, desc, 5, &isnull);
	pos->digest = isnull ? 0 : DatumGetInt64(d);
	pos->digest_known = !isnull;
	d = SPI_getbinval(tup, desc, 6, &isnull);
	pos->file = isnull ? InvalidOid : DatumGetObjectId(d);
	row_shard = DatumGetInt32(SPI_getbinval(tup, desc, 7, &nulls[3]));
	if (nulls[3] || row_shard != shard)
		StatementRowRefused(p->name, "shard",
							psprintf("The row of shard %d is missing, or numbered otherwise.", shard));
	if (nulls[0] || nulls[1] || nulls[2] || pos->rotation < 0 || pos->tid < 0 ||
		pos->tid > ((int64) MaxBlockNumber << 16 | PG_UINT16_MAX) || pos->count < 0)
		StatementRowRefused(p->name, "shard",
							psprintf("Shard %d has no position in the queue that can be.", shard));
}

/*
 * ProgressCheckShard refuses a shard whose position is at a rotation the
 * progress row says it cannot be at: a shard passes the partition taking
 * inserts never, and the oldest partition is retired only once every
 * shard has passed it.  A shard ahead would take the partition it has not
 * drained for drained, and see it retired; one behind, the same.  Only rows
 * put back by hand (a saved progress row restored) disagree so.
 */
void
ProgressCheckShard(Pipeline *p, int shard, int64 shard_rotation, int64 rotation,
				   int64 drain_rotation)
{
	if (shard_rotation < drain_rotation || shard_rotation > rotation)
		StatementRowRefused(p->name, "shard",
							psprintf("Shard %d is at rotation " INT64_FORMAT ", where the progress row has rotations "
									 INT64_FORMAT " to " INT64_FORMAT ".",
									 shard, shard_rotation, drain_rotation, rotation));
}

/*
 * ProgressShardLock locks a shard's row until the end of the transaction and reads
 * its position.  It returns false, without waiting, when the row is locked
 * already (by flush(), pause() or a caller of state_upsert()).
 */
bool
ProgressShardLock(Pipeline *p, int shard, QueuePosition *pos)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(shard)};

	Assert(shard >= 0 && shard < p->nshards);
	StatementExec(StatementPrepare(p, BuildShardLock, 1, types), values, NULL, -1);
	if (SPI_processed == 0)
	{
		QueuePosition all[EXACTONCE_MAX_SHARDS];

		/* locked, not missing: this fails if a shard row is gone */
		ProgressShardsRead(p, false, all);
		return false;
	}
	PositionFromRow(p, 0, shard, pos);
	p->shards_locked |= UINT64CONST(1) << shard;
	return true;
}

/*
 * BuildShardsAt: how many shards there are, whether every one has drained
 * every partition before rotation $1, and where shard $2 stands.
 */
static const char *
BuildShardsAt(Pipeline *p)
{
	return psprintf("SELECT count(*), coalesce(bool_and(drain_rotation >= $1), false),"
					" max(drain_rotation) FILTER (WHERE shard = $2),"
					" max(drain_position) FILTER (WHERE shard = $2),"
					" EXISTS (SELECT FROM %s.ledger WHERE applied_at IS NULL AND source = '" EXACTONCE_SOURCE_QUEUE "')"
					" FROM %s.shard", quote_identifier(p->name), quote_identifier(p->name));
}

/*
 * ProgressShardsAt reads, locking nothing, the rotation and place of
 * shard's position (*pos: only those two) and whether every shard has
 * drained every partition before rotation (*all).  It returns false where
 * the shards are no longer p's (set_shards() made them anew).
 */
bool
ProgressShardsAt(Pipeline *p, int shard, int64 rotation, QueuePosition *pos, bool *all,
				 bool *staged)
{
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2] = {Int64GetDatum(rotation), Int32GetDatum(shard)};
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	bool		missing;

	StatementExec(StatementPrepare(p, BuildShardsAt, 2, types), values, NULL, 1);
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	if (DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull)) != p->nshards)
		return false;
	*all = DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull));
	pos->rotation = DatumGetInt64(SPI_getbinval(tup, desc, 3, &missing));
	pos->tid = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
	*staged = DatumGetBool(SPI_getbinval(tup, desc, 5, &isnull));
	return !missing;
}

/*
 * BuildShardRead and BuildShardReadLock: every shard's position, in shard
 * order (the order in which all of them are locked).
 */
static const char *
BuildShardRead(Pipeline *p)
{
	return psprintf("SELECT " SHARD_POSITION_COLUMNS " FROM %s.shard ORDER BY shard",
					quote_identifier(p->name));
}

static const char *
BuildShardReadLock(Pipeline *p)
{
	return psprintf("SELECT " SHARD_POSITION_COLUMNS " FROM %s.shard ORDER BY shard FOR UPDATE",
					quote_identifier(p->name));
}

/*
 * ProgressShardsRead reads the position of every shard into pos (p->nshards
 * entries), locking the rows with lock.
 */
void
ProgressShardsRead(Pipeline *p, bool lock, QueuePosition *pos)
{
	SPIPlanPtr	plan = lock ? StatementPrepare(p, BuildShardReadLock, 0, NULL) :
	StatementPrepare(p, BuildShardRead, 0, NULL);

	StatementExec(plan, NULL, NULL, p->nshards);
	for (int i = 0; i < p->nshards; i++)
		PositionFromRow(p, i, i, &pos[i]);
	if (lock)
		p->shards_locked = ~UINT64CONST(0);
}

/*
 * BuildShardSet: move a shard's position.
 */
static const char *
BuildShardSet(Pipeline *p)
{
	return psprintf("UPDATE %s.shard SET drain_rotation = $2, drain_position = $3,"
					" drain_row = $4, drain_count = $5, drain_digest = $6,"
					" taken = taken + $7, ingested = ingested + $8, applied = applied + $9,"
					" duplicates = duplicates + $10, stale = stale + $11,"
					" dead_lettered = dead_lettered + $12, batches = batches + $13,"
					" last_batch_at = CASE WHEN $13 > 0 THEN now() ELSE last_batch_at END,"
					" drain_file = $14"
					" WHERE shard = $1", quote_identifier(p->name));
}

/*
 * ProgressShardRecord records the position a shard reached, the number of
 * events it took on the way, and what the state stage did with them in
 * batches (c): the shard's counters, which move with its position.
 */
void
ProgressShardRecord(Pipeline *p, int shard, const QueuePosition *pos, int64 taken,
					const StageCounts *c, int64 batches)
{
	Oid			types[14] = {INT4OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID,
	INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, OIDOID};
	Datum		values[14] = {Int32GetDatum(shard), Int64GetDatum(pos->rotation),
		Int64GetDatum(pos->tid), Int64GetDatum(pos->row), Int64GetDatum(pos->count),
		Int64GetDatum(pos->digest), Int64GetDatum(taken), Int64GetDatum(c->ingested),
		Int64GetDatum(c->applied), Int64GetDatum(c->duplicates), Int64GetDatum(c->stale),
	Int64GetDatum(c->dead_lettered), Int64GetDatum(batches), ObjectIdGetDatum(pos->file)};
	char		nulls[15] = "              ";

	Assert(p->shards_locked & (UINT64CONST(1) << shard));
	/* the update to 1.21 gives the shard rows their counters */
	if (get_attnum(p->shard, "ingested") == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the exactonce library is newer than the extension's SQL objects"),
				 errdetail("Table %s.shard has no counters.", quote_identifier(p->name)),
				 errhint("Run ALTER EXTENSION exactonce UPDATE.")));
	WakeWaitersAtCommit();
	if (!pos->digest_known)
		nulls[5] = 'n';
	if (!OidIsValid(pos->file))
		nulls[13] = 'n';
	StatementExec(StatementPrepare(p, BuildShardSet, 14, types), values, nulls, 1);
}

/*
 * ProgressLockAll locks every shard row, reading their positions into shards
 * (NULL: not wanted), then the progress row, until the end of the
 * transaction: it waits for the batches in progress and keeps the workers
 * out.  Shards first and in order, as the workers take them, so that the two
 * never deadlock.  If the definition changed while this waited, the caller
 * would cut keys or cells by the old one: that is an error to retry.
 */
void
ProgressLockAll(Pipeline *p, QueuePosition *shards, int64 *rotation,
				int64 *drain_rotation, bool *paused)
{
	QueuePosition positions[EXACTONCE_MAX_SHARDS];
	int64		rot,
				drain;

	if (shards == NULL)
		shards = positions;
	ProgressShardsRead(p, true, shards);
	if (!PipelineIsCurrent(p))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("pipeline \"%s\" was changed while this waited for it", p->name),
				 errdetail("set_shards() or alter_pipeline_as() committed a new definition."),
				 errhint("Run it again.")));
	/* read into locals: a caller may want neither, at one address */
	ProgressLock(p, &rot, &drain, paused);
	for (int i = 0; i < p->nshards; i++)
		ProgressCheckShard(p, i, shards[i].rotation, rot, drain);
	*rotation = rot;
	*drain_rotation = drain;
}
