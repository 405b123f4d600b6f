/*-------------------------------------------------------------------------
 *
 * statement.c
 *		Kept statements: prepared once per backend, run many times, always
 *		with a pinned search_path; and the array parameters they take.
 *
 * Every statement the extension runs through SPI is prepared once per
 * backend and kept (SPI_keepplan), in one table keyed by what the statement
 * is for:
 *	 - a statement on one pipeline's tables by the pipeline (its schema's
 *	   OID and its id, so a pipeline recreated under the same name gets plans
 *	   of its own) and the function that builds its SQL (StatementPrepare);
 *	 - a statement on the extension's own tables by its SQL text, a static
 *	   string (StatementPrepareFixed).
 * Kept plans of a pipeline whose schema is gone are freed at the next
 * lookup after a schema invalidation.
 *
 * Values travel as parameters, mostly as arrays that one statement unnests,
 * so a batch costs a few statements, not one per event.  Statements run with
 * search_path pinned to pg_catalog, pg_temp and spell their operators
 * OPERATOR(pg_catalog.x) or are schema-qualified, so that objects planted
 * elsewhere cannot change what they resolve to.
 *
 * A caller's own SQL in a statement (a view's keys and filter, a filter of
 * dead letters) is checked first to be one expression (StatementParsePiece).
 *
 * A statement on a pipeline's tables, which its owner may change and plant
 * triggers on, counts the rows it touched: StatementExec against the
 * number its caller expects, StatementWriteAll (a whole set of rows known
 * only as it runs, such as rebuild()'s) against a query of what it meant
 * to write.  A difference is refused as rows changed by hand (EO006).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "parser/parser.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "catalog/statement.h"

/* What a kept statement is for: see the file header. */
typedef struct StatementKey
{
	Oid			nspid;			/* InvalidOid for the extension's own */
	int32		pipeline_id;
	const void *id;				/* the StatementBuilder, or the SQL text */
	int32		level;			/* for a StatementLevelBuilder */
	uint32		cells;			/* the pipeline's cells (StatementCellsHash) */
} StatementKey;

typedef struct StatementEntry
{
	StatementKey key;			/* hash key */
	SPIPlanPtr	plan;
} StatementEntry;

static HTAB *statements = NULL;
static bool statements_sweep = false;	/* a schema was dropped or changed */

/*
 * StatementsInvalidate is the syscache callback on schemas: dropping a
 * pipeline drops its schema, whose kept plans StatementsSweep then frees.
 */
static void
StatementsInvalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	statements_sweep = true;
}

/*
 * StatementsSweep frees the kept plans of pipelines whose schema is gone.
 */
static void
StatementsSweep(void)
{
	HASH_SEQ_STATUS seq;
	StatementEntry *entry;

	statements_sweep = false;
	hash_seq_init(&seq, statements);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		if (!OidIsValid(entry->key.nspid) ||
			SearchSysCacheExists1(NAMESPACEOID, ObjectIdGetDatum(entry->key.nspid)))
			continue;
		SPI_freeplan(entry->plan);
		(void) hash_search(statements, &entry->key, HASH_REMOVE, NULL);
	}
}

/*
 * StatementKept returns the kept plan of key, preparing sql, or the SQL that
 * build(p) returns, the first time.
 */
