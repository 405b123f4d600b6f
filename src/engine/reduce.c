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
 * the pipeline's progress row lock (progress.c), one batch set at a time: a
 * worker's takes in the batches other workers left staged meanwhile.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog/statement.h"
#include "engine/cell.h"
#include "engine/distinct.h"
#include "engine/extrema.h"
#include "engine/feed.h"
#include "engine/ledger.h"
#include "engine/progress.h"
#include "engine/reduce.h"
#include "utils/fault.h"
#include "utils/wake.h"

/*
 * BuildAggUpsert: add per-cell changes to aggregates, with the sums and
 * counts of the measures (their averages follow, as generated columns).
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
	appendStringInfoString(&sql, ", total, keys");
	for (int i = 0; i < p->nmeasures; i++)
		appendStringInfo(&sql, ", %s, %s",
						 quote_identifier(psprintf("%s_sum", p->measures[i])),
						 quote_identifier(psprintf("%s_count", p->measures[i])));
	for (int i = 0; i < p->ndistinct; i++)
		appendStringInfo(&sql, ", %s", quote_identifier(psprintf("%s_distinct", p->distincts[i])));
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
			appendStringInfo(&sql, ", %s, %s",
							 quote_identifier(psprintf("%s_min", PipelineExtremumName(p, slot))),
							 quote_identifier(psprintf("%s_max", PipelineExtremumName(p, slot))));
	appendStringInfoString(&sql, ", updated_at) SELECT u.*, now() FROM unnest($1::int4[]");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", $%d::text[]", arg++);
	appendStringInfo(&sql, ", $%d::numeric[], $%d::int8[]", arg, arg + 1);
	arg += 2;
	for (int i = 0; i < p->nmeasures; i++, arg += 2)
		appendStringInfo(&sql, ", $%d::numeric[], $%d::int8[]", arg, arg + 1);
	for (int i = 0; i < p->ndistinct; i++)
		appendStringInfo(&sql, ", $%d::int8[]", arg++);
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			appendStringInfo(&sql, ", $%d::numeric[], $%d::numeric[]", arg, arg + 1);
			arg += 2;
		}
	appendStringInfoString(&sql, ") AS u(level");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", d%d", i);
	appendStringInfoString(&sql, ", total, keys");
	for (int i = 0; i < p->nmeasures; i++)
		appendStringInfo(&sql, ", s%d, c%d", i, i);
	for (int i = 0; i < p->ndistinct; i++)
		appendStringInfo(&sql, ", x%d", i);
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
			appendStringInfo(&sql, ", lo%d, hi%d", slot, slot);
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
	for (int i = 0; i < p->ndistinct; i++)
	{
		const char *c = quote_identifier(psprintf("%s_distinct", p->distincts[i]));

		appendStringInfo(&sql, ", %s = a.%s + excluded.%s", c, c, c);
	}

	/*
	 * min and max take in the least and greatest value entering the cell;
	 * extrema.c sets anew those whose extreme may have left
	 */
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
			for (int hi = 0; hi <= 1; hi++)
			{
				const char *c = quote_identifier(psprintf("%s_%s", PipelineExtremumName(p, slot),
														  hi ? "max" : "min"));

				appendStringInfo(&sql, ", %s = %s(a.%s, excluded.%s)", c, hi ? "greatest" : "least", c, c);
			}
	/* the cells, for their min and max (extrema.c) and the feed (feed.c) */
	appendStringInfoString(&sql, " RETURNING a.ctid, a.keys, a.total, a.level");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", a.%s", quote_identifier(p->dims[i]));
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
			appendStringInfo(&sql, ", a.%s, a.%s",
							 quote_identifier(psprintf("%s_min", PipelineExtremumName(p, slot))),
							 quote_identifier(psprintf("%s_max", PipelineExtremumName(p, slot))));
	if (PIPELINE_RESERVES(p))
		appendStringInfoString(&sql, ", a." PIPELINE_RESERVE_COLUMN);
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
 * BuildAdvanceWatermark: move the watermark forward, never back.
 */
static const char *
BuildAdvanceWatermark(Pipeline *p)
{
	return psprintf("UPDATE %s.progress SET watermark = greatest(watermark, $1)",
					quote_identifier(p->name));
}

/*
 * StagedGrouping returns the grouping of a staged cell: staged as its level
 * in a rollup, else as the grouping itself, which must be the pipeline's.
 */
static uint32
StagedGrouping(Pipeline *p, HeapTuple tup, TupleDesc desc, int32 staged)
{
	for (int s = 0; s < p->nsets; s++)
		if (p->rollup ? staged == s : (uint32) staged == p->sets[s])
			return p->sets[s];
	CellStagedMalformed(p, tup, desc, psprintf("a cell of level %d, which is no grouping of the pipeline", staged));
}

