/*-------------------------------------------------------------------------
 *
 * pipelinecmds.c
 *		create_pipeline, drop_pipeline, pause, resume and set_shards.
 *
 * A pipeline is a row in exactonce.pipeline plus a schema of the same name
 * owned by the role that created it.  The schema holds:
 *
 *	 ingest			the queue, LIST-partitioned on ingest_slot into ingest_0
 *					and ingest_1 (queue.c rotates and truncates them)
 *	 state			one row per key; with min_max in latest mode, index
 *					state_cell on the dimensions (extrema.c)
 *	 seen			accumulate mode: one row per distinct (key, version)
 *	 aggregates		one row per non-empty rollup cell
 *	 dead_letters	events that could not be applied, with the reason
 *	 ledger			map batches by token: staged, then applied
 *	 progress		one row: queue position, counters, paused
 *	 shard			one row per key shard: its drain position
 *
 * The DDL runs as the calling role, so it owns what it creates; only the
 * registry row is written as the extension's owner (catalog/pipeline.c).
 * A distributed pipeline of the same name is dropped, paused and resumed on
 * its nodes instead (distributed/coordinator.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "catalog/pipeline.h"
#include "catalog/remake.h"
#include "catalog/shape.h"
#include "catalog/statement.h"
#include "distributed/coordinator.h"
#include "distributed/park.h"
#include "engine/drain.h"
#include "engine/ledger.h"
#include "engine/progress.h"
#include "utils/shmem.h"
#include "utils/wake.h"

PG_FUNCTION_INFO_V1(exactonce_create_pipeline);
PG_FUNCTION_INFO_V1(exactonce_drop_pipeline);
PG_FUNCTION_INFO_V1(exactonce_pause);
PG_FUNCTION_INFO_V1(exactonce_resume);
PG_FUNCTION_INFO_V1(exactonce_set_shards);

/* more shards than this only when asked for: each is a reduce per batch */
#define PIPELINE_DEFAULT_MAX_SHARDS	16

/* the counters of table progress and of each row of table shard */
#define COUNTER_COLUMNS \
	" ingested bigint NOT NULL DEFAULT 0, applied bigint NOT NULL DEFAULT 0," \
	" duplicates bigint NOT NULL DEFAULT 0, stale bigint NOT NULL DEFAULT 0," \
	" dead_lettered bigint NOT NULL DEFAULT 0, batches bigint NOT NULL DEFAULT 0," \
	" last_batch_at timestamptz"

#define SHARD_TABLE_COMMENT \
	"exactonce: drain position of each key shard (the rotation it drains, how many rows of its keys it took there, the TID and ingest_id of the last one and the file of that TID, a digest of their ingest_ids), the events it took and the counters of what it drained"

/* column names a dimension may not take */
static const char *const reserved_columns[] = {
	"key", "version", "value", "deleted", "event_time", "ingest_slot", "ingest_id",
	"level", "total", "keys", "updated_at", "reason", "failed_at", PIPELINE_RESERVE_COLUMN, NULL
};

/*
 * CheckIdentifier insists on an ordinary lower-case SQL identifier, so that a
 * name means the same quoted and unquoted and cannot smuggle in SQL.
 */
static void
CheckIdentifier(const char *what, const char *ident)
{
	size_t		len = strlen(ident);
	bool		ok = len > 0 && len < NAMEDATALEN;

	for (size_t i = 0; ok && i < len; i++)
	{
		char		c = ident[i];

		if (!((c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9')))
			ok = false;
	}
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid %s name \"%s\"", what, ident),
				 errdetail("A %s name must be an ordinary identifier of at most %d characters.",
						   what, NAMEDATALEN - 1),
				 errhint("Use lower-case letters, digits and underscores, starting with a letter or underscore.")));
	if (strncmp(ident, "pg_", 3) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_RESERVED_NAME),
				 errmsg("invalid %s name \"%s\"", what, ident),
				 errdetail("The prefix \"pg_\" is reserved for system schemas."),
				 errhint("Choose a name that does not start with \"pg_\".")));
}

/*
 * NameArray deconstructs a one-dimensional text[] of names (what they name
 * is for the error) and returns how many it has.
 */
static int
NameArray(ArrayType *arr, const char *what, Datum **elems, bool **nulls)
{
	int			n;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", what)));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, elems, nulls, &n);
	return n;
}

/*
 * CheckDimensions validates the dimension list of a new pipeline and returns
 * it as C strings.
 */
static int
CheckDimensions(ArrayType *arr, char **dims)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	n = NameArray(arr, "dimensions", &elems, &nulls);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a pipeline needs at least one dimension"),
				 errhint("Pass the dimension names in rollup order, for example ARRAY['risk_type', 'region', 'trade_desk'].")));
	if (n > EXACTONCE_MAX_DIMENSIONS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a pipeline can have at most %d dimensions", EXACTONCE_MAX_DIMENSIONS)));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("dimension names must not be NULL")));
		dims[i] = TextDatumGetCString(elems[i]);
		CheckIdentifier("dimension", dims[i]);
		for (const char *const *r = reserved_columns; *r; r++)
			if (strcmp(dims[i], *r) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_RESERVED_NAME),
						 errmsg("dimension name \"%s\" is reserved", dims[i]),
						 errdetail("The pipeline's own relations already have a column of that name."),
						 errhint("Rename the dimension, for example to \"%s_name\".", dims[i])));
		for (int j = 0; j < i; j++)
			if (strcmp(dims[i], dims[j]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("dimension \"%s\" is listed twice", dims[i]),
						 errhint("Each dimension may appear once in the rollup hierarchy.")));
	}
	return n;
}

/*
 * CheckNames validates a list of column names a new pipeline declares, of
 * what kind ("measure"), at most max of them, each an ordinary identifier
 * that leaves room for suffix, reserved by no relation of the pipeline and
 * listed once; it returns them as C strings.
 */
static int
CheckNames(ArrayType *arr, const char *what, const char *suffix, int max, const char *hint,
		   char **names)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	n = NameArray(arr, psprintf("the %s names", what), &elems, &nulls);
	if (n > max)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a pipeline can have at most %d %ss", max, what)));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s names must not be NULL", what)));
		names[i] = TextDatumGetCString(elems[i]);
		CheckIdentifier(what, names[i]);
		if (strlen(names[i]) > NAMEDATALEN - 1 - strlen(suffix))
			ereport(ERROR,
					(errcode(ERRCODE_NAME_TOO_LONG),
					 errmsg("%s name \"%s\" is too long", what, names[i]),
					 errdetail("The aggregates table has a column \"%s%s\", which must fit in %d characters.",
							   names[i], suffix, NAMEDATALEN - 1)));
		for (const char *const *r = reserved_columns; *r; r++)
			if (strcmp(names[i], *r) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_RESERVED_NAME),
						 errmsg("%s name \"%s\" is reserved", what, names[i]),
						 errdetail("The pipeline's own relations already have a column of that name."),
						 errhint("%s", hint)));
		for (int j = 0; j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("%s \"%s\" is listed twice", what, names[i])));
	}
	return n;
}

