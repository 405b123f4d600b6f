/*-------------------------------------------------------------------------
 *
 * cell.c
 *		Tables of rollup cells: map.c pre-aggregates a batch's deltas into
 *		one, reduce.c merges staged batches into one before the upsert.
 *
 * A cell is a grouping (the dimensions it groups by: a rollup's level k
 * groups by the first k) and the values of those dimensions.  Its identity
 * is encoded into a byte string (the grouping, then each value with
 * its length) that the table hashes and compares, so no text comparison or
 * collation is involved.
 *
 * A staged batch comes back from the ledger, a table of the pipeline's
 * owner, who may write any row there: CellStagedArray and
 * CellStagedNumbers refuse one that map did not stage before reduce reads
 * any of it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"

#include "catalog/statement.h"
#include "engine/cell.h"

/* room on the stack for the identity of a cell looked up */
#define CELL_KEY_BUF 256

/*
 * CellHash hashes a cell's encoded identity.
 */
static uint32
CellHash(const void *key, Size keysize)
{
	const CellKey *k = key;

	return hash_bytes((const unsigned char *) k->data, k->len);
}

/*
 * CellMatch compares two encoded cell identities (0 when equal).
 */
static int
CellMatch(const void *key1, const void *key2, Size keysize)
{
	const CellKey *a = key1;
	const CellKey *b = key2;

	if (a->len != b->len)
		return 1;
	return memcmp(a->data, b->data, a->len);
}

/*
 * CellTableCreateOf makes an empty table of entries of entrysize bytes that
 * start with a CellKey, in the current context.
 */
HTAB *
CellTableCreateOf(Size entrysize)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(CellKey);
	ctl.entrysize = entrysize;
	ctl.hash = CellHash;
	ctl.match = CellMatch;
	ctl.hcxt = CurrentMemoryContext;
	return hash_create("exactonce cells", 256, &ctl,
					   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
}

/*
 * CellTableCreate makes an empty table of cells in the current context.
 */
HTAB *
CellTableCreate(void)
{
	return CellTableCreateOf(sizeof(Cell));
}

/*
 * CellKeyEncode encodes the identity of the cell that groups by mask, with
 * the values dims[i] of its dimensions, followed by suffixlen bytes of
 * suffix: in buf where it fits in bufsize bytes, else in a buffer of its
 * exact size.
 */
static CellKey
CellKeyEncode(uint32 mask, Datum *dims, const char *suffix, int suffixlen,
			  char *buf, int bufsize)
{
	CellKey		key;
	char	   *w;

	Assert(mask < (UINT64CONST(1) << EXACTONCE_MAX_DIMENSIONS));
	key.len = sizeof(mask) + suffixlen;
	for (uint32 m = mask; m != 0; m &= m - 1)
		key.len += sizeof(uint32) + VARSIZE_ANY_EXHDR(DatumGetPointer(dims[pg_rightmost_one_pos32(m)]));
	key.data = w = key.len <= bufsize ? buf : palloc(key.len);
	memcpy(w, &mask, sizeof(mask));
	w += sizeof(mask);
	for (uint32 m = mask; m != 0; m &= m - 1)
	{
		text	   *t = (text *) DatumGetPointer(dims[pg_rightmost_one_pos32(m)]);
		uint32		len = VARSIZE_ANY_EXHDR(t);

		memcpy(w, &len, sizeof(len));
		memcpy(w + sizeof(len), VARDATA_ANY(t), len);
		w += sizeof(len) + len;
	}
	if (suffixlen > 0)
		memcpy(w, suffix, suffixlen);
	return key;
}

/*
 * CellKeyMake encodes a cell's identity, as CellKeyEncode does, in a buffer
 * of its exact size: a table keeps many.
 */
CellKey
CellKeyMake(uint32 mask, Datum *dims, const char *suffix, int suffixlen)
{
	return CellKeyEncode(mask, dims, suffix, suffixlen, NULL, 0);
}

