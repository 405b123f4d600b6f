/*-------------------------------------------------------------------------
 *
 * pipeline.c
 *		Creating, dropping, pausing and looking up pipelines.
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
 *
 * The DDL runs as the calling role, so it owns what it creates; only the
 * registry row is written as the extension's owner.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/datetime.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "drain.h"
#include "distributed.h"
#include "pipeline.h"
#include "progress.h"
#include "shape.h"
#include "statement.h"
#include "worker.h"

PG_FUNCTION_INFO_V1(exactonce_create_pipeline);
PG_FUNCTION_INFO_V1(exactonce_drop_pipeline);
PG_FUNCTION_INFO_V1(exactonce_pause);
PG_FUNCTION_INFO_V1(exactonce_resume);
PG_FUNCTION_INFO_V1(exactonce_set_shards);

#define SHARD_TABLE_COMMENT \
	"exactonce: drain position of each key shard (the rotation it drains, how many rows of its keys it took there, the TID and ingest_id of the last one, a digest of their ingest_ids) and the events it took"

/* column names a dimension may not take */
static const char *const reserved_columns[] = {
	"key", "version", "value", "deleted", "event_time", "ingest_slot", "ingest_id",
	"level", "total", "keys", "updated_at", "reason", "failed_at", NULL
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
 * PipelineExtremumName names a min_max slot: value, or a measure.
 */
const char *
PipelineExtremumName(Pipeline *p, int slot)
{
	return slot == 0 ? "value" : p->measures[slot - 1];
}

/*
 * IntervalMicros turns an interval of days and time into microseconds; a
 * month has no fixed length, so an interval with months is an error.
 */
static int64
IntervalMicros(const char *what, Interval *iv)
{
	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be given in months or years", what),
				 errhint("Give it in days, hours, minutes or seconds, for example '30 days' or '5 minutes'.")));
	return iv->time + iv->day * USECS_PER_DAY;
}

/*
 * PipelineWindowStartTime returns the start of the window that holds t, a
 * finite time.  Windows are aligned on 1970-01-01 00:00 UTC.
 */
TimestampTz
PipelineWindowStartTime(Pipeline *p, TimestampTz t)
{
	const int64 epoch = -((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE)) * USECS_PER_DAY;
	int64		since = t - epoch;

	Assert(p->windowed && !TIMESTAMP_NOT_FINITE(t));
	return epoch + since - ((since % p->window_us) + p->window_us) % p->window_us;
}

/*
 * PipelineWindowStart returns the start of the window that holds t, as the
 * text of window_start: ISO 8601 in UTC ("2024-05-01T10:05:00Z", with
 * microseconds when they are not 0), which sorts as the times do and reads
 * back as the same timestamptz whatever the session's settings.  Windows
 * are aligned on 1970-01-01 00:00 UTC.  A window that does not start in
 * the years 1 to 9999, which that text cannot say, is none: (Datum) 0.
 */
Datum
PipelineWindowStart(Pipeline *p, TimestampTz t)
{
	struct pg_tm tm;
	fsec_t		fsec;
	char		buf[64];

	if (TIMESTAMP_NOT_FINITE(t) ||
		timestamp2tm(PipelineWindowStartTime(p, t), NULL, &tm, &fsec, NULL, NULL) != 0 ||
		tm.tm_year < 1 || tm.tm_year > 9999)
		return (Datum) 0;
	if (fsec != 0)
		snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year, tm.tm_mon,
				 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int) fsec);
	else
		snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year, tm.tm_mon,
				 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
	return CStringGetTextDatum(buf);
}

/*
 * CheckWindow validates the window of a new pipeline: a width of more than
 * 0 and a lateness of 0 or more, both without months, in accumulate mode.
 */
static void
CheckWindow(Pipeline *def, Interval *width, Interval *lateness)
{
	def->window_us = IntervalMicros("window_width", width);
	def->lateness_us = IntervalMicros("allowed_lateness", lateness);
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
 * BadGrouping reports a grouping that cannot be taken.
 */
static void
BadGrouping(const char *grouping, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid grouping_sets \"%s\"", grouping),
			 errdetail("%s", why),
			 errhint("Give 'rollup', 'cube', or grouping sets such as '(region, desk), (region), ()'.")));
}

