/*-------------------------------------------------------------------------
 *
 * extrema.c
 *		Each cell's min and max of the measures with min_max.
 *
 * In latest mode a newer version, a move or a tombstone takes a key's old
 * values out of its cells, so a min or max cannot simply be carried along:
 * when the extreme leaves, the next one must be found.  Map stages, with
 * each cell's change, the few least and greatest values entering the cell
 * and leaving it (cell.h, CELL_EXT); reduce's upsert of the aggregates
 * takes in what enters, min = least(min, least entering), and this file
 * sets anew what may have left, level by level from the leaves up:
 *
 *	 a leaf keeps, in aggregates.extrema_reserve, a reserve of its least and
 *	 greatest values of each min_max slot (EXTREMA_RESERVE_KEEP of each,
 *	 with the meaning of a CellExtList: without more, all of them; with
 *	 more, every value before the last listed).  The leaving values come
 *	 out of it and the entering ones go in, as far as the three lists know
 *	 every value (up to the earliest last value of a list with more); its
 *	 first value is the extreme.  A reserve left knowing nothing makes the
 *	 leaf read its live keys in state, through index state_cell on the
 *	 dimensions, which fills the reserve anew; so does a leaf that keeps
 *	 none (NULL: after rebuild(), or made before 1.16) once its extreme may
 *	 have left, a value leaving it at or beyond its extreme after the
 *	 upsert;
 *
 *	 a cell above, when a value leaving it was at or beyond its extreme, is
 *	 the least of its children's mins, read from the aggregates rows one
 *	 level down, which are already set.
 *
 * State, not a record of each value, is the truth: a leaf's keys are read
 * only when its reserve runs out, and nothing is kept of the values that
 * do not matter.  Accumulate mode never takes a value out (map_stage
 * refuses deltas that would), so its cells are never set anew.
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
#include "utils/datum.h"
#include "utils/fmgroids.h"

#include "catalog/statement.h"
#include "engine/cell.h"
#include "engine/extrema.h"
#include "engine/ledger.h"

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
 * AppendExtremaColumns appends "<each min_max slot's min and max>".
 */
static void
AppendExtremaColumns(StringInfo sql, Pipeline *p)
{
	bool		first = true;

	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			appendStringInfoString(sql, first ? "" : ", ");
			first = false;
			AppendColumn(sql, p, slot, "min");
			appendStringInfoString(sql, ", ");
			AppendColumn(sql, p, slot, "max");
		}
}

/*
 * BuildExtremaSet: set the min and max and the reserve of leaves, by ctid,
 * all in one statement: $1 the ctids, then each min and max, then the
 * reserves as text (a numeric[] each).
 */
static const char *
BuildExtremaSet(Pipeline *p)
{
	StringInfoData sql;
	int			arg = 2;

	initStringInfo(&sql);
	appendStringInfo(&sql, "UPDATE %s.aggregates a SET (", quote_identifier(p->name));
	AppendExtremaColumns(&sql, p);
	appendStringInfoString(&sql, ", " PIPELINE_RESERVE_COLUMN ") = (");
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
			appendStringInfo(&sql, "u.lo%d, u.hi%d, ", slot, slot);
	appendStringInfoString(&sql, "u.r::numeric[]) FROM unnest($1::tid[]");
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			appendStringInfo(&sql, ", $%d::numeric[], $%d::numeric[]", arg, arg + 1);
			arg += 2;
		}
	appendStringInfo(&sql, ", $%d::text[]) AS u(t", arg);
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
			appendStringInfo(&sql, ", lo%d, hi%d", slot, slot);
	appendStringInfoString(&sql, ", r) WHERE a.ctid = u.t");
	return sql.data;
}

/*
 * BuildExtremaRead: the min_max values of the live keys of a leaf, given
 * its dimensions.
 */
static const char *
BuildExtremaRead(Pipeline *p)
{
	StringInfoData sql;
	bool		first = true;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT ");
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			appendStringInfo(&sql, "%sst.%s", first ? "" : ", ",
							 quote_identifier(PipelineExtremumName(p, slot)));
			first = false;
		}
	appendStringInfo(&sql, " FROM %s.state st WHERE NOT st.deleted", quote_identifier(p->name));
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, " AND st.%s = $%d", quote_identifier(p->dims[i]), i + 1);
	return sql.data;
}

