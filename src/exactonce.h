/*-------------------------------------------------------------------------
 *
 * exactonce.h
 *		Limits, SQLSTATEs and small value helpers every part of exactonce
 *		shares.  It includes no other header of the extension: each
 *		subsystem has a header of its own, and a file includes those of the
 *		subsystems it uses.
 *
 * Data takes one path through the code:
 *
 *	 queue.c	reads a batch of a shard's events from a sealed partition
 *	 state.c	applies them to state and yields per-cell deltas	(stage 1)
 *	 map.c		pre-aggregates the deltas, stages them under a token	(stage 2)
 *	 reduce.c	applies staged batches to aggregates, once per token	(stage 3)
 *	 drain.c	drives the three for flush() and the workers, with retries
 *
 * CONTRIBUTING.md lists the other files and the rules they keep.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_H
#define EXACTONCE_H

#include "fmgr.h"
#include "utils/fmgrprotos.h"
#include "utils/numeric.h"

#define EXACTONCE_MAX_DIMENSIONS	16
#define EXACTONCE_MAX_MEASURES		16	/* numeric measures besides value */
#define EXACTONCE_MAX_DISTINCT		8	/* columns counted distinct per cell */
#define EXACTONCE_SLOTS				2	/* queue partitions ingest_0, ingest_1 */
#define EXACTONCE_MAX_SHARDS		64	/* key shards of a pipeline, drained
										 * in parallel */
#define EXACTONCE_TOKEN_LEN			32	/* SHA-256 */
#define EXACTONCE_MAX_MAGNITUDE		1000	/* values must be below 1e1000 */
#define EXACTONCE_MAX_KEY_BYTES		2000	/* keys, and cells, must fit in a
											 * btree entry */
#define EXACTONCE_SOURCE_QUEUE		"queue" /* ledger source of the queue's
											 * batches */

/* SQLSTATE of injected faults, so retry logic can tell them from bad data */
#define ERRCODE_EXACTONCE_INJECTED_FAULT	MAKE_SQLSTATE('E','O','0','0','1')
/* SQLSTATE of a once() token reused with another payload */
#define ERRCODE_EXACTONCE_TOKEN_MISMATCH	MAKE_SQLSTATE('E','O','0','0','2')
/* wait_applied() timed out */
#define ERRCODE_EXACTONCE_WAIT_TIMEOUT	MAKE_SQLSTATE('E','O','0','0','3')
/* a node's queue refused a key that moved to another node */
#define ERRCODE_EXACTONCE_KEY_MOVED	MAKE_SQLSTATE('E','O','0','0','4')
/* a column of a pipeline's table no longer has the type exactonce made */
#define ERRCODE_EXACTONCE_ALTERED	MAKE_SQLSTATE('E','O','0','0','5')

/*
 * TextCmp orders text by bytes, then length, as collation "C" does.
 */
static inline int
TextCmp(text *a, text *b)
{
	int			la = VARSIZE_ANY_EXHDR(a);
	int			lb = VARSIZE_ANY_EXHDR(b);
	int			c = memcmp(VARDATA_ANY(a), VARDATA_ANY(b), Min(la, lb));

	return c != 0 ? c : (la > lb) - (la < lb);
}

/*
 * NumericAdd returns a + b, exactly.
 */
static inline Numeric
NumericAdd(Numeric a, Numeric b)
{
	return DatumGetNumeric(DirectFunctionCall2(numeric_add, NumericGetDatum(a),
											   NumericGetDatum(b)));
}

/*
 * NumericIsZero tells whether a equals 0.
 */
static inline bool
NumericIsZero(Numeric a)
{
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(a),
											 NumericGetDatum(int64_to_numeric(0)))) == 0;
}

#endif							/* EXACTONCE_H */
