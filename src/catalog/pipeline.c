/*-------------------------------------------------------------------------
 *
 * pipeline.c
 *		The pipeline registry: a pipeline loaded from its row of
 *		exactonce.pipeline for one transaction, the one door every path to
 *		its tables goes through, and acting on it as its owner.
 *
 * PipelineLoad and PipelineLoadById read the registry row, find the
 * pipeline's relations in its schema, lock and check the tables the caller
 * names (shape.c, in the lock order) and insist that schema and tables are
 * the kinds and the owner that create_pipeline made.  Every stage, command
 * and worker step then acts as that owner (PipelineActAsOwner), with
 * SECURITY_RESTRICTED_OPERATION.  The registry itself is written only as
 * the extension's owner (PipelineRegistryExec): pipeline owners change
 * their own pipelines, not the registry.  Creating and dropping pipelines
 * is commands/pipelinecmds.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_partitioned_table.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "nodes/value.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/datetime.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "catalog/pipeline.h"
#include "catalog/shape.h"
#include "catalog/statement.h"

/*
 * PipelineIntervalMicros turns an interval of days and time into microseconds; a
 * month has no fixed length, so an interval with months is an error.
 */
int64
PipelineIntervalMicros(const char *what, Interval *iv)
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
 * PipelineParseGrouping sets the cells of a pipeline from its grouping: 'rollup'
 * (level k groups by the first k dimensions), 'cube' (every subset of the
 * dimensions) or grouping sets, each a parenthesized list of dimensions.
 */
void
PipelineParseGrouping(Pipeline *p, const char *grouping)
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
 * PipelineRegistryExec runs one statement on exactonce.pipeline as the extension's
 * owner: pipeline owners may change their own pipelines, not the registry.
 */
void
PipelineRegistryExecNulls(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls,
						  int expected)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

	if (plan == NULL)
		elog(ERROR, "could not prepare \"%s\": %s", sql, SPI_result_code_string(SPI_result));
	StatementExecAs(StatementTableOwner("pipeline"), plan, values, nulls, false, expected);
	SPI_freeplan(plan);
}

/*
 * PipelineRegistryExec runs PipelineRegistryExecNulls without NULLs.
 */
void
PipelineRegistryExec(const char *sql, int nargs, Oid *types, Datum *values, int expected)
{
	PipelineRegistryExecNulls(sql, nargs, types, values, NULL, expected);
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
		{p->partitions[0], p->queue_by_shard ? RELKIND_PARTITIONED_TABLE : RELKIND_RELATION},
		{p->partitions[1], p->queue_by_shard ? RELKIND_PARTITIONED_TABLE : RELKIND_RELATION},
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
			StatementRelationOwner(rels[i].relid) == p->owner;
	for (int i = 0; ok && p->queue_by_shard && i < EXACTONCE_PARTITIONS; i++)
		for (int s = 0; ok && s < p->nshards; s++)
			ok = StatementRelationOwner(p->leaves[i][s]) == p->owner;
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
 * PipelineShardOpclass returns the hash operator class by which a queue is
 * laid out by shard, exactonce.key_shard_ops (1.19); InvalidOid where the
 * catalog is older and missing_ok.
 */
Oid
PipelineShardOpclass(bool missing_ok)
{
	return get_opclass_oid(HASH_AM_OID,
						   list_make2(makeString("exactonce"), makeString("key_shard_ops")),
						   missing_ok);
}

/*
 * LeavesError reports queue partitions that are not laid out by shard
 * as create_pipeline() lays them.
 */
static void
LeavesError(Pipeline *p, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 errmsg("queue partitions of pipeline \"%s\" are not what exactonce made", p->name),
			 errdetail("%s", why),
			 errhint("Restore them, or drop the pipeline with exactonce.drop_pipeline('%s', force => true).",
					 p->name)));
}

/*
 * PartitionBound returns the bound of partition relid of parent, or NULL
 * if relid is not a partition of parent, and sets *persistence to the
 * partition's.
 */
