/*-------------------------------------------------------------------------
 *
 * event.c
 *		Events in and out: read from a queue row or from a caller's array of
 *		records, passed to a statement as one array per column, and kept in
 *		dead_letters with a reason when the pipeline cannot apply them.
 *
 * An event's columns are those of the pipeline's queue: key, version,
 * value, one text column per dimension, deleted, event_time, one numeric
 * column per measure and one text column per distinct_counts column (NULL
 * where the event has none).  Readers
 * map them by name (EventAttnums), so a caller's record may order them as it
 * likes and carry other columns; a column of the wrong type is an error
 * rather than a cast, so no cast the caller defines ever runs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/typcache.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "engine/event.h"

/* the event columns before the dimensions, in EV_* order, and their types */
static const char *const event_columns[EV_DIM0] = {"key", "version", "value", "deleted", "event_time"};
static const Oid event_types[EV_DIM0] = {TEXTOID, INT8OID, NUMERICOID, BOOLOID, TIMESTAMPTZOID};

/*
 * EventColumn names event column i of an attnum map, and gives its type.
 */
static const char *
EventColumn(Pipeline *p, int i, Oid *type)
{
	if (i < EV_DIM0)
	{
		*type = event_types[i];
		return event_columns[i];
	}
	if (i < EV_MEAS0(p))
	{
		*type = TEXTOID;
		return p->dims[i - EV_DIM0];
	}
	if (i < EV_DIST0(p))
	{
		*type = NUMERICOID;
		return p->measures[i - EV_MEAS0(p)];
	}
	*type = TEXTOID;
	return p->distincts[i - EV_DIST0(p)];
}

/*
 * EventAttnums maps the event columns to attribute numbers of desc, 0 for a
 * column the descriptor lacks, and insists that present ones have the types
 * of the ingest table.
 */
void
EventAttnums(Pipeline *p, TupleDesc desc, AttrNumber *attnums)
{
	for (int i = 0; i < EV_NATTS(p); i++)
	{
		Oid			type;
		const char *name = EventColumn(p, i, &type);

		attnums[i] = 0;
		/* computed from event_time, whatever the row says */
		if (p->windowed && i == EV_DIM0)
			continue;
		for (int a = 0; a < desc->natts; a++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);

			if (att->attisdropped || strcmp(NameStr(att->attname), name) != 0)
				continue;
			if (att->atttypid != type)
				ereport(ERROR,
						(errcode(ERRCODE_DATATYPE_MISMATCH),
						 errmsg("event column \"%s\" has type %s, expected %s",
								name, format_type_be(att->atttypid), format_type_be(type)),
						 errhint("Cast it, for example %s::%s.", name, format_type_be(type))));
			attnums[i] = att->attnum;
			break;
		}
	}
	attnums[EV_WHERE(p)] = 0;
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (!att->attisdropped && att->atttypid == BOOLOID &&
			strcmp(NameStr(att->attname), EV_WHERE_COLUMN) == 0)
			attnums[EV_WHERE(p)] = att->attnum;
	}
}

/*
 * EventValueSize is the room a copy of a varlena value takes in an event's
 * memory (EventValueCopy), or 0 for one to detoast into memory of its own.
 */
static Size
EventValueSize(Datum d)
{
	struct varlena *v = (struct varlena *) DatumGetPointer(d);

	if (VARATT_IS_EXTERNAL(v) || VARATT_IS_COMPRESSED(v))
		return 0;
	return MAXALIGN(VARHDRSZ + VARSIZE_ANY_EXHDR(v));
}

/*
 * EventValueCopy copies a varlena value, with a 4-byte header, to *room,
 * which it moves past the copy; a compressed or out-of-line one is
 * detoasted into memory of its own.
 */
