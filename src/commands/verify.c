/*-------------------------------------------------------------------------
 *
 * verify.c
 *		Verify and repair: the aggregates against what state says they are.
 *
 * In latest mode the aggregates are a function of state: each cell is the
 * GROUP BY GROUPING SETS of the live keys.  verify() recomputes them that
 * way and reports every cell that differs; rebuild() writes the recomputed
 * cells, and the distinct values behind the distinct counts, in place,
 * and records in the feed, if the pipeline has one, each cell that differs
 * from what the feed last said of it.
 * In accumulate mode a cell is the sum of the events that had its
 * dimensions, which state does not keep per event: verify() checks what
 * state does say, that every grouping's cells add up to the events state
 * and seen account for, and rebuild() refuses.
 *
 * Both read state, aggregates and ledger in one statement, so in one
 * snapshot, and verify() takes no lock: a worker changes all three in one
 * transaction, but for a batch it left staged for another worker to apply
 * (drain.c), which verify() applies first, holding the pipeline, when its
 * snapshot has one.  rebuild() holds
 * the pipeline (ProgressLockAll) from the start to its commit, as flush()
 * does: the workers wait, while producers go on inserting into the queue.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "port/pg_bitutils.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/cell.h"
#include "engine/drain.h"
#include "engine/extrema.h"
#include "engine/progress.h"
#include "utils/wake.h"

PG_FUNCTION_INFO_V1(exactonce_verify);
PG_FUNCTION_INFO_V1(exactonce_rebuild);

/*
 * AppendCellColumns appends the names of the columns of a cell that state
 * determines, comma-separated, each prefixed by prefix.
 */
static void
AppendCellColumns(StringInfo sql, Pipeline *p, const char *prefix)
{
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(sql, "%s%s, ", prefix, quote_identifier(p->dims[i]));
	appendStringInfo(sql, "%slevel, %stotal, %skeys", prefix, prefix, prefix);
	for (int i = 0; i < p->nmeasures; i++)
		appendStringInfo(sql, ", %s%s, %s%s",
						 prefix, quote_identifier(psprintf("%s_sum", p->measures[i])),
						 prefix, quote_identifier(psprintf("%s_count", p->measures[i])));
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
			appendStringInfo(sql, ", %s%s, %s%s",
							 prefix, quote_identifier(psprintf("%s_min", PipelineExtremumName(p, slot))),
							 prefix, quote_identifier(psprintf("%s_max", PipelineExtremumName(p, slot))));
	for (int i = 0; i < p->ndistinct; i++)
		appendStringInfo(sql, ", %s%s", prefix,
						 quote_identifier(psprintf("%s_distinct", p->distincts[i])));
}

/*
 * AppendGroupingSets appends the pipeline's groupings as SQL GROUPING SETS.
 */
static void
AppendGroupingSets(StringInfo sql, Pipeline *p)
{
	int			nsets = p->rollup ? p->ndims + 1 : p->nsets;

	appendStringInfoString(sql, "GROUPING SETS (");
	for (int s = 0; s < nsets; s++)
	{
		uint32		mask = p->rollup ? CELL_LEVEL_MASK(s) : p->sets[s];
		bool		first = true;

		appendStringInfo(sql, "%s(", s > 0 ? ", " : "");
		for (int i = 0; i < p->ndims; i++)
			if (mask & ((uint32) 1 << i))
			{
				appendStringInfo(sql, "%s%s", first ? "" : ", ", quote_identifier(p->dims[i]));
				first = false;
			}
		appendStringInfoChar(sql, ')');
	}
	appendStringInfoChar(sql, ')');
}

/*
 * BuildRecompute returns the SELECT of a latest-mode pipeline's cells
 * computed from its live keys, with AppendCellColumns' columns.
 */
