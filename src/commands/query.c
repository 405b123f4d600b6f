/*-------------------------------------------------------------------------
 *
 * query.c
 *		create_pipeline_as(): a pipeline declared as a query over its
 *		stream of events.
 *
 *	   SELECT exactonce.create_pipeline_as('trades', $$
 *		 SELECT risk_type, region, sum(value) AS total, count(*) AS keys,
 *				avg(qty), min(value), max(value), count(DISTINCT counterparty)
 *		   FROM stream
 *		  GROUP BY ROLLUP (risk_type, region) $$);
 *
 * The contract: view <name>.result always equals the query run over the
 * de-duplicated stream, which in latest mode is the latest version of each
 * live key and in accumulate mode each distinct reading.  The query is
 * taken apart here into what create_pipeline takes (dimensions, measures,
 * min_max, distinct_counts, a window, grouping sets), the pipeline is made
 * by create_pipeline itself, so a declared pipeline is the same pipeline
 * at the same cost, and the result view maps each column of the query onto
 * the columns of <name>.aggregates.  Whatever the three stages cannot keep
 * exactly is refused, naming the construct, with SQLSTATE 0A000 (or 42601
 * for a query that is not one SELECT): nothing is approximated.
 *
 * avg is the cell's exact sum divided by its count, as PostgreSQL's avg
 * divides: the same digits where a column's values have one scale (a
 * numeric(p, s) column, say).  PostgreSQL takes the division's scale from
 * the values in the group now, the pipeline from the largest scale the
 * cell has seen, so with mixed scales the view may carry more digits.
 *
 * Supported: the dimensions (columns of the stream), sum, count, avg, min
 * and max of value and of numeric measures, count(*), count(DISTINCT) of a
 * text column, GROUP BY a list of dimensions, ROLLUP, CUBE or GROUPING
 * SETS of them, and an event-time window written as the first key of a
 * ROLLUP, date_bin(stride, event_time, origin) with an origin on the
 * stride's grid from 1970-01-01 UTC, or date_trunc(unit, event_time,
 * 'UTC') (accumulate mode), and in latest mode a WHERE over any column of
 * the stream: the queue gets a boolean column
 * generated from it (EV_WHERE_COLUMN), and an event for which it is not
 * true counts as a tombstone of its key, which is exactly "the latest
 * version of each key, if the WHERE keeps it".  The WHERE may use columns
 * and built-in immutable functions and operators only: it runs in the
 * producer's INSERT, as a generated column, with search_path pg_catalog.
 * A column that only the WHERE names is added to the queue as text.  An
 * expression as a key, and what an aggregate with FILTER or of an
 * expression aggregates, are columns of the queue generated the same way
 * (QueryGenerated), named for the expression's text, so that a query
 * altered later (alter.c) finds the same expression under the same name.
 * In accumulate mode the WHERE is a FILTER of every aggregate, and the
 * result keeps the cells that have a reading it lets through.
 *
 * create_view_as() declares a view of an existing pipeline the same way:
 * a plain GROUP BY of the pipeline's dimensions, aggregates it keeps, a
 * WHERE over its dimensions.  It is create_view (view.c) under the name
 * <name>_cells, which sums the cells of the smallest grouping that has the
 * dimensions, and view <name> over it with the query's columns.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "parser/gramparse.h"
#include "parser/parse_target.h"
#include "parser/parser.h"
#include "parser/scansup.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "catalog/utility.h"
#include "commands/query.h"
#include "engine/event.h"

PG_FUNCTION_INFO_V1(exactonce_create_pipeline_as);
PG_FUNCTION_INFO_V1(exactonce_create_view_as);

extern Datum exactonce_create_pipeline(PG_FUNCTION_ARGS);
extern Datum exactonce_create_view(PG_FUNCTION_ARGS);

/* columns of every stream, which are no dimension */
static const char *const stream_columns[] = {"key", "version", "value", "deleted", "event_time"};

/*
 * QueryRefuse reports a construct of the query that a pipeline cannot keep
 * exactly.
 */
static void
QueryRefuse(const char *what, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s is not supported in a pipeline declared as a query", what),
			 errhint("%s", hint)));
}

/*
 * ColumnName returns the column a ColumnRef names (the stream's, maybe
 * qualified by the stream's name or alias), or NULL if node is none.
 */
static const char *
ColumnName(Node *node, const char *alias)
{
	ColumnRef  *ref = (ColumnRef *) node;
	int			n;

	if (node == NULL || !IsA(node, ColumnRef))
		return NULL;
	n = list_length(ref->fields);
	if (n < 1 || n > 2 || !IsA(llast(ref->fields), String))
		return NULL;
	if (n == 2 && (!IsA(linitial(ref->fields), String) ||
				   strcmp(strVal(linitial(ref->fields)), alias) != 0))
		QueryRefuse(psprintf("column reference \"%s.%s\"", strVal(linitial(ref->fields)),
							 strVal(llast(ref->fields))),
					"Name the columns of the stream, alone or qualified by its name.");
	return strVal(llast(ref->fields));
}

/*
 * IsStreamColumn tells whether name is one of the columns every stream has.
 */
static bool
IsStreamColumn(const char *name)
{
	for (int i = 0; i < lengthof(stream_columns); i++)
		if (strcmp(name, stream_columns[i]) == 0)
			return true;
	return false;
}

/*
 * AddName adds name to names (n of them, at most max) unless it is there,
 * and returns its index.
 */
static int
AddName(char **names, int *n, int max, const char *name, const char *what)
{
	int			i = QueryNameIndex(names, *n, name);

	if (i >= 0)
		return i;
	if (*n >= max)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a pipeline has at most %d %s", max, what)));
	names[*n] = pstrdup(name);
	return (*n)++;
}

/*
 * ConstText returns the text of a string literal, maybe cast
 * ('10 minutes'::interval), or NULL.
 */
static const char *
ConstText(Node *node)
{
	if (node != NULL && IsA(node, TypeCast))
		node = ((TypeCast *) node)->arg;
	if (node == NULL || !IsA(node, A_Const) || ((A_Const *) node)->isnull ||
		!IsA(&((A_Const *) node)->val, String))
		return NULL;
	return strVal(&((A_Const *) node)->val);
}

/*
 * FuncName returns the name of a function call, unqualified or in
 * pg_catalog, or NULL.
 */
static const char *
FuncName(FuncCall *fc)
{
	int			n = list_length(fc->funcname);

	if (n == 2 && strcmp(strVal(linitial(fc->funcname)), "pg_catalog") != 0)
		return NULL;
	if (n < 1 || n > 2)
		return NULL;
	return strVal(llast(fc->funcname));
}

/* A scan of SQL text by PostgreSQL's own scanner. */
typedef struct QueryScan
{
	core_yy_extra_type extra;
	core_yyscan_t scanner;
	int			depth;			/* of parentheses and brackets, after the
								 * token */
} QueryScan;

static void
ScanStart(QueryScan *scan, const char *text)
{
	scan->scanner = scanner_init(text, &scan->extra, &ScanKeywords, ScanKeywordTokens);
	scan->depth = 0;
}

/*
 * ScanNext returns the next token, 0 at the end, and its location.
 */