/*
 * CheckClash refuses a column a new pipeline declares whose name, or whose
 * name with one of the suffixes, is other's.
 */
static void
CheckClash(const char *what, const char *name, const char *const *suffixes, int nsuffixes,
		   const char *other_what, const char *other)
{
	bool		clash = strcmp(name, other) == 0;

	for (int k = 0; k < nsuffixes && !clash; k++)
		clash = strcmp(psprintf("%s%s", name, suffixes[k]), other) == 0;
	if (clash)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_COLUMN),
				 errmsg("%s \"%s\" and %s \"%s\" would share a column name", what, name,
						other_what, other),
				 errhint("Rename one of them.")));
}

/*
 * CheckMeasures validates the measures of a new pipeline: numeric columns
 * besides value, named unlike any column the pipeline's relations have
 * (dimensions, theirs, and the aggregates' <measure>_sum, _count, _avg,
 * _min and _max).
 */
static int
CheckMeasures(ArrayType *arr, char **measures, char **dims, int ndims)
{
	static const char *const suffixes[] = {"_sum", "_count", "_avg", "_min", "_max"};
	int			n = CheckNames(arr, "measure", "_count", EXACTONCE_MAX_MEASURES,
							   "The event's value is always a measure; name the others otherwise.",
							   measures);

	for (int i = 0; i < n; i++)
		for (int d = 0; d < ndims; d++)
			CheckClash("measure", measures[i], suffixes, lengthof(suffixes), "dimension", dims[d]);
	return n;
}

/*
 * CheckMinMax validates the measures whose min and max a new pipeline keeps
 * per cell ("value" or declared measures) and marks them in min_max.
 */
static void
CheckMinMax(ArrayType *arr, char **measures, int nmeasures, char **dims, int ndims,
			bool *min_max)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	n = NameArray(arr, "min_max", &elems, &nulls);
	for (int i = 0; i < n; i++)
	{
		char	   *m = nulls[i] ? NULL : TextDatumGetCString(elems[i]);
		int			slot = -1;

		if (m && strcmp(m, "value") == 0)
			slot = 0;
		for (int j = 0; m && slot < 0 && j < nmeasures; j++)
			if (strcmp(m, measures[j]) == 0)
				slot = 1 + j;
		if (slot < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("min_max names \"%s\", which is not a measure", m ? m : "NULL"),
					 errhint("List \"value\" or measures declared in measures.")));
		if (min_max[slot])
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("min_max lists \"%s\" twice", m)));
		for (int d = 0; slot == 0 && d < ndims; d++)
			if (strcmp(dims[d], "value_min") == 0 || strcmp(dims[d], "value_max") == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("min_max of value and dimension \"%s\" would share a column name", dims[d]),
						 errhint("Rename the dimension.")));
		min_max[slot] = true;
	}
}

/*
 * CheckDistincts validates the columns whose distinct values a new pipeline
 * counts per cell: text columns of their own, named unlike any other
 * column, each counted in aggregates column <name>_distinct.
 */
static int
CheckDistincts(ArrayType *arr, Pipeline *def)
{
	static const char *const suffixes[] = {"_distinct"};
	int			n = CheckNames(arr, "distinct_counts column", "_distinct", EXACTONCE_MAX_DISTINCT,
							   "Name a text column of its own, for example \"counterparty\".",
							   def->distincts);

	for (int i = 0; i < n; i++)
		for (int j = 0; j < def->ndims + def->nmeasures; j++)
			CheckClash("distinct_counts column", def->distincts[i], suffixes, lengthof(suffixes),
					   j < def->ndims ? "dimension" : "measure",
					   j < def->ndims ? def->dims[j] : def->measures[j - def->ndims]);
	return n;
}

/*
 * CheckWindow validates the window of a new pipeline: a width of more than
 * 0 and a lateness of 0 or more, both without months, in accumulate mode.
 */
static void
CheckWindow(Pipeline *def, Interval *width, Interval *lateness)
{
	def->window_us = PipelineIntervalMicros("window_width", width);
	def->lateness_us = PipelineIntervalMicros("allowed_lateness", lateness);
	if (def->window_us <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window_width must be more than 0")));
	if (def->lateness_us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("allowed_lateness must not be negative")));
	if (def->mode != PIPELINE_ACCUMULATE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("event-time windows need mode 'accumulate'"),
				 errdetail("In latest mode a newer version would move a key out of a window that is final."),
				 errhint("Create the pipeline with mode => 'accumulate', or without window_width.")));
	if (def->ndims >= EXACTONCE_MAX_DIMENSIONS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a pipeline with windows can have at most %d dimensions",
						EXACTONCE_MAX_DIMENSIONS - 1)));
	for (int i = 0; i < def->ndims; i++)
		if (strcmp(def->dims[i], PIPELINE_WINDOW_DIM) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_RESERVED_NAME),
					 errmsg("dimension name \"%s\" is reserved in a pipeline with windows", def->dims[i]),
					 errhint("The window is the first dimension of the rollup, window_start.")));
	/* the window is the first dimension */
	memmove(&def->dims[1], &def->dims[0], sizeof(char *) * def->ndims);
	def->dims[0] = PIPELINE_WINDOW_DIM;
	def->ndims++;
	def->windowed = true;
}

/*
 * ParseMode turns the mode argument into a PipelineMode.
 */
static PipelineMode
ParseMode(const char *mode)
{
	if (strcmp(mode, "latest") == 0)
		return PIPELINE_LATEST;
	if (strcmp(mode, "accumulate") == 0)
		return PIPELINE_ACCUMULATE;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown pipeline mode \"%s\"", mode),
			 errhint("The mode is 'latest' (a key's newest version counts) or 'accumulate' (every distinct version adds once).")));
	pg_unreachable();
}

/*
 * CheckShards validates a number of shards and returns it.
 */
static int
CheckShards(int nshards)
{
	if (nshards < 1 || nshards > EXACTONCE_MAX_SHARDS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a pipeline has between 1 and %d shards, not %d", EXACTONCE_MAX_SHARDS, nshards),
				 errhint("Shards are drained in parallel, each by one worker: one per core the pipeline may use.")));
	return nshards;
}

