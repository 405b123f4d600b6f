/*-------------------------------------------------------------------------
 *
 * shape.c
 *		The columns of a pipeline's tables are what exactonce made.
 *
 * The stages read and write a pipeline's tables as the types they created:
 * a numeric read from a column its owner altered to bigint would be a
 * pointer made of an integer, a crash of the server or garbage in the
 * aggregates.  So every load of a pipeline (PipelineFill, the one door of
 * functions, workers and the monitoring view alike) locks the tables it
 * will touch and checks that each column the C code touches still has the
 * type the extension created, and is still NOT NULL where it was made so
 * (a null read as a value is a crash too), before any statement runs on
 * them; and that the queue still has the check that keeps rows out of a
 * sealed partition.  The lock
 * (ACCESS SHARE, which an ALTER TABLE must wait for) keeps the checked
 * shape until the transaction ends; taking it also reads the invalidations
 * sent since, so the check sees the catalog as it is.
 *
 * A table that passed is remembered by OID in a backend-local hash table,
 * and forgotten by a relcache callback as soon as anything about it
 * changes: the check costs a hash probe per table while nothing changes.
 * This holds with or without the library preloaded.  A column the owner
 * dropped is not reported here: the statement that names it fails with
 * PostgreSQL's own error.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_am.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_type.h"
#include "storage/lmgr.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "catalog/shape.h"

#define SHAPE_MAX_COLUMNS \
	(32 + 2 * EXACTONCE_MAX_DIMENSIONS + 6 * EXACTONCE_MAX_MEASURES + 2 * EXACTONCE_MAX_DISTINCT)

/* a column the C code touches, the type it has there, whether never null */
typedef struct ShapeColumn
{
	const char *name;
	Oid			type;
	bool		notnull;
} ShapeColumn;

/* ShapeAdd's last argument */
#define NOT_NULL	true
#define NULLABLE	false

/* the columns of one table of a pipeline */
typedef struct ShapeTable
{
	const char *table;
	int			n;
	ShapeColumn cols[SHAPE_MAX_COLUMNS];
} ShapeTable;

/*
 * The lock order of a pipeline's tables.  The queue comes first because an
 * INSERT locks it before its default reads progress (queue.c); the
 * partitions come last, because the stages open them only once they hold
 * the rest.  Every path takes the tables it needs in this order, and a drop
 * takes all of them so (ShapeLockForDrop): two of them never wait for each
 * other in a circle.
 */
static const char *const shape_lock_order[] = {
	"ingest", "progress", "shard", "ledger", "feed", "state", "seen",
	"aggregates", "dead_letters", "distincts", "ingest_0", "ingest_1"
};

/* tables found to have their shape, by OID */
static HTAB *shape_checked = NULL;

/*
 * ShapeInvalidate forgets a table that changed, or every table.
 */
static void
ShapeInvalidate(Datum arg, Oid relid)
{
	if (shape_checked == NULL)
		return;
	if (!OidIsValid(relid))
	{
		HASH_SEQ_STATUS seq;
		Oid		   *entry;

		hash_seq_init(&seq, shape_checked);
		while ((entry = hash_seq_search(&seq)) != NULL)
			(void) hash_search(shape_checked, entry, HASH_REMOVE, NULL);
		return;
	}
	(void) hash_search(shape_checked, &relid, HASH_REMOVE, NULL);
}

/*
 * ShapeAdd adds a column to a table's list: NOT_NULL where exactonce made
 * it so, and the C code reads it without looking for a null.
 */
static void
ShapeAdd(ShapeTable *t, const char *name, Oid type, bool notnull)
{
	Assert(t->n < SHAPE_MAX_COLUMNS);
	t->cols[t->n].name = name;
	t->cols[t->n].type = type;
	t->cols[t->n++].notnull = notnull;
}

/*
 * ShapeAddNames adds n columns of one type, named name[i] plus suffix.
 */
static void
ShapeAddNames(ShapeTable *t, char **names, int n, const char *suffix, Oid type, bool notnull)
{
	for (int i = 0; i < n; i++)
		ShapeAdd(t, suffix ? psprintf("%s%s", names[i], suffix) : names[i], type, notnull);
}

