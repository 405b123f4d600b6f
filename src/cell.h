/*-------------------------------------------------------------------------
 *
 * cell.h
 *		Tables of rollup cells and the changes accumulated for them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_CELL_H
#define EXACTONCE_CELL_H

#include "utils/hsearch.h"

#include "pipeline.h"

/* A rollup cell's identity, encoded as level and length-prefixed values. */
typedef struct CellKey
{
	char	   *data;
	int			len;
} CellKey;

/* A rollup cell and the change accumulated for it. */
typedef struct Cell
{
	CellKey		key;			/* hash key, must be first */
	int			level;
	Datum		dims[EXACTONCE_MAX_DIMENSIONS]; /* first "level" are set */
	Numeric		total;
	int64		keys;
} Cell;

extern HTAB *CellTableCreate(void);
extern void CellTableAdd(HTAB *cells, int level, Datum *dims, Numeric total,
						 int64 keys);
extern int	CellArrays(Pipeline *p, HTAB *cells, Datum *levels, Datum *dimcols,
					   Datum *totals, Datum *keys);

#endif							/* EXACTONCE_CELL_H */
