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
 * Retention, as replication slots keep WAL: the workers (and flush) fold
 * what every consumer has read (FeedTrim).  Below the least position of the
 * consumers, each cell keeps one row, its last change, whose old total and
 * key count become those of its first change there: a cell from nothing
 * to what it was at that position.  A cell that came from nothing and left
 * again keeps none.  The consumers never read below their positions again;
 * a consumer that starts afresh reads each cell's changes folded, and they
 * still add up to the aggregates, and each cell's last change is still its
 * row.  So the feed holds a row per live cell plus what some consumer has
 * not read.  A consumer that lags more than exactonce.feed_max_lag changes
 * or exactonce.feed_max_lag_age behind is invalidated, loudly, as
 * max_slot_wal_keep_size invalidates a slot: its reads fail until it is
 * dropped (drop_feed_consumer), and it holds nothing back.  The fold runs
 * under an EXCLUSIVE lock on the feed, taken without waiting, which every
 * feed_read's ROW SHARE lock holds off: no read is ever half on each side.
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
#include "storage/lmgr.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/cell.h"
#include "engine/feed.h"
#include "engine/progress.h"

PG_FUNCTION_INFO_V1(exactonce_set_feed);
PG_FUNCTION_INFO_V1(exactonce_feed_read);
PG_FUNCTION_INFO_V1(exactonce_drop_feed_consumer);

/* how far a consumer may lag: changes, and seconds (-1: no limit) */
static int	exactonce_feed_max_lag = -1;
static int	exactonce_feed_max_lag_age = -1;

/*
 * FeedInit defines the settings of feed retention.
 */
void
FeedInit(void)
{
	DefineCustomIntVariable("exactonce.feed_max_lag",
							"Most changes of a feed a consumer may have left to read before it is invalidated.",
							"-1: no limit; the feed keeps every change its slowest consumer has not read.",
							&exactonce_feed_max_lag,
							-1, -1, INT_MAX,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("exactonce.feed_max_lag_age",
							"Oldest change of a feed a consumer may have left to read before it is invalidated.",
							"-1: no limit.",
							&exactonce_feed_max_lag_age,
							-1, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);
}

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
"SELECT position, owner, invalidated_at, invalidation_reason FROM exactonce.feed_position"
" WHERE pipeline_id = $1 AND consumer = $2 FOR UPDATE";
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
			(void) SPI_getbinval(tup, SPI_tuptable->tupdesc, 3, &isnull);
			if (!isnull)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("consumer \"%s\" of the feed of pipeline \"%s\" was invalidated",
								text_to_cstring(consumer), p->name),
						 errdetail("%s", TextDatumGetCString(SPI_getbinval(tup, SPI_tuptable->tupdesc, 4, &isnull))),
						 errhint("Drop it with exactonce.drop_feed_consumer('%s', '%s'); a consumer of its name then reads the feed from its start.",
								 p->name, text_to_cstring(consumer))));
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

	/* no fold of the feed (FeedTrim) while this reads */
	LockRelationOid(feed, RowShareLock);
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

/*
 * exactonce_drop_feed_consumer forgets a consumer of a pipeline's feed, and
 * returns whether there was one: its role, a member of it or the pipeline's
 * owner may.  The feed no longer keeps what it had not read.
 */
Datum
exactonce_drop_feed_consumer(PG_FUNCTION_ARGS)
{
	Pipeline   *p;
	text	   *consumer;
	int			nestlevel;
	bool		found;
	Oid			table_owner;
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(0) ? "pipeline" : "consumer")));
	consumer = PG_GETARG_TEXT_PP(1);
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	table_owner = StatementTableOwner("feed_position");
	values[0] = Int32GetDatum(p->id);
	values[1] = PointerGetDatum(consumer);
	StatementExecAs(table_owner,
					StatementPrepareFixed("SELECT owner FROM exactonce.feed_position"
										  " WHERE pipeline_id = $1 AND consumer = $2 FOR UPDATE", 2, types),
					values, NULL, false, -1);
	found = SPI_processed == 1;
	if (found)
	{
		bool		isnull;
		Oid			owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

		if (!has_privs_of_role(GetUserId(), owner) && !has_privs_of_role(GetUserId(), p->owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("consumer \"%s\" of the feed of pipeline \"%s\" belongs to another role",
							text_to_cstring(consumer), p->name),
					 errhint("Only the role that made it, its members and the pipeline's owner drop it.")));
		StatementExecAs(table_owner,
						StatementPrepareFixed("DELETE FROM exactonce.feed_position"
											  " WHERE pipeline_id = $1 AND consumer = $2", 2, types),
						values, NULL, false, 1);
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_BOOL(found);
}