static PartitionBoundSpec *
PartitionBound(Oid relid, Oid parent, char *persistence)
{
	HeapTuple	tup;
	PartitionBoundSpec *bound = NULL;
	bool		isnull;
	Datum		d;

	if (!OidIsValid(relid) || !get_rel_relispartition(relid) ||
		get_partition_parent(relid, true) != parent)
		return NULL;
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		return NULL;
	d = SysCacheGetAttr(RELOID, tup, Anum_pg_class_relpartbound, &isnull);
	if (!isnull)
		bound = castNode(PartitionBoundSpec, stringToNode(TextDatumGetCString(d)));
	*persistence = ((Form_pg_class) GETSTRUCT(tup))->relpersistence;
	ReleaseSysCache(tup);
	return bound;
}

/*
 * FindLeaves finds the leaves of a queue laid out by shard (1.19): each
 * partition ingest_<slot> hash-partitioned on key with
 * exactonce.key_shard_ops, whose hash puts a key in the leaf of its shard
 * (QueueKeyShard), and leaf ingest_<slot>_<shard> the partition of
 * remainder shard of modulus shards.  A queue made before 1.19, or with
 * one shard, has plain partitions that hold every shard's rows.  Leaves
 * are checked by their bounds, not only their names, so that no shard can
 * drain the rows of another's keys; so are the partitions ingest_<slot>,
 * which must be the queue's for their slot, or a shard would read a
 * partition still taking inserts as the sealed one.
 */
static void
FindLeaves(Pipeline *p)
{
	Oid			opclass;
	char		persistence[EXACTONCE_PARTITIONS];

	for (int i = 0; i < EXACTONCE_PARTITIONS; i++)
	{
		PartitionBoundSpec *bound = PartitionBound(p->partitions[i], p->ingest, &persistence[i]);

		if (bound == NULL || bound->strategy != PARTITION_STRATEGY_LIST ||
			list_length(bound->listdatums) != 1 ||
			castNode(Const, linitial(bound->listdatums))->constisnull ||
			DatumGetInt32(castNode(Const, linitial(bound->listdatums))->constvalue) != i)
			LeavesError(p, psprintf("Table ingest_%d must be the partition of ingest FOR VALUES IN (%d).", i, i));
	}
	p->queue_by_shard = get_rel_relkind(p->partitions[0]) == RELKIND_PARTITIONED_TABLE;
	if (!p->queue_by_shard)
	{
		for (int i = 0; i < EXACTONCE_PARTITIONS; i++)
			if (persistence[i] != RELPERSISTENCE_PERMANENT)
				ShapeCheckLogged(p->partitions[i], p->name);
		return;
	}
	opclass = PipelineShardOpclass(false);
	for (int i = 0; i < EXACTONCE_PARTITIONS; i++)
	{
		HeapTuple	tup = SearchSysCache1(PARTRELID, ObjectIdGetDatum(p->partitions[i]));
		Form_pg_partitioned_table part;
		oidvector  *classes;
		bool		isnull;
		bool		ok;

		if (!HeapTupleIsValid(tup))
			LeavesError(p, psprintf("Partition ingest_%d is not partitioned.", i));
		part = (Form_pg_partitioned_table) GETSTRUCT(tup);
		classes = (oidvector *) DatumGetPointer(SysCacheGetAttr(PARTRELID, tup,
																Anum_pg_partitioned_table_partclass,
																&isnull));
		ok = !isnull && part->partstrat == PARTITION_STRATEGY_HASH && part->partnatts == 1 &&
			part->partattrs.values[0] == get_attnum(p->partitions[i], "key") &&
			classes->values[0] == opclass;
		ReleaseSysCache(tup);
		if (!ok)
			LeavesError(p, psprintf("Partition ingest_%d must be partitioned by HASH (key exactonce.key_shard_ops).", i));
		for (int s = 0; s < p->nshards; s++)
		{
			char	   *name = psprintf("ingest_%d_%d", i, s);
			Oid			leaf = get_relname_relid(name, p->nspid);
			PartitionBoundSpec *bound = NULL;
			char		leaf_persistence = RELPERSISTENCE_PERMANENT;

			if (OidIsValid(leaf) && get_rel_relkind(leaf) == RELKIND_RELATION)
				bound = PartitionBound(leaf, p->partitions[i], &leaf_persistence);
			if (bound == NULL || bound->strategy != PARTITION_STRATEGY_HASH ||
				bound->modulus != p->nshards || bound->remainder != s)
				LeavesError(p, psprintf("Table %s must be the partition of ingest_%d FOR VALUES WITH (MODULUS %d, REMAINDER %d).",
										name, i, p->nshards, s));
			if (leaf_persistence != RELPERSISTENCE_PERMANENT)
				ShapeCheckLogged(leaf, p->name);
			p->leaves[i][s] = leaf;
		}
	}
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
			p->window_us = PipelineIntervalMicros("window_width", DatumGetIntervalP(width));
			p->lateness_us = lnull ? 0 : PipelineIntervalMicros("allowed_lateness", DatumGetIntervalP(lateness));
			if (p->window_us <= 0 || p->ndims < 1 || strcmp(p->dims[0], PIPELINE_WINDOW_DIM) != 0)
				elog(ERROR, "pipeline \"%s\" has a malformed window", p->name);
		}
	}

	PipelineParseGrouping(p, TextDatumGetCString(SPI_getbinval(tup, desc, 12, &isnull)));
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
	for (int i = 0; i < EXACTONCE_PARTITIONS; i++)
		p->partitions[i] = get_relname_relid(psprintf("ingest_%d", i), p->nspid);
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
		!OidIsValid(p->state_pkey) || !OidIsValid(p->partitions[0]) || !OidIsValid(p->partitions[1]) ||
		(p->mode == PIPELINE_ACCUMULATE && !OidIsValid(p->seen_pkey)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relations of pipeline \"%s\" are missing", p->name),
				 errhint("Drop the pipeline with exactonce.drop_pipeline('%s', force => true) and create it again.",
						 p->name)));
	if (!ShapeCheck(p, tables))
		return NULL;
	FindLeaves(p);
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
	return PipelineLoadTables(name, for_owner, SHAPE_ALL);
}

