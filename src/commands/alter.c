/*-------------------------------------------------------------------------
 *
 * alter.c
 *		alter_pipeline_as(): a running pipeline declared anew as a query.
 *
 * In latest mode the cells are a function of state, the latest version of
 * each live key with the columns the pipeline keeps: its dimensions, its
 * measures, the columns it counts distinct, value, key and version.  So a
 * new query over those columns is computed exactly by recomputing the
 * cells from state, as rebuild() does: other grouping sets, min and max
 * added or dropped, sums and counts shown or hidden, a WHERE added or
 * narrowed.  What state does not keep cannot be backfilled and is refused
 * with a hint: a column the pipeline was not declared with, and a WHERE
 * that lets through events the old one turned away (those are tombstones
 * in state, their columns gone).  A narrower WHERE is the old one AND more
 * conjuncts; each key whose latest version fails them becomes a tombstone,
 * as it would have had the WHERE been there from the start, and the
 * queue's generated column computes the new WHERE for events to come.
 *
 * In accumulate mode a cell adds up events that state does not keep, so
 * only what the result shows of the cells may change: the same grouping
 * sets, no new min, max or WHERE.
 *
 * It all happens in the caller's transaction while it holds the pipeline
 * (ProgressLockAll): the workers wait, producers go on inserting into the
 * queue (but for the instant a new WHERE rewrites the queue's generated
 * column), and readers see the old cells and result or the new ones.  A
 * session that loaded the old definition and waited for the shard rows
 * finds it changed once it has them (PipelineIsCurrent) and does not cut
 * cells by it.  The pipeline keeps the dimensions, measures and distinct
 * counts it was declared with even where the new query shows fewer, so
 * that a later query can show them again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

#include "catalog/pipeline.h"
#include "catalog/remake.h"
#include "catalog/statement.h"
#include "commands/query.h"
#include "distributed/coordinator.h"
#include "engine/event.h"
#include "engine/progress.h"
#include "utils/wake.h"

PG_FUNCTION_INFO_V1(exactonce_alter_pipeline_as);

extern Datum exactonce_rebuild(PG_FUNCTION_ARGS);

/* the columns a WHERE names, gathered by WhereNames */
typedef struct AlterNames
{
	List	   *names;
} AlterNames;

/*
 * AlterRefuse reports a change state cannot compute.
 */
static void
AlterRefuse(Pipeline *p, const char *what, const char *detail, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("pipeline \"%s\" cannot be altered to %s", p->name, what),
			 errdetail("%s", detail),
			 errhint("%s", hint)));
}

/*
 * InState tells whether state keeps column name of pipeline p.
 */
static bool
InState(Pipeline *p, const char *name)
{
	return QueryNameIndex(p->dims, p->ndims, name) >= 0 ||
		QueryNameIndex(p->measures, p->nmeasures, name) >= 0 ||
		QueryNameIndex(p->distincts, p->ndistinct, name) >= 0 ||
		strcmp(name, "key") == 0 || strcmp(name, "version") == 0 || strcmp(name, "value") == 0;
}

/*
 * WhereNames gathers the columns an expression names.
 */
static bool
WhereNames(Node *node, AlterNames *n)
{
	if (node == NULL)
		return false;
	if (IsA(node, ColumnRef))
	{
		n->names = lappend(n->names, strVal(llast(((ColumnRef *) node)->fields)));
		return false;
	}
	return raw_expression_tree_walker(node, WhereNames, (void *) n);
}

/*
 * OldWhere returns the text of the WHERE of the query the pipeline was
 * declared with, or NULL.
 */
static char *
OldWhere(Pipeline *p)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(p->id)};
	char	   *query;
	QueryPlan  *old = palloc0(sizeof(QueryPlan));

	if (SPI_execute_with_args("SELECT query FROM exactonce.pipeline WHERE id OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read the query of pipeline \"%s\"", p->name);
	query = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (query == NULL)
		return NULL;
	QueryPlanOf(old, query, true);
	return old->where;
}