static SPIPlanPtr
StatementKept(StatementKey *key, const char *sql, Pipeline *p,
			  StatementBuilder build, StatementLevelBuilder build_level,
			  int nargs, const Oid *argtypes)
{
	StatementEntry *entry;
	SPIPlanPtr	plan;
	bool		found;

	if (statements == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(StatementKey);
		ctl.entrysize = sizeof(StatementEntry);
		ctl.hcxt = CacheMemoryContext;
		statements = hash_create("exactonce statements", 64, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		CacheRegisterSyscacheCallback(NAMESPACEOID, StatementsInvalidate, (Datum) 0);
	}
	if (statements_sweep)
		StatementsSweep();
	entry = hash_search(statements, key, HASH_FIND, NULL);
	if (entry != NULL)
		return entry->plan;

	if (sql == NULL)
		sql = build ? build(p) : build_level(p, key->level);
	plan = SPI_prepare(sql, nargs, (Oid *) argtypes);
	if (plan == NULL)
		elog(ERROR, "could not prepare \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	/* entered only once prepared: a failed prepare leaves no entry */
	entry = hash_search(statements, key, HASH_ENTER, &found);
	Assert(!found);
	entry->plan = plan;
	return entry->plan;
}

/*
 * StatementCellsHash hashes what a pipeline's cells are made of, which
 * alter_pipeline_as() changes: statements built for other cells are other
 * statements.
 */
static uint32
StatementCellsHash(Pipeline *p)
{
	uint32		h = hash_bytes((const unsigned char *) p->sets, sizeof(uint32) * p->nsets);

	h = hash_combine(h, hash_bytes((const unsigned char *) p->min_max, sizeof(p->min_max)));
	return hash_combine(h, (uint32) p->rollup);
}

/*
 * StatementPrepare returns the kept plan of the statement that build makes
 * for pipeline p.
 */
SPIPlanPtr
StatementPrepare(Pipeline *p, StatementBuilder build, int nargs, Oid *argtypes)
{
	StatementKey key;

	/* a pipeline's tables are only ever touched as its owner */
	Assert(p != NULL && OidIsValid(p->nspid) && p->acting_as_owner);
	memset(&key, 0, sizeof(key));
	key.nspid = p->nspid;
	key.pipeline_id = p->id;
	key.id = (const void *) build;
	key.cells = StatementCellsHash(p);
	return StatementKept(&key, NULL, p, build, NULL, nargs, argtypes);
}

/*
 * StatementPrepareLevel returns the kept plan of the statement that build
 * makes for pipeline p and one level of its rollup.
 */
SPIPlanPtr
StatementPrepareLevel(Pipeline *p, StatementLevelBuilder build, int level, int nargs,
					  Oid *argtypes)
{
	StatementKey key;

	Assert(p != NULL && OidIsValid(p->nspid) && p->acting_as_owner);
	memset(&key, 0, sizeof(key));
	key.nspid = p->nspid;
	key.pipeline_id = p->id;
	key.id = (const void *) build;
	key.level = level;
	key.cells = StatementCellsHash(p);
	return StatementKept(&key, NULL, p, NULL, build, nargs, argtypes);
}

/*
 * StatementPrepareFixed returns the kept plan of sql, a statement on the
 * extension's own tables.  sql must be a string that lives as long as the
 * backend (a literal): its address names the statement.
 */
SPIPlanPtr
StatementPrepareFixed(const char *sql, int nargs, const Oid *argtypes)
{
	StatementKey key;

	memset(&key, 0, sizeof(key));
	key.id = (const void *) sql;
	return StatementKept(&key, sql, NULL, NULL, NULL, nargs, argtypes);
}

/* what to do about rows of a pipeline's tables changed by hand */
static const char *const hand_changed_hint =
"A pipeline's tables hold what exactonce wrote: put back what was changed by hand "
"(a row deleted, added or updated, a trigger or rule that skips rows), "
"or drop the pipeline with exactonce.drop_pipeline(name, force => true), which reads none of its rows "
"and discards what is queued, and create it again.";

/*
 * StatementRowRefused reports that table schema.table of a pipeline holds
 * other rows than exactonce wrote (detail says how), with SQLSTATE EO006.  A
 * pipeline's tables belong to its owner, who may delete, add or change
 * rows exactonce counts on: whatever reads them checks, and refuses here.
 */
void
StatementRowRefused(const char *schema, const char *table, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_ROW_CHANGED),
			 errmsg("table %s.%s does not hold what exactonce wrote",
					quote_identifier(schema), quote_identifier(table)),
			 errdetail_internal("%s", detail),
			 errhint("%s", hand_changed_hint)));
}

/*
 * RowCountRefused reports that a statement on a pipeline's table touched
 * other than the rows it touches (sql, for the detail), with EO006.
 */
static void
RowCountRefused(uint64 touched, int64 meant, const char *sql)
{
	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_ROW_CHANGED),
			 errmsg("a statement of exactonce touched " UINT64_FORMAT " rows where it touches " INT64_FORMAT,
					touched, meant),
			 errdetail_internal("%s", sql),
			 errhint("%s", hand_changed_hint)));
}

/*
 * StatementCheck fails unless a statement of plan succeeded (rc) and touched
 * "expected" rows (-1: any number).  On a pipeline's tables, the owner's,
 * one that did not found rows changed by hand (the progress row deleted, a
 * shard row added), or none where a trigger skipped them: that is refused
 * as such.  The extension's own tables no owner writes: there it is a bug.
 */
