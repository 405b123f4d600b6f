/*-------------------------------------------------------------------------
 *
 * map.c
 *		Stage 2: pre-aggregate a batch of deltas per rollup cell and stage it
 *		in the ledger under the SHA-256 of the batch's canonical encoding.
 *
 * The token hashes the deltas themselves, (key, version, cell, change)
 * sorted, not the pre-aggregate: two different batches can sum to the same
 * cells, but they never consist of the same transitions, because the state
 * stage applies each (key, version) once.  The ledger (ledger.c) stores a
 * token once, so a batch staged twice is stored once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "cell.h"
#include "distinct.h"
#include "fault.h"
#include "ledger.h"
#include "map.h"
#include "progress.h"
#include "statement.h"

PG_FUNCTION_INFO_V1(exactonce_map_stage);

/*
 * DeltaCmp orders deltas canonically: key, version, cell, change.
 */
static int
DeltaCmp(const void *a, const void *b, void *arg)
{
	const Delta *da = *(Delta *const *) a;
	const Delta *db = *(Delta *const *) b;
	int			ndims = *(int *) arg;
	int			c;

	c = TextCmp(da->key, db->key);
	if (c != 0)
		return c;
	if (da->version != db->version)
		return da->version < db->version ? -1 : 1;
	for (int i = 0; i < ndims; i++)
	{
		c = TextCmp((text *) DatumGetPointer(da->cell[i]), (text *) DatumGetPointer(db->cell[i]));
		if (c != 0)
			return c;
	}
	if (da->keys != db->keys)
		return da->keys < db->keys ? -1 : 1;
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(da->total),
											 NumericGetDatum(db->total)));
}

/*
 * DeltaCmpAll orders deltas as DeltaCmp does, then by their measures (NULL
 * first), which only deltas a caller brings can need: the state stage
 * yields one delta per key, version and cell.
 */
static int
DeltaCmpAll(const void *a, const void *b, void *arg)
{
	const Delta *da = *(Delta *const *) a;
	const Delta *db = *(Delta *const *) b;
	Pipeline   *p = (Pipeline *) arg;
	int			c = DeltaCmp(a, b, &p->ndims);

	for (int i = 0; c == 0 && i < p->nmeasures; i++)
	{
		Numeric		ma = da->measures[i];
		Numeric		mb = db->measures[i];

		if (ma == NULL || mb == NULL)
			c = (ma != NULL) - (mb != NULL);
		else
			c = DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(ma),
												  NumericGetDatum(mb)));
	}
	for (int i = 0; c == 0 && i < p->ndistinct; i++)
	{
		Datum		xa = da->distincts[i];
		Datum		xb = db->distincts[i];

		if (xa == (Datum) 0 || xb == (Datum) 0)
			c = (xa != (Datum) 0) - (xb != (Datum) 0);
		else
			c = TextCmp((text *) DatumGetPointer(xa), (text *) DatumGetPointer(xb));
	}
	return c;
}

/*
 * HashText feeds a length-prefixed text into the hash.
 */
