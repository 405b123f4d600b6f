/*-------------------------------------------------------------------------
 *
 * offsets.c
 *		Source offsets: exactly-once ingestion from a partitioned log.
 *
 * exactonce.ingest(pipeline, source, events, offsets) queues a batch of
 * events read from one partition of a log (Kafka, Kinesis, a file) together
 * with the offsets they had there, in the caller's transaction.  It first
 * locks the source's row in exactonce.source_offset (FOR UPDATE, created on
 * first use) and reads its committed offset; events at or below it were
 * queued by an earlier transaction and are skipped, the others go to
 * <pipeline>.ingest, and the committed offset moves to the batch's last
 * offset in the same transaction.  So a consumer that replays after a crash,
 * or retries after a lost acknowledgement, never queues an event twice.
 *
 * Offsets within a batch must increase strictly; between batches they may
 * jump (gaps are allowed).  Lower offsets are always replays: a partition
 * that starts again from zero needs exactonce.reset_source().
 *
 * Locking: one row lock per (pipeline, source), held until the caller's
 * transaction ends, so two consumers of one source take turns and the second
 * sees the first's committed offset (READ COMMITTED; under REPEATABLE READ it
 * gets a serialization failure and retries).  The queue takes inserts as
 * usual; draining goes on meanwhile.
 *
 * Rights: ingest() needs what INSERT INTO <pipeline>.ingest needs (USAGE on
 * the schema, INSERT on the queue), and inserts the events as the caller.
 * The offsets table belongs to the extension's owner and grants nothing to
 * PUBLIC; its row is written as the table's owner once the caller's rights
 * are checked.  reset_source() is for the pipeline's owner only.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/typcache.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/event.h"
#include "engine/queue.h"


PG_FUNCTION_INFO_V1(exactonce_ingest);
PG_FUNCTION_INFO_V1(exactonce_reset_source);
PG_FUNCTION_INFO_V1(exactonce_committed_offset);

/* longest source name in bytes */
#define SOURCE_MAX_LEN		255

/* attempts to find or create a source's row while others reset it */
#define SOURCE_LOCK_ATTEMPTS	100

/* the statements on exactonce.source_offset, prepared once per backend */
enum
{
	SOURCE_LOCK,
	SOURCE_CREATE,
	SOURCE_RECORD,
	SOURCE_SET,
	SOURCE_DELETE,
	SOURCE_READ,
	SOURCE_NPLANS
};

typedef struct SourceStatement
{
	const char *sql;
	int			nargs;
	Oid			types[5];
} SourceStatement;

static const SourceStatement source_statements[SOURCE_NPLANS] = {
	[SOURCE_LOCK] = {
		"SELECT committed_offset FROM exactonce.source_offset"
		" WHERE pipeline_id = $1 AND source = $2 FOR UPDATE",
		2, {INT4OID, TEXTOID}
	},
	[SOURCE_CREATE] = {
		"INSERT INTO exactonce.source_offset (pipeline_id, source) VALUES ($1, $2)"
		" ON CONFLICT (pipeline_id, source) DO NOTHING",
		2, {INT4OID, TEXTOID}
	},
	[SOURCE_RECORD] = {
		"UPDATE exactonce.source_offset SET committed_offset = $3,"
		" ingested = ingested + $4, skipped = skipped + $5, batches = batches + 1,"
		" updated_at = now() WHERE pipeline_id = $1 AND source = $2",
		5, {INT4OID, TEXTOID, INT8OID, INT8OID, INT8OID}
	},
	[SOURCE_SET] = {
		"UPDATE exactonce.source_offset SET committed_offset = $3, updated_at = now()"
		" WHERE pipeline_id = $1 AND source = $2",
		3, {INT4OID, TEXTOID, INT8OID}
	},
	[SOURCE_DELETE] = {
		"DELETE FROM exactonce.source_offset WHERE pipeline_id = $1 AND source = $2",
		2, {INT4OID, TEXTOID}
	},
	[SOURCE_READ] = {
		"SELECT committed_offset FROM exactonce.source_offset"
		" WHERE pipeline_id = $1 AND source = $2",
		2, {INT4OID, TEXTOID}
	},
};

/*
 * SourcePlan returns the kept plan of statement "which".
 */
static SPIPlanPtr
SourcePlan(int which)
{
	const SourceStatement *s = &source_statements[which];

	return StatementPrepareFixed(s->sql, s->nargs, s->types);
}

/*
 * SourceArg returns the source argument: not NULL, not empty, at most
 * SOURCE_MAX_LEN bytes.
 */
