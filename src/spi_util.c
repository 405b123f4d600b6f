/*-------------------------------------------------------------------------
 *
 * spi_util.c
 *		Prepared statements per pipeline, a pinned search_path, array
 *		parameters, and the statements on progress and dead_letters.
 *
 * Every statement the stages run is prepared once per backend and pipeline
 * and kept (SPI_keepplan); values travel as parameters, mostly as arrays
 * that one statement unnests, so a batch costs a few statements, not one
 * per event.  Statements run with search_path pinned to pg_catalog, pg_temp
 * so that objects planted elsewhere cannot change what they resolve to.
 *
 *-------------------------------------------------------------------------
 */
#include "exactonce.h"

#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/procarray.h"
#include "access/htup_details.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

/* Plans are kept per schema and id: a pipeline recreated under the same
 * name, or after the extension was recreated, gets plans of its own. */
typedef struct PlanKey
{
	Oid			nspid;
	int32		pipeline_id;
} PlanKey;

typedef struct PlanEntry
{
	PlanKey		key;			/* hash key */
	SPIPlanPtr	plans[PLAN_COUNT];
} PlanEntry;

static HTAB *plan_cache = NULL;
static bool plan_cache_sweep = false;	/* a schema was dropped or changed */

/*
 * PlanCacheInvalidate is the syscache callback on schemas: dropping a
 * pipeline drops its schema, whose kept plans SweepPlans then frees.
 */
static void
PlanCacheInvalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	plan_cache_sweep = true;
}

/*
 * SweepPlans frees the kept plans of pipelines whose schema is gone.
 */
static void
SweepPlans(void)
{
	HASH_SEQ_STATUS seq;
	PlanEntry  *entry;

	plan_cache_sweep = false;
	hash_seq_init(&seq, plan_cache);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		if (SearchSysCacheExists1(NAMESPACEOID, ObjectIdGetDatum(entry->key.nspid)))
			continue;
		for (int i = 0; i < PLAN_COUNT; i++)
			if (entry->plans[i] != NULL)
				SPI_freeplan(entry->plans[i]);
		(void) hash_search(plan_cache, &entry->key, HASH_REMOVE, NULL);
	}
}

/*
 * SpiPinSearchPath sets search_path to pg_catalog, pg_temp until
 * SpiUnpinSearchPath is called with the returned nest level.
 */
int
SpiPinSearchPath(void)
{
	int			nestlevel = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nestlevel;
}

/*
 * SpiUnpinSearchPath restores the search_path that SpiPinSearchPath saved.
 */
void
SpiUnpinSearchPath(int nestlevel)
{
	AtEOXact_GUC(true, nestlevel);
}

/*
 * SpiPlan returns the kept plan number "which" of pipeline p, preparing it
 * from build(p) the first time.
 */