/*
 * AddedConditions checks that the new WHERE is the old one AND more, and
 * returns the conditions it adds, ANDed, or NULL if none.
 */
static char *
AddedConditions(Pipeline *p, const char *old, QueryPlan *plan)
{
	List	   *old_nodes = NIL;
	List	   *new_nodes = NIL;
	List	   *new_texts;
	StringInfoData added;
	ListCell   *lc;

	if (old != NULL && plan->where == NULL)
		AlterRefuse(p, "a query without its WHERE",
					"The events the WHERE turned away are tombstones in state: their columns are gone.",
					"Keep the WHERE, or create a pipeline with the new query and send the events again.");
	if (plan->where == NULL)
		return NULL;
	if (old != NULL)
		(void) QueryConjuncts(old, &old_nodes);
	new_texts = QueryConjuncts(plan->where, &new_nodes);
	foreach(lc, old_nodes)
		if (!list_member(new_nodes, lfirst(lc)))
		AlterRefuse(p, "a WHERE that is not the old one AND more",
					"A wider WHERE lets through events the old one turned away, which are tombstones in state.",
					"Write the new WHERE as the old conditions AND new ones, or create a pipeline with the new query and send the events again.");
	initStringInfo(&added);
	foreach(lc, new_nodes)
	{
		AlterNames	n = {NIL};
		ListCell   *lc2;

		if (list_member(old_nodes, lfirst(lc)))
			continue;
		(void) WhereNames(lfirst(lc), &n);
		foreach(lc2, n.names)
			if (!InState(p, lfirst(lc2)))
			AlterRefuse(p, psprintf("a WHERE over column \"%s\"", (char *) lfirst(lc2)),
						"State keeps the latest version of each key with the pipeline's dimensions, measures, distinct-counted columns, key, version and value only: the new conditions are checked against it.",
						"Filter on those columns, or create a pipeline with the new query and send the events again.");
		appendStringInfo(&added, "%s(%s)", added.len > 0 ? " AND " : "",
						 (char *) list_nth(new_texts, foreach_current_index(lc)));
	}
	return added.len > 0 ? added.data : NULL;
}

/*
 * IsComputed tells whether a column is one the queue computes (query.c).
 */
static bool
IsComputed(const char *name)
{
	return strncmp(name, "exactonce_", strlen("exactonce_")) == 0;
}

/*
 * CheckKept refuses a query that needs a column the pipeline does not keep.
 */
static void
CheckKept(Pipeline *p, QueryPlan *plan)
{
	const char *hint = "A running pipeline keeps the columns it was declared with: use those, or create a pipeline with the new query and send the events again.";
	const char *computed = "a computed key, FILTER or aggregated expression";

	for (int i = 0; i < plan->ndims; i++)
		if (QueryNameIndex(p->dims, p->ndims, plan->dims[i]) < 0)
			AlterRefuse(p, IsComputed(plan->dims[i]) ? computed : psprintf("grouping by \"%s\"", plan->dims[i]),
						"It is not a dimension of the pipeline, so state does not keep it.", hint);
	for (int i = 0; i < plan->nmeasures; i++)
		if (QueryNameIndex(p->measures, p->nmeasures, plan->measures[i]) < 0)
			AlterRefuse(p, IsComputed(plan->measures[i]) ? computed : psprintf("aggregating \"%s\"", plan->measures[i]),
						"It is not a measure of the pipeline, so state does not keep it.", hint);
	for (int i = 0; i < plan->ndistinct; i++)
		if (QueryNameIndex(p->distincts, p->ndistinct, plan->distincts[i]) < 0)
			AlterRefuse(p, IsComputed(plan->distincts[i]) ? computed : psprintf("count(DISTINCT %s)", plan->distincts[i]),
						"The pipeline does not count its distinct values, so state does not keep it.", hint);
	if (p->windowed)
	{
		bool		same = strcmp(plan->grouping.data, "rollup") == 0 && plan->ndims == p->ndims - 1;

		for (int i = 0; same && i < plan->ndims; i++)
			same = strcmp(plan->dims[i], p->dims[i + 1]) == 0;
		if (!same)
			AlterRefuse(p, "other grouping sets", "A windowed pipeline's cells add up events that state does not keep.",
						"Create a pipeline with the new query and send the events again.");
	}
	if ((plan->window != NULL) != p->windowed ||
		(p->windowed && PipelineIntervalMicros("the stride of date_bin()",
											   DatumGetIntervalP(plan->width)) != p->window_us))
		AlterRefuse(p, "another window", "A pipeline's windows are cut as its events arrive.",
					"Create a pipeline with the new window and send the events again.");
}