/*
 * ShapeAddEvent adds the columns of an event as the queue and dead_letters
 * hold them: in the queue an event's own columns are never null, its
 * measures and distinct-counted values may be; dead_letters keeps what
 * came, nulls too.
 */
static void
ShapeAddEvent(ShapeTable *t, Pipeline *p, bool notnull)
{
	ShapeAdd(t, "key", TEXTOID, notnull);
	ShapeAdd(t, "version", INT8OID, notnull);
	ShapeAdd(t, "value", NUMERICOID, notnull);
	ShapeAddNames(t, p->dims + PIPELINE_FIRST_INPUT_DIM(p),
				  p->ndims - PIPELINE_FIRST_INPUT_DIM(p), NULL, TEXTOID, notnull);
	ShapeAddNames(t, p->measures, p->nmeasures, NULL, NUMERICOID, NULLABLE);
	ShapeAddNames(t, p->distincts, p->ndistinct, NULL, TEXTOID, NULLABLE);
	ShapeAdd(t, "deleted", BOOLOID, notnull);
	ShapeAdd(t, "event_time", TIMESTAMPTZOID, notnull);
}

/*
 * ShapeAddCounters adds the counters that table progress and each row of
 * table shard keep.
 */
static void
ShapeAddCounters(ShapeTable *t)
{
	static char *counters[] = {"ingested", "applied", "duplicates", "stale", "dead_lettered",
	"batches"};

	ShapeAddNames(t, counters, lengthof(counters), NULL, INT8OID, NOT_NULL);
	ShapeAdd(t, "last_batch_at", TIMESTAMPTZOID, NULLABLE);
}

/*
 * ShapeOf fills in the columns table has in pipeline p; false if exactonce
 * makes no table of that name.
 */