static Pointer
EventValueCopy(Datum d, char **room)
{
	struct varlena *v = (struct varlena *) DatumGetPointer(d);
	Size		len = VARSIZE_ANY_EXHDR(v);
	char	   *copy = *room;

	if (EventValueSize(d) == 0)
		return (Pointer) PG_DETOAST_DATUM_COPY(d);
	SET_VARSIZE(copy, VARHDRSZ + len);
	memcpy(VARDATA(copy), VARDATA_ANY(v), len);
	*room += MAXALIGN(VARHDRSZ + len);
	return copy;
}

/*
 * EventFromSlot copies one event out of a tuple slot into the current memory
 * context.  It returns NULL, or the name of a required column that is NULL
 * or missing.  A missing deleted is false, a missing event_time is now;
 * where the row has EV_WHERE_COLUMN and it is not true, the event is a
 * tombstone.  The event's arrays and values lie together, in one
 * allocation: the state stage reads the events of a batch in key order,
 * not in the order they lie, and each event then costs fewer cache lines.
 */
const char *
EventFromSlot(Pipeline *p, TupleTableSlot *slot, AttrNumber *attnums, Event *ev)
{
	Datum		d;
	bool		isnull;
	Oid			type;
	Size		dims_size = MAXALIGN(sizeof(Datum) * Max(p->ndims, 1));
	Size		measures_size = MAXALIGN(sizeof(Numeric) * p->nmeasures);
	Size		size = dims_size + measures_size + MAXALIGN(sizeof(Datum) * p->ndistinct);
	char	   *room;

	for (int i = 0; i < EV_NATTS(p); i++)
	{
		if (i == EV_VERSION || i == EV_DELETED || i == EV_TIME || attnums[i] == 0)
			continue;
		d = slot_getattr(slot, attnums[i], &isnull);
		if (!isnull)
			size += EventValueSize(d);
	}
	room = palloc0(size);
	ev->dims = (Datum *) room;
	ev->measures = p->nmeasures > 0 ? (Numeric *) (room + dims_size) : NULL;
	ev->distincts = p->ndistinct > 0 ? (Datum *) (room + dims_size + measures_size) : NULL;
	room += dims_size + measures_size + MAXALIGN(sizeof(Datum) * p->ndistinct);
	for (int i = 0; i < EV_NATTS(p); i++)
	{
		bool		optional = i == EV_DELETED || i == EV_TIME || i >= EV_MEAS0(p) ||
		(p->windowed && i == EV_DIM0);

		if (attnums[i] == 0)
		{
			if (optional)
				continue;
			return EventColumn(p, i, &type);
		}
		d = slot_getattr(slot, attnums[i], &isnull);
		if (isnull)
		{
			if (i >= EV_MEAS0(p))
				continue;
			return EventColumn(p, i, &type);
		}
		switch (i)
		{
			case EV_KEY:
				ev->key = (text *) EventValueCopy(d, &room);
				break;
			case EV_VERSION:
				ev->version = DatumGetInt64(d);
				break;
			case EV_VALUE:
				ev->value = (Numeric) EventValueCopy(d, &room);
				break;
			case EV_DELETED:
				ev->deleted = DatumGetBool(d);
				break;
			case EV_TIME:
				ev->event_time = DatumGetTimestampTz(d);
				break;
			default:
				if (i < EV_MEAS0(p))
					ev->dims[i - EV_DIM0] = PointerGetDatum(EventValueCopy(d, &room));
				else if (i < EV_DIST0(p))
					ev->measures[i - EV_MEAS0(p)] = (Numeric) EventValueCopy(d, &room);
				else
					ev->distincts[i - EV_DIST0(p)] = PointerGetDatum(EventValueCopy(d, &room));
				break;
		}
	}
	if (attnums[EV_DELETED] == 0)
		ev->deleted = false;
	if (attnums[EV_WHERE(p)] != 0)
	{
		d = slot_getattr(slot, attnums[EV_WHERE(p)], &isnull);
		if (isnull || !DatumGetBool(d))
			ev->deleted = true;
	}
	if (attnums[EV_TIME] == 0)
		ev->event_time = GetCurrentTimestamp();
	/* a time that is in no window is refused in the state stage */
	if (p->windowed)
	{
		ev->dims[0] = PipelineWindowStart(p, ev->event_time);
		if (ev->dims[0] == (Datum) 0)
			ev->dims[0] = CStringGetTextDatum("");
	}
	return NULL;
}