/*
 * DefaultShards is the number of shards of a pipeline created without one:
 * as many as the drain workers of this database, so that each has a core
 * of its own, between 2 and PIPELINE_DEFAULT_MAX_SHARDS.
 */
static int
DefaultShards(void)
{
	int			workers = ShmemWorkersOf(get_database_name(MyDatabaseId));

	return Max(2, Min(PIPELINE_DEFAULT_MAX_SHARDS, workers));
}

/*
 * AppendDims appends ", <dim> text NOT NULL" (or nullable) for each dimension.
 */
static void
AppendDims(StringInfo sql, char **dims, int ndims, bool not_null)
{
	for (int i = 0; i < ndims; i++)
		appendStringInfo(sql, ", %s text%s", quote_identifier(dims[i]),
						 not_null ? " NOT NULL" : "");
}

/*
 * AppendMeasures appends ", <measure> numeric" for each measure (if
 * measures) and ", <column> text" for each distinct_counts column (if
 * distincts): NULL where an event has none.
 */
static void
AppendMeasures(StringInfo sql, Pipeline *def, bool measures, bool distincts)
{
	for (int i = 0; measures && i < def->nmeasures; i++)
		appendStringInfo(sql, ", %s numeric", quote_identifier(def->measures[i]));
	for (int i = 0; distincts && i < def->ndistinct; i++)
		appendStringInfo(sql, ", %s text", quote_identifier(def->distincts[i]));
}

/*
 * AppendAggregateMeasures appends the aggregates' columns of each measure:
 * sum, count and avg over the cell's contributions that have it, and min and
 * max for those that keep them.
 */
static void
AppendAggregateMeasures(StringInfo sql, Pipeline *def)
{
	for (int i = 0; i < def->nmeasures; i++)
	{
		const char *m = def->measures[i];

		appendStringInfo(sql, "%s numeric NOT NULL DEFAULT 0, %s bigint NOT NULL DEFAULT 0,"
						 " %s numeric GENERATED ALWAYS AS (pg_catalog.trim_scale(%s) OPERATOR(pg_catalog./) NULLIF(%s, 0)) STORED, ",
						 quote_identifier(psprintf("%s_sum", m)),
						 quote_identifier(psprintf("%s_count", m)),
						 quote_identifier(psprintf("%s_avg", m)),
						 quote_identifier(psprintf("%s_sum", m)),
						 quote_identifier(psprintf("%s_count", m)));
	}
	for (int slot = 0; slot <= def->nmeasures; slot++)
		if (def->min_max[slot])
			appendStringInfo(sql, "%s numeric, %s numeric, ",
							 quote_identifier(psprintf("%s_min", PipelineExtremumName(def, slot))),
							 quote_identifier(psprintf("%s_max", PipelineExtremumName(def, slot))));
	if (PIPELINE_RESERVES(def))
		appendStringInfoString(sql, PIPELINE_RESERVE_COLUMN " numeric[], ");
	for (int i = 0; i < def->ndistinct; i++)
		appendStringInfo(sql, "%s bigint NOT NULL DEFAULT 0, ",
						 quote_identifier(psprintf("%s_distinct", def->distincts[i])));
}

/*
 * AppendColumnComment appends a COMMENT ON COLUMN of the aggregates.
 */
static void
AppendColumnComment(StringInfo sql, Pipeline *def, const char *column, const char *comment)
{
	appendStringInfo(sql, "COMMENT ON COLUMN %s.aggregates.%s IS %s;\n",
					 quote_identifier(def->name), quote_identifier(column),
					 quote_literal_cstr(psprintf("exactonce: %s", comment)));
}

/*
 * AppendAggregateComments says what each declared column of the aggregates
 * holds.
 */
static void
AppendAggregateComments(StringInfo sql, Pipeline *def)
{
	if (def->windowed)
		AppendColumnComment(sql, def, PIPELINE_WINDOW_DIM,
							psprintf("start of the cell's window of event_time, " INT64_FORMAT " %s wide (ISO 8601, UTC); the first dimension",
									 def->window_us % USECS_PER_SEC == 0 ? def->window_us / USECS_PER_SEC : def->window_us,
									 def->window_us % USECS_PER_SEC == 0 ? "seconds" : "microseconds"));
	for (int i = 0; i < def->nmeasures; i++)
	{
		const char *m = def->measures[i];

		AppendColumnComment(sql, def, psprintf("%s_sum", m),
							psprintf("sum of %s over the cell's contributions that have it (0 if none)", m));
		AppendColumnComment(sql, def, psprintf("%s_count", m),
							psprintf("how many of the cell's contributions have %s", m));
		AppendColumnComment(sql, def, psprintf("%s_avg", m),
							psprintf("trim_scale(%s_sum) / %s_count, NULL if none has %s", m, m, m));
	}
	for (int slot = 0; slot <= def->nmeasures; slot++)
	{
		const char *m = PipelineExtremumName(def, slot);

		if (!def->min_max[slot])
			continue;
		AppendColumnComment(sql, def, psprintf("%s_min", m),
							psprintf("least %s among the cell's contributions, exact as they come and go", m));
		AppendColumnComment(sql, def, psprintf("%s_max", m),
							psprintf("greatest %s among the cell's contributions, exact as they come and go", m));
	}
	if (PIPELINE_RESERVES(def))
		AppendColumnComment(sql, def, PIPELINE_RESERVE_COLUMN,
							"a leaf cell's least and greatest values of each min_max column, kept to set its min and max anew when they leave (NULL: none kept)");
	for (int i = 0; i < def->ndistinct; i++)
		AppendColumnComment(sql, def, psprintf("%s_distinct", def->distincts[i]),
							psprintf("number of distinct %s values among the cell's contributions", def->distincts[i]));
}

/*
 * PartitionsDDL returns the statements that make the queue's two
 * partitions, in schema s (quoted).  With more than one shard each is
 * partitioned in turn by the shard of the key (exactonce.key_shard_ops, the
 * hash of QueueKeyShard), so that a shard reads only its own rows: leaf
 * ingest_<slot>_<shard>.  Where the catalog is older than 1.19, which has
 * no such operator class, they hold every shard's rows.
 */
