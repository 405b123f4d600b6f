/*-------------------------------------------------------------------------
 *
 * reduce.h
 *		Stage 3: apply staged batches to aggregates, once per token.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_REDUCE_H
#define EXACTONCE_REDUCE_H

#include "exactonce.h"

extern int	ReduceApply(Pipeline *p, Datum tokens, bool have_tokens);

#endif							/* EXACTONCE_REDUCE_H */
