/*-------------------------------------------------------------------------
 *
 * rowbatch.c
 *		New rows of a pipeline table inserted a page at a time.
 *
 * A batch inserts many rows into state, seen and distincts, and a COPY
 * into the queue many more (engine/queuecopy.c).  One by one,
 * each is a WAL record of its own, about 50 bytes besides the row; the
 * table AM's multi-insert (what COPY uses) logs the rows that land on one
 * page as one record, about 8 bytes each besides the row, and locks each
 * page once.  Rows are gathered in up to ROWBATCH_ROWS slots, inserted
 * together, and then the caller makes their index entries, row by row.
 *
 * The slots use a copy of the table's descriptor that is not reference
 * counted: slots of the relation's own descriptor each pin it with the
 * resource owner, whose bookkeeping of a thousand pins of one descriptor
 * costs more than the rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/tableam.h"
#include "access/xact.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/rel.h"

#include "utils/rowbatch.h"

/* rows inserted together: COPY's MAX_BUFFERED_TUPLES */
#define ROWBATCH_ROWS 1000

struct RowBatch
{
	Relation	rel;
	TupleDesc	desc;			/* not reference counted */
	RowBatchIndexFn index;
	void	   *arg;
	int			nrows;			/* filled slots */
	int			nslots;			/* made slots */
	TupleTableSlot *slots[ROWBATCH_ROWS];
	int			tags[ROWBATCH_ROWS];
};

/*
 * RowBatchBegin starts gathering new rows of rel; index makes the index
 * entries of each once it is inserted.
 */
RowBatch *
RowBatchBegin(Relation rel, RowBatchIndexFn index, void *arg)
{
	RowBatch   *rb = palloc0(sizeof(RowBatch));

	rb->rel = rel;
	rb->desc = CreateTupleDescCopy(RelationGetDescr(rel));
	rb->index = index;
	rb->arg = arg;
	return rb;
}

/*
 * InsertRows inserts the gathered rows and has their index entries made.
 */
static void
InsertRows(RowBatch *rb)
{
	if (rb->nrows == 0)
		return;
	table_multi_insert(rb->rel, rb->slots, rb->nrows, GetCurrentCommandId(true), 0, NULL);
	for (int i = 0; i < rb->nrows; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (rb->index != NULL)
			rb->index(rb->slots[i], rb->tags[i], rb->arg);
		ExecClearTuple(rb->slots[i]);
	}
	rb->nrows = 0;
}

/*
 * RowBatchSlot returns an empty slot with every column NULL, to be filled
 * (tts_values, tts_isnull) and passed on with RowBatchAdd.
 */
TupleTableSlot *
RowBatchSlot(RowBatch *rb)
{
	TupleTableSlot *slot;

	if (rb->nrows == ROWBATCH_ROWS)
		InsertRows(rb);
	if (rb->nrows == rb->nslots)
		rb->slots[rb->nslots++] = MakeSingleTupleTableSlot(rb->desc, table_slot_callbacks(rb->rel));
	slot = rb->slots[rb->nrows];
	ExecClearTuple(slot);
	memset(slot->tts_isnull, true, sizeof(bool) * rb->desc->natts);
	return slot;
}

/*
 * RowBatchAdd adds the row filled into the slot RowBatchSlot returned; tag
 * is passed on to the index callback with it.
 */
void
RowBatchAdd(RowBatch *rb, int tag)
{
	TupleTableSlot *slot = rb->slots[rb->nrows];

	ExecStoreVirtualTuple(slot);
	/* the row's own copy: what it points to may be gone when it is inserted */
	ExecMaterializeSlot(slot);
	rb->tags[rb->nrows++] = tag;
}

/*
 * RowBatchFlush inserts the rows gathered so far; the slots stay for more.
 */
void
RowBatchFlush(RowBatch *rb)
{
	InsertRows(rb);
}

/*
 * RowBatchEnd inserts the rows left and frees the batch.
 */
void
RowBatchEnd(RowBatch *rb)
{
	InsertRows(rb);
	for (int i = 0; i < rb->nslots; i++)
		ExecDropSingleTupleTableSlot(rb->slots[i]);
	FreeTupleDesc(rb->desc);
	pfree(rb);
}