/*
 * PlanSets returns the query's grouping sets as masks over the pipeline's
 * dimensions, in *sets, and their number.
 */
static int
PlanSets(Pipeline *p, QueryPlan *plan, uint32 *sets)
{
	Pipeline	q = {0};

	q.ndims = plan->ndims;
	memcpy(q.dims, plan->dims, sizeof(char *) * plan->ndims);
	PipelineParseGrouping(&q, plan->grouping.data);
	for (int s = 0; s < q.nsets; s++)
	{
		sets[s] = 0;
		for (int i = 0; i < q.ndims; i++)
			if (q.sets[s] & ((uint32) 1 << i))
				sets[s] |= (uint32) 1 << QueryNameIndex(p->dims, p->ndims, q.dims[i]);
	}
	return q.nsets;
}

/*
 * HasSet tells whether mask is among n sets.
 */
static bool
HasSet(const uint32 *sets, int n, uint32 mask)
{
	for (int s = 0; s < n; s++)
		if (sets[s] == mask)
			return true;
	return false;
}

/*
 * SetsText writes grouping sets as grouping_sets takes them: 'rollup' if
 * they are the pipeline's rollup, else each set's dimensions.
 */
static char *
SetsText(Pipeline *p, const uint32 *sets, int n)
{
	StringInfoData t;
	bool		rollup = n == p->ndims + 1;

	for (int s = 0; rollup && s < n; s++)
		rollup = sets[s] == CELL_LEVEL_MASK(s);
	if (rollup)
		return "rollup";
	initStringInfo(&t);
	for (int s = 0; s < n; s++)
	{
		int			k = 0;

		appendStringInfo(&t, "%s(", s > 0 ? ", " : "");
		for (int i = 0; i < p->ndims; i++)
			if (sets[s] & ((uint32) 1 << i))
				appendStringInfo(&t, "%s%s", k++ > 0 ? ", " : "", p->dims[i]);
		appendStringInfoChar(&t, ')');
	}
	return t.data;
}

/*
 * OnlySets is the condition on the aggregates that keeps the cells of the
 * query's grouping sets: in a cell, the dimensions it does not group by are
 * NULL, and the others never are.
 */
static char *
OnlySets(Pipeline *p, const uint32 *sets, int n)
{
	StringInfoData t;

	initStringInfo(&t);
	appendStringInfoChar(&t, '(');
	for (int s = 0; s < n; s++)
	{
		appendStringInfo(&t, "%s(", s > 0 ? " OR " : "");
		for (int i = 0; i < p->ndims; i++)
			appendStringInfo(&t, "%s%s IS %sNULL", i > 0 ? " AND " : "", quote_identifier(p->dims[i]),
							 sets[s] & ((uint32) 1 << i) ? "NOT " : "");
		if (p->ndims == 0)
			appendStringInfoString(&t, "true");
		appendStringInfoChar(&t, ')');
	}
	appendStringInfoChar(&t, ')');
	return t.data;
}

/*
 * DependentViews lists the views of the pipeline's aggregates other than
 * result and windows, as text, or returns NULL if there is none.
 */
