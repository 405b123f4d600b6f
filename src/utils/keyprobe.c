/*-------------------------------------------------------------------------
 *
 * keyprobe.c
 *		Find the rows of a batch's keys, in key order, descending a unique
 *		B-tree once per leaf page rather than once per key.
 *
 * A batch's keys come sorted as the index sorts them (the state stage's
 * keys as bytes, as collation "C" does; distinct.c's members by cell,
 * column and value), and a large batch has many keys on each leaf page.
 * So the probe keeps the last leaf page pinned: a key that is neither
 * above the page's high key nor at its first entry is searched on that
 * page alone, any other found by a descent from the root as an index scan
 * would: a key out of order costs a descent, never a wrong answer.  The
 * page is locked only while it is searched; in between, a concurrent insert
 * may split it, which only moves entries right: a key above the new high
 * key descends again, as does one whose page was deleted meanwhile.  A
 * deleted page is not reused while this transaction's snapshot is
 * registered, as for any index scan that keeps a pin.  What the page says
 * is then checked against the heap, visibility and HOT chains included, by
 * the table AM.
 *
 * Where the page cannot tell -- the key's entries may go on past the page's
 * end -- the caller asks the index the usual way (KEY_UNSURE), as it does
 * for an index that is not a B-tree in ascending order.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "catalog/pg_am_d.h"
#include "utils/fmgroids.h"
#include "utils/pg_locale.h"
#include "utils/rel.h"

#include "exactonce.h"
#include "utils/keyprobe.h"

struct KeyProbe
{
	Relation	heap;
	Relation	index;
	Snapshot	snap;
	IndexFetchTableData *fetch;
	BTScanInsertData key;		/* the key sought, as the B-tree code takes it */
	Buffer		leaf;			/* the last leaf page searched: pinned, not
								 * locked; or InvalidBuffer */
	bool		descended;		/* leaf was found by a descent for this key */
	ItemPointerData *tids;		/* the heap TIDs of the key's entries */
	int			maxtids;
};

/* a varlena as an index holds it: neither compressed nor out of line */
#define PLAIN_VARLENA(v) (!VARATT_IS_EXTENDED(v) || VARATT_IS_SHORT(v))

/*
 * SameBytesOrOrder is the order of a variable-length key column, for the
 * probe's binary searches: two values of the same bytes are equal (every
 * B-tree order is reflexive), which spares taking apart the many equal
 * values a search compares, such as the cells of table distincts, arrays
 * most of whose entries on a page are of one cell.  Any other pair goes to
 * the column's own order (fn_extra).
 */
static Datum
SameBytesOrOrder(PG_FUNCTION_ARGS)
{
	struct varlena *a = (struct varlena *) PG_GETARG_POINTER(0);
	struct varlena *b = (struct varlena *) PG_GETARG_POINTER(1);

	if (PLAIN_VARLENA(a) && PLAIN_VARLENA(b) && VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0)
		PG_RETURN_INT32(0);
	return FunctionCall2Coll((FmgrInfo *) fcinfo->flinfo->fn_extra, PG_GET_COLLATION(),
							 PG_GETARG_DATUM(0), PG_GETARG_DATUM(1));
}

/*
 * BytesOrder is the order of text in collation "C" and of bytea, the order
 * of the state stage's keys: byte by byte, the shorter first where one is
 * the other's start.  It is what the types' own order functions do there,
 * without their calls and detoasting for the plain values an index holds;
 * any other value goes to the column's own order (fn_extra).
 */
static Datum
BytesOrder(PG_FUNCTION_ARGS)
{
	struct varlena *a = (struct varlena *) PG_GETARG_POINTER(0);
	struct varlena *b = (struct varlena *) PG_GETARG_POINTER(1);

	if (PLAIN_VARLENA(a) && PLAIN_VARLENA(b))
		PG_RETURN_INT32(TextCmp((text *) a, (text *) b));
	return FunctionCall2Coll((FmgrInfo *) fcinfo->flinfo->fn_extra, PG_GET_COLLATION(),
							 PG_GETARG_DATUM(0), PG_GETARG_DATUM(1));
}

/*
 * KeyProbeBegin prepares probes of index, a B-tree on heap, by all of its
 * key columns, under snap (registered for longer than the probe).  It
 * returns NULL when the index is not one this probe can read: then probe
 * with an index scan.
 */
KeyProbe *
KeyProbeBegin(Relation heap, Relation index, Snapshot snap)
{
	KeyProbe   *kp;
	int			nkeys = IndexRelationGetNumberOfKeyAttributes(index);

	if (index->rd_rel->relam != BTREE_AM_OID)
		return NULL;
	for (int i = 0; i < nkeys; i++)
		if (index->rd_indoption[i] != 0)
			return NULL;

	kp = palloc0(sizeof(KeyProbe));
	kp->heap = heap;
	kp->index = index;
	kp->snap = snap;
	kp->fetch = table_index_fetch_begin(heap);
	kp->leaf = InvalidBuffer;
	kp->maxtids = 16;
	kp->tids = palloc(sizeof(ItemPointerData) * kp->maxtids);

	_bt_metaversion(index, &kp->key.heapkeyspace, &kp->key.allequalimage);
	kp->key.anynullkeys = false;
	kp->key.nextkey = false;
	kp->key.pivotsearch = false;
	kp->key.scantid = NULL;
	kp->key.keysz = nkeys;
	for (int i = 0; i < nkeys; i++)
	{
		ScanKey		sk = &kp->key.scankeys[i];
		FmgrInfo   *order = index_getprocinfo(index, i + 1, BTORDER_PROC);

		ScanKeyEntryInitializeWithInfo(sk, 0, i + 1, InvalidStrategy, InvalidOid,
									   index->rd_indcollation[i], order, (Datum) 0);
		if (TupleDescAttr(RelationGetDescr(index), i)->attlen == -1)
		{
			bool		bytes = order->fn_oid == F_BYTEACMP ||
			(order->fn_oid == F_BTTEXTCMP && lc_collate_is_c(index->rd_indcollation[i]));

			sk->sk_func.fn_addr = bytes ? BytesOrder : SameBytesOrOrder;
			sk->sk_func.fn_extra = order;
		}
	}
	return kp;
}

