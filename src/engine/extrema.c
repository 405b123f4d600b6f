/*-------------------------------------------------------------------------
 *
 * extrema.c
 *		Each cell's min and max of the measures with min_max.
 *
 * In latest mode a newer version, a move or a tombstone takes a key's old
 * values out of its cells, so a min or max cannot simply be carried along:
 * when the extreme leaves, the next one must be found.  Map stages, with
 * each cell's change, the least and greatest value entering the cell and
 * leaving it (cell.h, CELL_EXT); reduce, once the aggregates upsert has
 * written the sums, sets the min and max level by level, from the leaves
 * up:
 *
 *	 a leaf keeps least(min, least value entering), unless a value leaving
 *	 is at or below its min: then its min is read anew from state, through
 *	 index state_cell on the dimensions, among the leaf's live keys (and
 *	 likewise the max);
 *
 *	 a cell above is the least of its children's mins, read from the
 *	 aggregates rows one level down, which are already set.
 *
 * State, not a record of each value, is the truth a leaf is read anew
 * from: it costs an index scan of the leaf's keys only when its extreme
 * leaves, and nothing for the values that do not matter.  Accumulate mode
 * never takes a value out (map_stage refuses deltas that would), so its
 * leaves only ever take the least or greatest.
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
 * BuildExtremaLevel: set the min and max of the given aggregates rows of one
 * grouping (mask), by ctid; for the leaves from the values entering and
 * leaving, given per slot as four numeric[] (CELL_EXT order); for the cells
 * of a rollup from their children one level down, for those of another
 * grouping from the leaves under them.
 */
static const char *
BuildExtremaLevel(Pipeline *p, int mask)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);
	int			level = pg_popcount32((uint32) mask);
	bool		leaf = level == p->ndims;
	bool		first = true;
	int			arg;

	initStringInfo(&sql);
	appendStringInfo(&sql, "UPDATE %s.aggregates a SET ", s);
	for (int slot = 0; slot <= p->nmeasures; slot++)
	{
		const char *col = quote_identifier(PipelineExtremumName(p, slot));

		if (!p->min_max[slot])
			continue;
		for (int hi = 0; hi <= 1; hi++)
		{
			const char *fn = hi ? "max" : "min";

			if (!first)
				appendStringInfoString(&sql, ", ");
			first = false;
			AppendColumn(&sql, p, slot, fn);
			if (!leaf)
			{
				appendStringInfo(&sql, " = (SELECT %s(c.", fn);
				AppendColumn(&sql, p, slot, fn);
				appendStringInfo(&sql, ") FROM %s.aggregates c WHERE c.level = %d", s,
								 p->rollup ? level + 1 : p->ndims);
				AppendSameCell(&sql, p, "c", (uint32) mask);
				appendStringInfoChar(&sql, ')');
				continue;
			}
			appendStringInfoString(&sql, " = CASE WHEN ");
			if (p->mode == PIPELINE_LATEST)
			{
				appendStringInfo(&sql, "u.out%d_%d IS NOT NULL AND (a.", slot, hi);
				AppendColumn(&sql, p, slot, fn);
				appendStringInfo(&sql, " IS NULL OR u.out%d_%d %s a.", slot, hi, hi ? ">=" : "<=");
				AppendColumn(&sql, p, slot, fn);
				appendStringInfo(&sql, ") THEN (SELECT %s(st.%s) FROM %s.state st WHERE NOT st.deleted",
								 fn, col, s);
				AppendSameCell(&sql, p, "st", CELL_LEVEL_MASK(p->ndims));
				appendStringInfoString(&sql, ") ");
			}
			else
				appendStringInfoString(&sql, "false THEN NULL ");
			appendStringInfo(&sql, "ELSE %s(a.", hi ? "greatest" : "least");
			AppendColumn(&sql, p, slot, fn);
			appendStringInfo(&sql, ", u.in%d_%d) END", slot, hi);
		}
	}
	if (!leaf)
	{
		appendStringInfoString(&sql, " WHERE a.ctid = ANY($1::tid[])");
		return sql.data;
	}

	/* the leaves: a TID scan per row of the unnest */
	appendStringInfoString(&sql, " FROM unnest($1::tid[]");
	arg = 2;
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			appendStringInfo(&sql, ", $%d::numeric[], $%d::numeric[], $%d::numeric[], $%d::numeric[]",
							 arg, arg + 1, arg + 2, arg + 3);
			arg += 4;
		}
	appendStringInfoString(&sql, ") AS u(t");
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
			appendStringInfo(&sql, ", in%d_0, in%d_1, out%d_0, out%d_1", slot, slot, slot, slot);
	appendStringInfoString(&sql, ") WHERE a.ctid = u.t");
	return sql.data;
}