static char *
DependentViews(Pipeline *p)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(get_relname_relid("aggregates", p->nspid))};

	if (SPI_execute_with_args("SELECT pg_catalog.string_agg(DISTINCT c.oid::pg_catalog.regclass::pg_catalog.text, ', ')"
							  " FROM pg_catalog.pg_depend d"
							  " JOIN pg_catalog.pg_rewrite r ON r.oid OPERATOR(pg_catalog.=) d.objid"
							  " JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.ev_class"
							  " WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass"
							  " AND d.refobjid OPERATOR(pg_catalog.=) $1 AND c.oid OPERATOR(pg_catalog.<>) $1"
							  " AND c.relname OPERATOR(pg_catalog.<>) ALL (ARRAY['result', 'windows']::pg_catalog.name[])",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the views of pipeline \"%s\"", p->name);
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/*
 * AlterMinMax adds to the aggregates the min and max columns the query
 * needs and drops those it no longer does; the registry already says which.
 */
static void
AlterMinMax(Pipeline *p, const bool *min_max)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);
	bool		any = false;

	initStringInfo(&sql);
	for (int slot = 0; slot <= p->nmeasures; slot++)
	{
		const char *m = PipelineExtremumName(p, slot);

		any |= min_max[slot];
		if (min_max[slot] == p->min_max[slot])
			continue;
		appendStringInfo(&sql, "ALTER TABLE %s.aggregates %s COLUMN %s%s, %s COLUMN %s%s;\n", s,
						 min_max[slot] ? "ADD" : "DROP", quote_identifier(psprintf("%s_min", m)),
						 min_max[slot] ? " numeric" : "",
						 min_max[slot] ? "ADD" : "DROP", quote_identifier(psprintf("%s_max", m)),
						 min_max[slot] ? " numeric" : "");
		if (min_max[slot])
			appendStringInfo(&sql, "COMMENT ON COLUMN %1$s.aggregates.%2$s IS %4$s;\n"
							 "COMMENT ON COLUMN %1$s.aggregates.%3$s IS %5$s;\n",
							 s, quote_identifier(psprintf("%s_min", m)), quote_identifier(psprintf("%s_max", m)),
							 quote_literal_cstr(psprintf("exactonce: least %s among the cell's contributions, exact as they come and go", m)),
							 quote_literal_cstr(psprintf("exactonce: greatest %s among the cell's contributions, exact as they come and go", m)));
	}

	/*
	 * rebuild() then keeps no reserve (extrema.c), whose layout follows
	 * min_max
	 */
	if (any && !p->any_min_max)
		appendStringInfo(&sql, "ALTER TABLE %s.aggregates ADD COLUMN " PIPELINE_RESERVE_COLUMN " numeric[];\n"
						 "COMMENT ON COLUMN %s.aggregates." PIPELINE_RESERVE_COLUMN " IS %s;\n", s, s,
						 quote_literal_cstr("exactonce: a leaf cell's least and greatest values of each min_max column, kept to set its min and max anew when they leave (NULL: none kept)"));
	else if (!any && p->any_min_max)
		appendStringInfo(&sql, "ALTER TABLE %s.aggregates DROP COLUMN " PIPELINE_RESERVE_COLUMN ";\n", s);
	if (any && !OidIsValid(p->state_cell))
	{
		appendStringInfo(&sql, "CREATE INDEX state_cell ON %s.state (", s);
		for (int i = 0; i < p->ndims; i++)
			appendStringInfo(&sql, "%s%s", i > 0 ? ", " : "", quote_identifier(p->dims[i]));
		appendStringInfo(&sql, ");\nCOMMENT ON INDEX %s.state_cell IS 'exactonce: the keys of each leaf cell, for its min and max';\n", s);
	}
	else if (!any && OidIsValid(p->state_cell))
		appendStringInfo(&sql, "DROP INDEX %s.state_cell;\n", s);
	if (sql.len > 0 && SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not alter the aggregates of pipeline \"%s\"", p->name);
}