/*
 * InvalidateLagging invalidates the consumers of a pipeline's feed that lag
 * past the limits, with a WARNING each, and returns the least position of
 * the others, or last (the feed's last seq) if there are none.  As the
 * pipeline's owner.
 */
static int64
InvalidateLagging(Pipeline *p, Oid table_owner, int64 last)
{
	Oid			types[4] = {INT4OID, TEXTOID, TEXTOID, INT8OID};
	Datum		values[4];
	int64		least = last;
	SPITupleTable *consumers;
	uint64		n;

	values[0] = Int32GetDatum(p->id);
	StatementExecAs(table_owner,
					StatementPrepareFixed("SELECT consumer, position FROM exactonce.feed_position"
										  " WHERE pipeline_id = $1 AND invalidated_at IS NULL", 1, types),
					values, NULL, false, -1);
	consumers = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		name = SPI_getbinval(consumers->vals[i], consumers->tupdesc, 1, &isnull);
		int64		position = DatumGetInt64(SPI_getbinval(consumers->vals[i], consumers->tupdesc, 2, &isnull));
		char	   *reason = NULL;

		CHECK_FOR_INTERRUPTS();
		if (exactonce_feed_max_lag >= 0 && last - position > exactonce_feed_max_lag)
		{
			/*
			 * the rows left, not the seqs: below the others' positions the
			 * feed is folded, and a consumer that starts there has few
			 */
			Oid			t[2] = {INT8OID, INT8OID};
			Datum		v[2] = {Int64GetDatum(position), Int64GetDatum((int64) exactonce_feed_max_lag + 1)};

			if (SPI_execute_with_args(psprintf("SELECT pg_catalog.count(*) FROM (SELECT FROM %s.feed"
											   " WHERE seq OPERATOR(pg_catalog.>) $1 ORDER BY seq LIMIT $2) l",
											   quote_identifier(p->name)),
									  2, t, v, NULL, false, 1) != SPI_OK_SELECT)
				elog(ERROR, "could not read the feed of pipeline \"%s\"", p->name);
			if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) >
				exactonce_feed_max_lag)
				reason = psprintf("It had more than %d changes left to read (exactonce.feed_max_lag).",
								  exactonce_feed_max_lag);
		}
		if (reason == NULL && exactonce_feed_max_lag_age >= 0 && position < last)
		{
			Oid			t[1] = {INT8OID};
			Datum		v[1] = {Int64GetDatum(position)};

			if (SPI_execute_with_args(psprintf("SELECT pg_catalog.now() OPERATOR(pg_catalog.-) changed_at"
											   " OPERATOR(pg_catalog.>) pg_catalog.make_interval(secs => %d)"
											   " FROM %s.feed WHERE seq OPERATOR(pg_catalog.>) $1 ORDER BY seq LIMIT 1",
											   exactonce_feed_max_lag_age, quote_identifier(p->name)),
									  1, t, v, NULL, false, 1) != SPI_OK_SELECT)
				elog(ERROR, "could not read the feed of pipeline \"%s\"", p->name);
			if (SPI_processed == 1 && DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
				reason = psprintf("Its oldest change left to read was older than exactonce.feed_max_lag_age (%d s).",
								  exactonce_feed_max_lag_age);
		}
		if (reason == NULL)
		{
			least = Min(least, position);
			continue;
		}
		values[1] = name;
		values[2] = CStringGetTextDatum(reason);
		StatementExecAs(table_owner,
						StatementPrepareFixed("UPDATE exactonce.feed_position SET invalidated_at = pg_catalog.now(),"
											  " invalidation_reason = $3 WHERE pipeline_id = $1 AND consumer = $2",
											  3, types),
						values, NULL, false, 1);
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("invalidating consumer \"%s\" of the feed of pipeline \"%s\"",
						TextDatumGetCString(name), p->name),
				 errdetail("%s", reason),
				 errhint("Its reads fail from now on; drop it with exactonce.drop_feed_consumer().")));
	}
	return least;
}

