/*-------------------------------------------------------------------------
 *
 * distinct.h
 *		Exact distinct counts per cell: the values behind them, staged by
 *		map and applied by reduce.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_DISTINCT_H
#define EXACTONCE_DISTINCT_H

#include "executor/spi.h"
#include "utils/hsearch.h"

#include "engine/cell.h"
#include "engine/event.h"

/* The change of how many contributions of a cell have one value. */
typedef struct Member
{
	CellKey		key;			/* cell, column and value; must be first */
	uint32		mask;			/* the cell's grouping (cell.h) */
	Datum		dims[EXACTONCE_MAX_DIMENSIONS]; /* set where mask has a bit */
	int			col;			/* Pipeline.distincts */
	Datum		value;			/* text */
	int64		n;
} Member;

/* Members as parallel arrays, one element per member. */
typedef struct MemberColumns
{
	int			nmembers;
	Datum		levels;			/* int4[] */
	Datum		dims[EXACTONCE_MAX_DIMENSIONS]; /* text[], NULL where rolled
												 * up */
	Datum		cols;			/* int4[] */
	Datum		values;			/* text[] */
	Datum		counts;			/* int8[] */
} MemberColumns;

extern HTAB *DistinctTableCreate(void);
extern void DistinctOfDelta(Pipeline *p, Delta *deltas, int i, HTAB *members);
extern void DistinctColumnsOf(Pipeline *p, HTAB *members, MemberColumns *cols);
extern void DistinctMergeStaged(Pipeline *p, HeapTuple tup, TupleDesc desc, int first,
								HTAB *members);
extern void DistinctApply(Pipeline *p, HTAB *members, HTAB *cells);

#endif							/* EXACTONCE_DISTINCT_H */
