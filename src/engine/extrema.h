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

extern void ExtremaApply(Pipeline *p, HTAB *cells, SPITupleTable *rows, bool *gone,
						 bool fill);

#endif							/* EXACTONCE_EXTREMA_H */
