/*-------------------------------------------------------------------------
 *
 * feed.c
 *		The change feed: every cell a reduce changes, with its old and new
 *		total and key count, for consumers downstream.
 *
 * A pipeline with a feed (set_feed) has table <pipeline>.feed.  Reduce
 * appends a row per cell it changed, in the transaction that changes the
 * cell (FeedRecord), numbered by an identity column: reduce runs under the
 * pipeline's progress row lock until it commits, so the numbers grow in
 * commit order and a reader never sees a row before one numbered lower.
 * Turning the feed on records the cells there are as changes from nothing,
 * so the feed replayed from its start rebuilds the aggregates.
 *
 * Consumers read with feed_read(pipeline, consumer), the way ingest() takes
 * a source's events: it locks the consumer's row in exactonce.feed_position
 * (created on first use), returns the changes after its committed position
 * and moves the position past them, in the caller's transaction.  A
 * consumer that applies the changes in that transaction sees each once, in
 * order; one that crashes before committing reads them again.  With notify,
 * each reduce that changed cells also sends NOTIFY exactonce_feed with the
 * pipeline's name, at its commit.
 *
 * Rights: set_feed() is for the owner; feed_read() needs SELECT on the
 * feed, and reads it as the pipeline's owner.  The positions table belongs
 * to the extension's owner and grants nothing to PUBLIC; a consumer's row
 * is written as the table's owner once the caller's rights are checked,
 * and belongs to the role that made it (LockPosition).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"

#include "cell.h"
#include "feed.h"
#include "progress.h"
#include "statement.h"

PG_FUNCTION_INFO_V1(exactonce_set_feed);
PG_FUNCTION_INFO_V1(exactonce_feed_read);

#define FEED_CHANNEL		"exactonce_feed"
#define CONSUMER_MAX_LEN	255

/*
 * BuildFeedInsert: append the changes of a reduce, given as arrays.
 */
static const char *
BuildFeedInsert(Pipeline *p)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.feed (level", quote_identifier(p->name));
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", %s", quote_identifier(p->dims[i]));
	appendStringInfoString(&sql, ", old_total, new_total, old_keys, new_keys) SELECT * FROM unnest($1::int4[]");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", $%d::text[]", i + 2);
	appendStringInfo(&sql, ", $%d::numeric[], $%d::numeric[], $%d::int8[], $%d::int8[])",
					 p->ndims + 2, p->ndims + 3, p->ndims + 4, p->ndims + 5);
	return sql.data;
}

/*
 * FeedRecord appends to the feed the cells the aggregates upsert returned
 * (rows: ctid, keys, total, level, then the dimensions), each with its new
 * total and key count and, from its change in cells, the old ones.
 */
