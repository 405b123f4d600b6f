/*-------------------------------------------------------------------------
 *
 * move.c
 *		Moving a range of keys of a distributed pipeline to another node.
 *
 * A range of keys is a hash bucket: the keys whose key_bucket(key, modulus)
 * is remainder, which is PostgreSQL's hash partitioning of text COLLATE "C"
 * (compute_partition_hash_value), the function by which the coordinator's
 * ingest routes them.  move_keys(pipeline, modulus, remainder, server), at
 * the coordinator, moves the range from the node whose partition holds it
 * to server (a new node, or another one), in one step, while producers and
 * readers at the coordinator go on but for its switch:
 *
 *	 1. On the old node, move_keys_park() makes the range's queue trigger
 *		keep its events aside (park.c), committed on its own; the node's
 *		workers, or a flush, apply what it queued of the range before.
 *	 2. In one transaction on each node, prepared (two-phase commit):
 *		move_keys_out() on the old node holds its workers, takes the range's
 *		state rows (and seen rows) and dead letters out and takes the range's
 *		live keys out of its cells (latest mode), as their tombstones would:
 *		the cost is the range's, not the node's; move_keys_in() on the new
 *		node puts them in, and the keys into its cells as their first
 *		versions would.
 *	 3. The switch (MoveSwitch), the only step that holds the coordinator's
 *		producers and readers: its ingest and views locked, the partition
 *		that holds the range split if its modulus is smaller and the range's
 *		pointed at the new node, both nodes committed (the new one first),
 *		the parked events copied into the new node's queue; the coordinator
 *		commits last.  From then on the old node refuses the range's keys.
 *
 * So the keys' state, dead letters and contributions to the cells leave
 * one node and reach the other atomically, and no event of the range is
 * applied on the old node after the move.  Each node records its moves in
 * exactonce.key_move.  A move that fails before a node commits is undone
 * (both nodes rolled back, the parked events returned to the old node's
 * queue); one cut off later (a node or the coordinator gone) is finished,
 * or undone, by calling move_keys() again, which looks for its prepared
 * transactions on both nodes first.
 *
 * move_keys() reaches both nodes with the user mappings of the pipeline's
 * owner (node.c), whoever calls it.  A node trusts its peer no more
 * than its own producers: move_keys_in() refuses the move if a row it is
 * sent lacks its key or version or has a key outside the range, or if a
 * state row holds what the state stage would have sent to dead letters (a
 * NaN, infinite or too large number, a key or cell too long).
 *
 * In accumulate mode a cell adds up readings without remembering which key
 * each came from, so a key's share of the cells cannot be taken out: it
 * stays where it was counted, which keeps the sums over the nodes exact,
 * and what moves is the key's state and seen rows, so that a resend of a
 * reading applied on the old node is a duplicate on the new one.  Each
 * node's key_move rows then carry the totals and events that left or came
 * with the keys, by which verify() squares its cells with its state.
 * Windows are not moved: the nodes' watermarks differ.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "partitioning/partbounds.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog/pipeline.h"
#include "catalog/shape.h"
#include "catalog/statement.h"
#include "distributed/coordinator.h"
#include "distributed/move.h"
#include "distributed/node.h"
#include "distributed/park.h"
#include "distributed/range.h"
#include "engine/drain.h"
#include "engine/event.h"
#include "engine/map.h"
#include "engine/progress.h"
#include "engine/queue.h"
#include "engine/reduce.h"
#include "engine/state.h"
#include "utils/subxact.h"

PG_FUNCTION_INFO_V1(exactonce_key_bucket);
PG_FUNCTION_INFO_V1(exactonce_move_keys_settle);
PG_FUNCTION_INFO_V1(exactonce_move_keys_park);
PG_FUNCTION_INFO_V1(exactonce_move_keys_unpark);
PG_FUNCTION_INFO_V1(exactonce_move_keys_out);
PG_FUNCTION_INFO_V1(exactonce_move_keys_in);
PG_FUNCTION_INFO_V1(exactonce_move_keys);

/* how long a move waits for a lock on a node (ms; 0: as long as it takes) */
static int	exactonce_move_lock_timeout = 10000;

/*
 * MoveInit defines exactonce.move_lock_timeout.
 */
void
MoveInit(void)
{
	DefineCustomIntVariable("exactonce.move_lock_timeout",
							"Longest wait of exactonce.move_keys() for a lock on a node, and of its switch for the coordinator's lock.",
							"Past this, the move gives up (55P03) and is undone.",
							&exactonce_move_lock_timeout,
							10000, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/*
 * exactonce_key_bucket returns the hash remainder of a key for a modulus:
 * the partition of a coordinator's ingest that takes it.
 */
Datum
exactonce_key_bucket(PG_FUNCTION_ARGS)
{
	int32		modulus = PG_GETARG_INT32(1);

	RangeCheck(modulus, 0);
	PG_RETURN_INT32(RangeBucket(PG_GETARG_DATUM(0), modulus));
}

/* In accumulate mode, what the keys moved had added to the cells. */
typedef struct MovedTotals
{
	Datum		total;			/* numeric */
	Datum		events;			/* int8 */
} MovedTotals;

/*
 * RecordMove adds a row to exactonce.key_move.  SPI is connected.
 */
static void
RecordMove(Pipeline *p, int32 modulus, int32 remainder, const char *direction,
		   const char *peer, const char *gid, int64 keys, MovedTotals *moved)
{
	Oid			types[9] = {TEXTOID, NAMEOID, INT4OID, INT4OID, TEXTOID, TEXTOID, INT8OID,
	NUMERICOID, INT8OID};
	Datum		values[9];
	char		nulls[9] = "       nn";

	values[0] = CStringGetTextDatum(gid);
	values[1] = DirectFunctionCall1(namein, CStringGetDatum(p->name));
	values[2] = Int32GetDatum(modulus);
	values[3] = Int32GetDatum(remainder);
	values[4] = CStringGetTextDatum(direction);
	values[5] = CStringGetTextDatum(peer);
	values[6] = Int64GetDatum(keys);
	if (moved != NULL)
	{
		values[7] = moved->total;
		values[8] = moved->events;
		nulls[7] = nulls[8] = ' ';
	}
	StatementExecAs(StatementTableOwner("key_move"),
					StatementPrepareFixed("INSERT INTO exactonce.key_move"
										  " (gid, pipeline, modulus, remainder, direction, peer, keys, total, events)"
										  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)", 9, types),
					values, nulls, false, 1);
	/* whether the queue refuses the keys changes with this row (range.c) */
	CacheInvalidateRelcacheByRelid(p->ingest);
}

/*
 * SUMS is the SQL that adds up, in accumulate mode, the totals and events
 * of the state rows of relation rel: what the cells of the node the keys
 * leave keep, and those of the node they reach lack.
 */
#define SUMS(rel) ", COALESCE(pg_catalog.sum(" rel ".total), 0)," \
	" COALESCE(pg_catalog.sum(" rel ".events), 0)::pg_catalog.int8"

/*
 * ReadSums reads what SUMS added up, from columns 3 and 4 of the result.
 */
static void
ReadSums(MovedTotals *moved)
{
	bool		isnull;

	moved->total = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	moved->events = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull);
}

/*
 * MoveTableDirect tells whether table of a pipeline is one the state stage
 * writes directly (state, seen), and refuses it if it has triggers: a
 * move's statements would fire them, and one that skips rows would leave
 * keys behind, counted on both nodes, or lose them on the way.  The other
 * tables a move writes (dead_letters) may have triggers of the owner's,
 * and their rows are counted (MoveCheckCount).
 */
static bool
MoveTableDirect(Pipeline *p, const char *table)
{
	Oid			relid = get_relname_relid(table, p->nspid);
	Relation	rel;

	if (!OidIsValid(relid) || (relid != p->state && relid != p->seen))
		return false;
	rel = table_open(relid, RowExclusiveLock);
	ShapeRefuseTriggers(rel);
	table_close(rel, NoLock);
	return true;
}

/*
 * MoveCheckCount refuses a move whose statement on table took out or put
 * in ("what") other than all the rows of the range, whose number the
 * statement's last column has (read with its snapshot): an owner's trigger
 * skipped some.
 */
static void
MoveCheckCount(Pipeline *p, const char *table, const char *what, int32 modulus, int32 remainder,
			   int64 n)
{
	bool		isnull;
	int64		all = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
												  SPI_tuptable->tupdesc->natts, &isnull));

	if (n != all)
		StatementRowRefused(p->name, table,
							psprintf("A move %s " INT64_FORMAT " of the " INT64_FORMAT " rows of the keys (%d, %d): "
									 "a trigger skipped the others.", what, n, all, modulus, remainder));
}

