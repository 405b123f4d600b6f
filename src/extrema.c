/*-------------------------------------------------------------------------
 *
 * extrema.c
 *		The values behind each cell's min and max.
 *
 * In latest mode a key's newer version or tombstone takes its old value out
 * of its cells, so a cell's min or max cannot be kept as a running value:
 * when the extreme goes, the next one must be known.  Table extrema keeps,
 * for each cell and each measure with min_max, every value the cell's
 * contributions have and how many have it (a multiset), in a B-tree whose
 * first and last entries under (cell, measure) are the min and the max.
 *
 * The stages treat it as they treat the aggregates: map turns a batch's
 * deltas into changes of leaf-cell multisets (a delta of keys +1 or -1 adds
 * or takes one contribution of its value), staged with the batch under its
 * token; reduce rolls the staged changes up to every level, applies them
 * with one upsert (a value no contribution has any more is deleted), and
 * reads each changed cell's min and max back in the aggregates upsert
 * (reduce.c).  Accumulate mode never takes a value out, but goes the same
 * way, so that both modes have one path.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "extrema.h"
#include "statement.h"

/*
 * ExtremaTableCreate makes an empty table of members in the current context.
 */
HTAB *
ExtremaTableCreate(void)
{
	return CellTableCreateOf(sizeof(Member));
}

/*
 * ExtremaAdd adds n contributions of value to the multiset of one cell and
 * slot.  Equal numerics (1.0 and 1.00) are one member, as in the table's
 * primary key.
 */
static void
ExtremaAdd(HTAB *members, int level, Datum *dims, int slot, Numeric value, int64 n)
{
	char	   *num = numeric_normalize(value);
	int			numlen = strlen(num);
	char	   *suffix = palloc(1 + numlen);
	CellKey		key;
	Member	   *m;
	bool		found;

	suffix[0] = (char) slot;
	memcpy(suffix + 1, num, numlen);
	key = CellKeyMake(level, dims, suffix, 1 + numlen);
	pfree(suffix);
	pfree(num);
	m = hash_search(members, &key, HASH_ENTER, &found);
	if (found)
	{
		pfree(key.data);
		m->n += n;
		return;
	}
	m->level = level;
	memcpy(m->dims, dims, sizeof(Datum) * level);
	m->slot = slot;
	m->value = value;
	m->n = n;
}

/*
 * ExtremaOfDeltas adds the leaf-cell members that n deltas change: a delta
 * adds (keys 1) or takes (keys -1) one contribution of its signed value.
 */
void
ExtremaOfDeltas(Pipeline *p, Delta *deltas, int n, HTAB *members)
{
	for (int i = 0; i < n; i++)
	{
		Delta	   *d = &deltas[i];

		CHECK_FOR_INTERRUPTS();
		if (d->keys != 1 && d->keys != -1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("delta %d has keys " INT64_FORMAT ", but pipeline \"%s\" keeps min and max",
							i + 1, d->keys, p->name),
					 errdetail("Min and max need each value that comes and goes: a delta adds one key (1) or takes one (-1)."),
					 errhint("Pass the deltas exactonce.state_upsert() returned, one per key and cell.")));
		if (p->min_max[0])
			ExtremaAdd(members, p->ndims, d->cell, 0,
					   d->keys > 0 ? d->total : DatumGetNumeric(DirectFunctionCall1(numeric_uminus, NumericGetDatum(d->total))),
					   d->keys);
		for (int j = 0; j < p->nmeasures; j++)
		{
			Numeric		v = d->measures ? d->measures[j] : NULL;

			if (!p->min_max[1 + j] || v == NULL)
				continue;
			ExtremaAdd(members, p->ndims, d->cell, 1 + j,
					   d->keys > 0 ? v : DatumGetNumeric(DirectFunctionCall1(numeric_uminus, NumericGetDatum(v))),
					   d->keys);
		}
	}
}

/*
 * ExtremaColumnsOf turns a table of members into parallel arrays, leaving
 * out those whose change is nil.
 */
