/*-------------------------------------------------------------------------
 *
 * queuecopy.c
 *		A producer's COPY into a pipeline's queue, its rows inserted a page at
 *		a time from slots that cost the resource owner nothing.
 *
 * PostgreSQL 15's COPY buffers up to 1,000 rows per partition in slots of
 * the partition's own descriptor, made anew by each statement, and each
 * slot pins the descriptor with the statement's resource owner.  A
 * thousand pins of one descriptor make the owner's array a hash in which
 * every pin probes past all the others, made and dropped: without them a
 * statement of 1,000 rows into one shard costs its backend a third less
 * (test/bench/statements.sh), and a coordinator, which splits each producer statement among its nodes,
 * makes every node pay it once per node and statement.  So, with the
 * library preloaded, the ProcessUtility hook (catalog/utility.c) hands
 * each COPY here, and one FROM STDIN or a server file into a local
 * pipeline's ingest runs as PostgreSQL's would, but for its slots: the
 * rows are parsed (NextCopyFrom: every format, the defaults, the
 * identity), routed to their leaf (ExecFindPartition), given their
 * generated columns and checked against the leaf's constraints
 * (ingest_slot_open among them) as PostgreSQL's COPY does it, and
 * inserted with the table AM's multi-insert (utils/rowbatch.c, whose
 * slots use a copy of the descriptor that is not reference counted), up
 * to 1,000 rows or 64kB at a time, as PostgreSQL's are.  The statement
 * triggers of ingest (wake among them) fire as they would.
 *
 * The path is taken only where that changes nothing else: no WHERE, no
 * FREEZE, no program, a server file only for those who may read it, no
 * row-level security, no volatile default of a column left out but
 * event_time's clock_timestamp() (PostgreSQL's COPY inserts row by row
 * with any, as one may read the table; this path does so with none), no row
 * trigger or transition table on ingest, and every partition a heap table
 * or a partitioned one without triggers or indexes; the rights to insert
 * are checked as COPY checks them.  Anything else, and exactonce.queue_copy
 * off, goes to PostgreSQL's COPY; a DEBUG1 message says which ran, and why.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/partition.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_proc.h"
#include "commands/copy.h"
#include "commands/defrem.h"
#include "commands/progress.h"
#include "commands/trigger.h"
#include "executor/execPartition.h"
#include "executor/executor.h"
#include "executor/nodeModifyTable.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "pgstat.h"
#include "rewrite/rewriteHandler.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/syscache.h"

#include "catalog/utility.h"
#include "engine/queuecopy.h"
#include "utils/rowbatch.h"

/* rows and bytes buffered in all the leaves before they are inserted: COPY's */
#define QUEUE_COPY_ROWS 1000
#define QUEUE_COPY_BYTES 65535

static bool exactonce_queue_copy = true;

/* A leaf the statement inserts into, and its rows waiting */
typedef struct CopyLeaf
{
	ResultRelInfo *rri;
	RowBatch   *rows;
} CopyLeaf;

/* The leaves of a statement */
typedef struct CopyLeaves
{
	CopyLeaf   *leaf;
	int			n;
	int			size;
} CopyLeaves;

/*
 * OptionsServed says whether a COPY's options leave the statement to this
 * path: FREEZE is refused on a partitioned table by PostgreSQL's COPY.
 */
static bool
OptionsServed(List *options)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		if (strcmp(lfirst_node(DefElem, lc)->defname, "freeze") == 0)
			return false;
	}
	return true;
}

/*
 * TreeRefusal says why a partition under rel, the queue's parent, is one
 * this path may not insert into as PostgreSQL's COPY would; NULL where each
 * is a heap table, or a partitioned one, without triggers and without
 * indexes.
 */
