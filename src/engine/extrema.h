/*-------------------------------------------------------------------------
 *
 * extrema.h
 *		Each cell's min and max of the measures with min_max.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_EXTREMA_H
#define EXACTONCE_EXTREMA_H

#include "executor/spi.h"
#include "utils/hsearch.h"

#include "exactonce.h"

/*
 * The least and greatest values a leaf keeps in reserve of each min_max
 * slot, and the elements of aggregates.extrema_reserve each of its lists
 * takes: more (0 or 1), how many, the values, NULLs after them.
 */
#define EXTREMA_RESERVE_KEEP	8
#define EXTREMA_RESERVE_STRIDE	(2 + EXTREMA_RESERVE_KEEP)

extern void ExtremaApply(Pipeline *p, HTAB *cells, SPITupleTable *rows, bool *gone,
						 int64 applying);

#endif							/* EXACTONCE_EXTREMA_H */