void
ExtremaColumnsOf(Pipeline *p, HTAB *members, MemberColumns *cols)
{
	long		max = Max(hash_get_num_entries(members), 1);
	Datum	   *lv = palloc(sizeof(Datum) * max);
	Datum	   *sv = palloc(sizeof(Datum) * max);
	Numeric    *vv = palloc(sizeof(Numeric) * max);
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
		lv[n] = Int32GetDatum(m->level);
		for (int i = 0; i < p->ndims; i++)
		{
			dn[i][n] = i >= m->level;
			dv[i][n] = i < m->level ? m->dims[i] : (Datum) 0;
		}
		sv[n] = Int32GetDatum(m->slot);
		vv[n] = m->value;
		nv[n] = m->n;
		n++;
	}
	cols->nmembers = n;
	cols->levels = PointerGetDatum(construct_array(lv, n, INT4OID, 4, true, TYPALIGN_INT));
	for (int i = 0; i < p->ndims; i++)
		cols->dims[i] = StatementTextArray(dv[i], dn[i], n);
	cols->slots = PointerGetDatum(construct_array(sv, n, INT4OID, 4, true, TYPALIGN_INT));
	cols->values = StatementNumericArray(vv, n);
	cols->counts = StatementInt8Array(nv, n);
}

/*
 * ExtremaMergeStaged adds the leaf members of one staged batch (columns
 * first.. of a ledger row: cells, slots, values, counts) to members at every
 * level of the rollup, and marks their cells in cells to have their min and
 * max read anew.
 */
void
ExtremaMergeStaged(Pipeline *p, HeapTuple tup, TupleDesc desc, int first, HTAB *members,
				   HTAB *cells)
{
	bool		isnull;
	Datum	   *cellv,
			   *slots,
			   *values,
			   *counts;
	bool	   *cellnulls,
			   *valuenulls;
	int			n,
				nslots,
				ncounts;
	Datum		d = SPI_getbinval(tup, desc, first, &isnull);
	CellChange	none = {0};

	if (isnull)
		return;
	none.total = int64_to_numeric(0);
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, first + 1, &isnull)),
					  INT4OID, 4, true, TYPALIGN_INT, &slots, NULL, &nslots);
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, first + 2, &isnull)),
					  NUMERICOID, -1, false, TYPALIGN_INT, &values, &valuenulls, &n);
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, first + 3, &isnull)),
					  INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &counts, NULL, &ncounts);
	if (nslots != n || ncounts != n)
		elog(ERROR, "staged batch of pipeline \"%s\" is malformed", p->name);
	CellUnflatten(d, TEXTOID, p->ndims, n, &cellv, &cellnulls);
	for (int i = 0; i < n; i++)
	{
		int			slot = DatumGetInt32(slots[i]);

		CHECK_FOR_INTERRUPTS();
		if (slot < 0 || slot > p->nmeasures || !p->min_max[slot] || valuenulls[i])
			elog(ERROR, "staged batch of pipeline \"%s\" is malformed", p->name);
		for (int level = 0; level <= p->ndims; level++)
		{
			ExtremaAdd(members, level, &cellv[i * p->ndims], slot,
					   DatumGetNumeric(values[i]), DatumGetInt64(counts[i]));
			CellTableAdd(cells, p, level, &cellv[i * p->ndims], &none)->touched = true;
		}
	}
}

/*
 * BuildExtremaUpsert: add the changes of members to extrema.
 */
static const char *
BuildExtremaUpsert(Pipeline *p)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.extrema AS e (cell, measure, value, n)"
					 " SELECT (ARRAY[", s);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, "%su.d%d", i > 0 ? ", " : "", i);
	appendStringInfoString(&sql, "]::text[])[1:u.level], u.measure, u.value, u.n"
						   " FROM unnest($1::int4[]");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", $%d::text[]", i + 2);
	appendStringInfo(&sql, ", $%d::text[], $%d::numeric[], $%d::int8[]) AS u(level",
					 p->ndims + 2, p->ndims + 3, p->ndims + 4);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", d%d", i);
	appendStringInfoString(&sql, ", measure, value, n)"
						   " ON CONFLICT (cell, measure, value) DO UPDATE SET n = e.n + excluded.n"
						   " RETURNING e.ctid, e.n");
	return sql.data;
}

/*
 * BuildExtremaDelete: delete values no contribution has any more.
 */
static const char *
BuildExtremaDelete(Pipeline *p)
{
	return psprintf("DELETE FROM %s.extrema WHERE ctid = ANY($1)", quote_identifier(p->name));
}