/*
 * NarrowState makes a tombstone of each live key whose latest version fails
 * the WHERE's new conjuncts, and gives the queue's generated column the new
 * WHERE, with search_path pg_catalog alone as QueryAddColumns does.
 */
static void
NarrowState(Pipeline *p, QueryPlan *plan, const char *added, bool had_where)
{
	const char *s = quote_identifier(p->name);
	int			nestlevel = NewGUCNestLevel();
	QueryPlan	where = {0};

	(void) set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (SPI_execute(psprintf("LOCK TABLE %s.ingest IN ACCESS EXCLUSIVE MODE", s), false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not narrow the WHERE of pipeline \"%s\"", p->name);
	StatementWriteAll(NULL, psprintf("UPDATE %s.state SET deleted = true, updated_at = pg_catalog.now()"
									 " WHERE NOT deleted AND (%s) IS NOT TRUE", s, added),
					  psprintf("SELECT pg_catalog.count(*) FROM %s.state WHERE NOT deleted AND (%s) IS NOT TRUE",
							   s, added));
	if (had_where && SPI_execute(psprintf("ALTER TABLE %s.ingest DROP COLUMN %s", s, EV_WHERE_COLUMN),
								 false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not narrow the WHERE of pipeline \"%s\"", p->name);
	AtEOXact_GUC(true, nestlevel);
	where.where = plan->where;
	QueryAddColumns(&where, p->name);
}

/*
 * RefuseDistributed refuses the name of a distributed pipeline at its
 * coordinator: its nodes would have to change together, and the
 * coordinator's views with them.  SPI must be connected.
 */
static void
RefuseDistributed(const char *name)
{
	Distributed d;

	if (!CoordinatorLoad(name, &d))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("exactonce.alter_pipeline_as() does not change distributed pipeline \"%s\"", name),
			 errdetail("Its nodes and the coordinator's views would have to change together."),
			 errhint("Create a distributed pipeline of the new definition and send the events again.")));
}

/*
 * exactonce_alter_pipeline_as declares a running pipeline anew by a query,
 * in the caller's transaction, and returns the number of cells recomputed.
 */
