/*-------------------------------------------------------------------------
 *
 * coordinator.c
 *		Key-sharded pipelines over several servers, on postgres_fdw.
 *
 * A distributed pipeline is an ordinary pipeline of the same name on each
 * node, drained there by its own workers, and at the coordinator a schema
 * of the same name with:
 *	 - ingest, partitioned BY HASH (key COLLATE "C"), whose partitions are
 *	   foreign tables of exactonce_forward on the nodes' queues (forward.c):
 *	   an INSERT or COPY routes each event by PostgreSQL's hash partitioning
 *	   of its key, the same function everywhere, so all events of a key, its
 *	   state and its contribution to the cells live on one node, and sends
 *	   each node its events of the statement in one COPY;
 *	 - aggregates, a view summing the nodes' cells per cell and level: each
 *	   node's cells are exact for its keys, and the keys of two nodes never
 *	   meet, so the sums are exact; so are the sums and counts of measures
 *	   (and their averages, computed from them), the min of the nodes' mins
 *	   and the max of their maxes.  A distinct count does not add up (a
 *	   value seen on two nodes would count twice): it is counted over the
 *	   union of the values the nodes' table distincts hold for the cell;
 *	 - nodes, a view of each node's row of exactonce.pipelines;
 *	 - with windows, windows: a window is final when final on every node.
 * The views read the nodes through foreign tables of exactonce_forward
 * too, as the owner.
 * A node that is down makes an insert for its keys, or a read of the
 * aggregates, fail with an error that names its server; nothing partial is
 * returned.  A producer whose statement failed
 * resends it: the events that reached a node before are duplicates there.
 *
 * The nodes are reached through node.c, always as the pipeline's owner.
 *
 * A registry row stands for a pipeline only while the schema of its name
 * exists, belongs to the row's owner and is no pipeline of one server: a
 * row whose schema was dropped by hand is stale, and never shadows a
 * pipeline or schema that took the name since.  drop_pipeline(force =>
 * true) removes it; creating a pipeline of its name forgets it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "catalog/statement.h"
#include "distributed/coordinator.h"
#include "distributed/node.h"

PG_FUNCTION_INFO_V1(exactonce_create_distributed_pipeline);

/*
 * DropOnNode drops the pipeline on the node of a server, as owner; with
 * quietly, an error there is forgotten (the node is down, or had no such
 * pipeline).
 */
static void
DropOnNode(Oid owner, const char *servername, const char *name, bool force, bool quietly)
{
	const char *params[2] = {name, force ? "true" : "false"};
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		(void) NodeExec(owner, servername, "SELECT exactonce.drop_pipeline($1, $2::boolean)", 2, params);
	}
	PG_CATCH();
	{
		if (!quietly)
			PG_RE_THROW();
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
	}
	PG_END_TRY();
}

/*
 * StaleReason tells why a distributed pipeline's registry row no longer
 * stands for a pipeline, or returns NULL: the schema of its name is gone
 * (dropped by hand) or belongs to another role, or a pipeline of one server
 * has taken the name (d->single).  SPI must be connected.
 */
static char *
StaleReason(Distributed *d)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(d->name)};
	Oid			nspid = get_namespace_oid(d->name, true);
	HeapTuple	tup;
	Oid			nspowner;

	if (SPI_execute_plan(StatementPrepareFixed("SELECT 1 FROM exactonce.pipeline"
											   " WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name", 1, types),
						 values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	d->single = SPI_processed > 0;
	if (d->single)
		return psprintf("Pipeline \"%s\" of this server has the name now.", d->name);
	if (!OidIsValid(nspid))
		return psprintf("Schema \"%s\" of the coordinator was dropped.", d->name);
	tup = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(nspid));
	if (!HeapTupleIsValid(tup))
		return psprintf("Schema \"%s\" of the coordinator was dropped.", d->name);
	nspowner = ((Form_pg_namespace) GETSTRUCT(tup))->nspowner;
	ReleaseSysCache(tup);
	if (nspowner != d->owner)
		return psprintf("Schema \"%s\" belongs to role \"%s\", not to the pipeline's owner.",
						d->name, GetUserNameFromId(nspowner, false));
	return NULL;
}

/*
 * RegistryTexts reads the text[] column col of a registry row into out (at
 * most max), and returns how many; none if the column is not there yet.
 */