/*
 * StagedExt reads a staged cell's lists of least and greatest values
 * (cell.h): cols values for each, CELL_EXT_COLS of them, or 1 where the
 * batch was staged before 1.16 with a list's first value, which lists
 * nothing past it.
 */
static CellExtList *
StagedExt(Pipeline *p, Datum *values, bool *nulls, int cols)
{
	CellExtList *ext = palloc0(sizeof(CellExtList) * CELL_NEXT(p));

	for (int i = 0; i < CELL_NEXT(p); i++)
	{
		Datum	   *v = &values[i * cols];
		bool	   *isnull = &nulls[i * cols];

		for (int k = 0; k < Min(cols, EXT_KEEP) && !isnull[k]; k++)
			ext[i].v[ext[i].n++] = DatumGetNumeric(v[k]);
		ext[i].more = cols == 1 ? ext[i].n > 0 : !isnull[EXT_KEEP];
	}
	return ext;
}

/*
 * MergeStaged adds the staged batches of tt (LedgerLockStaged) to the cell
 * table and returns their tokens.
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
				   *counts = NULL,
				   *ext = NULL;
		bool	   *cellnulls,
				   *sumnulls = NULL,
				   *countnulls = NULL,
				   *extnulls = NULL;
		int			ncells,
					extcols = 0;

		CHECK_FOR_INTERRUPTS();
		tokens[r] = PointerGetDatum(PG_DETOAST_DATUM_COPY(SPI_getbinval(tup, desc, 1, &isnull)));
		/* the owner's table: every array checked before any is read */
		ncells = CellStagedArray(p, tup, desc, 2, INT4OID, -1, &levels, NULL);
		CellStagedArray(p, tup, desc, 3, TEXTOID, ncells * p->ndims, &cellv, &cellnulls);
		CellStagedArray(p, tup, desc, 4, NUMERICOID, ncells, &totals, NULL);
		CellStagedNumbers(p, tup, desc, 4, totals, NULL, ncells);
		CellStagedArray(p, tup, desc, 5, INT8OID, ncells, &keys, NULL);
		if (p->nmeasures > 0)
		{
			CellStagedArray(p, tup, desc, 6, NUMERICOID, ncells * p->nmeasures, &sums, &sumnulls);
			CellStagedNumbers(p, tup, desc, 6, sums, sumnulls, ncells * p->nmeasures);
			CellStagedArray(p, tup, desc, 7, INT8OID, ncells * p->nmeasures, &counts, &countnulls);
		}
		if (p->any_min_max)
		{
			int			next = CellStagedArray(p, tup, desc, 8, NUMERICOID, -1, &ext, &extnulls);

			/* staged before 1.16: each list's first value alone */
			extcols = next == ncells * CELL_NEXT(p) ? 1 : CELL_EXT_COLS;
			if (next != ncells * CELL_NEXT(p) * extcols)
				CellStagedMalformed(p, tup, desc, psprintf("column extrema has %d values for %d cells", next, ncells));
			CellStagedNumbers(p, tup, desc, 8, ext, extnulls, next);
		}
		for (int c = 0; c < ncells; c++)
		{
			CellChange	change;
			uint32		grouping;

			change.total = DatumGetNumeric(totals[c]);
			change.keys = DatumGetInt64(keys[c]);
			for (int i = 0; i < p->nmeasures; i++)
			{
				change.sums[i] = DatumGetNumeric(sums[c * p->nmeasures + i]);
				change.counts[i] = DatumGetInt64(counts[c * p->nmeasures + i]);
			}
			change.ext = NULL;
			if (ext)
				change.ext = StagedExt(p, &ext[c * CELL_NEXT(p) * extcols],
									   &extnulls[c * CELL_NEXT(p) * extcols], extcols);
			memset(change.distinct, 0, sizeof(change.distinct));
			grouping = StagedGrouping(p, tup, desc, DatumGetInt32(levels[c]));
			for (int i = 0; i < p->ndims; i++)
				if ((grouping & (1u << i)) && cellnulls[c * p->ndims + i])
					CellStagedMalformed(p, tup, desc, psprintf("cell %d has no value of dimension %s", c + 1,
															   p->dims[i]));
			CellTableAdd(cells, p, grouping, &cellv[c * p->ndims], &change);
		}
		if (members)
			DistinctMergeStaged(p, tup, desc, 9, members);
	}
	*ntokens = (int) n;
	return tokens;
}

/*
 * ApplyCells adds the merged changes to aggregates and deletes the cells
 * that are left without keys; applying as for ExtremaApply.
 */