static bool
ShapeOf(Pipeline *p, const char *table, ShapeTable *t)
{
	t->table = table;
	t->n = 0;
	if (strcmp(table, "progress") == 0)
	{
		static char *rotations[] = {"rotation", "drain_rotation"};

		ShapeAddNames(t, rotations, lengthof(rotations), NULL, INT8OID, NOT_NULL);
		ShapeAdd(t, "paused", BOOLOID, NOT_NULL);
		ShapeAdd(t, "watermark", TIMESTAMPTZOID, NULLABLE);
		ShapeAddCounters(t);
	}
	else if (strcmp(table, "shard") == 0)
	{
		static char *positions[] = {"drain_rotation", "drain_position", "taken", "drain_count"};
		static char *marks[] = {"drain_row", "drain_digest"};

		ShapeAdd(t, "shard", INT4OID, NOT_NULL);
		ShapeAddNames(t, positions, lengthof(positions), NULL, INT8OID, NOT_NULL);
		ShapeAddNames(t, marks, lengthof(marks), NULL, INT8OID, NULLABLE);
		ShapeAdd(t, "drain_file", OIDOID, NULLABLE);
		ShapeAddCounters(t);
	}
	else if (strcmp(table, "ingest") == 0)
	{
		ShapeAddEvent(t, p, NOT_NULL);
		ShapeAdd(t, "ingest_slot", INT4OID, NOT_NULL);
		ShapeAdd(t, "ingest_id", INT8OID, NOT_NULL);
	}
	else if (strcmp(table, "dead_letters") == 0)
	{
		ShapeAddEvent(t, p, NULLABLE);
		ShapeAdd(t, "reason", TEXTOID, NOT_NULL);
		ShapeAdd(t, "failed_at", TIMESTAMPTZOID, NOT_NULL);
	}
	else if (strcmp(table, "state") == 0 && p->mode == PIPELINE_LATEST)
	{
		ShapeAdd(t, "key", TEXTOID, NOT_NULL);
		ShapeAddNames(t, p->dims, p->ndims, NULL, TEXTOID, NOT_NULL);
		ShapeAddNames(t, p->distincts, p->ndistinct, NULL, TEXTOID, NULLABLE);
		ShapeAdd(t, "deleted", BOOLOID, NOT_NULL);
		ShapeAdd(t, "version", INT8OID, NOT_NULL);
		ShapeAdd(t, "value", NUMERICOID, NOT_NULL);
		ShapeAddNames(t, p->measures, p->nmeasures, NULL, NUMERICOID, NULLABLE);
		ShapeAdd(t, "updated_at", TIMESTAMPTZOID, NOT_NULL);
	}
	else if (strcmp(table, "state") == 0)
	{
		ShapeAdd(t, "key", TEXTOID, NOT_NULL);
		ShapeAdd(t, "first_event_time", TIMESTAMPTZOID, NOT_NULL);
		ShapeAdd(t, "version", INT8OID, NOT_NULL);
		ShapeAdd(t, "total", NUMERICOID, NOT_NULL);
		ShapeAdd(t, "events", INT8OID, NOT_NULL);
		ShapeAdd(t, "last_event_time", TIMESTAMPTZOID, NOT_NULL);
		ShapeAdd(t, "updated_at", TIMESTAMPTZOID, NOT_NULL);
	}
	else if (strcmp(table, "seen") == 0)
	{
		ShapeAdd(t, "key", TEXTOID, NOT_NULL);
		ShapeAdd(t, "version", INT8OID, NOT_NULL);
		ShapeAdd(t, "digest", INT8OID, NOT_NULL);
	}
	else if (strcmp(table, "aggregates") == 0)
	{
		/* a dimension is null in the cells that roll it up */
		ShapeAddNames(t, p->dims, p->ndims, NULL, TEXTOID, NULLABLE);
		ShapeAdd(t, "level", INT4OID, NOT_NULL);
		ShapeAdd(t, "total", NUMERICOID, NOT_NULL);
		ShapeAdd(t, "keys", INT8OID, NOT_NULL);
		ShapeAddNames(t, p->measures, p->nmeasures, "_sum", NUMERICOID, NOT_NULL);
		ShapeAddNames(t, p->measures, p->nmeasures, "_count", INT8OID, NOT_NULL);
		ShapeAddNames(t, p->measures, p->nmeasures, "_avg", NUMERICOID, NULLABLE);
		for (int slot = 0; slot <= p->nmeasures; slot++)
			if (p->min_max[slot])
			{
				ShapeAdd(t, psprintf("%s_min", PipelineExtremumName(p, slot)), NUMERICOID, NULLABLE);
				ShapeAdd(t, psprintf("%s_max", PipelineExtremumName(p, slot)), NUMERICOID, NULLABLE);
			}
		if (PIPELINE_RESERVES(p))
			ShapeAdd(t, PIPELINE_RESERVE_COLUMN, NUMERICARRAYOID, NULLABLE);
		ShapeAddNames(t, p->distincts, p->ndistinct, "_distinct", INT8OID, NOT_NULL);
		ShapeAdd(t, "updated_at", TIMESTAMPTZOID, NOT_NULL);
	}
	else if (strcmp(table, "ledger") == 0)
	{
		static const struct
		{
			const char *name;
			Oid			type;
			bool		notnull;
		}			ledger[] = {
			{"token", BYTEAOID, NOT_NULL}, {"source", TEXTOID, NOT_NULL},
			{"position", INT8OID, NULLABLE}, {"staged_at", TIMESTAMPTZOID, NOT_NULL},
			{"applied_at", TIMESTAMPTZOID, NULLABLE}, {"deltas", INT4OID, NOT_NULL},
			{"levels", INT4ARRAYOID, NULLABLE}, {"cells", TEXTARRAYOID, NULLABLE},
			{"totals", NUMERICARRAYOID, NULLABLE}, {"keys", INT8ARRAYOID, NULLABLE},
			{"measure_sums", NUMERICARRAYOID, NULLABLE}, {"measure_counts", INT8ARRAYOID, NULLABLE},
			{"extrema", NUMERICARRAYOID, NULLABLE}, {"member_cells", TEXTARRAYOID, NULLABLE},
			{"member_columns", INT4ARRAYOID, NULLABLE}, {"member_values", TEXTARRAYOID, NULLABLE},
			{"member_counts", INT8ARRAYOID, NULLABLE},
		};

		for (int i = 0; i < lengthof(ledger); i++)
			ShapeAdd(t, ledger[i].name, ledger[i].type, ledger[i].notnull);
	}
	else if (strcmp(table, "distincts") == 0)
	{
		ShapeAdd(t, "cell", TEXTARRAYOID, NOT_NULL);
		ShapeAdd(t, "col", TEXTOID, NOT_NULL);
		ShapeAdd(t, "value", TEXTOID, NOT_NULL);
		ShapeAdd(t, "n", INT8OID, NOT_NULL);
	}
	else if (strcmp(table, "feed") == 0)
	{
		static char *changes[] = {"old_total", "new_total"};
		static char *counts[] = {"old_keys", "new_keys"};

		ShapeAdd(t, "seq", INT8OID, NOT_NULL);
		ShapeAdd(t, "level", INT4OID, NOT_NULL);
		ShapeAddNames(t, p->dims, p->ndims, NULL, TEXTOID, NULLABLE);
		ShapeAddNames(t, changes, lengthof(changes), NULL, NUMERICOID, NOT_NULL);
		ShapeAddNames(t, counts, lengthof(counts), NULL, INT8OID, NOT_NULL);
		ShapeAdd(t, "changed_at", TIMESTAMPTZOID, NOT_NULL);
	}
	else
		return false;
	return true;
}