static int
ScanNext(QueryScan *scan, int *location)
{
	core_YYSTYPE yylval;
	YYLTYPE		yylloc;
	int			tok = core_yylex(&yylval, &yylloc, scan->scanner);

	if (tok == '(' || tok == '[')
		scan->depth++;
	else if (tok == ')' || tok == ']')
		scan->depth--;
	*location = yylloc;
	return tok;
}

/*
 * CutText returns text[start, end) without trailing blanks, to be set in
 * SQL of exactonce's: a comment it ends with ends with its line, so that it
 * cannot swallow what follows.
 */
static char *
CutText(const char *text, int start, int end)
{
	char	   *cut;

	while (end > start && scanner_isspace(text[end - 1]))
		end--;
	cut = pnstrdup(text +start, end - start);
	return strstr(cut, "--") != NULL ? psprintf("%s\n", cut) : cut;
}

/*
 * ExprText returns the text of an expression of the plan's query, as
 * PostgreSQL's scanner cuts it: from its first token to the comma,
 * parenthesis or clause at its depth that ends it.  The text must parse
 * back to the same expression, or the query is refused: it becomes the
 * expression of a generated column.
 */
static char *
ExprText(QueryPlan *plan, Node *node)
{
	int			start = exprLocation(node);
	QueryScan	scan;
	int			tok;
	int			at = 0;
	char	   *text;
	List	   *raw;
	ResTarget  *rt = NULL;

	if (start < 0)
		QueryRefuse("an expression without a place in the query", "Write the expression out.");
	ScanStart(&scan, plan->query + start);
	while ((tok = ScanNext(&scan, &at)) != 0 && scan.depth >= 0 &&
		   !(scan.depth == 0 && (tok == ',' || tok == AS || tok == FROM || tok == WHERE ||
								 tok == GROUP_P || tok == HAVING || tok == ORDER || tok == ';')))
		;
	scanner_finish(scan.scanner);
	text = CutText(plan->query, start, tok == 0 ? (int) strlen(plan->query) : start + at);

	raw = raw_parser(psprintf("SELECT %s", text), RAW_PARSE_DEFAULT);
	if (list_length(raw) == 1 && IsA(linitial_node(RawStmt, raw)->stmt, SelectStmt) &&
		list_length(((SelectStmt *) linitial_node(RawStmt, raw)->stmt)->targetList) == 1)
		rt = linitial_node(ResTarget, ((SelectStmt *) linitial_node(RawStmt, raw)->stmt)->targetList);
	if (rt == NULL || rt->name != NULL || !equal(rt->val, node))
		QueryRefuse(psprintf("expression \"%s\"", text),
					"Name a column of the select list with AS, and write expressions whole.");
	return text;
}

/*
 * AddGenerated adds a column of the queue generated by expr (SQL), named
 * after prefix and the expression, and returns its name.
 */
static const char *
AddGenerated(QueryPlan *plan, const char *prefix, const char *type, char *expr, Node *node)
{
	const char *name = psprintf("exactonce_%s_%08x", prefix,
								hash_bytes((const unsigned char *) expr, strlen(expr)));

	for (int i = 0; i < plan->ngenerated; i++)
		if (strcmp(plan->generated[i].name, name) == 0)
			return name;
	if (plan->ngenerated >= QUERY_MAX_GENERATED)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a pipeline declared as a query computes at most %d columns", QUERY_MAX_GENERATED)));
	plan->generated[plan->ngenerated++] = (QueryGenerated)
	{
		name, type, expr, node
	};
	return name;
}

/*
 * IsWindow tells whether node is a date_bin() or date_trunc() call of
 * event_time.
 */
static bool
IsWindow(Node *node, const char *alias)
{
	FuncCall   *fc = (FuncCall *) node;
	const char *name;
	const char *col;

	if (node == NULL || !IsA(node, FuncCall))
		return false;
	name = FuncName(fc);
	col = list_length(fc->args) >= 2 ? ColumnName(lsecond(fc->args), alias) : NULL;
	return name != NULL && col != NULL && strcmp(col, "event_time") == 0 &&
		((strcmp(name, "date_bin") == 0 && list_length(fc->args) == 3) ||
		 (strcmp(name, "date_trunc") == 0 && list_length(fc->args) <= 3));
}

/*
 * TruncWidth returns the width of the windows of date_trunc(unit,
 * event_time, 'UTC'): a unit of fixed length, up to a day, in UTC, where
 * they start on the unit's grid from 1970-01-01 00:00 as the pipeline's
 * windows do.
 */
static const char *
TruncWidth(FuncCall *fc)
{
	static const char *const units[][2] = {
		{"microseconds", "1 microsecond"}, {"milliseconds", "1 millisecond"},
		{"second", "1 second"}, {"minute", "1 minute"}, {"hour", "1 hour"}, {"day", "1 day"}
	};
	const char *unit = ConstText(linitial(fc->args));
	const char *zone = list_length(fc->args) == 3 ? ConstText(lthird(fc->args)) : NULL;

	if (list_length(fc->args) == 2)
		QueryRefuse("date_trunc() of event_time without a time zone",
					"It truncates in the session's TimeZone: write date_trunc('hour', event_time, 'UTC').");
	if (zone == NULL || (pg_strcasecmp(zone, "UTC") != 0 && pg_strcasecmp(zone, "Etc/UTC") != 0))
		QueryRefuse(psprintf("date_trunc() in time zone %s", zone ? zone : "(not a literal)"),
					"The windows of a pipeline are cut in UTC: write date_trunc('hour', event_time, 'UTC'), or date_bin() with an origin on the grid.");
	for (int i = 0; unit != NULL && i < lengthof(units); i++)
		if (pg_strcasecmp(unit, units[i][0]) == 0 ||
			(strlen(unit) == strlen(units[i][0]) + 1 && pg_strncasecmp(unit, units[i][0], strlen(units[i][0])) == 0 &&
			 (unit[strlen(units[i][0])] == 's' || unit[strlen(units[i][0])] == 'S')))
			return units[i][1];
	QueryRefuse(psprintf("date_trunc('%s', ...)", unit ? unit : "?"),
				"A window has one width: truncate to a microsecond, millisecond, second, minute, hour or day, or write date_bin('7 days', event_time, '1970-01-01 00:00+00').");
	return NULL;				/* not reached */
}

/*
 * TakeWindow takes the window of a date_bin(stride, event_time, origin)
 * key: a stride of days and time, and an origin on its grid from
 * 1970-01-01 00:00 UTC, where the pipeline's windows start; or of a
 * date_trunc(unit, event_time, 'UTC') key, which is date_bin() by the unit
 * from there.
 */
