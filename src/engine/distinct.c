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
 * level from the leaves: a value that appears in a cell adds one to the
 * cell's count and to the parent's n of the value, a value whose n falls
 * to 0 is deleted and takes one away from both.  Only values that appear
 * in or leave a cell go up a level, so the cost is a row written per
 * (leaf, value) a batch changes, and few above.  Reduce writes the rows
 * directly through the table AM, as the state stage writes state: in the
 * primary key's order, each found by the key probe (keyprobe.c) on the
 * leaf page of the one before, most updates HOT (fillfactor 50).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/nbtree.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/index.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "catalog/shape.h"
#include "catalog/statement.h"
#include "engine/distinct.h"
#include "utils/keyprobe.h"
#include "utils/rowbatch.h"

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
	char		buf[128];
	char	   *suffix = 1 + len <= sizeof(buf) ? buf : palloc(1 + len);
	Member	   *m;
	bool		found;

	suffix[0] = (char) col;
	memcpy(suffix + 1, VARDATA_ANY(t), len);
	m = CellTableEnter(members, mask, dims, suffix, 1 + len, &found);
	if (suffix != buf)
		pfree(suffix);
	if (found)
	{
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
 * DistinctOfDelta adds the leaf-cell members the i-th delta changes: it adds
 * (keys 1) or takes (keys -1) one contribution of its value.
 */
void
DistinctOfDelta(Pipeline *p, Delta *deltas, int i, HTAB *members)
{
	Delta	   *d = &deltas[i];

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
	int			n;

	(void) SPI_getbinval(tup, desc, first, &isnull);
	if (isnull)
		return;
	/* the owner's table, as for the cells (reduce.c) */
	n = CellStagedArray(p, tup, desc, first + 2, TEXTOID, -1, &values, &valuenulls);
	CellStagedArray(p, tup, desc, first + 1, INT4OID, n, &colv, NULL);
	CellStagedArray(p, tup, desc, first + 3, INT8OID, n, &counts, NULL);
	CellStagedArray(p, tup, desc, first, TEXTOID, n * p->ndims, &cellv, &cellnulls);
	for (int i = 0; i < n; i++)
	{
		int			col = DatumGetInt32(colv[i]);

		CHECK_FOR_INTERRUPTS();
		if (col < 0 || col >= p->ndistinct)
			CellStagedMalformed(p, tup, desc, psprintf("member %d names distinct count %d of %d", i + 1, col,
													   p->ndistinct));
		if (valuenulls[i])
			CellStagedMalformed(p, tup, desc, psprintf("member %d has no value", i + 1));
		for (int d = 0; d < p->ndims; d++)
			if (cellnulls[i * p->ndims + d])
				CellStagedMalformed(p, tup, desc, psprintf("member %d has no value of dimension %s", i + 1,
														   p->dims[d]));
		MemberAdd(members, CELL_LEVEL_MASK(p->ndims), &cellv[i * p->ndims], col, values[i],
				  DatumGetInt64(counts[i]));
	}
}

/* Table distincts, open for direct writes while a batch is applied. */
typedef struct DistinctWork
{
	Pipeline   *p;
	Relation	rel;
	Relation	index;			/* the primary key: cell, col, value */
	IndexInfo  *index_info;
	Snapshot	snap;
	KeyProbe   *probe;			/* members in index order, or NULL */
	IndexScanDesc scan;			/* where the probe cannot tell */
	TupleTableSlot *found;		/* a row probed */
	TupleTableSlot *slot;		/* a row written */
	RowBatch   *inserts;		/* rows new to the table, of one level */
	AttrNumber	att[4];			/* cell, col, value, n */
	Datum		names[EXACTONCE_MAX_DISTINCT];	/* the columns, as text */
} DistinctWork;

/*
 * TextBytesCmp compares two texts as collation "C" does: by their bytes.
 */
static int
TextBytesCmp(Datum a, Datum b)
{
	text	   *ta = (text *) DatumGetPointer(a);
	text	   *tb = (text *) DatumGetPointer(b);
	int			la = VARSIZE_ANY_EXHDR(ta);
	int			lb = VARSIZE_ANY_EXHDR(tb);
	int			c = memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), Min(la, lb));

	return c != 0 ? c : (la > lb) - (la < lb);
}

/*
 * MemberCmp orders two members of one level as the primary key of table
 * distincts does, so that its probe reads leaf page after leaf page: by
 * cell (an array: element by element, a NULL after any text), column name,
 * then value.
 */
static int
MemberCmp(const void *a, const void *b, void *arg)
{
	const Member *ma = *(Member *const *) a;
	const Member *mb = *(Member *const *) b;
	DistinctWork *w = arg;
	int			c;

	for (int i = 0; i < w->p->ndims; i++)
	{
		bool		na = !(ma->mask & (1u << i));
		bool		nb = !(mb->mask & (1u << i));

		if (na || nb)
		{
			if (na != nb)
				return na ? 1 : -1;
			continue;
		}
		if ((c = TextBytesCmp(ma->dims[i], mb->dims[i])) != 0)
			return c;
	}
	if (ma->col != mb->col &&
		(c = strcmp(w->p->distincts[ma->col], w->p->distincts[mb->col])) != 0)
		return c;
	return TextBytesCmp(ma->value, mb->value);
}