/*
 * ShapeColumnType returns the type exactonce reads and writes column of
 * table of pipeline p as, or InvalidOid if it touches no such column, and
 * in *notnull whether the column must never be null.
 */
Oid
ShapeColumnType(Pipeline *p, const char *table, const char *column, bool *notnull)
{
	ShapeTable *t = palloc(sizeof(ShapeTable));
	Oid			type = InvalidOid;

	*notnull = false;
	if (ShapeOf(p, table, t))
		for (int i = 0; i < t->n && !OidIsValid(type); i++)
			if (strcmp(t->cols[i].name, column) == 0)
			{
				type = t->cols[i].type;
				*notnull = t->cols[i].notnull;
			}
	pfree(t);
	return type;
}

/*
 * ShapeRefuse reports a column whose type is not the one exactonce made,
 * or has a type modifier (numeric(12,1), say), which would round what the
 * SQL paths write there and not what the stages write directly.
 */
static void
ShapeRefuse(const char *pipeline, const char *table, const char *column, Oid found, int32 typmod, Oid type)
{
	const char *s = quote_identifier(pipeline);

	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_ALTERED),
			 errmsg("column \"%s\" of table \"%s.%s\" has type %s, not %s",
					column, pipeline, table, format_type_with_typemod(found, typmod), format_type_be(type)),
			 errdetail("exactonce reads and writes this column of pipeline \"%s\" as %s; it refuses to touch the table while its type differs.",
					   pipeline, format_type_be(type)),
			 errhint("Change it back with ALTER TABLE %s.%s ALTER COLUMN %s TYPE %s, or drop the pipeline and create it again.",
					 s, quote_identifier(table), quote_identifier(column), format_type_be(type))));
}

/*
 * ShapeRefuseCollation reports a column whose collation is not
 * deterministic.
 */
static void
ShapeRefuseCollation(const char *pipeline, const char *table, const char *column, Oid collation, Oid type)
{
	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_ALTERED),
			 errmsg("column \"%s\" of table \"%s.%s\" has collation %s, which is not deterministic",
					column, pipeline, table, get_collation_name(collation)),
			 errdetail("exactonce takes two values of this column of pipeline \"%s\" for one only where their bytes are equal; under this collation its indexes would take values that differ for one.",
					   pipeline),
			 errhint("Give it a deterministic collation again with ALTER TABLE %s.%s ALTER COLUMN %s TYPE %s COLLATE \"C\", or drop the pipeline and create it again.",
					 quote_identifier(pipeline), quote_identifier(table), quote_identifier(column),
					 format_type_be(type))));
}

