/*-------------------------------------------------------------------------
 *
 * extrema.c
 *		Each cell's min and max of the measures with min_max.
 *
 * In latest mode a newer version, a move or a tombstone takes a key's old
 * values out of its cells, so a min or max cannot simply be carried along:
 * when the extreme leaves, the next one must be found.  Map stages, with
 * each cell's change, the least and greatest value entering the cell and
 * leaving it (cell.h, CELL_EXT).  Reduce's upsert of the aggregates takes
 * in what enters, min = least(min, least entering), which is the cell's
 * min unless a value leaving was at or below the min before: the least
 * leaving value is then at or below the min after, which is how this file
 * finds the cells to set anew (and likewise the max).  Those, level by
 * level from the leaves up:
 *
 *	 a leaf reads its min anew from state, through index state_cell on the
 *	 dimensions, among the leaf's live keys;
 *
 *	 a cell above is the least of its children's mins, read from the
 *	 aggregates rows one level down, which are already set.
 *
 * State, not a record of each value, is the truth a leaf is read anew
 * from: it costs an index scan of the leaf's keys only when its extreme
 * leaves, and nothing for the values that do not matter, and a batch
 * writes each of its cells once but for those.  Accumulate mode never takes
 * a value out (map_stage refuses deltas that would), so its cells are
 * never set anew.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "catalog/statement.h"
#include "engine/cell.h"
#include "engine/extrema.h"

/*
 * AppendColumn appends quoted "<slot's measure>_<suffix>".
 */
static void
AppendColumn(StringInfo sql, Pipeline *p, int slot, const char *suffix)
{
	appendStringInfoString(sql, quote_identifier(psprintf("%s_%s", PipelineExtremumName(p, slot),
														  suffix)));
}

/*
 * AppendSameCell appends the condition that relation alias "other" is in
 * the cell of a, or under it, by the dimensions of mask.
 */
static void
AppendSameCell(StringInfo sql, Pipeline *p, const char *other, uint32 mask)
{
	for (int i = 0; i < p->ndims; i++)
		if (mask & (1u << i))
			appendStringInfo(sql, " AND %s.%s = a.%s", other, quote_identifier(p->dims[i]),
							 quote_identifier(p->dims[i]));
}

/*
 * BuildExtremaLevel: set anew the min and max of the given aggregates rows
 * of one grouping (mask), by ctid, every one of them from one scan: a
 * leaf's from its live keys in state; a rollup cell's from its children
 * one level down, another grouping's from the leaves under it.
 */
static const char *
BuildExtremaLevel(Pipeline *p, int mask)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);
	int			level = pg_popcount32((uint32) mask);
	bool		leaf = level == p->ndims;
	bool		first = true;

	initStringInfo(&sql);
	appendStringInfo(&sql, "UPDATE %s.aggregates a SET (", s);
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			appendStringInfoString(&sql, first ? "" : ", ");
			first = false;
			AppendColumn(&sql, p, slot, "min");
			appendStringInfoString(&sql, ", ");
			AppendColumn(&sql, p, slot, "max");
		}
	appendStringInfoString(&sql, ") = (SELECT ");
	first = true;
	for (int slot = 0; slot <= p->nmeasures; slot++)
	{
		if (!p->min_max[slot])
			continue;
		for (int hi = 0; hi <= 1; hi++)
		{
			appendStringInfo(&sql, "%s%s(", first ? "" : ", ", hi ? "max" : "min");
			first = false;
			if (leaf)
				appendStringInfo(&sql, "st.%s", quote_identifier(PipelineExtremumName(p, slot)));
			else
			{
				appendStringInfoString(&sql, "c.");
				AppendColumn(&sql, p, slot, hi ? "max" : "min");
			}
			appendStringInfoChar(&sql, ')');
		}
	}
	if (leaf)
	{
		appendStringInfo(&sql, " FROM %s.state st WHERE NOT st.deleted", s);
		AppendSameCell(&sql, p, "st", CELL_LEVEL_MASK(p->ndims));
	}
	else
	{
		appendStringInfo(&sql, " FROM %s.aggregates c WHERE c.level = %d", s,
						 p->rollup ? level + 1 : p->ndims);
		AppendSameCell(&sql, p, "c", (uint32) mask);
	}
	appendStringInfoString(&sql, ") WHERE a.ctid = ANY($1::tid[])");
	return sql.data;
}

