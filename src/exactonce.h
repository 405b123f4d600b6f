/*-------------------------------------------------------------------------
 *
 * exactonce.h
 *		The bottom of the layers: limits, SQLSTATEs, small value helpers,
 *		and struct Pipeline, a pipeline as every layer sees it.  It includes
 *		no other header of the extension.  src/README.md tells the layers
 *		and the path data takes through them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_H
#define EXACTONCE_H

#include "fmgr.h"
#include "datatype/timestamp.h"
#include "utils/fmgrprotos.h"
#include "utils/numeric.h"

#define EXACTONCE_MAX_DIMENSIONS	16
#define EXACTONCE_MAX_MEASURES		16	/* numeric measures besides value */
#define EXACTONCE_MAX_DISTINCT		8	/* columns counted distinct per cell */
#define EXACTONCE_PARTITIONS		2	/* of the queue: ingest_0 and ingest_1 */
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
/* a row of a pipeline's table is not one exactonce wrote: changed by hand */
#define ERRCODE_EXACTONCE_ROW_CHANGED	MAKE_SQLSTATE('E','O','0','0','6')

#define PIPELINE_MAX_SETS	256 /* grouping sets, and a cube's */

/* the grouping of the cells of level of a rollup: its first level dimensions */
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
	Oid			partitions[EXACTONCE_PARTITIONS];	/* ingest_0, ingest_1 */
	bool		queue_by_shard; /* the partitions are hash-partitioned by
								 * shard into the leaves below (1.19); else a
								 * leaf is its partition, every shard's */
	Oid			leaves[EXACTONCE_PARTITIONS][EXACTONCE_MAX_SHARDS]; /* ingest_<slot>_<shard> */
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

/* the first dimension an event brings: a window's start is computed */
#define PIPELINE_FIRST_INPUT_DIM(p)	((p)->windowed ? 1 : 0)
#define PIPELINE_WINDOW_DIM	"window_start"
/* aggregates keeps each leaf's reserve of extremes (extrema.c) */
#define PIPELINE_RESERVES(p)	((p)->any_min_max && (p)->mode == PIPELINE_LATEST)
#define PIPELINE_RESERVE_COLUMN	"extrema_reserve"

/*
 * PipelineExtremumName names a min_max column: value (0), or measure i (1 + i).
 */
static inline const char *
PipelineExtremumName(Pipeline *p, int column)
{
	return column == 0 ? "value" : p->measures[column - 1];
}

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