/*
 * TakeRows deletes a pipeline table's rows of the range and returns them as
 * a JSON array of objects, one per row, by column name (NULL if none): the
 * columns of the same table may stand in another order on the other node
 * (state's changed in 1.6); *n is how many, and moved, if not NULL, gets
 * the state rows' sums.  With keycols (KeyColumns), the same scan leaves
 * the rows in SPI_tuptable, a row each, for KeyDeltas.
 */
static char *
TakeRows(Pipeline *p, const char *table, int32 modulus, int32 remainder, int64 *n,
		 MovedTotals *moved, const char *keycols)
{
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		values[2] = {Int32GetDatum(modulus), Int32GetDatum(remainder)};
	const char *taken = psprintf("WITH taken AS (DELETE FROM %s.%s"
								 " WHERE exactonce.key_bucket(key, $1) OPERATOR(pg_catalog.=) $2 RETURNING *)",
								 quote_identifier(p->name), table);
	bool		counted = !MoveTableDirect(p, table);
	bool		isnull;
	StringInfoData rows;

	if (keycols)
	{
		/* each row's JSON beside the columns read: one scan, no parsing */
		if (SPI_execute_with_args(psprintf("%s SELECT %s, pg_catalog.row_to_json(r)::pg_catalog.text FROM taken r",
										   taken, keycols),
								  2, types, values, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not take the %s rows of pipeline \"%s\"", table, p->name);
		*n = (int64) SPI_processed;
		if (*n == 0)
			return NULL;
		initStringInfo(&rows);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			text	   *json = DatumGetTextPP(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc,
															SPI_tuptable->tupdesc->natts, &isnull));

			CHECK_FOR_INTERRUPTS();
			appendStringInfoChar(&rows, r == 0 ? '[' : ',');
			appendBinaryStringInfo(&rows, VARDATA_ANY(json), VARSIZE_ANY_EXHDR(json));
		}
		appendStringInfoChar(&rows, ']');
		return rows.data;
	}
	if (SPI_execute_with_args(psprintf("%s SELECT pg_catalog.json_agg(taken)::pg_catalog.text, pg_catalog.count(*)%s%s FROM taken",
									   taken, moved ? SUMS("taken") : "",
									   counted ? psprintf(", (SELECT pg_catalog.count(*) FROM %s.%s"
														  " WHERE exactonce.key_bucket(key, $1) OPERATOR(pg_catalog.=) $2)",
														  quote_identifier(p->name), table) : ""),
							  2, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not take the %s rows of pipeline \"%s\"", table, p->name);
	*n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (counted)
		MoveCheckCount(p, table, "took out", modulus, remainder, *n);
	if (moved)
		ReadSums(moved);
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/*
 * RowColumn returns column name of the row in slot, which must have type
 * type: an owner's change to the table is an error, never a misread.
 */
static Datum
RowColumn(TupleTableSlot *slot, const char *name, Oid type, bool *isnull)
{
	TupleDesc	desc = slot->tts_tupleDescriptor;
	int			attnum = SPI_fnumber(desc, name);

	if (attnum <= 0 || TupleDescAttr(desc, attnum - 1)->atttypid != type)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("the rows moved have no column \"%s\" of type %s", name, format_type_be(type)),
				 errhint("The tables of a pipeline must keep the columns exactonce made.")));
	return slot_getattr(slot, attnum, isnull);
}

/*
 * RowFault returns why a row of table (state, seen or dead_letters) that
 * another node sent cannot come into pipeline p, or NULL: a row without
 * key or version, a key outside the range (modulus, remainder), or, for a
 * state row, what this node's own queue and state stage would not take.
 * Dead letters keep what was wrong with them (a NaN, say): that is why
 * they are dead letters.  attnums are EventAttnums' for state in latest
 * mode.
 */
static char *
RowFault(Pipeline *p, const char *table, TupleTableSlot *slot, AttrNumber *attnums,
		 int32 modulus, int32 remainder)
{
	bool		state = strcmp(table, "state") == 0;
	Datum		key;
	bool		isnull;
	Event		ev = {0};
	const char *missing;

	key = RowColumn(slot, "key", TEXTOID, &isnull);
	if (isnull)
		return pstrdup("key is NULL");
	(void) RowColumn(slot, "version", INT8OID, &isnull);
	if (isnull)
		return pstrdup("version is NULL");
	if (RangeBucket(key, modulus) != remainder)
		return psprintf("key \"%s\" is not one of the keys (%d, %d): its exactonce.key_bucket(key, %d) is %d",
						TextDatumGetCString(key), modulus, remainder, modulus, RangeBucket(key, modulus));
	if (!state)
		return NULL;
	if (p->mode == PIPELINE_ACCUMULATE)
	{
		Datum		total = RowColumn(slot, "total", NUMERICOID, &isnull);
		const char *bad;

		if (isnull)
			return pstrdup("total is NULL");
		bad = StateNumberFault(DatumGetNumeric(total));
		return bad ? psprintf("total is %s", bad) : NULL;
	}
	missing = EventFromSlot(p, slot, attnums, &ev);
	if (missing)
		return psprintf("%s is NULL", missing);
	return StateEventFault(p, &ev);
}

/*
 * CheckRows refuses the rows that source (a query of the rows another node
 * sent, in parameter $1) yields if one of them cannot come into table of
 * pipeline p: a node takes from its peer only what it would take from its
 * own producers.  The rows are read in batches, not all at once.
 */
static void
CheckRows(Pipeline *p, const char *table, const char *source, Datum rows, int32 modulus,
		  int32 remainder)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {rows};
	MemoryContext row_cxt = AllocSetContextCreate(CurrentMemoryContext, "exactonce moved row",
												  ALLOCSET_DEFAULT_SIZES);
	TupleTableSlot *slot = NULL;
	AttrNumber	attnums[EV_ATTNUMS];
	Portal		portal;
	int64		n = 0;

	portal = SPI_cursor_open_with_args(NULL, psprintf("SELECT * FROM %s", source), 1, types, values,
									   NULL, true, 0);
	for (;;)
	{
		SPI_cursor_fetch(portal, true, 1000);
		if (SPI_processed == 0)
			break;
		if (slot == NULL)
		{
			slot = MakeSingleTupleTableSlot(CreateTupleDescCopy(SPI_tuptable->tupdesc), &TTSOpsHeapTuple);
			if (strcmp(table, "state") == 0 && p->mode == PIPELINE_LATEST)
				EventAttnums(p, slot->tts_tupleDescriptor, attnums);
		}
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			MemoryContext old = MemoryContextSwitchTo(row_cxt);
			char	   *fault;

			n++;
			CHECK_FOR_INTERRUPTS();
			ExecStoreHeapTuple(SPI_tuptable->vals[i], slot, false);
			fault = RowFault(p, table, slot, attnums, modulus, remainder);
			if (fault)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("%s row " INT64_FORMAT " moved into pipeline \"%s\" is refused: %s",
								table, n, p->name, fault),
						 errdetail("A node takes from another only the rows its own queue and state stage would take."),
						 errhint("Nothing moved; look into pipeline \"%s\" on the node the keys came from.",
								 p->name)));
			ExecClearTuple(slot);
			MemoryContextSwitchTo(old);
			MemoryContextReset(row_cxt);
		}
		SPI_freetuptable(SPI_tuptable);
	}
	SPI_cursor_close(portal);
	if (slot)
		ExecDropSingleTupleTableSlot(slot);
	MemoryContextDelete(row_cxt);
}