/*
 * ExtremeLeft tells whether a cell's min (or, with hi, max) may have left:
 * a value leaving it was at or beyond the extreme the upsert left, now.
 */
static bool
ExtremeLeft(Numeric leaving, SPITupleTable *rows, uint64 r, int col, bool hi)
{
	bool		isnull;
	Datum		now = SPI_getbinval(rows->vals[r], rows->tupdesc, col, &isnull);
	int			cmp;

	if (leaving == NULL)
		return false;
	if (isnull)
		return true;
	cmp = DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(leaving), now));
	return hi ? cmp >= 0 : cmp <= 0;
}

/*
 * ExtremaApply sets anew the min and max of the cells the aggregates upsert
 * returned (rows: ctid, keys, total, level, the dimensions, then min and
 * max of each min_max slot) whose extreme may have left, but for those in
 * gone, deleted already: level by level from the leaves.
 */
void
ExtremaApply(Pipeline *p, HTAB *cells, SPITupleTable *rows, bool *gone)
{
	uint64		n = rows->numvals;
	Datum	   *tids = palloc(sizeof(Datum) * Max(n, 1));
	uint32		leaf = CELL_LEVEL_MASK(p->ndims);
	uint32	   *masks = palloc(sizeof(uint32) * Max(n, 1));
	bool	   *anew = palloc0(sizeof(bool) * Max(n, 1));
	bool		any = false;

	if (p->mode == PIPELINE_ACCUMULATE)
		return;

	/* the grouping of each row, by its NULL dimensions, and whether to set it */
	for (uint64 r = 0; r < n; r++)
	{
		Datum		dims[EXACTONCE_MAX_DIMENSIONS];
		bool		isnull;
		Cell	   *cell;
		int			col = 5 + p->ndims;

		CHECK_FOR_INTERRUPTS();
		masks[r] = 0;
		for (int i = 0; i < p->ndims; i++)
		{
			dims[i] = SPI_getbinval(rows->vals[r], rows->tupdesc, 5 + i, &isnull);
			if (!isnull)
				masks[r] |= 1u << i;
		}
		if (gone[r])
			continue;
		cell = CellTableFind(cells, masks[r], dims);
		if (cell == NULL)
			elog(ERROR, "aggregates upsert of pipeline \"%s\" returned a cell it was not given",
				 p->name);
		for (int slot = 0; cell->change.ext != NULL && slot <= p->nmeasures; slot++)
		{
			if (!p->min_max[slot])
				continue;
			anew[r] |= ExtremeLeft(cell->change.ext[CELL_EXT(p, EXT_LO_OUT, slot)], rows, r, col, false) ||
				ExtremeLeft(cell->change.ext[CELL_EXT(p, EXT_HI_OUT, slot)], rows, r, col + 1, true);
			col += 2;
		}
		any |= anew[r];
	}
	if (!any)
		return;

	/*
	 * The leaves first, then a rollup's levels upwards (its groupings are in
	 * level order), or another grouping's cells in any order
	 */
	for (int pass = 0; pass <= p->nsets; pass++)
	{
		uint32		mask = pass == 0 ? leaf : p->sets[p->nsets - pass];
		int			count = 0;
		Oid			types[1] = {TIDARRAYOID};
		Datum		values[1];

		if (pass > 0 && mask == leaf)
			continue;
		for (uint64 r = 0; r < n; r++)
		{
			bool		isnull;

			CHECK_FOR_INTERRUPTS();
			if (anew[r] && masks[r] == mask)
				tids[count++] = SPI_getbinval(rows->vals[r], rows->tupdesc, 1, &isnull);
		}
		if (count == 0)
			continue;
		values[0] = PointerGetDatum(construct_array(tids, count, TIDOID, sizeof(ItemPointerData),
													false, TYPALIGN_SHORT));
		StatementExec(StatementPrepareLevel(p, BuildExtremaLevel, (int) mask, 1, types),
					  values, NULL, count);
	}
}