static text *
SourceArg(FunctionCallInfo fcinfo, int argno)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("source must not be NULL"),
				 errhint("Name the log partition the events come from, for example 'kafka:trades:3'.")));
	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0 || len > SOURCE_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("source name must have 1 to %d bytes", SOURCE_MAX_LEN),
				 errhint("Name the log partition the events come from, for example 'kafka:trades:3'.")));
	return t;
}

/*
 * OffsetsPipelineArg returns the pipeline name argument as a C string.
 */
static char *
OffsetsPipelineArg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline name must not be NULL")));
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/*
 * OffsetsFromArray checks the offsets of a batch of nevents events: one per
 * event, none NULL or negative, strictly increasing.
 */
static int64 *
OffsetsFromArray(ArrayType *arr, int nevents)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int64	   *offsets;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("offsets must be a one-dimensional array")));
	deconstruct_array(arr, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &nulls, &n);
	if (n != nevents)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("a batch of %d events has %d offsets", nevents, n),
				 errhint("Pass one offset per event, in the order of the events.")));
	offsets = palloc(sizeof(int64) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("offset %d is NULL", i + 1),
					 errhint("Every event needs the offset it has in its source partition.")));
		offsets[i] = DatumGetInt64(elems[i]);
		if (offsets[i] < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("offset %d is negative", i + 1),
					 errdetail("Offset " INT64_FORMAT " is below 0, the first offset of a partition.",
							   offsets[i]),
					 errhint("Pass the offsets the events have in their source partition.")));
		if (i > 0 && offsets[i] <= offsets[i - 1])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("offsets must be strictly increasing within a batch"),
					 errdetail("Offset %d is " INT64_FORMAT ", offset %d before it is " INT64_FORMAT ".",
							   i + 1, offsets[i], i, offsets[i - 1]),
					 errhint("Deliver one source partition's events in log order, one offset per event.")));
	}
	return offsets;
}

/*
 * CanIngest tells whether the current role may queue events into p: it has
 * the privileges of the owner, or USAGE on the schema and INSERT on ingest.
 */
static bool
CanIngest(Pipeline *p)
{
	Oid			user = GetUserId();

	return has_privs_of_role(user, p->owner) ||
		(pg_namespace_aclcheck(p->nspid, user, ACL_USAGE) == ACLCHECK_OK &&
		 pg_class_aclcheck(p->ingest, user, ACL_INSERT) == ACLCHECK_OK);
}

/*
 * RequireIngest refuses a role that may not queue events into p.
 */
static void
RequireIngest(Pipeline *p)
{
	const char *s = quote_identifier(p->name);

	if (!CanIngest(p))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to ingest into pipeline \"%s\"", p->name),
				 errdetail("Source offsets of a pipeline are for roles that may insert into its queue."),
				 errhint("The pipeline's owner can grant that: GRANT USAGE ON SCHEMA %s TO ...; GRANT INSERT ON %s.ingest TO ....",
						 s, s)));
}

/*
 * SourceFind locks the row of (p, source), creating it if create is set,
 * and reads its committed offset.  It returns false when there is no row, or
 * the row has no committed offset yet.
 */
static bool
SourceFind(Oid table_owner, Pipeline *p, text *source, bool create, int64 *committed)
{
	Datum		values[2] = {Int32GetDatum(p->id), PointerGetDatum(source)};

	for (int attempt = 0; attempt < SOURCE_LOCK_ATTEMPTS; attempt++)
	{
		StatementExecAs(table_owner, SourcePlan(SOURCE_LOCK), values, NULL, false, -1);
		if (SPI_processed == 1)
		{
			bool		isnull;
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

			*committed = isnull ? -1 : DatumGetInt64(d);
			return !isnull;
		}
		if (!create)
			return false;

		/*
		 * A new source.  If another transaction is creating the same row, the
		 * insert waits for it and then does nothing; the next lock attempt
		 * sees its row.
		 */
		StatementExecAs(table_owner, SourcePlan(SOURCE_CREATE), values, NULL, false, -1);
		CHECK_FOR_INTERRUPTS();
	}
	elog(ERROR, "could not lock the offset of source \"%s\" of pipeline \"%s\"",
		 text_to_cstring(source), p->name);
	pg_unreachable();
}

/*
 * BuildOffsetsInsert: insert events into the queue from parallel arrays.
 */
static const char *
BuildOffsetsInsert(Pipeline *p)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.ingest (", quote_identifier(p->name));
	EventAppendColumns(&sql, p);
	appendStringInfoString(&sql, ") SELECT * FROM ");
	EventAppendUnnest(&sql, p, 0);
	return sql.data;
}

/*
 * OffsetsInsert queues n events, as the current role, in one statement.
 */