static void
StatementCheck(SPIPlanPtr plan, int rc, int expected, bool pipeline_table)
{
	List	   *sources;
	const char *sql;

	if (rc < 0)
		elog(ERROR, "exactonce statement failed: %s", SPI_result_code_string(rc));
	if (expected < 0 || SPI_processed == (uint64) expected)
		return;
	sources = SPI_plan_get_plan_sources(plan);
	sql = sources != NIL ? ((CachedPlanSource *) linitial(sources))->query_string : "?";
	if (!pipeline_table)
		elog(ERROR, "exactonce statement touched " UINT64_FORMAT " rows, expected %d: %s",
			 SPI_processed, expected, sql);
	RowCountRefused(SPI_processed, expected, sql);
}

/*
 * StatementWriteAll runs a statement that writes a whole set of rows of a
 * pipeline's table, as many as it finds (rebuild()'s), and returns how
 * many it wrote: "dml" with RETURNING, after the WITH items of "with"
 * (NULL for none), its rows counted against query "meant", which reads
 * the rows as they were before it.  Rows that a trigger skipped are
 * refused as changed by hand (EO006): a DELETE or UPDATE that leaves some,
 * an INSERT that loses some, would leave the aggregates short or a batch
 * staged to be applied again.
 */
uint64
StatementWriteAll(const char *with, const char *dml, const char *meant)
{
	char	   *sql = psprintf("WITH %s%sw AS (%s RETURNING 1) SELECT (SELECT pg_catalog.count(*) FROM w), ((%s))::pg_catalog.int8",
							   with ? with : "", with ? ", " : "", dml, meant);
	bool		isnull[2];
	int64		wrote,
				rows;

	if (SPI_execute(sql, false, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "exactonce statement failed: %s", sql);
	wrote = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull[0]));
	rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull[1]));
	if (isnull[0] || isnull[1])
		elog(ERROR, "exactonce statement counted no rows: %s", sql);
	if (wrote != rows)
		RowCountRefused(wrote, rows, dml);
	return (uint64) wrote;
}

/*
 * StatementPinSearchPath sets search_path to pg_catalog, pg_temp until
 * StatementUnpinSearchPath is called with the returned nest level.
 */
int
StatementPinSearchPath(void)
{
	int			nestlevel = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nestlevel;
}

/*
 * StatementUnpinSearchPath restores the search_path that StatementPinSearchPath saved.
 */
void
StatementUnpinSearchPath(int nestlevel)
{
	AtEOXact_GUC(true, nestlevel);
}

/*
 * StatementExec runs a kept plan of a statement on a pipeline's tables, as
 * its owner (PipelineActAsOwner), and checks that it touched "expected"
 * rows (-1: any number).
 */
void
StatementExec(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc = SPI_execute_plan(plan, values, nulls, false, 0);

	/*
	 * SPI returns in its procedure context, which lives as long as the SPI
	 * connection: go back to the caller's, which a flush resets per batch.
	 */
	MemoryContextSwitchTo(cxt);
	StatementCheck(plan, rc, expected, true);
}

/*
 * StatementTableOwner returns the owner of table exactonce.<relname>, the
 * role the extension's own statements run as.
 */
Oid
StatementTableOwner(const char *relname)
{
	Oid			relid = get_relname_relid(relname, get_namespace_oid("exactonce", false));

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"exactonce.%s\" does not exist", relname),
				 errdetail("The installed extension script predates the shared library."),
				 errhint("Recreate the extension: DROP EXTENSION exactonce; CREATE EXTENSION exactonce.")));
	return StatementRelationOwner(relid);
}

/*
 * ExecAs runs a kept plan as role, in a security-restricted context, under
 * snapshot (InvalidSnapshot: SPI's choice), and checks that it touched
 * "expected" rows (-1: any number).
 */
