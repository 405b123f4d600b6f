/*-------------------------------------------------------------------------
 *
 * utility.h
 *		Refusing ALTER TABLE of the columns exactonce reads and writes; the
 *		COPYs that higher layers run themselves.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_UTILITY_H
#define EXACTONCE_UTILITY_H

#include "nodes/parsenodes.h"
#include "parser/parse_node.h"
#include "utils/relcache.h"

/*
 * A COPY a higher layer runs itself: it returns the rows it took, or -1,
 * having read nothing, for the next handler or PostgreSQL's COPY to run it
 * (distributed/route.c, engine/queuecopy.c).
 */
typedef int64 (*UtilityCopyHandler) (CopyStmt *stmt, const char *query);

extern void UtilityInit(void);
extern void UtilityExecOwn(const char *sql);
extern void UtilityAddCopyHandler(UtilityCopyHandler handler);
extern Relation UtilityCopyTarget(CopyStmt *stmt);
extern ParseState *UtilityCopyParseState(Relation rel, List *attnums, const char *query);

#endif							/* EXACTONCE_UTILITY_H */
