/*-------------------------------------------------------------------------
 *
 * shape.h
 *		The columns of a pipeline's tables are what exactonce made.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_SHAPE_H
#define EXACTONCE_SHAPE_H

#include "utils/acl.h"
#include "utils/relcache.h"

#include "exactonce.h"

/* the tables a path touches, for ShapeCheck */
#define SHAPE_PROGRESS	0x01
#define SHAPE_SHARD		0x02
#define SHAPE_INGEST	0x04
#define SHAPE_LEDGER	0x08
#define SHAPE_FEED		0x10
#define SHAPE_DATA		0x20	/* state, seen, aggregates, dead_letters,
								 * distincts */
#define SHAPE_MONITOR	(SHAPE_PROGRESS | SHAPE_SHARD | SHAPE_INGEST | SHAPE_LEDGER)
#define SHAPE_ALL		0x3f

extern bool ShapeCheck(Pipeline *p, uint32 tables);
extern bool ShapeIsTable(Pipeline *p, Oid relid);
extern void ShapeCheckLogged(Oid relid, const char *pipeline);
extern void ShapeLockForDrop(Oid nspid);
extern Oid	ShapeColumnType(Pipeline *p, const char *table, const char *column,
							bool *notnull);
extern void ShapeCheckColumn(Oid relid, const char *pipeline, const char *table,
							 const char *column, Oid type, bool notnull);
extern bool ShapeIsSlotCheck(Pipeline *p, Oid relid, const char *ccbin);
extern void ShapeRefuseTriggers(Relation rel);
extern Relation ShapeOpenDirect(Oid relid, AclMode modes, int ncolumns, int nindexes);
extern bool ShapeIndexIs(Relation index, Oid relid, const AttrNumber *attnums, int n, bool unique);

#endif							/* EXACTONCE_SHAPE_H */