/*
 * BuildExtremaLevel: set anew the min and max of the given aggregates rows
 * of one grouping (mask) above the leaves, by ctid, every one of them from
 * one scan: a rollup cell's from its children one level down, another
 * grouping's from the leaves under it.
 */
static const char *
BuildExtremaLevel(Pipeline *p, int mask)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);
	int			level = pg_popcount32((uint32) mask);
	bool		first = true;

	Assert(level < p->ndims);
	initStringInfo(&sql);
	appendStringInfo(&sql, "UPDATE %s.aggregates a SET (", s);
	AppendExtremaColumns(&sql, p);
	appendStringInfoString(&sql, ") = (SELECT ");
	for (int slot = 0; slot <= p->nmeasures; slot++)
	{
		if (!p->min_max[slot])
			continue;
		for (int hi = 0; hi <= 1; hi++)
		{
			appendStringInfo(&sql, "%s%s(c.", first ? "" : ", ", hi ? "max" : "min");
			first = false;
			AppendColumn(&sql, p, slot, hi ? "max" : "min");
			appendStringInfoChar(&sql, ')');
		}
	}
	appendStringInfo(&sql, " FROM %s.aggregates c WHERE c.level = %d", s,
					 p->rollup ? level + 1 : p->ndims);
	AppendSameCell(&sql, p, "c", (uint32) mask);
	appendStringInfoString(&sql, ") WHERE a.ctid = ANY($1::tid[])");
	return sql.data;
}

/*
 * ExtremeLeft tells whether a cell's min (or, with hi, max) may have left:
 * the value leaving it first (leaving) was at or beyond the extreme the
 * upsert left, now.
 */
static bool
ExtremeLeft(const CellExtList *leaving, SPITupleTable *rows, uint64 r, int col, bool hi)
{
	bool		isnull;
	Datum		now = SPI_getbinval(rows->vals[r], rows->tupdesc, col, &isnull);

	if (leaving->n == 0)
		return leaving->more;	/* a list that knows nothing */
	if (isnull)
		return true;
	return !CellExtBefore(DatumGetNumeric(now), leaving->v[0], hi);
}

/*
 * A leaf's reserve of the least (greatest) values of one min_max slot, as
 * a CellExtList: with room to take in a list before it is cut to
 * EXTREMA_RESERVE_KEEP.  A leaf's reserves are indexed [2 * slot + hi].
 */
typedef struct Reserve
{
	int			n;
	bool		more;
	Numeric		v[EXTREMA_RESERVE_KEEP + EXT_KEEP];
} Reserve;

/*
 * ReserveRead reads a leaf's reserves: for each min_max slot, least and
 * greatest, EXTREMA_RESERVE_STRIDE values: its more (0 or 1), its number of values,
 * the values and NULLs after them.  False where it is not such an array.
 */
static bool
ReserveRead(Pipeline *p, Datum d, Reserve *res)
{
	ArrayType  *a = DatumGetArrayTypeP(d);
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				at = 0;

	if (ARR_NDIM(a) > 1 || ARR_ELEMTYPE(a) != NUMERICOID)
		return false;
	deconstruct_array(a, NUMERICOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int slot = 0; slot <= p->nmeasures; slot++)
		for (int hi = 0; p->min_max[slot] && hi <= 1; hi++, at += EXTREMA_RESERVE_STRIDE)
		{
			Reserve    *r = &res[2 * slot + hi];
			bool		bad = false;
			int			more;

			if (at + EXTREMA_RESERVE_STRIDE > n || nulls[at] || nulls[at + 1])
				return false;
			more = numeric_int4_opt_error(DatumGetNumeric(elems[at]), &bad);
			r->n = numeric_int4_opt_error(DatumGetNumeric(elems[at + 1]), &bad);
			if (bad || (more != 0 && more != 1) || r->n < 0 || r->n > EXTREMA_RESERVE_KEEP)
				return false;
			r->more = more == 1;
			for (int k = 0; k < EXTREMA_RESERVE_KEEP; k++)
			{
				Numeric		v;

				if (nulls[at + 2 + k] != (k >= r->n))
					return false;
				if (k >= r->n)
					continue;
				v = DatumGetNumeric(elems[at + 2 + k]);
				if (numeric_is_nan(v) || (k > 0 && CellExtBefore(v, r->v[k - 1], hi)))
					return false;
				r->v[k] = v;
			}
		}
	return at == n;
}

