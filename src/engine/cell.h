/*-------------------------------------------------------------------------
 *
 * cell.h
 *		Tables of rollup cells and the changes accumulated for them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_CELL_H
#define EXACTONCE_CELL_H

#include "access/htup.h"
#include "access/tupdesc.h"
#include "utils/hsearch.h"

#include "exactonce.h"

/* A cell's identity, encoded as its grouping and length-prefixed values. */
typedef struct CellKey
{
	char	   *data;
	int			len;
} CellKey;

/*
 * The least (or greatest) values of a multiset, at most EXT_KEEP of them,
 * in order: least first (greatest first).  Without more, they are all of
 * it; with more, every value of it ordered before the last listed one is
 * listed, the others may not be (extrema.c).
 */
#define EXT_KEEP	4

typedef struct CellExtList
{
	int			n;
	bool		more;
	Numeric		v[EXT_KEEP];
} CellExtList;

/*
 * A change to one cell: of value's total and the key count, and of each
 * measure's sum (NULL: none) and count.  With min_max, ext holds for each
 * min_max slot (value, then the measures) the least and greatest values
 * that enter the cell and that leave it: CELL_EXT(p, kind, slot).
 */
typedef struct CellChange
{
	Numeric		total;
	int64		keys;
	Numeric		sums[EXACTONCE_MAX_MEASURES];
	int64		counts[EXACTONCE_MAX_MEASURES];
	CellExtList *ext;
	int64		distinct[EXACTONCE_MAX_DISTINCT];	/* of each distinct count */
} CellChange;

#define EXT_LO_IN	0
#define EXT_HI_IN	1
#define EXT_LO_OUT	2
#define EXT_HI_OUT	3
#define CELL_NEXT(p)	(4 * (1 + (p)->nmeasures))
#define CELL_EXT(p, kind, slot)	((kind) * (1 + (p)->nmeasures) + (slot))
/* whether list i of CELL_EXT is greatest first */
#define CELL_EXT_HI(p, i)	((i) / (1 + (p)->nmeasures) % 2 == 1)

/*
 * A list is staged as EXT_KEEP values (NULL past its end) and its more (1)
 * or not (NULL): CELL_EXT_COLS columns of the ledger's extrema per list.
 * Batches staged before 1.16 have one column per list, its first value.
 */
#define CELL_EXT_COLS	(EXT_KEEP + 1)

/* A rollup cell and the change accumulated for it. */
typedef struct Cell
{
	CellKey		key;			/* hash key, must be first */
	uint32		mask;			/* the dimensions it groups by, bit i for i */
	int			level;			/* how many */
	Datum		dims[EXACTONCE_MAX_DIMENSIONS]; /* set where mask has a bit */
	CellChange	change;
	bool		touched;		/* its min and max are to be read anew */
} Cell;

/* The cells of a table as parallel arrays, one element per cell. */
typedef struct CellColumns
{
	int			ncells;
	Datum		levels;			/* int4[] */
	Datum		masks;			/* int4[] */
	Datum		dims[EXACTONCE_MAX_DIMENSIONS]; /* text[], NULL where rolled
												 * up */
	Datum		totals;			/* numeric[] */
	Datum		keys;			/* int8[] */
	Datum		sums[EXACTONCE_MAX_MEASURES];	/* numeric[] */
	Datum		counts[EXACTONCE_MAX_MEASURES]; /* int8[] */
	Datum		ext[4 * (1 + EXACTONCE_MAX_MEASURES) * CELL_EXT_COLS];	/* numeric[]: CELL_EXT,
																		 * then CELL_EXT_COLS */
	Datum		distinct[EXACTONCE_MAX_DISTINCT];	/* int8[] */
} CellColumns;

extern HTAB *CellTableCreateOf(Size entrysize);
extern CellKey CellKeyMake(uint32 mask, Datum *dims, const char *suffix, int suffixlen);
extern void *CellTableEnter(HTAB *table, uint32 mask, Datum *dims, const char *suffix,
							int suffixlen, bool *found);
extern HTAB *CellTableCreate(void);
extern Cell *CellTableFind(HTAB *cells, uint32 mask, Datum *dims);
extern void CellInit(Cell *cell, Pipeline *p, uint32 mask, Datum *dims, const CellChange *change);
extern void CellAddCounts(Cell *cell, Pipeline *p, const CellChange *change);
extern Cell *CellTableAdd(HTAB *cells, Pipeline *p, uint32 mask, Datum *dims,
						  const CellChange *change);
extern void CellColumnsOf(Pipeline *p, HTAB *cells, CellColumns *cols);
extern Numeric CellLeast(Numeric a, Numeric b, bool greatest);
extern bool CellExtBefore(Numeric a, Numeric b, bool greatest);
extern void CellExtInsert(Numeric *v, int *n, bool *more, int cap, Numeric x, bool greatest);
extern void CellExtMerge(CellExtList *into, const CellExtList *from, bool greatest);
extern Datum CellFlatten(Datum *cols, int ncols, int nrows, Oid elemtype);
extern void CellUnflatten(Datum flat, Oid elemtype, int ncols, int nrows,
						  Datum **elems, bool **nulls);

extern void CellStagedMalformed(Pipeline *p, HeapTuple tup, TupleDesc desc,
								const char *what) pg_attribute_noreturn();
extern int	CellStagedArray(Pipeline *p, HeapTuple tup, TupleDesc desc, int col,
							Oid elemtype, int want, Datum **elems, bool **nulls);
extern void CellStagedNumbers(Pipeline *p, HeapTuple tup, TupleDesc desc, int col,
							  Datum *values, bool *nulls, int n);

#endif							/* EXACTONCE_CELL_H */