/*
 * PutRows inserts rows as TakeRows returned them into a pipeline table and
 * returns how many, once CheckRows found each fit for the range (modulus,
 * remainder); moved, if not NULL, gets the state rows' sums, and with
 * keycols (KeyColumns) SPI_tuptable holds them, a row each.  Rows from a
 * node before 1.6 are the text of an array of the table's row type, read
 * by position.
 */
static int64
PutRows(Pipeline *p, const char *table, const char *rows, int32 modulus, int32 remainder,
		MovedTotals *moved, const char *keycols)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(rows)};
	const char *s = quote_identifier(p->name);
	char	   *source;
	bool		isnull;
	bool		counted = !MoveTableDirect(p, table);
	int64		n;

	source = psprintf(rows[0] == '[' ?
					  "pg_catalog.json_populate_recordset(NULL::%s.%s, $1::pg_catalog.text::pg_catalog.json)" :
					  "pg_catalog.unnest($1::pg_catalog.text::%s.%s[])", s, table);
	CheckRows(p, table, source, values[0], modulus, remainder);
	if (keycols)
	{
		if (SPI_execute_with_args(psprintf("WITH put AS (INSERT INTO %1$s.%2$s SELECT * FROM %3$s RETURNING *)"
										   " SELECT %4$s FROM put r", s, table, source, keycols),
								  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not put the %s rows of pipeline \"%s\"", table, p->name);
		return (int64) SPI_processed;
	}
	if (SPI_execute_with_args(psprintf("WITH put AS (INSERT INTO %1$s.%2$s SELECT * FROM %3$s RETURNING *)"
									   " SELECT NULL, pg_catalog.count(*)%4$s%5$s FROM put", s, table, source,
									   moved ? SUMS("put") : "",
									   counted ? psprintf(", (SELECT pg_catalog.count(*) FROM %s)", source) : ""),
							  1, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not put the %s rows of pipeline \"%s\"", table, p->name);
	n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (counted)
		MoveCheckCount(p, table, "put in", modulus, remainder, n);
	if (moved)
		ReadSums(moved);
	return n;
}

/*
 * MoveDeadLetters moves n dead letters in the counters: out of (n < 0) or
 * into the pipeline, as ingested and dead-lettered, so that the accounting
 * identity holds on both nodes.
 */
static void
MoveDeadLetters(Pipeline *p, int64 n)
{
	StageCounts c = {.ingested = n,.dead_lettered = n};

	if (n != 0)
		ProgressRecord(p, &c, 0, -1);
}

/*
 * KeyColumns lists the columns of state rows r that KeyDeltas reads.
 */
static char *
KeyColumns(Pipeline *p)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "r.key, r.version, r.value, r.deleted");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", r.%s", quote_identifier(p->dims[i]));
	for (int i = 0; i < p->nmeasures; i++)
		appendStringInfo(&sql, ", r.%s", quote_identifier(p->measures[i]));
	for (int i = 0; i < p->ndistinct; i++)
		appendStringInfo(&sql, ", r.%s", quote_identifier(p->distincts[i]));
	return sql.data;
}

/*
 * KeyDeltas turns the state rows in SPI_tuptable (KeyColumns) into what
 * their live keys change in the cells: leaving them (sign -1), as their
 * tombstones would, or entering them (1), as their first versions would.
 * The deltas point into the rows, which stay until SPI_finish.
 */
static Delta *
KeyDeltas(Pipeline *p, int sign, int *ndeltas)
{
	SPITupleTable *tt = SPI_tuptable;
	Delta	   *deltas = palloc0(sizeof(Delta) * Max(SPI_processed, 1));
	int			n = 0;

	for (uint64 r = 0; r < SPI_processed; r++)
	{
		Delta	   *d = &deltas[n];
		HeapTuple	tup = tt->vals[r];
		int			col = 5;
		bool		isnull;
		Datum		value;

		CHECK_FOR_INTERRUPTS();
		if (DatumGetBool(SPI_getbinval(tup, tt->tupdesc, 4, &isnull)))
			continue;
		n++;
		d->key = DatumGetTextPP(SPI_getbinval(tup, tt->tupdesc, 1, &isnull));
		d->version = DatumGetInt64(SPI_getbinval(tup, tt->tupdesc, 2, &isnull));
		value = SPI_getbinval(tup, tt->tupdesc, 3, &isnull);
		d->total = DatumGetNumeric(sign > 0 ? value : DirectFunctionCall1(numeric_uminus, value));
		d->keys = sign;
		d->cell = palloc(sizeof(Datum) * Max(p->ndims, 1));
		for (int i = 0; i < p->ndims; i++)
			d->cell[i] = SPI_getbinval(tup, tt->tupdesc, col++, &isnull);
		d->measures = palloc0(sizeof(Numeric) * Max(p->nmeasures, 1));
		for (int i = 0; i < p->nmeasures; i++)
		{
			Datum		m = SPI_getbinval(tup, tt->tupdesc, col++, &isnull);

			if (!isnull)
				d->measures[i] = DatumGetNumeric(sign > 0 ? m : DirectFunctionCall1(numeric_uminus, m));
		}
		d->distincts = palloc0(sizeof(Datum) * Max(p->ndistinct, 1));
		for (int i = 0; i < p->ndistinct; i++)
		{
			Datum		v = SPI_getbinval(tup, tt->tupdesc, col++, &isnull);

			if (!isnull)
				d->distincts[i] = v;
		}
	}
	*ndeltas = n;
	return deltas;
}

/*
 * MoveCells applies the deltas of keys that left or came (KeyDeltas) to
 * the cells at once (MapRollUp, ReduceApplyCells), so that a move costs
 * what it moves, not the node's whole state: a cell left without keys
 * goes, and a min or max that left is read anew from state, which must be
 * without the keys that left, and with those that came.  Latest mode; the
 * caller holds the pipeline.
 */
static void
MoveCells(Pipeline *p, Delta *deltas, int n)
{
	HTAB	   *cells;
	HTAB	   *members;

	if (n == 0)
		return;
	cells = MapRollUp(p, deltas, n, &members);
	ReduceApplyCells(p, cells, members);
}

/*
 * LoadMovable loads a pipeline whose keys may move: the caller's, without
 * windows; only tables (ShapeCheck) are locked and checked.
 */
static Pipeline *
LoadMovable(FunctionCallInfo fcinfo, int nargs, uint32 tables)
{
	Pipeline   *p;

	for (int i = 0; i < nargs; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("the arguments of a move of keys must not be NULL")));
	RangeCheck(PG_GETARG_INT32(1), PG_GETARG_INT32(2));
	PipelineRequireReadCommitted("a move of keys");
	p = PipelineLoadTables(text_to_cstring(PG_GETARG_TEXT_PP(0)), true, tables);
	if (p->windowed)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the keys of pipeline \"%s\" cannot move: it has event-time windows", p->name),
				 errdetail("A reading too late on one node could be in time on another, whose watermark is behind.")));
	return p;
}

/*
 * exactonce_move_keys_park starts a move of a range of keys away from this
 * node, for move_keys(): from now on the queue keeps their events aside
 * (park.c) instead of taking them, for the new node.  Committed on its
 * own, before the move's transaction, so the queue never waits for the
 * move.  Calling it again changes nothing.
 */