/*
 * ReserveDatum is the numeric[] ReserveRead reads.
 */
static Datum
ReserveDatum(Pipeline *p, Reserve *res)
{
	int			max = 2 * (1 + p->nmeasures) * EXTREMA_RESERVE_STRIDE;
	Datum	   *elems = palloc0(sizeof(Datum) * max);
	bool	   *nulls = palloc(sizeof(bool) * max);
	int			n = 0;
	int			dims[1];
	int			lbs[1] = {1};

	for (int slot = 0; slot <= p->nmeasures; slot++)
		for (int hi = 0; p->min_max[slot] && hi <= 1; hi++, n += EXTREMA_RESERVE_STRIDE)
		{
			Reserve    *r = &res[2 * slot + hi];

			elems[n] = NumericGetDatum(int64_to_numeric(r->more ? 1 : 0));
			elems[n + 1] = NumericGetDatum(int64_to_numeric(r->n));
			nulls[n] = nulls[n + 1] = false;
			for (int k = 0; k < EXTREMA_RESERVE_KEEP; k++)
			{
				nulls[n + 2 + k] = k >= r->n;
				elems[n + 2 + k] = k < r->n ? NumericGetDatum(r->v[k]) : (Datum) 0;
			}
		}
	dims[0] = n;
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, NUMERICOID, -1, false,
											  TYPALIGN_INT));
}

/*
 * ReserveApply takes the values entering a leaf (in) into its reserve r and
 * those leaving it (out) out of it, as far as all three know every value:
 * up to the earliest last value of one with more.  It returns false where
 * the reserve is left knowing nothing (or a value leaves that the reserve
 * says the leaf does not have), and sets *changed.
 */
static bool
ReserveApply(Reserve *r, const CellExtList *in, const CellExtList *out, bool greatest,
			 bool *changed)
{
	Numeric		cut = NULL;
	bool		strict;
	Reserve		next;
	bool		full = false;

	if ((r->more && r->n == 0) || (in->more && in->n == 0) || (out->more && out->n == 0))
		return false;
	if (r->more)
		cut = r->v[r->n - 1];
	if (in->more && (cut == NULL || CellExtBefore(in->v[in->n - 1], cut, greatest)))
		cut = in->v[in->n - 1];
	if (out->more && (cut == NULL || !CellExtBefore(cut, out->v[out->n - 1], greatest)))
		cut = out->v[out->n - 1];

	/*
	 * A value at the cut that the reserve or the entering values list is
	 * there, if maybe not every one of its kind; but where the leaving values
	 * have more at the cut, one may leave that they do not list, so nothing
	 * at the cut is known.
	 */
	strict = out->more && cut == out->v[out->n - 1];

	/* what the reserve and the entering values know, in order */
	next.n = 0;
	next.more = cut != NULL;
	for (int i = 0; i < r->n; i++)
		if (cut == NULL || CellExtBefore(r->v[i], cut, greatest) ||
			(!strict && !CellExtBefore(cut, r->v[i], greatest)))
			CellExtInsert(next.v, &next.n, &full, lengthof(next.v), r->v[i], greatest);
	for (int i = 0; i < in->n; i++)
		if (cut == NULL || CellExtBefore(in->v[i], cut, greatest) ||
			(!strict && !CellExtBefore(cut, in->v[i], greatest)))
			CellExtInsert(next.v, &next.n, &full, lengthof(next.v), in->v[i], greatest);
	Assert(!full);

	/* less what leaves */
	for (int i = 0; i < out->n; i++)
	{
		Numeric		x = out->v[i];
		int			j = 0;

		if (cut != NULL && (strict ? !CellExtBefore(x, cut, greatest) : CellExtBefore(cut, x, greatest)))
			break;
		while (j < next.n && !(!CellExtBefore(x, next.v[j], greatest) &&
							   !CellExtBefore(next.v[j], x, greatest)))
			j++;
		if (j == next.n)
		{
			/* at the cut, it may be a value the lists do not show */
			if (cut != NULL && !CellExtBefore(x, cut, greatest))
				continue;
			return false;
		}
		memmove(&next.v[j], &next.v[j + 1], sizeof(Numeric) * (next.n - j - 1));
		next.n--;
	}
	if (next.n > EXTREMA_RESERVE_KEEP)
	{
		next.n = EXTREMA_RESERVE_KEEP;
		next.more = true;
	}
	if (next.more && next.n == 0)
		return false;
	*changed |= next.n != r->n || next.more != r->more;
	for (int i = 0; i < next.n && !*changed; i++)
		*changed = next.v[i] != r->v[i];
	*r = next;
	return true;
}

