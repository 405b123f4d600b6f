/*-------------------------------------------------------------------------
 *
 * utility.c
 *		Refusing ALTER TABLE of the columns exactonce reads and writes; the
 *		COPYs that higher layers run themselves.
 *
 * shape.c makes every path to a pipeline's tables refuse a column whose
 * type its owner changed; that holds whether or not the library is
 * preloaded.  Preloaded, the library also refuses the change itself, as
 * TimescaleDB guards its chunks: ALTER TABLE ... ALTER COLUMN ... TYPE to
 * another type than exactonce made, DROP COLUMN or DROP NOT NULL, on a
 * column of a pipeline's table that the C code touches, is an error
 * (EO005) before anything is altered, as are dropping the queue's check
 * ingest_slot_open and detaching a partition of the queue.  Changing a column back to its own type is allowed,
 * so that a pipeline altered without the preload can be repaired with it.
 * Columns of the owner's own, and every other ALTER TABLE, go through.
 * The extension's own scripts are not checked, nor the DDL exactonce runs
 * itself (UtilityExecOwn: create_pipeline_as() makes generated columns of
 * plain ones); a superuser may set exactonce.guard_columns off for a
 * session.
 *
 * The hook also hands each COPY to the handlers of higher layers that run
 * some themselves (a coordinator's routing, the queue's own loop), which
 * open its table and check its rights here, as COPY does, before they read
 * a row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parse_relation.h"
#include "parser/parse_type.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"

#include "catalog/pipeline.h"
#include "catalog/shape.h"
#include "catalog/statement.h"
#include "catalog/utility.h"

static ProcessUtility_hook_type prev_process_utility = NULL;
static UtilityCopyHandler copy_handlers[2];
static int	ncopy_handlers = 0;
static bool exactonce_guard_columns = true;
static bool utility_own = false;	/* exactonce's own DDL is running */

/*
 * UtilityRefuse reports an ALTER TABLE of a column exactonce touches.
 */
static void
UtilityRefuse(Pipeline *p, const char *table, const char *column, Oid type, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_ALTERED),
			 errmsg("cannot %s column \"%s\" of table \"%s.%s\"", what, column, p->name, table),
			 errdetail("exactonce reads and writes this column of pipeline \"%s\" as %s.",
					   p->name, format_type_be(type)),
			 errhint("Leave the columns exactonce made as they are; add columns of your own beside them.")));
}

/* what an ALTER COLUMN ... TYPE gives a column */
typedef struct NewColumnType
{
	Oid			type;
	int32		typmod;
	Oid			collation;		/* InvalidOid: none named */
} NewColumnType;

/*
 * UtilityIsSlotCheck says whether constraint conname of table relid is the
 * queue's check ingest_slot_open (shape.c), whatever its name now.
 */
static bool
UtilityIsSlotCheck(Pipeline *p, Oid relid, const char *conname)
{
	Relation	rel;
	TupleConstr *constr;
	bool		is = false;

	if (relid != get_relname_relid("ingest", get_namespace_oid(p->name, true)))
		return false;
	rel = table_open(relid, AccessShareLock);
	constr = RelationGetDescr(rel)->constr;
	for (int i = 0; constr != NULL && i < constr->num_check; i++)
		if (strcmp(constr->check[i].ccname, conname) == 0)
			is = ShapeIsSlotCheck(p, relid, constr->check[i].ccbin);
	table_close(rel, AccessShareLock);
	return is;
}

/*
 * UtilityCheckAlterTable refuses an ALTER TABLE that changes the type of a
 * column exactonce touches (its type modifier included), gives it a
 * collation that is not deterministic, drops it or its NOT NULL, or that
 * makes a table of a pipeline unlogged, drops the queue's check
 * ingest_slot_open or detaches a partition of the queue.
 */