Datum
exactonce_move_keys_park(PG_FUNCTION_ARGS)
{
	int32		modulus = PG_GETARG_INT32(1);
	int32		remainder = PG_GETARG_INT32(2);
	Pipeline   *p;
	int			nestlevel;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = LoadMovable(fcinfo, 4, SHAPE_INGEST);
	PipelineActAsOwner(p);
	if (!RangeParking(p, modulus, remainder) && RangeAway(p, modulus, remainder))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the keys (%d, %d) of pipeline \"%s\" have moved away already", modulus, remainder, p->name)));
	ParkCreate(p, modulus, remainder);
	RangeClose(p, modulus, remainder, text_to_cstring(PG_GETARG_TEXT_PP(3)));
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * exactonce_move_keys_settle leaves a node's queue refusing a range of keys
 * as far as it has moved away (range.c): with a check once the range has
 * left, instead of the row trigger that parked its events during the move
 * (both refuse the keys, but a row trigger makes each COPY into the queue
 * insert row by row), and with neither once it is back or a move of it
 * was given up.  It waits for the queue's lock at most 100 ms (move_keys()
 * calls it while it holds the coordinator's producers) and returns whether
 * the queue is so now: false while the range's events are parked.
 */
Datum
exactonce_move_keys_settle(PG_FUNCTION_ARGS)
{
	int32		modulus = PG_GETARG_INT32(1);
	int32		remainder = PG_GETARG_INT32(2);
	Pipeline   *p;
	int			nestlevel;
	bool		settled;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = LoadMovable(fcinfo, 3, SHAPE_INGEST);
	PipelineActAsOwner(p);
	settled = RangeTidy(p, modulus, remainder);
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_BOOL(settled);
}

/*
 * exactonce_move_keys_unpark gives up a move of a range of keys away from
 * this node that has not happened: the queue takes their events again,
 * those parked first.  Refused while a move of the range is prepared here,
 * or once it has moved.  Returns how many events were parked.
 */
Datum
exactonce_move_keys_unpark(PG_FUNCTION_ARGS)
{
	int32		modulus = PG_GETARG_INT32(1);
	int32		remainder = PG_GETARG_INT32(2);
	Oid			types[3] = {TEXTOID, INT4OID, INT4OID};
	Datum		values[3];
	Pipeline   *p;
	int			nestlevel;
	int64		dummy;
	bool		paused;
	int64		parked = 0;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = LoadMovable(fcinfo, 3, SHAPE_INGEST | SHAPE_PROGRESS | SHAPE_SHARD);
	values[0] = CStringGetTextDatum(psprintf("exactonce_move:%s:%d:%d:", p->name, modulus, remainder));
	if (SPI_execute_with_args("SELECT 1 FROM pg_catalog.pg_prepared_xacts WHERE pg_catalog.starts_with(gid, $1)"
							  " AND database OPERATOR(pg_catalog.=) pg_catalog.current_database()",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the prepared transactions");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a move of the keys (%d, %d) of pipeline \"%s\" is prepared on this node",
						modulus, remainder, p->name),
				 errhint("Call exactonce.move_keys() at the coordinator again: it finishes or undoes the move.")));
	PipelineActAsOwner(p);
	/* a move of the range in progress here takes these locks first */
	ProgressLockAll(p, NULL, &dummy, &dummy, &paused);
	if (!RangeParking(p, modulus, remainder))
	{
		PipelineActAsCaller(p);
		StatementUnpinSearchPath(nestlevel);
		SPI_finish();
		PG_RETURN_INT64(0);
	}
	if (RangeAway(p, modulus, remainder))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the keys (%d, %d) of pipeline \"%s\" have moved away already", modulus, remainder, p->name),
				 errdetail("Their parked events belong to the node they moved to."),
				 errhint("Call exactonce.move_keys() at the coordinator again: it sends them there.")));
	parked = ParkReturn(p, modulus, remainder);
	/* the trigger parks nothing now: away with it, if the queue is not busy */
	if (!RangeTidy(p, modulus, remainder))
		ereport(LOG,
				(errmsg("the queue of pipeline \"%s\" keeps its trigger of the keys (%d, %d), being busy",
						p->name, modulus, remainder),
				 errdetail("The trigger takes the keys, but makes each COPY into the queue insert row by row."),
				 errhint("Call exactonce.move_keys_settle('%s', %d, %d).", p->name, modulus, remainder)));
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_INT64(parked);
}

/* A range of keys, for InRange. */
typedef struct Bucket
{
	int32		modulus;
	int32		remainder;
} Bucket;

/*
 * InRange tells whether a key is of the range arg: a QueueKeyFilter.
 */
static bool
InRange(text *key, void *arg)
{
	Bucket	   *range = arg;

	return RangeBucket(PointerGetDatum(key), range->modulus) == range->remainder;
}

/*
 * exactonce_move_keys_out takes a range of keys out of a node's pipeline,
 * for move_keys(): their state rows and dead letters are deleted and
 * returned (and the seen rows, in accumulate mode), the keys taken out of
 * the cells (latest mode).  Their events queued before must be applied
 * first: a range that move_keys_park() parks must have none left in the
 * queue (move_keys() waits for them before); otherwise its queue refuses
 * the keys from now on and what is queued is applied here.  Returns
 * (state, seen, dead_letters, horizon, keys).
 */
Datum
exactonce_move_keys_out(PG_FUNCTION_ARGS)
{
	int32		modulus = PG_GETARG_INT32(1);
	int32		remainder = PG_GETARG_INT32(2);
	MemoryContext cxt = CurrentMemoryContext;
	Pipeline   *p;
	int			nestlevel;
	int64		dummy;
	bool		paused;
	int64		keys,
				dead;
	char	   *state,
			   *seen = NULL,
			   *dead_letters;
	MovedTotals sums;
	MovedTotals *moved;
	const char *target;
	TupleDesc	desc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};
	Delta	   *deltas = NULL;
	int			ndeltas = 0;
	QueuePosition shards[EXACTONCE_MAX_SHARDS];
	int64		rotation,
				drain_rotation;
	bool		parking;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = LoadMovable(fcinfo, 5, SHAPE_ALL);
	moved = p->mode == PIPELINE_ACCUMULATE ? &sums : NULL;
	target = text_to_cstring(PG_GETARG_TEXT_PP(3));
	PipelineActAsOwner(p);

	/*
	 * the workers wait from here to commit; the batches they left staged go
	 * into the aggregates before the keys' contributions come out
	 */
	ProgressLockAll(p, shards, &rotation, &drain_rotation, &paused);
	DrainApplyLeft(p);
	parking = RangeParking(p, modulus, remainder);
	if (!parking && RangeAway(p, modulus, remainder))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the keys (%d, %d) of pipeline \"%s\" have moved away already", modulus, remainder, p->name)));
	if (parking)
	{
		Bucket		range = {modulus, remainder};
		TimestampTz oldest;
		int64		left = QueueDepth(p, rotation, drain_rotation, shards, NULL, &oldest, 1,
									  InRange, &range);

		if (left != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("events of the keys (%d, %d) of pipeline \"%s\" are still queued",
							modulus, remainder, p->name),
					 errdetail("The keys move once the events queued before their move started are applied."),
					 errhint("Call exactonce.flush('%s') first; exactonce.move_keys() does.", p->name)));
	}
	else
	{
		/* inserts wait from here to commit, then the trigger refuses them */
		RangeClose(p, modulus, remainder, target);
		(void) DrainPipeline(p);
	}
	state = TakeRows(p, "state", modulus, remainder, &keys, moved,
					 p->mode == PIPELINE_LATEST ? KeyColumns(p) : NULL);
	if (p->mode == PIPELINE_LATEST)
		deltas = KeyDeltas(p, -1, &ndeltas);
	if (p->mode == PIPELINE_ACCUMULATE)
		seen = TakeRows(p, "seen", modulus, remainder, &dummy, NULL, NULL);
	dead_letters = TakeRows(p, "dead_letters", modulus, remainder, &dead, NULL, NULL);
	MoveDeadLetters(p, -dead);
	MoveCells(p, deltas, ndeltas);
	PipelineActAsCaller(p);
	RecordMove(p, modulus, remainder, "out", target, text_to_cstring(PG_GETARG_TEXT_PP(4)), keys, moved);

	MemoryContextSwitchTo(cxt);
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	nulls[0] = state == NULL;
	if (state)
		values[0] = CStringGetTextDatum(state);
	nulls[1] = seen == NULL;
	if (seen)
		values[1] = CStringGetTextDatum(seen);
	nulls[2] = dead_letters == NULL;
	if (dead_letters)
		values[2] = CStringGetTextDatum(dead_letters);
	nulls[3] = !p->has_horizon;
	values[3] = Int64GetDatum(p->horizon);
	values[4] = Int64GetDatum(keys);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/*
 * exactonce_move_keys_in puts a range of keys that move_keys_out() took out
 * of another node into this node's pipeline: their state rows (and seen
 * rows) and dead letters, the retention horizon if the other's was higher,
 * the keys put into the cells (latest mode).  Returns how many keys came.
 */
