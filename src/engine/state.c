/*-------------------------------------------------------------------------
 *
 * state.c
 *		Stage 1: apply a batch of events to state and yield per-cell deltas.
 *
 * The batch is sorted by (key, version, arrival) so that each key's events
 * form one run, handled against the key's state row in memory: one index
 * probe per key reads it, and the new row is written straight to the heap
 * through the table AM, as an update of the probed tuple (HOT when the page
 * has room, so the primary key is not touched) or an insert.  The caller
 * holds the lock of the shard row of every key in the batch (QueueKeyShard in
 * queue.c), so no other writer can move a row between probe and update;
 * privileges are checked once per batch, since the executor, which would
 * check them, is not involved.  Nothing is written for events that change
 * nothing, so applying the same events again yields no delta.  Triggers on
 * state do not fire: state belongs to the pipeline.
 *
 * latest mode: a key's highest version is its contribution.  Per key the
 * batch collapses to one net change: the cell of the version the key had
 * before the batch loses it, the cell of the version it has after gains it.
 * Tombstones stay in state as deleted rows, so that older versions arriving
 * later are still recognised as stale.
 *
 * accumulate mode: every distinct (key, version) adds its value once, in
 * whatever order it arrives.  Table seen remembers each applied pair with a
 * 64-bit digest of its content, which tells repeats (duplicates) from the
 * same pair with other content (dead letters).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/typcache.h"

#include "catalog/pipeline.h"
#include "catalog/shape.h"
#include "catalog/statement.h"
#include "engine/event.h"
#include "engine/progress.h"
#include "engine/queue.h"
#include "engine/state.h"
#include "utils/fault.h"
#include "utils/keyprobe.h"
#include "utils/decimal.h"
#include "utils/rowbatch.h"

/* how many events ahead the key loop asks the cache for their keys */
#define STATE_PREFETCH 8

/* A key's current state, read from its state row or set by this batch. */
typedef struct KeyState
{
	bool		exists;			/* the key has a version */
	bool		stored;			/* ... and a state row, at tid */
	ItemPointerData tid;
	int64		version;
	/* latest mode */
	Numeric		value;
	bool		deleted;
	Datum	   *dims;			/* text; shared with the event it comes from */
	Numeric    *measures;		/* ... as are these */
	Datum	   *distincts;
	/* accumulate mode */
	Numeric		total;
	int64		events;
	TimestampTz first_time;
	TimestampTz last_time;
} KeyState;

/* What one batch produces, gathered before anything is written. */
typedef struct StateWork
{
	Pipeline   *p;
	StageCounts *counts;
	TimestampTz watermark;		/* windows: a reading whose window ends at or
								 * before this is too late, or DT_NOBEGIN */
	Delta	   *deltas;
	int			ndeltas;
	DeadLetter *dead;
	int			ndead;
	text	  **rowkeys;		/* state rows to write: key and new state */
	KeyState   *rowstates;
	int			nrows;
	/* accumulate mode: seen rows to insert */
	text	  **seen_keys;
	int64	   *seen_versions;
	int64	   *seen_digests;
	int			nseen;
	/* index probes */
	Relation	rel;
	Relation	index;
	Relation	cell_index;		/* with min_max: state_cell */
	IndexInfo  *cell_index_info;
	KeyProbe   *probe;			/* keys in order (keyprobe.c), or NULL */
	IndexScanDesc scan;			/* keys one by one */
	TupleTableSlot *slot;
	Relation	seen_rel;
	Relation	seen_index;
	IndexScanDesc seen_scan;
	TupleTableSlot *seen_slot;
	AttrNumber	attnums[EV_ATTNUMS];	/* latest: event columns */
	AttrNumber	col_version;
	AttrNumber	col_updated;
	AttrNumber	col_total;		/* accumulate mode */
	AttrNumber	col_events;
	AttrNumber	col_first;
	AttrNumber	col_last;
	IndexInfo  *index_info;
	IndexInfo  *seen_index_info;
} StateWork;

/*
 * TextEq tells whether two text datums hold the same bytes.
 */
static bool
TextEq(Datum a, Datum b)
{
	return TextCmp((text *) DatumGetPointer(a), (text *) DatumGetPointer(b)) == 0;
}

/*
 * StateEventCmp orders events by key, version and arrival.
 */
static int
StateEventCmp(const void *a, const void *b)
{
	const Event *ea = *(Event *const *) a;
	const Event *eb = *(Event *const *) b;
	int			c = TextCmp(ea->key, eb->key);

	if (c != 0)
		return c;
	if (ea->version != eb->version)
		return ea->version < eb->version ? -1 : 1;
	return (ea->ord > eb->ord) - (ea->ord < eb->ord);
}

/* An event to sort, with eight bytes of its key in front (SortEvents). */
typedef struct SortItem
{
	uint64		abbrev;
	Event	   *ev;
} SortItem;

/*
 * SortItemCmp orders sort items as StateEventCmp orders their events.
 */
static inline int
SortItemCmp(const SortItem *x, const SortItem *y)
{
	if (x->abbrev != y->abbrev)
		return x->abbrev < y->abbrev ? -1 : 1;
	return StateEventCmp(&x->ev, &y->ev);
}

/* sort_items(): a sort of SortItems with SortItemCmp inlined */
#define ST_SORT sort_items
#define ST_ELEMENT_TYPE SortItem
#define ST_COMPARE(a, b) SortItemCmp(a, b)
#define ST_SCOPE static
#define ST_DEFINE
#include "lib/sort_template.h"