/*
 * ReserveFill fills a leaf's reserves from the min_max values of its live
 * keys in state, read through index state_cell (rows: the leaf's
 * dimensions from column 5).
 */
static void
ReserveFill(Pipeline *p, SPITupleTable *rows, uint64 r, Reserve *res)
{
	Oid			types[EXACTONCE_MAX_DIMENSIONS];
	Datum		values[EXACTONCE_MAX_DIMENSIONS];
	SPITupleTable *keys;

	for (int i = 0; i < p->ndims; i++)
	{
		bool		isnull;

		types[i] = TEXTOID;
		values[i] = SPI_getbinval(rows->vals[r], rows->tupdesc, 5 + i, &isnull);
	}
	for (int i = 0; i < 2 * (1 + p->nmeasures); i++)
	{
		res[i].n = 0;
		res[i].more = false;
	}
	StatementExec(StatementPrepare(p, BuildExtremaRead, p->ndims, types), values, NULL, -1);
	keys = SPI_tuptable;
	for (uint64 k = 0; k < keys->numvals; k++)
	{
		int			col = 1;

		CHECK_FOR_INTERRUPTS();
		for (int slot = 0; slot <= p->nmeasures; slot++)
		{
			bool		isnull;
			Datum		v;

			if (!p->min_max[slot])
				continue;
			v = SPI_getbinval(keys->vals[k], keys->tupdesc, col++, &isnull);
			if (isnull)
				continue;
			for (int hi = 0; hi <= 1; hi++)
				CellExtInsert(res[2 * slot + hi].v, &res[2 * slot + hi].n, &res[2 * slot + hi].more,
							  EXTREMA_RESERVE_KEEP, DatumGetNumeric(v), hi);
		}
	}
	/* the values outlive the rows */
	for (int i = 0; i < 2 * (1 + p->nmeasures); i++)
		for (int k = 0; k < res[i].n; k++)
			res[i].v[k] = DatumGetNumeric(datumCopy(NumericGetDatum(res[i].v[k]), false, -1));
	SPI_freetuptable(keys);
}

/*
 * A leaf of this many keys or fewer starts no reserve: reading its keys
 * when its extreme leaves costs less than writing a reserve each batch.
 */
#define RESERVE_MIN_KEYS	(8 * EXTREMA_RESERVE_KEEP)

/*
 * The leaves a batch sets (BuildExtremaSet), gathered by LeafApply: their
 * ctids, each min and max ([2 * slot + hi], NULL for none), the reserves
 * (NULL for none kept).
 */
typedef struct LeafSet
{
	int			n;
	Datum	   *tids;
	Numeric    *ext[2 * (1 + EXACTONCE_MAX_MEASURES)];
	Datum	   *reserves;
	bool	   *nokeep;
	bool	   *filled;			/* the reserve was filled from state */
} LeafSet;

/*
 * LeafApply sets a leaf's min and max anew from its reserve, taking in the
 * leaf's change; what the reserve cannot tell is read from state.  A leaf
 * without a reserve (NULL) but new in the batch starts from none; any
 * other is read only when its extreme may have left, as before 1.16; a leaf
 * of RESERVE_MIN_KEYS keys or fewer starts none.  A reserve is filled from state only where fill says that state holds what
 * the aggregates will once the change is in, no more: where a batch
 * staged but not applied is in state, its values would be counted twice.
 */