Datum
exactonce_move_keys_in(PG_FUNCTION_ARGS)
{
	int32		modulus = PG_GETARG_INT32(1);
	int32		remainder = PG_GETARG_INT32(2);
	Pipeline   *p;
	int			nestlevel;
	int64		dummy;
	bool		paused;
	int64		keys = 0,
				dead = 0;
	char	   *state = PG_ARGISNULL(5) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(5));
	MovedTotals sums = {DirectFunctionCall1(int8_numeric, Int64GetDatum(0)), Int64GetDatum(0)};
	MovedTotals *moved;
	Delta	   *deltas = NULL;
	int			ndeltas = 0;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = LoadMovable(fcinfo, 5, SHAPE_ALL);
	moved = p->mode == PIPELINE_ACCUMULATE ? &sums : NULL;
	PipelineActAsOwner(p);
	ProgressLockAll(p, NULL, &dummy, &dummy, &paused);
	DrainApplyLeft(p);
	RangeTakeBack(p, modulus, remainder);
	if (state != NULL)
		keys = PutRows(p, "state", state, modulus, remainder, moved,
					   p->mode == PIPELINE_LATEST ? KeyColumns(p) : NULL);
	if (state != NULL && p->mode == PIPELINE_LATEST)
		deltas = KeyDeltas(p, 1, &ndeltas);
	if (!PG_ARGISNULL(6))
	{
		if (p->mode != PIPELINE_ACCUMULATE)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pipeline \"%s\" is in latest mode, which has no seen rows", p->name)));
		(void) PutRows(p, "seen", text_to_cstring(PG_GETARG_TEXT_PP(6)), modulus, remainder, NULL, NULL);
	}
	if (!PG_ARGISNULL(7))
	{
		dead = PutRows(p, "dead_letters", text_to_cstring(PG_GETARG_TEXT_PP(7)), modulus, remainder, NULL,
					   NULL);
	}
	MoveDeadLetters(p, dead);
	MoveCells(p, deltas, ndeltas);
	PipelineActAsCaller(p);

	/* resends below the other node's horizon stay dead letters here */
	if (!PG_ARGISNULL(8))
		PipelineSetHorizon(p, PG_GETARG_INT64(8));
	RecordMove(p, modulus, remainder, "in", text_to_cstring(PG_GETARG_TEXT_PP(3)),
			   text_to_cstring(PG_GETARG_TEXT_PP(4)), keys, moved);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_INT64(keys);
}

/* A partition of a coordinator's ingest. */
typedef struct Partition
{
	char	   *relname;
	char	   *server;
	int32		modulus;
	int32		remainder;
} Partition;

/*
 * FindPartition finds the partition of a distributed pipeline's ingest that
 * holds the range of keys (modulus, remainder).
 */
static Partition
FindPartition(Distributed *d, int32 modulus, int32 remainder)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(psprintf("%s.ingest", quote_identifier(d->name)))};
	Partition	part = {0};

	if (SPI_execute_with_args("SELECT c.relname::pg_catalog.text, pg_catalog.pg_get_expr(c.relpartbound, c.oid),"
							  " COALESCE((SELECT o.option_value FROM pg_catalog.pg_options_to_table(f.ftoptions) o"
							  "  WHERE o.option_name OPERATOR(pg_catalog.=) 'server'), s.srvname)::pg_catalog.text"
							  " FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid"
							  " JOIN pg_catalog.pg_foreign_table f ON f.ftrelid OPERATOR(pg_catalog.=) c.oid"
							  " JOIN pg_catalog.pg_foreign_server s ON s.oid OPERATOR(pg_catalog.=) f.ftserver"
							  " WHERE i.inhparent OPERATOR(pg_catalog.=) $1::pg_catalog.regclass",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the partitions of distributed pipeline \"%s\"", d->name);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		int32		m,
					r;

		if (sscanf(SPI_getvalue(tuple, desc, 2), "FOR VALUES WITH (modulus %d, remainder %d)", &m, &r) != 2)
			continue;
		if (m <= modulus && modulus % m == 0 && remainder % m == r)
		{
			part.relname = SPI_getvalue(tuple, desc, 1);
			part.server = SPI_getvalue(tuple, desc, 3);
			part.modulus = m;
			part.remainder = r;
			return part;
		}
		if (m > modulus && RangeOverlap(m, r, modulus, remainder))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the keys (%d, %d) of distributed pipeline \"%s\" span several partitions",
							modulus, remainder, d->name),
					 errdetail("Partition %s holds the keys (%d, %d).", SPI_getvalue(tuple, desc, 1), m, r),
					 errhint("Move the keys of each partition on its own.")));
	}
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("no partition of distributed pipeline \"%s\" holds the keys (%d, %d)",
					d->name, modulus, remainder),
			 errhint("The moduli of the partitions of a hash-partitioned table divide each other; choose a multiple of theirs.")));
	pg_unreachable();
}

/*
 * IsNode tells whether server is a node of a distributed pipeline already;
 * a server that is not must have room to become one.
 */