void
FeedRecord(Pipeline *p, HTAB *cells, SPITupleTable *rows)
{
	uint64		n = rows->numvals;
	Datum	   *levels = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *dims[EXACTONCE_MAX_DIMENSIONS];
	bool	   *dimnulls[EXACTONCE_MAX_DIMENSIONS];
	Numeric    *old_totals = palloc(sizeof(Numeric) * Max(n, 1));
	Numeric    *new_totals = palloc(sizeof(Numeric) * Max(n, 1));
	int64	   *old_keys = palloc(sizeof(int64) * Max(n, 1));
	int64	   *new_keys = palloc(sizeof(int64) * Max(n, 1));
	Oid			types[EXACTONCE_MAX_DIMENSIONS + 5];
	Datum		values[EXACTONCE_MAX_DIMENSIONS + 5];

	if (n == 0)
		return;
	for (int i = 0; i < p->ndims; i++)
	{
		dims[i] = palloc(sizeof(Datum) * n);
		dimnulls[i] = palloc(sizeof(bool) * n);
	}
	for (uint64 r = 0; r < n; r++)
	{
		HeapTuple	tup = rows->vals[r];
		Datum		cell_dims[EXACTONCE_MAX_DIMENSIONS];
		uint32		mask = 0;
		bool		isnull;
		Cell	   *cell;

		CHECK_FOR_INTERRUPTS();
		for (int i = 0; i < p->ndims; i++)
		{
			cell_dims[i] = SPI_getbinval(tup, rows->tupdesc, 5 + i, &isnull);
			dims[i][r] = cell_dims[i];
			dimnulls[i][r] = isnull;
			if (!isnull)
				mask |= (uint32) 1 << i;
		}
		cell = CellTableFind(cells, mask, cell_dims);
		if (cell == NULL)
			elog(ERROR, "aggregates upsert of pipeline \"%s\" returned a cell it was not given",
				 p->name);
		levels[r] = SPI_getbinval(tup, rows->tupdesc, 4, &isnull);
		new_keys[r] = DatumGetInt64(SPI_getbinval(tup, rows->tupdesc, 2, &isnull));
		new_totals[r] = DatumGetNumeric(SPI_getbinval(tup, rows->tupdesc, 3, &isnull));
		old_keys[r] = new_keys[r] - cell->change.keys;
		old_totals[r] = DatumGetNumeric(DirectFunctionCall2(numeric_sub,
															NumericGetDatum(new_totals[r]),
															NumericGetDatum(cell->change.total)));
	}

	values[0] = PointerGetDatum(construct_array(levels, (int) n, INT4OID, 4, true, TYPALIGN_INT));
	types[0] = INT4ARRAYOID;
	for (int i = 0; i < p->ndims; i++)
	{
		values[1 + i] = StatementTextArray(dims[i], dimnulls[i], (int) n);
		types[1 + i] = TEXTARRAYOID;
	}
	values[p->ndims + 1] = StatementNumericArray(old_totals, (int) n);
	values[p->ndims + 2] = StatementNumericArray(new_totals, (int) n);
	values[p->ndims + 3] = StatementInt8Array(old_keys, (int) n);
	values[p->ndims + 4] = StatementInt8Array(new_keys, (int) n);
	types[p->ndims + 1] = types[p->ndims + 2] = NUMERICARRAYOID;
	types[p->ndims + 3] = types[p->ndims + 4] = INT8ARRAYOID;
	StatementExec(StatementPrepare(p, BuildFeedInsert, p->ndims + 5, types), values, NULL, (int) n);

	if (p->feed_notify)
		Async_Notify(FEED_CHANNEL, p->name);
}

/*
 * BuildFeedTable returns the statements that make a pipeline's feed and
 * record the cells it has as changes from nothing.
 */
static char *
BuildFeedTable(Pipeline *p)
{
	StringInfoData sql;
	StringInfoData dims;
	const char *s = quote_identifier(p->name);

	initStringInfo(&dims);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&dims, "%s, ", quote_identifier(p->dims[i]));
	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE TABLE %s.feed (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
					 " level integer NOT NULL", s);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, ", %s text", quote_identifier(p->dims[i]));
	appendStringInfo(&sql, ", old_total numeric NOT NULL, new_total numeric NOT NULL,"
					 " old_keys bigint NOT NULL, new_keys bigint NOT NULL,"
					 " changed_at timestamptz NOT NULL DEFAULT pg_catalog.now());\n"
					 "COMMENT ON TABLE %s.feed IS 'exactonce: every change of a cell, in commit order (seq): its old and new total and key count; read it with exactonce.feed_read()';\n"
					 "INSERT INTO %s.feed (level, %sold_total, new_total, old_keys, new_keys)"
					 " SELECT level, %s0, total, 0, keys FROM %s.aggregates ORDER BY level, %skeys;\n",
					 s, s, dims.data, dims.data, s, dims.data);

	/*
	 * With wal_level = minimal the numbers drawn in the transaction that made
	 * the sequence are not WAL-logged, nor the credit of numbers they leave
	 * for later transactions: after a crash the sequence would go back and
	 * hand out seqs the feed has.  setval() spends that credit, so the next
	 * number drawn is logged.
	 */
	appendStringInfo(&sql, "SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence(%1$s, 'seq'),"
					 " COALESCE(pg_catalog.max(seq), 1), pg_catalog.max(seq) IS NOT NULL) FROM %2$s.feed;\n",
					 quote_literal_cstr(psprintf("%s.feed", s)), s);
	return sql.data;
}