/*
 * MemberCell returns a member's cell as table distincts keeps it: a
 * rollup's cell is its prefix of the dimensions; another grouping's has
 * them all, NULL where rolled up.
 */
static Datum
MemberCell(Pipeline *p, Member *m)
{
	bool		nulls[EXACTONCE_MAX_DIMENSIONS];
	int			dims[1];
	int			lbs[1] = {1};
	int			n = p->rollup ? pg_popcount32(m->mask) : p->ndims;

	if (n == 0)
		return PointerGetDatum(construct_empty_array(TEXTOID));
	for (int i = 0; i < n; i++)
		nulls[i] = !(m->mask & (1u << i));
	dims[0] = n;
	return PointerGetDatum(construct_md_array(m->dims, nulls, 1, dims, lbs, TEXTOID, -1, false,
											  TYPALIGN_INT));
}

/*
 * AttnumOf returns the attribute number of a column of table distincts.
 */
static AttrNumber
AttnumOf(Relation rel, const char *name)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int a = 0; a < desc->natts; a++)
		if (!TupleDescAttr(desc, a)->attisdropped &&
			strcmp(NameStr(TupleDescAttr(desc, a)->attname), name) == 0)
			return a + 1;
	elog(ERROR, "column \"%s\" is missing", name);
}

/*
 * OpenDistincts opens table distincts for the direct writes of a batch,
 * through the one door, and insists that its one index is the primary key
 * create_pipeline made.
 */
static void
OpenDistincts(DistinctWork *w)
{
	Pipeline   *p = w->p;
	List	   *indexes;
	bool		ok;

	w->rel = ShapeOpenDirect(p->distinct_values, ACL_SELECT | ACL_INSERT | ACL_UPDATE | ACL_DELETE,
							 4, 1);
	w->att[0] = AttnumOf(w->rel, "cell");
	w->att[1] = AttnumOf(w->rel, "col");
	w->att[2] = AttnumOf(w->rel, "value");
	w->att[3] = AttnumOf(w->rel, "n");
	indexes = RelationGetIndexList(w->rel);
	w->index = index_open(linitial_oid(indexes), RowExclusiveLock);
	ok = ShapeIndexIs(w->index, p->distinct_values, w->att, 3, true);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the index of table \"%s.distincts\" is not the one exactonce made", p->name),
				 errdetail("The pipeline keeps it as the primary key (cell, col, value)."),
				 errhint("Drop it and add the primary key again: ALTER TABLE %s.distincts ADD PRIMARY KEY (cell, col, value).",
						 quote_identifier(p->name))));
	list_free(indexes);
	w->index_info = BuildIndexInfo(w->index);
	CommandCounterIncrement();
	w->snap = RegisterSnapshot(GetLatestSnapshot());
	w->probe = KeyProbeBegin(w->rel, w->index, w->snap);
	w->scan = index_beginscan(w->rel, w->index, w->snap, 3, 0);
	w->found = table_slot_create(w->rel, NULL);
	w->slot = table_slot_create(w->rel, NULL);
	for (int j = 0; j < p->ndistinct; j++)
		w->names[j] = CStringGetTextDatum(p->distincts[j]);
}

/*
 * CloseDistincts ends what OpenDistincts began.
 */
static void
CloseDistincts(DistinctWork *w)
{
	if (w->probe)
		KeyProbeEnd(w->probe);
	ExecDropSingleTupleTableSlot(w->found);
	ExecDropSingleTupleTableSlot(w->slot);
	index_endscan(w->scan);
	UnregisterSnapshot(w->snap);
	index_close(w->index, NoLock);
	table_close(w->rel, NoLock);
	CommandCounterIncrement();
}

/*
 * FetchMember finds the row of a member's cell, column and value (keys),
 * and returns its n, or -1 where it has none.
 */
static int64
FetchMember(DistinctWork *w, Datum *keys)
{
	TupleTableSlot *slot = NULL;
	bool		isnull;

	switch (w->probe ? KeyProbeFetch(w->probe, keys, w->found) : KEY_UNSURE)
	{
		case KEY_FOUND:
			slot = w->found;
			break;
		case KEY_ABSENT:
			break;
		case KEY_UNSURE:
			{
				ScanKeyData skeys[3];
				static const Oid eq[3] = {F_ARRAY_EQ, F_TEXTEQ, F_TEXTEQ};

				for (int i = 0; i < 3; i++)
					ScanKeyEntryInitialize(&skeys[i], 0, i + 1, BTEqualStrategyNumber, InvalidOid,
										   w->index->rd_indcollation[i], eq[i], keys[i]);
				index_rescan(w->scan, skeys, 3, NULL, 0);
				if (index_getnext_slot(w->scan, ForwardScanDirection, w->found))
					slot = w->found;
				break;
			}
	}
	if (slot == NULL)
		return -1;
	return DatumGetInt64(slot_getattr(slot, w->att[3], &isnull));
}