/*
 * ParseGrouping sets the cells of a pipeline from its grouping: 'rollup'
 * (level k groups by the first k dimensions), 'cube' (every subset of the
 * dimensions) or grouping sets, each a parenthesized list of dimensions.
 */
static void
ParseGrouping(Pipeline *p, const char *grouping)
{
	const char *c = grouping;

	p->rollup = strcmp(grouping, "rollup") == 0;
	p->nsets = 0;
	if (p->rollup)
	{
		for (int level = 0; level <= p->ndims; level++)
			p->sets[p->nsets++] = CELL_LEVEL_MASK(level);
		return;
	}
	if (strcmp(grouping, "cube") == 0)
	{
		if (p->ndims > 8)
			BadGrouping(grouping, "A cube has 2^n groupings: it takes at most 8 dimensions.");
		for (uint32 mask = 0; mask < (1u << p->ndims); mask++)
			p->sets[p->nsets++] = mask;
		return;
	}
	for (;;)
	{
		uint32		mask = 0;

		while (*c == ' ')
			c++;
		if (*c++ != '(')
			BadGrouping(grouping, "A grouping set is a list of dimensions in parentheses.");
		for (;;)
		{
			const char *start;
			int			d = 0;

			while (*c == ' ')
				c++;
			if (*c == ')' && mask == 0)
				break;
			start = c;
			while ((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')
				c++;
			while (d < p->ndims && (strlen(p->dims[d]) != c - start ||
									strncmp(p->dims[d], start, c - start) != 0))
				d++;
			if (c == start || d == p->ndims)
				BadGrouping(grouping, "A grouping set names dimensions of the pipeline.");
			if (mask & (1u << d))
				BadGrouping(grouping, "A grouping set names a dimension twice.");
			mask |= 1u << d;
			while (*c == ' ')
				c++;
			if (*c == ')')
				break;
			if (*c++ != ',')
				BadGrouping(grouping, "The dimensions of a grouping set are separated by commas.");
		}
		c++;
		for (int s = 0; s < p->nsets; s++)
			if (p->sets[s] == mask)
				BadGrouping(grouping, "A grouping set is listed twice.");
		if (p->nsets == PIPELINE_MAX_SETS)
			BadGrouping(grouping, "Too many grouping sets.");
		p->sets[p->nsets++] = mask;
		while (*c == ' ')
			c++;
		if (*c == '\0')
			return;
		if (*c++ != ',')
			BadGrouping(grouping, "Grouping sets are separated by commas.");
	}
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
	for (int i = 0; i < def->ndistinct; i++)
		AppendColumnComment(sql, def, psprintf("%s_distinct", def->distincts[i]),
							psprintf("number of distinct %s values among the cell's contributions", def->distincts[i]));
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
					 " ingested bigint NOT NULL DEFAULT 0,"
					 " applied bigint NOT NULL DEFAULT 0,"
					 " duplicates bigint NOT NULL DEFAULT 0,"
					 " stale bigint NOT NULL DEFAULT 0,"
					 " dead_lettered bigint NOT NULL DEFAULT 0,"
					 " batches bigint NOT NULL DEFAULT 0,"
					 " last_batch_at timestamptz,"
					 " watermark timestamptz"
					 ") WITH (fillfactor = 10);\n"
					 "INSERT INTO %s.progress DEFAULT VALUES;\n"
					 "COMMENT ON TABLE %s.progress IS 'exactonce: queue rotation and counters of this pipeline (one row)';\n"
					 "COMMENT ON COLUMN %s.progress.drain_rotation IS 'exactonce: the oldest rotation whose queue partition is not truncated yet';\n",
					 s, s, s, s);

	/* shard: one row per key shard, each updated by every batch of its own */
	appendStringInfo(&sql,
					 "CREATE TABLE %s.shard ("
					 " shard integer PRIMARY KEY,"
					 " drain_rotation bigint NOT NULL DEFAULT 0,"
					 " drain_position bigint NOT NULL DEFAULT 0,"
					 " taken bigint NOT NULL DEFAULT 0,"
					 " drain_row bigint,"
					 " drain_count bigint NOT NULL DEFAULT 0,"
					 " drain_digest bigint DEFAULT 0"
					 ") WITH (fillfactor = 10);\n"
					 "INSERT INTO %s.shard (shard) SELECT pg_catalog.generate_series(0, %d);\n"
					 "COMMENT ON TABLE %s.shard IS '%s';\n",
					 s, s, nshards - 1, s, SHARD_TABLE_COMMENT);

	/* ingest: the queue, two partitions that take turns */
	appendStringInfo(&sql, "CREATE TABLE %s.ingest (key text COLLATE \"C\" NOT NULL,"
					 " version bigint NOT NULL, value numeric NOT NULL", s);
	AppendDims(&sql, dims + PIPELINE_FIRST_INPUT_DIM(def), ndims - PIPELINE_FIRST_INPUT_DIM(def), true);
	AppendMeasures(&sql, def, true, true);
	appendStringInfo(&sql, ", deleted boolean NOT NULL DEFAULT false,"
					 " event_time timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),"
					 " ingest_slot integer NOT NULL,"
					 " ingest_id bigint NOT NULL GENERATED ALWAYS AS IDENTITY (CACHE 100)"
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
	for (int i = 0; i < EXACTONCE_SLOTS; i++)
		appendStringInfo(&sql,
						 "CREATE TABLE %s.ingest_%d PARTITION OF %s.ingest FOR VALUES IN (%d)"
						 " WITH (autovacuum_enabled = false);\n"
						 "COMMENT ON TABLE %s.ingest_%d IS 'exactonce: queue partition %d, truncated once drained';\n",
						 s, i, s, i, s, i, i);

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
	 * and those every version changes last.
	 */
	if (mode == PIPELINE_LATEST)
	{
		appendStringInfo(&sql, "CREATE TABLE %s.state (key text COLLATE \"C\" PRIMARY KEY", s);
		AppendDims(&sql, dims, ndims, true);
		AppendMeasures(&sql, def, false, true);
		appendStringInfoString(&sql, ", deleted boolean NOT NULL, version bigint NOT NULL, value numeric NOT NULL");
		AppendMeasures(&sql, def, true, false);
		appendStringInfo(&sql, ", updated_at timestamptz NOT NULL"
						 ") WITH (fillfactor = 50);\n"
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
	/* distincts: the values of each distinct_counts column in each cell */
	if (def->ndistinct > 0)
		appendStringInfo(&sql,
						 "CREATE TABLE %s.distincts (cell text[] COLLATE \"C\", col text COLLATE \"C\","
						 " value text COLLATE \"C\", n bigint NOT NULL, PRIMARY KEY (cell, col, value));\n"
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
 * RegistryExec runs one statement on exactonce.pipeline as the extension's
 * owner: pipeline owners may change their own pipelines, not the registry.
 */
static void
RegistryExecNulls(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls,
				  int expected)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

	if (plan == NULL)
		elog(ERROR, "could not prepare \"%s\": %s", sql, SPI_result_code_string(SPI_result));
	StatementExecAs(StatementTableOwner("pipeline"), plan, values, nulls, false, expected);
	SPI_freeplan(plan);
}

/*
 * RegistryExec runs RegistryExecNulls without NULLs.
 */
static void
RegistryExec(const char *sql, int nargs, Oid *types, Datum *values, int expected)
{
	RegistryExecNulls(sql, nargs, types, values, NULL, expected);
}

/*
 * PipelineRelationOwner returns the owner of a relation, InvalidOid if it is
 * gone.
 */
Oid
PipelineRelationOwner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		return InvalidOid;
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * CheckNotCitus refuses a pipeline a table of which Citus has distributed
 * (it is in Citus' catalog pg_dist_partition).  The table here is then a
 * shell over shards on other nodes: a drain would read nothing of them,
 * and the TRUNCATE of a drained queue partition would empty every shard.
 */
static void
CheckNotCitus(Pipeline *p)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(p->nspid)};

	if (!OidIsValid(get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE)))
		return;
	if (SPI_execute_with_args("SELECT c.relname::pg_catalog.text FROM pg_catalog.pg_dist_partition d"
							  " JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.logicalrelid"
							  " WHERE c.relnamespace OPERATOR(pg_catalog.=) $1 ORDER BY 1 LIMIT 1",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read pg_dist_partition");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("table \"%s.%s\" of pipeline \"%s\" is distributed by Citus",
						p->name, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), p->name),
				 errdetail("A pipeline drains, flushes and truncates its own tables on this node; on a shell over shards it would read nothing and empty every shard."),
				 errhint("Keep a pipeline's tables local: run a pipeline on each node and sum their cells at the coordinator (README.md, \"Citus\"), or undistribute the tables with undistribute_table().")));
}

/*
 * CheckOwnership insists that the pipeline's schema and the relations the
 * stages touch are what create_pipeline made: of the expected kinds and all
 * owned by the registered owner.  Workers and the monitoring view act on a
 * pipeline as that owner; a schema of the same name created by someone else,
 * or a relation swapped for a view, must never run their code as that role.
 */
static void
CheckOwnership(Pipeline *p)
{
	struct
	{
		Oid			relid;
		char		relkind;
	}			rels[] = {
		{p->ingest, RELKIND_PARTITIONED_TABLE},
		{p->slots[0], RELKIND_RELATION},
		{p->slots[1], RELKIND_RELATION},
		{p->state, RELKIND_RELATION},
		{p->progress, RELKIND_RELATION},
		{p->shard, RELKIND_RELATION},
		{get_relname_relid("aggregates", p->nspid), RELKIND_RELATION},
		{get_relname_relid("ledger", p->nspid), RELKIND_RELATION},
		{get_relname_relid("dead_letters", p->nspid), RELKIND_RELATION},
		{p->mode == PIPELINE_ACCUMULATE ? p->seen : p->state, RELKIND_RELATION},
		{p->ndistinct > 0 ? p->distinct_values : p->state, RELKIND_RELATION},
		{p->feed ? get_relname_relid("feed", p->nspid) : p->state, RELKIND_RELATION},
	};
	HeapTuple	tup = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(p->nspid));
	bool		ok = HeapTupleIsValid(tup) &&
	((Form_pg_namespace) GETSTRUCT(tup))->nspowner == p->owner;

	if (HeapTupleIsValid(tup))
		ReleaseSysCache(tup);
	for (int i = 0; ok && i < lengthof(rels); i++)
		ok = OidIsValid(rels[i].relid) && get_rel_relkind(rels[i].relid) == rels[i].relkind &&
			PipelineRelationOwner(rels[i].relid) == p->owner;
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("schema or relations of pipeline \"%s\" are not what exactonce made", p->name),
				 errdetail("They must be tables owned by role %s, the pipeline's owner, in a schema it owns.",
						   GetUserNameFromId(p->owner, true) ? GetUserNameFromId(p->owner, true) : "(dropped)"),
				 errhint("Restore them, or drop the pipeline with exactonce.drop_pipeline('%s', force => true).",
						 p->name)));
}

