/*-------------------------------------------------------------------------
 *
 * stages.c
 *		The three stages called from SQL, for callers that bring their own
 *		events or deltas (README.md, "Consumers that bring their own
 *		events"): state_upsert, map_stage, reduce_apply, and release.
 *
 * Each loads the pipeline through the one door (catalog/pipeline.c), acts
 * as its owner, takes the pipeline's rows in the lock order
 * (engine/progress.c) and runs the stage as the workers do; the arrays a
 * caller sends are checked as hostile input before a stage sees them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/event.h"
#include "engine/ledger.h"
#include "engine/map.h"
#include "engine/progress.h"
#include "engine/reduce.h"
#include "engine/state.h"

PG_FUNCTION_INFO_V1(exactonce_state_upsert);
PG_FUNCTION_INFO_V1(exactonce_map_stage);
PG_FUNCTION_INFO_V1(exactonce_reduce_apply);
PG_FUNCTION_INFO_V1(exactonce_release);

/*
 * exactonce_state_upsert is stage 1 for callers that bring their own events:
 * it applies them to state and returns the deltas.  Run it in the same
 * transaction as map_stage, so the deltas are staged when state changes.
 */
Datum
exactonce_state_upsert(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name;
	ArrayType  *arr;
	Pipeline   *p;
	Event	   *events;
	Delta	   *deltas;
	StageCounts counts = {0};
	int			nevents,
				ndeltas,
				nestlevel;
	int64		dummy;
	bool		paused;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline and events must not be NULL")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	arr = PG_GETARG_ARRAYTYPE_P(1);
	PipelineRequireReadCommitted("exactonce.state_upsert()");
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(name, true);
	EventCheckComputed(p, false, "exactonce.state_upsert()");
	PipelineActAsOwner(p);
	events = EventsFromArray(p, arr, &nevents);

	ProgressLockAll(p, NULL, &dummy, &dummy, &paused);
	deltas = StateApply(p, events, nevents, &ndeltas, &counts);
	ProgressRecord(p, &counts, 1, -1);

	for (int i = 0; i < ndeltas; i++)
	{
		Datum		values[7];
		bool		nulls[7] = {false};

		CHECK_FOR_INTERRUPTS();
		values[0] = PointerGetDatum(deltas[i].key);
		values[1] = Int64GetDatum(deltas[i].version);
		values[2] = StatementTextArray(deltas[i].cell, NULL, p->ndims);
		values[3] = NumericGetDatum(deltas[i].total);
		values[4] = Int64GetDatum(deltas[i].keys);
		/* the type's measures and distincts, from 1.3 on */
		nulls[5] = p->nmeasures == 0;
		if (p->nmeasures > 0)
			values[5] = StatementNumericArray(deltas[i].measures, p->nmeasures);
		nulls[6] = p->ndistinct == 0;
		if (p->ndistinct > 0)
		{
			bool	   *dn = palloc(sizeof(bool) * p->ndistinct);

			for (int j = 0; j < p->ndistinct; j++)
				dn[j] = deltas[i].distincts[j] == (Datum) 0;
			values[6] = StatementTextArray(deltas[i].distincts, dn, p->ndistinct);
		}
		if ((p->nmeasures > 0 || p->ndistinct > 0) && rsinfo->setDesc->natts < 7)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the exactonce library is newer than the extension's SQL objects"),
					 errhint("Run ALTER EXTENSION exactonce UPDATE.")));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	return (Datum) 0;
}

/*
 * SourceArg returns the source a caller stages under: "external" by default,
 * never the queue's own.
 */
static char *
SourceArg(FunctionCallInfo fcinfo, int argno)
{
	char	   *source = PG_ARGISNULL(argno) ? "external" : text_to_cstring(PG_GETARG_TEXT_PP(argno));

	if (strcmp(source, EXACTONCE_SOURCE_QUEUE) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_RESERVED_NAME),
				 errmsg("source \"%s\" is reserved for the pipeline's own queue", source),
				 errhint("Name the consumer, for example 'kafka:trades:3' for partition 3 of topic trades.")));
	return source;
}

/*
 * DeltaArray reads attribute arr of delta i, an array of n elements of
 * elemtype (what the pipeline has n of), into n datums, 0 for a NULL; none
 * given (arr 0) is all NULL.  It returns NULL when the pipeline has none.
 */