static void
UtilityCheckAlterTable(AlterTableStmt *stmt)
{
	ListCell   *lc;
	NewColumnType *newtypes;
	bool		touches = false;
	Oid			relid;
	const char *table;
	Pipeline   *p;
	int			nestlevel;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

		touches |= cmd->subtype == AT_AlterColumnType || cmd->subtype == AT_DropColumn ||
			cmd->subtype == AT_SetUnLogged || cmd->subtype == AT_DropNotNull ||
			cmd->subtype == AT_DropConstraint || cmd->subtype == AT_DetachPartition ||
			cmd->subtype == AT_DetachPartitionFinalize;
	}
	if (!touches || stmt->objtype != OBJECT_TABLE ||
		!OidIsValid(get_extension_oid("exactonce", true)))
		return;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid))
		return;

	/* the new types as the statement names them, in the caller's search_path */
	newtypes = palloc0(sizeof(NewColumnType) * list_length(stmt->cmds));
	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);
		NewColumnType *n = &newtypes[foreach_current_index(lc)];

		if (cmd->subtype == AT_AlterColumnType)
		{
			ColumnDef  *def = castNode(ColumnDef, cmd->def);

			typenameTypeIdAndMod(NULL, def->typeName, &n->type, &n->typmod);
			if (def->collClause != NULL)
				n->collation = LookupCollation(NULL, def->collClause->collname, def->collClause->location);
		}
	}

	table = get_rel_name(relid);
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoadDefinition(get_namespace_name(get_rel_namespace(relid)));
	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);
		NewColumnType *n = &newtypes[foreach_current_index(lc)];
		Oid			type = InvalidOid;
		bool		notnull = false;

		if (cmd->subtype == AT_SetUnLogged && p != NULL && ShapeIsTable(p, relid))
			ereport(ERROR,
					(errcode(ERRCODE_EXACTONCE_ALTERED),
					 errmsg("cannot make table \"%s.%s\" unlogged", p->name, table),
					 errdetail("A crash empties an unlogged table and none of pipeline \"%s\"'s others: what it held would be lost or counted again.",
							   p->name),
					 errhint("Leave the tables exactonce made logged.")));
		if ((cmd->subtype == AT_DetachPartition || cmd->subtype == AT_DetachPartitionFinalize) &&
			p != NULL && ShapeIsTable(p, relid))
			ereport(ERROR,
					(errcode(ERRCODE_EXACTONCE_ALTERED),
					 errmsg("cannot detach a partition of table \"%s.%s\"", p->name, table),
					 errdetail("The partitions of pipeline \"%s\"'s queue are where its shards read their events.",
							   p->name),
					 errhint("Change the shards with exactonce.set_shards(), or drop the pipeline.")));
		if (cmd->subtype == AT_DropConstraint && p != NULL && UtilityIsSlotCheck(p, relid, cmd->name))
			ereport(ERROR,
					(errcode(ERRCODE_EXACTONCE_ALTERED),
					 errmsg("cannot drop constraint \"%s\" of table \"%s.%s\"", cmd->name, p->name, table),
					 errdetail("The check keeps rows out of a sealed partition of pipeline \"%s\", which its shards may have passed.",
							   p->name),
					 errhint("Leave the constraints exactonce made as they are.")));
		if (p != NULL && cmd->name != NULL)
			type = ShapeColumnType(p, table, cmd->name, &notnull);
		if (!OidIsValid(type))
			continue;
		if (cmd->subtype == AT_DropColumn)
			UtilityRefuse(p, table, cmd->name, type, "drop");
		if (cmd->subtype == AT_DropNotNull && notnull)
			UtilityRefuse(p, table, cmd->name, type, "drop NOT NULL from");
		if (cmd->subtype != AT_AlterColumnType)
			continue;
		if (n->type != type || n->typmod != -1)
			UtilityRefuse(p, table, cmd->name, type, "alter the type of");
		if (OidIsValid(n->collation) && !get_collation_isdeterministic(n->collation))
			ereport(ERROR,
					(errcode(ERRCODE_EXACTONCE_ALTERED),
					 errmsg("cannot give column \"%s\" of table \"%s.%s\" collation %s, which is not deterministic",
							cmd->name, p->name, table, get_collation_name(n->collation)),
					 errdetail("exactonce takes two values of this column of pipeline \"%s\" for one only where their bytes are equal.",
							   p->name),
					 errhint("Leave the columns exactonce made as they are; add columns of your own beside them.")));
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
}