/*
 * PipelineDefinition reads a pipeline's definition from its registry row.
 */
static Pipeline *
PipelineDefinition(HeapTuple tup, TupleDesc desc)
{
	Pipeline   *p = palloc0(sizeof(Pipeline));
	bool		isnull;
	Datum	   *elems;
	int			n;
	char	   *mode;

	p->id = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
	p->name = SPI_getvalue(tup, desc, 2);
	mode = SPI_getvalue(tup, desc, 3);
	p->mode = strcmp(mode, "latest") == 0 ? PIPELINE_LATEST : PIPELINE_ACCUMULATE;
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 4, &isnull)),
					  TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	p->ndims = n;
	for (int i = 0; i < n; i++)
		p->dims[i] = TextDatumGetCString(elems[i]);
	p->owner = DatumGetObjectId(SPI_getbinval(tup, desc, 5, &isnull));
	p->nshards = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	if (p->nshards < 1 || p->nshards > EXACTONCE_MAX_SHARDS)
		elog(ERROR, "pipeline \"%s\" has %d shards", p->name, p->nshards);

	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 7, &isnull)),
					  TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	if (n > EXACTONCE_MAX_MEASURES)
		elog(ERROR, "pipeline \"%s\" has %d measures", p->name, n);
	p->nmeasures = n;
	for (int i = 0; i < n; i++)
		p->measures[i] = TextDatumGetCString(elems[i]);
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 8, &isnull)),
					  TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *m = TextDatumGetCString(elems[i]);

		for (int slot = 0; slot <= p->nmeasures; slot++)
			if (strcmp(m, PipelineExtremumName(p, slot)) == 0)
				p->min_max[slot] = p->any_min_max = true;
	}
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 9, &isnull)),
					  TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	if (n > EXACTONCE_MAX_DISTINCT)
		elog(ERROR, "pipeline \"%s\" counts %d distinct columns", p->name, n);
	p->ndistinct = n;
	for (int i = 0; i < n; i++)
		p->distincts[i] = TextDatumGetCString(elems[i]);
	{
		Datum		width = SPI_getbinval(tup, desc, 10, &isnull);

		if (!isnull)
		{
			bool		lnull;
			Datum		lateness = SPI_getbinval(tup, desc, 11, &lnull);

			p->windowed = true;
			p->window_us = IntervalMicros("window_width", DatumGetIntervalP(width));
			p->lateness_us = lnull ? 0 : IntervalMicros("allowed_lateness", DatumGetIntervalP(lateness));
			if (p->window_us <= 0 || p->ndims < 1 || strcmp(p->dims[0], PIPELINE_WINDOW_DIM) != 0)
				elog(ERROR, "pipeline \"%s\" has a malformed window", p->name);
		}
	}

	ParseGrouping(p, TextDatumGetCString(SPI_getbinval(tup, desc, 12, &isnull)));
	p->feed = DatumGetBool(SPI_getbinval(tup, desc, 13, &isnull));
	p->feed_notify = DatumGetBool(SPI_getbinval(tup, desc, 14, &isnull));
	p->horizon = DatumGetInt64(SPI_getbinval(tup, desc, 15, &isnull));
	p->has_horizon = !isnull;
	return p;
}