static void
LeafApply(Pipeline *p, Cell *cell, SPITupleTable *rows, uint64 r, bool fill, LeafSet *set)
{
	Reserve		res[2 * (1 + EXACTONCE_MAX_MEASURES)];
	int			col = 5 + p->ndims;
	int64		keys;
	bool		isnull,
				known,
				read = false,
				changed = false;
	Datum		d;

	if (cell->change.ext == NULL)
		return;
	for (int slot = 0; slot <= p->nmeasures; slot++)
		col += p->min_max[slot] ? 2 : 0;
	keys = DatumGetInt64(SPI_getbinval(rows->vals[r], rows->tupdesc, 2, &isnull));
	d = SPI_getbinval(rows->vals[r], rows->tupdesc, col, &isnull);
	if (!isnull)
	{
		/* one that is not what this file writes is read anew */
		known = ReserveRead(p, d, res);
		read = !known;
	}
	else
	{
		/* a leaf with no keys before the batch had no values */
		known = keys == cell->change.keys && keys > RESERVE_MIN_KEYS;
		for (int i = 0; known && i < 2 * (1 + p->nmeasures); i++)
		{
			res[i].n = 0;
			res[i].more = false;
		}
	}

	col = 5 + p->ndims;
	for (int slot = 0; slot <= p->nmeasures && !read; slot++)
		for (int hi = 0; p->min_max[slot] && hi <= 1 && !read; hi++, col++)
		{
			const CellExtList *in = &cell->change.ext[CELL_EXT(p, hi ? EXT_HI_IN : EXT_LO_IN, slot)];
			const CellExtList *out = &cell->change.ext[CELL_EXT(p, hi ? EXT_HI_OUT : EXT_LO_OUT, slot)];

			if (known)
				read = !ReserveApply(&res[2 * slot + hi], in, out, hi, &changed);
			else
				read = ExtremeLeft(out, rows, r, col, hi);
		}
	if (!known && !read)
		return;
	if (read)
		ReserveFill(p, rows, r, res);
	else
	{
		/*
		 * The upsert took in the least entering value, which may have left
		 * again in a later batch merged with it: the reserve says
		 */
		col = 5 + p->ndims;
		for (int slot = 0; slot <= p->nmeasures && !changed; slot++)
			for (int hi = 0; p->min_max[slot] && hi <= 1 && !changed; hi++, col++)
			{
				Reserve    *e = &res[2 * slot + hi];
				Datum		now = SPI_getbinval(rows->vals[r], rows->tupdesc, col, &isnull);

				changed = isnull != (e->n == 0) ||
					(!isnull && DatumGetInt32(DirectFunctionCall2(numeric_cmp, now,
																  NumericGetDatum(e->v[0]))) != 0);
			}
		if (!changed)
			return;
	}

	set->tids[set->n] = SPI_getbinval(rows->vals[r], rows->tupdesc, 1, &isnull);
	for (int slot = 0; slot <= p->nmeasures; slot++)
		for (int hi = 0; p->min_max[slot] && hi <= 1; hi++)
		{
			Reserve    *e = &res[2 * slot + hi];

			set->ext[2 * slot + hi][set->n] = e->n > 0 ? e->v[0] : NULL;
		}
	set->nokeep[set->n] = read && (!fill || keys <= RESERVE_MIN_KEYS);
	set->filled[set->n] = read && !set->nokeep[set->n];
	set->reserves[set->n] = set->nokeep[set->n] ? (Datum) 0 :
		CStringGetTextDatum(OidOutputFunctionCall(F_ARRAY_OUT, ReserveDatum(p, res)));
	set->n++;
}


/*
 * ExtremaApply sets anew the min and max of the cells the aggregates upsert
 * returned (rows: ctid, keys, total, level, the dimensions, then min and
 * max of each min_max slot, then the reserve) whose extreme may have left,
 * but for those in gone, deleted already: level by level from the leaves.
 * applying: how many staged batches the caller applies, all those staged,
 * or -1 (some, or none staged); a leaf fills its reserve from state only
 * when they are all (LeafApply).
 */
