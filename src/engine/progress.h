/*-------------------------------------------------------------------------
 *
 * progress.h
 *		A pipeline's progress row and shard rows: its counters, rotation and
 *		positions, and the lock order between them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_PROGRESS_H
#define EXACTONCE_PROGRESS_H

#include "engine/event.h"
#include "engine/queue.h"

extern void ProgressLock(Pipeline *p, int64 *rotation, int64 *drain_rotation,
						 bool *paused);
extern bool ProgressTryLock(Pipeline *p, int64 *rotation, int64 *drain_rotation,
							bool *paused);
extern bool ProgressHeldByMe(Pipeline *p);
extern bool ProgressHeldByWorker(Pipeline *p);
extern void ProgressHeld(Pipeline *p) pg_attribute_noreturn();
extern void ProgressRead(Pipeline *p, int64 *rotation, int64 *drain_rotation,
						 bool *paused);
extern void ProgressRecord(Pipeline *p, const StageCounts *c, int64 batches,
						   int64 drain_rotation);
extern char *ProgressCounters(Pipeline *p);
extern void ProgressRotate(Pipeline *p);
extern void ProgressSetPaused(Pipeline *p, bool paused);
extern void ProgressCheckShard(Pipeline *p, int shard, int64 shard_rotation,
							   int64 rotation, int64 drain_rotation);
extern bool ProgressShardLock(Pipeline *p, int shard, QueuePosition *pos);
extern void ProgressShardsRead(Pipeline *p, bool lock, QueuePosition *pos);
extern bool ProgressShardsAt(Pipeline *p, int shard, int64 rotation,
							 QueuePosition *pos, bool *all,
							 bool *staged);
extern void ProgressShardRecord(Pipeline *p, int shard, const QueuePosition *pos,
								int64 taken, const StageCounts *c, int64 batches);
extern void ProgressLockAll(Pipeline *p, QueuePosition *shards, int64 *rotation,
							int64 *drain_rotation, bool *paused);

#endif							/* EXACTONCE_PROGRESS_H */