/*
 * SortEvents sorts n events by key, version and arrival.  Keys that a batch
 * holds mostly differ in the first eight bytes after the prefix they all
 * share ("TRD-", say): those bytes, as one integer, order two keys that
 * differ there, so the sort seldom has to follow a pointer to a key.  A key
 * that ends within them is padded with zero bytes, which sort first, as its
 * end does.
 */
static void
SortEvents(Event **events, int n)
{
	SortItem   *items;
	int			common;

	if (n < 2)
		return;
	common = VARSIZE_ANY_EXHDR(events[0]->key);
	for (int i = 1; i < n && common > 0; i++)
	{
		const char *a = VARDATA_ANY(events[0]->key);
		const char *b = VARDATA_ANY(events[i]->key);
		int			len = Min(common, (int) VARSIZE_ANY_EXHDR(events[i]->key));
		int			k = 0;

		while (k < len && a[k] == b[k])
			k++;
		common = k;
	}
	items = palloc(sizeof(SortItem) * n);
	for (int i = 0; i < n; i++)
	{
		const unsigned char *d = (const unsigned char *) VARDATA_ANY(events[i]->key);
		int			len = VARSIZE_ANY_EXHDR(events[i]->key);
		uint64		v = 0;

		for (int k = common; k < common + 8; k++)
			v = (v << 8) | (k < len ? d[k] : 0);
		items[i].abbrev = v;
		items[i].ev = events[i];
	}
	sort_items(items, n);
	for (int i = 0; i < n; i++)
		events[i] = items[i].ev;
	pfree(items);
}

/*
 * NumericEq compares two numerics by value (1.0 equals 1.00).
 */
static bool
NumericEq(Numeric a, Numeric b)
{
	return DatumGetBool(DirectFunctionCall2(numeric_eq, NumericGetDatum(a),
											NumericGetDatum(b)));
}

/*
 * NumericNeg returns -a.
 */
static Numeric
NumericNeg(Numeric a)
{
	return DatumGetNumeric(DirectFunctionCall1(numeric_uminus, NumericGetDatum(a)));
}

/*
 * AppendDecimalText appends a number's canonical text and a NUL.
 */
static void
AppendDecimalText(StringInfo buf, Numeric n)
{
	char		room[DECIMAL_ROOM];
	size_t		len;
	const char *s = DecimalText(n, room, &len);

	appendBinaryStringInfo(buf, s, len);
	appendStringInfoChar(buf, '\0');
}

/*
 * ContentDigest hashes what makes an event's content: value and measures
 * (normalised, so 1.0 and 1.00 agree), dimensions and the tombstone flag.
 * event_time is arrival metadata, not content.
 */
static int64
ContentDigest(Pipeline *p, Event *ev)
{
	StringInfoData buf;
	uint64		h;

	initStringInfo(&buf);
	AppendDecimalText(&buf, ev->value);
	for (int i = 0; i < p->ndims; i++)
	{
		text	   *t = (text *) DatumGetPointer(ev->dims[i]);
		uint32		len = VARSIZE_ANY_EXHDR(t);

		appendBinaryStringInfo(&buf, (char *) &len, sizeof(len));
		appendBinaryStringInfo(&buf, VARDATA_ANY(t), len);
	}
	appendStringInfoChar(&buf, ev->deleted ? 't' : 'f');
	for (int i = 0; i < p->nmeasures; i++)
	{
		/* NULL hashes as a lone 'n', a number as '=' and its digits */
		if (ev->measures[i] == NULL)
			appendStringInfoChar(&buf, 'n');
		else
		{
			appendStringInfoChar(&buf, '=');
			AppendDecimalText(&buf, ev->measures[i]);
		}
	}
	for (int i = 0; i < p->ndistinct; i++)
	{
		/* NULL as a lone 'n', a text as '=', its length and its bytes */
		if (ev->distincts[i] == (Datum) 0)
			appendStringInfoChar(&buf, 'n');
		else
		{
			text	   *t = (text *) DatumGetPointer(ev->distincts[i]);
			uint32		len = VARSIZE_ANY_EXHDR(t);

			appendStringInfoChar(&buf, '=');
			appendBinaryStringInfo(&buf, (char *) &len, sizeof(len));
			appendBinaryStringInfo(&buf, VARDATA_ANY(t), len);
		}
	}
	h = hash_bytes_extended((unsigned char *) buf.data, buf.len, 0x6578616374);
	pfree(buf.data);
	return (int64) h;
}

/*
 * AddDead records an event for dead_letters.
 */
static void
AddDead(StateWork *w, Event *ev, char *reason)
{
	w->dead[w->ndead].event = ev;
	w->dead[w->ndead].reason = reason;
	w->ndead++;
	w->counts->dead_lettered++;
}

/*
 * AddDelta records the effect of a transition of key to version on a cell.
 */
static void
AddDelta(StateWork *w, text *key, int64 version, Datum *cell, Numeric total, int64 keys,
		 Numeric *measures, Datum *distincts)
{
	Delta	   *d = &w->deltas[w->ndeltas++];

	d->distincts = distincts;
	d->key = key;
	d->version = version;
	d->total = total;
	d->keys = keys;
	d->cell = cell;
	d->measures = measures;
}

/*
 * NegMeasures returns the measures negated, NULLs kept.
 */
static Numeric *
NegMeasures(Pipeline *p, Numeric *measures)
{
	Numeric    *neg;

	if (p->nmeasures == 0)
		return NULL;
	neg = palloc(sizeof(Numeric) * p->nmeasures);
	for (int i = 0; i < p->nmeasures; i++)
		neg[i] = measures[i] ? NumericNeg(measures[i]) : NULL;
	return neg;
}

