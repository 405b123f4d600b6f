/*-------------------------------------------------------------------------
 *
 * exactonce.h
 *		Types and entry points shared by the files of the exactonce extension.
 *
 * Data takes one path through the code:
 *
 *	 queue.c	reads a batch of events from a sealed ingest partition
 *	 state.c	applies them to state and yields per-cell deltas	(stage 1)
 *	 map.c		pre-aggregates the deltas, stages them under a token	(stage 2)
 *	 reduce.c	applies staged batches to aggregates, once per token	(stage 3)
 *	 drain.c	drives the three for flush() and the workers, with retries
 *
 * pipeline.c keeps the catalog, spi_util.c the prepared statements, fault.c
 * the fault injection and stats.c the monitoring view.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_H
#define EXACTONCE_H

#include "postgres.h"

#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "utils/fmgrprotos.h"
#include "utils/hsearch.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#define EXACTONCE_MAX_DIMENSIONS	16
#define EXACTONCE_SLOTS				2	/* queue partitions ingest_0, ingest_1 */
#define EXACTONCE_MAX_SHARDS		64	/* key shards of a pipeline, drained in parallel */
#define EXACTONCE_TOKEN_LEN			32	/* SHA-256 */
#define EXACTONCE_MAX_MAGNITUDE		1000	/* values must be below 1e1000 */
#define EXACTONCE_MAX_KEY_BYTES		2000	/* keys, and cells, must fit in a btree entry */
#define EXACTONCE_SOURCE_QUEUE		"queue"
#define EXACTONCE_MAX_WORKERS		64	/* drain worker slots, all databases */
#define EXACTONCE_WORKER_PIPELINES	32	/* pipelines whose stats a slot keeps */
#define EXACTONCE_LATENCY_SAMPLES	100	/* batches per pipeline for latency */

/* SQLSTATE of injected faults, so retry logic can tell them from bad data */
#define ERRCODE_EXACTONCE_INJECTED_FAULT	MAKE_SQLSTATE('E','O','0','0','1')

/* GUCs (exactonce.c) */
extern char *exactonce_database;
extern int	exactonce_workers;
extern int	exactonce_batch_size;
extern int	exactonce_naptime;
extern double exactonce_fault_state;
extern double exactonce_fault_map;
extern double exactonce_fault_reduce;
extern char *exactonce_fault_poison_key;

typedef enum PipelineMode
{
	PIPELINE_LATEST,
	PIPELINE_ACCUMULATE
} PipelineMode;

/* A pipeline as the stages need it: catalog row plus relation OIDs. */
typedef struct Pipeline
{
	int32		id;
	char	   *name;			/* also the schema name */
	PipelineMode mode;
	int			ndims;
	char	   *dims[EXACTONCE_MAX_DIMENSIONS];
	Oid			owner;
	Oid			nspid;
	Oid			ingest;			/* partitioned parent */
	Oid			slots[EXACTONCE_SLOTS];
	Oid			state;
	Oid			state_pkey;
	Oid			seen;			/* accumulate mode only */
	Oid			seen_pkey;
	Oid			progress;
	Oid			shard;			/* drain position of each shard */
	int			nshards;
	Oid			caller;			/* while acting as owner: who called, */
	int			caller_sec;		/* and in what security context */
} Pipeline;

/* One event, from the queue or from a caller's array. */
typedef struct Event
{
	text	   *key;
	int64		version;
	Numeric		value;
	bool		deleted;
	TimestampTz event_time;
	int			ord;			/* arrival order within the batch */
	Datum		dims[EXACTONCE_MAX_DIMENSIONS];	/* text */
} Event;

/* The effect of one state transition on one leaf cell. */
typedef struct Delta
{
	text	   *key;
	int64		version;
	Numeric		total;
	int64		keys;
	Datum		cell[EXACTONCE_MAX_DIMENSIONS];	/* text */
} Delta;

/* What the state stage did with a batch. */
typedef struct StageCounts
{
	int64		ingested;
	int64		applied;
	int64		duplicates;
	int64		stale;
	int64		dead_lettered;
} StageCounts;

/* An event the pipeline could not apply, and why. */
typedef struct DeadLetter
{
	Event	   *event;
	char	   *reason;
} DeadLetter;

/* A rollup cell's identity, encoded as level and length-prefixed values. */
typedef struct CellKey
{
	char	   *data;
	int			len;
} CellKey;

/* A rollup cell and the change accumulated for it. */
typedef struct Cell
{
	CellKey		key;			/* hash key, must be first */
	int			level;
	Datum		dims[EXACTONCE_MAX_DIMENSIONS];	/* first "level" are set */
	Numeric		total;
	int64		keys;
} Cell;

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