static char *
PartitionsDDL(const char *s, int nshards)
{
	StringInfoData sql;
	bool		by_shard = nshards > 1 && OidIsValid(PipelineShardOpclass(true));

	initStringInfo(&sql);
	for (int i = 0; i < EXACTONCE_PARTITIONS; i++)
	{
		appendStringInfo(&sql, "CREATE TABLE %s.ingest_%d PARTITION OF %s.ingest FOR VALUES IN (%d)",
						 s, i, s, i);
		if (!by_shard)
		{
			appendStringInfo(&sql, " WITH (autovacuum_enabled = false);\n"
							 "COMMENT ON TABLE %s.ingest_%d IS 'exactonce: queue partition %d, truncated once drained';\n",
							 s, i, i);
			continue;
		}
		appendStringInfo(&sql, " PARTITION BY HASH (key exactonce.key_shard_ops);\n"
						 "COMMENT ON TABLE %s.ingest_%d IS 'exactonce: queue partition %d, one table per shard, each truncated once drained';\n",
						 s, i, i);
		for (int j = 0; j < nshards; j++)
			appendStringInfo(&sql, "CREATE TABLE %s.ingest_%d_%d PARTITION OF %s.ingest_%d"
							 " FOR VALUES WITH (MODULUS %d, REMAINDER %d) WITH (autovacuum_enabled = false);\n"
							 "COMMENT ON TABLE %s.ingest_%d_%d IS 'exactonce: queue partition %d, the rows of shard %d';\n",
							 s, i, j, s, i, nshards, j, s, i, j, i, j);
	}
	return sql.data;
}

/*
 * BuildPipelineDDL returns the statements that create a pipeline's schema.
 */