/*
 * ShapeRefuseNull reports a column the C code reads as never null that
 * allows nulls: a null read as a value is a crash of the server.
 */
static void
ShapeRefuseNull(const char *pipeline, const char *table, const char *column)
{
	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_ALTERED),
			 errmsg("column \"%s\" of table \"%s.%s\" allows nulls", column, pipeline, table),
			 errdetail("exactonce made this column of pipeline \"%s\" NOT NULL and reads it as never null; it refuses to touch the table while it may hold one.",
					   pipeline),
			 errhint("Make it NOT NULL again with ALTER TABLE %s.%s ALTER COLUMN %s SET NOT NULL, once no row holds a null there.",
					 quote_identifier(pipeline), quote_identifier(table), quote_identifier(column))));
}

/*
 * ShapeCheckColumn checks the type of one column of a table of pipeline
 * pipeline, if the column is there (without a type modifier, as made),
 * that it is NOT NULL where notnull says the C code takes it to be, and
 * that its collation, if it has one, is deterministic: the stages tell
 * keys, cells and values apart by their bytes, and a unique index under a
 * collation that is not deterministic would merge two of them into one
 * row.
 */
void
ShapeCheckColumn(Oid relid, const char *pipeline, const char *table, const char *column,
				 Oid type, bool notnull)
{
	HeapTuple	tup = SearchSysCacheAttName(relid, column);
	Form_pg_attribute att;
	Oid			found;
	int32		typmod;
	Oid			collation;
	bool		allows_null;

	if (!HeapTupleIsValid(tup))
		return;
	att = (Form_pg_attribute) GETSTRUCT(tup);
	found = att->atttypid;
	typmod = att->atttypmod;
	collation = att->attcollation;
	allows_null = !att->attnotnull;
	ReleaseSysCache(tup);
	if (found != type || typmod != -1)
		ShapeRefuse(pipeline, table, column, found, typmod, type);
	if (notnull && allows_null)
		ShapeRefuseNull(pipeline, table, column);
	if (OidIsValid(collation) && !get_collation_isdeterministic(collation))
		ShapeRefuseCollation(pipeline, table, column, collation, type);
}

/*
 * ShapeIsTable says whether relid, in the schema of pipeline p, is one of
 * the tables exactonce made for it: those of the lock order, or a leaf of
 * the queue.
 */
bool
ShapeIsTable(Pipeline *p, Oid relid)
{
	const char *name = get_rel_name(relid);
	Oid			parent;

	/* its schema by name: a definition alone has no nspid yet */
	if (name == NULL || get_rel_namespace(relid) != get_namespace_oid(p->name, true))
		return false;
	for (int i = 0; i < lengthof(shape_lock_order); i++)
		if (strcmp(shape_lock_order[i], name) == 0)
			return true;
	parent = get_rel_relispartition(relid) ? get_partition_parent(relid, true) : InvalidOid;
	return OidIsValid(parent) && ShapeIsTable(p, parent);
}

/*
 * ShapeCheckLogged refuses a table of pipeline pipeline that is not
 * logged.  A crash empties an unlogged table and leaves the others: state
 * emptied beside its aggregates would count every key again, a queue's
 * partition would lose events whose commit was acknowledged.
 */
void
ShapeCheckLogged(Oid relid, const char *pipeline)
{
	if (get_rel_persistence(relid) == RELPERSISTENCE_PERMANENT)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_ALTERED),
			 errmsg("table \"%s.%s\" of pipeline \"%s\" is unlogged",
					pipeline, get_rel_name(relid), pipeline),
			 errdetail("A crash empties an unlogged table and none of the pipeline's others: what it held would be lost or counted again."),
			 errhint("Make it logged again with ALTER TABLE %s.%s SET LOGGED.",
					 quote_identifier(pipeline), quote_identifier(get_rel_name(relid)))));
}