SPIPlanPtr
SpiPlan(Pipeline *p, int which, const char *(*build) (Pipeline *p),
		int nargs, Oid *argtypes)
{
	PlanEntry  *entry;
	PlanKey		key;
	bool		found;

	if (plan_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(PlanKey);
		ctl.entrysize = sizeof(PlanEntry);
		ctl.hcxt = CacheMemoryContext;
		plan_cache = hash_create("exactonce plans", 16, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		CacheRegisterSyscacheCallback(NAMESPACEOID, PlanCacheInvalidate, (Datum) 0);
	}
	if (plan_cache_sweep)
		SweepPlans();
	memset(&key, 0, sizeof(key));
	key.nspid = p->nspid;
	key.pipeline_id = p->id;
	entry = hash_search(plan_cache, &key, HASH_ENTER, &found);
	if (!found)
		memset(entry->plans, 0, sizeof(entry->plans));
	if (entry->plans[which] == NULL)
	{
		const char *sql = build(p);
		SPIPlanPtr	plan = SPI_prepare(sql, nargs, argtypes);

		if (plan == NULL)
			elog(ERROR, "could not prepare \"%s\": %s", sql,
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		entry->plans[which] = plan;
	}
	return entry->plans[which];
}

/*
 * SpiExec runs a kept plan and checks that it touched "expected" rows
 * (-1: any number).
 */
void
SpiExec(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc = SPI_execute_plan(plan, values, nulls, false, 0);

	/*
	 * SPI returns in its procedure context, which lives as long as the SPI
	 * connection: go back to the caller's, which a flush resets per batch.
	 */
	MemoryContextSwitchTo(cxt);

	if (rc < 0)
		elog(ERROR, "exactonce statement failed: %s", SPI_result_code_string(rc));
	if (expected >= 0 && SPI_processed != (uint64) expected)
		elog(ERROR, "exactonce statement touched " UINT64_FORMAT " rows, expected %d",
			 SPI_processed, expected);
}

/*
 * SpiKeepPlan returns *cache, preparing and keeping sql the first time.  The
 * statement must be schema-qualified: it is parsed with the search_path the
 * caller pinned.
 */
SPIPlanPtr
SpiKeepPlan(SPIPlanPtr *cache, const char *sql, int nargs, Oid *types)
{
	if (*cache == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

		if (plan == NULL)
			elog(ERROR, "could not prepare \"%s\": %s", sql,
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		*cache = plan;
	}
	return *cache;
}

/*
 * RelationOwner returns the owner of a relation, InvalidOid if it is gone.
 */
Oid
RelationOwner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		return InvalidOid;
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * ExtensionTableOwner returns the owner of table exactonce.<relname>, the
 * role the extension's own statements run as.
 */
Oid
ExtensionTableOwner(const char *relname)
{
	Oid			relid = get_relname_relid(relname, get_namespace_oid("exactonce", false));

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"exactonce.%s\" does not exist", relname),
				 errdetail("The installed extension script predates the shared library."),
				 errhint("Recreate the extension: DROP EXTENSION exactonce; CREATE EXTENSION exactonce.")));
	return RelationOwner(relid);
}

/*
 * SpiExecAs runs a kept plan as role, in a security-restricted context, and
 * checks that it touched "expected" rows (-1: any number).  The caller has
 * pinned the search_path and checked that its own role may do this.
 */
void
SpiExecAs(Oid role, SPIPlanPtr plan, Datum *values, const char *nulls,
		  bool read_only, int expected)
{
	Oid			save_userid;
	int			save_sec;
	int			rc;

	MemoryContext cxt = CurrentMemoryContext;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(role, save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	rc = SPI_execute_plan(plan, values, nulls, read_only, 0);
	SetUserIdAndSecContext(save_userid, save_sec);
	MemoryContextSwitchTo(cxt);	/* as in SpiExec */
	if (rc < 0)
		elog(ERROR, "exactonce statement failed: %s", SPI_result_code_string(rc));
	if (expected >= 0 && SPI_processed != (uint64) expected)
		elog(ERROR, "exactonce statement touched " UINT64_FORMAT " rows, expected %d",
			 SPI_processed, expected);
}

/*
 * TextArray builds a text[] of n elements, some of them NULL if nulls is set.
 */
Datum
TextArray(Datum *elems, bool *nulls, int n)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};

	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs,
											  TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * Int8Array builds a bigint[].
 */
