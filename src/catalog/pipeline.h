/*-------------------------------------------------------------------------
 *
 * pipeline.h
 *		A pipeline as the stages see it, and acting on it as its owner.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_PIPELINE_H
#define EXACTONCE_PIPELINE_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "exactonce.h"

#define PIPELINE_MAX_SETS	256 /* grouping sets, and a cube's */

/* the grouping of the cells of a rollup's level */
#define CELL_LEVEL_MASK(level)	((uint32) ((UINT64CONST(1) << (level)) - 1))

typedef enum PipelineMode
{
	PIPELINE_LATEST,
	PIPELINE_ACCUMULATE
} PipelineMode;

/*
 * A pipeline as the stages need it: catalog row plus relation OIDs.  It is
 * loaded for one transaction; the lock fields record what this transaction
 * holds, for the assertions of the functions that rely on it.
 */
typedef struct Pipeline
{
	int32		id;
	char	   *name;			/* also the schema name */
	PipelineMode mode;
	int			ndims;
	char	   *dims[EXACTONCE_MAX_DIMENSIONS];
	int			nmeasures;		/* numeric measures besides value */
	char	   *measures[EXACTONCE_MAX_MEASURES];
	/* min and max kept per cell: of value (0) and of measure i (1 + i) */
	bool		min_max[1 + EXACTONCE_MAX_MEASURES];
	bool		any_min_max;
	int			ndistinct;		/* text columns whose distinct values each
								 * cell counts */
	char	   *distincts[EXACTONCE_MAX_DISTINCT];
	bool		rollup;			/* the cells are the levels of a rollup */
	int			nsets;			/* the cells' groupings: a bit per dimension */
	uint32		sets[PIPELINE_MAX_SETS];
	bool		windowed;		/* dims[0] is window_start, from event_time */
	bool		feed;			/* reduce appends its changes to table feed */
	bool		feed_notify;	/* ... and sends NOTIFY exactonce_feed */
	bool		has_horizon;	/* tombstones or seen rows were forgotten: */
	int64		horizon;		/* ... below this version (retention.c,
								 * prune()) */
	int64		window_us;		/* the windows' width */
	int64		lateness_us;	/* allowed lateness */
	Oid			owner;
	Oid			nspid;
	Oid			ingest;			/* partitioned parent */
	Oid			slots[EXACTONCE_SLOTS];
	Oid			state;
	Oid			state_pkey;
	Oid			state_cell;		/* latest mode with min_max: on the dimensions */
	Oid			distinct_values;	/* with distinct_counts: table distincts */
	Oid			seen;			/* accumulate mode only */
	Oid			seen_pkey;
	Oid			progress;
	Oid			shard;			/* drain position of each shard */
	int			nshards;
	Oid			caller;			/* while acting as owner: who called, */
	int			caller_sec;		/* and in what security context */
	bool		acting_as_owner;
	bool		progress_locked;	/* this transaction holds the progress row */
	uint64		shards_locked;	/* ... and these shard rows (bit per shard) */
} Pipeline;

extern Pipeline *PipelineLoad(const char *name, bool for_owner);
extern Pipeline *PipelineLoadById(int32 id, uint32 tables);
extern Pipeline *PipelineLoadDefinition(const char *name);
extern void PipelineActAsOwner(Pipeline *p);
extern void PipelineActAsCaller(Pipeline *p);
extern List *PipelineListIds(List **shards);
extern int	PipelineShards(int32 id);
extern void PipelineRequireReadCommitted(const char *what);
extern Oid	PipelineRelationOwner(Oid relid);
extern const char *PipelineExtremumName(Pipeline *p, int slot);
extern TimestampTz PipelineWindowStartTime(Pipeline *p, TimestampTz t);
extern Datum PipelineWindowStart(Pipeline *p, TimestampTz t);
extern void PipelineSetFeed(Pipeline *p, bool feed, bool notify);
extern void PipelineSetHorizon(Pipeline *p, int64 horizon);

/* the first dimension an event brings: a window's start is computed */
#define PIPELINE_FIRST_INPUT_DIM(p)	((p)->windowed ? 1 : 0)
#define PIPELINE_WINDOW_DIM	"window_start"

#endif							/* EXACTONCE_PIPELINE_H */
