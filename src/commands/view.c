/*-------------------------------------------------------------------------
 *
 * view.c
 *		Named aggregate views: more groupings of the same events, each with
 *		its own keys and filter, read from the cells of one pipeline.
 *
 * A view adds no stage, table or token: it is an SQL view over the
 * pipeline's aggregates, so the one drain, state stage and token per batch
 * feed every view, and a view is as exact as the cells it reads.  Its keys
 * (plain dimensions or expressions over them) and its filter can only
 * name the pipeline's dimensions; the view reads the cells of the smallest
 * grouping that has all the dimensions they name and sums them per key.
 * Sums, counts, averages, minima and maxima merge exactly; distinct counts
 * do not, so a view offers them only where each of its rows is one cell.
 *
 * The keys and the filter are the caller's SQL, which runs as the
 * pipeline's owner whenever the view is read; the caller has the owner's
 * privileges already (PipelineLoad), and each piece must parse on its own
 * as one expression, so that it cannot reach beyond its place.  The
 * functions a view calls run as whoever reads it, so the view may call
 * only built-in immutable functions, which reach no table, file or
 * setting (CheckViewFunctions): a key such as query_to_xml(...) would run
 * the owner's SQL with a superuser's rights when a superuser reads it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "nodes/nodeFuncs.h"
#include "port/pg_bitutils.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "rewrite/rewriteHandler.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"

#define VIEW_MAX_KEYS	EXACTONCE_MAX_DIMENSIONS

PG_FUNCTION_INFO_V1(exactonce_create_view);

/* One key of a view: an expression over dimensions, and its column name. */
typedef struct ViewKey
{
	const char *text;			/* as the caller wrote it */
	const char *name;
	int			dim;			/* the dimension it is, or -1: computed */
} ViewKey;

/* What the walk over a piece of the caller's SQL finds. */
typedef struct DimWalk
{
	Pipeline   *p;
	const char *piece;			/* for errors */
	uint32		mask;			/* the dimensions named */
} DimWalk;

/*
 * DimRefs records the dimensions a piece names and refuses any other column
 * and any subquery: a view reads one cell's dimensions, nothing else.
 */
static bool
DimRefs(Node *node, DimWalk *w)
{
	if (node == NULL)
		return false;
	if (IsA(node, ColumnRef))
	{
		ColumnRef  *ref = (ColumnRef *) node;
		const char *col;

		if (list_length(ref->fields) != 1 || !IsA(linitial(ref->fields), String))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("%s names something other than a dimension", w->piece),
					 errhint("Name the dimensions of pipeline \"%s\" unqualified.", w->p->name)));
		col = strVal(linitial(ref->fields));
		for (int i = 0; i < w->p->ndims; i++)
			if (strcmp(col, w->p->dims[i]) == 0)
			{
				w->mask |= (uint32) 1 << i;
				return false;
			}
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of %s is not a dimension of pipeline \"%s\"",
						col, w->piece, w->p->name),
				 errdetail("A view's keys and filter read the dimensions of the cells, not the events."),
				 errhint("Declare it as a dimension of the pipeline.")));
	}
	if (IsA(node, SubLink))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s has a subquery", w->piece),
				 errhint("A view's keys and filter are expressions over one cell's dimensions.")));
	return raw_expression_tree_walker(node, DimRefs, (void *) w);
}

/*
 * ReadKeys parses the view's keys and returns how many there are; the
 * dimensions they name are added to *mask.
 */
static int
ReadKeys(Pipeline *p, ArrayType *arr, ViewKey *keys, uint32 *mask)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("group_by must be a one-dimensional array")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n > VIEW_MAX_KEYS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a view can group by at most %d keys", VIEW_MAX_KEYS)));
	for (int i = 0; i < n; i++)
	{
		SelectStmt *sel;
		ResTarget  *target;
		DimWalk		walk = {p, NULL, 0};

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("group_by must not contain NULL")));
		keys[i].text = TextDatumGetCString(elems[i]);
		walk.piece = psprintf("group_by element \"%s\"", keys[i].text);
		sel = StatementParsePiece("SELECT ", keys[i].text, "group_by element");
		target = linitial_node(ResTarget, sel->targetList);
		(void) DimRefs(target->val, &walk);
		*mask |= walk.mask;

		/* a plain dimension keeps its name unless renamed */
		keys[i].dim = -1;
		if (IsA(target->val, ColumnRef))
			keys[i].dim = pg_rightmost_one_pos32(walk.mask);
		if (target->name != NULL)
			keys[i].name = target->name;
		else if (keys[i].dim >= 0)
			keys[i].name = p->dims[keys[i].dim];
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("computed key \"%s\" needs a name", keys[i].text),
					 errhint("Write it as: expression AS name.")));
	}
	return n;
}

