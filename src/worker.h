/*-------------------------------------------------------------------------
 *
 * worker.h
 *		The launcher and drain workers, and waking them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_WORKER_H
#define EXACTONCE_WORKER_H

extern void WorkerInit(void);
extern void WorkerWake(void);
extern void WorkerWakeAtCommit(void);
extern void WorkerAppliedAtCommit(void);

/*
 * WorkerServes tells whether drain worker index (of nworkers) drains shard
 * of pipeline id: the shards of a pipeline go to consecutive workers, so
 * with as many workers as shards each shard has a core of its own.
 */
static inline bool
WorkerServes(int32 id, int shard, int nworkers, int index)
{
	Assert(nworkers > 0 && index >= 0 && index < nworkers);
	return (id + shard) % nworkers == index;
}

#endif							/* EXACTONCE_WORKER_H */