static char *
BuildPipelineDDL(Pipeline *def, int nshards)
{
	StringInfoData sql;
	const char *name = def->name;
	const char *s = quote_identifier(name);
	char	  **dims = def->dims;
	int			ndims = def->ndims;
	PipelineMode mode = def->mode;

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE SCHEMA %s;\n", s);
	appendStringInfo(&sql, "COMMENT ON SCHEMA %s IS 'exactonce pipeline (%s mode)';\n",
					 s, mode == PIPELINE_LATEST ? "latest" : "accumulate");

	/* progress: the one row every batch updates, hence the low fillfactor */
	appendStringInfo(&sql,
					 "CREATE TABLE %s.progress ("
					 " singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),"
					 " rotation bigint NOT NULL DEFAULT 0,"
					 " drain_rotation bigint NOT NULL DEFAULT 0,"
					 " paused boolean NOT NULL DEFAULT false,"
					 COUNTER_COLUMNS ","
					 " watermark timestamptz"
					 ") WITH (fillfactor = 10);\n"
					 "INSERT INTO %s.progress DEFAULT VALUES;\n"
					 "COMMENT ON TABLE %s.progress IS 'exactonce: queue rotation of this pipeline, and counters of what came other than through a shard (one row)';\n"
					 "COMMENT ON COLUMN %s.progress.drain_rotation IS 'exactonce: the oldest rotation whose queue partition is not truncated yet';\n",
					 s, s, s, s);

	/*
	 * shard: one row per key shard, each updated by every batch of its own:
	 * its position and the counters of what it drained
	 */
	appendStringInfo(&sql,
					 "CREATE TABLE %s.shard ("
					 " shard integer PRIMARY KEY,"
					 " drain_rotation bigint NOT NULL DEFAULT 0,"
					 " drain_position bigint NOT NULL DEFAULT 0,"
					 " taken bigint NOT NULL DEFAULT 0,"
					 " drain_row bigint,"
					 " drain_count bigint NOT NULL DEFAULT 0,"
					 " drain_digest bigint DEFAULT 0,"
					 " drain_file oid,"
					 COUNTER_COLUMNS
					 ") WITH (fillfactor = 10);\n"
					 "INSERT INTO %s.shard (shard) SELECT pg_catalog.generate_series(0, %d);\n"
					 "COMMENT ON TABLE %s.shard IS '%s';\n",
					 s, s, nshards - 1, s, SHARD_TABLE_COMMENT);

	/*
	 * ingest: the queue, two partitions that take turns.  ingest_id comes
	 * right after event_time, on the 8-byte boundary that ends, so that the
	 * two hidden columns take 12 bytes of each row, not 16 with padding; its
	 * sequence hands a backend 1,000 values at a time, a WAL record each.
	 */
	appendStringInfo(&sql, "CREATE TABLE %s.ingest (key text COLLATE \"C\" NOT NULL,"
					 " version bigint NOT NULL, value numeric NOT NULL", s);
	AppendDims(&sql, dims + PIPELINE_FIRST_INPUT_DIM(def), ndims - PIPELINE_FIRST_INPUT_DIM(def), true);
	AppendMeasures(&sql, def, true, true);
	appendStringInfo(&sql, ", deleted boolean NOT NULL DEFAULT false,"
					 " event_time timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),"
					 " ingest_id bigint NOT NULL GENERATED ALWAYS AS IDENTITY (CACHE 1000),"
					 " ingest_slot integer NOT NULL"
					 ") PARTITION BY LIST (ingest_slot);\n");
	appendStringInfo(&sql, "ALTER TABLE %s.ingest ALTER COLUMN ingest_slot"
					 " SET DEFAULT exactonce.ingest_slot(%s::text);\n",
					 s, quote_literal_cstr(name));
	appendStringInfo(&sql, "CREATE TRIGGER wake AFTER INSERT ON %s.ingest"
					 " FOR EACH STATEMENT EXECUTE FUNCTION exactonce.wake();\n"
					 "COMMENT ON TRIGGER wake ON %s.ingest IS 'exactonce: wakes the background workers';\n",
					 s, s);
	appendStringInfo(&sql, "COMMENT ON TABLE %s.ingest IS 'exactonce: the queue; INSERT or COPY events here';\n"
					 "COMMENT ON COLUMN %s.ingest.ingest_slot IS 'managed by exactonce: the queue partition taking inserts; never set it';\n"
					 "COMMENT ON COLUMN %s.ingest.ingest_id IS 'managed by exactonce: identifies the row in drain positions';\n",
					 s, s, s);
	appendStringInfoString(&sql, PartitionsDDL(s, nshards));

	/*
	 * Added once the partitions exist, so that theirs is NOT VALID too:
	 * pg_dump then adds it after loading the rows, which a restore must bring
	 * back to both partitions, the sealed one included.
	 */
	appendStringInfo(&sql, "ALTER TABLE %s.ingest ADD CONSTRAINT ingest_slot_open"
					 " CHECK (exactonce.ingest_slot_check(ingest_slot, %s::text)) NOT VALID;\n",
					 s, quote_literal_cstr(name));

	/*
	 * state: a batch rewrites most of its keys' rows, and the versions it
	 * replaces can only be pruned once the transactions running beside it
	 * (the other shards') have ended; half of each page kept free lets the
	 * new versions stay on their page (HOT), which spares the index entry and
	 * most of the WAL of an update.  The WAL record of an update on the same
	 * page leaves out the bytes the new row shares with the old one at its
	 * start, so the columns that rarely change (the key, the cell) come first
	 * and those every version changes last: the fixed-width ones, then the
	 * numerics, which leave no padding before a column after them.
	 */
	if (mode == PIPELINE_LATEST)
	{
		appendStringInfo(&sql, "CREATE TABLE %s.state (key text COLLATE \"C\" PRIMARY KEY", s);
		AppendDims(&sql, dims, ndims, true);
		AppendMeasures(&sql, def, false, true);
		appendStringInfoString(&sql, ", deleted boolean NOT NULL, version bigint NOT NULL,"
							   " updated_at timestamptz NOT NULL, value numeric NOT NULL");
		AppendMeasures(&sql, def, true, false);
		appendStringInfo(&sql, ") WITH (fillfactor = 50);\n"
						 "COMMENT ON TABLE %s.state IS 'exactonce: each key''s highest version (deleted = tombstone)';\n",
						 s);
	}
	else
	{
		appendStringInfo(&sql, "CREATE TABLE %s.state (key text COLLATE \"C\" PRIMARY KEY,"
						 " first_event_time timestamptz NOT NULL, version bigint NOT NULL,"
						 " total numeric NOT NULL, events bigint NOT NULL, last_event_time timestamptz NOT NULL,"
						 " updated_at timestamptz NOT NULL) WITH (fillfactor = 50);\n"
						 "COMMENT ON TABLE %s.state IS 'exactonce: each key''s running context (sum, events, first and last event_time, highest version)';\n"
						 "CREATE TABLE %s.seen (key text COLLATE \"C\", version bigint,"
						 " digest bigint NOT NULL, PRIMARY KEY (key, version));\n"
						 "COMMENT ON TABLE %s.seen IS 'exactonce: every distinct (key, version) applied, with a digest of its content';\n",
						 s, s, s, s);
	}

	/* aggregates: one row per cell; NULL dimensions are rolled up */
	appendStringInfo(&sql, "CREATE TABLE %s.aggregates (", s);
	for (int i = 0; i < ndims; i++)
		appendStringInfo(&sql, "%s text, ", quote_identifier(dims[i]));
	appendStringInfoString(&sql, "level integer NOT NULL, total numeric NOT NULL, keys bigint NOT NULL, ");
	AppendAggregateMeasures(&sql, def);
	appendStringInfo(&sql, "updated_at timestamptz NOT NULL) WITH (fillfactor = 50);\n"
					 "CREATE UNIQUE INDEX aggregates_cell ON %s.aggregates (level", s);
	for (int i = 0; i < ndims; i++)
		appendStringInfo(&sql, ", %s", quote_identifier(dims[i]));
	appendStringInfo(&sql, ") NULLS NOT DISTINCT;\n"
					 "COMMENT ON INDEX %s.aggregates_cell IS 'exactonce: a cell is its level and dimension values';\n"
					 "COMMENT ON TABLE %s.aggregates IS %s;\n",
					 s, s, def->rollup ?
					 "'exactonce: one row per non-empty rollup cell (level k groups by the first k dimensions)'" :
					 "'exactonce: one row per non-empty cell of the pipeline''s grouping sets (level: how many dimensions the cell groups by; NULL in those it does not)'");
	AppendAggregateComments(&sql, def);

	/* dead letters */
	appendStringInfo(&sql, "CREATE TABLE %s.dead_letters (key text COLLATE \"C\", version bigint, value numeric", s);
	AppendDims(&sql, dims + PIPELINE_FIRST_INPUT_DIM(def), ndims - PIPELINE_FIRST_INPUT_DIM(def), false);
	AppendMeasures(&sql, def, true, true);
	appendStringInfo(&sql, ", deleted boolean, event_time timestamptz, reason text NOT NULL,"
					 " failed_at timestamptz NOT NULL DEFAULT pg_catalog.now());\n"
					 "COMMENT ON TABLE %s.dead_letters IS 'exactonce: events that could not be applied, as they arrived, with the reason';\n",
					 s);

	/* ledger: staged batches (applied_at IS NULL) and applied tokens */
	appendStringInfo(&sql,
					 "CREATE TABLE %s.ledger (token bytea PRIMARY KEY, source text NOT NULL,"
					 " position bigint, staged_at timestamptz NOT NULL, applied_at timestamptz,"
					 " deltas integer NOT NULL, levels integer[], cells text[], totals numeric[], keys bigint[],"
					 " measure_sums numeric[], measure_counts bigint[], extrema numeric[],"
					 " member_cells text[], member_columns integer[], member_values text[],"
					 " member_counts bigint[]);\n"
					 "CREATE INDEX ledger_staged ON %s.ledger (staged_at) WHERE applied_at IS NULL;\n"
					 "CREATE INDEX ledger_source ON %s.ledger (source, position) WHERE applied_at IS NOT NULL;\n"
					 "COMMENT ON TABLE %s.ledger IS 'exactonce: map batches by SHA-256 token; staged until applied_at is set, kept while a retry could bring the token back';\n"
					 "COMMENT ON INDEX %s.ledger_staged IS 'exactonce: the staged batches, for reduce';\n"
					 "COMMENT ON INDEX %s.ledger_source IS 'exactonce: applied tokens by source position, for release';\n",
					 s, s, s, s, s, s);

	/*
	 * state_cell: the keys of each leaf cell, from which reduce reads a
	 * leaf's min and max anew when a newer version took its extreme away
	 * (extrema.c)
	 */

	/*
	 * distincts: the values of each distinct_counts column in each cell;
	 * every batch updates n of many, hence room for HOT updates
	 */
	if (def->ndistinct > 0)
		appendStringInfo(&sql,
						 "CREATE TABLE %s.distincts (cell text[] COLLATE \"C\", col text COLLATE \"C\","
						 " value text COLLATE \"C\", n bigint NOT NULL, PRIMARY KEY (cell, col, value))"
						 " WITH (fillfactor = 50);\n"
						 "COMMENT ON TABLE %s.distincts IS 'exactonce: the values of each distinct_counts column in each cell (cell: the values of its dimensions), with how many contributions have it';\n",
						 s, s);
	/* windows: the aggregates with their windows' times and finality */
	if (def->windowed)
	{
		appendStringInfo(&sql,
						 "CREATE VIEW %1$s.windows AS SELECT a.window_start::timestamptz AS window_start,"
						 " a.window_start::timestamptz + %2$s AS window_end,"
						 " a.window_start::timestamptz + %2$s + %3$s <= p.watermark AS final",
						 s, quote_literal_cstr(psprintf(INT64_FORMAT " microseconds", def->window_us)),
						 quote_literal_cstr(psprintf(INT64_FORMAT " microseconds", def->lateness_us)));
		for (int i = 1; i < ndims; i++)
			appendStringInfo(&sql, ", a.%s", quote_identifier(dims[i]));
		appendStringInfoString(&sql, ", a.level, a.total, a.keys");
		for (int i = 0; i < def->nmeasures; i++)
			appendStringInfo(&sql, ", a.%s, a.%s, a.%s",
							 quote_identifier(psprintf("%s_sum", def->measures[i])),
							 quote_identifier(psprintf("%s_count", def->measures[i])),
							 quote_identifier(psprintf("%s_avg", def->measures[i])));
		for (int slot = 0; slot <= def->nmeasures; slot++)
			if (def->min_max[slot])
				appendStringInfo(&sql, ", a.%s, a.%s",
								 quote_identifier(psprintf("%s_min", PipelineExtremumName(def, slot))),
								 quote_identifier(psprintf("%s_max", PipelineExtremumName(def, slot))));
		for (int i = 0; i < def->ndistinct; i++)
			appendStringInfo(&sql, ", a.%s",
							 quote_identifier(psprintf("%s_distinct", def->distincts[i])));
		appendStringInfo(&sql, ", a.updated_at FROM %1$s.aggregates a, %1$s.progress p WHERE a.level >= 1;\n"
						 "COMMENT ON VIEW %1$s.windows IS 'exactonce: the aggregates of each window (level 1 and below), with its end and whether it is final: its end plus the allowed lateness is at or before the watermark, the start of the latest window that has a reading';\n"
						 "COMMENT ON COLUMN %1$s.progress.watermark IS 'exactonce: the start of the latest window that has a reading; a reading whose window ends at or before it minus the allowed lateness is too late';\n",
						 s);
	}
	if (def->any_min_max && mode == PIPELINE_LATEST)
	{
		appendStringInfo(&sql, "CREATE INDEX state_cell ON %s.state (", s);
		for (int i = 0; i < ndims; i++)
			appendStringInfo(&sql, "%s%s", i > 0 ? ", " : "", quote_identifier(dims[i]));
		appendStringInfo(&sql, ");\n"
						 "COMMENT ON INDEX %s.state_cell IS 'exactonce: the keys of each leaf cell, for its min and max';\n",
						 s);
	}
	return sql.data;
}