/*
 * BaseGrouping returns the grouping whose cells a view reads: the one with
 * the fewest dimensions among those that have every dimension in mask.
 */
static uint32
BaseGrouping(Pipeline *p, uint32 mask)
{
	int			best = -1;

	/* a rollup's: the level of the last dimension named */
	if (p->rollup)
		return mask == 0 ? 0 : CELL_LEVEL_MASK(pg_leftmost_one_pos32(mask) + 1);
	for (int s = 0; s < p->nsets; s++)
		if ((p->sets[s] & mask) == mask &&
			(best < 0 || pg_popcount32(p->sets[s]) < pg_popcount32(p->sets[best])))
			best = s;
	if (best < 0)
	{
		StringInfoData dims;

		initStringInfo(&dims);
		for (int i = 0; i < p->ndims; i++)
			if (mask & ((uint32) 1 << i))
				appendStringInfo(&dims, "%s%s", dims.len > 0 ? ", " : "", p->dims[i]);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pipeline \"%s\" has no grouping of (%s)", p->name, dims.data),
				 errdetail("A view reads the cells of a grouping that has every dimension its keys and filter name."),
				 errhint("Add such a set to the pipeline's grouping_sets.")));
	}
	return p->sets[best];
}

/*
 * AddColumn appends one aggregate column of the view, refusing a key of the
 * same name.
 */
static void
AddColumn(StringInfo sql, ViewKey *keys, int nkeys, const char *expr, const char *name)
{
	for (int i = 0; i < nkeys; i++)
		if (strcmp(keys[i].name, name) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("key \"%s\" has the name of an aggregate column", name),
					 errhint("Name the key otherwise: expression AS name.")));
	appendStringInfo(sql, "%s AS %s", expr, quote_identifier(name));
}

/*
 * AddMerged appends ", " and an aggregate column that merges the cells'
 * column of the same name with function fn (pg_catalog's), cast to type if
 * not NULL.
 */
static void
AddMerged(StringInfo sql, ViewKey *keys, int nkeys, const char *fn, const char *name,
		  const char *type)
{
	appendStringInfoString(sql, ", ");
	AddColumn(sql, keys, nkeys,
			  psprintf("pg_catalog.%s(%s)%s%s", fn, quote_identifier(name),
					   type ? "::pg_catalog." : "", type ? type : ""),
			  name);
}

/* the function CheckViewFunctions refused */
typedef struct ViewWalk
{
	Oid			func;
	bool		domain;
} ViewWalk;

/*
 * FunctionIsInternal tells whether a function is built into the server (no
 * SQL, PL or loaded code of anyone's), and if immutable is set, immutable.
 */
static bool
FunctionIsInternal(Oid func, bool immutable)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(func));
	bool		ok;

	if (!HeapTupleIsValid(tup))
		return false;
	ok = ((Form_pg_proc) GETSTRUCT(tup))->prolang == INTERNALlanguageId &&
		(!immutable || ((Form_pg_proc) GETSTRUCT(tup))->provolatile == PROVOLATILE_IMMUTABLE);
	ReleaseSysCache(tup);
	return ok;
}

/*
 * UnsafeFunction is check_functions_in_node's test: true for a function a
 * view may not call, remembered in the walk.
 */
static bool
UnsafeFunction(Oid func, void *context)
{
	if (FunctionIsInternal(func, true))
		return false;
	((ViewWalk *) context)->func = func;
	return true;
}

/*
 * ViewFunctions walks a view's query and stops at the first function it may
 * not call.  A cast through text calls the types' input and output
 * functions, built-in ones of which read no table even when stable (as
 * timestamptz's are); a cast to a domain runs the domain's checks, which
 * may call anything.
 */