/*
 * UtilityProcess is the ProcessUtility hook.
 */
static void
UtilityProcess(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			   ProcessUtilityContext context, ParamListInfo params,
			   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (exactonce_guard_columns && !creating_extension && !utility_own &&
		IsA(pstmt->utilityStmt, AlterTableStmt))
		UtilityCheckAlterTable((AlterTableStmt *) pstmt->utilityStmt);
	for (int i = 0; i < ncopy_handlers && IsA(pstmt->utilityStmt, CopyStmt); i++)
	{
		int64		processed = copy_handlers[i] ((CopyStmt *) pstmt->utilityStmt, queryString);

		if (processed >= 0)
		{
			if (qc)
				SetQueryCompletion(qc, CMDTAG_COPY, processed);
			return;
		}
	}
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
}

/*
 * UtilityExecOwn runs DDL of exactonce's own on a pipeline's tables through
 * SPI, which the guard lets through.  The statements are exactonce's; an
 * owner's triggers do not fire on DDL, and event triggers are a
 * superuser's.
 */
void
UtilityExecOwn(const char *sql)
{
	utility_own = true;
	PG_TRY();
	{
		if (SPI_execute(sql, false, 0) < 0)
			elog(ERROR, "could not run \"%s\"", sql);
	}
	PG_FINALLY();
	{
		utility_own = false;
	}
	PG_END_TRY();
}

/*
 * UtilityCopyTarget opens, with COPY's lock, the partitioned table that a
 * COPY FROM STDIN or a server file loads, for a handler to run it; NULL,
 * having opened nothing, for any other COPY (TO, a program, a WHERE, a
 * server file its role may not read, which PostgreSQL refuses, a table
 * that is not partitioned), which handlers leave to PostgreSQL.
 */
Relation
UtilityCopyTarget(CopyStmt *stmt)
{
	Oid			relid;

	if (!stmt->is_from || stmt->is_program || stmt->whereClause != NULL || stmt->relation == NULL)
		return NULL;
	if (stmt->filename != NULL && !has_privs_of_role(GetUserId(), ROLE_PG_READ_SERVER_FILES))
		return NULL;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid) || get_rel_relkind(relid) != RELKIND_PARTITIONED_TABLE)
		return NULL;
	return try_table_open(relid, RowExclusiveLock);
}

/*
 * UtilityCopyParseState checks the rights of a COPY into rel of the
 * columns attnums, as COPY checks them, and returns the statement's parse
 * state, whose range table holds rel's entry.
 */
ParseState *
UtilityCopyParseState(Relation rel, List *attnums, const char *query)
{
	ParseState *pstate = make_parsestate(NULL);
	RangeTblEntry *rte;
	ListCell   *lc;

	pstate->p_sourcetext = query;
	rte = addRangeTableEntryForRelation(pstate, rel, RowExclusiveLock, NULL, false, false)->p_rte;
	rte->requiredPerms = ACL_INSERT;
	foreach(lc, attnums)
		rte->insertedCols = bms_add_member(rte->insertedCols,
										   lfirst_int(lc) - FirstLowInvalidHeapAttributeNumber);
	ExecCheckRTPerms(pstate->p_rtable, true);
	PreventCommandIfReadOnly("COPY FROM");
	PreventCommandIfParallelMode("COPY FROM");
	return pstate;
}

/*
 * UtilityAddCopyHandler has the hook hand each COPY to handler, after the
 * handlers added before it, until one runs it.
 */
void
UtilityAddCopyHandler(UtilityCopyHandler handler)
{
	if (ncopy_handlers == lengthof(copy_handlers))
		elog(ERROR, "too many COPY handlers");
	copy_handlers[ncopy_handlers++] = handler;
}

/*
 * UtilityInit defines exactonce.guard_columns and, when the library is
 * preloaded, installs the hook.
 */
void
UtilityInit(void)
{
	DefineCustomBoolVariable("exactonce.guard_columns",
							 "Refuses ALTER TABLE of the columns exactonce reads and writes.",
							 "Needs the library in shared_preload_libraries; without it, every path to an altered table refuses it instead.",
							 &exactonce_guard_columns,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = UtilityProcess;
}