/*
 * PipelineFill completes a Pipeline from its registry row, and locks and
 * checks the tables that tables names (SHAPE_*); NULL if the pipeline was
 * dropped while it waited for them.
 */
static Pipeline *
PipelineFill(HeapTuple tup, TupleDesc desc, uint32 tables)
{
	Pipeline   *p = PipelineDefinition(tup, desc);

	p->nspid = get_namespace_oid(p->name, true);
	if (!OidIsValid(p->nspid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_SCHEMA),
				 errmsg("schema of pipeline \"%s\" is missing", p->name),
				 errhint("Drop the pipeline with exactonce.drop_pipeline('%s', force => true) and create it again.",
						 p->name)));
	p->ingest = get_relname_relid("ingest", p->nspid);
	for (int i = 0; i < EXACTONCE_SLOTS; i++)
		p->slots[i] = get_relname_relid(psprintf("ingest_%d", i), p->nspid);
	p->state = get_relname_relid("state", p->nspid);
	p->state_pkey = get_relname_relid("state_pkey", p->nspid);
	p->seen = get_relname_relid("seen", p->nspid);
	p->seen_pkey = get_relname_relid("seen_pkey", p->nspid);
	p->progress = get_relname_relid("progress", p->nspid);
	p->shard = get_relname_relid("shard", p->nspid);
	p->state_cell = get_relname_relid("state_cell", p->nspid);
	p->distinct_values = get_relname_relid("distincts", p->nspid);
	if (p->any_min_max && p->mode == PIPELINE_LATEST && !OidIsValid(p->state_cell))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("index \"%s.state_cell\" of pipeline \"%s\" is missing", p->name, p->name),
				 errdetail("The pipeline reads a leaf's min and max anew through it."),
				 errhint("Create it again: CREATE INDEX state_cell ON %s.state (<the dimensions, in order>).",
						 quote_identifier(p->name))));
	if ((p->ndistinct > 0 && !OidIsValid(p->distinct_values)) ||
		!OidIsValid(p->ingest) || !OidIsValid(p->state) || !OidIsValid(p->progress) ||
		!OidIsValid(p->shard) ||
		!OidIsValid(p->state_pkey) || !OidIsValid(p->slots[0]) || !OidIsValid(p->slots[1]) ||
		(p->mode == PIPELINE_ACCUMULATE && !OidIsValid(p->seen_pkey)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relations of pipeline \"%s\" are missing", p->name),
				 errhint("Drop the pipeline with exactonce.drop_pipeline('%s', force => true) and create it again.",
						 p->name)));
	if (!ShapeCheck(p, tables))
		return NULL;
	CheckOwnership(p);
	CheckNotCitus(p);
	return p;
}