static char *
BuildRecompute(Pipeline *p)
{
	StringInfoData sql;
	uint32		grouped = 0;	/* the dimensions some grouping has */

	for (int s = 0; s < (p->rollup ? p->ndims + 1 : p->nsets); s++)
		grouped |= p->rollup ? CELL_LEVEL_MASK(s) : p->sets[s];
	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT ");

	/* a dimension no grouping has is NULL in every cell, and in no GROUPING */
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, "%s%s, ", grouped & ((uint32) 1 << i) ? "" : "NULL::pg_catalog.text AS ",
						 quote_identifier(p->dims[i]));
	appendStringInfo(&sql, "%d", pg_popcount32(grouped));
	for (int i = 0; i < p->ndims; i++)
		if (grouped & ((uint32) 1 << i))
			appendStringInfo(&sql, " OPERATOR(pg_catalog.-) GROUPING(%s)", quote_identifier(p->dims[i]));
	appendStringInfoString(&sql, " AS level, pg_catalog.sum(value) AS total, pg_catalog.count(*) AS keys");
	for (int i = 0; i < p->nmeasures; i++)
	{
		const char *m = quote_identifier(p->measures[i]);

		appendStringInfo(&sql, ", COALESCE(pg_catalog.sum(%s), 0) AS %s, pg_catalog.count(%s) AS %s",
						 m, quote_identifier(psprintf("%s_sum", p->measures[i])),
						 m, quote_identifier(psprintf("%s_count", p->measures[i])));
	}
	for (int slot = 0; slot <= p->nmeasures; slot++)
		if (p->min_max[slot])
		{
			const char *m = PipelineExtremumName(p, slot);

			appendStringInfo(&sql, ", pg_catalog.min(%s) AS %s, pg_catalog.max(%s) AS %s",
							 quote_identifier(m), quote_identifier(psprintf("%s_min", m)),
							 quote_identifier(m), quote_identifier(psprintf("%s_max", m)));
		}
	for (int i = 0; i < p->ndistinct; i++)
		appendStringInfo(&sql, ", pg_catalog.count(DISTINCT %s) AS %s",
						 quote_identifier(p->distincts[i]),
						 quote_identifier(psprintf("%s_distinct", p->distincts[i])));
	appendStringInfo(&sql, " FROM %s.state WHERE NOT deleted GROUP BY ", quote_identifier(p->name));
	AppendGroupingSets(&sql, p);
	/* no live key, no cell: not even the grand total of nothing */
	appendStringInfoString(&sql, " HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0");
	return sql.data;
}

/*
 * AppendCellName appends an SQL expression naming the cell of alias a: its
 * grouping's dimensions and their values (a dimension it does not group by
 * is NULL, and so left out).
 */
static void
AppendCellName(StringInfo sql, Pipeline *p, const char *a)
{
	appendStringInfoString(sql, "pg_catalog.format('(%s)', pg_catalog.concat_ws(', '");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(sql, ", %s OPERATOR(pg_catalog.||) pg_catalog.quote_literal(%s.%s)",
						 quote_literal_cstr(psprintf("%s = ", p->dims[i])), a,
						 quote_identifier(p->dims[i]));
	appendStringInfoString(sql, "))");
}

/*
 * BuildVerifyLatest returns the statement that compares a latest-mode
 * pipeline's aggregates with its live keys: (item, cell, detail, ok) rows.
 */
