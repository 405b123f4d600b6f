/*-------------------------------------------------------------------------
 *
 * reduce.c
 *		Stage 3: apply staged batches to aggregates in one transaction and
 *		mark their tokens applied in the ledger.
 *
 * All staged batches (or the ones named) are locked, merged into one change
 * per cell and applied with one upsert; cells left without keys are deleted
 * in the same transaction, which also marks the tokens applied (ledger.c),
 * so a token's batch reaches the aggregates exactly once.  Reduce runs under
 * the pipeline's progress row lock (progress.c), one batch set at a time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "cell.h"
#include "extrema.h"
#include "fault.h"
#include "ledger.h"
#include "progress.h"
#include "reduce.h"
#include "statement.h"

PG_FUNCTION_INFO_V1(exactonce_reduce_apply);

/*
 * BuildAggUpsert: add per-cell changes to aggregates, with the sums and
 * counts of the measures (their averages follow, as generated columns), and
 * set the min and max of the cells kept in extrema.
 */
static const char *
BuildAggUpsert(Pipeline *p)
{
	StringInfoData sql;
	StringInfoData cell;
	const char *s = quote_identifier(p->name);
	int			arg = 2;

	initStringInfo(&cell);
	appendStringInfoString(&cell, "(ARRAY[");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&cell, "%su.d%d", i > 0 ? ", " : "", i);
	appendStringInfoString(&cell, "]::text[])[1:u.level]");

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.aggregates AS a (level", s);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", %s", quote_identifier(p->dims[i]));
	appendStringInfoString(&sql, ", total, keys");
	for (int i = 0; i < p->nmeasures; i++)
		appendStringInfo(&sql, ", %s, %s",
						 quote_identifier(psprintf("%s_sum", p->measures[i])),
						 quote_identifier(psprintf("%s_count", p->measures[i])));
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
			appendStringInfo(&sql, ", %s, %s",
							 quote_identifier(psprintf("%s_min", PipelineExtremumName(p, slot))),
							 quote_identifier(psprintf("%s_max", PipelineExtremumName(p, slot))));
	appendStringInfoString(&sql, ", updated_at) SELECT u.*");
	ExtremaAppendLookups(&sql, p, cell.data);
	appendStringInfoString(&sql, ", now() FROM unnest($1::int4[]");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", $%d::text[]", arg++);
	appendStringInfo(&sql, ", $%d::numeric[], $%d::int8[]", arg, arg + 1);
	arg += 2;
	for (int i = 0; i < p->nmeasures; i++, arg += 2)
		appendStringInfo(&sql, ", $%d::numeric[], $%d::int8[]", arg, arg + 1);
	appendStringInfoString(&sql, ") AS u(level");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", d%d", i);
	appendStringInfoString(&sql, ", total, keys");
	for (int i = 0; i < p->nmeasures; i++)
		appendStringInfo(&sql, ", s%d, c%d", i, i);
	appendStringInfoString(&sql, ") ON CONFLICT (level");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", %s", quote_identifier(p->dims[i]));
	appendStringInfoString(&sql, ") DO UPDATE SET total = a.total + excluded.total,"
						   " keys = a.keys + excluded.keys, updated_at = excluded.updated_at");
	for (int i = 0; i < p->nmeasures; i++)
	{
		const char *sum = quote_identifier(psprintf("%s_sum", p->measures[i]));
		const char *count = quote_identifier(psprintf("%s_count", p->measures[i]));

		appendStringInfo(&sql, ", %s = a.%s + excluded.%s, %s = a.%s + excluded.%s",
						 sum, sum, sum, count, count, count);
	}
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			const char *min = quote_identifier(psprintf("%s_min", PipelineExtremumName(p, slot)));
			const char *max = quote_identifier(psprintf("%s_max", PipelineExtremumName(p, slot)));

			appendStringInfo(&sql, ", %s = excluded.%s, %s = excluded.%s", min, min, max, max);
		}
	appendStringInfoString(&sql, " RETURNING a.ctid, a.keys, a.total");
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
 * MergeStaged adds the staged batches of tt (LedgerLockStaged) to the cell
 * table, and the changes of their values behind min and max to members,
 * and returns their tokens.
 */
