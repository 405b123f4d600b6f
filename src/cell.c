/*-------------------------------------------------------------------------
 *
 * cell.c
 *		Tables of rollup cells: map.c pre-aggregates a batch's deltas into
 *		one, reduce.c merges staged batches into one before the upsert.
 *
 * A cell is a level and the values of the first "level" dimensions.  Its
 * identity is encoded into a byte string (the level, then each value with
 * its length) that the table hashes and compares, so no text comparison or
 * collation is involved.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/array.h"

#include "cell.h"
#include "statement.h"

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
 * CellTableCreate makes an empty table of cells in the current context.
 */
HTAB *
CellTableCreate(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(CellKey);
	ctl.entrysize = sizeof(Cell);
	ctl.hash = CellHash;
	ctl.match = CellMatch;
	ctl.hcxt = CurrentMemoryContext;
	return hash_create("exactonce cells", 256, &ctl,
					   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
}

/*
 * CellTableAdd adds a change to the cell (level, dims[0..level)).
 */
void
CellTableAdd(HTAB *cells, int level, Datum *dims, Numeric total, int64 keys)
{
	CellKey		key;
	Cell	   *cell;
	bool		found;
	char	   *w;

	Assert(level >= 0 && level <= EXACTONCE_MAX_DIMENSIONS);

	/* encoded in a buffer of its exact size: a table keeps many */
	key.len = 1;
	for (int i = 0; i < level; i++)
		key.len += sizeof(uint32) + VARSIZE_ANY_EXHDR(DatumGetPointer(dims[i]));
	key.data = w = palloc(key.len);
	*w++ = (char) level;
	for (int i = 0; i < level; i++)
	{
		text	   *t = (text *) DatumGetPointer(dims[i]);
		uint32		len = VARSIZE_ANY_EXHDR(t);

		memcpy(w, &len, sizeof(len));
		memcpy(w + sizeof(len), VARDATA_ANY(t), len);
		w += sizeof(len) + len;
	}
	cell = hash_search(cells, &key, HASH_ENTER, &found);
	if (found)
	{
		pfree(key.data);
		cell->total = NumericAdd(cell->total, total);
		cell->keys += keys;
		return;
	}
	cell->level = level;
	memcpy(cell->dims, dims, sizeof(Datum) * level);
	cell->total = total;
	cell->keys = keys;
}

/*
 * CellArrays turns a cell table into the parallel arrays the ledger and the
 * aggregates upsert take: levels, one text[] per dimension (NULL where rolled
 * up), totals and key counts.  Cells whose change is nil are left out.
 */
int
CellArrays(Pipeline *p, HTAB *cells, Datum *levels, Datum *dimcols, Datum *totals,
		   Datum *keys)
{
	long		max = Max(hash_get_num_entries(cells), 1);
	Datum	   *lv = palloc(sizeof(Datum) * max);
	Datum	   *dv[EXACTONCE_MAX_DIMENSIONS];
	bool	   *dn[EXACTONCE_MAX_DIMENSIONS];
	Numeric    *tv = palloc(sizeof(Numeric) * max);
	int64	   *kv = palloc(sizeof(int64) * max);
	HASH_SEQ_STATUS seq;
	Cell	   *cell;
	int			n = 0;

	for (int i = 0; i < p->ndims; i++)
	{
		dv[i] = palloc(sizeof(Datum) * max);
		dn[i] = palloc(sizeof(bool) * max);
	}
	hash_seq_init(&seq, cells);
	while ((cell = hash_seq_search(&seq)) != NULL)
	{
		CHECK_FOR_INTERRUPTS();
		if (cell->keys == 0 && NumericIsZero(cell->total))
			continue;
		lv[n] = Int32GetDatum(cell->level);
		for (int i = 0; i < p->ndims; i++)
		{
			dn[i][n] = i >= cell->level;
			dv[i][n] = i < cell->level ? cell->dims[i] : (Datum) 0;
		}
		tv[n] = cell->total;
		kv[n] = cell->keys;
		n++;
	}
	*levels = PointerGetDatum(construct_array(lv, n, INT4OID, 4, true, TYPALIGN_INT));
	for (int i = 0; i < p->ndims; i++)
		dimcols[i] = StatementTextArray(dv[i], dn[i], n);
	*totals = StatementNumericArray(tv, n);
	*keys = StatementInt8Array(kv, n);
	return n;
}