Datum
Int8Array(int64 *elems, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(elems[i]);
	return PointerGetDatum(construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * NumericArray builds a numeric[].
 */
Datum
NumericArray(Numeric *elems, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		d[i] = NumericGetDatum(elems[i]);
	return PointerGetDatum(construct_array(d, n, NUMERICOID, -1, false, TYPALIGN_INT));
}

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
 * BuildProgressRead: read the progress row without locking it.
 */
static const char *
BuildProgressRead(Pipeline *p)
{
	return psprintf("SELECT rotation, drain_rotation, paused FROM %s.progress",
					quote_identifier(p->name));
}

/*
 * ProgressFromRow reads the progress row a query returned.
 */
static void
ProgressFromRow(int64 *rotation, int64 *drain_rotation, bool *paused)
{
	HeapTuple	tup = SPI_tuptable->vals[0];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;

	*rotation = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	*drain_rotation = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
	*paused = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
}

/*
 * ProgressFetch runs a progress query and reads its row.
 */
static void
ProgressFetch(SPIPlanPtr plan, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	SpiExec(plan, NULL, NULL, 1);
	ProgressFromRow(rotation, drain_rotation, paused);
}

/*
 * ProgressLock locks the pipeline's progress row until the end of the
 * transaction and reads it: the rotation taking inserts, the oldest
 * rotation whose partition is not truncated yet, and whether it is paused.
 */
void
ProgressLock(Pipeline *p, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	ProgressFetch(SpiPlan(p, PLAN_PROGRESS_LOCK, BuildProgressLock, 0, NULL),
				  rotation, drain_rotation, paused);
}

/*
 * BuildProgressTryLock: lock the progress row unless someone else holds it.
 */
static const char *
BuildProgressTryLock(Pipeline *p)
{
	return psprintf("SELECT rotation, drain_rotation, paused FROM %s.progress FOR UPDATE SKIP LOCKED",
					quote_identifier(p->name));
}

/*
 * ProgressHolder describes the transaction that holds the progress row: a
 * process, a prepared transaction, or one that cannot be told.
 */
static char *
ProgressHolder(Pipeline *p)
{
	TransactionId xid;
	int			pid;
	bool		isnull;
	Datum		arg[1];
	Oid			argtype[1] = {XIDOID};

	if (SPI_execute(psprintf("SELECT xmax FROM %s.progress", quote_identifier(p->name)),
					true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		return pstrdup("another transaction");
	xid = DatumGetTransactionId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
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
 * ProgressTryLock is ProgressLock for the workers.  The shards of a
 * pipeline hold its progress row from reduce to commit, which is short; a
 * caller may hold it for long (a flush, pause() in a transaction left open,
 * a prepared transaction).  So it tries for about a second, then gives up
 * with LOCK_NOT_AVAILABLE naming the holder: the worker backs off this
 * pipeline and serves the others.
 */
void
ProgressTryLock(Pipeline *p, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	SPIPlanPtr	plan = SpiPlan(p, PLAN_PROGRESS_TRYLOCK, BuildProgressTryLock, 0, NULL);
	int			waited = 0;

	for (int attempt = 0;; attempt++)
	{
		int			ms = 1 << Min(attempt, 6);

		SpiExec(plan, NULL, NULL, -1);
		if (SPI_processed == 1)
		{
			ProgressFromRow(rotation, drain_rotation, paused);
			return;
		}
		if (waited >= 1000)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		waited += ms;
	}
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
	ProgressFetch(SpiPlan(p, PLAN_PROGRESS_READ, BuildProgressRead, 0, NULL),
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
	SPIPlanPtr	plan = SpiPlan(p, PLAN_PROGRESS_ADD, BuildProgressAdd, 7, types);

	values[0] = Int64GetDatum(c->ingested);
	values[1] = Int64GetDatum(c->applied);
	values[2] = Int64GetDatum(c->duplicates);
	values[3] = Int64GetDatum(c->stale);
	values[4] = Int64GetDatum(c->dead_lettered);
	values[5] = Int64GetDatum(batches);
	values[6] = Int64GetDatum(drain_rotation);
	if (drain_rotation < 0)
		nulls[6] = 'n';
	SpiExec(plan, values, nulls, 1);
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
 * ProgressRotate makes the other queue partition take inserts once this
 * transaction commits.
 */
void
ProgressRotate(Pipeline *p)
{
	SpiExec(SpiPlan(p, PLAN_PROGRESS_ROTATE, BuildProgressRotate, 0, NULL), NULL, NULL, 1);
}

/* the columns of a shard's position, in the order PositionFromRow reads */
#define SHARD_POSITION_COLUMNS \
	"drain_rotation, drain_position, drain_row, drain_count, drain_digest"

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
 * PositionFromRow reads a shard's position from row i of SPI_tuptable.
 */
static void
PositionFromRow(uint64 i, QueuePosition *pos)
{
	HeapTuple	tup = SPI_tuptable->vals[i];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;
	Datum		d;

	pos->rotation = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	pos->tid = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
	d = SPI_getbinval(tup, desc, 3, &isnull);
	pos->row = isnull ? 0 : DatumGetInt64(d);
	pos->count = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
	d = SPI_getbinval(tup, desc, 5, &isnull);
	pos->digest = isnull ? 0 : DatumGetInt64(d);
	pos->digest_known = !isnull;
}

/*
 * ShardLock locks a shard's row until the end of the transaction and reads
 * its position.  It returns false, without waiting, when the row is locked
 * already (by flush(), pause() or a caller of state_upsert()).
 */
bool
ShardLock(Pipeline *p, int shard, QueuePosition *pos)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(shard)};

	SpiExec(SpiPlan(p, PLAN_SHARD_LOCK, BuildShardLock, 1, types), values, NULL, -1);
	if (SPI_processed == 0)
	{
		QueuePosition all[EXACTONCE_MAX_SHARDS];

		/* locked, not missing: this fails if a shard row is gone */
		ShardsRead(p, false, all);
		return false;
	}
	PositionFromRow(0, pos);
	return true;
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
 * ShardsRead reads the position of every shard into pos (p->nshards
 * entries), locking the rows with lock.
 */
void
ShardsRead(Pipeline *p, bool lock, QueuePosition *pos)
{
	SPIPlanPtr	plan = lock ? SpiPlan(p, PLAN_SHARD_READ_LOCK, BuildShardReadLock, 0, NULL) :
		SpiPlan(p, PLAN_SHARD_READ, BuildShardRead, 0, NULL);

	SpiExec(plan, NULL, NULL, p->nshards);
	for (int i = 0; i < p->nshards; i++)
		PositionFromRow(i, &pos[i]);
}

/*
 * BuildShardSet: move a shard's position.
 */
static const char *
BuildShardSet(Pipeline *p)
{
	return psprintf("UPDATE %s.shard SET drain_rotation = $2, drain_position = $3,"
					" drain_row = $4, drain_count = $5, drain_digest = $6,"
					" taken = taken + $7 WHERE shard = $1", quote_identifier(p->name));
}

/*
 * ShardRecord records the position a shard reached and the number of events
 * it took on the way.
 */
void
ShardRecord(Pipeline *p, int shard, const QueuePosition *pos, int64 taken)
{
	Oid			types[7] = {INT4OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID};
	Datum		values[7] = {Int32GetDatum(shard), Int64GetDatum(pos->rotation),
		Int64GetDatum(pos->tid), Int64GetDatum(pos->row), Int64GetDatum(pos->count),
	Int64GetDatum(pos->digest), Int64GetDatum(taken)};
	char		nulls[8] = "       ";

	if (!pos->digest_known)
		nulls[5] = 'n';
	SpiExec(SpiPlan(p, PLAN_SHARD_SET, BuildShardSet, 7, types), values, nulls, 1);
}

/*
 * PipelineLockAll locks every shard row, then the progress row, until the
 * end of the transaction: it waits for the batches in progress and keeps the
 * workers out.  Shards first and in order, as the workers take them, so that
 * the two never deadlock.
 */
void
PipelineLockAll(Pipeline *p, int64 *rotation, int64 *drain_rotation, bool *paused)
{
	QueuePosition shards[EXACTONCE_MAX_SHARDS];

	ShardsRead(p, true, shards);
	ProgressLock(p, rotation, drain_rotation, paused);
}

/*
 * AppendEventColumns appends the event columns of p, comma separated: key,
 * version, value, the dimensions, deleted, event_time.
 */
void
AppendEventColumns(StringInfo sql, Pipeline *p)
{
	appendStringInfoString(sql, "key, version, value");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(sql, ", %s", quote_identifier(p->dims[i]));
	appendStringInfoString(sql, ", deleted, event_time");
}

/*
 * AppendEventUnnest appends unnest() over the parameters EventArrays fills,
 * numbered from 1, and over "extra" more text[] parameters after them.
 */
void
AppendEventUnnest(StringInfo sql, Pipeline *p, int extra)
{
	int			arg = 4;

	appendStringInfoString(sql, "unnest($1::text[], $2::int8[], $3::numeric[]");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(sql, ", $%d::text[]", arg++);
	appendStringInfo(sql, ", $%d::bool[], $%d::timestamptz[]", arg, arg + 1);
	for (int i = 0; i < extra; i++)
		appendStringInfo(sql, ", $%d::text[]", arg + 2 + i);
	appendStringInfoChar(sql, ')');
}

/*
 * EventArrays fills values and types with one array parameter per event
 * column (EV_NATTS(p) of them), in the order of AppendEventColumns.
 */
void
EventArrays(Pipeline *p, Event **events, int n, Datum *values, Oid *types)
{
	Datum	   *col = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *flags = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *times = palloc(sizeof(Datum) * Max(n, 1));
	int64	   *versions = palloc(sizeof(int64) * Max(n, 1));
	Numeric    *nums = palloc(sizeof(Numeric) * Max(n, 1));

	for (int j = 0; j < n; j++)
	{
		col[j] = PointerGetDatum(events[j]->key);
		versions[j] = events[j]->version;
		nums[j] = events[j]->value;
		flags[j] = BoolGetDatum(events[j]->deleted);
		times[j] = TimestampTzGetDatum(events[j]->event_time);
	}
	values[0] = TextArray(col, NULL, n);
	values[1] = Int8Array(versions, n);
	values[2] = NumericArray(nums, n);
	types[0] = TEXTARRAYOID;
	types[1] = INT8ARRAYOID;
	types[2] = NUMERICARRAYOID;
	for (int i = 0; i < p->ndims; i++)
	{
		Datum	   *dimcol = palloc(sizeof(Datum) * Max(n, 1));

		for (int j = 0; j < n; j++)
			dimcol[j] = events[j]->dims[i];
		values[3 + i] = TextArray(dimcol, NULL, n);
		types[3 + i] = TEXTARRAYOID;
	}
	values[3 + p->ndims] = PointerGetDatum(construct_array(flags, n, BOOLOID, 1, true, TYPALIGN_CHAR));
	types[3 + p->ndims] = BOOLARRAYOID;
	values[4 + p->ndims] = PointerGetDatum(construct_array(times, n, TIMESTAMPTZOID, 8,
														   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	types[4 + p->ndims] = TIMESTAMPTZARRAYOID;
}

/*
 * BuildDeadLetter: insert a batch of dead letters from parallel arrays.
 */
static const char *
BuildDeadLetter(Pipeline *p)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.dead_letters (", quote_identifier(p->name));
	AppendEventColumns(&sql, p);
	appendStringInfoString(&sql, ", reason) SELECT * FROM ");
	AppendEventUnnest(&sql, p, 1);
	return sql.data;
}

/*
 * DeadLettersInsert stores events that could not be applied, with reasons.
 */
void
DeadLettersInsert(Pipeline *p, DeadLetter *dl, int n)
{
	Datum		values[EXACTONCE_MAX_DIMENSIONS + EV_DIM0 + 1];
	Oid			types[EXACTONCE_MAX_DIMENSIONS + EV_DIM0 + 1];
	Event	  **events;
	Datum	   *reasons;

	if (n == 0)
		return;
	events = palloc(sizeof(Event *) * n);
	reasons = palloc(sizeof(Datum) * n);
	for (int j = 0; j < n; j++)
	{
		events[j] = dl[j].event;
		reasons[j] = CStringGetTextDatum(dl[j].reason);
	}
	EventArrays(p, events, n, values, types);
	values[EV_NATTS(p)] = TextArray(reasons, NULL, n);
	types[EV_NATTS(p)] = TEXTARRAYOID;
	SpiExec(SpiPlan(p, PLAN_DEAD_LETTER, BuildDeadLetter, EV_NATTS(p) + 1, types),
			values, NULL, n);
}