/* What a drain worker knows of one pipeline it serves (shmem.c). */
typedef struct PipelineStat
{
	int32		id;
	int			failures;		/* consecutive failed steps */
	TimestampTz retry_at;		/* backoff: no step before this */
	bool		waiting;		/* for a lock another session holds */
	int			nlatency;
	double		latency_ms[EXACTONCE_LATENCY_SAMPLES];	/* oldest event of a batch, insert to commit */
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
	int			index;			/* serves the shards of pipelines WorkerServes says */
	int			nworkers;
	Latch	   *latch;
	pg_atomic_uint64 wakes;		/* times WakeWorkers set the latch */
	WorkerState state;
	int32		pipeline_id;	/* being drained, if DRAINING */
	PipelineStat pipes[EXACTONCE_WORKER_PIPELINES];
} WorkerSlot;

/* stages that faults can be injected into, indexes of ExactonceShared->faults */
typedef enum FaultStage
{
	FAULT_STATE,
	FAULT_MAP,
	FAULT_REDUCE,
	FAULT_STAGES
} FaultStage;

typedef struct ExactonceShared
{
	LWLock	   *lock;
	pg_atomic_uint64 faults[FAULT_STAGES];	/* injected since server start */
	WorkerSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} ExactonceShared;

extern ExactonceShared *exactonce_shared;

/* shmem.c */
extern void ShmemInit(void);
extern void WakeWorkers(void);
extern void WakeWorkersAtCommit(void);

/* worker.c */
extern void WorkerInit(void);

/*
 * Where a shard stands in the queue: in the partition of "rotation", it has
 * taken the first "count" rows of its keys in TID order.  The TID and the
 * ingest_id of the last of them find the spot at once; count and digest
 * find it again, or refuse, after the partition was rewritten (queue.c).
 */