/*
 * IndexMember makes the primary key entry of a new row of table distincts
 * (a RowBatchIndexFn).
 */
static void
IndexMember(TupleTableSlot *slot, int tag, void *arg)
{
	DistinctWork *w = arg;
	Datum		keys[3];
	bool		nulls[3];

	for (int i = 0; i < 3; i++)
		keys[i] = slot_getattr(slot, w->att[i], &nulls[i]);
	index_insert(w->index, keys, nulls, &slot->tts_tid, w->rel, UNIQUE_CHECK_YES, false,
				 w->index_info);
}

/*
 * WriteMember writes a row of table distincts: n contributions of a cell's
 * value, an update of the row found (tid) or an insert (with the level's
 * other new rows, a page at a time); or deletes the row found, where n is
 * 0.
 */
static void
WriteMember(DistinctWork *w, Datum *keys, int64 n, ItemPointer tid)
{
	TupleTableSlot *slot = w->slot;
	bool		update_indexes = true;
	bool		nulls[3] = {false, false, false};

	if (n == 0)
	{
		simple_table_tuple_delete(w->rel, tid, GetActiveSnapshot());
		return;
	}
	if (tid)
	{
		ExecClearTuple(slot);
		memset(slot->tts_isnull, true, sizeof(bool) * slot->tts_tupleDescriptor->natts);
	}
	else
		slot = RowBatchSlot(w->inserts);
	for (int i = 0; i < 4; i++)
	{
		slot->tts_values[w->att[i] - 1] = i < 3 ? keys[i] : Int64GetDatum(n);
		slot->tts_isnull[w->att[i] - 1] = false;
	}
	if (!tid)
	{
		RowBatchAdd(w->inserts, 0);
		return;
	}
	ExecStoreVirtualTuple(slot);
	simple_table_tuple_update(w->rel, tid, slot, GetActiveSnapshot(), &update_indexes);
	if (update_indexes)
		index_insert(w->index, keys, nulls, &slot->tts_tid, w->rel, UNIQUE_CHECK_NO, true,
					 w->index_info);
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
ApplyLevel(DistinctWork *w, HTAB *members, HTAB *cells, int level)
{
	Pipeline   *p = w->p;
	HTAB	   *above = (p->rollup ? level > 0 : level == p->ndims) ? DistinctTableCreate() : NULL;
	Member	  **sorted = palloc(sizeof(Member *) * Max(hash_get_num_entries(members), 1));
	CellChange	none = {0};
	HASH_SEQ_STATUS seq;
	Member	   *m;
	int			n = 0;

	hash_seq_init(&seq, members);
	while ((m = hash_seq_search(&seq)) != NULL)
		if (m->n != 0)
			sorted[n++] = m;
	qsort_arg(sorted, n, sizeof(Member *), MemberCmp, w);
	none.total = int64_to_numeric(0);
	w->inserts = RowBatchBegin(w->rel, IndexMember, w);

	for (int i = 0; i < n; i++)
	{
		Datum		keys[3];
		int64		had;
		int64		count;
		int			flip;

		CHECK_FOR_INTERRUPTS();
		m = sorted[i];
		keys[0] = MemberCell(p, m);
		keys[1] = w->names[m->col];
		keys[2] = m->value;
		had = FetchMember(w, keys);
		count = Max(had, 0) + m->n;
		/* as for the aggregates (reduce.c): only batches out of order */
		if (count < 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the batches given would leave a value of a cell of pipeline \"%s\" with " INT64_FORMAT " contributions",
							p->name, count),
					 errdetail("A batch was given before a batch staged ahead of it, which it builds on."),
					 errhint("Apply tokens in the order they were staged, or all staged batches at once: exactonce.reduce_apply(pipeline).")));
		WriteMember(w, keys, count, had < 0 ? NULL : &w->found->tts_tid);
		pfree(DatumGetPointer(keys[0]));
		if (had >= 0 && count != 0)
			continue;

		/* a value that appears counts one more, one that goes one less */
		flip = had < 0 ? 1 : -1;
		CellTableAdd(cells, p, m->mask, m->dims, &none)->change.distinct[m->col] += flip;
		if (above && p->rollup)
			MemberAdd(above, CELL_LEVEL_MASK(level - 1), m->dims, m->col, m->value, flip);
		for (int s = 0; above && !p->rollup && s < p->nsets; s++)
			if (p->sets[s] != m->mask)
				MemberAdd(above, p->sets[s], m->dims, m->col, m->value, flip);
	}
	RowBatchEnd(w->inserts);
	pfree(sorted);
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
	DistinctWork w = {0};

	w.p = p;
	OpenDistincts(&w);
	if (!p->rollup)
	{
		members = ApplyLevel(&w, members, cells, p->ndims);
		ApplyLevel(&w, members, cells, -1);
	}
	else
		for (int level = p->ndims; members != NULL; level--)
			members = ApplyLevel(&w, members, cells, level);
	CloseDistincts(&w);
}