static char *
BuildVerifyLatest(Pipeline *p)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);

	initStringInfo(&sql);
	appendStringInfo(&sql, "WITH r AS (%s), k AS (SELECT ", BuildRecompute(p));
	AppendCellColumns(&sql, p, "");
	appendStringInfo(&sql, " FROM %s.aggregates),"
					 " d AS (SELECT COALESCE(k.level, r.level) AS level,"
					 " CASE WHEN k.level IS NULL THEN 'no row' ELSE pg_catalog.row_to_json(k)::pg_catalog.text END AS kept,"
					 " CASE WHEN r.level IS NULL THEN 'no row' ELSE pg_catalog.row_to_json(r)::pg_catalog.text END AS computed,"
					 " CASE WHEN k.level IS NULL THEN ", s);
	AppendCellName(&sql, p, "r");
	appendStringInfoString(&sql, " ELSE ");
	AppendCellName(&sql, p, "k");
	appendStringInfoString(&sql, " END AS cell FROM k FULL JOIN r ON k.level OPERATOR(pg_catalog.=) r.level");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, " AND k.%1$s IS NOT DISTINCT FROM r.%1$s", quote_identifier(p->dims[i]));
	appendStringInfo(&sql,
					 " WHERE k.* IS DISTINCT FROM r.*)"
					 " SELECT item, cell, detail, ok FROM ("
					 " SELECT 1 AS o, 'cells'::pg_catalog.text AS item, NULL::pg_catalog.text AS cell,"
					 " pg_catalog.format('%%s cells in aggregates, %%s computed from the live keys in state, %%s differ',"
					 " (SELECT pg_catalog.count(*) FROM k), (SELECT pg_catalog.count(*) FROM r),"
					 " (SELECT pg_catalog.count(*) FROM d)) AS detail, NOT EXISTS (SELECT FROM d) AS ok"
					 " UNION ALL SELECT 2, 'ledger', NULL,"
					 " pg_catalog.format('%%s batches staged and not applied', l.n), l.n OPERATOR(pg_catalog.=) 0"
					 " FROM (SELECT pg_catalog.count(*) AS n FROM %s.ledger WHERE applied_at IS NULL) l"
					 " UNION ALL SELECT 3, 'cell', pg_catalog.format('level %%s %%s', d.level, d.cell),"
					 " pg_catalog.format('aggregates: %%s; from state: %%s', d.kept, d.computed), false"
					 " FROM d) v ORDER BY o, cell",
					 s);
	return sql.data;
}

/*
 * BuildVerifyReserves returns the statement that checks each leaf's reserve
 * of extremes against its live keys (extrema.c): each list must be the
 * first of the leaf's values in its order, all of them without more.
 */