/*
 * PipelineLoadTables is PipelineLoad locking and checking only the tables
 * that tables names (ShapeCheck): for work that must not wait on the
 * others.
 */
Pipeline *
PipelineLoadTables(const char *name, bool for_owner, uint32 tables)
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
	p = SPI_processed == 0 ? NULL : PipelineFill(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, tables);
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
 * PipelineIsCurrent tells whether p, loaded earlier in the transaction, is
 * the pipeline's definition as last committed: its shards and its cells.
 * set_shards() and alter_pipeline_as() change them while they hold every
 * shard row, so whoever got a shard row after loading p must look again
 * before cutting keys or cells by it.
 */
bool
PipelineIsCurrent(Pipeline *p)
{
	static const Oid types[1] = {INT4OID};
	SPIPlanPtr	plan;
	Datum		values[1] = {Int32GetDatum(p->id)};
	Pipeline   *now;

	plan = StatementPrepareFixed("SELECT " PIPELINE_COLUMNS " FROM exactonce.pipeline"
								 " WHERE id OPERATOR(pg_catalog.=) $1",
								 1, types);
	/* not read-only: the query takes a snapshot of its own, not the step's */
	if (SPI_execute_plan(plan, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read exactonce.pipeline");
	if (SPI_processed == 0)
		return false;
	now = PipelineDefinition(SPI_tuptable->vals[0], SPI_tuptable->tupdesc);
	return now->nshards == p->nshards && now->rollup == p->rollup && now->nsets == p->nsets &&
		memcmp(now->sets, p->sets, sizeof(uint32) * p->nsets) == 0 &&
		now->nmeasures == p->nmeasures && now->ndistinct == p->ndistinct &&
		memcmp(now->min_max, p->min_max, sizeof(p->min_max)) == 0;
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
 * PipelineSetFeed records in the registry whether the pipeline has a change
 * feed (feed.c), and whether it notifies.
 */
void
PipelineSetFeed(Pipeline *p, bool feed, bool notify)
{
	Oid			types[3] = {INT4OID, BOOLOID, BOOLOID};
	Datum		values[3] = {Int32GetDatum(p->id), BoolGetDatum(feed), BoolGetDatum(notify)};

	PipelineRegistryExec("UPDATE exactonce.pipeline SET feed = $2, feed_notify = $3"
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

	PipelineRegistryExec("UPDATE exactonce.pipeline SET retention_horizon ="
						 " GREATEST(retention_horizon, $2) WHERE id OPERATOR(pg_catalog.=) $1",
						 2, types, values, 1);
	p->horizon = p->has_horizon ? Max(p->horizon, horizon) : horizon;
	p->has_horizon = true;
}