static void
OffsetsInsert(Pipeline *p, Event *events, int n)
{
	Datum		values[EV_MAX_NATTS];
	Oid			types[EV_MAX_NATTS];
	Event	  **ptrs = palloc(sizeof(Event *) * Max(n, 1));

	for (int j = 0; j < n; j++)
		ptrs[j] = &events[j];
	EventArrays(p, ptrs, n, values, types);
	StatementExec(StatementPrepare(p, BuildOffsetsInsert, EV_NPARAMS(p), types),
				  values, NULL, n);
}

/*
 * exactonce_ingest queues the events of a batch whose offsets are above the
 * source's committed offset, moves the committed offset to the batch's last
 * offset, and returns how many events it queued.
 */
Datum
exactonce_ingest(PG_FUNCTION_ARGS)
{
	char	   *name = OffsetsPipelineArg(fcinfo, 0);
	text	   *source = SourceArg(fcinfo, 1);
	ArrayType  *events_arr;
	int64	   *offsets;
	Pipeline   *p;
	Event	   *events;
	int			n,
				first = 0,
				nestlevel;
	int64		committed = -1;

	if (PG_ARGISNULL(2) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("events and offsets must not be NULL"),
				 errhint("Pass an empty array for an empty batch.")));
	events_arr = PG_GETARG_ARRAYTYPE_P(2);

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(name, false);
	RequireIngest(p);
	EventCheckComputed(p, true, "exactonce.ingest()");
	PipelineActAsOwner(p);		/* the caller may insert: checked */
	events = EventsFromArray(p, events_arr, &n);
	offsets = OffsetsFromArray(PG_GETARG_ARRAYTYPE_P(3), n);

	if (n > 0)
	{
		Oid			table_owner = StatementTableOwner("source_offset");
		Datum		values[5];

		if (SourceFind(table_owner, p, source, true, &committed))
			while (first < n && offsets[first] <= committed)
				first++;
		if (first < n)
			OffsetsInsert(p, events + first, n - first);

		values[0] = Int32GetDatum(p->id);
		values[1] = PointerGetDatum(source);
		/* a batch skipped whole had a committed offset to be skipped by */
		values[2] = Int64GetDatum(first < n ? offsets[n - 1] : committed);
		values[3] = Int64GetDatum(n - first);
		values[4] = Int64GetDatum(first);
		StatementExecAs(table_owner, SourcePlan(SOURCE_RECORD), values, NULL, false, 1);
	}

	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_INT64(n - first);
}

/*
 * exactonce_reset_source sets the committed offset of a source, or forgets
 * the source when the offset is NULL, and returns the committed offset it
 * had (NULL if none).  Owner only: it decides what counts as a replay.
 */
Datum
exactonce_reset_source(PG_FUNCTION_ARGS)
{
	char	   *name = OffsetsPipelineArg(fcinfo, 0);
	text	   *source = SourceArg(fcinfo, 1);
	Pipeline   *p;
	Oid			table_owner;
	Datum		values[3];
	int64		previous;
	bool		had;
	int			nestlevel;

	if (!PG_ARGISNULL(2) && PG_GETARG_INT64(2) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("committed offset must not be negative"),
				 errhint("Pass NULL to forget the source, so that its next batch is taken whatever its offsets.")));

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(name, true);
	PipelineActAsOwner(p);
	table_owner = StatementTableOwner("source_offset");

	/* waits for a consumer's transaction that holds the row */
	had = SourceFind(table_owner, p, source, !PG_ARGISNULL(2), &previous);
	values[0] = Int32GetDatum(p->id);
	values[1] = PointerGetDatum(source);
	if (PG_ARGISNULL(2))
		StatementExecAs(table_owner, SourcePlan(SOURCE_DELETE), values, NULL, false, -1);
	else
	{
		values[2] = PG_GETARG_DATUM(2);
		StatementExecAs(table_owner, SourcePlan(SOURCE_SET), values, NULL, false, 1);
	}

	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	if (!had)
		PG_RETURN_NULL();
	PG_RETURN_INT64(previous);
}

/*
 * exactonce_committed_offset returns the highest offset of a source that
 * ingest() has queued, NULL if none: where a consumer resumes.
 */
Datum
exactonce_committed_offset(PG_FUNCTION_ARGS)
{
	char	   *name = OffsetsPipelineArg(fcinfo, 0);
	text	   *source = SourceArg(fcinfo, 1);
	Pipeline   *p;
	Datum		values[2];
	bool		isnull = true;
	int64		committed = 0;
	int			nestlevel;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(name, false);
	RequireIngest(p);
	values[0] = Int32GetDatum(p->id);
	values[1] = PointerGetDatum(source);
	StatementExecAs(StatementTableOwner("source_offset"), SourcePlan(SOURCE_READ),
					values, NULL, true, -1);
	if (SPI_processed == 1)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			committed = DatumGetInt64(d);
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_INT64(committed);
}