static int
RegistryTexts(HeapTuple row, TupleDesc desc, const char *col, char **out, int max)
{
	int			attno = SPI_fnumber(desc, col);
	Datum	   *elems;
	bool		isnull;
	Datum		value;
	int			n;

	if (attno <= 0)
		return 0;
	value = SPI_getbinval(row, desc, attno, &isnull);
	if (isnull)
		return 0;
	deconstruct_array(DatumGetArrayTypeP(value), TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	n = Min(n, max);
	for (int i = 0; i < n; i++)
		out[i] = TextDatumGetCString(elems[i]);
	return n;
}

/*
 * CoordinatorLoad reads a distributed pipeline's registry row and returns
 * true if it stands for a pipeline; false if there is none, or if it is
 * stale (d->stale then says why, and d->single whether a pipeline of one
 * server has the name).  SPI must be connected.
 */
bool
CoordinatorLoad(const char *name, Distributed *d)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	Datum	   *elems;
	int			n;
	bool		isnull;
	Oid			nsp = get_namespace_oid("exactonce", true);
	HeapTuple	row;
	TupleDesc	desc;

	d->stale = NULL;
	d->single = false;
	/* none before ALTER EXTENSION exactonce UPDATE made the registry */
	if (!OidIsValid(nsp) || !OidIsValid(get_relname_relid("distributed_pipeline", nsp)))
		return false;

	/*
	 * every column, by name: an update may not have added the newer ones (the
	 * kept plan is planned anew when it does); a partition of ingest reads
	 * this once per statement, so the plan is kept
	 */
	if (SPI_execute_plan(StatementPrepareFixed("SELECT * FROM exactonce.distributed_pipeline"
											   " WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name", 1, types),
						 values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.distributed_pipeline");
	if (SPI_processed == 0)
		return false;
	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	d->name = SPI_getvalue(row, desc, SPI_fnumber(desc, "name"));
	d->owner = DatumGetObjectId(SPI_getbinval(row, desc, SPI_fnumber(desc, "owner"), &isnull));
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(row, desc, SPI_fnumber(desc, "servers"), &isnull)),
					  NAMEOID, NAMEDATALEN, false, TYPALIGN_CHAR, &elems, NULL, &n);
	d->nnodes = Min(n, DIST_MAX_NODES);
	for (int i = 0; i < d->nnodes; i++)
		d->servers[i] = pstrdup(NameStr(*DatumGetName(elems[i])));
	d->ndims = RegistryTexts(row, desc, "dimensions", d->dims, EXACTONCE_MAX_DIMENSIONS);
	d->nmeasures = RegistryTexts(row, desc, "measures", d->measures, EXACTONCE_MAX_MEASURES);
	d->nminmax = RegistryTexts(row, desc, "min_max", d->min_max, 1 + EXACTONCE_MAX_MEASURES);
	d->ndistinct = RegistryTexts(row, desc, "distinct_counts", d->distincts, EXACTONCE_MAX_DISTINCT);
	d->window_width = NULL;
	d->lateness = "0";
	if (SPI_fnumber(desc, "window_width") > 0)
	{
		d->window_width = SPI_getvalue(row, desc, SPI_fnumber(desc, "window_width"));
		d->lateness = SPI_getvalue(row, desc, SPI_fnumber(desc, "allowed_lateness"));
	}
	d->stale = StaleReason(d);
	return d->stale == NULL;
}

/*
 * RequireOwner insists that the caller has the rights of the owner of a
 * distributed pipeline.
 */
static void
RequireOwner(Distributed *d)
{
	if (!has_privs_of_role(GetUserId(), d->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of distributed pipeline \"%s\"", d->name)));
}

/*
 * ReportStale refuses to act on a stale registry row.
 */
static void
ReportStale(Distributed *d)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("distributed pipeline \"%s\" has lost its schema", d->name),
			 errdetail("%s Its registry row is all that is left at the coordinator.", d->stale),
			 errhint("Remove the row, and the pipeline on its nodes, with exactonce.drop_pipeline('%s', force => true).",
					 d->name)));
}

/*
 * CoordinatorOpen loads a distributed pipeline for its owner: an error if
 * there is none, if its registry row is stale, or if the caller lacks the
 * owner's rights.  SPI must be connected.
 */
void
CoordinatorOpen(const char *name, Distributed *d)
{
	if (!CoordinatorLoad(name, d))
	{
		if (d->stale == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("distributed pipeline \"%s\" does not exist", name)));
		RequireOwner(d);
		ReportStale(d);
	}
	RequireOwner(d);
}