#define PIPELINE_COLUMNS "id, name, mode, dimensions, owner, shards, measures, min_max, distinct_counts," \
	" window_width, allowed_lateness, grouping_sets, feed, feed_notify, retention_horizon"

/*
 * PipelineLoad looks a pipeline up by name (SPI must be connected).  With
 * for_owner the current role must have the privileges of its owner.
 */
Pipeline *
PipelineLoad(const char *name, bool for_owner)
{
	static const Oid types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	SPIPlanPtr	plan;
	Pipeline   *p;

	plan = StatementPrepareFixed("SELECT " PIPELINE_COLUMNS " FROM exactonce.pipeline"
								 " WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name",
								 1, types);
	if (SPI_execute_plan(plan, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	p = SPI_processed == 0 ? NULL : PipelineFill(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, SHAPE_ALL);
	if (p == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("pipeline \"%s\" does not exist", name),
				 errhint("The view exactonce.pipelines lists the pipelines; exactonce.create_pipeline() creates one.")));
	if (for_owner && !has_privs_of_role(GetUserId(), p->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of pipeline \"%s\"", name),
				 errdetail("Pipeline \"%s\" is owned by role %s.", name,
						   GetUserNameFromId(p->owner, false)),
				 errhint("Run this as the pipeline's owner or as a member of the owning role.")));
	return p;
}