static Datum *
MergeStaged(Pipeline *p, SPITupleTable *tt, HTAB *cells, HTAB *members, int *ntokens)
{
	uint64		n = tt->numvals;
	Datum	   *tokens = palloc(sizeof(Datum) * Max(n, 1));

	for (uint64 r = 0; r < n; r++)
	{
		HeapTuple	tup = tt->vals[r];
		TupleDesc	desc = tt->tupdesc;
		bool		isnull;
		Datum	   *levels,
				   *cellv,
				   *totals,
				   *keys,
				   *sums = NULL,
				   *counts = NULL;
		bool	   *cellnulls,
				   *sumnulls;
		int			ncells;

		CHECK_FOR_INTERRUPTS();
		tokens[r] = PointerGetDatum(PG_DETOAST_DATUM_COPY(SPI_getbinval(tup, desc, 1, &isnull)));
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 2, &isnull)),
						  INT4OID, 4, true, TYPALIGN_INT, &levels, NULL, &ncells);
		CellUnflatten(SPI_getbinval(tup, desc, 3, &isnull), TEXTOID, p->ndims, ncells,
					  &cellv, &cellnulls);
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 4, &isnull)),
						  NUMERICOID, -1, false, TYPALIGN_INT, &totals, NULL, &ncells);
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 5, &isnull)),
						  INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &keys, NULL, &ncells);
		if (p->nmeasures > 0)
		{
			CellUnflatten(SPI_getbinval(tup, desc, 6, &isnull), NUMERICOID, p->nmeasures,
						  ncells, &sums, &sumnulls);
			CellUnflatten(SPI_getbinval(tup, desc, 7, &isnull), INT8OID, p->nmeasures,
						  ncells, &counts, &sumnulls);
		}
		for (int c = 0; c < ncells; c++)
		{
			CellChange	change;

			change.total = DatumGetNumeric(totals[c]);
			change.keys = DatumGetInt64(keys[c]);
			for (int i = 0; i < p->nmeasures; i++)
			{
				change.sums[i] = DatumGetNumeric(sums[c * p->nmeasures + i]);
				change.counts[i] = DatumGetInt64(counts[c * p->nmeasures + i]);
			}
			CellTableAdd(cells, p, DatumGetInt32(levels[c]), &cellv[c * p->ndims], &change);
		}
		if (p->any_min_max)
			ExtremaMergeStaged(p, tup, desc, 8, members, cells);
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
	Oid			types[EXACTONCE_MAX_DIMENSIONS + 3 + 2 * EXACTONCE_MAX_MEASURES];
	Datum		values[EXACTONCE_MAX_DIMENSIONS + 3 + 2 * EXACTONCE_MAX_MEASURES];
	CellColumns cols;
	int			ncells,
				nargs;
	ItemPointer empty;
	Datum	   *emptyd;
	int			nempty = 0;
	Oid			deltype[1] = {TIDARRAYOID};
	Datum		delval[1];

	CellColumnsOf(p, cells, &cols);
	ncells = cols.ncells;
	if (ncells == 0)
		return;
	values[0] = cols.levels;
	types[0] = INT4ARRAYOID;
	for (int i = 0; i < p->ndims; i++)
	{
		values[1 + i] = cols.dims[i];
		types[1 + i] = TEXTARRAYOID;
	}
	nargs = p->ndims + 1;
	values[nargs] = cols.totals;
	types[nargs++] = NUMERICARRAYOID;
	values[nargs] = cols.keys;
	types[nargs++] = INT8ARRAYOID;
	for (int i = 0; i < p->nmeasures; i++)
	{
		values[nargs] = cols.sums[i];
		types[nargs++] = NUMERICARRAYOID;
		values[nargs] = cols.counts[i];
		types[nargs++] = INT8ARRAYOID;
	}
	StatementExec(StatementPrepare(p, BuildAggUpsert, nargs, types),
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
	StatementExec(StatementPrepare(p, BuildAggDelete, 1, deltype), delval, NULL, nempty);
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
	HTAB	   *members = p->any_min_max ? ExtremaTableCreate() : NULL;
	Datum	   *applied;
	int			napplied;
	SPITupleTable *pending;

	Assert(p->progress_locked);
	pending = LedgerLockStaged(p, tokens, have_tokens);
	applied = MergeStaged(p, pending, cells, members, &napplied);
	if (napplied > 0)
	{
		/* the aggregates upsert reads the min and max from extrema */
		if (members)
			ExtremaApply(p, members);
		ApplyCells(p, cells);
		LedgerMarkApplied(p, applied, napplied);
	}
	/* a flush reduces batch after batch in one SPI connection */
	SPI_freetuptable(pending);
	hash_destroy(cells);
	if (members)
		hash_destroy(members);
	if (napplied == 0)
		return 0;

	FaultMaybeFail(FAULT_REDUCE);
	return napplied;
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