static char *
BuildVerifyReserves(Pipeline *p)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);
	int			list = 0,
				nlists = 0;

	for (int slot = 0; slot <= p->nmeasures; slot++)
		nlists += p->min_max[slot] ? 2 : 0;
	initStringInfo(&sql);
	appendStringInfoString(&sql, "WITH r AS (SELECT ");
	AppendCellName(&sql, p, "a");
	appendStringInfo(&sql, " AS cell, a." PIPELINE_RESERVE_COLUMN " AS e,"
					 " COALESCE(pg_catalog.cardinality(a." PIPELINE_RESERVE_COLUMN ") OPERATOR(pg_catalog.=) %d",
					 nlists * EXTREMA_RESERVE_STRIDE);
	for (int slot = 0; slot <= p->nmeasures; slot++)
		for (int hi = 0; p->min_max[slot] && hi <= 1; hi++, list++)
		{
			int			o = list * EXTREMA_RESERVE_STRIDE;
			const char *e = "a." PIPELINE_RESERVE_COLUMN;
			char	   *n = psprintf("%s[%d]::pg_catalog.int4", e, o + 2);

			/* more is 0 or 1, then n values, then NULLs */
			appendStringInfo(&sql, " AND %1$s[%2$d] OPERATOR(pg_catalog.=) ANY ('{0,1}')"
							 " AND %3$s BETWEEN 0 AND %4$d"
							 " AND pg_catalog.cardinality(pg_catalog.array_remove(%1$s[%6$d OPERATOR(pg_catalog.+) %3$s:%7$d], NULL))"
							 " OPERATOR(pg_catalog.=) 0"
			/* none without more: the leaf has none; else its first values */
							 " AND CASE WHEN %3$s OPERATOR(pg_catalog.=) 0"
							 " THEN %1$s[%2$d] OPERATOR(pg_catalog.=) 0 AND v.l%5$d IS NULL"
							 " ELSE %1$s[%6$d:%6$d OPERATOR(pg_catalog.+) %3$s OPERATOR(pg_catalog.-) 1]"
							 " OPERATOR(pg_catalog.=) v.l%5$d[1:%3$s] AND (%1$s[%2$d] OPERATOR(pg_catalog.=) 1"
							 " OR pg_catalog.cardinality(v.l%5$d) OPERATOR(pg_catalog.=) %3$s) END",
							 e, o + 1, n, EXTREMA_RESERVE_KEEP, list, o + 3, o + EXTREMA_RESERVE_STRIDE);
		}
	appendStringInfo(&sql, ", false) AS fits FROM %s.aggregates a LEFT JOIN LATERAL (SELECT ", s);
	list = 0;
	for (int slot = 0; slot <= p->nmeasures; slot++)
		for (int hi = 0; p->min_max[slot] && hi <= 1; hi++, list++)
		{
			const char *m = quote_identifier(PipelineExtremumName(p, slot));

			appendStringInfo(&sql, "%spg_catalog.array_agg(st.%s ORDER BY st.%s%s) FILTER (WHERE st.%s IS NOT NULL) AS l%d",
							 list ? ", " : "", m, m, hi ? " DESC" : "", m, list);
		}
	appendStringInfo(&sql, " FROM %s.state st WHERE NOT st.deleted", s);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, " AND st.%1$s OPERATOR(pg_catalog.=) a.%1$s", quote_identifier(p->dims[i]));
	appendStringInfo(&sql, ") v ON true WHERE a.level OPERATOR(pg_catalog.=) %d AND a." PIPELINE_RESERVE_COLUMN " IS NOT NULL)"
					 " SELECT 'reserves'::pg_catalog.text, NULL::pg_catalog.text,"
					 " pg_catalog.format('%%s leaf cells keep a reserve of their extremes, %%s differ from state',"
					 " pg_catalog.count(*), pg_catalog.count(*) FILTER (WHERE NOT r.fits)),"
					 " pg_catalog.bool_and(r.fits) IS NOT FALSE FROM r"
					 " UNION ALL (SELECT 'reserve', pg_catalog.format('level %d %%s', r.cell),"
					 " pg_catalog.format('" PIPELINE_RESERVE_COLUMN ": %%s', r.e), false FROM r WHERE NOT r.fits ORDER BY 2)",
					 p->ndims, p->ndims);
	return sql.data;
}

/*
 * BuildVerifyAccumulate returns the statement that checks what state says
 * of an accumulate-mode pipeline's aggregates: (item, cell, detail, ok).
 */