/*
 * ForgetRow deletes a distributed pipeline's registry row, as the owner of
 * the registry.  SPI must be connected and the search_path pinned.
 */
static void
ForgetRow(const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};

	StatementExecAs(StatementTableOwner("distributed_pipeline"),
					StatementPrepareFixed("DELETE FROM exactonce.distributed_pipeline"
										  " WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name",
										  1, types),
					values, NULL, false, -1);
}

/*
 * CoordinatorForgetStale deletes the registry row of name if it is stale:
 * a pipeline about to take the name must not be shadowed by it.  Its
 * nodes' pipelines are left alone; their owner drops them there.
 */
void
CoordinatorForgetStale(const char *name)
{
	Distributed d;
	int			nestlevel;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	if (!CoordinatorLoad(name, &d) && d.stale != NULL)
		ForgetRow(name);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
}

/*
 * CoordinatorRun does action (flush, pause, resume, drop) on a distributed
 * pipeline's nodes, if name is one, and returns true; *result is the sum of
 * what flush returned.  drop also drops the coordinator's schema and
 * registry row (force: even if a node cannot be reached).  A stale registry
 * row is passed over if a pipeline of one server has the name (false: the
 * caller acts on that one); otherwise drop with force removes it, and the
 * pipeline on its nodes as far as they can be reached, and any other
 * action is refused.
 */