/*
 * ShapeIsSlotCheck says whether ccbin, the expression of a check
 * constraint on queue relid of pipeline p, is ingest_slot_open as
 * exactonce makes it: exactonce.ingest_slot_check(ingest_slot, 'p'::text),
 * or, in a queue made before 1.6, the queue named by regclass.
 */
bool
ShapeIsSlotCheck(Pipeline *p, Oid relid, const char *ccbin)
{
	Node	   *expr = stringToNode(ccbin);
	FuncExpr   *call;
	Node	   *slot;
	Const	   *pipeline;
	char	   *fname;

	if (!IsA(expr, FuncExpr))
		return false;
	call = (FuncExpr *) expr;
	fname = get_func_name(call->funcid);
	if (list_length(call->args) != 2 || fname == NULL || strcmp(fname, "ingest_slot_check") != 0 ||
		get_func_namespace(call->funcid) != get_namespace_oid("exactonce", false))
		return false;
	slot = linitial(call->args);
	if (!IsA(slot, Var) || ((Var *) slot)->varattno != get_attnum(relid, "ingest_slot") ||
		!IsA(lsecond(call->args), Const))
		return false;
	pipeline = lsecond_node(Const, call->args);
	if (pipeline->constisnull)
		return false;
	if (pipeline->consttype == TEXTOID)
		return strcmp(TextDatumGetCString(pipeline->constvalue), p->name) == 0;
	return pipeline->consttype == REGCLASSOID &&
		DatumGetObjectId(pipeline->constvalue) == p->ingest;
}

/*
 * ShapeCheckSlotCheck refuses a queue without its check ingest_slot_open
 * (locked already).  The check holds every row to the partition taking
 * inserts; without it a row that gives its own ingest_slot could enter a
 * sealed partition behind the shards' positions, and be emptied with it
 * undrained.
 */
static void
ShapeCheckSlotCheck(Pipeline *p, Oid relid)
{
	Relation	rel = table_open(relid, NoLock);
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	bool		found = false;

	for (int i = 0; constr != NULL && i < constr->num_check && !found; i++)
		found = !constr->check[i].ccnoinherit && ShapeIsSlotCheck(p, relid, constr->check[i].ccbin);
	table_close(rel, NoLock);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_EXACTONCE_ALTERED),
				 errmsg("queue \"%s.ingest\" has no check ingest_slot_open", p->name),
				 errdetail("The check keeps rows out of a sealed partition of pipeline \"%s\"; a row that sets ingest_slot could otherwise enter one after its shards passed, and be emptied with it.",
						   p->name),
				 errhint("Add it again: ALTER TABLE %s.ingest ADD CONSTRAINT ingest_slot_open CHECK (exactonce.ingest_slot_check(ingest_slot, %s::text)) NOT VALID.",
						 quote_identifier(p->name), quote_literal_cstr(p->name))));
}

/*
 * ShapeCheckNoRules refuses a table of pipeline with rules: a rule
 * rewrites the statements exactonce runs on it into others (DO INSTEAD
 * NOTHING makes an update of the progress row a no-op), which would then
 * report what they did not do.
 */
static void
ShapeCheckNoRules(Oid relid, const char *pipeline)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	bool		hasrules;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	hasrules = ((Form_pg_class) GETSTRUCT(tup))->relhasrules;
	ReleaseSysCache(tup);
	if (hasrules)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s.%s\" has rules, which would rewrite the statements of exactonce",
						pipeline, get_rel_name(relid)),
				 errhint("The pipeline goes on once the rules are gone: DROP RULE ... ON %s.%s.",
						 quote_identifier(pipeline), quote_identifier(get_rel_name(relid)))));
}

/*
 * ShapeCheckTable locks a table of a pipeline and, unless it passed since
 * it last changed, checks that it is logged, has no rules, the type and nullability of
 * every column exactonce touches, and the queue's check ingest_slot_open.
 */