/*
 * CellTableEnter returns the entry of table (a CellTableCreateOf table) for
 * the cell that groups by mask with values dims, followed by suffixlen
 * bytes of suffix; *found tells whether it was there.  Most lookups find
 * it: the identity is encoded on the stack and copied only into a new
 * entry, whose other fields the caller sets.
 */
void *
CellTableEnter(HTAB *table, uint32 mask, Datum *dims, const char *suffix, int suffixlen,
			   bool *found)
{
	char		buf[CELL_KEY_BUF];
	CellKey		key = CellKeyEncode(mask, dims, suffix, suffixlen, buf, sizeof(buf));
	uint32		hash = CellHash(&key, sizeof(key));
	void	   *entry = hash_search_with_hash_value(table, &key, hash, HASH_FIND, NULL);

	*found = entry != NULL;
	if (*found)
	{
		if (key.data != buf)
			pfree(key.data);
		return entry;
	}
	if (key.data == buf)
	{
		key.data = palloc(key.len);
		memcpy(key.data, buf, key.len);
	}
	return hash_search_with_hash_value(table, &key, hash, HASH_ENTER, NULL);
}

/*
 * AddSum adds two sums, NULL being none.
 */
static Numeric
AddSum(Numeric a, Numeric b)
{
	if (a == NULL)
		return b;
	if (b == NULL)
		return a;
	return NumericAdd(a, b);
}

/*
 * CellLeast returns the lesser of a and b (the greater with greatest), NULL
 * being none.
 */
Numeric
CellLeast(Numeric a, Numeric b, bool greatest)
{
	int			c;

	if (a == NULL)
		return b;
	if (b == NULL)
		return a;
	c = DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(a), NumericGetDatum(b)));
	return (greatest ? c >= 0 : c <= 0) ? a : b;
}

/*
 * CellExtBefore tells whether a comes before b in a list least first
 * (greatest first with greatest).
 */
bool
CellExtBefore(Numeric a, Numeric b, bool greatest)
{
	int			c = DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(a),
													  NumericGetDatum(b)));

	return greatest ? c > 0 : c < 0;
}

/*
 * CellExtInsert adds x to the list of the least (greatest) values v[0..*n),
 * at most cap of them: a value past a full list sets *more.
 */
void
CellExtInsert(Numeric *v, int *n, bool *more, int cap, Numeric x, bool greatest)
{
	int			i = *n;

	if (*n == cap)
	{
		*more = true;
		if (!CellExtBefore(x, v[cap - 1], greatest))
			return;
		i--;
	}
	else
		(*n)++;
	/* after the values it ties with */
	for (; i > 0 && CellExtBefore(x, v[i - 1], greatest); i--)
		v[i] = v[i - 1];
	v[i] = x;
}

/*
 * CellExtMerge adds the values of list from to those of into, both the
 * least (greatest) of their multisets.  Where either list has more, what
 * both know is what they list up to its last value.
 */
void
CellExtMerge(CellExtList *into, const CellExtList *from, bool greatest)
{
	Numeric		cut = NULL;
	CellExtList merged;

	/* a list that has more but none listed knows nothing, nor does the sum */
	if ((into->more && into->n == 0) || (from->more && from->n == 0))
	{
		into->n = 0;
		into->more = true;
		return;
	}
	if (into->more)
		cut = into->v[into->n - 1];
	if (from->more && (cut == NULL || CellExtBefore(from->v[from->n - 1], cut, greatest)))
		cut = from->v[from->n - 1];
	merged = *into;
	merged.more |= from->more;
	for (int i = 0; i < from->n; i++)
		CellExtInsert(merged.v, &merged.n, &merged.more, EXT_KEEP, from->v[i], greatest);
	/* past the cut, a value of one list may stand for an unlisted one */
	while (cut != NULL && merged.n > 0 && CellExtBefore(cut, merged.v[merged.n - 1], greatest))
		merged.n--;
	*into = merged;
}

/*
 * CellTableFind returns the cell that groups by mask with values dims, or
 * NULL.
 */