static bool
ViewFunctions(Node *node, ViewWalk *w)
{
	if (node == NULL)
		return false;
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, ViewFunctions, (void *) w, 0);
	if (IsA(node, CoerceToDomain))
	{
		w->domain = true;
		return true;
	}
	if (IsA(node, CoerceViaIO))
	{
		CoerceViaIO *io = (CoerceViaIO *) node;
		Oid			in,
					out,
					ioparam;
		bool		varlena;

		getTypeInputInfo(io->resulttype, &in, &ioparam);
		getTypeOutputInfo(exprType((Node *) io->arg), &out, &varlena);
		if (!FunctionIsInternal(in, false))
			w->func = in;
		else if (!FunctionIsInternal(out, false))
			w->func = out;
		if (OidIsValid(w->func))
			return true;
	}
	else if (check_functions_in_node(node, UnsafeFunction, (void *) w))
		return true;
	return expression_tree_walker(node, ViewFunctions, (void *) w);
}

/*
 * CheckViewFunctions refuses a view, just created, that calls a function
 * other than a built-in immutable one, or casts to a domain.
 */
static void
CheckViewFunctions(Pipeline *p, const char *name)
{
	Relation	rel = relation_open(get_relname_relid(name, p->nspid), AccessShareLock);
	ViewWalk	w = {InvalidOid, false};

	if (ViewFunctions((Node *) get_view_query(rel), &w))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 w.domain ?
				 errmsg("view \"%s\" of pipeline \"%s\" casts to a domain", name, p->name) :
				 errmsg("view \"%s\" of pipeline \"%s\" calls function %s", name, p->name,
						format_procedure(w.func)),
				 errdetail("The functions of a view run as whoever reads it; its keys and filter may call only built-in immutable functions, which reach no table, file or setting."),
				 errhint("Write the key or filter with built-in immutable functions and operators, such as lower(), substr() or CASE.")));
	relation_close(rel, AccessShareLock);
}

/*
 * BuildView returns the statements that create the view and describe it.
 */
static char *
BuildView(Pipeline *p, const char *name, ViewKey *keys, int nkeys, const char *filter,
		  uint32 base, bool merges)
{
	const char *s = quote_identifier(p->name);
	const char *v = quote_identifier(name);
	StringInfoData sql;
	StringInfoData about;

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE VIEW %s.%s AS SELECT ", s, v);
	/* a newline after each piece ends a trailing comment in it */
	for (int i = 0; i < nkeys; i++)
	{
		for (int j = 0; j < i; j++)
			if (strcmp(keys[i].name, keys[j].name) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("view key \"%s\" is named twice", keys[i].name),
						 errhint("Name the key otherwise: expression AS name.")));
		appendStringInfo(&sql, "%s\n, ", keys[i].text);
	}
	AddColumn(&sql, keys, nkeys, "pg_catalog.sum(total)", "total");
	AddMerged(&sql, keys, nkeys, "sum", "keys", "int8");
	for (int i = 0; i < p->nmeasures; i++)
	{
		const char *sum = psprintf("%s_sum", p->measures[i]);
		const char *count = psprintf("%s_count", p->measures[i]);

		AddMerged(&sql, keys, nkeys, "sum", sum, NULL);
		AddMerged(&sql, keys, nkeys, "sum", count, "int8");
		appendStringInfoString(&sql, ", ");
		AddColumn(&sql, keys, nkeys,
				  psprintf("pg_catalog.trim_scale(pg_catalog.sum(%s)) OPERATOR(pg_catalog./)"
						   " NULLIF(pg_catalog.sum(%s), 0)",
						   quote_identifier(sum), quote_identifier(count)),
				  psprintf("%s_avg", p->measures[i]));
	}
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			AddMerged(&sql, keys, nkeys, "min", psprintf("%s_min", PipelineExtremumName(p, slot)), NULL);
			AddMerged(&sql, keys, nkeys, "max", psprintf("%s_max", PipelineExtremumName(p, slot)), NULL);
		}
	/* one cell per row: max() of one value is the value */
	for (int i = 0; !merges && i < p->ndistinct; i++)
		AddMerged(&sql, keys, nkeys, "max", psprintf("%s_distinct", p->distincts[i]), NULL);
	AddMerged(&sql, keys, nkeys, "max", "updated_at", NULL);

	/* the cells of the base grouping: a rollup's are its level */
	appendStringInfo(&sql, " FROM %s.aggregates WHERE level OPERATOR(pg_catalog.=) %d",
					 s, pg_popcount32(base));
	for (int i = 0; !p->rollup && i < p->ndims; i++)
		appendStringInfo(&sql, " AND %s IS %sNULL", quote_identifier(p->dims[i]),
						 base & ((uint32) 1 << i) ? "NOT " : "");
	if (filter != NULL)
		appendStringInfo(&sql, " AND (%s\n)", filter);
	if (nkeys > 0)
	{
		appendStringInfoString(&sql, " GROUP BY ");
		for (int i = 0; i < nkeys; i++)
			appendStringInfo(&sql, "%s%d", i > 0 ? ", " : "", i + 1);
	}
	else
		appendStringInfoString(&sql, " HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0");
	appendStringInfoString(&sql, ";\n");

	initStringInfo(&about);
	appendStringInfo(&about, "exactonce view of pipeline %s: group by (", p->name);
	for (int i = 0; i < nkeys; i++)
		appendStringInfo(&about, "%s%s", i > 0 ? ", " : "", keys[i].text);
	appendStringInfo(&about, ")%s%s; read from the cells grouped by (", filter ? " where " : "",
					 filter ? filter : "");
	for (int i = 0, n = 0; i < p->ndims; i++)
		if (base & ((uint32) 1 << i))
			appendStringInfo(&about, "%s%s", n++ > 0 ? ", " : "", p->dims[i]);
	appendStringInfo(&about, ")%s", merges && p->ndistinct > 0 ?
					 ", several per row, so without distinct counts" : "");
	appendStringInfo(&sql, "COMMENT ON VIEW %s.%s IS %s;\n", s, v, quote_literal_cstr(about.data));
	return sql.data;
}