static Datum *
DeltaArray(Pipeline *p, int i, Datum arr, Oid elemtype, int n, const char *what)
{
	Datum	   *result;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	ArrayType  *a = arr != (Datum) 0 ? DatumGetArrayTypeP(arr) : NULL;

	if (a != NULL && (ARR_NDIM(a) > 1 ||
					  ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a)) != n))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("delta %d has %d %s, pipeline \"%s\" has %d",
						i + 1, ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a)), what, p->name, n)));
	if (n == 0)
		return NULL;
	result = palloc0(sizeof(Datum) * n);
	if (a == NULL)
		return result;
	deconstruct_array(a, elemtype, -1, false, TYPALIGN_INT, &elems, &nulls, &nelems);
	for (int j = 0; j < n; j++)
		result[j] = nulls[j] ? (Datum) 0 : elems[j];
	return result;
}

/*
 * MeasuresFromArray reads the measures of delta i from a numeric[] (0: none
 * given, all NULL); each must be a finite number.
 */
static Numeric *
MeasuresFromArray(Pipeline *p, int i, Datum arr)
{
	Datum	   *d = DeltaArray(p, i, arr, NUMERICOID, p->nmeasures, "measures");
	Numeric    *measures;

	if (d == NULL)
		return NULL;
	measures = palloc(sizeof(Numeric) * p->nmeasures);
	for (int j = 0; j < p->nmeasures; j++)
	{
		measures[j] = d[j] ? DatumGetNumeric(d[j]) : NULL;
		if (measures[j] && (numeric_is_nan(measures[j]) || numeric_is_inf(measures[j])))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("delta %d has a measure that is not a finite number", i + 1)));
	}
	return measures;
}

/*
 * CheckWindowCell insists that a caller's delta names a window as the state
 * stage does, the start of a window in its text: reduce reads the
 * watermark from it.
 */
static void
CheckWindowCell(Pipeline *p, int i, Datum start)
{
	char	   *given = TextDatumGetCString(start);
	Datum		t = DirectFunctionCall3(timestamptz_in, CStringGetDatum(given),
										ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	Datum		canonical = TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(t)) ? (Datum) 0 :
	PipelineWindowStart(p, DatumGetTimestampTz(t));

	if (canonical == (Datum) 0 || strcmp(TextDatumGetCString(canonical), given) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("delta %d names window_start \"%s\", which starts no window of pipeline \"%s\"",
						i + 1, given, p->name),
				 errhint("Pass the deltas exactonce.state_upsert() returned.")));
}

/*
 * DeltasFromArray turns an exactonce.delta[] into deltas.
 */
static Delta *
DeltasFromArray(Pipeline *p, ArrayType *arr, int *ndeltas)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	Delta	   *deltas;
	TupleDesc	desc = NULL;

	deconstruct_array(arr, ARR_ELEMTYPE(arr), -1, false, TYPALIGN_DOUBLE, &elems, &nulls, &n);
	deltas = palloc0(sizeof(Delta) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		HeapTupleHeader rec;
		HeapTupleData tuple;
		Datum		values[7];
		bool		isnull[7];
		Datum	   *cell;
		bool	   *cellnulls;
		int			ncell;

		CHECK_FOR_INTERRUPTS();
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("delta %d is NULL", i + 1)));
		rec = DatumGetHeapTupleHeader(elems[i]);
		if (desc == NULL)
			desc = lookup_rowtype_tupdesc_copy(HeapTupleHeaderGetTypeId(rec),
											   HeapTupleHeaderGetTypMod(rec));
		tuple.t_len = HeapTupleHeaderGetDatumLength(rec);
		tuple.t_data = rec;
		heap_deform_tuple(&tuple, desc, values, isnull);
		if (desc->natts < 7 && (p->nmeasures > 0 || p->ndistinct > 0))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the exactonce library is newer than the extension's SQL objects"),
					 errhint("Run ALTER EXTENSION exactonce UPDATE.")));
		for (int a = 0; a < 5; a++)
			if (isnull[a])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("delta %d has a NULL %s", i + 1, NameStr(TupleDescAttr(desc, a)->attname))));
		deconstruct_array(DatumGetArrayTypeP(values[2]), TEXTOID, -1, false, TYPALIGN_INT,
						  &cell, &cellnulls, &ncell);
		if (ncell != p->ndims)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("delta %d names a cell of %d values, pipeline \"%s\" has %d dimensions",
							i + 1, ncell, p->name, p->ndims)));
		deltas[i].cell = palloc(sizeof(Datum) * Max(p->ndims, 1));
		for (int d = 0; d < ncell; d++)
		{
			if (cellnulls[d])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("delta %d has a NULL cell value", i + 1)));
			deltas[i].cell[d] = cell[d];
		}
		if (p->windowed)
			CheckWindowCell(p, i, deltas[i].cell[0]);
		deltas[i].key = DatumGetTextPP(values[0]);
		deltas[i].version = DatumGetInt64(values[1]);
		deltas[i].total = DatumGetNumeric(values[3]);
		deltas[i].keys = DatumGetInt64(values[4]);
		deltas[i].measures = MeasuresFromArray(p, i, desc->natts < 6 || isnull[5] ? (Datum) 0 : values[5]);
		deltas[i].distincts = DeltaArray(p, i, desc->natts < 7 || isnull[6] ? (Datum) 0 : values[6],
										 TEXTOID, p->ndistinct, "distinct_counts values");
	}
	*ndeltas = n;
	return deltas;
}