/*
 * StateProbe runs an equality index scan and returns the first visible tuple's
 * slot, or NULL.
 */
static TupleTableSlot *
StateProbe(IndexScanDesc scan, TupleTableSlot *slot, Relation index, int nkeys,
		   Datum key, int64 version)
{
	ScanKeyData skeys[2];

	ScanKeyEntryInitialize(&skeys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_TEXTEQ, PointerGetDatum(key));
	if (nkeys == 2)
		ScanKeyEntryInitialize(&skeys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
							   InvalidOid, F_INT8EQ, Int64GetDatum(version));
	index_rescan(scan, skeys, nkeys, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
		return slot;
	return NULL;
}

/*
 * ColumnOf returns the attribute number of a column by name.
 */
static AttrNumber
ColumnOf(TupleDesc desc, const char *name)
{
	for (int a = 0; a < desc->natts; a++)
		if (strcmp(NameStr(TupleDescAttr(desc, a)->attname), name) == 0)
			return a + 1;
	elog(ERROR, "column \"%s\" is missing", name);
}

/*
 * NotANumber tells whether n is NaN or an infinity, which no event brings
 * (StateEventFault) and no sum of events makes.
 */
static inline bool
NotANumber(Numeric n)
{
	return n != NULL && (numeric_is_nan(n) || numeric_is_inf(n));
}

/*
 * CheckKeyState refuses a key's state row that holds a number no event
 * made: the owner's table, changed by hand.  Its deltas would reach the
 * aggregates as NaN, which reduce refuses in a batch that map did stage.
 */
static void
CheckKeyState(Pipeline *p, text *key, KeyState *ks)
{
	bool		bad = p->mode == PIPELINE_LATEST ? NotANumber(ks->value) : NotANumber(ks->total);

	for (int i = 0; !bad && p->mode == PIPELINE_LATEST && i < p->nmeasures; i++)
		bad = NotANumber(ks->measures[i]);
	if (bad)
		StatementRowRefused(p->name, "state",
							psprintf("The state of key \"%s\" holds NaN or an infinity.",
									 text_to_cstring(key)));
}

/*
 * ReadKeyState reads a key's state row, if it has one.
 */
static void
ReadKeyState(StateWork *w, text *key, KeyState *ks)
{
	Pipeline   *p = w->p;
	TupleTableSlot *slot = NULL;
	Datum		keyval = PointerGetDatum(key);
	bool		isnull;

	switch (w->probe ? KeyProbeFetch(w->probe, &keyval, w->slot) : KEY_UNSURE)
	{
		case KEY_FOUND:
			slot = w->slot;
			break;
		case KEY_ABSENT:
			break;
		case KEY_UNSURE:
			slot = StateProbe(w->scan, w->slot, w->index, 1, PointerGetDatum(key), 0);
			break;
	}

	memset(ks, 0, sizeof(KeyState));
	if (slot == NULL)
		return;
	ks->exists = ks->stored = true;
	ks->tid = slot->tts_tid;
	ks->version = DatumGetInt64(slot_getattr(slot, w->col_version, &isnull));
	if (p->mode == PIPELINE_LATEST)
	{
		ks->value = DatumGetNumericCopy(slot_getattr(slot, w->attnums[EV_VALUE], &isnull));
		ks->deleted = DatumGetBool(slot_getattr(slot, w->attnums[EV_DELETED], &isnull));
		ks->dims = palloc(sizeof(Datum) * Max(p->ndims, 1));
		for (int i = 0; i < p->ndims; i++)
			ks->dims[i] = PointerGetDatum(DatumGetTextPCopy(slot_getattr(slot, w->attnums[EV_DIM0 + i], &isnull)));
		ks->measures = p->nmeasures > 0 ? palloc(sizeof(Numeric) * p->nmeasures) : NULL;
		for (int i = 0; i < p->nmeasures; i++)
		{
			Datum		d = slot_getattr(slot, w->attnums[EV_MEAS0(p) + i], &isnull);

			ks->measures[i] = isnull ? NULL : DatumGetNumericCopy(d);
		}
		ks->distincts = p->ndistinct > 0 ? palloc(sizeof(Datum) * p->ndistinct) : NULL;
		for (int i = 0; i < p->ndistinct; i++)
		{
			Datum		d = slot_getattr(slot, w->attnums[EV_DIST0(p) + i], &isnull);

			ks->distincts[i] = isnull ? (Datum) 0 : PointerGetDatum(DatumGetTextPCopy(d));
		}
	}
	else
	{
		ks->total = DatumGetNumericCopy(slot_getattr(slot, w->col_total, &isnull));
		ks->events = DatumGetInt64(slot_getattr(slot, w->col_events, &isnull));
		ks->first_time = DatumGetTimestampTz(slot_getattr(slot, w->col_first, &isnull));
		ks->last_time = DatumGetTimestampTz(slot_getattr(slot, w->col_last, &isnull));
	}
	CheckKeyState(p, key, ks);
}

/*
 * SameContent tells whether an event carries the content of the key's state.
 */
static bool
SameContent(Pipeline *p, Event *ev, KeyState *ks)
{
	if (ev->deleted != ks->deleted || !NumericEq(ev->value, ks->value))
		return false;
	for (int i = 0; i < p->ndims; i++)
		if (!TextEq(ev->dims[i], ks->dims[i]))
			return false;
	for (int i = 0; i < p->nmeasures; i++)
	{
		Numeric		a = ev->measures[i];
		Numeric		b = ks->measures[i];

		if ((a == NULL) != (b == NULL) || (a != NULL && !NumericEq(a, b)))
			return false;
	}
	for (int i = 0; i < p->ndistinct; i++)
	{
		Datum		a = ev->distincts[i];
		Datum		b = ks->distincts[i];

		if ((a == (Datum) 0) != (b == (Datum) 0) || (a != (Datum) 0 && !TextEq(a, b)))
			return false;
	}
	return true;
}

/*
 * StateCellCmp orders two cells as the token does: value by value, as TextCmp.
 */
static int
StateCellCmp(Pipeline *p, Datum *a, Datum *b)
{
	for (int i = 0; i < p->ndims; i++)
	{
		int			c = TextCmp((text *) DatumGetPointer(a[i]), (text *) DatumGetPointer(b[i]));

		if (c != 0)
			return c;
	}
	return 0;
}

/*
 * BelowHorizon dead-letters an event the pipeline cannot tell from one it
 * forgot (retention.c, prune()): a version below the retention horizon of a key with
 * no state row (latest mode), or of a (key, version) not in seen
 * (accumulate mode).  It may be a resend of a tombstoned key or of an
 * applied reading; applying it could count it twice.
 */
static bool
BelowHorizon(StateWork *w, Event *ev)
{
	if (!w->p->has_horizon || ev->version >= w->p->horizon)
		return false;
	AddDead(w, ev, psprintf("below the retention horizon: version " INT64_FORMAT " is below " INT64_FORMAT ", under which this pipeline forgot %s, so it cannot tell a new event from a resend",
							ev->version, w->p->horizon,
							w->p->mode == PIPELINE_LATEST ? "tombstones" : "the readings it applied"));
	return true;
}

/*
 * ApplyLatest handles one key's run of events in latest mode.
 */
static void
ApplyLatest(StateWork *w, Event **run, int n)
{
	Pipeline   *p = w->p;
	KeyState	before,
				cur;
	bool		changed = false;
	bool		leaves,
				enters;

	ReadKeyState(w, run[0]->key, &before);
	cur = before;
	for (int i = 0; i < n; i++)
	{
		Event	   *ev = run[i];

		CHECK_FOR_INTERRUPTS();
		if (!cur.exists && BelowHorizon(w, ev))
			continue;
		if (cur.exists && ev->version < cur.version)
			w->counts->stale++;
		else if (cur.exists && ev->version == cur.version)
		{
			if (SameContent(p, ev, &cur))
				w->counts->duplicates++;
			else
				AddDead(w, ev, psprintf("conflicting duplicate: version " INT64_FORMAT " of this key was already applied with other content",
										ev->version));
		}
		else
		{
			w->counts->applied++;
			cur.exists = true;
			cur.version = ev->version;
			cur.value = ev->value;
			cur.deleted = ev->deleted;
			cur.dims = ev->dims;
			cur.measures = ev->measures;
			cur.distincts = ev->distincts;
			changed = true;
		}
	}
	if (!changed)
		return;

	w->rowkeys[w->nrows] = run[0]->key;
	w->rowstates[w->nrows++] = cur;
	leaves = before.exists && !before.deleted;
	enters = !cur.deleted;

	/*
	 * The key's deltas in the order of the batch's token (map.c): by cell,
	 * the leaving one first within a cell.  Keys come sorted, so the deltas
	 * of the batch are then sorted already, which the token's sort checks in
	 * one pass.
	 */
	if (leaves && enters && StateCellCmp(p, before.dims, cur.dims) > 0)
	{
		AddDelta(w, run[0]->key, cur.version, cur.dims, cur.value, 1, cur.measures,
				 cur.distincts);
		enters = false;
	}
	if (leaves)
		AddDelta(w, run[0]->key, cur.version, before.dims, NumericNeg(before.value), -1,
				 NegMeasures(p, before.measures), before.distincts);
	if (enters)
		AddDelta(w, run[0]->key, cur.version, cur.dims, cur.value, 1, cur.measures,
				 cur.distincts);
}

/*
 * WindowEnd returns the end of an event's window.
 */
static TimestampTz
WindowEnd(Pipeline *p, Event *ev)
{
	return PipelineWindowStartTime(p, ev->event_time) + p->window_us;
}

/*
 * TooLate tells whether an event's window is final: it ends, with the
 * allowed lateness, at or before the watermark.
 */
static bool
TooLate(StateWork *w, Event *ev)
{
	return w->p->windowed && w->watermark != DT_NOBEGIN &&
		WindowEnd(w->p, ev) + w->p->lateness_us <= w->watermark;
}

/*
 * BuildReadWatermark: the watermark of a pipeline with windows.
 */
static const char *
BuildReadWatermark(Pipeline *p)
{
	return psprintf("SELECT watermark FROM %s.progress", quote_identifier(p->name));
}

/*
 * ReadWatermark reads the watermark of a pipeline with windows: as the
 * batch starts, so that readings of one batch do not make each other late.
 */
static TimestampTz
ReadWatermark(Pipeline *p)
{
	bool		isnull;
	Datum		d;

	StatementExec(StatementPrepare(p, BuildReadWatermark, 0, NULL), NULL, NULL, 1);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	SPI_freetuptable(SPI_tuptable);
	return isnull ? DT_NOBEGIN : DatumGetTimestampTz(d);
}

/*
 * ApplyAccumulate handles one key's run of events in accumulate mode.
 */
static void
ApplyAccumulate(StateWork *w, Event **run, int n)
{
	Pipeline   *p = w->p;
	KeyState	ks;
	bool		changed = false;
	bool		known = false;	/* is (key, known_version) applied? */
	int64		known_version = 0;
	int64		known_digest = 0;

	ReadKeyState(w, run[0]->key, &ks);
	for (int i = 0; i < n; i++)
	{
		Event	   *ev = run[i];
		int64		digest = ContentDigest(p, ev);

		CHECK_FOR_INTERRUPTS();
		if (!known || known_version != ev->version)
		{
			TupleTableSlot *slot = NULL;

			if (ks.exists)
				slot = StateProbe(w->seen_scan, w->seen_slot, w->seen_index, 2,
								  PointerGetDatum(ev->key), ev->version);
			known = slot != NULL;
			known_version = ev->version;
			if (known)
			{
				bool		isnull;

				known_digest = DatumGetInt64(slot_getattr(slot, 3, &isnull));
			}
		}
		if (known)
		{
			if (digest == known_digest)
				w->counts->duplicates++;
			else
				AddDead(w, ev, psprintf("conflicting duplicate: version " INT64_FORMAT " of this key was already applied with other content",
										ev->version));
			continue;
		}

		/* a new reading: add it, whatever its order, unless it is too late */
		if (BelowHorizon(w, ev))
			continue;
		if (TooLate(w, ev))
		{
			/* timestamptz_to_str returns a static buffer */
			char	   *end = pstrdup(timestamptz_to_str(WindowEnd(p, ev)));

			AddDead(w, ev, psprintf("too late: its window ended at %s, and with the allowed lateness it was closed by the watermark, %s (the start of the latest window with a reading)",
									end, timestamptz_to_str(w->watermark)));
			continue;
		}
		w->counts->applied++;
		known = true;
		known_digest = digest;
		if (!ks.exists)
		{
			ks.exists = true;
			ks.total = ev->value;
			ks.events = 1;
			ks.version = ev->version;
			ks.first_time = ks.last_time = ev->event_time;
		}
		else
		{
			ks.total = NumericAdd(ks.total, ev->value);
			ks.events++;
			ks.version = Max(ks.version, ev->version);
			ks.first_time = Min(ks.first_time, ev->event_time);
			ks.last_time = Max(ks.last_time, ev->event_time);
		}
		w->seen_keys[w->nseen] = ev->key;
		w->seen_versions[w->nseen] = ev->version;
		w->seen_digests[w->nseen++] = digest;
		AddDelta(w, ev->key, ev->version, ev->dims, ev->value, 1, ev->measures,
				 ev->distincts);
		changed = true;
	}
	if (changed)
	{
		w->rowkeys[w->nrows] = run[0]->key;
		w->rowstates[w->nrows++] = ks;
	}
}

/*
 * IndexNewRow makes the index entries of a key's new state row (a
 * RowBatchIndexFn): the primary key's, and state_cell's with min_max.
 */
static void
IndexNewRow(TupleTableSlot *slot, int row, void *arg)
{
	StateWork  *w = (StateWork *) arg;
	Datum		keyval = PointerGetDatum(w->rowkeys[row]);
	bool		nulls[EXACTONCE_MAX_DIMENSIONS] = {false};

	index_insert(w->index, &keyval, nulls, &slot->tts_tid, w->rel,
				 UNIQUE_CHECK_YES, false, w->index_info);
	if (w->cell_index)
		index_insert(w->cell_index, w->rowstates[row].dims, nulls, &slot->tts_tid, w->rel,
					 UNIQUE_CHECK_NO, false, w->cell_index_info);
}

/*
 * UpdateRow writes a key's new state row as an update of the probed tuple,
 * with the index entries that an update which is not HOT needs.
 */
static void
UpdateRow(StateWork *w, TupleTableSlot *slot, text *key, KeyState *ks)
{
	Datum		keyval = PointerGetDatum(key);
	bool		nulls[EXACTONCE_MAX_DIMENSIONS] = {false};
	bool		update_indexes = true;

	simple_table_tuple_update(w->rel, &ks->tid, slot, GetActiveSnapshot(), &update_indexes);
	if (!update_indexes)
		return;
	index_insert(w->index, &keyval, nulls, &slot->tts_tid, w->rel,
				 UNIQUE_CHECK_NO, true, w->index_info);
	if (w->cell_index)
		index_insert(w->cell_index, ks->dims, nulls, &slot->tts_tid, w->rel,
					 UNIQUE_CHECK_NO, false, w->cell_index_info);
}

/*
 * SetColumn sets one column of a virtual tuple being built.
 */
static inline void
SetColumn(TupleTableSlot *slot, AttrNumber attnum, Datum value)
{
	slot->tts_values[attnum - 1] = value;
	slot->tts_isnull[attnum - 1] = false;
}

/*
 * FillRow sets the columns of a key's new state row in an empty slot whose
 * columns are all NULL.
 */
static void
FillRow(StateWork *w, TupleTableSlot *slot, text *key, KeyState *ks, TimestampTz now)
{
	Pipeline   *p = w->p;

	SetColumn(slot, w->attnums[EV_KEY], PointerGetDatum(key));
	SetColumn(slot, w->col_version, Int64GetDatum(ks->version));
	SetColumn(slot, w->col_updated, TimestampTzGetDatum(now));
	if (p->mode == PIPELINE_LATEST)
	{
		SetColumn(slot, w->attnums[EV_VALUE], NumericGetDatum(ks->value));
		SetColumn(slot, w->attnums[EV_DELETED], BoolGetDatum(ks->deleted));
		for (int i = 0; i < p->ndims; i++)
			SetColumn(slot, w->attnums[EV_DIM0 + i], ks->dims[i]);
		for (int i = 0; i < p->nmeasures; i++)
			if (ks->measures[i] != NULL)
				SetColumn(slot, w->attnums[EV_MEAS0(p) + i], NumericGetDatum(ks->measures[i]));
		for (int i = 0; i < p->ndistinct; i++)
			if (ks->distincts[i] != (Datum) 0)
				SetColumn(slot, w->attnums[EV_DIST0(p) + i], ks->distincts[i]);
	}
	else
	{
		SetColumn(slot, w->col_total, NumericGetDatum(ks->total));
		SetColumn(slot, w->col_events, Int64GetDatum(ks->events));
		SetColumn(slot, w->col_first, TimestampTzGetDatum(ks->first_time));
		SetColumn(slot, w->col_last, TimestampTzGetDatum(ks->last_time));
	}
}

/*
 * WriteState writes the batch's new state rows: updates of the rows probed
 * one by one, the keys new to state a page at a time.
 */
static void
WriteState(StateWork *w)
{
	TupleTableSlot *slot = table_slot_create(w->rel, NULL);
	RowBatch   *inserts = RowBatchBegin(w->rel, IndexNewRow, w);
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	for (int j = 0; j < w->nrows; j++)
	{
		KeyState   *ks = &w->rowstates[j];

		CHECK_FOR_INTERRUPTS();
#ifdef __GNUC__
		/* each key's values lie apart: ask for those of the keys ahead */
		if (j + 2 * STATE_PREFETCH < w->nrows)
			__builtin_prefetch(w->rowstates[j + 2 * STATE_PREFETCH].dims);
		if (j + STATE_PREFETCH < w->nrows)
		{
			KeyState   *ahead = &w->rowstates[j + STATE_PREFETCH];

			__builtin_prefetch(w->rowkeys[j + STATE_PREFETCH]);
			__builtin_prefetch(ahead->value);
			for (int i = 0; ahead->dims && i < w->p->ndims; i++)
				__builtin_prefetch(DatumGetPointer(ahead->dims[i]));
		}
#endif
		if (ks->stored)
		{
			ExecClearTuple(slot);
			memset(slot->tts_isnull, true, sizeof(bool) * slot->tts_tupleDescriptor->natts);
			FillRow(w, slot, w->rowkeys[j], ks, now);
			ExecStoreVirtualTuple(slot);
			UpdateRow(w, slot, w->rowkeys[j], ks);
		}
		else
		{
			FillRow(w, RowBatchSlot(inserts), w->rowkeys[j], ks, now);
			RowBatchAdd(inserts, j);
		}
	}
	RowBatchEnd(inserts);
	ExecDropSingleTupleTableSlot(slot);
}

/*
 * IndexSeenRow makes the primary key entry of a new seen row (a
 * RowBatchIndexFn).
 */
static void
IndexSeenRow(TupleTableSlot *slot, int row, void *arg)
{
	StateWork  *w = (StateWork *) arg;
	Datum		keyvals[2];
	bool		keynulls[2] = {false, false};

	keyvals[0] = PointerGetDatum(w->seen_keys[row]);
	keyvals[1] = Int64GetDatum(w->seen_versions[row]);
	index_insert(w->seen_index, keyvals, keynulls, &slot->tts_tid, w->seen_rel,
				 UNIQUE_CHECK_YES, false, w->seen_index_info);
}

/*
 * WriteSeen inserts the batch's new seen rows, a page at a time.
 */
static void
WriteSeen(StateWork *w)
{
	RowBatch   *inserts = RowBatchBegin(w->seen_rel, IndexSeenRow, w);

	for (int j = 0; j < w->nseen; j++)
	{
		TupleTableSlot *slot = RowBatchSlot(inserts);

		CHECK_FOR_INTERRUPTS();
		slot->tts_values[0] = PointerGetDatum(w->seen_keys[j]);
		slot->tts_values[1] = Int64GetDatum(w->seen_versions[j]);
		slot->tts_values[2] = Int64GetDatum(w->seen_digests[j]);
		memset(slot->tts_isnull, false, sizeof(bool) * 3);
		RowBatchAdd(inserts, j);
	}
	RowBatchEnd(inserts);
}

/*
 * TooLarge tells whether a value is so large that sums of it could overflow
 * numeric (about 1e131072): a sum that fails in reduce would block the
 * pipeline for good, so such values are refused here, one by one.  The
 * stored weight rules out nearly every value before any comparison.
 */
static bool
TooLarge(Numeric value)
{
	static Numeric limit = NULL;
	static Numeric neglimit = NULL;

	if (limit == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		limit = DatumGetNumeric(DirectFunctionCall3(numeric_in,
													CStringGetDatum("1e" CppAsString2(EXACTONCE_MAX_MAGNITUDE)),
													ObjectIdGetDatum(InvalidOid),
													Int32GetDatum(-1)));
		neglimit = NumericNeg(limit);
		MemoryContextSwitchTo(old);
	}
	if (DecimalSurelyBelow(value, EXACTONCE_MAX_MAGNITUDE))
		return false;
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(value),
											 NumericGetDatum(limit))) >= 0 ||
		DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(value),
										  NumericGetDatum(neglimit))) <= 0;
}