/*
 * exactonce_create_pipeline creates a pipeline's schema and registers it.
 */
Datum
exactonce_create_pipeline(PG_FUNCTION_ARGS)
{
	Pipeline	def = {0};
	int			nshards;
	int			nestlevel;
	Oid			types[11] = {TEXTOID, TEXTOID, TEXTARRAYOID, OIDOID, INT4OID,
	TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, INTERVALOID, INTERVALOID, TEXTOID};
	Datum		values[11];
	char		nulls[12] = "           ";
	char	   *grouping;

	if (PG_NARGS() != 10)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the exactonce library is newer than the extension's SQL objects"),
				 errhint("Run ALTER EXTENSION exactonce UPDATE.")));
	for (int i = 0; i < 10; i++)
		if (PG_ARGISNULL(i) && i != 3 && i != 7)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("name, dimensions, mode, measures, min_max, distinct_counts, allowed_lateness and grouping_sets of a pipeline must not be NULL")));
	def.name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	CheckIdentifier("pipeline", def.name);
	def.mode = ParseMode(text_to_cstring(PG_GETARG_TEXT_PP(2)));
	def.ndims = CheckDimensions(PG_GETARG_ARRAYTYPE_P(1), def.dims);
	nshards = PG_ARGISNULL(3) ? DefaultShards() : CheckShards(PG_GETARG_INT32(3));
	def.nmeasures = CheckMeasures(PG_GETARG_ARRAYTYPE_P(4), def.measures, def.dims, def.ndims);
	CheckMinMax(PG_GETARG_ARRAYTYPE_P(5), def.measures, def.nmeasures, def.dims, def.ndims,
				def.min_max);
	for (int slot = 0; slot <= def.nmeasures; slot++)
		def.any_min_max |= def.min_max[slot];
	def.ndistinct = CheckDistincts(PG_GETARG_ARRAYTYPE_P(6), &def);
	if (!PG_ARGISNULL(7))
		CheckWindow(&def, PG_GETARG_INTERVAL_P(7), PG_GETARG_INTERVAL_P(8));
	grouping = text_to_cstring(PG_GETARG_TEXT_PP(9));
	PipelineParseGrouping(&def, grouping);
	if (!def.rollup && def.windowed)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("grouping_sets \"%s\" do not go with windows", grouping),
				 errdetail("A window is the first level of a rollup."),
				 errhint("Use grouping_sets => 'rollup' with windows.")));
	if (!def.rollup && (def.any_min_max || def.ndistinct > 0))
	{
		bool		leaves = false;

		for (int s = 0; s < def.nsets; s++)
			leaves |= def.sets[s] == CELL_LEVEL_MASK(def.ndims);
		if (!leaves)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("grouping_sets \"%s\" need the set of all dimensions for min_max and distinct_counts",
							grouping),
					 errdetail("Min, max and distinct counts of a cell are read from the cells of all dimensions under it."),
					 errhint("Add the set of all dimensions, or use 'cube'.")));
	}

	SPI_connect();
	nestlevel = StatementPinSearchPath();

	values[0] = CStringGetTextDatum(def.name);
	if (SPI_execute_with_args("SELECT 1 FROM exactonce.pipeline WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("pipeline \"%s\" already exists", def.name),
				 errhint("Choose another name, or drop it first with exactonce.drop_pipeline('%s').", def.name)));
	if (OidIsValid(get_namespace_oid(def.name, true)))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_SCHEMA),
				 errmsg("schema \"%s\" already exists", def.name),
				 errdetail("A pipeline creates and owns a schema of its own name."),
				 errhint("Choose a pipeline name that is not the name of an existing schema.")));

	/* a distributed pipeline's registry row left by a schema dropped by hand */
	CoordinatorForgetStale(def.name);
	if (SPI_execute(BuildPipelineDDL(&def, nshards), false, 0) < 0)
		elog(ERROR, "could not create the relations of pipeline \"%s\"", def.name);

	values[1] = CStringGetTextDatum(def.mode == PIPELINE_LATEST ? "latest" : "accumulate");
	values[2] = PG_GETARG_DATUM(1);
	values[3] = ObjectIdGetDatum(GetUserId());
	values[4] = Int32GetDatum(nshards);
	values[5] = PG_GETARG_DATUM(4);
	values[6] = PG_GETARG_DATUM(5);
	values[7] = PG_GETARG_DATUM(6);
	values[8] = PG_ARGISNULL(7) ? (Datum) 0 : PG_GETARG_DATUM(7);
	values[9] = PG_GETARG_DATUM(8);
	values[10] = PG_GETARG_DATUM(9);
	if (PG_ARGISNULL(7))
		nulls[8] = nulls[9] = 'n';
	/* the registry keeps the dimensions of the rollup, the window first */
	if (def.windowed)
	{
		Datum	   *d = palloc(sizeof(Datum) * def.ndims);

		for (int i = 0; i < def.ndims; i++)
			d[i] = CStringGetTextDatum(def.dims[i]);
		values[2] = PointerGetDatum(construct_array(d, def.ndims, TEXTOID, -1, false, TYPALIGN_INT));
	}
	PipelineRegistryExecNulls("INSERT INTO exactonce.pipeline (name, mode, dimensions, owner, shards, measures,"
							  " min_max, distinct_counts, window_width, allowed_lateness, grouping_sets)"
							  " VALUES ($1::pg_catalog.name, $2, $3, $4::pg_catalog.regrole, $5, $6, $7, $8, $9, $10,"
							  " $11)",
							  11, types, values, nulls, 1);

	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * ForgetMoves deletes the records of a dropped pipeline's moves of keys
 * (move.c), if the extension has them yet.
 */