/*
 * exactonce_map_stage is stage 2 for callers that bring their own deltas: it
 * stages them and returns their token (NULL for no deltas).
 */
Datum
exactonce_map_stage(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *source;
	int64		position;
	Pipeline   *p;
	Delta	   *deltas;
	int			ndeltas,
				nestlevel;
	uint8		token[EXACTONCE_TOKEN_LEN];
	bool		staged;
	int64		dummy;
	bool		paused;
	bytea	   *result;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	PipelineRequireReadCommitted("exactonce.map_stage()");
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	source = SourceArg(fcinfo, 2);
	position = PG_ARGISNULL(3) ? -1 : PG_GETARG_INT64(3);

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(name, true);
	PipelineActAsOwner(p);
	deltas = DeltasFromArray(p, PG_GETARG_ARRAYTYPE_P(1), &ndeltas);
	ProgressLock(p, &dummy, &dummy, &paused);
	staged = MapStage(p, deltas, ndeltas, source, position, token);
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();

	if (!staged)
		PG_RETURN_NULL();
	result = palloc(VARHDRSZ + EXACTONCE_TOKEN_LEN);
	SET_VARSIZE(result, VARHDRSZ + EXACTONCE_TOKEN_LEN);
	memcpy(VARDATA(result), token, EXACTONCE_TOKEN_LEN);
	PG_RETURN_BYTEA_P(result);
}

/*
 * exactonce_reduce_apply is stage 3 for callers: it applies the staged
 * batches (all, or the given tokens) and returns how many it applied.
 */
Datum
exactonce_reduce_apply(PG_FUNCTION_ARGS)
{
	Pipeline   *p;
	int			applied,
				nestlevel;
	int64		dummy;
	bool		paused;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline name must not be NULL")));
	PipelineRequireReadCommitted("exactonce.reduce_apply()");
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PipelineActAsOwner(p);
	ProgressLock(p, &dummy, &dummy, &paused);
	applied = ReduceApply(p, PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1), !PG_ARGISNULL(1));
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_INT32(applied);
}

/*
 * exactonce_release forgets the applied tokens an external consumer staged
 * from source at or below position: it promises not to stage them again.
 */
Datum
exactonce_release(PG_FUNCTION_ARGS)
{
	char	   *source = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Pipeline   *p;
	int64		forgotten,
				dummy;
	int			nestlevel;
	bool		paused;

	PipelineRequireReadCommitted("exactonce.release()");
	if (strcmp(source, EXACTONCE_SOURCE_QUEUE) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_RESERVED_NAME),
				 errmsg("tokens of source \"%s\" are released by the pipeline itself", source),
				 errhint("Release the tokens of the source your consumer staged under.")));
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PipelineActAsOwner(p);
	ProgressLock(p, &dummy, &dummy, &paused);
	forgotten = LedgerCollect(p, source, PG_GETARG_INT64(2));
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_INT64(forgotten);
}
