/*-------------------------------------------------------------------------
 *
 * distinct.c
 *		Exact distinct counts per cell of the distinct_counts columns.
 *
 * A newer version or a tombstone takes a key's old value out of its cells,
 * and a value leaves a cell's distinct count only when no other
 * contribution of the cell has it; nor is a cell's count the sum of its
 * children's, which may share values.  Table distincts keeps, for each
 * cell at every level and each distinct_counts column, every value the
 * cell has, with n: at the leaves, how many contributions have it; above,
 * how many children have it.  A cell's count is the number of its values.
 *
 * It goes through the stages as the sums do: map turns a batch's deltas
 * into changes of leaf value counts (a delta of keys +1 or -1 adds or
 * takes one contribution of its value), staged with the batch under its
 * token.  Reduce applies them, before the aggregates upsert, level by
 * level from the leaves, one upsert per level: a value that appears in a
 * cell adds one to the cell's count and to the parent's n of the value, a
 * value whose n falls to 0 is deleted and takes one away from both.  Only
 * values that appear in or leave a cell go up a level, so the cost is an
 * upsert per (leaf, value) a batch changes, and few above.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "port/pg_bitutils.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "catalog/statement.h"
#include "engine/distinct.h"

/*
 * DistinctTableCreate makes an empty table of members in the current
 * context.
 */
HTAB *
DistinctTableCreate(void)
{
	return CellTableCreateOf(sizeof(Member));
}

/*
 * MemberAdd adds n contributions of value to column col of one cell.
 */
static void
MemberAdd(HTAB *members, uint32 mask, Datum *dims, int col, Datum value, int64 n)
{
	text	   *t = (text *) DatumGetPointer(value);
	int			len = VARSIZE_ANY_EXHDR(t);
	char	   *suffix = palloc(1 + len);
	CellKey		key;
	Member	   *m;
	bool		found;

	suffix[0] = (char) col;
	memcpy(suffix + 1, VARDATA_ANY(t), len);
	key = CellKeyMake(mask, dims, suffix, 1 + len);
	pfree(suffix);
	m = hash_search(members, &key, HASH_ENTER, &found);
	if (found)
	{
		pfree(key.data);
		m->n += n;
		return;
	}
	m->mask = mask;
	for (int i = 0; i < EXACTONCE_MAX_DIMENSIONS; i++)
		m->dims[i] = (mask & (1u << i)) ? dims[i] : (Datum) 0;
	m->col = col;
	m->value = value;
	m->n = n;
}

/*
 * DistinctOfDeltas adds the leaf-cell members that n deltas change: a delta
 * adds (keys 1) or takes (keys -1) one contribution of its value.
 */
void
DistinctOfDeltas(Pipeline *p, Delta *deltas, int n, HTAB *members)
{
	for (int i = 0; i < n; i++)
	{
		Delta	   *d = &deltas[i];

		CHECK_FOR_INTERRUPTS();
		if (d->keys != 1 && d->keys != -1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("delta %d has keys " INT64_FORMAT ", but pipeline \"%s\" counts distinct values",
							i + 1, d->keys, p->name),
					 errdetail("A distinct count needs each value that comes and goes: a delta adds one key (1) or takes one (-1)."),
					 errhint("Pass the deltas exactonce.state_upsert() returned.")));
		for (int j = 0; j < p->ndistinct; j++)
			if (d->distincts[j] != (Datum) 0)
				MemberAdd(members, CELL_LEVEL_MASK(p->ndims), d->cell, j, d->distincts[j], d->keys);
	}
}

/*
 * DistinctColumnsOf turns a table of members into parallel arrays, leaving
 * out those whose change is nil; the dimensions beyond a member's level
 * are NULL.
 */
void
DistinctColumnsOf(Pipeline *p, HTAB *members, MemberColumns *cols)
{
	long		max = Max(hash_get_num_entries(members), 1);
	Datum	   *lv = palloc(sizeof(Datum) * max);
	Datum	   *cv = palloc(sizeof(Datum) * max);
	Datum	   *vv = palloc(sizeof(Datum) * max);
	int64	   *nv = palloc(sizeof(int64) * max);
	Datum	   *dv[EXACTONCE_MAX_DIMENSIONS];
	bool	   *dn[EXACTONCE_MAX_DIMENSIONS];
	HASH_SEQ_STATUS seq;
	Member	   *m;
	int			n = 0;

	for (int i = 0; i < p->ndims; i++)
	{
		dv[i] = palloc(sizeof(Datum) * max);
		dn[i] = palloc(sizeof(bool) * max);
	}
	hash_seq_init(&seq, members);
	while ((m = hash_seq_search(&seq)) != NULL)
	{
		CHECK_FOR_INTERRUPTS();
		if (m->n == 0)
			continue;
		for (int i = 0; i < p->ndims; i++)
		{
			dn[i][n] = !(m->mask & (1u << i));
			dv[i][n] = m->dims[i];
		}
		lv[n] = Int32GetDatum(pg_popcount32(m->mask));
		cv[n] = Int32GetDatum(m->col);
		vv[n] = m->value;
		nv[n] = m->n;
		n++;
	}
	cols->nmembers = n;
	cols->levels = PointerGetDatum(construct_array(lv, n, INT4OID, 4, true, TYPALIGN_INT));
	for (int i = 0; i < p->ndims; i++)
		cols->dims[i] = StatementTextArray(dv[i], dn[i], n);
	cols->cols = PointerGetDatum(construct_array(cv, n, INT4OID, 4, true, TYPALIGN_INT));
	cols->values = StatementTextArray(vv, NULL, n);
	cols->counts = StatementInt8Array(nv, n);
}