static void
TakeWindow(QueryPlan *plan, Node *node)
{
	FuncCall   *fc = (FuncCall *) node;
	bool		trunc = strcmp(FuncName(fc), "date_trunc") == 0;
	const char *stride = trunc ? TruncWidth(fc) : ConstText(linitial(fc->args));
	const char *origin = trunc ? "1970-01-01 00:00+00" : ConstText(lthird(fc->args));
	const int64 epoch = -((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE)) * USECS_PER_DAY;
	int64		width;
	TimestampTz at;

	if (plan->window != NULL)
	{
		if (!equal(plan->window, node))
			QueryRefuse("a second window", "A pipeline has one event-time window.");
		return;
	}
	if (stride == NULL || origin == NULL)
		QueryRefuse("a date_bin() whose stride or origin is not a literal",
					"Write the stride and the origin as literals: date_bin('10 minutes', event_time, '1970-01-01 00:00+00').");
	plan->width = DirectFunctionCall3(interval_in, CStringGetDatum(stride),
									  ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	width = PipelineIntervalMicros("the stride of date_bin()", DatumGetIntervalP(plan->width));
	at = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in, CStringGetDatum(origin),
												 ObjectIdGetDatum(InvalidOid),
												 Int32GetDatum(-1)));
	if (width <= 0 || TIMESTAMP_NOT_FINITE(at) || (at - epoch) % width != 0)
		QueryRefuse(psprintf("date_bin() with origin '%s'", origin),
					"The windows of a pipeline start on the stride's grid from 1970-01-01 00:00 UTC: give that origin, '1970-01-01 00:00+00'.");
	plan->window = node;
}

/*
 * QueryNameIndex returns the index of name among n names, or -1.
 */
int
QueryNameIndex(char **names, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

/*
 * IsDimension tells whether name is a dimension of the plan so far.
 */
static bool
IsDimension(QueryPlan *plan, const char *name)
{
	return QueryNameIndex(plan->dims, plan->ndims, name) >= 0;
}

/*
 * TakeKey takes one key of the GROUP BY: a dimension, or the window; it
 * returns the name create_pipeline's grouping_sets knows it by.
 */
static const char *
TakeKey(QueryPlan *plan, Node *node, const char *alias, List *targets, bool first)
{
	const char *name;

	/* GROUP BY n: the n-th column of the select list */
	if (IsA(node, A_Const) && IsA(&((A_Const *) node)->val, Integer))
	{
		int			n = intVal(&((A_Const *) node)->val);

		if (n < 1 || n > list_length(targets))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
					 errmsg("GROUP BY position %d is not in select list", n)));
		node = lfirst_node(ResTarget, list_nth_cell(targets, n - 1))->val;
	}
	name = ColumnName(node, alias);

	/* a key may name a column of the select list by its alias */
	if (name != NULL)
	{
		ListCell   *lc;

		foreach(lc, targets)
		{
			ResTarget  *rt = lfirst_node(ResTarget, lc);

			if (rt->name != NULL && strcmp(rt->name, name) == 0 && !IsA(rt->val, ColumnRef) &&
				!IsDimension(plan, name))
			{
				node = rt->val;
				name = NULL;
				break;
			}
		}
	}
	if (name == NULL && IsWindow(node, alias))
	{
		if (!first)
			QueryRefuse("a window that is not the first key of a ROLLUP",
						"Write GROUP BY ROLLUP (date_bin(...), ...) or ROLLUP (date_trunc(...), ...): a window is the first level of a rollup.");
		TakeWindow(plan, node);
		return PIPELINE_WINDOW_DIM;
	}
	if (name == NULL)
	{
		/* an expression: a dimension the queue computes from the others */
		name = AddGenerated(plan, "k", "pg_catalog.text NOT NULL",
							psprintf("(%s)::pg_catalog.text", ExprText(plan, node)), node);
		AddName(plan->dims, &plan->ndims, EXACTONCE_MAX_DIMENSIONS - 1, name, "dimensions");
		return name;
	}
	if (IsStreamColumn(name))
		QueryRefuse(psprintf("grouping by column \"%s\"", name),
					"key, version, value, deleted and event_time are the event's own; group by the columns that place it in cells.");
	AddName(plan->dims, &plan->ndims, EXACTONCE_MAX_DIMENSIONS - 1, name, "dimensions");
	return name;
}

/*
 * AppendSet appends one grouping set, "(a, b)", to the grouping.
 */
static void
AppendSet(QueryPlan *plan, List *keys, const char *alias, List *targets, bool *first)
{
	ListCell   *lc;

	appendStringInfo(&plan->grouping, "%s(", plan->grouping.len > 0 ? ", " : "");
	foreach(lc, keys)
	{
		appendStringInfo(&plan->grouping, "%s%s", foreach_current_index(lc) > 0 ? ", " : "",
						 TakeKey(plan, lfirst(lc), alias, targets, *first));
		*first = false;
	}
	appendStringInfoChar(&plan->grouping, ')');
	if (keys == NIL)
		plan->has_empty_set = true;
}

/*
 * TakeGroupBy takes the GROUP BY: keys, one ROLLUP or CUBE of keys, or
 * GROUPING SETS of lists of keys.
 */
static void
TakeGroupBy(QueryPlan *plan, SelectStmt *sel, const char *alias)
{
	GroupingSet *gs = list_length(sel->groupClause) == 1 &&
	IsA(linitial(sel->groupClause), GroupingSet) ? linitial(sel->groupClause) : NULL;
	ListCell   *lc;
	bool		first = true;

	initStringInfo(&plan->grouping);
	if (sel->groupDistinct)
		QueryRefuse("GROUP BY DISTINCT", "Write each grouping set once.");
	if (gs == NULL)
	{
		foreach(lc, sel->groupClause)
			if (IsA(lfirst(lc), GroupingSet))
			QueryRefuse("grouping sets beside other keys",
						"Write GROUP BY ROLLUP (...), CUBE (...) or GROUPING SETS (...) alone.");
		if (sel->groupClause == NIL)
			QueryRefuse("a query without GROUP BY",
						"Group by the dimensions of the cells: GROUP BY ROLLUP (...), for example; GROUPING SETS (()) is the grand total alone.");
		foreach(lc, sel->groupClause)
			if (IsWindow(lfirst(lc), alias))
			QueryRefuse("a window that is not the first key of a ROLLUP",
						"Write GROUP BY ROLLUP (date_bin(...), ...) or ROLLUP (date_trunc(...), ...): a window is the first level of a rollup.");
		AppendSet(plan, sel->groupClause, alias, sel->targetList, &first);
		return;
	}
	if (gs->kind == GROUPING_SET_ROLLUP || gs->kind == GROUPING_SET_CUBE)
	{
		foreach(lc, gs->content)
		{
			if (IsA(lfirst(lc), GroupingSet))
				QueryRefuse("a composite key in ROLLUP or CUBE", "List single keys.");
			(void) TakeKey(plan, lfirst(lc), alias, sel->targetList,
						   first && gs->kind == GROUPING_SET_ROLLUP);
			first = false;
		}
		if (plan->window != NULL && gs->kind == GROUPING_SET_CUBE)
			QueryRefuse("a window in a CUBE", "A window is the first level of a ROLLUP.");
		appendStringInfoString(&plan->grouping, gs->kind == GROUPING_SET_ROLLUP ? "rollup" : "cube");
		plan->has_empty_set = true;
		return;
	}
	Assert(gs->kind == GROUPING_SET_SETS);
	foreach(lc, gs->content)
	{
		Node	   *set = lfirst(lc);
		GroupingSet *inner = IsA(set, GroupingSet) ? (GroupingSet *) set : NULL;

		if (IsA(set, RowExpr))
			AppendSet(plan, ((RowExpr *) set)->args, alias, sel->targetList, &first);
		else if (inner == NULL)
			AppendSet(plan, list_make1(set), alias, sel->targetList, &first);
		else if (inner->kind == GROUPING_SET_SIMPLE || inner->kind == GROUPING_SET_EMPTY)
			AppendSet(plan, inner->content, alias, sel->targetList, &first);
		else
			QueryRefuse("ROLLUP or CUBE inside GROUPING SETS", "List the grouping sets one by one.");
	}
	if (plan->window != NULL)
		QueryRefuse("a window in GROUPING SETS", "A window is the first level of a ROLLUP.");
}

