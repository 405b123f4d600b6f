/*-------------------------------------------------------------------------
 *
 * shmem.h
 *		Shared memory of the workers: one slot per drain worker, and counters
 *		of injected faults.  Locking rules are in shmem.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_SHMEM_H
#define EXACTONCE_SHMEM_H

#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"


#define EXACTONCE_MAX_WORKERS		64	/* drain worker slots, all databases */
#define EXACTONCE_WORKER_PIPELINES	32	/* pipelines whose stats a slot keeps */
#define SHMEM_FAULT_COUNTERS		8	/* room for fault.c's stages */
#define EXACTONCE_LATENCY_SAMPLES	100 /* batches per pipeline for latency */

/* What a drain worker knows of one pipeline it serves. */
typedef struct PipelineStat
{
	int32		id;
	int			failures;		/* consecutive failed steps */
	TimestampTz retry_at;		/* backoff: no step before this */
	bool		waiting;		/* for a lock another session holds */
	int			nlatency;
	double		latency_ms[EXACTONCE_LATENCY_SAMPLES];	/* oldest event of a
														 * batch, insert to
														 * commit */
	char		last_error[256];
} PipelineStat;

typedef enum WorkerState
{
	WORKER_FREE = 0,
	WORKER_IDLE,
	WORKER_DRAINING
} WorkerState;

/* One drain worker. */
typedef struct WorkerSlot
{
	pid_t		pid;
	Oid			dboid;
	NameData	dbname;			/* the database the launcher started it for */
	int			index;			/* serves the shards ShmemWorkerServes says */
	int			nworkers;
	Latch	   *latch;
	pg_atomic_uint64 wakes;		/* times WakeWorkers set the latch */
	WorkerState state;
	int32		pipeline_id;	/* being drained, if DRAINING */
	PipelineStat pipes[EXACTONCE_WORKER_PIPELINES];
} WorkerSlot;

typedef struct ExactonceShared
{
	LWLock	   *lock;
	pg_atomic_uint64 faults[SHMEM_FAULT_COUNTERS];	/* injected since server
													 * start, by stage
													 * (fault.c) */
	ConditionVariable applied;	/* broadcast when a transaction that moved a
								 * pipeline on commits (wait_applied) */
	WorkerSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} ExactonceShared;

/* NULL unless the library was preloaded */
extern ExactonceShared *exactonce_shared;

extern void ShmemInit(void);
extern int	ShmemWorkersOf(const char *dbname);
extern bool ShmemIsWorker(int pid);

/*
 * ShmemWorkerServes tells whether drain worker index (of nworkers) drains shard
 * of pipeline id: the shards of a pipeline go to consecutive workers, so
 * with as many workers as shards each shard has a core of its own.
 */
static inline bool
ShmemWorkerServes(int32 id, int shard, int nworkers, int index)
{
	Assert(nworkers > 0 && index >= 0 && index < nworkers);
	return (id + shard) % nworkers == index;
}


#endif							/* EXACTONCE_SHMEM_H */