static bool
ShapeCheckTable(Pipeline *p, Oid relid, const char *table)
{
	ShapeTable *t;
	bool		found;
	char		relkind;

	if (!OidIsValid(relid))
		return true;
	LockRelationOid(relid, AccessShareLock);
	/* dropped while this waited for the lock */
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		return false;
	if (shape_checked == NULL)
	{
		HASHCTL		ctl = {.keysize = sizeof(Oid),.entrysize = sizeof(Oid),.hcxt = CacheMemoryContext};

		shape_checked = hash_create("exactonce checked tables", 64, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		CacheRegisterRelcacheCallback(ShapeInvalidate, (Datum) 0);
	}
	if (hash_search(shape_checked, &relid, HASH_FIND, NULL) != NULL)
		return true;

	/*
	 * a view or foreign table in its place is refused as such
	 * (CheckOwnership)
	 */
	relkind = get_rel_relkind(relid);
	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
		return true;

	ShapeCheckLogged(relid, p->name);
	ShapeCheckNoRules(relid, p->name);
	t = palloc(sizeof(ShapeTable));
	if (!ShapeOf(p, table, t))
		elog(ERROR, "exactonce has no table \"%s\"", table);
	for (int i = 0; i < t->n; i++)
		ShapeCheckColumn(relid, p->name, table, t->cols[i].name, t->cols[i].type,
						 t->cols[i].notnull);
	if (strcmp(table, "ingest") == 0)
		ShapeCheckSlotCheck(p, relid);
	pfree(t);
	(void) hash_search(shape_checked, &relid, HASH_ENTER, &found);
	return true;
}

/*
 * ShapeCheck locks the tables of a pipeline that tables names (SHAPE_*
 * bits) and checks their columns' types, as above.  It locks them in the
 * pipeline's lock order (shape_lock_order): the queue first, as an INSERT
 * does before its default reads progress.  It returns false if one was
 * dropped while it waited for its lock: the pipeline is gone.
 */
bool
ShapeCheck(Pipeline *p, uint32 tables)
{
	StaticAssertStmt(EXACTONCE_PARTITIONS == 2, "shape_lock_order names two partitions");
	if ((tables & SHAPE_INGEST) && !ShapeCheckTable(p, p->ingest, "ingest"))
		return false;
	if ((tables & SHAPE_PROGRESS) && !ShapeCheckTable(p, p->progress, "progress"))
		return false;
	if ((tables & SHAPE_SHARD) && !ShapeCheckTable(p, p->shard, "shard"))
		return false;
	if ((tables & SHAPE_LEDGER) &&
		!ShapeCheckTable(p, get_relname_relid("ledger", p->nspid), "ledger"))
		return false;
	if ((tables & SHAPE_FEED) && p->feed &&
		!ShapeCheckTable(p, get_relname_relid("feed", p->nspid), "feed"))
		return false;
	if (tables & SHAPE_DATA)
		return ShapeCheckTable(p, p->state, "state") &&
			(p->mode != PIPELINE_ACCUMULATE || ShapeCheckTable(p, p->seen, "seen")) &&
			ShapeCheckTable(p, get_relname_relid("aggregates", p->nspid), "aggregates") &&
			ShapeCheckTable(p, get_relname_relid("dead_letters", p->nspid), "dead_letters") &&
			(p->ndistinct == 0 || ShapeCheckTable(p, p->distinct_values, "distincts"));
	return true;
}

/*
 * ShapeLockForDrop takes the ACCESS EXCLUSIVE lock a drop needs on every
 * table of a pipeline's schema nspid (SPI connected), in an order no other
 * path can close a circle with: its views first, which only readers open,
 * each before the tables under it; then the tables in the lock order above.
 * DROP SCHEMA would lock them in the order they were made, progress before
 * the queue, and deadlock with an INSERT that holds the queue and waits to
 * read progress.
 */
void
ShapeLockForDrop(Oid nspid)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(nspid)};

	if (SPI_execute_with_args("SELECT oid FROM pg_catalog.pg_class WHERE relnamespace OPERATOR(pg_catalog.=) $1"
							  " AND relkind OPERATOR(pg_catalog.=) ANY ('{v,m}'::pg_catalog.\"char\"[])"
							  " ORDER BY oid", 1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list the views of a pipeline");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		LockRelationOid(DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull)),
						AccessExclusiveLock);
	}
	for (int i = 0; i < lengthof(shape_lock_order); i++)
	{
		Oid			relid = get_relname_relid(shape_lock_order[i], nspid);

		if (OidIsValid(relid))
			LockRelationOid(relid, AccessExclusiveLock);
	}
}