/*
 * StateCellBytes is the size of an event's dimension values together: the key of
 * its cell in the aggregates index.
 */
static int
StateCellBytes(Pipeline *p, Event *ev)
{
	int			bytes = 0;

	for (int i = 0; i < p->ndims; i++)
		bytes += VARSIZE_ANY_EXHDR(DatumGetPointer(ev->dims[i]));
	return bytes;
}

/*
 * StateNumberFault returns why a number cannot be summed ("NaN", ...), or
 * NULL.
 */
const char *
StateNumberFault(Numeric n)
{
	if (numeric_is_nan(n))
		return "NaN";
	if (numeric_is_inf(n))
		return "infinite";
	if (TooLarge(n))
		return "1e" CppAsString2(EXACTONCE_MAX_MAGNITUDE) " or more in magnitude";
	return NULL;
}

/*
 * StateDistinctBytes is the size of an event's dimension values and its longest
 * distinct_counts value: the key of its values in table distincts.
 */
static int
StateDistinctBytes(Pipeline *p, Event *ev)
{
	int			longest = 0;

	for (int i = 0; i < p->ndistinct; i++)
		if (ev->distincts[i] != (Datum) 0)
			longest = Max(longest, (int) VARSIZE_ANY_EXHDR(DatumGetPointer(ev->distincts[i])));
	return longest == 0 ? 0 : StateCellBytes(p, ev) + longest;
}