static bool
IsNode(Distributed *d, const char *server)
{
	for (int i = 0; i < d->nnodes; i++)
		if (strcmp(d->servers[i], server) == 0)
			return true;
	if (d->nnodes == DIST_MAX_NODES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a distributed pipeline has at most %d servers", DIST_MAX_NODES)));
	return false;
}

/*
 * Repartition points the range's partition of the coordinator's ingest at
 * server: the partition that holds it is replaced by its pieces of the
 * range's modulus, each on the old server but the range's.  A server that
 * is not a node yet (new_node) becomes one: the views take in its cells
 * and row.
 */
static void
Repartition(Distributed *d, Partition *part, int32 modulus, int32 remainder, const char *server,
			bool new_node)
{
	StringInfoData sql;
	const char *s = quote_identifier(d->name);

	initStringInfo(&sql);
	appendStringInfo(&sql, "ALTER TABLE %1$s.ingest DETACH PARTITION %1$s.%2$s;\nDROP FOREIGN TABLE %1$s.%2$s;\n",
					 s, quote_identifier(part->relname));
	for (int32 r = part->remainder; r < modulus; r += part->modulus)
		appendStringInfoString(&sql, CoordinatorPartitionDDL(d, modulus, r, r == remainder ? server : part->server));
	if (new_node)
	{
		Oid			types[2] = {TEXTOID, TEXTOID};
		Datum		values[2] = {CStringGetTextDatum(d->name), CStringGetTextDatum(server)};

		d->servers[d->nnodes++] = pstrdup(server);
		appendStringInfoString(&sql, CoordinatorNodeDDL(d, d->nnodes - 1));
		appendStringInfoString(&sql, CoordinatorViewsDDL(d));
		StatementExecAs(StatementTableOwner("distributed_pipeline"),
						StatementPrepareFixed("UPDATE exactonce.distributed_pipeline"
											  " SET servers = servers OPERATOR(pg_catalog.||) $2::pg_catalog.name"
											  " WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.name", 2, types),
						values, NULL, false, 1);
	}
	if (SPI_execute(sql.data, false, 0) < 0)
		elog(ERROR, "could not repartition distributed pipeline \"%s\"", d->name);
}

/* The two nodes of a move and where their transactions are. */
typedef struct Move
{
	const char *name;
	int32		modulus;
	int32		remainder;
	const char *gid;
	const char *servers[2];		/* from, to */
	PGconn	   *conns[2];
	bool		prepared[2];
	bool		parked;			/* the first node parks the range's events */
	bool		stands;			/* committed on a node: finish, never undo */
	char	   *columns;		/* of the queues (MoveColumns) */
	TimestampTz switched_at;	/* the switch had the coordinator's lock */
	int64		sent_on;		/* parked events that went with the move */
	int64		sent_late;		/* ... and those sent on at the switch */
} Move;

/*
 * MoveRun runs a statement on a node of a move; the result's first value.
 */
static char *
MoveRun(Move *mv, int node, const char *sql, int nparams, const char **params)
{
	PGresult   *res = NodeRun(mv->conns[node], mv->servers[node], sql, nparams, params);
	char	   *value = NodeValue(res, 0);

	PQclear(res);
	return value;
}

/*
 * MoveAsk runs a question on a node of a move: true only where it answers
 * true (a node the owner points anywhere may answer nothing at all).
 */
static bool
MoveAsk(Move *mv, int node, const char *sql, int nparams, const char **params)
{
	char	   *value = MoveRun(mv, node, sql, nparams, params);

	return value != NULL && strcmp(value, "t") == 0;
}

/*
 * MovesOf names the record of a node's moves that the role of its user
 * mapping may read: the view exactonce.key_moves, its own pipelines' (1.7
 * on), or the table exactonce.key_move on a node before it.
 */
static const char *
MovesOf(Move *mv, int node)
{
	return MoveAsk(mv, node, "SELECT pg_catalog.to_regclass('exactonce.key_moves') IS NOT NULL", 0, NULL) ?
		"exactonce.key_moves" : "exactonce.key_move";
}

/*
 * MoveResolve finishes, or undoes, an earlier move of the range cut off
 * after a node had prepared it, and tells whether the range has moved from
 * the first node to the second already (the coordinator's switch then is
 * all that is left).
 */
static bool
MoveResolve(Move *mv)
{
	char	   *prefix = psprintf("exactonce_move:%s:%d:%d:", mv->name, mv->modulus, mv->remainder);
	const char *params[5];
	char	   *gids[2];
	char	   *last;

	params[0] = prefix;
	for (int i = 0; i < 2; i++)
		gids[i] = MoveRun(mv, i, "SELECT gid FROM pg_catalog.pg_prepared_xacts"
						  " WHERE pg_catalog.starts_with(gid, $1) AND database OPERATOR(pg_catalog.=) pg_catalog.current_database()",
						  1, params);

	/* the second node prepares last: if it did, both did, and the move stands */
	if (gids[1] != NULL)
	{
		MoveRun(mv, 1, psprintf("COMMIT PREPARED %s", quote_literal_cstr(gids[1])), 0, NULL);
		if (gids[0] != NULL)
			MoveRun(mv, 0, psprintf("COMMIT PREPARED %s", quote_literal_cstr(gids[0])), 0, NULL);
	}
	else if (gids[0] != NULL)
	{
		params[0] = gids[0];
		if (MoveRun(mv, 1, psprintf("SELECT 1 FROM %s WHERE gid OPERATOR(pg_catalog.=) $1", MovesOf(mv, 1)),
					1, params))
			MoveRun(mv, 0, psprintf("COMMIT PREPARED %s", quote_literal_cstr(gids[0])), 0, NULL);
		else
			MoveRun(mv, 0, psprintf("ROLLBACK PREPARED %s", quote_literal_cstr(gids[0])), 0, NULL);
	}

	/* the last move of the range that the first node knows of */
	params[0] = mv->name;
	params[1] = psprintf("%d", mv->modulus);
	params[2] = psprintf("%d", mv->remainder);
	last = MoveRun(mv, 0, psprintf("SELECT direction OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) peer FROM %s"
								   " WHERE pipeline OPERATOR(pg_catalog.=) $1::pg_catalog.name"
								   " AND modulus OPERATOR(pg_catalog.=) $2::pg_catalog.int4"
								   " AND remainder OPERATOR(pg_catalog.=) $3::pg_catalog.int4 ORDER BY moved_at DESC LIMIT 1",
								   MovesOf(mv, 0)),
				   3, params);
	if (last == NULL || strncmp(last, "out:", 4) != 0)
		return false;
	if (strcmp(last + 4, mv->servers[1]) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the keys (%d, %d) of distributed pipeline \"%s\" moved from server \"%s\" to server \"%s\" already",
						mv->modulus, mv->remainder, mv->name, mv->servers[0], last + 4),
				 errhint("Call exactonce.move_keys() with server \"%s\" to finish that move.", last + 4)));
	return true;
}

/*
 * MoveColumns lists the columns of a distributed pipeline's ingest at the
 * coordinator: those of its nodes' queues, which parked events have.
 */
static char *
MoveColumns(Distributed *d)
{
	Oid			ingest = get_relname_relid("ingest", get_namespace_oid(d->name, false));
	Relation	rel = table_open(ingest, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	StringInfoData cols;

	initStringInfo(&cols);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && !att->attgenerated)
			appendStringInfo(&cols, "%s%s", cols.len > 0 ? ", " : "", quote_identifier(NameStr(att->attname)));
	}
	table_close(rel, AccessShareLock);
	return cols.data;
}

/*
 * MoveParkedOn copies the events the first node parked (park.c) into the
 * second node's queue, taking them out of their table with delete, else
 * reading them; the nodes' transactions are the caller's.  Returns how many.
 */
static int64
MoveParkedOn(Move *mv, bool delete)
{
	const char *s = quote_identifier(mv->name);
	const char *park = quote_identifier(ParkName(mv->modulus, mv->remainder));

	return NodeCopy(mv->conns[0], mv->servers[0],
					psprintf(delete ? "COPY (DELETE FROM %2$s.%3$s RETURNING %1$s) TO STDOUT" :
							 "COPY (SELECT %1$s FROM %2$s.%3$s) TO STDOUT", mv->columns, s, park),
					mv->conns[1], mv->servers[1], psprintf("COPY %s.ingest (%s) FROM STDIN", s, mv->columns));
}

/*
 * MoveParked sends the rest of the events the first node parked while the
 * keys moved to the second node's queue, and drops their table there, once
 * the move stands on both nodes (those parked before the nodes prepared
 * went with the move).  The first node's direct producers wait for that
 * (the coordinator's wait for the switch); a resend of parked events,
 * should this be cut off, is a duplicate on the second node.
 */
