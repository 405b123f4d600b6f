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

extern Pipeline *PipelineLoad(const char *name, bool for_owner);
extern Pipeline *PipelineLoadTables(const char *name, bool for_owner, uint32 tables);
extern Pipeline *PipelineLoadById(int32 id, uint32 tables);
extern Pipeline *PipelineLoadDefinition(const char *name);
extern Oid	PipelineShardOpclass(bool missing_ok);
extern void PipelineActAsOwner(Pipeline *p);
extern void PipelineActAsCaller(Pipeline *p);
extern List *PipelineListIds(List **shards);
extern bool PipelineIsCurrent(Pipeline *p);
extern void PipelineRequireReadCommitted(const char *what);
extern TimestampTz PipelineWindowStartTime(Pipeline *p, TimestampTz t);
extern Datum PipelineWindowStart(Pipeline *p, TimestampTz t);
extern void PipelineSetFeed(Pipeline *p, bool feed, bool notify);
extern void PipelineSetHorizon(Pipeline *p, int64 horizon);
extern void PipelineParseGrouping(Pipeline *p, const char *grouping);
extern int64 PipelineIntervalMicros(const char *what, Interval *iv);
extern void PipelineRegistryExec(const char *sql, int nargs, Oid *types,
								 Datum *values, int expected);
extern void PipelineRegistryExecNulls(const char *sql, int nargs, Oid *types,
									  Datum *values, const char *nulls,
									  int expected);

#endif							/* EXACTONCE_PIPELINE_H */
