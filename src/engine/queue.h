/*-------------------------------------------------------------------------
 *
 * queue.h
 *		The ingest queue: its two partitions, sealing, and where each shard
 *		stands in them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_QUEUE_H
#define EXACTONCE_QUEUE_H

#include "storage/lock.h"
#include "utils/snapshot.h"
#include "utils/timestamp.h"

#include "engine/event.h"

/*
 * Where a shard stands in the queue: in the partition of "rotation", it has
 * taken the first "count" rows of its keys in TID order.  The TID and the
 * ingest_id of the last of them find the spot at once; count and digest
 * find it again, or refuse, after the partition was rewritten.
 */
typedef struct QueuePosition
{
	int64		rotation;
	int64		tid;			/* block << 16 | offset; 0 before the first
								 * row */
	int64		row;			/* ingest_id of the row at tid */
	int64		count;			/* rows of the shard taken from the partition */
	int64		digest;			/* sum of a hash of their ingest_ids */
	bool		digest_known;	/* false for a position carried over from 1.1 */
	Oid			file;			/* relfilenode tid is in; InvalidOid unknown */
} QueuePosition;

/* The transactions a worker waits for before draining a rotated partition. */
typedef struct SealState
{
	Oid			ingest;			/* the queue they were taken for: a pipeline
								 * recreated under the same id has another */
	int64		rotation;		/* the rotation they were taken for, -1 none */
	int			n;
	VirtualTransactionId vxids[FLEXIBLE_ARRAY_MEMBER];
} SealState;

extern int	QueueKeyShard(Pipeline *p, text *key);
extern void QueuePositionStart(QueuePosition *pos, int64 rotation);
extern int	QueueReadBatch(Pipeline *p, int shard, QueuePosition *pos, int max,
						   Event *events);
extern bool QueueLockPartition(Pipeline *p, int slotno);
extern void QueueRetire(Pipeline *p, int64 first, int64 last, bool drained_before);
extern void QueueFreeze(Pipeline *p);
extern bool QueueSealed(Pipeline *p, int64 rotation, SealState **seal);
extern bool QueueHasRows(Pipeline *p, int slotno, bool nowait);

/* Tells whether QueueDepth counts the row of a key. */
typedef bool (*QueueKeyFilter) (text *key, void *arg);

extern int64 QueueDepth(Pipeline *p, int64 rotation, int64 drain_rotation,
						QueuePosition *shards, Snapshot before, TimestampTz *oldest,
						int64 limit, QueueKeyFilter filter, void *filter_arg);

#endif							/* EXACTONCE_QUEUE_H */