static void
MoveParked(Move *mv)
{
	const char *s = quote_identifier(mv->name);
	const char *park = quote_identifier(ParkName(mv->modulus, mv->remainder));
	const char *params[1];

	params[0] = psprintf("%s.%s", s, park);
	if (!MoveAsk(mv, 0, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", 1, params))
		return;
	MoveRun(mv, 0, "BEGIN", 0, NULL);
	MoveRun(mv, 0, psprintf("LOCK TABLE %s.%s IN EXCLUSIVE MODE", s, park), 0, NULL);
	mv->sent_late = MoveParkedOn(mv, false);
	MoveRun(mv, 0, psprintf("DROP TABLE %s.%s", s, park), 0, NULL);
	MoveRun(mv, 0, "COMMIT", 0, NULL);
}

/*
 * MoveSettle has the first node refuse the range with a check instead of
 * its trigger, which keeps COPY into its queue batched, and the second
 * drop its trigger of the range if it has one (a settle that found its
 * queue busy when the range left it): the range is back, and the trigger
 * would keep that queue's COPY row by row.  A lifted check there stays
 * (a hash of the range's keys), so as not to wait on that queue's lock
 * here without need.  Where a queue is busy, or its version is before
 * 1.14, the trigger stays (it refuses, or takes, the keys as it should);
 * exactonce.move_keys_settle() there settles it later.
 */
static void
MoveSettle(Move *mv)
{
	const char *params[3] = {mv->name, psprintf("%d", mv->modulus), psprintf("%d", mv->remainder)};

	for (int i = 0; i < 2; i++)
	{
		char	   *settled;

		/* one round trip each: the switch holds the producers */
		if (!MoveAsk(mv, i, i == 0 ?
					 "SELECT pg_catalog.to_regprocedure('exactonce.move_keys_settle(text, integer, integer)') IS NOT NULL" :
					 "SELECT pg_catalog.to_regprocedure('exactonce.move_keys_settle(text, integer, integer)') IS NOT NULL"
					 " AND EXISTS (SELECT FROM pg_catalog.pg_trigger WHERE tgrelid OPERATOR(pg_catalog.=)"
					 " pg_catalog.to_regclass(pg_catalog.quote_ident($1::pg_catalog.text) OPERATOR(pg_catalog.||) '.ingest')"
					 " AND tgname OPERATOR(pg_catalog.=)"
					 " pg_catalog.format('exactonce_moved_%s_%s', $2::pg_catalog.text, $3::pg_catalog.text))",
					 i == 0 ? 0 : 3, params))
			continue;
		settled = MoveRun(mv, i, "SELECT exactonce.move_keys_settle($1, $2::integer, $3::integer)", 3, params);
		if (settled == NULL || strcmp(settled, "t") != 0)
			ereport(LOG,
					(errmsg("server \"%s\" keeps its trigger of the keys (%d, %d) of pipeline \"%s\", its queue being busy",
							mv->servers[i], mv->modulus, mv->remainder, mv->name),
					 errdetail("A row trigger makes each COPY into that queue insert row by row."),
					 errhint("Call exactonce.move_keys_settle('%s', %d, %d) on that node.", mv->name, mv->modulus,
							 mv->remainder)));
	}
}

/*
 * MoveNodes readies the range's keys to move between the nodes and returns
 * how many: the first node parks their events from now on (park.c), what
 * it queued before is applied, and both nodes prepare their halves.
 * Nothing here waits on the coordinator's producers or readers, nor they
 * on it.  A move cut off earlier is resolved first; if it stands already,
 * mv->stands is set and nothing is prepared.
 */
static int64
MoveNodes(Move *mv, bool new_node)
{
	const char *params[9];
	PGresult   *res;
	char	   *keys;

	for (int i = 0; i < 2; i++)
	{
		char	   *max = MoveRun(mv, i, "SHOW max_prepared_transactions", 0, NULL);

		if (max == NULL || strcmp(max, "0") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("server \"%s\" does not allow prepared transactions", mv->servers[i]),
					 errdetail("A move of keys commits on both nodes with two-phase commit."),
					 errhint("Set max_prepared_transactions on that node (it takes a restart).")));
		MoveRun(mv, i, "SELECT pg_catalog.set_config('datestyle', 'ISO', false),"
				" pg_catalog.set_config('intervalstyle', 'postgres', false),"
				" pg_catalog.set_config('extra_float_digits', '3', false)", 0, NULL);
	}
	if (!MoveAsk(mv, 0, "SELECT pg_catalog.to_regprocedure('exactonce.move_keys_park(text, integer, integer, text)') IS NOT NULL",
				 0, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("server \"%s\" has a version of exactonce before 1.13, which moves keys only while the coordinator's producers wait",
						mv->servers[0]),
				 errhint("Update the extension there: ALTER EXTENSION exactonce UPDATE.")));
	if (MoveResolve(mv))
	{
		mv->stands = true;
		return 0;
	}

	/* from here, the first node parks the range's events */
	params[0] = mv->name;
	params[1] = psprintf("%d", mv->modulus);
	params[2] = psprintf("%d", mv->remainder);
	params[3] = mv->servers[1];
	MoveRun(mv, 0, "SELECT exactonce.move_keys_park($1, $2::integer, $3::integer, $4)", 4, params);
	mv->parked = true;

	/*
	 * Those queued before are applied, by the node's workers where they run,
	 * without holding its queue; where they do not (paused, or wait_applied()
	 * says 55000) or are slow (EO003), by a flush.
	 */
	MoveRun(mv, 0, psprintf("DO $move$ BEGIN"
							" IF NOT (SELECT paused FROM %1$s.progress) THEN BEGIN"
							" PERFORM exactonce.wait_applied(%2$s, '%3$d ms'); RETURN;"
							" EXCEPTION WHEN SQLSTATE 'EO003' OR object_not_in_prerequisite_state THEN NULL;"
							" END; END IF;"
							" PERFORM exactonce.flush(%2$s); END $move$",
							quote_identifier(mv->name), quote_literal_cstr(mv->name),
							exactonce_move_lock_timeout > 0 ? Min(exactonce_move_lock_timeout, 2000) : 2000),
			0, NULL);

	for (int i = 0; i < 2; i++)
		MoveRun(mv, i, "BEGIN", 0, NULL);
	if (new_node)
	{
		res = NodeRun(mv->conns[0], mv->servers[0],
					  psprintf("SELECT p.mode, (SELECT pg_catalog.count(*) FROM %s.shard)::pg_catalog.text,"
							   " p.dimensions::pg_catalog.text, p.measures::pg_catalog.text, p.min_max::pg_catalog.text,"
							   " p.distinct_counts::pg_catalog.text"
							   " FROM exactonce.pipeline p WHERE p.name OPERATOR(pg_catalog.=) $1::pg_catalog.name",
							   quote_identifier(mv->name)), 1, params);
		params[1] = NodeValue(res, 2);
		params[2] = NodeValue(res, 0);
		params[3] = NodeValue(res, 1);
		params[4] = NodeValue(res, 3);
		params[5] = NodeValue(res, 4);
		params[6] = NodeValue(res, 5);
		PQclear(res);
		MoveRun(mv, 1, "SELECT exactonce.create_pipeline($1, $2::text[], $3, $4::integer, $5::text[], $6::text[], $7::text[])",
				7, params);
	}
	params[1] = psprintf("%d", mv->modulus);
	params[2] = psprintf("%d", mv->remainder);
	params[3] = mv->servers[1];
	params[4] = mv->gid;
	res = NodeRun(mv->conns[0], mv->servers[0],
				  "SELECT state, seen, dead_letters, horizon, keys"
				  " FROM exactonce.move_keys_out($1, $2::integer, $3::integer, $4, $5)", 5, params);
	params[3] = mv->servers[0];
	for (int i = 0; i < 4; i++)
		params[5 + i] = NodeValue(res, i);
	keys = NodeValue(res, 4);
	PQclear(res);
	if (keys == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("server \"%s\" took out no keys (%d, %d) of pipeline \"%s\"", mv->servers[0], mv->modulus,
						mv->remainder, mv->name),
				 errdetail("exactonce.move_keys_out() there returned no count of the keys it took out."),
				 errhint("Point the server at the database of the pipeline's node, with exactonce installed.")));
	MoveRun(mv, 1, "SELECT exactonce.move_keys_in($1, $2::integer, $3::integer, $4, $5, $6, $7, $8, $9::bigint)",
			9, params);

	/*
	 * the events parked so far go with the keys, in the same transactions:
	 * the new node's workers, held until it commits, apply them after the
	 * keys' state; the switch sends only those parked since
	 */
	mv->sent_on = MoveParkedOn(mv, true);

	for (int i = 0; i < 2; i++)
	{
		MoveRun(mv, i, psprintf("PREPARE TRANSACTION %s", quote_literal_cstr(mv->gid)), 0, NULL);
		mv->prepared[i] = true;
	}
	return pg_strtoint64(keys);
}