Cell *
CellTableFind(HTAB *cells, uint32 mask, Datum *dims)
{
	char		buf[CELL_KEY_BUF];
	CellKey		key = CellKeyEncode(mask, dims, NULL, 0, buf, sizeof(buf));
	Cell	   *cell = hash_search(cells, &key, HASH_FIND, NULL);

	if (key.data != buf)
		pfree(key.data);
	return cell;
}

/*
 * CellInit fills a cell new to its table, which groups by mask with values
 * dims, with its first change.
 */
void
CellInit(Cell *cell, Pipeline *p, uint32 mask, Datum *dims, const CellChange *change)
{
	cell->mask = mask;
	cell->level = pg_popcount32(mask);
	for (int i = 0; i < EXACTONCE_MAX_DIMENSIONS; i++)
		cell->dims[i] = (mask & (1u << i)) ? dims[i] : (Datum) 0;
	cell->change = *change;
	/* a cell's own copy: it takes in the changes of others */
	if (change->ext)
	{
		cell->change.ext = palloc(sizeof(CellExtList) * CELL_NEXT(p));
		memcpy(cell->change.ext, change->ext, sizeof(CellExtList) * CELL_NEXT(p));
	}
	cell->touched = false;
}

/*
 * CellAddCounts adds to a cell what a change brings besides its total and
 * sums: the key and measure counts, the distinct counts and the extremes.
 */
void
CellAddCounts(Cell *cell, Pipeline *p, const CellChange *change)
{
	CellChange *c = &cell->change;

	c->keys += change->keys;
	for (int i = 0; i < p->nmeasures; i++)
		c->counts[i] += change->counts[i];
	for (int i = 0; i < p->ndistinct; i++)
		c->distinct[i] += change->distinct[i];
	for (int i = 0; change->ext && i < CELL_NEXT(p); i++)
	{
		if (c->ext == NULL)
			c->ext = palloc0(sizeof(CellExtList) * CELL_NEXT(p));
		if (change->ext[i].n > 0 || change->ext[i].more)
			CellExtMerge(&c->ext[i], &change->ext[i], CELL_EXT_HI(p, i));
	}
}

/*
 * CellTableAdd adds a change to the cell that groups by mask with values
 * dims, and returns the cell.
 */
Cell *
CellTableAdd(HTAB *cells, Pipeline *p, uint32 mask, Datum *dims, const CellChange *change)
{
	bool		found;
	Cell	   *cell = CellTableEnter(cells, mask, dims, NULL, 0, &found);

	if (!found)
	{
		CellInit(cell, p, mask, dims, change);
		return cell;
	}
	cell->change.total = NumericAdd(cell->change.total, change->total);
	for (int i = 0; i < p->nmeasures; i++)
		cell->change.sums[i] = AddSum(cell->change.sums[i], change->sums[i]);
	CellAddCounts(cell, p, change);
	return cell;
}

/*
 * CellIsNil tells whether a cell's change changes nothing.
 */
static bool
CellIsNil(Pipeline *p, Cell *cell)
{
	CellChange *c = &cell->change;

	if (cell->touched || c->keys != 0 || !NumericIsZero(c->total))
		return false;
	for (int i = 0; i < p->nmeasures; i++)
		if (c->counts[i] != 0 || (c->sums[i] != NULL && !NumericIsZero(c->sums[i])))
			return false;
	for (int i = 0; c->ext && i < CELL_NEXT(p); i++)
		if (c->ext[i].n > 0 || c->ext[i].more)
			return false;
	for (int i = 0; i < p->ndistinct; i++)
		if (c->distinct[i] != 0)
			return false;
	return true;
}

/*
 * CellColumnsOf turns a cell table into the parallel arrays the ledger and
 * the aggregates upsert take.  Cells whose change is nil are left out.
 */