/*
 * ExtremaApply applies the changes of members to table extrema, before the
 * aggregates upsert reads the cells' min and max from it.
 */
void
ExtremaApply(Pipeline *p, HTAB *members)
{
	MemberColumns cols;
	Datum		values[EXACTONCE_MAX_DIMENSIONS + 4];
	Oid			types[EXACTONCE_MAX_DIMENSIONS + 4];
	Datum	   *slots;
	Datum	   *names;
	int			n;
	ItemPointer gone;
	Datum	   *goned;
	int			ngone = 0;

	ExtremaColumnsOf(p, members, &cols);
	if (cols.nmembers == 0)
		return;
	deconstruct_array(DatumGetArrayTypeP(cols.slots), INT4OID, 4, true, TYPALIGN_INT,
					  &slots, NULL, &n);
	names = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
		names[i] = CStringGetTextDatum(PipelineExtremumName(p, DatumGetInt32(slots[i])));
	values[0] = cols.levels;
	types[0] = INT4ARRAYOID;
	for (int i = 0; i < p->ndims; i++)
	{
		values[1 + i] = cols.dims[i];
		types[1 + i] = TEXTARRAYOID;
	}
	values[p->ndims + 1] = StatementTextArray(names, NULL, n);
	types[p->ndims + 1] = TEXTARRAYOID;
	values[p->ndims + 2] = cols.values;
	types[p->ndims + 2] = NUMERICARRAYOID;
	values[p->ndims + 3] = cols.counts;
	types[p->ndims + 3] = INT8ARRAYOID;
	StatementExec(StatementPrepare(p, BuildExtremaUpsert, p->ndims + 4, types),
				  values, NULL, n);

	gone = palloc(sizeof(ItemPointerData) * n);
	goned = palloc(sizeof(Datum) * n);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int64		count = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
														SPI_tuptable->tupdesc, 2, &isnull));

		CHECK_FOR_INTERRUPTS();
		/* as for the aggregates (reduce.c): only batches out of order */
		if (count < 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the batches given would leave a value of a cell of pipeline \"%s\" with " INT64_FORMAT " contributions",
							p->name, count),
					 errdetail("A batch was given before a batch staged ahead of it, which it builds on."),
					 errhint("Apply tokens in the order they were staged, or all staged batches at once: exactonce.reduce_apply(pipeline).")));
		if (count != 0)
			continue;
		gone[ngone] = *(ItemPointer) DatumGetPointer(SPI_getbinval(SPI_tuptable->vals[r],
																   SPI_tuptable->tupdesc, 1, &isnull));
		goned[ngone] = PointerGetDatum(&gone[ngone]);
		ngone++;
	}
	SPI_freetuptable(SPI_tuptable);
	if (ngone > 0)
	{
		Oid			deltype[1] = {TIDARRAYOID};
		Datum		delval[1];

		delval[0] = PointerGetDatum(construct_array(goned, ngone, TIDOID,
													sizeof(ItemPointerData), false, TYPALIGN_SHORT));
		StatementExec(StatementPrepare(p, BuildExtremaDelete, 1, deltype), delval, NULL, ngone);
	}
}

/*
 * ExtremaAppendLookups appends, for each measure with min_max, its min and
 * max in the cell the SQL expression cell names (a text[]), as two
 * comma-led select-list items: index lookups of the first and the last
 * value under (cell, measure).
 */
void
ExtremaAppendLookups(StringInfo sql, Pipeline *p, const char *cell)
{
	const char *s = quote_identifier(p->name);

	for (int slot = 0; slot <= p->nmeasures; slot++)
	{
		const char *m;

		if (!p->min_max[slot])
			continue;
		m = quote_literal_cstr(PipelineExtremumName(p, slot));
		appendStringInfo(sql, ", (SELECT e.value FROM %s.extrema e WHERE e.cell = %s"
						 " AND e.measure = %s ORDER BY e.value LIMIT 1)"
						 ", (SELECT e.value FROM %s.extrema e WHERE e.cell = %s"
						 " AND e.measure = %s ORDER BY e.value DESC LIMIT 1)",
						 s, cell, m, s, cell, m);
	}
}