/*
 * DistinctMergeStaged adds the leaf members of one staged batch (columns
 * first.. of a ledger row: cells, columns, values, counts) to members.
 */
void
DistinctMergeStaged(Pipeline *p, HeapTuple tup, TupleDesc desc, int first, HTAB *members)
{
	bool		isnull;
	Datum	   *cellv,
			   *colv,
			   *values,
			   *counts;
	bool	   *cellnulls,
			   *valuenulls;
	int			n,
				ncols,
				ncounts;
	Datum		d = SPI_getbinval(tup, desc, first, &isnull);

	if (isnull)
		return;
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, first + 1, &isnull)),
					  INT4OID, 4, true, TYPALIGN_INT, &colv, NULL, &ncols);
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, first + 2, &isnull)),
					  TEXTOID, -1, false, TYPALIGN_INT, &values, &valuenulls, &n);
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, first + 3, &isnull)),
					  INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &counts, NULL, &ncounts);
	if (ncols != n || ncounts != n)
		elog(ERROR, "staged batch of pipeline \"%s\" is malformed", p->name);
	CellUnflatten(d, TEXTOID, p->ndims, n, &cellv, &cellnulls);
	for (int i = 0; i < n; i++)
	{
		int			col = DatumGetInt32(colv[i]);

		CHECK_FOR_INTERRUPTS();
		if (col < 0 || col >= p->ndistinct || valuenulls[i])
			elog(ERROR, "staged batch of pipeline \"%s\" is malformed", p->name);
		MemberAdd(members, CELL_LEVEL_MASK(p->ndims), &cellv[i * p->ndims], col, values[i],
				  DatumGetInt64(counts[i]));
	}
}

/*
 * BuildDistinctUpsert: add the changes of members to distincts; return
 * each row's cell, column, count and whether it is new.
 */
static const char *
BuildDistinctUpsert(Pipeline *p)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.distincts AS e (cell, col, value, n)"
					 " SELECT (ARRAY[", s);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, "%su.d%d", i > 0 ? ", " : "", i);
	/* a rollup's cell is its prefix; another grouping's has NULLs */
	appendStringInfo(&sql, "]::text[])%s, u.col, u.value, u.n FROM unnest($1::int4[]",
					 p->rollup ? "[1:u.level]" : "");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", $%d::text[]", i + 2);
	appendStringInfo(&sql, ", $%d::text[], $%d::text[], $%d::int8[]) AS u(level",
					 p->ndims + 2, p->ndims + 3, p->ndims + 4);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", d%d", i);
	appendStringInfoString(&sql, ", col, value, n)"
						   " ON CONFLICT (cell, col, value) DO UPDATE SET n = e.n + excluded.n"
						   " RETURNING e.ctid, e.n, e.xmax = 0, e.cell, e.col, e.value");
	return sql.data;
}

/*
 * BuildDistinctDelete: delete values no contribution has any more.
 */
static const char *
BuildDistinctDelete(Pipeline *p)
{
	return psprintf("DELETE FROM %s.distincts WHERE ctid = ANY($1)", quote_identifier(p->name));
}

/*
 * ApplyLevel applies the changes of members to table distincts, adds the
 * change of each cell's distinct counts to its entry in cells, and returns
 * the changes it makes further up, or NULL.  In a rollup, members are of
 * one level, and the level above counts its children that have a value;
 * in another grouping, the leaves (level) come first, and every other cell
 * counts the leaves under it that have a value (level -1).
 */