/*
 * AddColumn adds a column of the result.
 */
static void
AddColumn(QueryPlan *plan, const char *name, char *expr, const char *empty, const char *comment)
{
	if (plan->ncols >= QUERY_MAX_COLUMNS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a pipeline declared as a query has at most %d columns", QUERY_MAX_COLUMNS)));
	for (int i = 0; i < plan->ncols; i++)
		if (strcmp(plan->cols[i].name, name) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("the query has two columns named \"%s\"", name),
					 errhint("Name each column of the select list: min(value) AS value_min, for example.")));
	plan->cols[plan->ncols++] = (QueryColumn)
	{
		name, expr, empty, comment
	};
}

static void TakeAggregate(QueryPlan *plan, FuncCall *fc, const char *name, const char *alias);

/* What MeasureColumns needs: the plan, and the stream's alias. */
typedef struct MeasureWalk
{
	QueryPlan  *plan;
	const char *alias;
} MeasureWalk;

/*
 * MeasureColumns makes measures (numeric) of the columns an aggregated
 * expression names that the pipeline does not keep otherwise.
 */
static bool
MeasureColumns(Node *node, MeasureWalk *w)
{
	const char *col;

	if (node == NULL)
		return false;
	col = IsA(node, ColumnRef) ? ColumnName(node, w->alias) : NULL;
	if (col != NULL)
	{
		if (!IsStreamColumn(col) && !IsDimension(w->plan, col))
			AddName(w->plan->measures, &w->plan->nmeasures, EXACTONCE_MAX_MEASURES, col, "measures");
		return false;
	}
	return raw_expression_tree_walker(node, MeasureColumns, (void *) w);
}

/*
 * TakeComputed takes an aggregate with FILTER, or of an expression: the
 * queue computes from each event what it aggregates, NULL where FILTER
 * leaves the event out, into a measure (or a text column counted
 * distinct), which the aggregate then aggregates as any other.
 */
static void
TakeComputed(QueryPlan *plan, FuncCall *fc, const char *fn, const char *name, const char *alias)
{
	Node	   *arg = fc->agg_star ? NULL : linitial(fc->args);
	const char *col = arg ? ColumnName(arg, alias) : NULL;
	char	   *what;
	const char *gen;
	FuncCall   *plain = copyObject(fc);
	ColumnRef  *ref = makeNode(ColumnRef);
	MeasureWalk w = {plan, alias};

	if (fc->agg_distinct && col == NULL)
		QueryRefuse("count(DISTINCT) of an expression", "Count the distinct values of a column.");
	if (arg == NULL || (col != NULL && !fc->agg_distinct && strcmp(fn, "count") == 0 &&
						(IsStreamColumn(col) || IsDimension(plan, col))))
		what = "1";				/* count of what is never NULL */
	else if (col != NULL && (IsDimension(plan, col) || (IsStreamColumn(col) && strcmp(col, "value") != 0)) &&
			 !fc->agg_distinct)
		QueryRefuse(psprintf("%s(%s)", fn, col), "Aggregate value or a numeric measure.");
	else
	{
		what = col != NULL ? (char *) quote_identifier(col) : ExprText(plan, arg);
		if (!fc->agg_distinct)
			(void) MeasureColumns(arg, &w);
	}
	if (fc->agg_filter != NULL && plan->every_filter != NULL)
		what = psprintf("CASE WHEN (%s) AND (%s) THEN %s END", plan->every_filter,
						ExprText(plan, fc->agg_filter), what);
	else if (fc->agg_filter != NULL || plan->every_filter != NULL)
		what = psprintf("CASE WHEN (%s) THEN %s END",
						fc->agg_filter ? ExprText(plan, fc->agg_filter) : plan->every_filter, what);
	if (fc->agg_distinct)
		gen = AddGenerated(plan, "d", "pg_catalog.text", psprintf("(%s)::pg_catalog.text", what),
						   (Node *) fc);
	else
		gen = AddGenerated(plan, "m", "pg_catalog.numeric", psprintf("(%s)::pg_catalog.numeric", what),
						   (Node *) fc);
	ref->fields = list_make1(makeString(pstrdup(gen)));
	plain->args = list_make1(ref);
	plain->agg_filter = NULL;
	plain->agg_star = false;
	plan->computed = true;
	TakeAggregate(plan, plain, name, alias);
	plan->computed = false;
}

/*
 * TakeAggregate takes one aggregate of the select list.
 */