static void
ApplyCells(Pipeline *p, HTAB *cells, int64 applying)
{
	Oid			types[EXACTONCE_MAX_DIMENSIONS + 3 + 2 * EXACTONCE_MAX_MEASURES + EXACTONCE_MAX_DISTINCT +
					  2 * (1 + EXACTONCE_MAX_MEASURES)];
	Datum		values[EXACTONCE_MAX_DIMENSIONS + 3 + 2 * EXACTONCE_MAX_MEASURES + EXACTONCE_MAX_DISTINCT +
					   2 * (1 + EXACTONCE_MAX_MEASURES)];
	CellColumns cols;
	int			ncells,
				nargs;
	SPITupleTable *rows;
	bool	   *gone;
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
	for (int i = 0; i < p->ndistinct; i++)
	{
		values[nargs] = cols.distinct[i];
		types[nargs++] = INT8ARRAYOID;
	}
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			values[nargs] = cols.ext[CELL_EXT(p, EXT_LO_IN, slot) * CELL_EXT_COLS];
			types[nargs++] = NUMERICARRAYOID;
			values[nargs] = cols.ext[CELL_EXT(p, EXT_HI_IN, slot) * CELL_EXT_COLS];
			types[nargs++] = NUMERICARRAYOID;
		}
	StatementExec(StatementPrepare(p, BuildAggUpsert, nargs, types),
				  values, NULL, ncells);

	rows = SPI_tuptable;
	gone = palloc0(sizeof(bool) * Max(rows->numvals, 1));
	empty = palloc(sizeof(ItemPointerData) * ncells);
	emptyd = palloc(sizeof(Datum) * ncells);
	for (uint64 r = 0; r < rows->numvals; r++)
	{
		HeapTuple	tup = rows->vals[r];
		TupleDesc	desc = rows->tupdesc;
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
		gone[r] = true;
		empty[nempty] = *(ItemPointer) DatumGetPointer(SPI_getbinval(tup, desc, 1, &isnull));
		emptyd[nempty] = PointerGetDatum(&empty[nempty]);
		nempty++;
	}
	if (nempty > 0)
	{
		delval[0] = PointerGetDatum(construct_array(emptyd, nempty, TIDOID,
													sizeof(ItemPointerData), false, TYPALIGN_SHORT));
		StatementExec(StatementPrepare(p, BuildAggDelete, 1, deltype), delval, NULL, nempty);
	}
	if (p->feed)
		FeedRecord(p, cells, rows);
	/* the min and max of the cells left, read from those below */
	if (p->any_min_max)
		ExtremaApply(p, cells, rows, gone, applying);
	SPI_freetuptable(rows);
}

/*
 * AdvanceWatermark moves the watermark of a pipeline with windows to the
 * start of the latest window the applied batches have a reading in.
 */
static void
AdvanceWatermark(Pipeline *p, HTAB *cells)
{
	HASH_SEQ_STATUS seq;
	Cell	   *cell;
	TimestampTz latest = DT_NOBEGIN;
	Oid			types[1] = {TIMESTAMPTZOID};
	Datum		values[1];

	hash_seq_init(&seq, cells);
	while ((cell = hash_seq_search(&seq)) != NULL)
	{
		TimestampTz start;

		CHECK_FOR_INTERRUPTS();
		if (cell->level == 0 || cell->change.keys <= 0)
			continue;
		start = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
														CStringGetDatum(TextDatumGetCString(cell->dims[0])),
														ObjectIdGetDatum(InvalidOid),
														Int32GetDatum(-1)));
		latest = Max(latest, start);
	}
	if (latest == DT_NOBEGIN)
		return;
	values[0] = TimestampTzGetDatum(latest);
	StatementExec(StatementPrepare(p, BuildAdvanceWatermark, 1, types), values, NULL, 1);
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
	HTAB	   *members = p->ndistinct > 0 ? DistinctTableCreate() : NULL;
	Datum	   *applied;
	int			napplied;
	SPITupleTable *pending;

	Assert(p->progress_locked);
	pending = LedgerLockStaged(p, tokens, have_tokens);
	applied = MergeStaged(p, pending, cells, members, &napplied);
	if (napplied > 0)
	{
		/* the distinct counts' changes go into the aggregates upsert */
		if (members)
			DistinctApply(p, members, cells);
		if (p->windowed)
			AdvanceWatermark(p, cells);
		/* applying every staged batch, state holds no more than them */
		ApplyCells(p, cells, have_tokens ? -1 : napplied);
		LedgerMarkApplied(p, applied, napplied);
		/* wait_applied() may be waiting for a batch a worker left staged */
		WakeWaitersAtCommit();
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
 * ReduceApplyCells applies cell changes that were never staged (MapRollUp)
 * and the distinct members with them (or NULL), as ReduceApply applies
 * staged ones.  The caller holds the pipeline's progress lock.
 */
void
ReduceApplyCells(Pipeline *p, HTAB *cells, HTAB *members)
{
	Assert(p->progress_locked);
	if (members)
		DistinctApply(p, members, cells);
	/* a batch may be staged that state holds */
	ApplyCells(p, cells, -1);
}
