/*-------------------------------------------------------------------------
 *
 * drain.h
 *		Events from the queue through the three stages, for flush() and the
 *		workers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_DRAIN_H
#define EXACTONCE_DRAIN_H

#include "engine/queue.h"

/* What one step of a worker did. */
typedef struct DrainResult
{
	bool		worked;			/* took events, truncated or rotated */
	int64		taken;			/* events taken from the queue */
	TimestampTz oldest;			/* oldest event_time taken */
	bool		sealing;		/* waits for inserters to end: look again soon */
	bool		exhausted;		/* the partition had no more rows */
	bool		rotated;		/* sent inserts to the other partition */
	int			wait_ms;		/* the queue may rotate in this long, not
								 * before (exactonce.batch_delay) */
} DrainResult;

extern void DrainInit(void);
extern int64 DrainPipeline(Pipeline *p);
extern void DrainEvents(Pipeline *p, Event *events, int n, int64 rotation,
						StageCounts *counts);
extern DrainResult DrainStep(Pipeline *p, int shard, SealState **seal);
extern void DrainApplyLeft(Pipeline *p);

#endif							/* EXACTONCE_DRAIN_H */