void
ExtremaApply(Pipeline *p, HTAB *cells, SPITupleTable *rows, bool *gone, int64 applying)
{
	uint64		n = rows->numvals;
	Datum	   *tids = palloc(sizeof(Datum) * Max(n, 1));
	uint32		leaf = CELL_LEVEL_MASK(p->ndims);
	uint32	   *masks = palloc(sizeof(uint32) * Max(n, 1));
	bool	   *anew = palloc0(sizeof(bool) * Max(n, 1));
	bool		any = false;
	bool		any_filled = false;
	LeafSet		set;

	if (p->mode == PIPELINE_ACCUMULATE)
		return;
	set.n = 0;
	set.tids = palloc(sizeof(Datum) * Max(n, 1));
	set.reserves = palloc(sizeof(Datum) * Max(n, 1));
	set.nokeep = palloc(sizeof(bool) * Max(n, 1));
	set.filled = palloc(sizeof(bool) * Max(n, 1));
	for (int i = 0; i < 2 * (1 + p->nmeasures); i++)
		set.ext[i] = p->min_max[i / 2] ? palloc(sizeof(Numeric) * Max(n, 1)) : NULL;

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
		if (masks[r] == leaf)
		{
			LeafApply(p, cell, rows, r, applying >= 0, &set);
			continue;
		}
		for (int slot = 0; cell->change.ext != NULL && slot <= p->nmeasures; slot++)
		{
			if (!p->min_max[slot])
				continue;
			anew[r] |= ExtremeLeft(&cell->change.ext[CELL_EXT(p, EXT_LO_OUT, slot)], rows, r, col, false) ||
				ExtremeLeft(&cell->change.ext[CELL_EXT(p, EXT_HI_OUT, slot)], rows, r, col + 1, true);
			col += 2;
		}
		any |= anew[r];
	}

	/*
	 * A worker that found another holding the pipeline's reduce left its
	 * batch staged, its keys in state (DrainReduceOrLeave): one committed
	 * since the caller locked the staged batches would be counted twice in a
	 * reserve filled from state.  State was read first, so such a batch is
	 * staged now; then the reserves are not kept.
	 */
	for (int i = 0; i < set.n; i++)
		any_filled |= set.filled[i];
	if (any_filled && LedgerStagedCount(p, NULL, DT_NOEND) > applying)
		for (int i = 0; i < set.n; i++)
			if (set.filled[i])
			{
				set.nokeep[i] = true;
				set.reserves[i] = (Datum) 0;
			}

	/* the leaves first, in one statement */
	if (set.n > 0)
	{
		Oid			types[2 + 2 * (1 + EXACTONCE_MAX_MEASURES)];
		Datum		values[2 + 2 * (1 + EXACTONCE_MAX_MEASURES)];
		int			nargs = 0;

		types[nargs] = TIDARRAYOID;
		values[nargs++] = PointerGetDatum(construct_array(set.tids, set.n, TIDOID,
														  sizeof(ItemPointerData), false,
														  TYPALIGN_SHORT));
		for (int i = 0; i < 2 * (1 + p->nmeasures); i++)
			if (set.ext[i] != NULL)
			{
				types[nargs] = NUMERICARRAYOID;
				values[nargs++] = StatementNumericArray(set.ext[i], set.n);
			}
		types[nargs] = TEXTARRAYOID;
		values[nargs++] = StatementTextArray(set.reserves, set.nokeep, set.n);
		StatementExec(StatementPrepare(p, BuildExtremaSet, nargs, types), values, NULL, set.n);
	}
	if (!any)
		return;

	/*
	 * Above the leaves, set already: a rollup's levels upwards (its groupings
	 * are in level order), or another grouping's cells in any order
	 */
	for (int pass = 1; pass <= p->nsets; pass++)
	{
		uint32		mask = p->sets[p->nsets - pass];
		int			count = 0;
		Oid			types[1] = {TIDARRAYOID};
		Datum		values[1];

		if (mask == leaf)
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