bool
CoordinatorRun(const char *name, const char *action, bool force, int64 *result)
{
	Distributed d;
	int			nestlevel;
	const char *params[1] = {name};
	bool		drop = strcmp(action, "drop") == 0;

	*result = 0;
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	if (!CoordinatorLoad(name, &d))
	{
		bool		found = d.stale != NULL && !d.single;

		if (found)
		{
			RequireOwner(&d);
			if (!drop || !force)
				ReportStale(&d);
			for (int i = 0; i < d.nnodes; i++)
				DropOnNode(d.owner, d.servers[i], name, true, true);
			ForgetRow(name);
		}
		StatementUnpinSearchPath(nestlevel);
		SPI_finish();
		return found;
	}
	RequireOwner(&d);
	for (int i = 0; i < d.nnodes; i++)
	{
		char	   *r;

		if (drop)
		{
			DropOnNode(d.owner, d.servers[i], name, force, force);
			continue;
		}
		r = NodeExec(d.owner, d.servers[i], psprintf("SELECT exactonce.%s($1)", action), 1, params);
		if (r != NULL && strcmp(action, "flush") == 0)
			*result += pg_strtoint64(r);
	}
	if (drop)
	{
		/* the owner's, as CoordinatorLoad checked */
		if (SPI_execute(psprintf("DROP SCHEMA %s CASCADE", quote_identifier(name)), false, 0) < 0)
			elog(ERROR, "could not drop schema of distributed pipeline \"%s\"", name);
		ForgetRow(name);
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	return true;
}

/*
 * GroupedDims returns the dimensions of a distributed pipeline's cells, the
 * nodes' dimensions: with windows, window_start comes first.
 */
static int
GroupedDims(Distributed *d, const char **dims)
{
	int			n = 0;

	if (d->window_width != NULL)
		dims[n++] = "window_start";
	for (int i = 0; i < d->ndims; i++)
		dims[n++] = d->dims[i];
	return n;
}

/*
 * CoordinatorNodeDDL returns the statements that make the coordinator's
 * foreign tables of node i's cells, distinct values, watermark and row of
 * exactonce.pipelines, read through exactonce_forward (forward.c).
 */
char *
CoordinatorNodeDDL(Distributed *d, int i)
{
	StringInfoData sql;
	const char *s = quote_identifier(d->name);
	const char *srv = quote_literal_cstr(d->servers[i]);
	const char *remote = quote_literal_cstr(d->name);
	const char *dims[EXACTONCE_MAX_DIMENSIONS + 1];
	int			ndims = GroupedDims(d, dims);

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE FOREIGN TABLE %s.aggregates_%d (", s, i);
	for (int j = 0; j < ndims; j++)
		appendStringInfo(&sql, "%s text, ", quote_identifier(dims[j]));
	appendStringInfoString(&sql, "level integer, total numeric, keys bigint, ");
	for (int j = 0; j < d->nmeasures; j++)
		appendStringInfo(&sql, "%s numeric, %s bigint, ",
						 quote_identifier(psprintf("%s_sum", d->measures[j])),
						 quote_identifier(psprintf("%s_count", d->measures[j])));
	for (int j = 0; j < d->nminmax; j++)
		appendStringInfo(&sql, "%s numeric, %s numeric, ",
						 quote_identifier(psprintf("%s_min", d->min_max[j])),
						 quote_identifier(psprintf("%s_max", d->min_max[j])));
	appendStringInfo(&sql, "updated_at timestamptz)"
					 " SERVER exactonce_forward OPTIONS (server %3$s, schema_name %4$s, table_name 'aggregates');\n"
					 "CREATE FOREIGN TABLE %1$s.node_%2$d (name name, paused boolean, queued bigint,"
					 " lag interval, ingested bigint, applied bigint, duplicates bigint, stale bigint,"
					 " dead_lettered bigint, batches bigint, worker_state text, latency_p99 interval,"
					 " last_error text)"
					 " SERVER exactonce_forward OPTIONS (server %3$s, schema_name 'exactonce', table_name 'pipelines');\n",
					 s, i, srv, remote);
	if (d->ndistinct > 0)
		appendStringInfo(&sql, "CREATE FOREIGN TABLE %s.distincts_%d (cell text[] COLLATE \"C\", col text COLLATE \"C\","
						 " value text COLLATE \"C\", n bigint)"
						 " SERVER exactonce_forward OPTIONS (server %s, schema_name %s, table_name 'distincts');\n",
						 s, i, srv, remote);
	if (d->window_width != NULL)
		appendStringInfo(&sql, "CREATE FOREIGN TABLE %s.progress_%d (watermark timestamptz)"
						 " SERVER exactonce_forward OPTIONS (server %s, schema_name %s, table_name 'progress');\n",
						 s, i, srv, remote);
	return sql.data;
}

/*
 * AppendWindowsView appends the view windows of a distributed pipeline with
 * event-time windows: a node's, over the summed cells, where a window is
 * final when it is final on every node, by the least of the nodes'
 * watermarks (none while a node has no reading).
 */
static void
AppendWindowsView(StringInfo sql, Distributed *d, const char **dims, int ndims)
{
	const char *s = quote_identifier(d->name);
	const char *width = quote_literal_cstr(d->window_width);
	const char *lateness = quote_literal_cstr(d->lateness);

	appendStringInfo(sql, "CREATE OR REPLACE VIEW %1$s.windows AS SELECT a.window_start::pg_catalog.timestamptz AS window_start,"
					 " a.window_start::pg_catalog.timestamptz OPERATOR(pg_catalog.+) %2$s::pg_catalog.interval AS window_end,"
					 " a.window_start::pg_catalog.timestamptz OPERATOR(pg_catalog.+) %2$s::pg_catalog.interval"
					 " OPERATOR(pg_catalog.+) %3$s::pg_catalog.interval OPERATOR(pg_catalog.<=) w.watermark AS final",
					 s, width, lateness);
	for (int i = 1; i < ndims; i++)
		appendStringInfo(sql, ", a.%s", quote_identifier(dims[i]));
	appendStringInfoString(sql, ", a.level, a.total, a.keys");
	for (int j = 0; j < d->nmeasures; j++)
		appendStringInfo(sql, ", a.%s, a.%s, a.%s",
						 quote_identifier(psprintf("%s_sum", d->measures[j])),
						 quote_identifier(psprintf("%s_count", d->measures[j])),
						 quote_identifier(psprintf("%s_avg", d->measures[j])));
	for (int j = 0; j < d->nminmax; j++)
		appendStringInfo(sql, ", a.%s, a.%s",
						 quote_identifier(psprintf("%s_min", d->min_max[j])),
						 quote_identifier(psprintf("%s_max", d->min_max[j])));
	for (int j = 0; j < d->ndistinct; j++)
		appendStringInfo(sql, ", a.%s", quote_identifier(psprintf("%s_distinct", d->distincts[j])));
	appendStringInfo(sql, ", a.updated_at FROM %s.aggregates a, (SELECT CASE WHEN pg_catalog.count(*)"
					 " OPERATOR(pg_catalog.=) pg_catalog.count(watermark) THEN pg_catalog.min(watermark) END AS watermark"
					 " FROM (", s);
	for (int i = 0; i < d->nnodes; i++)
		appendStringInfo(sql, "%sSELECT watermark FROM %s.progress_%d", i > 0 ? " UNION ALL " : "", s, i);
	appendStringInfo(sql, ") u) w WHERE a.level OPERATOR(pg_catalog.>=) 1;\n"
					 "COMMENT ON VIEW %s.windows IS 'exactonce: the summed aggregates of each window, with its end and whether it is final on every node: its end plus the allowed lateness is at or before each node''s watermark';\n",
					 s);
}

/*
 * CoordinatorViewsDDL returns the statements that make, or remake with one
 * more node, the coordinator's views over the nodes.
 */
char *
CoordinatorViewsDDL(Distributed *d)
{
	StringInfoData sql;
	StringInfoData dims;
	const char *s = quote_identifier(d->name);
	const char *remote = quote_literal_cstr(d->name);
	const char *celldims[EXACTONCE_MAX_DIMENSIONS + 1];
	int			ncelldims = GroupedDims(d, celldims);

	initStringInfo(&dims);
	for (int i = 0; i < ncelldims; i++)
		appendStringInfo(&dims, "%s, ", quote_identifier(celldims[i]));
	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE OR REPLACE VIEW %s.aggregates AS ", s);
	if (d->ndistinct > 0)
	{
		appendStringInfoString(&sql, "SELECT c.*");
		for (int j = 0; j < d->ndistinct; j++)
			appendStringInfo(&sql, ", COALESCE(v.%1$s, 0) AS %1$s",
							 quote_identifier(psprintf("%s_distinct", d->distincts[j])));
		appendStringInfoString(&sql, " FROM (");
	}
	appendStringInfo(&sql, "SELECT %slevel, pg_catalog.sum(total) AS total,"
					 " pg_catalog.sum(keys)::pg_catalog.int8 AS keys, ",
					 dims.data);
	for (int j = 0; j < d->nmeasures; j++)
	{
		const char *sum = quote_identifier(psprintf("%s_sum", d->measures[j]));
		const char *count = quote_identifier(psprintf("%s_count", d->measures[j]));

		/* the average as each node computes it, from the sums */
		appendStringInfo(&sql, "pg_catalog.sum(%1$s) AS %1$s, pg_catalog.sum(%2$s)::pg_catalog.int8 AS %2$s,"
						 " pg_catalog.trim_scale(pg_catalog.sum(%1$s)) OPERATOR(pg_catalog./)"
						 " NULLIF(pg_catalog.sum(%2$s), 0) AS %3$s, ",
						 sum, count, quote_identifier(psprintf("%s_avg", d->measures[j])));
	}
	for (int j = 0; j < d->nminmax; j++)
		appendStringInfo(&sql, "pg_catalog.min(%1$s) AS %1$s, pg_catalog.max(%2$s) AS %2$s, ",
						 quote_identifier(psprintf("%s_min", d->min_max[j])),
						 quote_identifier(psprintf("%s_max", d->min_max[j])));
	appendStringInfoString(&sql, "pg_catalog.max(updated_at) AS updated_at FROM (");
	for (int i = 0; i < d->nnodes; i++)
		appendStringInfo(&sql, "%sSELECT * FROM %s.aggregates_%d", i > 0 ? " UNION ALL " : "", s, i);
	appendStringInfo(&sql, ") a GROUP BY %slevel", dims.data);
	if (d->ndistinct > 0)
	{
		/* a rollup's cell is the prefix of its dimensions: a node's key */
		appendStringInfoString(&sql, ") c LEFT JOIN (SELECT cell");
		for (int j = 0; j < d->ndistinct; j++)
			appendStringInfo(&sql, ", pg_catalog.count(DISTINCT value) FILTER (WHERE col OPERATOR(pg_catalog.=) %s) AS %s",
							 quote_literal_cstr(d->distincts[j]),
							 quote_identifier(psprintf("%s_distinct", d->distincts[j])));
		appendStringInfoString(&sql, " FROM (");
		for (int i = 0; i < d->nnodes; i++)
			appendStringInfo(&sql, "%sSELECT cell, col, value FROM %s.distincts_%d", i > 0 ? " UNION ALL " : "", s, i);
		appendStringInfoString(&sql, ") u GROUP BY cell) v ON v.cell OPERATOR(pg_catalog.=) (ARRAY[");
		for (int i = 0; i < ncelldims; i++)
			appendStringInfo(&sql, "%sc.%s", i > 0 ? ", " : "", quote_identifier(celldims[i]));
		appendStringInfoString(&sql, "]::pg_catalog.text[] COLLATE \"C\")[1:c.level]");
	}
	appendStringInfo(&sql, ";\n"
					 "COMMENT ON VIEW %s.aggregates IS 'exactonce: the cells of all nodes, summed per cell and level; distinct counts over the union of the nodes'' values; an error names a node that cannot be reached';\n"
					 "CREATE OR REPLACE VIEW %s.nodes AS ",
					 s, s);
	for (int i = 0; i < d->nnodes; i++)
		appendStringInfo(&sql, "%sSELECT %s::pg_catalog.name AS server, n.* FROM %s.node_%d n"
						 " WHERE n.name OPERATOR(pg_catalog.=) %s",
						 i > 0 ? " UNION ALL " : "", quote_literal_cstr(d->servers[i]), s, i, remote);
	appendStringInfo(&sql, ";\nCOMMENT ON VIEW %s.nodes IS 'exactonce: each node''s row of exactonce.pipelines';\n", s);
	if (d->window_width != NULL)
		AppendWindowsView(&sql, d, celldims, ncelldims);
	return sql.data;
}

/*
 * BuildCoordinatorDDL returns the statements that make the coordinator's
 * schema of a new distributed pipeline: hash partition i of ingest on
 * servers[i].
 */
static char *
BuildCoordinatorDDL(Distributed *d)
{
	StringInfoData sql;
	const char *s = quote_identifier(d->name);

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE SCHEMA %s;\n"
					 "COMMENT ON SCHEMA %s IS 'exactonce distributed pipeline: its nodes are the foreign servers of ingest''s partitions';\n"
					 "CREATE TABLE %s.ingest (key text COLLATE \"C\" NOT NULL, version bigint NOT NULL,"
					 " value numeric NOT NULL",
					 s, s, s);
	for (int i = 0; i < d->ndims; i++)
		appendStringInfo(&sql, ", %s text NOT NULL", quote_identifier(d->dims[i]));
	for (int i = 0; i < d->nmeasures; i++)
		appendStringInfo(&sql, ", %s numeric", quote_identifier(d->measures[i]));
	for (int i = 0; i < d->ndistinct; i++)
		appendStringInfo(&sql, ", %s text", quote_identifier(d->distincts[i]));
	appendStringInfo(&sql, ", deleted boolean NOT NULL DEFAULT false,"
					 " event_time timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp())"
					 " PARTITION BY HASH (key);\n"
					 "COMMENT ON TABLE %s.ingest IS 'exactonce: the queue; INSERT or COPY events here, each goes to the node of its key (hash partitioning)';\n",
					 s);
	for (int i = 0; i < d->nnodes; i++)
	{
		appendStringInfoString(&sql, CoordinatorPartitionDDL(d, d->nnodes, i, d->servers[i]));
		appendStringInfoString(&sql, CoordinatorNodeDDL(d, i));
	}
	appendStringInfoString(&sql, CoordinatorViewsDDL(d));
	return sql.data;
}

/*
 * CoordinatorPartitionDDL returns the statement that makes the partition of
 * ingest for the keys of hash remainder r of modulus m, on a server: a
 * foreign table of exactonce_forward (forward.c), which sends each
 * statement's events to the node in one COPY.
 */
char *
CoordinatorPartitionDDL(Distributed *d, int m, int r, const char *server)
{
	const char *s = quote_identifier(d->name);

	return psprintf("CREATE FOREIGN TABLE %1$s.%2$s PARTITION OF %1$s.ingest"
					" FOR VALUES WITH (MODULUS %3$d, REMAINDER %4$d)"
					" SERVER exactonce_forward OPTIONS (server %5$s);\n",
					s, quote_identifier(psprintf("ingest_%d_%d", m, r)), m, r,
					quote_literal_cstr(server));
}

/*
 * AdoptNodePipeline makes the pipeline a node already has node i of a distributed
 * pipeline, and returns true; false if it has none.  Its definition must be
 * the distributed pipeline's, and its keys those of hash partition i.
 * params are create_pipeline's: name, dimensions, mode, shards, measures,
 * min_max, distinct_counts.
 */
static bool
AdoptNodePipeline(Distributed *d, int i, const char **params)
{
	const char *check[6] = {params[0], params[1], params[2], params[4], params[5], params[6]};
	char	   *same;
	char	   *misplaced;

	same = NodeExec(d->owner, d->servers[i],
					"SELECT mode OPERATOR(pg_catalog.=) $3 AND dimensions OPERATOR(pg_catalog.=) $2::pg_catalog.text[]"
					" AND measures OPERATOR(pg_catalog.=) $4::pg_catalog.text[]"
					" AND min_max OPERATOR(pg_catalog.=) $5::pg_catalog.text[]"
					" AND distinct_counts OPERATOR(pg_catalog.=) $6::pg_catalog.text[] AND window_width IS NULL"
					" AND grouping_sets OPERATOR(pg_catalog.=) 'rollup'"
					" FROM exactonce.pipeline WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name",
					6, check);
	if (same == NULL)
		return false;
	if (strcmp(same, "t") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pipeline \"%s\" on server \"%s\" is not the one described", d->name, d->servers[i]),
				 errdetail("A pipeline adopted as a node must have the mode, dimensions, measures, min_max and distinct_counts given, no windows and the rollup.")));
	check[0] = psprintf("%d", d->nnodes);
	check[1] = psprintf("%d", i);
	misplaced = NodeExec(d->owner, d->servers[i],
						 psprintf("SELECT pg_catalog.count(*) FROM %s.state"
								  " WHERE exactonce.key_bucket(key, $1::pg_catalog.int4) OPERATOR(pg_catalog.<>) $2::pg_catalog.int4",
								  quote_identifier(d->name)), 2, check);
	if (misplaced == NULL || strcmp(misplaced, "0") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pipeline \"%s\" on server \"%s\" holds %s keys of other nodes", d->name, d->servers[i],
						misplaced ? misplaced : "some"),
				 errdetail("Node %d of %d holds the keys whose exactonce.key_bucket(key, %d) is %d.", i + 1, d->nnodes,
						   d->nnodes, i),
				 errhint("Adopt one server's pipeline alone, then spread its keys with exactonce.move_keys().")));
	return true;
}

