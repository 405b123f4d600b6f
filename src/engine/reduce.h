/*-------------------------------------------------------------------------
 *
 * reduce.h
 *		Stage 3: apply staged batches to aggregates, once per token.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_REDUCE_H
#define EXACTONCE_REDUCE_H

#include "utils/hsearch.h"

#include "exactonce.h"

extern int	ReduceApply(Pipeline *p, Datum tokens, bool have_tokens);
extern void ReduceApplyCells(Pipeline *p, HTAB *cells, HTAB *members);

#endif							/* EXACTONCE_REDUCE_H */