void
CellColumnsOf(Pipeline *p, HTAB *cells, CellColumns *cols)
{
	long		max = Max(hash_get_num_entries(cells), 1);
	Datum	   *lv = palloc(sizeof(Datum) * max);
	Datum	   *mv = palloc(sizeof(Datum) * max);
	Datum	   *dv[EXACTONCE_MAX_DIMENSIONS];
	bool	   *dn[EXACTONCE_MAX_DIMENSIONS];
	Numeric    *tv = palloc(sizeof(Numeric) * max);
	int64	   *kv = palloc(sizeof(int64) * max);
	Numeric    *sv[EXACTONCE_MAX_MEASURES];
	int64	   *cv[EXACTONCE_MAX_MEASURES];
	Numeric    *ev[4 * (1 + EXACTONCE_MAX_MEASURES) * CELL_EXT_COLS];
	int64	   *xv[EXACTONCE_MAX_DISTINCT];
	int			next = p->any_min_max ? CELL_NEXT(p) * CELL_EXT_COLS : 0;
	HASH_SEQ_STATUS seq;
	Cell	   *cell;
	int			n = 0;

	for (int i = 0; i < p->ndims; i++)
	{
		dv[i] = palloc(sizeof(Datum) * max);
		dn[i] = palloc(sizeof(bool) * max);
	}
	for (int i = 0; i < p->nmeasures; i++)
	{
		sv[i] = palloc(sizeof(Numeric) * max);
		cv[i] = palloc(sizeof(int64) * max);
	}
	for (int i = 0; i < next; i++)
		ev[i] = palloc(sizeof(Numeric) * max);
	for (int i = 0; i < p->ndistinct; i++)
		xv[i] = palloc(sizeof(int64) * max);
	hash_seq_init(&seq, cells);
	while ((cell = hash_seq_search(&seq)) != NULL)
	{
		CHECK_FOR_INTERRUPTS();
		if (CellIsNil(p, cell))
			continue;
		lv[n] = Int32GetDatum(cell->level);
		mv[n] = Int32GetDatum((int32) cell->mask);
		for (int i = 0; i < p->ndims; i++)
		{
			dn[i][n] = !(cell->mask & (1u << i));
			dv[i][n] = cell->dims[i];
		}
		tv[n] = cell->change.total;
		kv[n] = cell->change.keys;
		for (int i = 0; i < p->nmeasures; i++)
		{
			sv[i][n] = cell->change.sums[i] ? cell->change.sums[i] : int64_to_numeric(0);
			cv[i][n] = cell->change.counts[i];
		}
		for (int i = 0; i < next; i++)
		{
			CellExtList *list = cell->change.ext ? &cell->change.ext[i / CELL_EXT_COLS] : NULL;
			int			k = i % CELL_EXT_COLS;

			if (list == NULL)
				ev[i][n] = NULL;
			else if (k < EXT_KEEP)
				ev[i][n] = k < list->n ? list->v[k] : NULL;
			else
				ev[i][n] = list->more ? int64_to_numeric(1) : NULL;
		}
		for (int i = 0; i < p->ndistinct; i++)
			xv[i][n] = cell->change.distinct[i];
		n++;
	}
	cols->ncells = n;
	cols->levels = PointerGetDatum(construct_array(lv, n, INT4OID, 4, true, TYPALIGN_INT));
	cols->masks = PointerGetDatum(construct_array(mv, n, INT4OID, 4, true, TYPALIGN_INT));
	for (int i = 0; i < p->ndims; i++)
		cols->dims[i] = StatementTextArray(dv[i], dn[i], n);
	cols->totals = StatementNumericArray(tv, n);
	cols->keys = StatementInt8Array(kv, n);
	for (int i = 0; i < p->nmeasures; i++)
	{
		cols->sums[i] = StatementNumericArray(sv[i], n);
		cols->counts[i] = StatementInt8Array(cv[i], n);
	}
	for (int i = 0; i < next; i++)
		cols->ext[i] = StatementNumericArray(ev[i], n);
	for (int i = 0; i < p->ndistinct; i++)
		cols->distinct[i] = StatementInt8Array(xv[i], n);
}

/*
 * CellFlatten stacks ncols one-dimensional arrays of nrows elements each
 * into one two-dimensional array [nrows][ncols].
 */
