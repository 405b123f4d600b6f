/*-------------------------------------------------------------------------
 *
 * reduce.c
 *		Stage 3: apply staged batches to aggregates in one transaction and
 *		mark their tokens applied in the ledger.
 *
 * All staged batches (or the ones named) are locked, merged into one change
 * per cell and applied with one upsert; cells left without keys are deleted
 * in the same transaction.  Marking a token applied happens in that
 * transaction too, so a token is applied exactly once: a retry finds it
 * applied, or finds it staged because the first attempt rolled back.
 *
 * The ledger keeps an applied token for as long as something could stage the
 * same batch again, which is tied to consumption, not to time:
 *	 - batches from the queue are staged in the transaction that takes their
 *	   events from the queue, so no retry can produce them again; their tokens
 *	   are forgotten when their queue partition is truncated;
 *	 - batches staged by an external consumer are forgotten when it says its
 *	   source has moved past them, with exactonce.release().
 *
 *-------------------------------------------------------------------------
 */
#include "exactonce.h"

#include "miscadmin.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(exactonce_reduce_apply);
PG_FUNCTION_INFO_V1(exactonce_release);

/*
 * BuildLedgerPending: lock the staged batches, oldest first.
 */
static const char *
BuildLedgerPending(Pipeline *p)
{
	return psprintf("SELECT token, levels, cells, totals, keys FROM %s.ledger"
					" WHERE applied_at IS NULL ORDER BY staged_at, token FOR UPDATE",
					quote_identifier(p->name));
}

/*
 * BuildLedgerPendingTokens: lock the named staged batches.
 */
static const char *
BuildLedgerPendingTokens(Pipeline *p)
{
	return psprintf("SELECT token, levels, cells, totals, keys FROM %s.ledger"
					" WHERE applied_at IS NULL AND token = ANY($1)"
					" ORDER BY staged_at, token FOR UPDATE",
					quote_identifier(p->name));
}

/*
 * BuildLedgerApplied: mark batches applied and drop their payload.
 */
static const char *
BuildLedgerApplied(Pipeline *p)
{
	return psprintf("UPDATE %s.ledger SET applied_at = now(), levels = NULL,"
					" cells = NULL, totals = NULL, keys = NULL"
					" WHERE token = ANY($1) AND applied_at IS NULL",
					quote_identifier(p->name));
}

/*
 * BuildAggUpsert: add per-cell changes to aggregates.
 */
static const char *
BuildAggUpsert(Pipeline *p)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);
	int			arg = 2;

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.aggregates AS a (level", s);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", %s", quote_identifier(p->dims[i]));
	appendStringInfoString(&sql, ", total, keys, updated_at) SELECT u.*, now() FROM unnest($1::int4[]");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", $%d::text[]", arg++);
	appendStringInfo(&sql, ", $%d::numeric[], $%d::int8[]) AS u ON CONFLICT (level", arg, arg + 1);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", %s", quote_identifier(p->dims[i]));
	appendStringInfoString(&sql, ") DO UPDATE SET total = a.total + excluded.total,"
						   " keys = a.keys + excluded.keys, updated_at = excluded.updated_at"
						   " RETURNING a.ctid, a.keys, a.total");
	return sql.data;
}

/*
 * BuildAggDelete: delete cells that no key contributes to any more.
 */
static const char *
BuildAggDelete(Pipeline *p)
{
	return psprintf("DELETE FROM %s.aggregates WHERE ctid = ANY($1)",
					quote_identifier(p->name));
}

/*
 * MergeStaged adds the staged batches in SPI_tuptable to the cell table and
 * returns their tokens.
 */
static Datum *
MergeStaged(Pipeline *p, HTAB *cells, int *ntokens)
{
	uint64		n = SPI_processed;
	SPITupleTable *tt = SPI_tuptable;
	Datum	   *tokens = palloc(sizeof(Datum) * Max(n, 1));

	for (uint64 r = 0; r < n; r++)
	{
		HeapTuple	tup = tt->vals[r];
		bool		isnull;
		Datum	   *levels,
				   *cellv,
				   *totals,
				   *keys;
		bool	   *cellnulls;
		int			ncells,
					nflat;

		CHECK_FOR_INTERRUPTS();
		tokens[r] = PointerGetDatum(PG_DETOAST_DATUM_COPY(SPI_getbinval(tup, tt->tupdesc, 1, &isnull)));
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, tt->tupdesc, 2, &isnull)),
						  INT4OID, 4, true, TYPALIGN_INT, &levels, NULL, &ncells);
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, tt->tupdesc, 3, &isnull)),
						  TEXTOID, -1, false, TYPALIGN_INT, &cellv, &cellnulls, &nflat);
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, tt->tupdesc, 4, &isnull)),
						  NUMERICOID, -1, false, TYPALIGN_INT, &totals, NULL, &ncells);
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, tt->tupdesc, 5, &isnull)),
						  INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &keys, NULL, &ncells);
		if (nflat != ncells * p->ndims)
			elog(ERROR, "staged batch of pipeline \"%s\" is malformed", p->name);
		for (int c = 0; c < ncells; c++)
			CellTableAdd(cells, DatumGetInt32(levels[c]), &cellv[c * p->ndims],
						 DatumGetNumeric(totals[c]), DatumGetInt64(keys[c]));
	}
	*ntokens = (int) n;
	return tokens;
}

/*
 * ApplyCells adds the merged changes to aggregates and deletes the cells
 * that are left without keys.
 */