/*
 * FeedTrim folds the changes of a pipeline's feed that every consumer has
 * read (see the top of the file), first invalidating those that lag past
 * the limits, and returns how many rows it removed; 0 without doing
 * anything when a reader or a reduce holds the feed.  As the pipeline's
 * owner.
 */
int64
FeedTrim(Pipeline *p)
{
	Oid			feed = get_relname_relid("feed", p->nspid);
	Oid			table_owner = StatementTableOwner("feed_position");
	StringInfoData sql;
	StringInfoData cell;
	const char *s = quote_identifier(p->name);
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	int64		last,
				below;
	bool		isnull;

	if (!p->feed || !OidIsValid(feed) || !ConditionalLockRelationOid(feed, ExclusiveLock))
		return 0;
	/* not read-only: what this transaction drained before is to be seen */
	if (SPI_execute(psprintf("SELECT pg_catalog.max(seq) FROM %s.feed", s), false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the feed of pipeline \"%s\"", p->name);
	values[0] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return 0;
	last = DatumGetInt64(values[0]);
	below = InvalidateLagging(p, table_owner, last);

	initStringInfo(&cell);
	for (int i = 0; i < p->ndims; i++)
		appendStringInfo(&cell, "%s%s", i > 0 ? ", " : "", quote_identifier(p->dims[i]));
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "WITH r AS (SELECT seq, pg_catalog.first_value(old_total) OVER w AS first_total,"
					 " pg_catalog.first_value(old_keys) OVER w AS first_keys,"
					 " pg_catalog.last_value(seq) OVER w AS last_seq, pg_catalog.count(*) OVER w AS n,"
					 " pg_catalog.last_value(new_total) OVER w AS last_total,"
					 " pg_catalog.last_value(new_keys) OVER w AS last_keys"
					 " FROM %1$s.feed WHERE seq OPERATOR(pg_catalog.<=) $1"
					 " WINDOW w AS (PARTITION BY level, ARRAY[%2$s]::pg_catalog.text[] ORDER BY seq"
					 " ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)),"
					 " f AS (SELECT *, first_total OPERATOR(pg_catalog.=) 0 AND first_keys OPERATOR(pg_catalog.=) 0"
					 " AND last_total OPERATOR(pg_catalog.=) 0 AND last_keys OPERATOR(pg_catalog.=) 0 AS nothing FROM r),"
					 " gone AS (DELETE FROM %1$s.feed d USING f WHERE d.seq OPERATOR(pg_catalog.=) f.seq"
					 " AND (f.seq OPERATOR(pg_catalog.<) f.last_seq OR f.nothing) RETURNING d.seq),"
					 " kept AS (UPDATE %1$s.feed k SET old_total = f.first_total, old_keys = f.first_keys FROM f"
					 " WHERE k.seq OPERATOR(pg_catalog.=) f.seq AND f.seq OPERATOR(pg_catalog.=) f.last_seq"
					 " AND f.n OPERATOR(pg_catalog.>) 1 AND NOT f.nothing RETURNING k.seq)"
					 " SELECT (SELECT pg_catalog.count(*) FROM gone), (SELECT pg_catalog.count(*) FROM kept)",
					 s, cell.data);
	values[0] = Int64GetDatum(below);
	if (SPI_execute_with_args(sql.data, 1, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not fold the feed of pipeline \"%s\"", p->name);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}