static void
HashText(pg_cryptohash_ctx *ctx, text *t)
{
	uint32		len = pg_hton32(VARSIZE_ANY_EXHDR(t));

	pg_cryptohash_update(ctx, (uint8 *) &len, sizeof(len));
	pg_cryptohash_update(ctx, (uint8 *) VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

/*
 * HashInt64 feeds a big-endian int64 into the hash.
 */
static void
HashInt64(pg_cryptohash_ctx *ctx, int64 v)
{
	uint64		be = pg_hton64((uint64) v);

	pg_cryptohash_update(ctx, (uint8 *) &be, sizeof(be));
}

/*
 * HashNumeric feeds a normalised, length-prefixed numeric into the hash.
 */
static void
HashNumeric(pg_cryptohash_ctx *ctx, Numeric n)
{
	char	   *num = numeric_normalize(n);
	uint32		len = pg_hton32(strlen(num));

	pg_cryptohash_update(ctx, (uint8 *) &len, sizeof(len));
	pg_cryptohash_update(ctx, (uint8 *) num, strlen(num));
	pfree(num);
}

/*
 * DeltaToken computes the SHA-256 of the canonical encoding of the deltas:
 * sorted, each as key, version, cell values and change, every text length-
 * prefixed and every number in a fixed format.  A pipeline with measures
 * adds each delta's measures (a NULL as the length 0xFFFFFFFF) and, ahead
 * of them all, their number.
 */
static void
DeltaToken(Pipeline *p, Delta *deltas, int n, uint8 *token)
{
	Delta	  **sorted = palloc(sizeof(Delta *) * n);
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	for (int i = 0; i < n; i++)
		sorted[i] = &deltas[i];
	if (p->nmeasures > 0 || p->ndistinct > 0)
		qsort_arg(sorted, n, sizeof(Delta *), DeltaCmpAll, p);
	else
		qsort_arg(sorted, n, sizeof(Delta *), DeltaCmp, &p->ndims);

	if (pg_cryptohash_init(ctx) < 0)
		elog(ERROR, "could not initialize SHA-256: %s", pg_cryptohash_error(ctx));
	HashInt64(ctx, p->ndims);
	if (p->nmeasures > 0)
		HashInt64(ctx, p->nmeasures);
	if (p->ndistinct > 0)
		HashInt64(ctx, p->ndistinct);
	for (int i = 0; i < n; i++)
	{
		Delta	   *d = sorted[i];

		CHECK_FOR_INTERRUPTS();
		HashText(ctx, d->key);
		HashInt64(ctx, d->version);
		for (int j = 0; j < p->ndims; j++)
			HashText(ctx, (text *) DatumGetPointer(d->cell[j]));
		HashNumeric(ctx, d->total);
		HashInt64(ctx, d->keys);
		for (int j = 0; j < p->nmeasures; j++)
		{
			uint32		none = 0xFFFFFFFF;

			if (d->measures[j] == NULL)
				pg_cryptohash_update(ctx, (uint8 *) &none, sizeof(none));
			else
				HashNumeric(ctx, d->measures[j]);
		}
		for (int j = 0; j < p->ndistinct; j++)
		{
			uint32		none = 0xFFFFFFFF;

			if (d->distincts[j] == (Datum) 0)
				pg_cryptohash_update(ctx, (uint8 *) &none, sizeof(none));
			else
				HashText(ctx, (text *) DatumGetPointer(d->distincts[j]));
		}
	}
	if (pg_cryptohash_final(ctx, token, EXACTONCE_TOKEN_LEN) < 0)
		elog(ERROR, "could not finalize SHA-256: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
	pfree(sorted);
}

/*
 * DeltaExtremes sets the values a delta brings into its cell (keys 1) or
 * takes out of it (keys -1) of each measure with min_max, as the least and
 * greatest of each (extrema.c).
 */
static void
DeltaExtremes(Pipeline *p, Delta *d, int i, CellChange *change)
{
	bool		in = d->keys == 1;

	if ((d->keys != 1 && d->keys != -1) || (!in && p->mode == PIPELINE_ACCUMULATE))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("delta %d has keys " INT64_FORMAT ", but pipeline \"%s\" keeps min and max",
						i + 1, d->keys, p->name),
				 errdetail("A delta of a pipeline with min_max adds one key (1) or, in latest mode, takes one (-1)."),
				 errhint("Pass the deltas exactonce.state_upsert() returned.")));
	change->ext = palloc0(sizeof(Numeric) * CELL_NEXT(p));
	for (int slot = 0; slot <= p->nmeasures; slot++)
	{
		Numeric		v = slot == 0 ? d->total : d->measures[slot - 1];

		if (!p->min_max[slot] || v == NULL)
			continue;
		/* a delta carries a leaving value negated */
		if (!in)
			v = DatumGetNumeric(DirectFunctionCall1(numeric_uminus, NumericGetDatum(v)));
		change->ext[CELL_EXT(p, in ? EXT_LO_IN : EXT_LO_OUT, slot)] = v;
		change->ext[CELL_EXT(p, in ? EXT_HI_IN : EXT_HI_OUT, slot)] = v;
	}
}

/*
 * DeltaChange is the change the i-th delta makes to its cell.
 */
static void
DeltaChange(Pipeline *p, Delta *d, int i, CellChange *change)
{
	change->total = d->total;
	change->keys = d->keys;
	for (int j = 0; j < p->nmeasures; j++)
	{
		change->sums[j] = d->measures[j];
		change->counts[j] = d->measures[j] ? d->keys : 0;
	}
	memset(change->distinct, 0, sizeof(change->distinct));
	change->ext = NULL;
	if (p->any_min_max)
		DeltaExtremes(p, d, i, change);
}

/*
 * RollUp pre-aggregates deltas per leaf cell, then the leaves into every
 * cell of the pipeline's grouping (every level of its rollup, or each of
 * its grouping sets), which costs one addition per delta and a few per
 * leaf.
 */
static HTAB *
RollUp(Pipeline *p, Delta *deltas, int n)
{
	HTAB	   *leaves = CellTableCreate();
	HTAB	   *cells = CellTableCreate();
	HASH_SEQ_STATUS seq;
	Cell	   *leaf;

	for (int i = 0; i < n; i++)
	{
		CellChange	change;

		DeltaChange(p, &deltas[i], i, &change);
		CellTableAdd(leaves, p, CELL_LEVEL_MASK(p->ndims), deltas[i].cell, &change);
	}
	hash_seq_init(&seq, leaves);
	while ((leaf = hash_seq_search(&seq)) != NULL)
		for (int s = 0; s < p->nsets; s++)
			CellTableAdd(cells, p, p->sets[s], leaf->dims, &leaf->change);
	hash_destroy(leaves);
	return cells;
}

/*
 * MapStage pre-aggregates n deltas at every rollup level and stages them
 * under their token, which it writes to token.  It returns false (staging
 * nothing) for an empty batch.
 */
bool
MapStage(Pipeline *p, Delta *deltas, int n, const char *source, int64 position,
		 uint8 *token)
{
	HTAB	   *cells;
	CellColumns cols;
	MemberColumns members;

	if (n == 0)
		return false;
	DeltaToken(p, deltas, n, token);

	cells = RollUp(p, deltas, n);
	CellColumnsOf(p, cells, &cols);
	members.nmembers = 0;
	if (p->ndistinct > 0)
	{
		HTAB	   *leaves = DistinctTableCreate();

		DistinctOfDeltas(p, deltas, n, leaves);
		DistinctColumnsOf(p, leaves, &members);
		hash_destroy(leaves);
	}
	LedgerStage(p, token, source, position, n, &cols, &members);
	hash_destroy(cells);

	FaultMaybeFail(FAULT_MAP);
	return true;
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