/*
 * PipelineLoadDefinition returns the definition of the pipeline of a name,
 * without its relations, or NULL if there is none (SPI must be connected).
 */
Pipeline *
PipelineLoadDefinition(const char *name)
{
	static const Oid types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};

	if (SPI_execute_plan(StatementPrepareFixed("SELECT " PIPELINE_COLUMNS " FROM exactonce.pipeline"
											   " WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name",
											   1, types),
						 values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	if (SPI_processed == 0)
		return NULL;
	return PipelineDefinition(SPI_tuptable->vals[0], SPI_tuptable->tupdesc);
}

/*
 * PipelineActAsOwner makes the pipeline's owner the current user, in a
 * security-restricted operation, until PipelineActAsCaller.  Work on a
 * pipeline's tables runs as their owner whoever asked for it (a superuser,
 * a member of the owning role, a worker), as VACUUM and REFRESH
 * MATERIALIZED VIEW do: code the owner planted there (a trigger, an index
 * expression, a default, a cast) never runs with more rights than the
 * owner's.  The search_path is pinned already (StatementPinSearchPath).
 */
void
PipelineActAsOwner(Pipeline *p)
{
	Assert(!p->acting_as_owner);
	p->acting_as_owner = true;
	GetUserIdAndSecContext(&p->caller, &p->caller_sec);
	SetUserIdAndSecContext(p->owner, p->caller_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

/*
 * PipelineActAsCaller ends PipelineActAsOwner.  An error on the way ends it
 * too: aborting a (sub)transaction restores the user it started with.
 */
void
PipelineActAsCaller(Pipeline *p)
{
	Assert(p->acting_as_owner);
	p->acting_as_owner = false;
	SetUserIdAndSecContext(p->caller, p->caller_sec);
}

/*
 * PipelineLoadById looks a pipeline up by id, locking and checking the
 * tables that tables names; NULL if it is gone.
 */
Pipeline *
PipelineLoadById(int32 id, uint32 tables)
{
	static const Oid types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(id)};
	SPIPlanPtr	plan;

	plan = StatementPrepareFixed("SELECT " PIPELINE_COLUMNS " FROM exactonce.pipeline"
								 " WHERE id OPERATOR(pg_catalog.=) $1",
								 1, types);
	if (SPI_execute_plan(plan, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	if (SPI_processed == 0)
		return NULL;
	return PipelineFill(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, tables);
}

/*
 * PipelineShards returns the number of shards pipeline id has now, as last
 * committed, or 0 if it is gone.
 */
int
PipelineShards(int32 id)
{
	static const Oid types[1] = {INT4OID};
	SPIPlanPtr	plan;
	Datum		values[1] = {Int32GetDatum(id)};
	bool		isnull;

	plan = StatementPrepareFixed("SELECT shards FROM exactonce.pipeline WHERE id OPERATOR(pg_catalog.=) $1",
								 1, types);
	/* not read-only: the query takes a snapshot of its own, not the step's */
	if (SPI_execute_plan(plan, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	if (SPI_processed == 0)
		return 0;
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * PipelineListIds returns the ids of all pipelines, oldest first, and in
 * *shards their numbers of shards.
 */
List *
PipelineListIds(List **shards)
{
	List	   *ids = NIL;

	*shards = NIL;
	if (SPI_execute_plan(StatementPrepareFixed("SELECT id, shards FROM exactonce.pipeline ORDER BY id", 0, NULL),
						 NULL, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		bool		isnull;

		ids = lappend_int(ids, DatumGetInt32(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull)));
		*shards = lappend_int(*shards, DatumGetInt32(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull)));
	}
	return ids;
}

/*
 * PipelineRequireReadCommitted refuses to run a stage under a transaction
 * snapshot: the stages read the latest committed state, which a repeatable
 * read transaction could not update without serialization failures.
 */
void
PipelineRequireReadCommitted(const char *what)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("%s must run at isolation level READ COMMITTED", what),
				 errhint("Call it outside of REPEATABLE READ and SERIALIZABLE transactions.")));
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
		if (PG_ARGISNULL(i) && i != 7)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("name, dimensions, mode, shards, measures, min_max, distinct_counts, allowed_lateness and grouping_sets of a pipeline must not be NULL")));
	def.name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	CheckIdentifier("pipeline", def.name);
	def.mode = ParseMode(text_to_cstring(PG_GETARG_TEXT_PP(2)));
	def.ndims = CheckDimensions(PG_GETARG_ARRAYTYPE_P(1), def.dims);
	nshards = CheckShards(PG_GETARG_INT32(3));
	def.nmeasures = CheckMeasures(PG_GETARG_ARRAYTYPE_P(4), def.measures, def.dims, def.ndims);
	CheckMinMax(PG_GETARG_ARRAYTYPE_P(5), def.measures, def.nmeasures, def.dims, def.ndims,
				def.min_max);
	for (int slot = 0; slot <= def.nmeasures; slot++)
		def.any_min_max |= def.min_max[slot];
	def.ndistinct = CheckDistincts(PG_GETARG_ARRAYTYPE_P(6), &def);
	if (!PG_ARGISNULL(7))
		CheckWindow(&def, PG_GETARG_INTERVAL_P(7), PG_GETARG_INTERVAL_P(8));
	grouping = text_to_cstring(PG_GETARG_TEXT_PP(9));
	ParseGrouping(&def, grouping);
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
	DistributedForgetStale(def.name);
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
	RegistryExecNulls("INSERT INTO exactonce.pipeline (name, mode, dimensions, owner, shards, measures,"
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
		RegistryExec("DELETE FROM exactonce.key_move WHERE pipeline OPERATOR(pg_catalog.=) $1::pg_catalog.name",
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
	RegistryExec("DELETE FROM exactonce.pipeline WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name",
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

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("pipeline name must not be NULL")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (DistributedRun(name, "drop", force, &dummy))
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
	ProgressLockAll(p, NULL, &dummy, &dummy, &paused);
	QueueFreeze(p);
	{
		int64		queued,
					staged;
		bool		isnull;

		if (SPI_execute(psprintf("SELECT (SELECT pg_catalog.count(*) FROM %s.ingest),"
								 " (SELECT pg_catalog.count(*) FROM %s.ledger WHERE applied_at IS NULL)",
								 quote_identifier(name), quote_identifier(name)), true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not count the queue of pipeline \"%s\"", name);
		queued = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		staged = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		if (queued > 0 || staged > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("pipeline \"%s\" still has " INT64_FORMAT " queued events and " INT64_FORMAT " staged batches",
							name, queued, staged),
					 errdetail("Dropping it now would discard events that were never applied."),
					 errhint("Run exactonce.flush('%s') first, or pass force => true to discard them.", name)));
	}

	if (SPI_execute(psprintf("DROP SCHEMA %s CASCADE", quote_identifier(name)), false, 0) < 0)
		elog(ERROR, "could not drop schema of pipeline \"%s\"", name);
	values[0] = Int32GetDatum(p->id);
	RegistryExec("DELETE FROM exactonce.pipeline WHERE id OPERATOR(pg_catalog.=) $1",
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

	if (DistributedRun(name, paused ? "pause" : "resume", false, &dummy))
		return;
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(name, true);
	PipelineActAsOwner(p);
	/* pause waits for the batches in progress */
	ProgressLockAll(p, NULL, &dummy, &dummy, &was_paused);
	if (SPI_execute(psprintf("UPDATE %s.progress SET paused = %s",
							 quote_identifier(p->name), paused ? "true" : "false"),
					false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update progress of pipeline \"%s\"", name);
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	WorkerWakeAtCommit();
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
	drained = DrainPipeline(p);

	/*
	 * shards that go pass on their count of events to shard 0; new ones start
	 * where the others are, at the rotation taking inserts
	 */
	s = quote_identifier(p->name);
	values[0] = Int32GetDatum(nshards);
	values[1] = Int32GetDatum(p->nshards);
	if (SPI_execute_with_args(psprintf("UPDATE %s.shard SET taken = taken +"
									   " (SELECT coalesce(sum(taken), 0) FROM %s.shard WHERE shard >= $1)"
									   " WHERE shard = 0", s, s),
							  1, types, values, NULL, false, 0) != SPI_OK_UPDATE ||
		SPI_execute_with_args(psprintf("DELETE FROM %s.shard WHERE shard >= $1", s),
							  1, types, values, NULL, false, 0) != SPI_OK_DELETE ||
		SPI_execute_with_args(psprintf("INSERT INTO %s.shard (shard, drain_rotation)"
									   " SELECT g, (SELECT rotation FROM %s.progress)"
									   " FROM pg_catalog.generate_series($2, $1 - 1) g", s, s),
							  2, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not change the shards of pipeline \"%s\"", p->name);
	values[1] = Int32GetDatum(p->id);
	RegistryExec("UPDATE exactonce.pipeline SET shards = $1 WHERE id OPERATOR(pg_catalog.=) $2",
				 2, types, values, 1);

	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	WorkerWakeAtCommit();
	PG_RETURN_INT64(drained);
}

/*
 * PipelineSetFeed records in the registry whether the pipeline has a change
 * feed (feed.c), and whether it notifies.
 */
void
PipelineSetFeed(Pipeline *p, bool feed, bool notify)
{
	Oid			types[3] = {INT4OID, BOOLOID, BOOLOID};
	Datum		values[3] = {Int32GetDatum(p->id), BoolGetDatum(feed), BoolGetDatum(notify)};

	RegistryExec("UPDATE exactonce.pipeline SET feed = $2, feed_notify = $3"
				 " WHERE id OPERATOR(pg_catalog.=) $1", 3, types, values, 1);
	p->feed = feed;
	p->feed_notify = notify;
}

/*
 * PipelineSetHorizon records in the registry the version below which the
 * pipeline forgot tombstones or seen rows (retention.c, prune()); it never goes down.
 */
void
PipelineSetHorizon(Pipeline *p, int64 horizon)
{
	Oid			types[2] = {INT4OID, INT8OID};
	Datum		values[2] = {Int32GetDatum(p->id), Int64GetDatum(horizon)};

	RegistryExec("UPDATE exactonce.pipeline SET retention_horizon ="
				 " GREATEST(retention_horizon, $2) WHERE id OPERATOR(pg_catalog.=) $1",
				 2, types, values, 1);
	p->horizon = p->has_horizon ? Max(p->horizon, horizon) : horizon;
	p->has_horizon = true;
}