static void
TakeAggregate(QueryPlan *plan, FuncCall *fc, const char *name, const char *alias)
{
	const char *fn = FuncName(fc);
	const char *col = list_length(fc->args) == 1 ? ColumnName(linitial(fc->args), alias) : NULL;
	bool		of_value;
	char	   *q;

	if (fc->over != NULL)
		QueryRefuse("a window function", "Aggregate per cell with GROUP BY.");
	if (fc->agg_order != NIL || fc->agg_within_group || fc->func_variadic)
		QueryRefuse("an ordered aggregate", "Use sum, count, avg, min, max or count(DISTINCT).");
	if (fn == NULL || (strcmp(fn, "sum") != 0 && strcmp(fn, "count") != 0 &&
					   strcmp(fn, "avg") != 0 && strcmp(fn, "min") != 0 &&
					   strcmp(fn, "max") != 0))
		QueryRefuse(psprintf("function %s()", fn ? fn : NameListToString(fc->funcname)),
					"A pipeline keeps sum, count, avg, min and max of value and of numeric measures, and count(DISTINCT) of a text column.");
	if (fc->agg_star && fc->agg_filter == NULL && (plan->every_filter == NULL || plan->computed))
	{
		if (strcmp(fn, "count") != 0 || fc->agg_distinct)
			QueryRefuse(psprintf("%s(*)", fn), "count(*) counts the events of a cell.");
		AddColumn(plan, name, "keys", "0::pg_catalog.int8", "count(*): the events of the cell (latest mode: its live keys)");
		return;
	}
	if (fc->agg_filter != NULL || (plan->every_filter != NULL && !plan->computed) ||
		(col == NULL && list_length(fc->args) == 1))
	{
		TakeComputed(plan, fc, fn, name, alias);
		return;
	}
	if (col == NULL)
		QueryRefuse(psprintf("%s() of more than one argument", fn), "Aggregate one column or expression.");
	if (fc->agg_distinct)
	{
		if (strcmp(fn, "count") != 0)
			QueryRefuse(psprintf("%s(DISTINCT)", fn), "Only count(DISTINCT) is kept exactly.");
		if (IsStreamColumn(col))
			QueryRefuse(psprintf("count(DISTINCT %s)", col), "Count the distinct values of a text column of your own.");
		AddName(plan->distincts, &plan->ndistinct, EXACTONCE_MAX_DISTINCT, col, "columns counted distinct");
		AddColumn(plan, name, psprintf("%s", quote_identifier(psprintf("%s_distinct", col))),
				  "0::pg_catalog.int8", psprintf("count(DISTINCT %s): the distinct values of the cell's events", col));
		return;
	}
	of_value = strcmp(col, "value") == 0;
	if (!of_value && (IsStreamColumn(col) || strcmp(fn, "count") == 0))
	{
		/* count of a column that is never NULL is count(*) */
		for (int i = 0; i < plan->ndims; i++)
			if (strcmp(plan->dims[i], col) == 0 && strcmp(fn, "count") == 0)
				of_value = true;
		if (strcmp(fn, "count") == 0 && IsStreamColumn(col))
			of_value = true;
		if (!of_value && IsStreamColumn(col))
			QueryRefuse(psprintf("%s(%s)", fn, col), "Aggregate value or a numeric measure.");
	}
	if (of_value)
	{
		if (strcmp(fn, "sum") == 0)
			AddColumn(plan, name, "total", "NULL::pg_catalog.numeric", "sum(value): the total of the cell");
		else if (strcmp(fn, "count") == 0)
			AddColumn(plan, name, "keys", "0::pg_catalog.int8", psprintf("count(%s): the events of the cell", col));
		else if (strcmp(fn, "avg") == 0)
			AddColumn(plan, name, "total OPERATOR(pg_catalog./) NULLIF(keys, 0)",
					  "NULL::pg_catalog.numeric", "avg(value): total / keys");
		else
		{
			AddName(plan->minmax, &plan->nminmax, 1 + EXACTONCE_MAX_MEASURES, "value", "min_max columns");
			AddColumn(plan, name, psprintf("value_%s", fn), "NULL::pg_catalog.numeric",
					  psprintf("%s(value): kept per cell, read anew from state when it leaves", fn));
		}
		return;
	}
	AddName(plan->measures, &plan->nmeasures, EXACTONCE_MAX_MEASURES, col, "measures");
	q = psprintf("%s", col);
	if (strcmp(fn, "sum") == 0)
		AddColumn(plan, name, psprintf("CASE WHEN %s OPERATOR(pg_catalog.=) 0 THEN NULL ELSE %s END",
									   quote_identifier(psprintf("%s_count", q)),
									   quote_identifier(psprintf("%s_sum", q))),
				  "NULL::pg_catalog.numeric", psprintf("sum(%s): the measure's sum (NULL where no event has it)", q));
	else if (strcmp(fn, "count") == 0)
		AddColumn(plan, name, psprintf("%s", quote_identifier(psprintf("%s_count", q))),
				  "0::pg_catalog.int8", psprintf("count(%s): the events that have the measure", q));
	else if (strcmp(fn, "avg") == 0)
		AddColumn(plan, name, psprintf("%s OPERATOR(pg_catalog./) NULLIF(%s, 0)",
									   quote_identifier(psprintf("%s_sum", q)),
									   quote_identifier(psprintf("%s_count", q))),
				  "NULL::pg_catalog.numeric", psprintf("avg(%s): its sum / its count", q));
	else
	{
		AddName(plan->minmax, &plan->nminmax, 1 + EXACTONCE_MAX_MEASURES, q, "min_max columns");
		AddColumn(plan, name, psprintf("%s", quote_identifier(psprintf("%s_%s", q, fn))),
				  "NULL::pg_catalog.numeric",
				  psprintf("%s(%s): kept per cell, read anew from state when it leaves", fn, q));
	}
}

/*
 * KeyOf returns the dimension that is expression node of the GROUP BY, or
 * NULL.
 */
static const char *
KeyOf(QueryPlan *plan, Node *node)
{
	for (int i = 0; i < plan->ngenerated; i++)
		if (plan->generated[i].name[strlen("exactonce_")] == 'k' && equal(plan->generated[i].node, node))
			return plan->generated[i].name;
	return NULL;
}

/*
 * TakeTargets takes the select list: keys of the GROUP BY and aggregates.
 */
static void
TakeTargets(QueryPlan *plan, SelectStmt *sel, const char *alias)
{
	ListCell   *lc;

	foreach(lc, sel->targetList)
	{
		ResTarget  *rt = lfirst_node(ResTarget, lc);
		const char *col = ColumnName(rt->val, alias);
		const char *name = rt->name;

		if (rt->val != NULL && IsA(rt->val, ColumnRef) &&
			IsA(llast(((ColumnRef *) rt->val)->fields), A_Star))
			QueryRefuse("* in the select list", "Name the keys and the aggregates.");
		if (col != NULL)
		{
			bool		dim = false;

			for (int i = 0; i < plan->ndims; i++)
				dim |= strcmp(plan->dims[i], col) == 0;
			if (!dim)
				ereport(ERROR,
						(errcode(ERRCODE_GROUPING_ERROR),
						 errmsg("column \"%s\" must appear in the GROUP BY clause or be used in an aggregate function", col)));
			AddColumn(plan, name ? name : col, psprintf("%s", quote_identifier(col)), "NULL::pg_catalog.text",
					  psprintf("the dimension %s (NULL where the grouping set leaves it out)", col));
		}
		else if (IsWindow(rt->val, alias))
		{
			if (plan->window == NULL || !equal(plan->window, rt->val))
				ereport(ERROR,
						(errcode(ERRCODE_GROUPING_ERROR),
						 errmsg("the window of the select list must be the one of the GROUP BY")));
			AddColumn(plan, name ? name : FigureColname(rt->val), "CAST(window_start AS pg_catalog.timestamptz)",
					  "NULL::pg_catalog.timestamptz", "the start of the event-time window");
		}
		else if (KeyOf(plan, rt->val) != NULL)
			AddColumn(plan, name ? name : FigureColname(rt->val), pstrdup(quote_identifier(KeyOf(plan, rt->val))),
					  "NULL::pg_catalog.text", "a key the queue computes from each event (NULL where the grouping set leaves it out)");
		else if (rt->val != NULL && IsA(rt->val, FuncCall))
			TakeAggregate(plan, (FuncCall *) rt->val, name ? name : FigureColname(rt->val), alias);
		else
			QueryRefuse("an expression in the select list",
						"Select the keys of the GROUP BY and sum, count, avg, min, max or count(DISTINCT) of the stream's columns.");
	}
}

/* What WhereColumns needs: the plan, and the stream's alias. */
typedef struct WhereWalk
{
	QueryPlan  *plan;
	const char *alias;
} WhereWalk;

/*
 * IsKeptColumn tells whether the pipeline's queue has column name, from
 * the query's keys and aggregates.
 */
static bool
IsKeptColumn(QueryPlan *plan, const char *name)
{
	for (int i = 0; i < plan->ndims; i++)
		if (strcmp(plan->dims[i], name) == 0)
			return true;
	for (int i = 0; i < plan->nmeasures; i++)
		if (strcmp(plan->measures[i], name) == 0)
			return true;
	for (int i = 0; i < plan->ndistinct; i++)
		if (strcmp(plan->distincts[i], name) == 0)
			return true;
	return IsStreamColumn(name);
}

