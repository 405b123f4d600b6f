/*-------------------------------------------------------------------------
 *
 * park.c
 *		Where a node keeps the events of a range of keys while it moves away.
 *
 * While move_keys() copies a range's state from the node it leaves to the
 * node it reaches, the coordinator's producers go on sending the range's
 * events to the old node.  They must not be applied there (their keys'
 * state is on its way out) nor refused (the producers would stall or
 * fail): the old node parks them.  Table moving_<modulus>_<remainder> of
 * the pipeline's schema holds them, with the queue's columns but its own
 * two (ingest_slot, ingest_id), and the queue's trigger of the range
 * (exactonce.refuse_moved_key(), range.c) puts each event of the range
 * there while the table exists, and refuses it once the table is gone and
 * the range has moved away.  At the move's
 * switch the coordinator copies the parked events into the new node's
 * queue and drops the table; a move given up returns them to the old
 * node's queue (ParkReturn).  A resend of a parked event is a duplicate
 * like any other, so neither needs the other node's commit.
 *
 * So the old node's queue takes events throughout the move: the table and
 * the trigger (or, where it is there already, the lock it would take) come
 * in one short transaction at its start, and the switch takes no lock on
 * the queue.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "catalog/statement.h"
#include "distributed/park.h"
#include "engine/event.h"

/*
 * ParkName names the table of a range's parked events, in its pipeline's
 * schema.
 */
char *
ParkName(int32 modulus, int32 remainder)
{
	return psprintf("moving_%d_%d", modulus, remainder);
}

/*
 * ParkTable returns the table of the range's parked events, or InvalidOid
 * when its keys are not being moved away.
 */
Oid
ParkTable(Oid nspid, int32 modulus, int32 remainder)
{
	return get_relname_relid(ParkName(modulus, remainder), nspid);
}

/*
 * ParkCreate makes the table of the range's parked events, unless it
 * exists: the queue's columns and their NOT NULLs, so that a row the queue
 * would refuse is refused here too, not when it is sent on.  The caller
 * acts as the pipeline's owner; SPI is connected.
 */
void
ParkCreate(Pipeline *p, int32 modulus, int32 remainder)
{
	const char *s = quote_identifier(p->name);
	const char *t = quote_identifier(ParkName(modulus, remainder));

	if (OidIsValid(ParkTable(p->nspid, modulus, remainder)))
		return;
	if (SPI_execute(psprintf("CREATE TABLE %1$s.%2$s (LIKE %1$s.ingest);\n"
							 "ALTER TABLE %1$s.%2$s DROP COLUMN ingest_slot, DROP COLUMN ingest_id;\n"
							 "COMMENT ON TABLE %1$s.%2$s IS %3$s",
							 s, t,
							 quote_literal_cstr(psprintf("exactonce: events of the keys whose key_bucket(key, %d) is %d, kept while exactonce.move_keys() moves them to another node",
														 modulus, remainder))),
					false, 0) < 0)
		elog(ERROR, "could not make the table of the moving keys of pipeline \"%s\"", p->name);
}

/*
 * The INSERT that keeps the rows of one queue partition in one table of
 * parked events, with the queue's column of each of its parameters: kept
 * for the rows that follow, planned anew once either relation changes.
 * One is enough: a backend inserts into one partition of one moving range
 * at a time.
 */
typedef struct ParkInsert
{
	Oid			queue;
	Oid			park;
	SPIPlanPtr	plan;
	int			n;
	AttrNumber	from[MaxTupleAttributeNumber];
	bool		stale;
} ParkInsert;

static ParkInsert *kept = NULL;

/* the table whose events ParkReturn puts back, which ParkRow must not take */
static Oid	returning = InvalidOid;

static void
ParkInvalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == kept->queue || relid == kept->park)
		kept->stale = true;
}

/*
 * ParkPrepare plans the INSERT of queue's rows into park, checking that
 * the queue has each of the table's columns, of its type.  SPI is
 * connected.
 */
static void
ParkPrepare(Relation queue, Relation park)
{
	TupleDesc	from = RelationGetDescr(queue);
	TupleDesc	to = RelationGetDescr(park);
	Oid			types[MaxTupleAttributeNumber];
	StringInfoData sql;
	SPIPlanPtr	plan;
	int			n = 0;

	if (kept == NULL)
	{
		kept = MemoryContextAllocZero(TopMemoryContext, sizeof(ParkInsert));
		CacheRegisterRelcacheCallback(ParkInvalidate, (Datum) 0);
	}
	if (kept->plan != NULL)
		SPI_freeplan(kept->plan);
	kept->plan = NULL;
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.%s (",
					 quote_identifier(get_namespace_name(RelationGetNamespace(park))),
					 quote_identifier(RelationGetRelationName(park)));
	for (int i = 0; i < to->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(to, i);
		int			a = SPI_fnumber(from, NameStr(att->attname));

		if (att->attisdropped)
			continue;
		if (a <= 0 || TupleDescAttr(from, a - 1)->atttypid != att->atttypid)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("queue \"%s\" has no column \"%s\" of type %s to keep in table \"%s\"",
							RelationGetRelationName(queue), NameStr(att->attname),
							format_type_be(att->atttypid), RelationGetRelationName(park)),
					 errhint("The tables of a pipeline must keep the columns exactonce made.")));
		types[n] = att->atttypid;
		kept->from[n] = a;
		appendStringInfo(&sql, "%s%s", n > 0 ? ", " : "", quote_identifier(NameStr(att->attname)));
		n++;
	}
	appendStringInfoString(&sql, ") VALUES (");
	for (int i = 0; i < n; i++)
		appendStringInfo(&sql, "%s$%d", i > 0 ? ", " : "", i + 1);
	appendStringInfoChar(&sql, ')');
	plan = SPI_prepare(sql.data, n, types);
	if (plan == NULL)
		elog(ERROR, "could not prepare \"%s\": %s", sql.data, SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	kept->plan = plan;
	kept->n = n;
	kept->queue = RelationGetRelid(queue);
	kept->park = RelationGetRelid(park);
	kept->stale = false;
}