static char *
TreeRefusal(Relation rel)
{
	List	   *parts = find_all_inheritors(RelationGetRelid(rel), NoLock, NULL);
	ListCell   *lc;
	char	   *refusal = NULL;

	foreach(lc, parts)
	{
		HeapTuple	tup;
		Form_pg_class form;

		if (lfirst_oid(lc) == RelationGetRelid(rel))
			continue;
		tup = SearchSysCache1(RELOID, ObjectIdGetDatum(lfirst_oid(lc)));
		if (!HeapTupleIsValid(tup))
		{
			refusal = psprintf("A partition of it was dropped.");
			break;
		}
		form = (Form_pg_class) GETSTRUCT(tup);
		if (form->relhastriggers || form->relhasindex)
			refusal = psprintf("Partition \"%s\" has a trigger or an index.", NameStr(form->relname));
		else if (form->relkind != RELKIND_PARTITIONED_TABLE &&
				 (form->relkind != RELKIND_RELATION || form->relam != HEAP_TABLE_AM_OID))
			refusal = psprintf("Partition \"%s\" is not a heap table.", NameStr(form->relname));
		ReleaseSysCache(tup);
		if (refusal != NULL)
			break;
	}
	list_free(parts);
	return refusal;
}

/*
 * HasSlotCheck says whether rel has the check ingest_slot_open that every
 * pipeline's queue has (queue.c): a table of a user's that happens to be
 * called ingest is left to PostgreSQL.
 */
static bool
HasSlotCheck(Relation rel)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;

	for (int i = 0; constr != NULL && i < constr->num_check; i++)
		if (strcmp(constr->check[i].ccname, "ingest_slot_open") == 0)
			return true;
	return false;
}

/*
 * IsQueue says whether rel, opened, is a pipeline's queue: ingest,
 * partitioned by list, with its slot check.
 */
static bool
IsQueue(Relation rel)
{
	return rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE &&
		strcmp(RelationGetRelationName(rel), "ingest") == 0 &&
		RelationGetPartitionKey(rel)->strategy == PARTITION_STRATEGY_LIST && HasSlotCheck(rel);
}

/*
 * DefaultVolatileFunction says whether func is volatile and neither nextval
 * (an identity's) nor clock_timestamp (event_time's), which cannot read the
 * table.
 */
static bool
DefaultVolatileFunction(Oid func, void *context)
{
	return func != F_NEXTVAL && func != F_CLOCK_TIMESTAMP && func_volatile(func) == PROVOLATILE_VOLATILE;
}

/* DefaultVolatileWalker looks for such a function anywhere in a default */
static bool
DefaultVolatileWalker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, DefaultVolatileFunction, context))
		return true;
	return expression_tree_walker(node, DefaultVolatileWalker, context);
}

/*
 * DefaultsVolatile returns a column the COPY leaves out whose default may
 * read the table (a volatile function, as BeginCopyFrom judges it, but for
 * event_time's clock_timestamp), or NULL.  PostgreSQL's COPY inserts row
 * by row then; clock_timestamp() alone still lets the rows go a page at a
 * time.
 */
static const char *
DefaultsVolatile(Relation rel, List *attnums)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Node	   *expr;

		if (att->attisdropped || att->attgenerated || list_member_int(attnums, att->attnum))
			continue;
		expr = build_column_default(rel, att->attnum);
		if (expr != NULL && DefaultVolatileWalker(expr, NULL))
			return NameStr(att->attname);
	}
	return NULL;
}

/*
 * CopyRefusal says why PostgreSQL's COPY is to load rel, a pipeline's
 * queue, with the columns attnums; NULL where this path may: no row-level
 * security, no row trigger or transition table, a tree TreeRefusal takes
 * and no volatile default but event_time's.
 */
static char *
CopyRefusal(Relation rel, List *attnums)
{
	TriggerDesc *trig = rel->trigdesc;
	const char *column;

	if (check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_ENABLED)
		return psprintf("Row-level security is enabled on it.");
	if (trig != NULL &&
		(trig->trig_insert_before_row || trig->trig_insert_after_row ||
		 trig->trig_insert_instead_row || trig->trig_insert_new_table))
		return psprintf("It has a row-level insert trigger or a transition table.");
	if ((column = DefaultsVolatile(rel, attnums)) != NULL)
		return psprintf("The default of column \"%s\", which the COPY leaves out, is volatile.", column);
	return TreeRefusal(rel);
}