Datum
CellFlatten(Datum *cols, int ncols, int nrows, Oid elemtype)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	bool	   *nulls;
	int			dims[2] = {nrows, ncols};
	int			lbs[2] = {1, 1};

	if (nrows == 0 || ncols == 0)
		return PointerGetDatum(construct_empty_array(elemtype));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	elems = palloc(sizeof(Datum) * nrows * ncols);
	nulls = palloc(sizeof(bool) * nrows * ncols);
	for (int i = 0; i < ncols; i++)
	{
		Datum	   *v;
		bool	   *nl;
		int			n;

		deconstruct_array(DatumGetArrayTypeP(cols[i]), elemtype, typlen, typbyval, typalign,
						  &v, &nl, &n);
		Assert(n == nrows);
		for (int r = 0; r < nrows; r++)
		{
			elems[r * ncols + i] = v[r];
			nulls[r * ncols + i] = nl[r];
		}
	}
	return PointerGetDatum(construct_md_array(elems, nulls, 2, dims, lbs, elemtype,
											  typlen, typbyval, typalign));
}

/*
 * CellUnflatten reads back a CellFlatten array of nrows rows of ncols: row r
 * is (*elems)[r * ncols ...].  A staged batch that does not have that shape
 * is an error.
 */
void
CellUnflatten(Datum flat, Oid elemtype, int ncols, int nrows, Datum **elems, bool **nulls)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			n;

	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(DatumGetArrayTypeP(flat), elemtype, typlen, typbyval, typalign,
					  elems, nulls, &n);
	if (n != nrows * ncols)
		elog(ERROR, "staged batch is malformed: %d values where %d x %d were expected",
			 n, nrows, ncols);
}

/*
 * CellStagedMalformed refuses a staged batch (row tup of LedgerLockStaged) that
 * map did not stage: the workers log it and go on with other pipelines, the
 * events wait in the queue, until the row is deleted.
 */
void
CellStagedMalformed(Pipeline *p, HeapTuple tup, TupleDesc desc, const char *what)
{
	bool		isnull;
	char	   *token = DatumGetCString(DirectFunctionCall1(byteaout, SPI_getbinval(tup, desc, 1, &isnull)));

	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_ROW_CHANGED),
			 errmsg("staged batch %s of pipeline \"%s\" is malformed: %s", token, p->name, what),
			 errdetail("A batch that map stages has every payload column, as many values in each as it has cells, and no NaN."),
			 errhint("A row the pipeline did not stage can be deleted: DELETE FROM %s.ledger WHERE token = '%s'.",
					 quote_identifier(p->name), token)));
}

/*
 * CellStagedArray returns column col of a staged batch's row, an array of
 * elemtype, taken apart (nulls NULL: none may be null), and how many
 * values it has, which must be want unless want is -1.
 */
int
CellStagedArray(Pipeline *p, HeapTuple tup, TupleDesc desc, int col, Oid elemtype, int want,
				Datum **elems, bool **nulls)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			n;

	if (isnull)
		CellStagedMalformed(p, tup, desc, psprintf("column %s is null", SPI_fname(desc, col)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(DatumGetArrayTypeP(d), elemtype, typlen, typbyval, typalign, elems, nulls, &n);
	if (want >= 0 && n != want)
		CellStagedMalformed(p, tup, desc, psprintf("column %s has %d values where %d were expected",
												   SPI_fname(desc, col), n, want));
	return n;
}

/*
 * CellStagedNumbers refuses a staged batch whose numerics (n of them,
 * nulls NULL where none is) hold a NaN or an infinity, which no event
 * brings: ingest dead-letters those.
 */
void
CellStagedNumbers(Pipeline *p, HeapTuple tup, TupleDesc desc, int col, Datum *values, bool *nulls, int n)
{
	for (int i = 0; i < n; i++)
		if ((nulls == NULL || !nulls[i]) &&
			(numeric_is_nan(DatumGetNumeric(values[i])) || numeric_is_inf(DatumGetNumeric(values[i]))))
			CellStagedMalformed(p, tup, desc, psprintf("column %s holds %s", SPI_fname(desc, col),
													   numeric_is_nan(DatumGetNumeric(values[i])) ? "NaN" : "an infinity"));
}