Datum
exactonce_alter_pipeline_as(PG_FUNCTION_ARGS)
{
	QueryPlan  *plan = palloc0(sizeof(QueryPlan));
	Pipeline   *p;
	char	   *query;
	uint32		sets[PIPELINE_MAX_SETS + 1];
	int			nsets;
	bool		min_max[1 + EXACTONCE_MAX_MEASURES] = {0};
	char	   *minmax_names[1 + EXACTONCE_MAX_MEASURES];
	int			nminmax = 0;
	char	   *added = NULL;
	char	   *old_where = NULL;
	char	   *grouping;
	int64		cells = 0;
	int			nestlevel;
	int64		dummy;
	bool		paused;
	Oid			view;
	RemakeKept *kept;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("name and query of a pipeline must not be NULL")));
	PipelineRequireReadCommitted("exactonce.alter_pipeline_as()");
	query = text_to_cstring(PG_GETARG_TEXT_PP(1));
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	RefuseDistributed(text_to_cstring(PG_GETARG_TEXT_PP(0)));
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	QueryPlanOf(plan, query, p->mode == PIPELINE_LATEST);
	CheckKept(p, plan);

	/* the cells: the query's grouping sets, and min and max where it has them */
	nsets = p->windowed ? 0 : PlanSets(p, plan, sets);
	for (int i = 0; i < plan->nminmax; i++)
		for (int slot = 0; slot <= p->nmeasures; slot++)
			if (strcmp(PipelineExtremumName(p, slot), plan->minmax[i]) == 0)
				min_max[slot] = true;
	if (p->mode == PIPELINE_ACCUMULATE)
	{
		for (int slot = 0; slot <= p->nmeasures; slot++)
			if (min_max[slot] && !p->min_max[slot])
				AlterRefuse(p, psprintf("min and max of %s", PipelineExtremumName(p, slot)),
							"In accumulate mode a cell adds up events that state does not keep.",
							"Create a pipeline with the new query and send the events again.");
		for (int s = 0; s < nsets; s++)
			if (!HasSet(p->sets, p->nsets, sets[s]))
				AlterRefuse(p, "other grouping sets",
							"In accumulate mode a cell adds up events that state does not keep.",
							"Create a pipeline with the new query and send the events again.");
		memcpy(min_max, p->min_max, sizeof(min_max));
	}
	if (p->windowed || p->mode == PIPELINE_ACCUMULATE)
	{
		/* the cells stay; the result shows those of the query's sets */
		if (!p->windowed && nsets < p->nsets)
			plan->only_sets = OnlySets(p, sets, nsets);
		nsets = p->nsets;
		memcpy(sets, p->sets, sizeof(uint32) * nsets);
	}
	else
	{
		bool		leaves = false;

		/* min, max and distinct counts are read from the leaves */
		for (int slot = 0; slot <= p->nmeasures; slot++)
			leaves |= min_max[slot];
		if ((leaves || p->ndistinct > 0) && !HasSet(sets, nsets, CELL_LEVEL_MASK(p->ndims)))
		{
			plan->only_sets = OnlySets(p, sets, nsets);
			sets[nsets++] = CELL_LEVEL_MASK(p->ndims);
		}
		for (int s = 0; s < p->nsets; s++)
			if (!HasSet(sets, nsets, p->sets[s]))
			{
				char	   *views = DependentViews(p);

				if (views != NULL)
					AlterRefuse(p, "grouping sets without some it has now",
								psprintf("Views %s read the pipeline's cells.", views),
								"Drop those views, alter the pipeline, and create them again.");
				break;
			}
		old_where = OldWhere(p);
		added = AddedConditions(p, old_where, plan);
	}
	grouping = SetsText(p, sets, nsets);
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (min_max[slot])
			minmax_names[nminmax++] = pstrdup(PipelineExtremumName(p, slot));

	PipelineActAsOwner(p);
	/* the view is made anew: what was made on it is kept, or refused first */
	view = get_relname_relid("result", get_namespace_oid(p->name, false));
	kept = OidIsValid(view) ? RemakeKeep(view, "alter_pipeline_as()") : NULL;
	/* the workers wait from here to commit; inserts go on */
	ProgressLockAll(p, NULL, &dummy, &dummy, &paused);
	if (added != NULL)
		NarrowState(p, plan, added, old_where != NULL);
	{
		Oid			types[4] = {INT4OID, TEXTARRAYOID, TEXTOID, TEXTOID};
		Datum		values[4] = {Int32GetDatum(p->id), QueryTextArray(minmax_names, nminmax),
		CStringGetTextDatum(grouping), PG_GETARG_DATUM(1)};

		PipelineRegistryExec("UPDATE exactonce.pipeline SET min_max = $2, grouping_sets = $3, query = $4"
							 " WHERE id OPERATOR(pg_catalog.=) $1", 4, types, values, 1);
	}
	if (SPI_execute(psprintf("DROP VIEW IF EXISTS %s.result", quote_identifier(p->name)), false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not drop the result view of pipeline \"%s\"", p->name);
	if (p->mode == PIPELINE_LATEST)
	{
		AlterMinMax(p, min_max);
		/* rebuild() reads the registry and tables as they are now */
		CommandCounterIncrement();
		PushCopiedSnapshot(GetActiveSnapshot());
		UpdateActiveSnapshotCommandId();
		cells = DatumGetInt64(DirectFunctionCall1(exactonce_rebuild, PG_GETARG_DATUM(0)));
		PopActiveSnapshot();
	}
	if (SPI_execute(QueryResultView(plan, p->name, query), false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create the result view of pipeline \"%s\"", p->name);
	if (kept != NULL)
		RemakeRestore(kept, get_namespace_oid(p->name, false), "alter_pipeline_as()");
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	WakeWorkersAtCommit();
	PG_RETURN_INT64(cells);
}