/*
 * AddTids adds the heap TIDs of a leaf entry (one, or a posting list's).
 */
static int
AddTids(KeyProbe *kp, IndexTuple itup, int n)
{
	int			add = BTreeTupleIsPosting(itup) ? BTreeTupleGetNPosting(itup) : 1;

	if (n + add > kp->maxtids)
	{
		kp->maxtids = Max(kp->maxtids * 2, n + add);
		kp->tids = repalloc(kp->tids, sizeof(ItemPointerData) * kp->maxtids);
	}
	if (BTreeTupleIsPosting(itup))
		for (int i = 0; i < add; i++)
			kp->tids[n++] = *BTreeTupleGetPostingN(itup, i);
	else
		kp->tids[n++] = itup->t_tid;
	return n;
}

/*
 * LockLeaf locks the leaf page that may hold the key sought: the last one,
 * if the key is not above its high key and it is still in the tree, or the
 * one a descent from the root finds.  It returns false for an empty index.
 */
static bool
LockLeaf(KeyProbe *kp)
{
	if (BufferIsValid(kp->leaf))
	{
		Page		page = BufferGetPage(kp->leaf);
		BTPageOpaque opaque;

		_bt_lockbuf(kp->index, kp->leaf, BT_READ);
		opaque = BTPageGetOpaque(page);
		if (!P_IGNORE(opaque) &&
			(P_RIGHTMOST(opaque) || _bt_compare(kp->index, &kp->key, page, P_HIKEY) <= 0))
		{
			kp->descended = false;
			return true;
		}
		_bt_relbuf(kp->index, kp->leaf);
		kp->leaf = InvalidBuffer;
	}
	_bt_freestack(_bt_search(kp->index, &kp->key, &kp->leaf, BT_READ, kp->snap));
	kp->descended = true;
	return BufferIsValid(kp->leaf);
}

/*
 * KeyProbeFetch looks up the key whose columns are keys, best not below
 * the key of the previous call, and stores its visible row in slot if it
 * has one.
 */
KeyProbeResult
KeyProbeFetch(KeyProbe *kp, Datum *keys, TupleTableSlot *slot)
{
	Page		page;
	BTPageOpaque opaque;
	OffsetNumber low,
				high,
				maxoff;
	int			ntids = 0;
	bool		past_end;

	for (int i = 0; i < kp->key.keysz; i++)
		kp->key.scankeys[i].sk_argument = keys[i];
again:
	if (!LockLeaf(kp))
		return KEY_ABSENT;

	/* the first entry not below the key, then every entry equal to it */
	page = BufferGetPage(kp->leaf);
	opaque = BTPageGetOpaque(page);
	maxoff = PageGetMaxOffsetNumber(page);
	low = P_FIRSTDATAKEY(opaque);
	high = maxoff + 1;
	while (high > low)
	{
		OffsetNumber mid = low + (high - low) / 2;

		if (_bt_compare(kp->index, &kp->key, page, mid) > 0)
			low = mid + 1;
		else
			high = mid;
	}

	/*
	 * A key at the first entry of a page kept from before may have entries on
	 * the page to its left (a key out of order, or older versions): one found
	 * by a descent has none there.
	 */
	if (!kp->descended && low == P_FIRSTDATAKEY(opaque) && !P_LEFTMOST(opaque))
	{
		_bt_relbuf(kp->index, kp->leaf);
		kp->leaf = InvalidBuffer;
		goto again;
	}
	for (; low <= maxoff && _bt_compare(kp->index, &kp->key, page, low) == 0; low++)
	{
		ItemId		iid = PageGetItemId(page, low);

		if (!ItemIdIsDead(iid))
			ntids = AddTids(kp, (IndexTuple) PageGetItem(page, iid), ntids);
	}
	past_end = low > maxoff && !P_RIGHTMOST(opaque) &&
		_bt_compare(kp->index, &kp->key, page, P_HIKEY) == 0;
	_bt_unlockbuf(kp->index, kp->leaf);
	if (past_end)
		return KEY_UNSURE;

	for (int i = 0; i < ntids; i++)
	{
		bool		call_again = false;
		bool		all_dead = false;

		if (table_index_fetch_tuple(kp->fetch, &kp->tids[i], kp->snap, slot,
									&call_again, &all_dead))
			return KEY_FOUND;
	}
	return KEY_ABSENT;
}

/*
 * KeyProbeEnd lets go of the last leaf page and the heap fetch.
 */
void
KeyProbeEnd(KeyProbe *kp)
{
	if (BufferIsValid(kp->leaf))
		ReleaseBuffer(kp->leaf);
	table_index_fetch_end(kp->fetch);
	pfree(kp->tids);
	pfree(kp);
}