/*
 * exactonce_set_feed turns a pipeline's change feed on or off, and its
 * NOTIFY with it (owner only).  Off drops the feed and its consumers'
 * positions.
 */
Datum
exactonce_set_feed(PG_FUNCTION_ARGS)
{
	Pipeline   *p;
	int			nestlevel;
	int64		rotation,
				drain_rotation;
	bool		paused;
	bool		on,
				notify;

	for (int i = 0; i < 3; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be NULL", i == 0 ? "pipeline" : i == 1 ? "enabled" : "notify")));
	on = PG_GETARG_BOOL(1);
	notify = on && PG_GETARG_BOOL(2);
	PipelineRequireReadCommitted("exactonce.set_feed()");
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PipelineActAsOwner(p);

	/* no reduce between the cells recorded and the first change */
	ProgressLockAll(p, NULL, &rotation, &drain_rotation, &paused);
	if (on && !p->feed &&
		SPI_execute(BuildFeedTable(p), false, 0) < 0)
		elog(ERROR, "could not create the feed of pipeline \"%s\"", p->name);
	if (!on && p->feed &&
		SPI_execute(psprintf("DROP TABLE %s.feed", quote_identifier(p->name)), false, 0) < 0)
		elog(ERROR, "could not drop the feed of pipeline \"%s\"", p->name);
	PipelineActAsCaller(p);
	PipelineSetFeed(p, on, notify);
	if (!on)
	{
		Oid			types[1] = {INT4OID};
		Datum		values[1] = {Int32GetDatum(p->id)};

		StatementExecAs(StatementTableOwner("feed_position"),
						StatementPrepareFixed("DELETE FROM exactonce.feed_position WHERE pipeline_id = $1",
											  1, types),
						values, NULL, false, -1);
	}

	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_VOID();
}

/* the statements on exactonce.feed_position, as its owner */
static const char *const position_lock =
"SELECT position, owner FROM exactonce.feed_position WHERE pipeline_id = $1 AND consumer = $2 FOR UPDATE";
static const char *const position_create =
"INSERT INTO exactonce.feed_position (pipeline_id, consumer, owner) VALUES ($1, $2, $3)"
" ON CONFLICT (pipeline_id, consumer) DO NOTHING";
static const char *const position_set =
"UPDATE exactonce.feed_position SET position = $3, changes = changes + $4, updated_at = now()"
" WHERE pipeline_id = $1 AND consumer = $2";

/*
 * LockPosition locks a consumer's row, made on first use as the caller's,
 * and returns its committed position.  A position belongs to the role that
 * made it: only that role, a member of it or the pipeline's owner may read
 * from it, and so move it; anyone else would make the consumer skip the
 * changes it read.
 */
static int64
LockPosition(Oid table_owner, Pipeline *p, text *consumer)
{
	Oid			types[3] = {INT4OID, TEXTOID, REGROLEOID};
	Datum		values[3] = {Int32GetDatum(p->id), PointerGetDatum(consumer),
	ObjectIdGetDatum(GetUserId())};
	bool		isnull;

	for (int attempt = 0; attempt < 2; attempt++)
	{
		StatementExecAs(table_owner, StatementPrepareFixed(position_lock, 2, types),
						values, NULL, false, -1);
		if (SPI_processed == 1)
		{
			HeapTuple	tup = SPI_tuptable->vals[0];
			int64		position = DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));
			Oid			owner = DatumGetObjectId(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull));

			if (!has_privs_of_role(GetUserId(), owner) && !has_privs_of_role(GetUserId(), p->owner))
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("consumer \"%s\" of the feed of pipeline \"%s\" belongs to another role",
								text_to_cstring(consumer), p->name),
						 errdetail("A consumer's position is read and moved only by the role that made it (%s) or the pipeline's owner.",
								   GetUserNameFromId(owner, true) ? GetUserNameFromId(owner, true) : "a dropped role"),
						 errhint("Read the feed under a consumer name of your own.")));
			return position;
		}
		StatementExecAs(table_owner, StatementPrepareFixed(position_create, 3, types),
						values, NULL, false, -1);
	}
	elog(ERROR, "could not find the position of consumer \"%s\"", text_to_cstring(consumer));
	return 0;					/* keep the compiler quiet */
}