static void
ApplyCells(Pipeline *p, HTAB *cells)
{
	Oid			types[EXACTONCE_MAX_DIMENSIONS + 3];
	Datum		values[EXACTONCE_MAX_DIMENSIONS + 3];
	Datum		totals,
				keys;
	int			ncells;
	ItemPointer empty;
	Datum	   *emptyd;
	int			nempty = 0;
	Oid			deltype[1] = {TIDARRAYOID};
	Datum		delval[1];

	ncells = CellArrays(p, cells, &values[0], &values[1], &totals, &keys);
	if (ncells == 0)
		return;
	values[p->ndims + 1] = totals;
	values[p->ndims + 2] = keys;
	types[0] = INT4ARRAYOID;
	for (int i = 0; i < p->ndims; i++)
		types[1 + i] = TEXTARRAYOID;
	types[p->ndims + 1] = NUMERICARRAYOID;
	types[p->ndims + 2] = INT8ARRAYOID;
	SpiExec(SpiPlan(p, PLAN_AGG_UPSERT, BuildAggUpsert, p->ndims + 3, types),
			values, NULL, ncells);

	empty = palloc(sizeof(ItemPointerData) * ncells);
	emptyd = palloc(sizeof(Datum) * ncells);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		int64		keys;
		bool		zero;

		CHECK_FOR_INTERRUPTS();
		keys = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		zero = NumericIsZero(DatumGetNumeric(SPI_getbinval(tup, desc, 3, &isnull)));

		/*
		 * Only batches applied out of their staging order leave a cell with
		 * fewer than no keys, or with none and a total: a batch that moves a
		 * key on, applied before the one that brought it.
		 */
		if (keys < 0 || (keys == 0 && !zero))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the batches given would leave a cell of pipeline \"%s\" with " INT64_FORMAT " keys and a total of %s",
							p->name, keys, SPI_getvalue(tup, desc, 3)),
					 errdetail("A batch was given before a batch staged ahead of it, which it builds on."),
					 errhint("Apply tokens in the order they were staged, or all staged batches at once: exactonce.reduce_apply(pipeline).")));
		if (keys != 0)
			continue;
		empty[nempty] = *(ItemPointer) DatumGetPointer(SPI_getbinval(tup, desc, 1, &isnull));
		emptyd[nempty] = PointerGetDatum(&empty[nempty]);
		nempty++;
	}
	SPI_freetuptable(SPI_tuptable);
	if (nempty == 0)
		return;
	delval[0] = PointerGetDatum(construct_array(emptyd, nempty, TIDOID,
												sizeof(ItemPointerData), false, TYPALIGN_SHORT));
	SpiExec(SpiPlan(p, PLAN_AGG_DELETE, BuildAggDelete, 1, deltype), delval, NULL, nempty);
}

/*
 * ReduceApply applies the staged batches of a pipeline, or those among
 * tokens (a bytea[]) when have_tokens, and returns how many it applied.  The
 * caller holds the pipeline's progress lock.
 */
int
ReduceApply(Pipeline *p, Datum tokens, bool have_tokens)
{
	HTAB	   *cells = CellTableCreate();
	Oid			types[1] = {BYTEAARRAYOID};
	Datum		values[1] = {tokens};
	Datum	   *applied;
	int			napplied;
	SPITupleTable *pending;

	if (have_tokens)
		SpiExec(SpiPlan(p, PLAN_LEDGER_PENDING_TOKENS, BuildLedgerPendingTokens, 1, types),
				values, NULL, -1);
	else
		SpiExec(SpiPlan(p, PLAN_LEDGER_PENDING, BuildLedgerPending, 0, NULL), NULL, NULL, -1);
	pending = SPI_tuptable;
	applied = MergeStaged(p, cells, &napplied);
	if (napplied > 0)
	{
		ApplyCells(p, cells);
		values[0] = PointerGetDatum(construct_array(applied, napplied, BYTEAOID, -1, false, TYPALIGN_INT));
		SpiExec(SpiPlan(p, PLAN_LEDGER_APPLIED, BuildLedgerApplied, 1, types), values, NULL, napplied);
	}
	/* a flush reduces batch after batch in one SPI connection */
	SPI_freetuptable(pending);
	hash_destroy(cells);
	if (napplied == 0)
		return 0;

	FaultMaybeFail(FAULT_REDUCE, exactonce_fault_reduce);
	return napplied;
}

/*
 * BuildLedgerGC: forget applied tokens of a source up to a position.
 */
static const char *
BuildLedgerGC(Pipeline *p)
{
	return psprintf("DELETE FROM %s.ledger WHERE applied_at IS NOT NULL"
					" AND source = $1 AND (position <= $2 OR position IS NULL)",
					quote_identifier(p->name));
}

/*
 * LedgerCollect forgets the applied tokens that source staged at or below
 * position, or without a position, and returns how many it forgot.
 */
int64
LedgerCollect(Pipeline *p, const char *source, int64 position)
{
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {CStringGetTextDatum(source), Int64GetDatum(position)};

	SpiExec(SpiPlan(p, PLAN_LEDGER_GC, BuildLedgerGC, 2, types), values, NULL, -1);
	return (int64) SPI_processed;
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
	nestlevel = SpiPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PipelineActAsOwner(p);
	ProgressLock(p, &dummy, &dummy, &paused);
	applied = ReduceApply(p, PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1), !PG_ARGISNULL(1));
	PipelineActAsCaller(p);
	SpiUnpinSearchPath(nestlevel);
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

	if (strcmp(source, EXACTONCE_SOURCE_QUEUE) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_RESERVED_NAME),
				 errmsg("tokens of source \"%s\" are released by the pipeline itself", source),
				 errhint("Release the tokens of the source your consumer staged under.")));
	SPI_connect();
	nestlevel = SpiPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PipelineActAsOwner(p);
	ProgressLock(p, &dummy, &dummy, &paused);
	forgotten = LedgerCollect(p, source, PG_GETARG_INT64(2));
	PipelineActAsCaller(p);
	SpiUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_INT64(forgotten);
}
