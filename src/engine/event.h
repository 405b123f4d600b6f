/*-------------------------------------------------------------------------
 *
 * event.h
 *		Events and what the stages make of them: deltas, counts, dead
 *		letters; events read from rows and arrays, and passed to statements.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_EVENT_H
#define EXACTONCE_EVENT_H

#include "executor/tuptable.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/timestamp.h"

#include "exactonce.h"

/* One event, from the queue or from a caller's array. */
typedef struct Event
{
	text	   *key;
	int64		version;
	Numeric		value;
	bool		deleted;
	TimestampTz event_time;
	int			ord;			/* arrival order within the batch */
	Datum	   *dims;			/* text, one per dimension */
	Numeric    *measures;		/* one per measure, NULL where none */
	Datum	   *distincts;		/* text, one per distinct_counts column, 0
								 * where none */
} Event;

/* The effect of one state transition on one leaf cell. */
typedef struct Delta
{
	text	   *key;
	int64		version;
	Numeric		total;
	int64		keys;
	Datum	   *cell;			/* text, one per dimension; shared with the
								 * event or state row it comes from, never
								 * changed */
	Numeric    *measures;		/* change of each measure's sum, NULL where
								 * the version has none; its count changes by
								 * "keys" where it is not NULL */
	Datum	   *distincts;		/* text entering (keys 1) or leaving (keys -1)
								 * the cell, one per distinct_counts column, 0
								 * where none */
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

/* positions of the event columns in an attnum map (EventAttnums) */
#define EV_KEY		0
#define EV_VERSION	1
#define EV_VALUE	2
#define EV_DELETED	3
#define EV_TIME		4
#define EV_DIM0		5
#define EV_MEAS0(p)	(EV_DIM0 + (p)->ndims)
#define EV_DIST0(p)	(EV_MEAS0(p) + (p)->nmeasures)
#define EV_NATTS(p)	(EV_DIST0(p) + (p)->ndistinct)
/* the parameters EventArrays fills: a window's start is not among them */
#define EV_NPARAMS(p)	(EV_NATTS(p) - PIPELINE_FIRST_INPUT_DIM(p))
#define EV_MAX_NATTS	(EV_DIM0 + EXACTONCE_MAX_DIMENSIONS + EXACTONCE_MAX_MEASURES + \
						 EXACTONCE_MAX_DISTINCT)
/* after the event's columns, the optional EV_WHERE_COLUMN */
#define EV_WHERE(p)		EV_NATTS(p)
#define EV_ATTNUMS		(EV_MAX_NATTS + 1)

/*
 * The boolean column of the queue of a pipeline declared with WHERE
 * (commands/query.c): generated from the WHERE clause as each row is
 * inserted.  An event whose WHERE is not true counts as a tombstone of its
 * key: the latest version of the key is out of the query.
 */
#define EV_WHERE_COLUMN	"exactonce_where"

extern void EventAttnums(Pipeline *p, TupleDesc desc, AttrNumber *attnums);
extern const char *EventFromSlot(Pipeline *p, TupleTableSlot *slot,
								 AttrNumber *attnums, Event *ev);
extern Event *EventsFromArray(Pipeline *p, ArrayType *arr, int *nevents);
extern void EventAppendColumns(StringInfo sql, Pipeline *p);
extern void EventAppendUnnest(StringInfo sql, Pipeline *p, int extra);
extern void EventArrays(Pipeline *p, Event **events, int n, Datum *values,
						Oid *types);
extern void EventDeadLetters(Pipeline *p, DeadLetter *dl, int n);
extern void EventCheckComputed(Pipeline *p, bool into_queue, const char *what);

#endif							/* EXACTONCE_EVENT_H */