/*
 * StateEventFault returns why no state can take an event, or NULL: the
 * reason its dead letter gives.  A key's state row that another node sends
 * (move.c) is checked the same way.
 */
char *
StateEventFault(Pipeline *p, Event *ev)
{
	const char *bad = StateNumberFault(ev->value);

	if (bad)
		return psprintf("value is %s", bad);
	if (VARSIZE_ANY_EXHDR(ev->key) > EXACTONCE_MAX_KEY_BYTES)
		return psprintf("key is longer than %d bytes", EXACTONCE_MAX_KEY_BYTES);
	if (StateCellBytes(p, ev) > EXACTONCE_MAX_KEY_BYTES)
		return psprintf("dimension values are longer than %d bytes together", EXACTONCE_MAX_KEY_BYTES);
	for (int i = 0; i < p->nmeasures; i++)
		if (ev->measures[i] != NULL && (bad = StateNumberFault(ev->measures[i])) != NULL)
			return psprintf("measure %s is %s", p->measures[i], bad);
	if (StateDistinctBytes(p, ev) > EXACTONCE_MAX_KEY_BYTES)
		return psprintf("dimension values and a distinct_counts value are longer than %d bytes together",
						EXACTONCE_MAX_KEY_BYTES);
	if (p->windowed && VARSIZE_ANY_EXHDR(DatumGetPointer(ev->dims[0])) == 0)
		return pstrdup("event_time is in no window: windows start in the years 1 to 9999");
	if (ev->deleted && p->mode == PIPELINE_ACCUMULATE)
		return pstrdup("tombstones (deleted = true) are not supported in accumulate mode");
	return NULL;
}