static char *
BuildVerifyAccumulate(Pipeline *p)
{
	StringInfoData sql;
	const char *s = quote_identifier(p->name);
	int			nsets = p->rollup ? p->ndims + 1 : p->nsets;
	Oid			nsp = get_namespace_oid("exactonce", false);
	Oid			moves = get_relname_relid("key_moves", nsp);

	if (!OidIsValid(moves))
		moves = get_relname_relid("key_move", nsp);
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "WITH st AS (SELECT COALESCE(pg_catalog.sum(total), 0) AS total,"
					 " COALESCE(pg_catalog.sum(events), 0) AS events FROM %s.state),"
					 " sn AS (SELECT pg_catalog.count(*) AS n FROM %s.seen),",
					 s, s);

	/*
	 * The cells keep the share of keys moved away to another node (move.c)
	 * and lack that of keys moved in: what they add up to is state's plus the
	 * net of the moves, read (as the owner) from the view of the owner's
	 * moves, or from the table itself before 1.7 made the view.
	 */
	if (OidIsValid(moves))
		appendStringInfo(&sql,
						 " mv AS (SELECT COALESCE(pg_catalog.sum(CASE WHEN direction OPERATOR(pg_catalog.=) 'out'"
						 " THEN total ELSE OPERATOR(pg_catalog.-) total END), 0) AS total,"
						 " COALESCE(pg_catalog.sum(CASE WHEN direction OPERATOR(pg_catalog.=) 'out'"
						 " THEN events ELSE OPERATOR(pg_catalog.-) events END), 0) AS events"
						 " FROM exactonce.%s WHERE pipeline OPERATOR(pg_catalog.=) %s::pg_catalog.name),",
						 get_rel_name(moves), quote_literal_cstr(p->name));
	else
		appendStringInfoString(&sql, " mv AS (SELECT 0 AS total, 0 AS events),");
	appendStringInfo(&sql,
					 " cs AS (SELECT st.total OPERATOR(pg_catalog.+) mv.total AS total,"
					 " st.events OPERATOR(pg_catalog.+) mv.events AS events FROM st, mv),"
					 " g AS (SELECT pg_catalog.format('(%%s)', pg_catalog.concat_ws(', '");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", CASE WHEN %s IS NOT NULL THEN %s END",
						 quote_identifier(p->dims[i]), quote_literal_cstr(p->dims[i]));
	appendStringInfo(&sql,
					 ")) AS grouping, pg_catalog.sum(total) AS total, pg_catalog.sum(keys) AS events"
					 " FROM %s.aggregates GROUP BY 1)"
					 " SELECT item, cell, detail, ok FROM ("
					 " SELECT 1 AS o, 'groupings'::pg_catalog.text AS item, NULL::pg_catalog.text AS cell,"
					 " pg_catalog.format('%%s of %d groupings have cells; state counts %%s events',"
					 " (SELECT pg_catalog.count(*) FROM g), cs.events) AS detail,"
					 " (SELECT pg_catalog.count(*) FROM g) OPERATOR(pg_catalog.=) CASE WHEN cs.events OPERATOR(pg_catalog.=) 0 THEN 0 ELSE %d END AS ok"
					 " FROM cs"
					 " UNION ALL SELECT 2, 'seen', NULL,"
					 " pg_catalog.format('%%s (key, version) pairs in seen; state counts %%s events%s', sn.n, st.events),"
					 " sn.n OPERATOR(pg_catalog.%s) st.events FROM sn, st"
					 " UNION ALL SELECT 2, 'ledger', NULL,"
					 " pg_catalog.format('%%s batches staged and not applied', l.n), l.n OPERATOR(pg_catalog.=) 0"
					 " FROM (SELECT pg_catalog.count(*) AS n FROM %s.ledger WHERE applied_at IS NULL) l"
					 " UNION ALL SELECT 3, 'grouping', g.grouping,"
					 " pg_catalog.format('its cells add up to total %%s over %%s events; state: %%s over %%s events',"
					 " g.total, g.events, cs.total, cs.events),"
					 " g.total OPERATOR(pg_catalog.=) cs.total AND g.events OPERATOR(pg_catalog.=) cs.events"
					 " FROM g, cs) v ORDER BY o, item, cell",
					 s, nsets, nsets,
					 p->has_horizon ? psprintf(" (prune() forgot the pairs below version " INT64_FORMAT ")", p->horizon) : "",
					 p->has_horizon ? "<=" : "=", s);
	return sql.data;
}

/*
 * BuildAccounting returns the statement of the accounting identity row.
 */
static char *
BuildAccounting(Pipeline *p)
{
	return psprintf("SELECT 'accounting'::pg_catalog.text, NULL::pg_catalog.text,"
					" pg_catalog.format('ingested %%s = applied %%s + duplicates %%s + stale %%s + dead_lettered %%s',"
					" ingested, applied, duplicates, stale, dead_lettered),"
					" ingested OPERATOR(pg_catalog.=) (applied OPERATOR(pg_catalog.+) duplicates"
					" OPERATOR(pg_catalog.+) stale OPERATOR(pg_catalog.+) dead_lettered)"
					" FROM %s c", ProgressCounters(p));
}

/*
 * PutRows adds the rows SPI returned to the result.
 */