/*
 * ParkRow keeps row, just inserted into queue (a partition of a node's
 * ingest), in the table of the range's parked events and returns true, or
 * returns false if the range is not being moved.  The row is inserted as
 * the owner of the queue, who must own the table too: a producer's row
 * goes where the owner put it, nowhere else.
 */
bool
ParkRow(Relation queue, HeapTuple row, int32 modulus, int32 remainder)
{
	Oid			relid = ParkTable(RelationGetNamespace(queue), modulus, remainder);
	Relation	park;
	Datum		values[MaxTupleAttributeNumber];
	char		nulls[MaxTupleAttributeNumber];
	Oid			caller;
	int			caller_sec;

	if (!OidIsValid(relid) || relid == returning)
		return false;

	/* the switch drops the table: then the row is refused */
	LockRelationOid(relid, RowExclusiveLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
	{
		UnlockRelationOid(relid, RowExclusiveLock);
		return false;
	}
	park = table_open(relid, NoLock);
	if (park->rd_rel->relowner != queue->rd_rel->relowner)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("table \"%s\" is not the owner's of queue \"%s\"",
						RelationGetRelationName(park), RelationGetRelationName(queue)),
				 errdetail("The events of keys that move are kept in a table of the queue's owner.")));

	GetUserIdAndSecContext(&caller, &caller_sec);
	SetUserIdAndSecContext(queue->rd_rel->relowner,
						   caller_sec | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	SPI_connect();
	if (kept == NULL || kept->plan == NULL || kept->stale ||
		kept->queue != RelationGetRelid(queue) || kept->park != relid)
		ParkPrepare(queue, park);
	for (int i = 0; i < kept->n; i++)
	{
		bool		isnull;

		values[i] = heap_getattr(row, kept->from[i], RelationGetDescr(queue), &isnull);
		nulls[i] = isnull ? 'n' : ' ';
	}
	if (SPI_execute_plan(kept->plan, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not keep an event of the moving keys in \"%s\"", RelationGetRelationName(queue));
	SPI_finish();
	SetUserIdAndSecContext(caller, caller_sec);
	table_close(park, NoLock);
	return true;
}

/*
 * ParkReturn puts the range's parked events back into the pipeline's queue
 * and drops their table, for a move given up; the caller acts as the
 * owner; SPI is connected.  Returns how many.
 */
int64
ParkReturn(Pipeline *p, int32 modulus, int32 remainder)
{
	const char *s = quote_identifier(p->name);
	const char *t = quote_identifier(ParkName(modulus, remainder));
	Oid			relid = ParkTable(p->nspid, modulus, remainder);
	StringInfoData cols;
	int64		n;

	if (!OidIsValid(relid))
		return 0;

	/*
	 * the producers that parked events have committed, and those that come
	 * now wait, then find the table gone and put theirs in the queue
	 */
	LockRelationOid(relid, AccessExclusiveLock);
	initStringInfo(&cols);
	EventAppendColumns(&cols, p);
	returning = relid;
	PG_TRY();
	{
		/* every parked event, or none: the table is dropped next */
		n = (int64) StatementWriteAll(psprintf("parked AS (DELETE FROM %s.%s RETURNING %s)", s, t, cols.data),
									  psprintf("INSERT INTO %s.ingest (%s) SELECT * FROM parked", s, cols.data),
									  psprintf("SELECT pg_catalog.count(*) FROM %s.%s", s, t));
	}
	PG_FINALLY();
	{
		returning = InvalidOid;
	}
	PG_END_TRY();
	if (SPI_execute(psprintf("DROP TABLE %s.%s", s, t), false, 0) < 0)
		elog(ERROR, "could not drop the table of the moving keys of pipeline \"%s\"", p->name);
	return n;
}

/*
 * ParkCount counts the events parked in a pipeline's schema, for moves
 * under way or cut off (SPI is connected).
 */
int64
ParkCount(Oid nspid)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(nspid)};
	int64		n = 0;
	List	   *tables = NIL;
	ListCell   *lc;

	if (SPI_execute_with_args("SELECT c.oid::pg_catalog.regclass::pg_catalog.text FROM pg_catalog.pg_class c"
							  " WHERE c.relnamespace OPERATOR(pg_catalog.=) $1 AND c.relkind OPERATOR(pg_catalog.=) 'r'"
							  " AND c.relname OPERATOR(pg_catalog.~) '^moving_[0-9]+_[0-9]+$'",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list the tables of parked events");
	for (uint64 i = 0; i < SPI_processed; i++)
		tables = lappend(tables, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
	foreach(lc, tables)
	{
		bool		isnull;

		if (SPI_execute(psprintf("SELECT pg_catalog.count(*) FROM %s", (char *) lfirst(lc)), true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not count the parked events in %s", (char *) lfirst(lc));
		n += DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	return n;
}