/*
 * LeafFor returns the statement's leaf for the partition the row was routed
 * to, set up for its first row.  The tree was checked before the first row
 * was read; a leaf that has since gained a trigger or an index, which this
 * path would neither fire nor fill, fails the statement.
 */
static CopyLeaf *
LeafFor(CopyLeaves *leaves, ResultRelInfo *rri)
{
	Relation	rel = rri->ri_RelationDesc;
	CopyLeaf   *leaf;

	for (int i = 0; i < leaves->n; i++)
		if (leaves->leaf[i].rri == rri)
			return &leaves->leaf[i];
	if (rel->trigdesc != NULL || rri->ri_NumIndices > 0 || rri->ri_FdwRoutine != NULL ||
		rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relam != HEAP_TABLE_AM_OID)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("partition \"%s\" gained a trigger or an index while events were copied into it",
						RelationGetRelationName(rel)),
				 errhint("Copy the events again.")));
	if (leaves->n == leaves->size)
	{
		leaves->size = Max(8, 2 * leaves->size);
		leaves->leaf = leaves->leaf == NULL ? palloc(sizeof(CopyLeaf) * leaves->size) :
			repalloc(leaves->leaf, sizeof(CopyLeaf) * leaves->size);
	}
	leaf = &leaves->leaf[leaves->n++];
	leaf->rri = rri;
	leaf->rows = RowBatchBegin(rel, NULL, NULL);
	return leaf;
}

/*
 * CopyIntoQueue runs a COPY FROM STDIN or a file into a pipeline's queue (see
 * the top of the file) and returns the rows it inserted; or -1, having read
 * nothing, where PostgreSQL's COPY is to run it.
 */
