/*-------------------------------------------------------------------------
 *
 * query.h
 *		A pipeline's query taken apart (query.c), for create_pipeline_as()
 *		and alter_pipeline_as() (alter.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_QUERY_H
#define EXACTONCE_QUERY_H

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"

#include "exactonce.h"

#define QUERY_MAX_COLUMNS	64

/* One column of the query: its name, and its SQL over <name>.aggregates. */
typedef struct QueryColumn
{
	const char *name;
	char	   *expr;			/* over the aggregates row */
	const char *empty;			/* in the row of the empty grouping set over
								 * no events */
	const char *comment;		/* how it is computed */
} QueryColumn;

/*
 * A column of the queue generated from the others as each event is
 * inserted: an expression the query groups by, or what an aggregate with
 * FILTER or an expression aggregates.
 */
typedef struct QueryGenerated
{
	const char *name;			/* exactonce_k_... or exactonce_m_..., from
								 * the expression's text */
	const char *type;
	char	   *expr;
	Node	   *node;			/* as parsed */
} QueryGenerated;

#define QUERY_MAX_GENERATED	(EXACTONCE_MAX_DIMENSIONS + EXACTONCE_MAX_MEASURES)

/* A query taken apart into what create_pipeline takes. */
typedef struct QueryPlan
{
	int			ndims;
	char	   *dims[EXACTONCE_MAX_DIMENSIONS];
	int			nmeasures;
	char	   *measures[EXACTONCE_MAX_MEASURES];
	int			nminmax;
	char	   *minmax[1 + EXACTONCE_MAX_MEASURES];
	int			ndistinct;
	char	   *distincts[EXACTONCE_MAX_DISTINCT];
	char	   *where;			/* the text of the WHERE clause, or NULL */
	Node	   *where_node;		/* ... as parsed */
	int			nextra;			/* columns WHERE alone names, made text */
	char	   *extra[EXACTONCE_MAX_DIMENSIONS];
	Node	   *window;			/* the date_bin() call, or NULL */
	Datum		width;			/* its stride, an interval */
	StringInfoData grouping;	/* grouping_sets, as create_pipeline takes */
	bool		has_empty_set;	/* the grouping sets include () */
	int			ncols;
	QueryColumn cols[QUERY_MAX_COLUMNS];
	const char *query;			/* its text */
	int			ngenerated;
	QueryGenerated generated[QUERY_MAX_GENERATED];
	char	   *every_filter;	/* accumulate mode: the WHERE, a FILTER of
								 * every aggregate */
	char	   *row_filter;		/* ... and the result's rows it keeps */
	bool		computed;		/* taking what the queue computes */
	const char *only_sets;		/* the result's cells, where the pipeline
								 * keeps more groupings than the query has */
} QueryPlan;

extern int	QueryNameIndex(char **names, int n, const char *name);
extern List *QueryConjuncts(const char *where, List **nodes);
extern void QueryPlanOf(QueryPlan *plan, const char *query, bool latest);
extern char *QueryResultView(QueryPlan *plan, const char *name, const char *query);
extern void QueryAddColumns(QueryPlan *plan, const char *name);
extern Datum QueryTextArray(char **names, int n);

#endif							/* EXACTONCE_QUERY_H */