static void
ForgetMoves(const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	Oid			nsp = get_namespace_oid("exactonce", false);

	if (OidIsValid(get_relname_relid("key_move", nsp)))
		PipelineRegistryExec("DELETE FROM exactonce.key_move WHERE pipeline OPERATOR(pg_catalog.=) $1::pg_catalog.name",
							 1, types, values, -1);
}

/*
 * ForcePipelineDrop drops a pipeline without looking inside it: its schema,
 * if the pipeline's owner owns it (someone else's schema of the same name is
 * left alone), and its registry row.  It returns false, doing nothing, if
 * there is no such pipeline or the caller is not its owner, for PipelineLoad
 * to report.
 */
static bool
ForcePipelineDrop(const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	Oid			owner;
	Oid			nspid;
	HeapTuple	tup;
	bool		isnull;
	bool		owned;

	if (SPI_execute_with_args("SELECT owner FROM exactonce.pipeline WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	if (SPI_processed == 0)
		return false;
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (!has_privs_of_role(GetUserId(), owner))
		return false;
	nspid = get_namespace_oid(name, true);
	tup = OidIsValid(nspid) ? SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(nspid)) : NULL;
	owned = tup != NULL && ((Form_pg_namespace) GETSTRUCT(tup))->nspowner == owner;
	if (tup != NULL)
		ReleaseSysCache(tup);
	if (owned)
	{
		ShapeLockForDrop(nspid);
		if (SPI_execute(psprintf("DROP SCHEMA %s CASCADE", quote_identifier(name)), false, 0) < 0)
			elog(ERROR, "could not drop schema of pipeline \"%s\"", name);
	}
	PipelineRegistryExec("DELETE FROM exactonce.pipeline WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name",
						 1, types, values, 1);
	ForgetMoves(name);
	return true;
}

/*
 * exactonce_drop_pipeline drops a pipeline's schema and registry row.
 */
Datum
exactonce_drop_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name;
	bool		force = PG_ARGISNULL(1) ? false : PG_GETARG_BOOL(1);
	Pipeline   *p;
	int			nestlevel;
	int64		dummy;
	bool		paused;
	Oid			types[1] = {INT4OID};
	Datum		values[1];
	QueuePosition shards[EXACTONCE_MAX_SHARDS];
	int64		rotation,
				drain_rotation;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline name must not be NULL")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (CoordinatorRun(name, "drop", force, &dummy))
		PG_RETURN_VOID();

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	if (force && ForcePipelineDrop(name))
	{
		StatementUnpinSearchPath(nestlevel);
		SPI_finish();
		PG_RETURN_VOID();
	}
	p = PipelineLoad(name, true);
	PipelineActAsOwner(p);

	/*
	 * wait for batches in progress and for inserters, and keep both out; in
	 * the lock order, so that none of them waits for the drop while the drop
	 * waits for it
	 */
	ShapeLockForDrop(p->nspid);
	ProgressLockAll(p, shards, &rotation, &drain_rotation, &paused);
	QueueFreeze(p);
	{
		int64		queued,
					staged;
		TimestampTz oldest;

		/*
		 * a batch a worker left staged for another to apply (drain.c) is
		 * applied, not discarded; the counts are as of now, not of when the
		 * drop began to wait, and of the events no shard took (a drained
		 * partition may wait for its truncation)
		 */
		DrainApplyLeft(p);
		queued = QueueDepth(p, rotation, drain_rotation, shards, NULL, &oldest, 0, NULL, NULL);
		staged = LedgerStagedCount(p, NULL, DT_NOEND);
		if (queued > 0 || staged > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("pipeline \"%s\" still has " INT64_FORMAT " queued events and " INT64_FORMAT " staged batches",
							name, queued, staged),
					 errdetail("Dropping it now would discard events that were never applied."),
					 errhint("Run exactonce.flush('%s') first, or pass force => true to discard them.", name)));
		queued = ParkCount(p->nspid);
		if (queued > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("pipeline \"%s\" still keeps " INT64_FORMAT " events of keys being moved to another node",
							name, queued),
					 errdetail("Dropping it now would discard events that were never applied."),
					 errhint("Finish the move with exactonce.move_keys() at the coordinator, or pass force => true to discard them.")));
	}

	if (SPI_execute(psprintf("DROP SCHEMA %s CASCADE", quote_identifier(name)), false, 0) < 0)
		elog(ERROR, "could not drop schema of pipeline \"%s\"", name);
	values[0] = Int32GetDatum(p->id);
	PipelineRegistryExec("DELETE FROM exactonce.pipeline WHERE id OPERATOR(pg_catalog.=) $1",
						 1, types, values, 1);
	ForgetMoves(name);

	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();

	/*
	 * PostgreSQL keeps negative catalog cache entries for what was looked up
	 * in the dropped schema (statistics of its tables, names in it) for the
	 * life of the backend; start the caches afresh, so that making and
	 * dropping pipelines does not grow a session.
	 */
	InvalidateSystemCaches();
	PG_RETURN_VOID();
}