typedef struct QueuePosition
{
	int64		rotation;
	int64		tid;			/* block << 16 | offset; 0 before the first row */
	int64		row;			/* ingest_id of the row at tid */
	int64		count;			/* rows of the shard taken from the partition */
	int64		digest;			/* sum of RowDigest(ingest_id) over them (queue.c) */
	bool		digest_known;	/* false for a position carried over from 1.1 */
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

/* pipeline.c */
extern Pipeline *PipelineLoad(const char *name, bool for_owner);
extern Pipeline *PipelineLoadById(int32 id);
extern void PipelineActAsOwner(Pipeline *p);
extern void PipelineActAsCaller(Pipeline *p);
extern List *PipelineListIds(List **shards);
extern int	PipelineShards(int32 id);
extern void PipelineRequireReadCommitted(const char *what);

/* spi_util.c */
extern int	SpiPinSearchPath(void);
extern void SpiUnpinSearchPath(int nestlevel);
extern SPIPlanPtr SpiPlan(Pipeline *p, int which, const char *(*build) (Pipeline *p),
						  int nargs, Oid *argtypes);
extern void SpiExec(SPIPlanPtr plan, Datum *values, const char *nulls, int expected);
extern Datum TextArray(Datum *elems, bool *nulls, int n);
extern Datum Int8Array(int64 *elems, int n);
extern Datum NumericArray(Numeric *elems, int n);
extern void ProgressLock(Pipeline *p, int64 *rotation, int64 *drain_rotation,
						 bool *paused);
extern void ProgressRead(Pipeline *p, int64 *rotation, int64 *drain_rotation,
						 bool *paused);
extern void ProgressTryLock(Pipeline *p, int64 *rotation, int64 *drain_rotation,
							bool *paused);
extern void ProgressRecord(Pipeline *p, const StageCounts *c, int64 batches,
						   int64 drain_rotation);
extern void ProgressRotate(Pipeline *p);
extern bool ShardLock(Pipeline *p, int shard, QueuePosition *pos);
extern void ShardsRead(Pipeline *p, bool lock, QueuePosition *pos);
extern void ShardRecord(Pipeline *p, int shard, const QueuePosition *pos, int64 taken);
extern void PipelineLockAll(Pipeline *p, int64 *rotation, int64 *drain_rotation,
							bool *paused);
extern void DeadLettersInsert(Pipeline *p, DeadLetter *dl, int n);
extern SPIPlanPtr SpiKeepPlan(SPIPlanPtr *cache, const char *sql, int nargs, Oid *types);
extern Oid	ExtensionTableOwner(const char *relname);
extern Oid	RelationOwner(Oid relid);
extern void SpiExecAs(Oid role, SPIPlanPtr plan, Datum *values, const char *nulls,
					  bool read_only, int expected);
extern void AppendEventColumns(StringInfo sql, Pipeline *p);
extern void AppendEventUnnest(StringInfo sql, Pipeline *p, int extra);
extern void EventArrays(Pipeline *p, Event **events, int n, Datum *values, Oid *types);

/* plan slots for SpiPlan */
enum
{
	PLAN_PROGRESS_LOCK,
	PLAN_PROGRESS_TRYLOCK,
	PLAN_PROGRESS_ADD,
	PLAN_PROGRESS_ROTATE,
	PLAN_PROGRESS_READ,
	PLAN_SHARD_LOCK,
	PLAN_SHARD_READ,
	PLAN_SHARD_READ_LOCK,
	PLAN_SHARD_SET,
	PLAN_DEAD_LETTER,
	PLAN_QUEUE_INSERT,
	PLAN_LEDGER_STAGE,
	PLAN_LEDGER_PENDING,
	PLAN_LEDGER_PENDING_TOKENS,
	PLAN_LEDGER_APPLIED,
	PLAN_LEDGER_GC,
	PLAN_AGG_UPSERT,
	PLAN_AGG_DELETE,
	PLAN_COUNT
};

/* positions of the event columns in an attnum map (queue.c) */
#define EV_KEY		0
#define EV_VERSION	1
#define EV_VALUE	2
#define EV_DELETED	3
#define EV_TIME		4
#define EV_DIM0		5
#define EV_NATTS(p)	(EV_DIM0 + (p)->ndims)

/* queue.c */
extern void EventAttnums(Pipeline *p, TupleDesc desc, AttrNumber *attnums);
extern const char *EventFromSlot(Pipeline *p, TupleTableSlot *slot,
								 AttrNumber *attnums, Event *ev);
extern int	KeyShard(Pipeline *p, text *key);
extern void QueuePositionStart(QueuePosition *pos, int64 rotation);
extern int	QueueReadBatch(Pipeline *p, int shard, QueuePosition *pos, int max,
						   Event *events);
extern void QueueTruncateSlot(Pipeline *p, int slotno);
extern void QueueFreeze(Pipeline *p);
extern bool QueueSealed(Pipeline *p, int64 rotation, SealState **seal);
extern bool QueueHasRows(Pipeline *p, int slotno);
extern int64 QueueDepth(Pipeline *p, int64 rotation, int64 drain_rotation,
					   QueuePosition *shards, TimestampTz *oldest);

/* state.c */
extern Event *EventsFromArray(Pipeline *p, ArrayType *arr, int *nevents);
extern Delta *StateApply(Pipeline *p, Event *events, int n, int *ndeltas,
						 StageCounts *counts);

/* map.c */
extern HTAB *CellTableCreate(void);
extern void CellTableAdd(HTAB *cells, int level, Datum *dims, Numeric total, int64 keys);
extern int	CellArrays(Pipeline *p, HTAB *cells, Datum *levels, Datum *dimcols,
					   Datum *totals, Datum *keys);
extern bool MapStage(Pipeline *p, Delta *deltas, int n, const char *source,
					 int64 position, uint8 *token);

/* reduce.c */
extern int	ReduceApply(Pipeline *p, Datum tokens, bool have_tokens);
extern int64 LedgerCollect(Pipeline *p, const char *source, int64 position);

/* drain.c */
typedef struct DrainResult
{
	bool		worked;			/* took events, truncated or rotated */
	int64		taken;			/* events taken from the queue */
	TimestampTz oldest;			/* oldest event_time taken */
	bool		sealing;		/* waits for inserters to end: look again soon */
	bool		exhausted;		/* the partition had no more rows */
	bool		rotated;		/* sent inserts to the other partition */
} DrainResult;

extern int64 DrainPipeline(Pipeline *p);
extern DrainResult DrainStep(Pipeline *p, int shard, SealState **seal);

/*
 * WorkerServes tells whether drain worker index (of nworkers) drains shard
 * of pipeline id: the shards of a pipeline go to consecutive workers, so
 * with as many workers as shards each shard has a core of its own.
 */
static inline bool
WorkerServes(int32 id, int shard, int nworkers, int index)
{
	return (id + shard) % nworkers == index;
}

/* fault.c */
extern void FaultInit(void);
extern void FaultMaybeFail(FaultStage stage, double probability);
extern void FaultPoison(text *key);

/* once.c */
#define ERRCODE_EXACTONCE_TOKEN_MISMATCH	MAKE_SQLSTATE('E','O','0','0','2')	/* token reused with another payload */

#endif							/* EXACTONCE_H */