static void
ExecAs(Oid role, SPIPlanPtr plan, Datum *values, const char *nulls, Snapshot snapshot,
	   bool read_only, int expected)
{
	Oid			save_userid;
	int			save_sec;
	int			rc;

	MemoryContext cxt = CurrentMemoryContext;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(role, save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	rc = SPI_execute_snapshot(plan, values, nulls, snapshot, InvalidSnapshot, read_only, true, 0);
	SetUserIdAndSecContext(save_userid, save_sec);
	MemoryContextSwitchTo(cxt); /* as in StatementExec */
	StatementCheck(plan, rc, expected, false);
}

/*
 * StatementExecAs runs a kept plan as role, in a security-restricted context, and
 * checks that it touched "expected" rows (-1: any number).  The caller has
 * pinned the search_path and checked that its own role may do this.
 */
void
StatementExecAs(Oid role, SPIPlanPtr plan, Datum *values, const char *nulls,
				bool read_only, int expected)
{
	ExecAs(role, plan, values, nulls, InvalidSnapshot, read_only, expected);
}

/*
 * StatementReadLatestAs runs a kept query as StatementExecAs does, under the
 * latest snapshot instead of the transaction's: it sees what has committed
 * by now whatever the caller's isolation level (a producer through
 * postgres_fdw runs in REPEATABLE READ).
 */
void
StatementReadLatestAs(Oid role, SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	ExecAs(role, plan, values, nulls, GetLatestSnapshot(), true, expected);
}

/*
 * StatementTextArray builds a text[] of n elements, some of them NULL if nulls is set.
 */
Datum
StatementTextArray(Datum *elems, bool *nulls, int n)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};

	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs,
											  TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * StatementInt8Array builds a bigint[].
 */
Datum
StatementInt8Array(int64 *elems, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(elems[i]);
	return PointerGetDatum(construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * StatementNumericArray builds a numeric[]; a NULL pointer is a NULL element.
 */
Datum
StatementNumericArray(Numeric *elems, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *nulls = palloc(sizeof(bool) * Max(n, 1));
	int			lb = 1;

	for (int i = 0; i < n; i++)
	{
		nulls[i] = elems[i] == NULL;
		d[i] = nulls[i] ? (Datum) 0 : NumericGetDatum(elems[i]);
	}
	if (n == 0)
		return PointerGetDatum(construct_empty_array(NUMERICOID));
	return PointerGetDatum(construct_md_array(d, nulls, 1, &n, &lb, NUMERICOID, -1, false,
											  TYPALIGN_INT));
}

/*
 * PieceErrorContext names the piece of the caller's SQL a parse error is in;
 * the position the parser reports is within the piece, not the statement.
 */
static void
PieceErrorContext(void *arg)
{
	errposition(0);
	errcontext("%s", (const char *) arg);
}

/*
 * StatementParsePiece parses a caller's SQL expression, piece, as prefix
 * followed by it ("SELECT ", "SELECT 1 WHERE "), and returns the SELECT,
 * which must be that and nothing else: one expression cannot reach beyond
 * its place in a statement built around it.  what names it in errors.
 */
SelectStmt *
StatementParsePiece(const char *prefix, const char *piece, const char *what)
{
	ErrorContextCallback context;
	List	   *raw;
	SelectStmt *sel = NULL;
	bool		ok;

	context.callback = PieceErrorContext;
	context.arg = psprintf("%s \"%s\"", what, piece);
	context.previous = error_context_stack;
	error_context_stack = &context;
	raw = raw_parser(psprintf("%s%s", prefix, piece), RAW_PARSE_DEFAULT);
	error_context_stack = context.previous;

	ok = list_length(raw) == 1 && IsA(linitial_node(RawStmt, raw)->stmt, SelectStmt);
	if (ok)
	{
		sel = (SelectStmt *) linitial_node(RawStmt, raw)->stmt;
		ok = sel->op == SETOP_NONE && list_length(sel->targetList) == 1 &&
			sel->distinctClause == NIL && sel->intoClause == NULL &&
			sel->fromClause == NIL && sel->groupClause == NIL &&
			sel->havingClause == NULL && sel->windowClause == NIL &&
			sel->valuesLists == NIL && sel->sortClause == NIL &&
			sel->limitOffset == NULL && sel->limitCount == NULL &&
			sel->lockingClause == NIL && sel->withClause == NULL;
	}
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("%s \"%s\" is not one expression", what, piece),
				 errhint("Write one SQL expression, with no statement or clause around it.")));
	return sel;
}

/*
 * StatementRelationOwner returns the owner of a relation, InvalidOid if it is
 * gone.
 */
Oid
StatementRelationOwner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		return InvalidOid;
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}