/*
 * EventsFromArray turns an array of records with the ingest columns into
 * events: key, version, value and the dimensions are required, deleted and
 * event_time optional, other columns ignored.  A record that lacks a
 * required value is an error.
 */
Event *
EventsFromArray(Pipeline *p, ArrayType *arr, int *nevents)
{
	Oid			elemtype = ARR_ELEMTYPE(arr);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	Event	   *events;
	TupleDesc	desc = NULL;
	TupleTableSlot *slot = NULL;
	AttrNumber	attnums[EV_ATTNUMS];

	if (!type_is_rowtype(elemtype))
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("events must be an array of records"),
				 errhint("Pass records whose columns are named and typed like those of %s.ingest, for example (SELECT array_agg(e) FROM my_events e).",
						 quote_identifier(p->name))));
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("events must be a one-dimensional array")));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign, &elems, &nulls, &n);
	events = palloc0(sizeof(Event) * Max(n, 1));

	for (int i = 0; i < n; i++)
	{
		HeapTupleHeader rec;
		HeapTupleData tuple;
		const char *missing;

		CHECK_FOR_INTERRUPTS();
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("event %d is NULL", i + 1)));
		rec = DatumGetHeapTupleHeader(elems[i]);

		/*
		 * The elements of an array of anonymous records may each have a row
		 * type of their own: read each with its own descriptor.
		 */
		if (desc == NULL || HeapTupleHeaderGetTypeId(rec) != desc->tdtypeid ||
			HeapTupleHeaderGetTypMod(rec) != desc->tdtypmod)
		{
			if (slot)
				ExecDropSingleTupleTableSlot(slot);
			desc = lookup_rowtype_tupdesc_copy(HeapTupleHeaderGetTypeId(rec),
											   HeapTupleHeaderGetTypMod(rec));
			slot = MakeSingleTupleTableSlot(desc, &TTSOpsHeapTuple);
			EventAttnums(p, desc, attnums);
			/* only the queue's INSERT computes a WHERE; a caller's is ignored */
			attnums[EV_WHERE(p)] = 0;
		}
		tuple.t_len = HeapTupleHeaderGetDatumLength(rec);
		ItemPointerSetInvalid(&tuple.t_self);
		tuple.t_tableOid = InvalidOid;
		tuple.t_data = rec;
		ExecStoreHeapTuple(&tuple, slot, false);
		missing = EventFromSlot(p, slot, attnums, &events[i]);
		if (missing)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("event %d has no %s", i + 1, missing),
					 errhint("Every event needs key, version, value and each dimension of pipeline \"%s\".",
							 p->name)));
		events[i].ord = i;
	}
	if (slot)
		ExecDropSingleTupleTableSlot(slot);
	*nevents = n;
	return events;
}

/*
 * EventAppendColumns appends the event columns of p, comma separated: key,
 * version, value, the dimensions, deleted, event_time, the measures.
 */
void
EventAppendColumns(StringInfo sql, Pipeline *p)
{
	appendStringInfoString(sql, "key, version, value");
	for (int i = PIPELINE_FIRST_INPUT_DIM(p); i < p->ndims; i++)
		appendStringInfo(sql, ", %s", quote_identifier(p->dims[i]));
	appendStringInfoString(sql, ", deleted, event_time");
	for (int i = 0; i < p->nmeasures; i++)
		appendStringInfo(sql, ", %s", quote_identifier(p->measures[i]));
	for (int i = 0; i < p->ndistinct; i++)
		appendStringInfo(sql, ", %s", quote_identifier(p->distincts[i]));
}

/*
 * EventAppendUnnest appends unnest() over the parameters EventArrays fills,
 * numbered from 1, and over "extra" more text[] parameters after them.
 */