/*
 * ShapeRefuseTriggers refuses rel, open, a table of a pipeline that a stage
 * writes directly, if it has triggers: the stage would not fire them, and
 * whatever else writes the table (a move) must not fire them either, or a
 * trigger could skip rows there that the stage counts on.
 */
void
ShapeRefuseTriggers(Relation rel)
{
	if (rel->trigdesc != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s.%s\" has triggers, which the pipeline's writes would not fire",
						get_namespace_name(RelationGetNamespace(rel)), RelationGetRelationName(rel)),
				 errdetail("The pipeline writes this table directly, without the executor. A tool that follows changes with a trigger, such as pg_repack, would lose them."),
				 errhint("The pipeline goes on once the trigger is gone: wait for the tool to finish, or drop the trigger.")));
}

/*
 * ShapeOpenDirect opens a table of a pipeline that a stage writes directly
 * through the table AM, without the executor: for the current role's modes
 * (ACL_SELECT, ACL_INSERT, ACL_UPDATE, ACL_DELETE), and only while the
 * table has ncolumns columns and nindexes indexes, which the stage keeps,
 * and no triggers, which it would not fire: pg_repack, for one, follows the
 * changes to a table it rebuilds with a trigger, and would lose the
 * stage's writes.  The stage waits out such a tool (its trigger goes with
 * its last step) instead.
 */
Relation
ShapeOpenDirect(Oid relid, AclMode modes, int ncolumns, int nindexes)
{
	static const AclMode each[] = {ACL_SELECT, ACL_INSERT, ACL_UPDATE, ACL_DELETE};
	Relation	rel;
	TupleDesc	desc;
	List	   *indexes;
	int			n = 0;

	for (int i = 0; i < lengthof(each); i++)
	{
		AclResult	r;

		if (!(modes & each[i]))
			continue;
		r = pg_class_aclcheck(relid, GetUserId(), each[i]);
		if (r != ACLCHECK_OK)
			aclcheck_error(r, OBJECT_TABLE, get_rel_name(relid));
	}
	rel = table_open(relid, RowExclusiveLock);
	ShapeRefuseTriggers(rel);
	desc = RelationGetDescr(rel);
	for (int a = 0; a < desc->natts; a++)
		if (!TupleDescAttr(desc, a)->attisdropped)
			n++;
	indexes = RelationGetIndexList(rel);
	if (list_length(indexes) != nindexes || n != ncolumns)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("table \"%s.%s\" has indexes or columns exactonce does not maintain",
						get_namespace_name(RelationGetNamespace(rel)), RelationGetRelationName(rel)),
				 errdetail("The pipeline writes this table directly and keeps only its primary key and its own columns."),
				 errhint("Drop the added indexes or columns; index a copy or a view of the table instead.")));
	list_free(indexes);
	return rel;
}

/*
 * ShapeIndexIs tells whether index, open, is a plain B-tree of table relid
 * on exactly the columns attnums, in order, under deterministic collations
 * (and unique, if asked): one a stage that writes the table directly can
 * keep and search.
 */
bool
ShapeIndexIs(Relation index, Oid relid, const AttrNumber *attnums, int n, bool unique)
{
	Form_pg_index form = index->rd_index;

	if (index->rd_rel->relam != BTREE_AM_OID || form->indrelid != relid ||
		form->indnatts != n || form->indnkeyatts != n || (unique && !form->indisunique) ||
		RelationGetIndexExpressions(index) != NIL || RelationGetIndexPredicate(index) != NIL)
		return false;
	for (int i = 0; i < n; i++)
		if (form->indkey.values[i] != attnums[i] ||
			(OidIsValid(index->rd_indcollation[i]) &&
			 !get_collation_isdeterministic(index->rd_indcollation[i])))
			return false;
	return true;
}