/*
 * Validate sends events that no state can take to dead letters; it returns
 * false for those.
 */
static bool
Validate(StateWork *w, Event *ev)
{
	char	   *bad = StateEventFault(w->p, ev);

	if (bad == NULL)
		return true;
	AddDead(w, ev, bad);
	return false;
}

/*
 * OpenCellIndex opens index state_cell, which the stage keeps, and insists
 * that it is what create_pipeline made: a B-tree on the dimensions, in
 * order, without expressions or predicate.
 */
static void
OpenCellIndex(StateWork *w)
{
	Pipeline   *p = w->p;
	Relation	index = index_open(p->state_cell, RowExclusiveLock);
	bool		ok = ShapeIndexIs(index, p->state, &w->attnums[EV_DIM0], p->ndims, false);

	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("index \"%s.state_cell\" is not the one exactonce made", p->name),
				 errdetail("The pipeline keeps it as a B-tree on the dimensions, in order."),
				 errhint("Drop it and create it again: CREATE INDEX state_cell ON %s.state (<the dimensions>).",
						 quote_identifier(p->name))));
	w->cell_index = index;
	w->cell_index_info = BuildIndexInfo(index);
}

/*
 * CheckKeyIndex insists that index, which the stage probes for a key's row
 * and whose uniqueness keeps a key (or a key's version, in seen) to one
 * row, is the primary key create_pipeline made: a unique B-tree on key
 * (and version), without expressions or predicate.  A partial one, or one
 * on another column under the same name, would find no row for a key that
 * has one, and the key would get a second row, counted twice.
 */