/*
 * exactonce_create_view creates a named aggregate view of a pipeline: its
 * cells summed per group_by key (dimensions, or expressions over them, as
 * "expression AS name"), of the cells that pass filter (an expression over
 * dimensions, or NULL).
 */
Datum
exactonce_create_view(PG_FUNCTION_ARGS)
{
	ViewKey		keys[VIEW_MAX_KEYS];
	int			nkeys;
	uint32		mask = 0;
	uint32		keydims = 0;
	uint32		base;
	bool		merges;
	char	   *name;
	char	   *filter = NULL;
	Pipeline   *p;
	int			nestlevel;

	for (int i = 0; i < 3; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be NULL",
							i == 0 ? "pipeline" : i == 1 ? "name" : "group_by")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (strlen(name) == 0 || strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid view name \"%s\"", name),
				 errdetail("A view name has 1 to %d characters.", NAMEDATALEN - 1)));

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);

	nkeys = ReadKeys(p, PG_GETARG_ARRAYTYPE_P(2), keys, &mask);
	for (int i = 0; i < nkeys; i++)
		if (keys[i].dim >= 0)
			keydims |= (uint32) 1 << keys[i].dim;
	if (!PG_ARGISNULL(3))
	{
		DimWalk		walk = {p, NULL, 0};
		SelectStmt *sel;

		filter = text_to_cstring(PG_GETARG_TEXT_PP(3));
		walk.piece = psprintf("filter \"%s\"", filter);
		sel = StatementParsePiece("SELECT 1 WHERE ", filter, "filter");
		(void) DimRefs(sel->whereClause, &walk);
		mask |= walk.mask;
	}
	base = BaseGrouping(p, mask);

	/* each row is one cell if the keys are the base grouping's dimensions */
	merges = keydims != base;
	for (int i = 0; i < nkeys; i++)
		merges |= keys[i].dim < 0;
	if (OidIsValid(get_relname_relid(name, p->nspid)))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("relation \"%s\" already exists in the schema of pipeline \"%s\"", name, p->name),
				 errhint("Choose another view name, or drop the view first.")));

	PipelineActAsOwner(p);
	if (SPI_execute(BuildView(p, name, keys, nkeys, filter, base, merges), false, 0) < 0)
		elog(ERROR, "could not create view \"%s\" of pipeline \"%s\"", name, p->name);
	CheckViewFunctions(p, name);
	if (merges && p->ndistinct > 0)
		ereport(NOTICE,
				(errmsg("view \"%s\" has no distinct counts", name),
				 errdetail("Each of its rows merges several cells of pipeline \"%s\", and distinct counts do not add up.",
						   p->name),
				 errhint("Group by plain dimensions that are a grouping of the pipeline for distinct counts.")));

	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_VOID();
}