/*
 * MoveSwitch is a move's last step, the only one that holds the
 * coordinator's producers and readers: the range's partition of ingest
 * points at the new node, both nodes commit (the new one first), and the
 * events parked meanwhile go on to the new node.  The wait for the lock is
 * exactonce.move_lock_timeout at most.
 */
static void
MoveSwitch(Move *mv, Distributed *d, Partition *part, bool new_node)
{
	int			gucs = NewGUCNestLevel();

	(void) set_config_option("lock_timeout", psprintf("%d", exactonce_move_lock_timeout),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (SPI_execute(psprintf("LOCK TABLE %1$s.ingest, %1$s.aggregates, %1$s.nodes IN ACCESS EXCLUSIVE MODE",
							 quote_identifier(mv->name)), false, 0) < 0)
		elog(ERROR, "could not lock distributed pipeline \"%s\"", mv->name);
	AtEOXact_GUC(true, gucs);
	mv->switched_at = GetCurrentTimestamp();
	Repartition(d, part, mv->modulus, mv->remainder, mv->servers[1], new_node);
	for (int i = 1; i >= 0; i--)
	{
		if (!mv->prepared[i])
			continue;
		MoveRun(mv, i, psprintf("COMMIT PREPARED %s", quote_literal_cstr(mv->gid)), 0, NULL);
		mv->prepared[i] = false;
		mv->stands = true;
	}
	MoveParked(mv);
	MoveSettle(mv);
}

/*
 * MoveUndo gives up a move that stands on neither node: each node's
 * prepared half is rolled back, and the first node's queue takes the
 * range's events again, the parked ones first.  False if a node could not
 * be reached, or did not answer within NODE_QUIET_MS for each step.
 */
static bool
MoveUndo(Move *mv)
{
	const char *params[3] = {mv->name, psprintf("%d", mv->modulus), psprintf("%d", mv->remainder)};
	bool		ok = true;

	for (int i = 1; i >= 0; i--)
	{
		if (NodeQuiet(mv->conns[i], mv->prepared[i] ?
					  psprintf("ROLLBACK PREPARED %s", quote_literal_cstr(mv->gid)) : "ROLLBACK", 0, NULL))
			mv->prepared[i] = false;
		else
			ok = false;
	}
	return ok && NodeQuiet(mv->conns[0], "SELECT exactonce.move_keys_unpark($1, $2::integer, $3::integer)",
						   3, params);
}

/*
 * exactonce_move_keys moves the keys whose key_bucket(key, modulus) is
 * remainder, of a distributed pipeline, to the node of server, and returns
 * how many keys moved.
 */
Datum
exactonce_move_keys(PG_FUNCTION_ARGS)
{
	Distributed d;
	Partition	part;
	TimestampTz started = GetCurrentTimestamp();
	Move	   *mv = palloc0(sizeof(Move)); /* not a local: the catch reads it */
	int32		modulus,
				remainder;
	int			nestlevel;
	bool		new_node;
	volatile int64 keys = 0;
	MemoryContext cxt;
	Oid			caller;
	int			caller_sec;

	for (int i = 0; i < 4; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("the arguments of move_keys must not be NULL")));
	if (IsTransactionBlock())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("exactonce.move_keys() cannot run inside a transaction block"),
				 errdetail("It commits the move on both nodes, with two-phase commit, before its own transaction ends.")));
	mv->name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	mv->modulus = modulus = PG_GETARG_INT32(1);
	mv->remainder = remainder = PG_GETARG_INT32(2);
	mv->servers[1] = pstrdup(NameStr(*PG_GETARG_NAME(3)));
	RangeCheck(modulus, remainder);

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	CoordinatorOpen(mv->name, &d);

	/*
	 * The coordinator's part is the owner's, whoever calls: the partitions
	 * and views made for the new node must be the owner's, as the others are
	 */
	GetUserIdAndSecContext(&caller, &caller_sec);
	SetUserIdAndSecContext(d.owner, caller_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);

	/* one move of the pipeline at a time; producers and readers go on */
	if (SPI_execute(psprintf("LOCK TABLE %s.ingest IN SHARE UPDATE EXCLUSIVE MODE",
							 quote_identifier(mv->name)), false, 0) < 0)
		elog(ERROR, "could not lock distributed pipeline \"%s\"", mv->name);
	part = FindPartition(&d, modulus, remainder);
	mv->servers[0] = part.server;
	if (strcmp(part.server, mv->servers[1]) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the keys (%d, %d) of distributed pipeline \"%s\" are on server \"%s\" already",
						modulus, remainder, mv->name, part.server)));
	new_node = !IsNode(&d, mv->servers[1]);
	mv->columns = MoveColumns(&d);

	mv->gid = psprintf("exactonce_move:%s:%d:%d:" INT64_FORMAT, mv->name, modulus, remainder,
					   (int64) GetCurrentTimestamp());
	cxt = CurrentMemoryContext;
	PG_TRY();
	{
		for (int i = 0; i < 2; i++)
		{
			mv->conns[i] = NodeConnect(d.owner, mv->servers[i]);

			/*
			 * a node's producers and workers wait at most this long for the
			 * move
			 */
			MoveRun(mv, i, psprintf("SET lock_timeout = %d", exactonce_move_lock_timeout), 0, NULL);
		}
		keys = MoveNodes(mv, new_node);
		MoveSwitch(mv, &d, &part, new_node);
		ereport(LOG,
				(errmsg("moved " INT64_FORMAT " keys (%d, %d) of distributed pipeline \"%s\" from server \"%s\" to server \"%s\" in %ld ms",
						keys, modulus, remainder, mv->name, mv->servers[0], mv->servers[1],
						TimestampDifferenceMilliseconds(started, GetCurrentTimestamp())),
				 errdetail("The switch held the coordinator's producers and readers for %ld ms until the commit; "
						   "of the events server \"%s\" kept meanwhile, " INT64_FORMAT " went with the keys and "
						   INT64_FORMAT " at the switch.",
						   TimestampDifferenceMilliseconds(mv->switched_at, GetCurrentTimestamp()),
						   mv->servers[0], mv->sent_on, mv->sent_late)));
	}
	PG_CATCH();
	{
		ErrorData  *err;
		bool		undone;

		MemoryContextSwitchTo(cxt);
		err = CopyErrorData();
		FlushErrorState();

		/* standing on neither node: undone; else move_keys() again ends it */
		undone = !mv->stands && mv->conns[0] != NULL && mv->conns[1] != NULL && MoveUndo(mv);
		for (int i = 0; i < 2; i++)
			PQfinish(mv->conns[i]);
		if (!mv->parked && !mv->stands)
			ReThrowError(err);	/* nothing was under way */
		if (!undone)
			ereport(ERROR,
					(errcode(err->sqlerrcode),
					 errmsg("the move of keys (%d, %d) of distributed pipeline \"%s\" is cut off half way: %s",
							modulus, remainder, mv->name, err->message),
					 mv->stands ?
					 errdetail("It stands on server \"%s\"; the coordinator still sends the keys to server \"%s\", which keeps their events for it.",
							   mv->servers[1], mv->servers[0]) :
					 errdetail("Server \"%s\" keeps the keys' events aside until the move is finished or undone.",
							   mv->servers[0]),
					 errhint("Call exactonce.move_keys() again, with the same arguments, to finish or undo it.")));
		ereport(ERROR,
				(errcode(err->sqlerrcode),
				 errmsg("the move of keys (%d, %d) of distributed pipeline \"%s\" is given up: %s",
						modulus, remainder, mv->name, err->message),
				 errdetail("Nothing moved; server \"%s\" takes the keys' events again, those it kept meanwhile first.",
						   mv->servers[0]),
				 err->hint ? errhint("%s", err->hint) : 0));
	}
	PG_END_TRY();
	for (int i = 0; i < 2; i++)
		PQfinish(mv->conns[i]);
	SetUserIdAndSecContext(caller, caller_sec);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_INT64(keys);
}