static void
CheckKeyIndex(Pipeline *p, Relation rel, Relation index, int ncolumns)
{
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber	attnums[2] = {ColumnOf(desc, "key"), ncolumns > 1 ? ColumnOf(desc, "version") : 0};

	if (!ShapeIndexIs(index, RelationGetRelid(rel), attnums, ncolumns, true))
		ereport(ERROR,
				(errcode(ERRCODE_EXACTONCE_ALTERED),
				 errmsg("index \"%s.%s\" is not the primary key exactonce made", p->name,
						RelationGetRelationName(index)),
				 errdetail("The pipeline finds a key's row in table %s through it, as a unique B-tree on %s.",
						   RelationGetRelationName(rel), ncolumns > 1 ? "(key, version)" : "key"),
				 errhint("Drop it and make it again: ALTER TABLE %s.%s ADD CONSTRAINT %s PRIMARY KEY (%s).",
						 quote_identifier(p->name), RelationGetRelationName(rel),
						 RelationGetRelationName(index), ncolumns > 1 ? "key, version" : "key")));
}

/*
 * OpenProbes opens the state (and seen) relations for index probes.
 */
static void
OpenProbes(StateWork *w, Snapshot snap)
{
	Pipeline   *p = w->p;

	TupleDesc	desc;

	w->rel = ShapeOpenDirect(p->state, ACL_SELECT | ACL_INSERT | ACL_UPDATE,
							 p->mode == PIPELINE_LATEST ? 5 + p->ndims + p->nmeasures + p->ndistinct : 7,
							 OidIsValid(p->state_cell) ? 2 : 1);
	w->index = index_open(p->state_pkey, RowExclusiveLock);
	CheckKeyIndex(p, w->rel, w->index, 1);
	w->index_info = BuildIndexInfo(w->index);
	w->probe = KeyProbeBegin(w->rel, w->index, snap);
	w->scan = index_beginscan(w->rel, w->index, snap, 1, 0);
	w->slot = table_slot_create(w->rel, NULL);
	desc = RelationGetDescr(w->rel);
	w->col_version = ColumnOf(desc, "version");
	w->col_updated = ColumnOf(desc, "updated_at");
	if (p->mode == PIPELINE_LATEST)
	{
		EventAttnums(p, desc, w->attnums);
		if (OidIsValid(p->state_cell))
			OpenCellIndex(w);
	}
	else
	{
		w->attnums[EV_KEY] = ColumnOf(desc, "key");
		w->col_total = ColumnOf(desc, "total");
		w->col_events = ColumnOf(desc, "events");
		w->col_first = ColumnOf(desc, "first_event_time");
		w->col_last = ColumnOf(desc, "last_event_time");
		w->seen_rel = ShapeOpenDirect(p->seen, ACL_SELECT | ACL_INSERT, 3, 1);
		w->seen_index = index_open(p->seen_pkey, RowExclusiveLock);
		CheckKeyIndex(p, w->seen_rel, w->seen_index, 2);
		w->seen_index_info = BuildIndexInfo(w->seen_index);
		w->seen_scan = index_beginscan(w->seen_rel, w->seen_index, snap, 2, 0);
		w->seen_slot = table_slot_create(w->seen_rel, NULL);
	}
}

