/*-------------------------------------------------------------------------
 *
 * rowbatch.h
 *		New rows of a pipeline table inserted a page at a time.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_ROWBATCH_H
#define EXACTONCE_ROWBATCH_H

#include "executor/tuptable.h"
#include "utils/relcache.h"

typedef struct RowBatch RowBatch;

/*
 * makes the index entries of a row just inserted (its TID is in the slot);
 * NULL for a table without indexes
 */
typedef void (*RowBatchIndexFn) (TupleTableSlot *slot, int tag, void *arg);

extern RowBatch *RowBatchBegin(Relation rel, RowBatchIndexFn index, void *arg);
extern TupleTableSlot *RowBatchSlot(RowBatch *rb);
extern void RowBatchAdd(RowBatch *rb, int tag);
extern void RowBatchFlush(RowBatch *rb);
extern void RowBatchEnd(RowBatch *rb);

#endif							/* EXACTONCE_ROWBATCH_H */