static int64
CopyIntoQueue(CopyStmt *stmt, const char *query)
{
	Relation	rel;
	List	   *attnums;
	ParseState *pstate;
	CopyFromState cstate;
	EState	   *estate;
	ModifyTableState *mtstate;
	ResultRelInfo *root;
	PartitionTupleRouting *proute;
	ExprContext *econtext;
	TupleDesc	rootdesc;
	TupleTableSlot *rootslot;
	ErrorContextCallback errcallback;
	MemoryContext stmtcxt = CurrentMemoryContext;
	CopyLeaves	leaves = {0};
	int			buffered = 0;
	Size		buffered_bytes = 0;
	int64		processed = 0;
	char	   *refusal;

	if (!exactonce_queue_copy || !OptionsServed(stmt->options) || (rel = UtilityCopyTarget(stmt)) == NULL)
		return -1;
	if (!IsQueue(rel))
	{
		table_close(rel, NoLock);
		return -1;
	}
	attnums = CopyGetAttnums(RelationGetDescr(rel), rel, stmt->attlist);
	if ((refusal = CopyRefusal(rel, attnums)) != NULL)
	{
		ereport(DEBUG1,
				(errmsg("COPY into \"%s.%s\" runs as PostgreSQL's",
						get_namespace_name(RelationGetNamespace(rel)), RelationGetRelationName(rel)),
				 errdetail_internal("%s", refusal)));
		table_close(rel, NoLock);
		return -1;
	}
	ereport(DEBUG1,
			(errmsg("COPY into \"%s.%s\" runs on exactonce's path",
					get_namespace_name(RelationGetNamespace(rel)), RelationGetRelationName(rel))));
	pstate = UtilityCopyParseState(rel, attnums, query);

	cstate = BeginCopyFrom(pstate, rel, NULL, stmt->filename, false, NULL, stmt->attlist, stmt->options);

	/* the executor's state for routing, constraints and statement triggers */
	estate = CreateExecutorState();
	ExecInitRangeTable(estate, pstate->p_rtable);
	root = makeNode(ResultRelInfo);
	ExecInitResultRelation(estate, root, 1);
	CheckValidResultRel(root, CMD_INSERT);
	mtstate = makeNode(ModifyTableState);
	mtstate->ps.state = estate;
	mtstate->operation = CMD_INSERT;
	mtstate->mt_nrels = 1;
	mtstate->resultRelInfo = root;
	mtstate->rootResultRelInfo = root;
	AfterTriggerBeginQuery();
	proute = ExecSetupPartitionTupleRouting(estate, rel);
	ExecBSInsertTriggers(estate, root);
	econtext = GetPerTupleExprContext(estate);

	/* the rows as parsed, in a slot that pins no descriptor */
	rootdesc = CreateTupleDescCopy(RelationGetDescr(rel));
	rootslot = MakeSingleTupleTableSlot(rootdesc, &TTSOpsVirtual);

	errcallback.callback = CopyFromErrorCallback;
	errcallback.arg = (void *) cstate;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;

	for (;;)
	{
		ResultRelInfo *rri;
		CopyLeaf   *leaf;
		TupleTableSlot *slot;
		TupleConversionMap *map;
		TupleDesc	desc;

		CHECK_FOR_INTERRUPTS();
		ResetPerTupleExprContext(estate);
		MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
		ExecClearTuple(rootslot);
		if (!NextCopyFrom(cstate, econtext, rootslot->tts_values, rootslot->tts_isnull))
			break;
		ExecStoreVirtualTuple(rootslot);
		rri = ExecFindPartition(mtstate, root, proute, rootslot, estate);

		/* the row in the leaf's own slot, in the leaf's column order */
		MemoryContextSwitchTo(stmtcxt);
		leaf = LeafFor(&leaves, rri);
		slot = RowBatchSlot(leaf->rows);
		map = rri->ri_RootToPartitionMap;
		for (int i = 0; i < slot->tts_tupleDescriptor->natts; i++)
		{
			int			from = map != NULL ? map->attrMap->attnums[i] - 1 : i;

			if (from < 0)
				continue;
			slot->tts_values[i] = rootslot->tts_values[from];
			slot->tts_isnull[i] = rootslot->tts_isnull[from];
		}
		RowBatchAdd(leaf->rows, 0);

		MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
		desc = RelationGetDescr(rri->ri_RelationDesc);
		if (desc->constr != NULL && desc->constr->has_generated_stored)
			ExecComputeStoredGenerated(rri, estate, slot, CMD_INSERT);
		if (desc->constr != NULL)
			ExecConstraints(rri, slot, estate);
		pgstat_progress_update_param(PROGRESS_COPY_TUPLES_PROCESSED, ++processed);

		buffered_bytes += ExecFetchSlotHeapTuple(slot, false, NULL)->t_len;
		if (++buffered == QUEUE_COPY_ROWS || buffered_bytes >= QUEUE_COPY_BYTES)
		{
			for (int i = 0; i < leaves.n; i++)
				RowBatchFlush(leaves.leaf[i].rows);
			buffered = 0;
			buffered_bytes = 0;
		}
	}
	MemoryContextSwitchTo(stmtcxt);
	for (int i = 0; i < leaves.n; i++)
		RowBatchEnd(leaves.leaf[i].rows);
	error_context_stack = errcallback.previous;

	ExecASInsertTriggers(estate, root, NULL);
	AfterTriggerEndQuery(estate);
	/* the slots routing made for leaves whose columns differ from the root's */
	ExecResetTupleTable(estate->es_tupleTable, false);
	ExecDropSingleTupleTableSlot(rootslot);
	FreeTupleDesc(rootdesc);
	ExecCleanupTupleRouting(mtstate, proute);
	ExecCloseResultRelations(estate);
	ExecCloseRangeTableRelations(estate);
	FreeExecutorState(estate);
	EndCopyFrom(cstate);
	table_close(rel, NoLock);
	return processed;
}

/*
 * QueueCopyInit defines exactonce.queue_copy and hands CopyIntoQueue the
 * COPYs that utility.c's hook sees (when the library is preloaded).
 */
void
QueueCopyInit(void)
{
	DefineCustomBoolVariable("exactonce.queue_copy",
							 "Inserts a COPY into a pipeline's queue a page at a time without PostgreSQL 15's cost per buffered row.",
							 "Off, PostgreSQL's COPY runs it. Needs the library in shared_preload_libraries.",
							 &exactonce_queue_copy,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	UtilityAddCopyHandler(CopyIntoQueue);
}