/*
 * WhereColumns checks the WHERE clause: columns named alone (a generated
 * column takes no qualified names), functions and types unqualified or in
 * pg_catalog; it notes the columns that only the WHERE names.
 */
static bool
WhereColumns(Node *node, WhereWalk *w)
{
	if (node == NULL)
		return false;
	if (IsA(node, ColumnRef))
	{
		ColumnRef  *ref = (ColumnRef *) node;
		const char *name;

		if (list_length(ref->fields) != 1 || !IsA(linitial(ref->fields), String))
			QueryRefuse("a qualified column in WHERE, FILTER or a computed key",
						"Name the columns of the stream alone in what the queue computes.");
		name = strVal(linitial(ref->fields));
		if (strcmp(name, EV_WHERE_COLUMN) == 0 || strncmp(name, "pg_", 3) == 0 ||
			strcmp(name, "ingest_slot") == 0 || strcmp(name, "ingest_id") == 0)
			QueryRefuse(psprintf("column \"%s\" in WHERE", name), "Name a column of the events.");
		if (!IsKeptColumn(w->plan, name))
			AddName(w->plan->extra, &w->plan->nextra, EXACTONCE_MAX_DIMENSIONS, name,
					"columns that only WHERE names");
		return false;
	}
	if (IsA(node, FuncCall) && list_length(((FuncCall *) node)->funcname) > 1 &&
		FuncName((FuncCall *) node) == NULL)
		QueryRefuse("a function of another schema in WHERE", "Use the built-in functions.");
	if (IsA(node, TypeCast) && list_length(((TypeCast *) node)->typeName->names) > 1 &&
		strcmp(strVal(linitial(((TypeCast *) node)->typeName->names)), "pg_catalog") != 0)
		QueryRefuse("a type of another schema in WHERE", "Use the built-in types.");
	if (IsA(node, A_Expr) && list_length(((A_Expr *) node)->name) > 1 &&
		strcmp(strVal(linitial(((A_Expr *) node)->name)), "pg_catalog") != 0)
		QueryRefuse("an operator of another schema in WHERE", "Use the built-in operators.");
	return raw_expression_tree_walker(node, WhereColumns, (void *) w);
}

/*
 * WhereText returns the text of the WHERE clause of query, as PostgreSQL's
 * own scanner cuts it: from the WHERE at depth 0 to the next clause.
 */
static char *
WhereText(const char *query)
{
	QueryScan	scan;
	int			tok;
	int			at = 0;
	int			start = -1;
	int			end = strlen(query);

	ScanStart(&scan, query);
	while ((tok = ScanNext(&scan, &at)) != 0)
	{
		if (scan.depth != 0)
			continue;
		if (tok == WHERE && start < 0)
			start = at + strlen("where");
		else if (start >= 0 &&
				 (tok == GROUP_P || tok == HAVING || tok == WINDOW || tok == ORDER ||
				  tok == LIMIT || tok == OFFSET || tok == FETCH || tok == FOR ||
				  tok == UNION || tok == INTERSECT || tok == EXCEPT || tok == ';'))
		{
			end = at;
			break;
		}
	}
	scanner_finish(scan.scanner);
	if (start < 0)
		elog(ERROR, "could not find the WHERE clause of the query");
	return CutText(query, start, end);
}

/*
 * WhereClause parses the text of a WHERE clause.
 */
static Node *
WhereClause(const char *where)
{
	List	   *raw = raw_parser(psprintf("SELECT WHERE %s", where), RAW_PARSE_DEFAULT);

	return ((SelectStmt *) linitial_node(RawStmt, raw)->stmt)->whereClause;
}

/*
 * QueryConjuncts cuts the text of a WHERE clause at its ANDs of depth 0, as
 * PostgreSQL's own scanner finds them, into the texts of the conditions
 * ANDed; where that is not how the clause parses (an OR beside the ANDs,
 * a BETWEEN) the clause is one condition.  Each condition comes with its
 * parse tree, for equal(), in *nodes.
 */
List *
QueryConjuncts(const char *where, List **nodes)
{
	QueryScan	scan;
	int			tok;
	int			at = 0;
	int			start = 0;
	bool		between = false;
	List	   *texts = NIL;
	Node	   *whole = WhereClause(where);
	List	   *args;
	ListCell   *lc;

	ScanStart(&scan, where);
	while ((tok = ScanNext(&scan, &at)) != 0)
	{
		if (scan.depth == 0 && tok == BETWEEN)
			between = true;
		else if (scan.depth == 0 && tok == AND)
		{
			texts = lappend(texts, CutText(where, start, at));
			start = at + strlen("and");
		}
	}
	scanner_finish(scan.scanner);
	texts = lappend(texts, CutText(where, start, strlen(where)));
	args = IsA(whole, BoolExpr) && ((BoolExpr *) whole)->boolop == AND_EXPR ?
		((BoolExpr *) whole)->args : list_make1(whole);
	*nodes = NIL;
	if (!between && list_length(texts) == list_length(args))
	{
		foreach(lc, texts)
		{
			Node	   *node = WhereClause(lfirst(lc));

			if (!equal(node, list_nth(args, foreach_current_index(lc))))
				break;
			*nodes = lappend(*nodes, node);
		}
		if (list_length(*nodes) == list_length(texts))
			return texts;
	}
	*nodes = list_make1(whole);
	return list_make1(pstrdup(where));
}

/*
 * QueryPlanOf takes a query apart, or refuses it.
 */