static HTAB *
ApplyLevel(Pipeline *p, HTAB *members, HTAB *cells, int level)
{
	MemberColumns mc;
	Datum		values[EXACTONCE_MAX_DIMENSIONS + 4];
	Oid			types[EXACTONCE_MAX_DIMENSIONS + 4];
	Datum	   *colv;
	Datum	   *names;
	int			n;
	ItemPointer gone;
	Datum	   *goned;
	int			ngone = 0;
	HTAB	   *above = (p->rollup ? level > 0 : level == p->ndims) ? DistinctTableCreate() : NULL;
	CellChange	none = {0};
	SPITupleTable *rows;

	DistinctColumnsOf(p, members, &mc);
	if (mc.nmembers == 0)
		return above;
	none.total = int64_to_numeric(0);
	deconstruct_array(DatumGetArrayTypeP(mc.cols), INT4OID, 4, true, TYPALIGN_INT,
					  &colv, NULL, &n);
	names = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
		names[i] = CStringGetTextDatum(p->distincts[DatumGetInt32(colv[i])]);
	values[0] = mc.levels;
	types[0] = INT4ARRAYOID;
	for (int i = 0; i < p->ndims; i++)
	{
		values[1 + i] = mc.dims[i];
		types[1 + i] = TEXTARRAYOID;
	}
	values[p->ndims + 1] = StatementTextArray(names, NULL, n);
	types[p->ndims + 1] = TEXTARRAYOID;
	values[p->ndims + 2] = mc.values;
	types[p->ndims + 2] = TEXTARRAYOID;
	values[p->ndims + 3] = mc.counts;
	types[p->ndims + 3] = INT8ARRAYOID;
	StatementExec(StatementPrepare(p, BuildDistinctUpsert, p->ndims + 4, types),
				  values, NULL, n);

	rows = SPI_tuptable;
	gone = palloc(sizeof(ItemPointerData) * n);
	goned = palloc(sizeof(Datum) * n);
	for (uint64 r = 0; r < rows->numvals; r++)
	{
		HeapTuple	tup = rows->vals[r];
		TupleDesc	desc = rows->tupdesc;
		bool		isnull;
		int64		count = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		bool		inserted = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
		Datum	   *cellv;
		bool	   *cellnulls;
		int			len;
		uint32		mask = 0;
		char	   *col;
		int			j = 0;
		int			flip;

		CHECK_FOR_INTERRUPTS();
		/* as for the aggregates (reduce.c): only batches out of order */
		if (count < 0 || (inserted && count == 0))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the batches given would leave a value of a cell of pipeline \"%s\" with " INT64_FORMAT " contributions",
							p->name, count),
					 errdetail("A batch was given before a batch staged ahead of it, which it builds on."),
					 errhint("Apply tokens in the order they were staged, or all staged batches at once: exactonce.reduce_apply(pipeline).")));
		if (!inserted && count != 0)
			continue;

		/* a value that appears counts one more, one that goes one less */
		flip = inserted ? 1 : -1;
		col = TextDatumGetCString(SPI_getbinval(tup, desc, 5, &isnull));
		while (j < p->ndistinct && strcmp(p->distincts[j], col) != 0)
			j++;
		if (j == p->ndistinct)
			elog(ERROR, "table distincts of pipeline \"%s\" names an unknown column \"%s\"",
				 p->name, col);
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 4, &isnull)),
						  TEXTOID, -1, false, TYPALIGN_INT, &cellv, &cellnulls, &len);
		if (len > p->ndims || (p->rollup && len != level))
			elog(ERROR, "table distincts of pipeline \"%s\" returned a cell of another level",
				 p->name);
		/* kept in cells and members after the rows are freed */
		for (int i = 0; i < len; i++)
			if (!cellnulls[i])
			{
				cellv[i] = PointerGetDatum(PG_DETOAST_DATUM_COPY(cellv[i]));
				mask |= 1u << i;
			}
		CellTableAdd(cells, p, mask, cellv, &none)->change.distinct[j] += flip;
		if (above && p->rollup)
			MemberAdd(above, CELL_LEVEL_MASK(level - 1), cellv, j,
					  PointerGetDatum(PG_DETOAST_DATUM_COPY(SPI_getbinval(tup, desc, 6, &isnull))),
					  flip);
		for (int s = 0; above && !p->rollup && s < p->nsets; s++)
			if (p->sets[s] != mask)
				MemberAdd(above, p->sets[s], cellv, j,
						  PointerGetDatum(PG_DETOAST_DATUM_COPY(SPI_getbinval(tup, desc, 6, &isnull))),
						  flip);
		if (inserted)
			continue;
		gone[ngone] = *(ItemPointer) DatumGetPointer(SPI_getbinval(tup, desc, 1, &isnull));
		goned[ngone] = PointerGetDatum(&gone[ngone]);
		ngone++;
	}
	SPI_freetuptable(rows);
	if (ngone > 0)
	{
		Oid			deltype[1] = {TIDARRAYOID};
		Datum		delval[1];

		delval[0] = PointerGetDatum(construct_array(goned, ngone, TIDOID,
													sizeof(ItemPointerData), false, TYPALIGN_SHORT));
		StatementExec(StatementPrepare(p, BuildDistinctDelete, 1, deltype), delval, NULL, ngone);
	}
	return above;
}

/*
 * DistinctApply applies the changes of leaf members to table distincts,
 * level by level up, and adds the change of each cell's distinct counts to
 * its entry in cells, before the aggregates upsert writes them.
 */
void
DistinctApply(Pipeline *p, HTAB *members, HTAB *cells)
{
	if (!p->rollup)
	{
		members = ApplyLevel(p, members, cells, p->ndims);
		ApplyLevel(p, members, cells, -1);
		return;
	}
	for (int level = p->ndims; members != NULL; level--)
		members = ApplyLevel(p, members, cells, level);
}
