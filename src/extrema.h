/*-------------------------------------------------------------------------
 *
 * extrema.h
 *		The values behind each cell's min and max: staged by map, applied by
 *		reduce.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_EXTREMA_H
#define EXACTONCE_EXTREMA_H

#include "executor/spi.h"
#include "utils/hsearch.h"

#include "cell.h"
#include "event.h"

/* The change of how many contributions of a cell have one value. */
typedef struct Member
{
	CellKey		key;			/* cell, slot and value; must be first */
	int			level;
	Datum		dims[EXACTONCE_MAX_DIMENSIONS]; /* first "level" are set */
	int			slot;			/* Pipeline.min_max */
	Numeric		value;
	int64		n;
} Member;

/* Members as parallel arrays, one element per member. */
typedef struct MemberColumns
{
	int			nmembers;
	Datum		levels;			/* int4[] */
	Datum		dims[EXACTONCE_MAX_DIMENSIONS]; /* text[], NULL where rolled
												 * up */
	Datum		slots;			/* int4[] */
	Datum		values;			/* numeric[] */
	Datum		counts;			/* int8[] */
} MemberColumns;

extern HTAB *ExtremaTableCreate(void);
extern void ExtremaOfDeltas(Pipeline *p, Delta *deltas, int n, HTAB *members);
extern void ExtremaColumnsOf(Pipeline *p, HTAB *members, MemberColumns *cols);
extern void ExtremaMergeStaged(Pipeline *p, HeapTuple tup, TupleDesc desc, int first,
							   HTAB *members, HTAB *cells);
extern void ExtremaApply(Pipeline *p, HTAB *members);
extern void ExtremaAppendLookups(StringInfo sql, Pipeline *p, const char *cell);

#endif							/* EXACTONCE_EXTREMA_H */