/*
 * CloseProbes ends the index probes of OpenProbes.
 */
static void
CloseProbes(StateWork *w)
{
	if (w->seen_scan)
	{
		ExecDropSingleTupleTableSlot(w->seen_slot);
		index_endscan(w->seen_scan);
		index_close(w->seen_index, NoLock);
		table_close(w->seen_rel, NoLock);
	}
	if (w->cell_index)
		index_close(w->cell_index, NoLock);
	ExecDropSingleTupleTableSlot(w->slot);
	index_endscan(w->scan);
	index_close(w->index, NoLock);
	table_close(w->rel, NoLock);
}

/*
 * StateApply applies n events to the pipeline's state and returns the
 * deltas; counts receives what happened to each event.  The caller holds the
 * shard locks of the events' keys.
 */
Delta *
StateApply(Pipeline *p, Event *events, int n, int *ndeltas, StageCounts *counts)
{
	StateWork	w = {0};
	Event	  **sorted = palloc(sizeof(Event *) * Max(n, 1));
	int			nvalid = 0;
	Snapshot	snap;

	w.p = p;
	w.counts = counts;
	w.watermark = p->windowed ? ReadWatermark(p) : DT_NOBEGIN;
	w.deltas = palloc(sizeof(Delta) * Max(2 * n, 1));
	w.dead = palloc(sizeof(DeadLetter) * Max(n, 1));
	w.rowkeys = palloc(sizeof(text *) * Max(n, 1));
	w.rowstates = palloc(sizeof(KeyState) * Max(n, 1));
	if (p->mode == PIPELINE_ACCUMULATE)
	{
		w.seen_keys = palloc(sizeof(text *) * Max(n, 1));
		w.seen_versions = palloc(sizeof(int64) * Max(n, 1));
		w.seen_digests = palloc(sizeof(int64) * Max(n, 1));
	}
	counts->ingested += n;

	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		FaultPoison(events[i].key);
		if (Validate(&w, &events[i]))
			sorted[nvalid++] = &events[i];
		/* the caller holds the shard row of every key it writes */
		Assert(p->shards_locked & (UINT64CONST(1) << QueueKeyShard(p, events[i].key)));
	}
	SortEvents(sorted, nvalid);

	snap = RegisterSnapshot(GetLatestSnapshot());
	OpenProbes(&w, snap);
	for (int i = 0; i < nvalid;)
	{
		int			j = i + 1;

		CHECK_FOR_INTERRUPTS();
#ifdef __GNUC__

		/*
		 * Sorted, the events are read in an order unrelated to where they
		 * lie: ask the cache for the events a few keys ahead, and for their
		 * keys once the events are there, so that the two misses of each
		 * overlap the work on the keys before it.
		 */
		if (i + 2 * STATE_PREFETCH < nvalid)
			__builtin_prefetch(sorted[i + 2 * STATE_PREFETCH]);
		if (i + STATE_PREFETCH < nvalid)
			__builtin_prefetch(sorted[i + STATE_PREFETCH]->key);
#endif
		while (j < nvalid && TextCmp(sorted[j]->key, sorted[i]->key) == 0)
			j++;
		if (p->mode == PIPELINE_LATEST)
			ApplyLatest(&w, &sorted[i], j - i);
		else
			ApplyAccumulate(&w, &sorted[i], j - i);
		i = j;
	}
	/* the last leaf page it searched stays pinned until then */
	if (w.probe)
		KeyProbeEnd(w.probe);
	WriteState(&w);
	if (w.nseen > 0)
		WriteSeen(&w);
	CloseProbes(&w);
	UnregisterSnapshot(snap);
	CommandCounterIncrement();
	EventDeadLetters(p, w.dead, w.ndead);

	FaultMaybeFail(FAULT_STATE);
	*ndeltas = w.ndeltas;
	return w.deltas;
}