/*
 * ExtremaApply sets the min and max of the cells the aggregates upsert
 * returned (rows: ctid, keys, total, level, then the dimensions), but for
 * those in gone, deleted already: level by level from the leaves, whose
 * change in cells says what entered and left them.
 */
void
ExtremaApply(Pipeline *p, HTAB *cells, SPITupleTable *rows, bool *gone)
{
	uint64		n = rows->numvals;
	Datum	   *tids = palloc(sizeof(Datum) * Max(n, 1));
	Numeric    *ext[4 * (1 + EXACTONCE_MAX_MEASURES)];
	Datum		values[1 + 4 * (1 + EXACTONCE_MAX_MEASURES)];
	Oid			types[1 + 4 * (1 + EXACTONCE_MAX_MEASURES)];

	uint32		leaf = CELL_LEVEL_MASK(p->ndims);
	uint32	   *masks = palloc(sizeof(uint32) * Max(n, 1));

	for (int i = 0; i < CELL_NEXT(p); i++)
		ext[i] = palloc(sizeof(Numeric) * Max(n, 1));
	/* the grouping of each row, by its NULL dimensions */
	for (uint64 r = 0; r < n; r++)
	{
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		masks[r] = 0;
		for (int i = 0; i < p->ndims; i++)
		{
			(void) SPI_getbinval(rows->vals[r], rows->tupdesc, 5 + i, &isnull);
			if (!isnull)
				masks[r] |= 1u << i;
		}
	}

	/*
	 * The leaves first, then a rollup's levels upwards (its groupings are in
	 * level order), or another grouping's cells in any order
	 */
	for (int pass = 0; pass <= p->nsets; pass++)
	{
		uint32		mask = pass == 0 ? leaf : p->sets[p->nsets - pass];
		int			count = 0;
		int			nargs = 1;

		if (pass > 0 && mask == leaf)
			continue;
		for (uint64 r = 0; r < n; r++)
		{
			HeapTuple	tup = rows->vals[r];
			bool		isnull;
			Datum		dims[EXACTONCE_MAX_DIMENSIONS];
			Cell	   *cell;

			CHECK_FOR_INTERRUPTS();
			if (gone[r] || masks[r] != mask)
				continue;
			tids[count] = SPI_getbinval(tup, rows->tupdesc, 1, &isnull);
			if (mask == leaf)
			{
				for (int i = 0; i < p->ndims; i++)
					dims[i] = SPI_getbinval(tup, rows->tupdesc, 5 + i, &isnull);
				cell = CellTableFind(cells, leaf, dims);
				if (cell == NULL)
					elog(ERROR, "aggregates upsert of pipeline \"%s\" returned a cell it was not given",
						 p->name);
				for (int i = 0; i < CELL_NEXT(p); i++)
					ext[i][count] = cell->change.ext ? cell->change.ext[i] : NULL;
			}
			count++;
		}
		if (count == 0)
			continue;
		values[0] = PointerGetDatum(construct_array(tids, count, TIDOID, sizeof(ItemPointerData),
													false, TYPALIGN_SHORT));
		types[0] = TIDARRAYOID;
		for (int slot = 0; mask == leaf && slot <= p->nmeasures; slot++)
		{
			static const int kinds[4] = {EXT_LO_IN, EXT_HI_IN, EXT_LO_OUT, EXT_HI_OUT};

			if (!p->min_max[slot])
				continue;
			for (int k = 0; k < 4; k++)
			{
				values[nargs] = StatementNumericArray(ext[CELL_EXT(p, kinds[k], slot)], count);
				types[nargs++] = NUMERICARRAYOID;
			}
		}
		StatementExec(StatementPrepareLevel(p, BuildExtremaLevel, (int) mask, nargs, types),
					  values, NULL, count);
	}
}
