/*-------------------------------------------------------------------------
 *
 * statement.h
 *		Kept statements, their parameters, and the pinned search_path.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_STATEMENT_H
#define EXACTONCE_STATEMENT_H

#include "executor/spi.h"
#include "nodes/parsenodes.h"

#include "exactonce.h"

/* Builds the SQL of a statement on one pipeline's tables. */
typedef const char *(*StatementBuilder) (Pipeline *p);

/* ... and of one level of its rollup. */
typedef const char *(*StatementLevelBuilder) (Pipeline *p, int level);

extern int	StatementPinSearchPath(void);
extern void StatementUnpinSearchPath(int nestlevel);
extern SPIPlanPtr StatementPrepare(Pipeline *p, StatementBuilder build,
								   int nargs, Oid *argtypes);
extern SPIPlanPtr StatementPrepareLevel(Pipeline *p, StatementLevelBuilder build,
										int level, int nargs, Oid *argtypes);
extern SPIPlanPtr StatementPrepareFixed(const char *sql, int nargs,
										const Oid *argtypes);
extern void StatementExec(SPIPlanPtr plan, Datum *values, const char *nulls,
						  int expected);
extern void StatementExecAs(Oid role, SPIPlanPtr plan, Datum *values,
							const char *nulls, bool read_only, int expected);
extern void StatementReadLatestAs(Oid role, SPIPlanPtr plan, Datum *values,
								  const char *nulls, int expected);
extern uint64 StatementWriteAll(const char *with, const char *dml,
								const char *meant);
extern void StatementRowRefused(const char *schema, const char *table,
								const char *detail) pg_attribute_noreturn();
extern Oid	StatementTableOwner(const char *relname);
extern Oid	StatementRelationOwner(Oid relid);
extern Datum StatementTextArray(Datum *elems, bool *nulls, int n);
extern Datum StatementInt8Array(int64 *elems, int n);
extern Datum StatementNumericArray(Numeric *elems, int n);
extern SelectStmt *StatementParsePiece(const char *prefix, const char *piece, const char *what);

#endif							/* EXACTONCE_STATEMENT_H */