/*
 * SetPaused implements pause() and resume().
 */
static void
SetPaused(const char *name, bool paused)
{
	Pipeline   *p;
	int			nestlevel;
	int64		dummy;
	bool		was_paused;

	if (CoordinatorRun(name, paused ? "pause" : "resume", false, &dummy))
		return;
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(name, true);
	PipelineActAsOwner(p);

	/*
	 * pause waits for the batches in progress, and applies those the workers
	 * left staged for one of them to apply: a paused pipeline's aggregates
	 * hold all that its state does
	 */
	ProgressLockAll(p, NULL, &dummy, &dummy, &was_paused);
	if (paused)
		DrainApplyLeft(p);
	ProgressSetPaused(p, paused);
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	WakeWorkersAtCommit();
}

/*
 * exactonce_pause stops the workers from draining a pipeline.
 */
Datum
exactonce_pause(PG_FUNCTION_ARGS)
{
	SetPaused(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PG_RETURN_VOID();
}

/*
 * exactonce_resume lets the workers drain a pipeline again.
 */
Datum
exactonce_resume(PG_FUNCTION_ARGS)
{
	SetPaused(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	PG_RETURN_VOID();
}

/*
 * SetShardsKeep keeps what was made on each of the queue's tables, which
 * set_shards() makes anew (RemakeKeep).
 */
static List *
SetShardsKeep(const char *s)
{
	List	   *relids = NIL;
	List	   *kept = NIL;
	ListCell   *lc;
	bool		isnull;

	if (SPI_execute(psprintf("SELECT relid FROM pg_catalog.pg_partition_tree(%s::pg_catalog.regclass)"
							 " UNION ALL SELECT relid FROM pg_catalog.pg_partition_tree(%s::pg_catalog.regclass)",
							 quote_literal_cstr(psprintf("%s.ingest_0", s)),
							 quote_literal_cstr(psprintf("%s.ingest_1", s))), true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the tables of the queue");
	/* RemakeKeep runs queries of its own */
	for (uint64 i = 0; i < SPI_processed; i++)
		relids = lappend_oid(relids, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																	SPI_tuptable->tupdesc, 1, &isnull)));
	foreach(lc, relids)
		kept = lappend(kept, RemakeKeep(lfirst_oid(lc), "set_shards()"));
	return kept;
}

/*
 * exactonce_set_shards changes the number of shards of a pipeline.  It
 * drains the queue first, as flush() does, in the caller's transaction:
 * that leaves every shard at the start of the partition taking inserts and
 * both partitions empty, so the shards can be cut anew without any event
 * changing hands half way.  It returns the number of events it drained.
 */
Datum
exactonce_set_shards(PG_FUNCTION_ARGS)
{
	Pipeline   *p;
	int			nshards;
	int64		drained;
	int			nestlevel;
	const char *s;
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		values[2];
	List	   *kept;
	ListCell   *lc;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline name and shards must not be NULL")));
	PipelineRequireReadCommitted("exactonce.set_shards()");
	nshards = CheckShards(PG_GETARG_INT32(1));
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PipelineActAsOwner(p);
	s = quote_identifier(p->name);
	/* what the queue's tables carry is kept, or refused before the drain */
	kept = SetShardsKeep(s);
	drained = DrainPipeline(p);

	/*
	 * shards that go pass on their counts to shard 0; new ones start where
	 * the others are, at the rotation taking inserts
	 */
	StatementWriteAll(NULL, psprintf("UPDATE %1$s.shard z SET taken = z.taken + g.taken,"
									 " ingested = z.ingested + g.ingested, applied = z.applied + g.applied,"
									 " duplicates = z.duplicates + g.duplicates, stale = z.stale + g.stale,"
									 " dead_lettered = z.dead_lettered + g.dead_lettered,"
									 " batches = z.batches + g.batches,"
									 " last_batch_at = greatest(z.last_batch_at, g.last_batch_at)"
									 " FROM (SELECT coalesce(sum(taken), 0)::bigint AS taken,"
									 " coalesce(sum(ingested), 0)::bigint AS ingested, coalesce(sum(applied), 0)::bigint AS applied,"
									 " coalesce(sum(duplicates), 0)::bigint AS duplicates, coalesce(sum(stale), 0)::bigint AS stale,"
									 " coalesce(sum(dead_lettered), 0)::bigint AS dead_lettered,"
									 " coalesce(sum(batches), 0)::bigint AS batches, max(last_batch_at) AS last_batch_at"
									 " FROM %1$s.shard WHERE shard >= %2$d) g"
									 " WHERE z.shard = 0", s, nshards),
					  "SELECT 1");
	StatementWriteAll(NULL, psprintf("DELETE FROM %s.shard WHERE shard >= %d", s, nshards),
					  psprintf("SELECT %d", Max(p->nshards - nshards, 0)));
	StatementWriteAll(psprintf("r AS MATERIALIZED (SELECT g, (SELECT rotation FROM %s.progress)"
							   " FROM pg_catalog.generate_series(%d, %d) g)", s, p->nshards, nshards - 1),
					  psprintf("INSERT INTO %s.shard (shard, drain_rotation) SELECT * FROM r", s),
					  "SELECT pg_catalog.count(*) FROM r");
	values[0] = Int32GetDatum(nshards);
	values[1] = Int32GetDatum(p->id);
	PipelineRegistryExec("UPDATE exactonce.pipeline SET shards = $1 WHERE id OPERATOR(pg_catalog.=) $2",
						 2, types, values, 1);

	/*
	 * The queue is empty: its partitions are made anew, cut by the new shards
	 * (a queue made before 1.19 is laid out by shard from here on), with the
	 * triggers and privileges of the tables they replace.
	 */
	if (SPI_execute(psprintf("DROP TABLE %s.ingest_0, %s.ingest_1;\n%s", s, s,
							 PartitionsDDL(s, nshards)), false, 0) < 0)
		elog(ERROR, "could not make the queue partitions of pipeline \"%s\" anew", p->name);
	foreach(lc, kept)
		RemakeRestore(lfirst(lc), get_namespace_oid(p->name, false), "set_shards()");

	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	WakeWorkersAtCommit();
	PG_RETURN_INT64(drained);
}