static void
PutRows(ReturnSetInfo *rsinfo)
{
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Datum		values[4];
		bool		nulls[4];

		for (int c = 0; c < 4; c++)
			values[c] = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, c + 1, &nulls[c]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * InFlight tells whether the caller's snapshot has a batch a worker left
 * staged for another to apply (DrainReduceOrLeave).
 */
static bool
InFlight(Pipeline *p)
{
	bool		isnull;

	if (SPI_execute(psprintf("SELECT EXISTS (SELECT FROM %s.ledger WHERE applied_at IS NULL"
							 " AND source OPERATOR(pg_catalog.=) %s)",
							 quote_identifier(p->name), quote_literal_cstr(EXACTONCE_SOURCE_QUEUE)),
					true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the ledger of pipeline \"%s\"", p->name);
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * exactonce_verify reports whether a pipeline's aggregates are what its
 * state says: the accounting identity, staged batches, and in latest mode
 * every cell that differs from the cells recomputed from the live keys.
 */
Datum
exactonce_verify(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Pipeline   *p;
	int			nestlevel;
	bool		pushed = false;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline must not be NULL")));
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PipelineActAsOwner(p);

	/*
	 * The statements below read in one snapshot, the caller's (read_only). A
	 * worker that found another applying the pipeline's batches left its own
	 * staged, its keys in state already (DrainReduceOrLeave): if the snapshot
	 * has one, verify() takes the pipeline as flush() does, applies the
	 * batch, and reads as of then; where it cannot take it (a read-only
	 * transaction, a standby, REPEATABLE READ), the ledger row reports it. A
	 * transaction that holds the progress row already (a caller of the
	 * stages) takes no shard row after it, against the lock order: it applies
	 * what is staged, and a worker may leave another batch meanwhile.
	 */
	if (InFlight(p) && !XactReadOnly && !IsolationUsesXactSnapshot())
	{
		int64		rotation,
					drain_rotation;
		bool		paused;

		if (ProgressHeldByMe(p))
			ProgressLock(p, &rotation, &drain_rotation, &paused);
		else
			ProgressLockAll(p, NULL, &rotation, &drain_rotation, &paused);
		DrainApplyLeft(p);
		CommandCounterIncrement();
		PushActiveSnapshot(GetTransactionSnapshot());
		pushed = true;
	}
	if (SPI_execute(BuildAccounting(p), true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read progress of pipeline \"%s\"", p->name);
	PutRows(rsinfo);
	if (SPI_execute(p->mode == PIPELINE_LATEST ? BuildVerifyLatest(p) : BuildVerifyAccumulate(p),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not verify pipeline \"%s\"", p->name);
	PutRows(rsinfo);
	if (PIPELINE_RESERVES(p))
	{
		if (SPI_execute(BuildVerifyReserves(p), true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not verify the reserves of pipeline \"%s\"", p->name);
		PutRows(rsinfo);
	}
	if (pushed)
		PopActiveSnapshot();
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	return (Datum) 0;
}

/*
 * BuildDistinctRebuild returns the query of the rows of table distincts of
 * one grouping (mask) and one distinct_counts column, from the live keys:
 * at a leaf n counts the keys that have the value; above, in a rollup, the
 * children that have it, and in another grouping the leaves (distinct.c).
 */
static char *
BuildDistinctRebuild(Pipeline *p, uint32 mask, int col)
{
	StringInfoData sql;
	StringInfoData group;
	const char *c = quote_identifier(p->distincts[col]);
	int			level = pg_popcount32(mask);
	bool		leaf = mask == CELL_LEVEL_MASK(p->ndims);

	initStringInfo(&sql);
	initStringInfo(&group);
	appendStringInfoString(&sql, "SELECT ARRAY[");
	for (int i = 0, n = 0; i < p->ndims; i++)
	{
		bool		in = (mask & ((uint32) 1 << i)) != 0;

		/* a rollup's cell is its prefix; another grouping's has NULLs */
		if (p->rollup && !in)
			continue;
		appendStringInfo(&sql, "%s%s", n++ > 0 ? ", " : "",
						 in ? quote_identifier(p->dims[i]) : "NULL");
		if (in)
			appendStringInfo(&group, "%s, ", quote_identifier(p->dims[i]));
	}
	appendStringInfo(&sql, "]::pg_catalog.text[], %s, %s, ",
					 quote_literal_cstr(p->distincts[col]), c);
	if (leaf)
		appendStringInfoString(&sql, "pg_catalog.count(*)");
	else if (p->rollup)
		appendStringInfo(&sql, "pg_catalog.count(DISTINCT %s)", quote_identifier(p->dims[level]));
	else
	{
		appendStringInfoString(&sql, "pg_catalog.count(DISTINCT ROW(");
		for (int i = 0; i < p->ndims; i++)
			appendStringInfo(&sql, "%s%s", i > 0 ? ", " : "", quote_identifier(p->dims[i]));
		appendStringInfoString(&sql, "))");
	}
	appendStringInfo(&sql, " FROM %s.state WHERE NOT deleted AND %s IS NOT NULL GROUP BY %s%s",
					 quote_identifier(p->name), c, group.data, c);
	return sql.data;
}

/*
 * exactonce_rebuild recomputes a latest-mode pipeline's aggregates, and the
 * values behind its distinct counts, from its live keys, in the caller's
 * transaction, and returns the number of cells.  Batches staged and not
 * applied are marked applied: their keys are in state already, so their
 * effect is in the rebuilt cells.
 */
Datum
exactonce_rebuild(PG_FUNCTION_ARGS)
{
	Pipeline   *p;
	int			nestlevel;
	int64		rotation,
				drain_rotation;
	bool		paused;
	uint64		cells;
	StringInfoData sql;
	StringInfoData dml;
	const char *s;
	bool		isnull;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline must not be NULL")));
	PipelineRequireReadCommitted("exactonce.rebuild()");
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	if (p->mode != PIPELINE_LATEST)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pipeline \"%s\" is in accumulate mode, whose aggregates cannot be rebuilt", p->name),
				 errdetail("Its cells add up events, and state keeps a running context per key, not each event's cell."),
				 errhint("exactonce.verify() checks what state can tell of them.")));
	s = quote_identifier(p->name);
	PipelineActAsOwner(p);

	/* the workers wait from here to commit; inserts go on */
	ProgressLockAll(p, NULL, &rotation, &drain_rotation, &paused);

	initStringInfo(&sql);
	initStringInfo(&dml);

	/*
	 * The feed gets the change of every cell whose total or keys differ from
	 * what the feed last said of it: what its consumers have, whatever
	 * happened to the aggregates behind the feed's back.
	 */
	if (p->feed)
	{
		StringInfoData dims;

		initStringInfo(&dims);
		for (int i = 0; i < p->ndims; i++)
			appendStringInfo(&dims, ", %s", quote_identifier(p->dims[i]));
		appendStringInfoString(&sql, "r AS MATERIALIZED (SELECT COALESCE(k.level, r.level)");
		for (int i = 0; i < p->ndims; i++)
			appendStringInfo(&sql, ", COALESCE(k.%1$s, r.%1$s)", quote_identifier(p->dims[i]));
		appendStringInfo(&sql, ", COALESCE(k.total, 0), COALESCE(r.total, 0), COALESCE(k.keys, 0), COALESCE(r.keys, 0)"
						 " FROM (SELECT * FROM (SELECT DISTINCT ON (level%s) level%s, new_total AS total,"
						 " new_keys AS keys FROM %s.feed ORDER BY level%s, seq DESC) l"
						 " WHERE keys OPERATOR(pg_catalog.<>) 0) k FULL JOIN (%s) r ON k.level OPERATOR(pg_catalog.=) r.level",
						 dims.data, dims.data, s, dims.data, BuildRecompute(p));
		for (int i = 0; i < p->ndims; i++)
			appendStringInfo(&sql, " AND k.%1$s IS NOT DISTINCT FROM r.%1$s", quote_identifier(p->dims[i]));
		appendStringInfoString(&sql, " WHERE (k.total, k.keys) IS DISTINCT FROM (r.total, r.keys))");
		appendStringInfo(&dml, "INSERT INTO %s.feed (level, ", s);
		for (int i = 0; i < p->ndims; i++)
			appendStringInfo(&dml, "%s, ", quote_identifier(p->dims[i]));
		appendStringInfoString(&dml, "old_total, new_total, old_keys, new_keys) SELECT * FROM r ORDER BY 1");
		for (int i = 0; i < p->ndims; i++)
			appendStringInfo(&dml, ", %d", i + 2);
		StatementWriteAll(sql.data, dml.data, "SELECT pg_catalog.count(*) FROM r");
		resetStringInfo(&sql);
		resetStringInfo(&dml);
	}

	/*
	 * Every statement below counts the rows it writes against those it meant
	 * to: a trigger of the owner's that skips a row would leave a cell short,
	 * or a staged batch to be applied again on top of the rebuilt cells.
	 */
	StatementWriteAll(NULL, psprintf("DELETE FROM %s.aggregates", s),
					  psprintf("SELECT pg_catalog.count(*) FROM %s.aggregates", s));
	appendStringInfo(&sql, "r AS MATERIALIZED (%s)", BuildRecompute(p));
	appendStringInfo(&dml, "INSERT INTO %s.aggregates (", s);
	AppendCellColumns(&dml, p, "");
	appendStringInfoString(&dml, ", updated_at) SELECT ");
	AppendCellColumns(&dml, p, "r.");
	appendStringInfoString(&dml, ", pg_catalog.now() FROM r");
	cells = StatementWriteAll(sql.data, dml.data, "SELECT pg_catalog.count(*) FROM r");

	if (p->ndistinct > 0)
	{
		int			nsets = p->rollup ? p->ndims + 1 : p->nsets;

		StatementWriteAll(NULL, psprintf("DELETE FROM %s.distincts", s),
						  psprintf("SELECT pg_catalog.count(*) FROM %s.distincts", s));
		for (int set = 0; set < nsets; set++)
			for (int col = 0; col < p->ndistinct; col++)
				StatementWriteAll(psprintf("r AS MATERIALIZED (%s)",
										   BuildDistinctRebuild(p, p->rollup ? CELL_LEVEL_MASK(set) : p->sets[set], col)),
								  psprintf("INSERT INTO %s.distincts (cell, col, value, n) SELECT * FROM r", s),
								  "SELECT pg_catalog.count(*) FROM r");
	}

	StatementWriteAll(NULL, psprintf("UPDATE %s.ledger SET applied_at = pg_catalog.now() WHERE applied_at IS NULL", s),
					  psprintf("SELECT pg_catalog.count(*) FROM %s.ledger WHERE applied_at IS NULL", s));

	/*
	 * What the owner's triggers did after the rows were written: every cell
	 * is there, and no batch is left staged.
	 */
	if (SPI_execute(psprintf("SELECT (SELECT pg_catalog.count(*) FROM %s.aggregates) OPERATOR(pg_catalog.=) " UINT64_FORMAT
							 " AND NOT EXISTS (SELECT FROM %s.ledger WHERE applied_at IS NULL)", s, cells, s),
					false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not read the rebuilt aggregates of pipeline \"%s\"", p->name);
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		StatementRowRefused(p->name, "aggregates",
							psprintf("After rebuild() wrote its " UINT64_FORMAT " cells and marked the staged batches applied, "
									 "a trigger changed the cells or the ledger.", cells));

	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	WakeWaitersAtCommit();
	PG_RETURN_INT64((int64) cells);
}