/*
 * exactonce_create_distributed_pipeline creates a pipeline on each node of
 * servers (postgres_fdw foreign servers), or with adopt takes the one a node
 * has, and the coordinator's schema over them.  A node that fails makes the
 * pipelines made on the others dropped again, as far as they can be
 * reached; an adopted one is never dropped.
 */
Datum
exactonce_create_distributed_pipeline(PG_FUNCTION_ARGS)
{
	Distributed d = {0};
	ArrayType  *servers;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			nestlevel;
	char	   *dims_text;
	char	   *mode;
	char	   *shards;
	volatile int made = 0;
	volatile bool adopted[DIST_MAX_NODES] = {false};
	bool		adopt;
	MemoryContext cxt;
	Oid			out;
	bool		varlena;
	Oid			types[9] = {TEXTOID, REGROLEOID, NAMEARRAYOID, TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID,
	INTERVALOID, INTERVALOID};
	Datum		values[9];
	char		regnulls[9];
	char	   *measures_text;
	char	   *min_max_text;
	char	   *distincts_text;

	for (int i = 0; i < 11; i++)
		if (PG_ARGISNULL(i) && i != 9)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("the arguments of create_distributed_pipeline must not be NULL")));
	d.name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	getTypeOutputInfo(TEXTARRAYOID, &out, &varlena);
	dims_text = OidOutputFunctionCall(out, PG_GETARG_DATUM(1));
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(1), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n < 1 || n > EXACTONCE_MAX_DIMENSIONS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a pipeline has 1 to %d dimensions", EXACTONCE_MAX_DIMENSIONS)));
	d.ndims = n;
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("dimensions must not contain NULL")));
		d.dims[i] = TextDatumGetCString(elems[i]);
	}
	servers = PG_GETARG_ARRAYTYPE_P(2);
	deconstruct_array(servers, NAMEOID, NAMEDATALEN, false, TYPALIGN_CHAR, &elems, &nulls, &n);
	if (n < 1 || n > DIST_MAX_NODES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a distributed pipeline has 1 to %d servers", DIST_MAX_NODES)));
	d.nnodes = n;
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("servers must not contain NULL")));
		d.servers[i] = pstrdup(NameStr(*DatumGetName(elems[i])));
		for (int j = 0; j < i; j++)
			if (strcmp(d.servers[i], d.servers[j]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("server \"%s\" is listed twice", d.servers[i]),
						 errdetail("Each node holds the keys of one hash partition.")));
		(void) GetForeignServerByName(d.servers[i], false);
	}
	mode = text_to_cstring(PG_GETARG_TEXT_PP(3));
	shards = psprintf("%d", PG_GETARG_INT32(4));
	adopt = PG_GETARG_BOOL(8);
	measures_text = OidOutputFunctionCall(out, PG_GETARG_DATUM(5));
	min_max_text = OidOutputFunctionCall(out, PG_GETARG_DATUM(6));
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(5), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n > EXACTONCE_MAX_MEASURES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a pipeline has at most %d measures", EXACTONCE_MAX_MEASURES)));
	d.nmeasures = n;
	for (int i = 0; i < n; i++)
		d.measures[i] = nulls[i] ? "" : TextDatumGetCString(elems[i]);
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(6), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n > 1 + EXACTONCE_MAX_MEASURES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("min_max names value or measures, each once")));
	d.nminmax = n;
	for (int i = 0; i < n; i++)
		d.min_max[i] = nulls[i] ? "" : TextDatumGetCString(elems[i]);
	if (!PG_ARGISNULL(9))
		d.window_width = DatumGetCString(DirectFunctionCall1(interval_out, PG_GETARG_DATUM(9)));
	d.lateness = DatumGetCString(DirectFunctionCall1(interval_out, PG_GETARG_DATUM(10)));
	distincts_text = OidOutputFunctionCall(out, PG_GETARG_DATUM(7));
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(7), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n > EXACTONCE_MAX_DISTINCT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a pipeline has at most %d distinct_counts columns", EXACTONCE_MAX_DISTINCT)));
	d.ndistinct = n;
	for (int i = 0; i < n; i++)
		d.distincts[i] = nulls[i] ? "" : TextDatumGetCString(elems[i]);

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	d.owner = GetUserId();
	values[0] = CStringGetTextDatum(d.name);
	if (SPI_execute_plan(StatementPrepareFixed("SELECT 1 FROM exactonce.pipeline"
											   " WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name", 1, types),
						 values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("pipeline \"%s\" already exists", d.name),
				 errdetail("A pipeline of this server has the name, even if its schema is gone."),
				 errhint("Choose another name, or drop it first with exactonce.drop_pipeline('%s').", d.name)));
	if (OidIsValid(get_namespace_oid(d.name, true)))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_SCHEMA),
				 errmsg("schema \"%s\" already exists", d.name),
				 errhint("Choose a pipeline name that is not the name of an existing schema.")));
	/* a registry row left by a schema dropped by hand */
	CoordinatorForgetStale(d.name);

	/* the pipeline on each node; undone on the others if one fails */
	cxt = CurrentMemoryContext;
	PG_TRY();
	{
		const char *params[9] = {d.name, dims_text, mode, shards, measures_text, min_max_text, distincts_text,
		d.window_width, d.lateness};

		/* each node checks the definition as create_pipeline does */
		for (; made < d.nnodes; made++)
		{
			if (adopt && AdoptNodePipeline(&d, made, params))
			{
				adopted[made] = true;
				continue;
			}
			(void) NodeExec(d.owner, d.servers[made],
							"SELECT exactonce.create_pipeline($1, $2::text[], $3, $4::integer, $5::text[], $6::text[], $7::text[],"
							" $8::interval, $9::interval)",
							9, params);
		}
	}
	PG_CATCH();
	{
		ErrorData  *err;

		MemoryContextSwitchTo(cxt);
		err = CopyErrorData();
		FlushErrorState();
		for (int i = 0; i < made; i++)
			if (!adopted[i])
				DropOnNode(d.owner, d.servers[i], d.name, true, true);
		ReThrowError(err);
	}
	PG_END_TRY();

	if (SPI_execute(BuildCoordinatorDDL(&d), false, 0) < 0)
		elog(ERROR, "could not create the coordinator's schema of distributed pipeline \"%s\"", d.name);
	values[1] = ObjectIdGetDatum(d.owner);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = PG_GETARG_DATUM(1);
	values[4] = PG_GETARG_DATUM(5);
	values[5] = PG_GETARG_DATUM(6);
	values[6] = PG_GETARG_DATUM(7);
	values[7] = PG_GETARG_DATUM(9);
	memset(regnulls, ' ', sizeof(regnulls));
	if (PG_ARGISNULL(9))
		regnulls[7] = 'n';
	values[8] = PG_GETARG_DATUM(10);
	StatementExecAs(StatementTableOwner("distributed_pipeline"),
					StatementPrepareFixed("INSERT INTO exactonce.distributed_pipeline"
										  " (name, owner, servers, dimensions, measures, min_max, distinct_counts,"
										  " window_width, allowed_lateness)"
										  " VALUES ($1::pg_catalog.name, $2, $3, $4, $5, $6, $7, $8, $9)", 9, types),
					values, regnulls, false, 1);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_VOID();
}