void
QueryPlanOf(QueryPlan *plan, const char *query, bool latest)
{
	List	   *raw = raw_parser(query, RAW_PARSE_DEFAULT);
	SelectStmt *sel;
	RangeVar   *from;
	const char *alias;

	plan->query = query;

	if (list_length(raw) != 1 || !IsA(linitial_node(RawStmt, raw)->stmt, SelectStmt))
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("a pipeline's query must be one SELECT"),
				 errhint("SELECT <keys>, <aggregates> FROM stream GROUP BY ...")));
	sel = (SelectStmt *) linitial_node(RawStmt, raw)->stmt;
	if (sel->op != SETOP_NONE)
		QueryRefuse("UNION, INTERSECT or EXCEPT", "Declare a pipeline per query.");
	if (sel->withClause != NULL)
		QueryRefuse("WITH", "Write the query over stream itself.");
	if (sel->valuesLists != NIL || sel->intoClause != NULL || sel->lockingClause != NIL)
		QueryRefuse("VALUES, INTO or FOR UPDATE", "Write SELECT ... FROM stream GROUP BY ....");
	if (list_length(sel->fromClause) != 1 || !IsA(linitial(sel->fromClause), RangeVar))
		QueryRefuse("a FROM clause other than stream", "Read FROM stream alone: no joins, no subqueries.");
	from = linitial_node(RangeVar, sel->fromClause);
	if (from->schemaname != NULL || from->catalogname != NULL || strcmp(from->relname, "stream") != 0)
		QueryRefuse(psprintf("FROM %s", from->relname), "Read FROM stream: the pipeline's events.");
	alias = from->alias ? from->alias->aliasname : "stream";
	if (sel->havingClause != NULL)
		QueryRefuse("HAVING", "Filter the rows of the result view when you read them.");
	if (sel->distinctClause != NIL)
		QueryRefuse("SELECT DISTINCT", "The cells of a pipeline are distinct by their keys.");
	if (sel->windowClause != NIL)
		QueryRefuse("WINDOW", "Aggregate per cell with GROUP BY.");
	if (sel->sortClause != NIL || sel->limitCount != NULL || sel->limitOffset != NULL)
		QueryRefuse("ORDER BY, LIMIT or OFFSET", "Order and limit the rows of the result view when you read them.");

	/*
	 * In accumulate mode a reading the WHERE leaves out is in no aggregate:
	 * each aggregate gets the WHERE as a FILTER, and the result shows the
	 * cells that have a reading it keeps (and the grand total, always).
	 */
	if (sel->whereClause != NULL && !latest)
		plan->every_filter = WhereText(query);
	TakeGroupBy(plan, sel, alias);
	TakeTargets(plan, sel, alias);
	if (plan->every_filter != NULL)
	{
		WhereWalk	w = {plan, alias};
		const char *kept = AddGenerated(plan, "m", "pg_catalog.numeric",
										psprintf("(CASE WHEN (%s) THEN 1 END)::pg_catalog.numeric",
												 plan->every_filter), sel->whereClause);

		(void) WhereColumns(sel->whereClause, &w);
		AddName(plan->measures, &plan->nmeasures, EXACTONCE_MAX_MEASURES, kept, "measures");
		plan->row_filter = psprintf("(%s OPERATOR(pg_catalog.>) 0 OR level OPERATOR(pg_catalog.=) 0)",
									quote_identifier(psprintf("%s_count", kept)));
	}
	else if (sel->whereClause != NULL)
	{
		WhereWalk	w = {plan, alias};

		(void) WhereColumns(sel->whereClause, &w);
		plan->where = WhereText(query);
		plan->where_node = sel->whereClause;
	}
	for (int i = 0; i < plan->ngenerated; i++)
	{
		WhereWalk	w = {plan, alias};

		(void) WhereColumns(plan->generated[i].node, &w);
	}
}

/*
 * TextArrayOf makes a text[] of n names.
 */