/*
 * exactonce_feed_read returns up to max changes of a pipeline's feed after
 * the consumer's committed position, in order, and moves the position past
 * them in the caller's transaction.
 */
Datum
exactonce_feed_read(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Pipeline   *p;
	text	   *consumer;
	int32		max;
	int			nestlevel;
	int64		position,
				last;
	Oid			table_owner;
	Oid			feed;
	StringInfoData sql;
	Oid			types[4] = {INT8OID, INT4OID, INT8OID, INT8OID};
	Datum		values[4];

	for (int i = 0; i < 3; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be NULL", i == 0 ? "pipeline" : i == 1 ? "consumer" : "max")));
	consumer = PG_GETARG_TEXT_PP(1);
	max = PG_GETARG_INT32(2);
	if (VARSIZE_ANY_EXHDR(consumer) == 0 || VARSIZE_ANY_EXHDR(consumer) > CONSUMER_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a consumer name has 1 to %d bytes", CONSUMER_MAX_LEN)));
	if (max < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max must be at least 1")));
	PipelineRequireReadCommitted("exactonce.feed_read()");
	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	if (!p->feed)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pipeline \"%s\" has no change feed", p->name),
				 errhint("Its owner turns it on with exactonce.set_feed('%s', true).", p->name)));
	feed = get_relname_relid("feed", p->nspid);
	if (pg_class_aclcheck(feed, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for the feed of pipeline \"%s\"", p->name),
				 errhint("Reading the feed needs SELECT on %s.feed.", quote_identifier(p->name))));

	table_owner = StatementTableOwner("feed_position");
	position = LockPosition(table_owner, p, consumer);

	/*
	 * The changes, read as the pipeline's owner (the caller may read the
	 * feed: checked), so that what the owner planted on the feed, a cast or
	 * an operator, never runs with the caller's rights.
	 */
	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT seq, level, ARRAY[");
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&sql, "%s%s", i > 0 ? ", " : "", quote_identifier(p->dims[i]));
	appendStringInfo(&sql, "]::pg_catalog.text[], old_total, new_total, old_keys, new_keys, changed_at"
					 " FROM %s.feed WHERE seq OPERATOR(pg_catalog.>) $1 ORDER BY seq LIMIT $2",
					 quote_identifier(p->name));
	values[0] = Int64GetDatum(position);
	values[1] = Int32GetDatum(max);
	PipelineActAsOwner(p);
	if (SPI_execute_with_args(sql.data, 2, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the feed of pipeline \"%s\"", p->name);
	PipelineActAsCaller(p);
	last = position;
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		Datum		row[8];
		bool		nulls[8];

		for (int c = 0; c < 8; c++)
			row[c] = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, c + 1, &nulls[c]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
		last = DatumGetInt64(row[0]);
	}

	if (last > position)
	{
		Oid			settypes[4] = {INT4OID, TEXTOID, INT8OID, INT8OID};
		Datum		setvalues[4] = {Int32GetDatum(p->id), PointerGetDatum(consumer),
		Int64GetDatum(last), Int64GetDatum((int64) SPI_processed)};

		StatementExecAs(table_owner, StatementPrepareFixed(position_set, 4, settypes),
						setvalues, NULL, false, 1);
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	return (Datum) 0;
}