void
EventAppendUnnest(StringInfo sql, Pipeline *p, int extra)
{
	int			arg = 4;

	appendStringInfoString(sql, "unnest($1::text[], $2::int8[], $3::numeric[]");
	for (int i = PIPELINE_FIRST_INPUT_DIM(p); i < p->ndims; i++)
		appendStringInfo(sql, ", $%d::text[]", arg++);
	appendStringInfo(sql, ", $%d::bool[], $%d::timestamptz[]", arg, arg + 1);
	arg += 2;
	for (int i = 0; i < p->nmeasures; i++)
		appendStringInfo(sql, ", $%d::numeric[]", arg++);
	for (int i = 0; i < p->ndistinct; i++)
		appendStringInfo(sql, ", $%d::text[]", arg++);
	for (int i = 0; i < extra; i++)
		appendStringInfo(sql, ", $%d::text[]", arg++);
	appendStringInfoChar(sql, ')');
}

/*
 * EventArrays fills values and types with one array parameter per event
 * column but a window's start (EV_NPARAMS(p) of them), in the order of
 * EventAppendColumns.
 */
void
EventArrays(Pipeline *p, Event **events, int n, Datum *values, Oid *types)
{
	Datum	   *col = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *flags = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *times = palloc(sizeof(Datum) * Max(n, 1));
	int64	   *versions = palloc(sizeof(int64) * Max(n, 1));
	Numeric    *nums = palloc(sizeof(Numeric) * Max(n, 1));

	for (int j = 0; j < n; j++)
	{
		col[j] = PointerGetDatum(events[j]->key);
		versions[j] = events[j]->version;
		nums[j] = events[j]->value;
		flags[j] = BoolGetDatum(events[j]->deleted);
		times[j] = TimestampTzGetDatum(events[j]->event_time);
	}
	values[0] = StatementTextArray(col, NULL, n);
	values[1] = StatementInt8Array(versions, n);
	values[2] = StatementNumericArray(nums, n);
	types[0] = TEXTARRAYOID;
	types[1] = INT8ARRAYOID;
	types[2] = NUMERICARRAYOID;
	for (int i = 0; i < p->ndims; i++)
	{
		Datum	   *dimcol = palloc(sizeof(Datum) * Max(n, 1));

		for (int j = 0; j < n; j++)
			dimcol[j] = events[j]->dims[i];
		values[3 + i] = StatementTextArray(dimcol, NULL, n);
		types[3 + i] = TEXTARRAYOID;
	}
	values[3 + p->ndims] = PointerGetDatum(construct_array(flags, n, BOOLOID, 1, true, TYPALIGN_CHAR));
	types[3 + p->ndims] = BOOLARRAYOID;
	values[4 + p->ndims] = PointerGetDatum(construct_array(times, n, TIMESTAMPTZOID, 8,
														   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	types[4 + p->ndims] = TIMESTAMPTZARRAYOID;
	for (int i = 0; i < p->nmeasures; i++)
	{
		for (int j = 0; j < n; j++)
			nums[j] = events[j]->measures[i];
		values[5 + p->ndims + i] = StatementNumericArray(nums, n);
		types[5 + p->ndims + i] = NUMERICARRAYOID;
	}
	for (int i = 0; i < p->ndistinct; i++)
	{
		Datum	   *texts = palloc(sizeof(Datum) * Max(n, 1));
		bool	   *nulls = palloc(sizeof(bool) * Max(n, 1));

		for (int j = 0; j < n; j++)
		{
			texts[j] = events[j]->distincts[i];
			nulls[j] = texts[j] == (Datum) 0;
		}
		values[5 + p->ndims + p->nmeasures + i] = StatementTextArray(texts, nulls, n);
		types[5 + p->ndims + p->nmeasures + i] = TEXTARRAYOID;
	}
	if (p->windowed)
	{
		memmove(&values[3], &values[4], sizeof(Datum) * (EV_NATTS(p) - 4));
		memmove(&types[3], &types[4], sizeof(Oid) * (EV_NATTS(p) - 4));
	}
}

/*
 * BuildDeadLetter: insert a batch of dead letters from parallel arrays.
 */
static const char *
BuildDeadLetter(Pipeline *p)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s.dead_letters (", quote_identifier(p->name));
	EventAppendColumns(&sql, p);
	appendStringInfoString(&sql, ", reason) SELECT * FROM ");
	EventAppendUnnest(&sql, p, 1);
	return sql.data;
}

/*
 * EventDeadLetters stores events that could not be applied, with reasons.
 */
void
EventDeadLetters(Pipeline *p, DeadLetter *dl, int n)
{
	Datum		values[EV_MAX_NATTS + 1];
	Oid			types[EV_MAX_NATTS + 1];
	Event	  **events;
	Datum	   *reasons;

	if (n == 0)
		return;
	events = palloc(sizeof(Event *) * n);
	reasons = palloc(sizeof(Datum) * n);
	for (int j = 0; j < n; j++)
	{
		events[j] = dl[j].event;
		reasons[j] = CStringGetTextDatum(dl[j].reason);
	}
	EventArrays(p, events, n, values, types);
	values[EV_NPARAMS(p)] = StatementTextArray(reasons, NULL, n);
	types[EV_NPARAMS(p)] = TEXTARRAYOID;
	StatementExec(StatementPrepare(p, BuildDeadLetter, EV_NPARAMS(p) + 1, types),
				  values, NULL, n);
}

/*
 * EventCheckComputed refuses events that do not reach the queue's INSERT
 * whole, for a pipeline whose queue computes columns (a declared query's
 * keys, FILTERs and aggregated expressions) or its WHERE: only that INSERT
 * computes them, EV_WHERE_COLUMN from every column of the row.  Events from a caller's
 * array applied straight to state (into_queue false) never get it; events
 * inserted by ingest() (into_queue) carry only the event's columns, so a
 * column the WHERE may read beyond those would be NULL and the event
 * silently out.  Either is refused rather than counted wrong.
 */
void
EventCheckComputed(Pipeline *p, bool into_queue, const char *what)
{
	Relation	rel = table_open(p->ingest, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber	attnums[EV_ATTNUMS];
	const char *missing = NULL;

	EventAttnums(p, desc, attnums);
	for (int i = 0; i < EV_NATTS(p); i++)
		if (attnums[i] != 0 && TupleDescAttr(desc, attnums[i] - 1)->attgenerated)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("%s takes no events for pipeline \"%s\", whose queue computes column \"%s\"",
							what, p->name, NameStr(TupleDescAttr(desc, attnums[i] - 1)->attname)),
					 errdetail("Only an INSERT into its queue computes the columns its query declares."),
					 errhint("INSERT or COPY the events into %s.ingest.", quote_identifier(p->name))));
	for (int a = 0; attnums[EV_WHERE(p)] != 0 && a < desc->natts && missing == NULL; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		bool		event_column = false;

		for (int i = 0; i < EV_NATTS(p); i++)
			event_column |= attnums[i] == att->attnum;
		if (!att->attisdropped && !att->attgenerated && !event_column &&
			strcmp(NameStr(att->attname), "ingest_slot") != 0 &&
			strcmp(NameStr(att->attname), "ingest_id") != 0)
			missing = pstrdup(NameStr(att->attname));
	}
	if (attnums[EV_WHERE(p)] != 0 && (!into_queue || missing != NULL))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s takes no events for pipeline \"%s\", which is declared with a WHERE", what, p->name),
				 into_queue ?
				 errdetail("Its queue has column \"%s\", which the WHERE may read and %s does not send.", missing, what) :
				 errdetail("Only an INSERT into its queue computes the WHERE of an event."),
				 errhint("INSERT or COPY the events into %s.ingest.", quote_identifier(p->name))));
	table_close(rel, AccessShareLock);
}