Datum
QueryTextArray(char **names, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = CStringGetTextDatum(names[i]);
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * QueryResultView is the DDL of view <name>.result: the query's columns
 * over the aggregates, and the row the empty grouping set has over no
 * events when there is none.
 */
char *
QueryResultView(QueryPlan *plan, const char *name, const char *query)
{
	StringInfoData sql;
	const char *s = quote_identifier(name);

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE VIEW %s.result AS SELECT ", s);
	for (int i = 0; i < plan->ncols; i++)
		appendStringInfo(&sql, "%s%s AS %s", i > 0 ? ", " : "", plan->cols[i].expr,
						 quote_identifier(plan->cols[i].name));
	appendStringInfo(&sql, " FROM %s.aggregates", s);
	if (plan->only_sets != NULL || plan->row_filter != NULL)
		appendStringInfo(&sql, " WHERE %s%s%s", plan->only_sets ? plan->only_sets : "",
						 plan->only_sets && plan->row_filter ? " AND " : "",
						 plan->row_filter ? plan->row_filter : "");
	if (plan->has_empty_set)
	{
		appendStringInfoString(&sql, " UNION ALL SELECT ");
		for (int i = 0; i < plan->ncols; i++)
			appendStringInfo(&sql, "%s%s", i > 0 ? ", " : "", plan->cols[i].empty);
		appendStringInfo(&sql, " WHERE NOT EXISTS (SELECT FROM %s.aggregates WHERE level OPERATOR(pg_catalog.=) 0)", s);
	}
	appendStringInfo(&sql, ";\nCOMMENT ON VIEW %s.result IS %s;\n", s,
					 quote_literal_cstr(psprintf("exactonce: the query of pipeline %s over its de-duplicated stream: %s",
												 name, query)));
	for (int i = 0; i < plan->ncols; i++)
		appendStringInfo(&sql, "COMMENT ON COLUMN %s.result.%s IS %s;\n", s,
						 quote_identifier(plan->cols[i].name), quote_literal_cstr(plan->cols[i].comment));
	return sql.data;
}

/*
 * GeneratedContext names the expression of the query whose column of the
 * queue PostgreSQL refused (not immutable, of no type that casts, ...).
 */
static void
GeneratedContext(void *arg)
{
	errcontext("computing %s for each event of the queue, as the pipeline's query asks", (char *) arg);
}

/*
 * QueryAddColumns gives the queue the columns the pipeline computes from
 * its events, as the calling role, with search_path pg_catalog alone: the
 * expressions, which run in every producer's INSERT, can reach built-in
 * objects only.  First the columns only those expressions name (text);
 * then each generated key and aggregated expression, which replaces the
 * plain column create_pipeline made (the guard on exactonce's columns lets
 * this one through, catalog/utility.c); last the boolean column of the
 * WHERE.
 */
void
QueryAddColumns(QueryPlan *plan, const char *name)
{
	StringInfoData sql;
	const char *s = quote_identifier(name);
	int			nestlevel = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	initStringInfo(&sql);
	for (int i = 0; i < plan->nextra; i++)
		appendStringInfo(&sql, "ALTER TABLE %s.ingest ADD COLUMN %s text;\n", s,
						 quote_identifier(plan->extra[i]));
	if (sql.len > 0)
		UtilityExecOwn(sql.data);
	for (int i = 0; i < plan->ngenerated; i++)
	{
		ErrorContextCallback context = {error_context_stack, GeneratedContext, plan->generated[i].expr};

		error_context_stack = &context;
		resetStringInfo(&sql);
		appendStringInfo(&sql, "ALTER TABLE %1$s.ingest DROP COLUMN %2$s;\n"
						 "ALTER TABLE %1$s.ingest ADD COLUMN %2$s %3$s GENERATED ALWAYS AS (%4$s) STORED;\n"
						 "COMMENT ON COLUMN %1$s.ingest.%2$s IS %5$s;\n",
						 s, plan->generated[i].name, plan->generated[i].type, plan->generated[i].expr,
						 quote_literal_cstr(psprintf("exactonce: computed from each event by the pipeline's query: %s",
													 plan->generated[i].expr)));
		UtilityExecOwn(sql.data);
		error_context_stack = context.previous;
	}
	resetStringInfo(&sql);
	if (plan->where != NULL)
		appendStringInfo(&sql, "ALTER TABLE %s.ingest ADD COLUMN %s boolean GENERATED ALWAYS AS (%s) STORED;\n"
						 "COMMENT ON COLUMN %s.ingest.%s IS %s;\n",
						 s, EV_WHERE_COLUMN, plan->where, s, EV_WHERE_COLUMN,
						 quote_literal_cstr("exactonce: the WHERE of the pipeline's query; an event for which it is not true counts as a tombstone of its key"));
	if (sql.len > 0)
		UtilityExecOwn(sql.data);
	AtEOXact_GUC(true, nestlevel);
}

/*
 * exactonce_create_pipeline_as creates a pipeline from a query over its
 * stream, through create_pipeline, and its view result.
 */
Datum
exactonce_create_pipeline_as(PG_FUNCTION_ARGS)
{
	LOCAL_FCINFO(create, 10);
	QueryPlan  *plan = palloc0(sizeof(QueryPlan));
	char	   *name;
	char	   *query;
	int			nestlevel;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("name, query, mode and allowed_lateness of a pipeline must not be NULL")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	query = text_to_cstring(PG_GETARG_TEXT_PP(1));
	QueryPlanOf(plan, query, strcmp(text_to_cstring(PG_GETARG_TEXT_PP(2)), "latest") == 0);

	InitFunctionCallInfoData(*create, NULL, 10, InvalidOid, NULL, NULL);
	for (int i = 0; i < 10; i++)
		create->args[i].isnull = false;
	create->args[0].value = PG_GETARG_DATUM(0);
	create->args[1].value = QueryTextArray(plan->dims, plan->ndims);
	create->args[2].value = PG_GETARG_DATUM(2);
	create->args[3].value = PG_GETARG_DATUM(3);
	create->args[3].isnull = PG_ARGISNULL(3);
	create->args[4].value = QueryTextArray(plan->measures, plan->nmeasures);
	create->args[5].value = QueryTextArray(plan->minmax, plan->nminmax);
	create->args[6].value = QueryTextArray(plan->distincts, plan->ndistinct);
	create->args[7].value = plan->width;
	create->args[7].isnull = plan->window == NULL;
	create->args[8].value = PG_GETARG_DATUM(4);
	create->args[9].value = CStringGetTextDatum(plan->grouping.data);
	(void) exactonce_create_pipeline(create);

	SPI_connect();
	QueryAddColumns(plan, name);
	nestlevel = StatementPinSearchPath();
	if (SPI_execute(QueryResultView(plan, name, query), false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create the result view of pipeline \"%s\"", name);
	{
		Oid			types[2] = {TEXTOID, TEXTOID};
		Datum		values[2] = {PG_GETARG_DATUM(0), PG_GETARG_DATUM(1)};

		PipelineRegistryExec("UPDATE exactonce.pipeline SET query = $2 WHERE name OPERATOR(pg_catalog.=) $1",
							 2, types, values, 1);
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * QueryRefuseInView reports what a view of pipeline p cannot be declared with.
 */
static void
QueryRefuseInView(Pipeline *p, const char *what, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s is not supported in a view of pipeline \"%s\" declared as a query", what, p->name),
			 errhint("%s", hint)));
}

/*
 * exactonce_create_view_as creates view <name> of a pipeline from a query
 * over its stream: create_view under <name>_cells, and the query's columns
 * over it.
 */
Datum
exactonce_create_view_as(PG_FUNCTION_ARGS)
{
	LOCAL_FCINFO(create, 4);
	QueryPlan  *plan = palloc0(sizeof(QueryPlan));
	char	   *pipeline;
	char	   *name;
	char	   *query;
	char	   *cells;
	Pipeline   *p;
	StringInfoData sql;
	int			nestlevel;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline, name and query of a view must not be NULL")));
	pipeline = text_to_cstring(PG_GETARG_TEXT_PP(0));
	name = text_to_cstring(PG_GETARG_TEXT_PP(1));
	query = text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (strlen(name) == 0 || strlen(name) + strlen("_cells") >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid view name \"%s\"", name),
				 errdetail("A view declared as a query has 1 to %d characters.",
						   (int) (NAMEDATALEN - 1 - strlen("_cells")))));
	cells = psprintf("%s_cells", name);

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(pipeline, true);
	QueryPlanOf(plan, query, true);
	if (plan->ngenerated > 0)
		QueryRefuseInView(p, "FILTER, or an expression as a key or inside an aggregate",
						  "A view reads the pipeline's cells: declare what the queue computes in the pipeline's query.");
	if (plan->window != NULL)
		QueryRefuseInView(p, "a window", "Group the pipeline's windows with create_view and a key over window_start.");
	if (plan->has_empty_set || strchr(plan->grouping.data, ')') != plan->grouping.data + plan->grouping.len - 1 ||
		plan->grouping.data[0] != '(')
		QueryRefuseInView(p, "ROLLUP, CUBE or GROUPING SETS", "Group a view by a list of the pipeline's dimensions.");
	if (plan->ndistinct > 0)
		QueryRefuseInView(p, "count(DISTINCT)", "Distinct counts do not add up across cells: read them from the pipeline's result.");
	for (int i = 0; i < plan->ndims; i++)
		if (QueryNameIndex(p->dims, p->ndims, plan->dims[i]) < 0)
			QueryRefuseInView(p, psprintf("grouping by \"%s\"", plan->dims[i]), "Group by dimensions the pipeline keeps.");
	for (int i = 0; i < plan->nmeasures; i++)
		if (QueryNameIndex(p->measures, p->nmeasures, plan->measures[i]) < 0)
			QueryRefuseInView(p, psprintf("measure \"%s\"", plan->measures[i]), "Aggregate value or a measure the pipeline keeps.");
	for (int i = 0; i < plan->nminmax; i++)
	{
		bool		kept = false;

		for (int m = 0; m <= p->nmeasures; m++)
			kept |= p->min_max[m] && strcmp(PipelineExtremumName(p, m), plan->minmax[i]) == 0;
		if (!kept)
			QueryRefuseInView(p, psprintf("min or max of \"%s\"", plan->minmax[i]), "The pipeline keeps min and max only of its min_max columns.");
	}
	for (int i = 0; i < plan->nextra; i++)
		if (QueryNameIndex(p->dims, p->ndims, plan->extra[i]) < 0)
			QueryRefuseInView(p, psprintf("column \"%s\" in WHERE", plan->extra[i]), "Filter a view on the pipeline's dimensions.");

	InitFunctionCallInfoData(*create, NULL, 4, InvalidOid, NULL, NULL);
	create->args[0].value = PG_GETARG_DATUM(0);
	create->args[0].isnull = false;
	create->args[1].value = CStringGetTextDatum(cells);
	create->args[1].isnull = false;
	create->args[2].value = QueryTextArray(plan->dims, plan->ndims);
	create->args[2].isnull = false;
	create->args[3].value = plan->where ? CStringGetTextDatum(plan->where) : (Datum) 0;
	create->args[3].isnull = plan->where == NULL;
	(void) exactonce_create_view(create);

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE VIEW %s.%s AS SELECT ", quote_identifier(p->name), quote_identifier(name));
	for (int i = 0; i < plan->ncols; i++)
		appendStringInfo(&sql, "%s%s AS %s", i > 0 ? ", " : "", plan->cols[i].expr,
						 quote_identifier(plan->cols[i].name));
	appendStringInfo(&sql, " FROM %s.%s;\nCOMMENT ON VIEW %s.%s IS %s;\n",
					 quote_identifier(p->name), quote_identifier(cells),
					 quote_identifier(p->name), quote_identifier(name),
					 quote_literal_cstr(psprintf("exactonce view of %s, the query %s over its de-duplicated stream",
												 p->name, query)));
	PipelineActAsOwner(p);
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create view \"%s\" of pipeline \"%s\"", name, p->name);
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_VOID();
}
