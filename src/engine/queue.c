/*-------------------------------------------------------------------------
 *
 * queue.c
 *		The ingest queue: two partitions that take turns, drained by position
 *		and truncated once drained, so the queue never bloats.
 *
 * Rows land in partition ingest_<rotation % 2>, chosen by the default of the
 * hidden column ingest_slot, exactonce.ingest_slot('<pipeline>').  The
 * default and the check below name the pipeline, not the queue's relation,
 * so that a copy of the table made elsewhere (a shard, a restore) names
 * the same pipeline; queues made before 1.6 name it by regclass, which
 * still works.  A partition is drained only once it is sealed, meaning no
 * transaction can add rows to it any more:
 *
 *	 - flush() seals the whole queue by taking a SHARE lock on the parent for
 *	   its transaction: that waits for every inserting transaction and holds
 *	   off new ones until flush commits.
 *	 - the workers bump progress.rotation and commit, then drain the old
 *	   partition once every transaction that held a lock on the parent then
 *	   has ended (QueueSealed, checked without waiting).  Any later insert
 *	   sees the new rotation, because exactonce_ingest_slot locks the parent
 *	   before it reads the rotation with a fresh snapshot.
 *
 * No row enters a partition once it is sealed: the NOT VALID check
 * ingest_slot_open (exactonce_ingest_slot_check) holds every row, however it
 * comes (a set ingest_slot, an INSERT or COPY straight into a partition, a
 * logical replication subscription), to the partition taking inserts, with
 * the same lock the default takes.  It is NOT VALID on the partitions too,
 * so pg_dump adds it after loading the rows: a restore brings back those of
 * both partitions.  A row inserted or copied straight into a partition
 * gets no ingest_id (the identity is the queue's) and is refused.
 *
 * A sealed partition never changes, so its rows are read in TID order in
 * batches.  Keys are split into shards by a hash (QueueKeyShard), and the shards
 * are drained independently, each by one worker: with more than one shard,
 * each partition is partitioned in turn by that hash into a leaf per shard,
 * ingest_<slot>_<shard>, and a shard reads its leaf (a queue made before
 * 1.19 has plain partitions, whose every row each shard reads, skipping
 * the other shards' keys).  A shard's row in table shard remembers where
 * it stands (QueuePosition), moved in the same transaction as the batch's
 * effects.  Once every shard has passed the end, the partition's leaves are
 * emptied, which returns their space at once, however old the oldest open
 * snapshot is.  Nothing deletes queue rows one by one.
 *
 * A TID alone is no position: VACUUM FULL, CLUSTER, a rewriting ALTER
 * TABLE, pg_repack and a dump restored elsewhere move rows.  A position is
 * therefore "the first count rows of the shard's keys, in TID order", with
 * the sum of a hash of their ingest_id (a value each row gets from the
 * queue's identity sequence, unique within the queue).  The TID and
 * ingest_id of the last row taken find the spot without a search; when they
 * no longer match, the shard counts its rows again from the start of the
 * partition and goes on after the count-th, if the digest of the rows
 * before it is the one recorded.  The rewrites above keep the rows' order,
 * so they pass; one that reorders the rows or drops some the shard had
 * taken fails the digest and the shard refuses to go on rather than miss or
 * repeat events.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/multixact.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "catalog/namespace.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_publication.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/autovacuum.h"
#include "storage/bufmgr.h"
#include "storage/freespace.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "catalog/shape.h"
#include "catalog/statement.h"
#include "engine/ledger.h"
#include "engine/queue.h"

PG_FUNCTION_INFO_V1(exactonce_ingest_slot);
PG_FUNCTION_INFO_V1(exactonce_ingest_slot_check);
PG_FUNCTION_INFO_V1(exactonce_pipeline_slot);
PG_FUNCTION_INFO_V1(exactonce_pipeline_slot_check);
PG_FUNCTION_INFO_V1(exactonce_key_shard_hash);
PG_FUNCTION_INFO_V1(exactonce_key_shard_hash_extended);

/*
 * The slot read for one queue by this (sub)transaction.  It is valid while
 * the lock taken before reading it is held: until the end of the
 * subtransaction that took it, since a rollback to a savepoint releases it.
 * Subtransaction ids are never reused within a transaction.
 */
static Oid	slot_cache_ingest = InvalidOid;
static LocalTransactionId slot_cache_lxid = InvalidLocalTransactionId;
static SubTransactionId slot_cache_subxid = InvalidSubTransactionId;
static int	slot_cache_slot = 0;

/*
 * ReadRotation returns progress.rotation of the pipeline whose progress
 * table is given, as of the latest committed state.
 */
static int64
ReadRotation(Oid progress)
{
	Relation	rel = table_open(progress, AccessShareLock);
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = table_beginscan(rel, snap, 0, NULL);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	AttrNumber	attnum = get_attnum(progress, "rotation");
	int64		rotation;
	bool		isnull;

	/* locked: the column keeps this type while it is read */
	ShapeCheckColumn(progress, get_namespace_name(get_rel_namespace(progress)), "progress",
					 "rotation", INT8OID, true);
	if (!table_scan_getnextslot(scan, ForwardScanDirection, slot))
		StatementRowRefused(get_namespace_name(get_rel_namespace(progress)), "progress",
							"The progress row is missing.");
	rotation = DatumGetInt64(slot_getattr(slot, attnum, &isnull));
	if (isnull || rotation < 0)
		StatementRowRefused(get_namespace_name(get_rel_namespace(progress)), "progress",
							"The progress row has no rotation, or one below zero.");
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
	return rotation;
}

/*
 * QueueProgress returns the progress table of the queue "ingest", checking
 * that it is one: a partitioned table named ingest beside an ordinary table
 * named progress, both of one owner (that of their schema).
 */
static Oid
QueueProgress(Oid ingest)
{
	Oid			nspid = get_rel_namespace(ingest);
	Oid			progress = OidIsValid(nspid) ? get_relname_relid("progress", nspid) : InvalidOid;
	char	   *name = get_rel_name(ingest);

	if (name == NULL || strcmp(name, "ingest") != 0 ||
		get_rel_relkind(ingest) != RELKIND_PARTITIONED_TABLE ||
		!OidIsValid(progress) || get_rel_relkind(progress) != RELKIND_RELATION ||
		StatementRelationOwner(progress) != StatementRelationOwner(ingest))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not the queue of an exactonce pipeline",
						name ? name : "(none)")));
	return progress;
}

/*
 * CheckSlotLogged refuses an insert into partition slot of queue ingest
 * (locked) while one of its tables is unlogged: a crash would empty it of
 * events whose commit was acknowledged.  The workers refuse such a queue
 * (ShapeCheckLogged), and the column guard the ALTER that makes it so;
 * without the preload, or with the guard off, the producers must not go on
 * filling it meanwhile.  The partition is found by its bound, as routing
 * does, and locked as routing will: its leaves are looked up in the
 * syscache, a few probes per transaction.
 */
static void
CheckSlotLogged(Oid ingest, int slot)
{
	Relation	rel = table_open(ingest, NoLock);
	PartitionDesc pd = RelationGetPartitionDesc(rel, true);
	PartitionBoundInfo bounds = pd->boundinfo;
	Oid			part = InvalidOid;

	for (int i = 0; bounds != NULL && bounds->strategy == PARTITION_STRATEGY_LIST &&
		 i < bounds->ndatums; i++)
		if (DatumGetInt32(bounds->datums[i][0]) == slot && bounds->indexes[i] >= 0)
			part = pd->oids[bounds->indexes[i]];
	table_close(rel, NoLock);
	if (!OidIsValid(part))
		return;					/* no partition takes the row: routing says so */
	LockRelationOid(part, RowExclusiveLock);
	if (get_rel_relkind(part) == RELKIND_PARTITIONED_TABLE)
	{
		Relation	prel = table_open(part, NoLock);

		pd = RelationGetPartitionDesc(prel, true);
		for (int i = 0; i < pd->nparts; i++)
			if (get_rel_persistence(pd->oids[i]) != RELPERSISTENCE_PERMANENT)
				ShapeCheckLogged(pd->oids[i], get_namespace_name(get_rel_namespace(ingest)));
		table_close(prel, NoLock);
	}
	else if (get_rel_persistence(part) != RELPERSISTENCE_PERMANENT)
		ShapeCheckLogged(part, get_namespace_name(get_rel_namespace(ingest)));
}

/*
 * OpenPartition returns the partition of queue "ingest" that takes inserts now.
 * It locks the queue first, so that a worker sealing the other partition
 * waits for this transaction; only a role that may insert into the queue
 * may take that lock.
 */
static int
OpenPartition(Oid ingest)
{
	Oid			progress;
	AclResult	acl;

	if (ingest == slot_cache_ingest && MyProc->lxid == slot_cache_lxid &&
		GetCurrentSubTransactionId() == slot_cache_subxid)
		return slot_cache_slot;

	progress = QueueProgress(ingest);
	acl = pg_class_aclcheck(ingest, GetUserId(), ACL_INSERT);
	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_TABLE, get_rel_name(ingest));
	LockRelationOid(ingest, RowExclusiveLock);

	slot_cache_slot = (int) (ReadRotation(progress) % EXACTONCE_PARTITIONS);
	CheckSlotLogged(ingest, slot_cache_slot);
	slot_cache_ingest = ingest;
	slot_cache_lxid = MyProc->lxid;
	slot_cache_subxid = GetCurrentSubTransactionId();
	return slot_cache_slot;
}

/* the queue a pipeline's name led to, kept for the rest of a statement */
typedef struct NamedQueue
{
	NameData	pipeline;
	Oid			ingest;
} NamedQueue;

/*
 * QueueOfPipeline returns the queue of the pipeline named by argument argno.
 * It keeps the last one in fn_extra for the rest of the statement: a COPY
 * evaluates the default and the check once per row.  The lock OpenPartition
 * then takes keeps the queue from being dropped or renamed under it.
 */
static Oid
QueueOfPipeline(FunctionCallInfo fcinfo, int argno)
{
	NamedQueue *cached = fcinfo->flinfo->fn_extra;
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	Oid			nspid;

	if (cached != NULL && strcmp(NameStr(cached->pipeline), name) == 0)
		return cached->ingest;
	if (cached == NULL)
		cached = fcinfo->flinfo->fn_extra =
			MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(NamedQueue));
	nspid = get_namespace_oid(name, true);
	cached->ingest = OidIsValid(nspid) ? get_relname_relid("ingest", nspid) : InvalidOid;
	if (!OidIsValid(cached->ingest))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pipeline \"%s\" has no queue", name),
				 errdetail("There is no table %s.ingest.", quote_identifier(name)),
				 errhint("A queue names its pipeline, whose schema has the same name; it may have been renamed or dropped.")));
	namestrcpy(&cached->pipeline, name);
	return cached->ingest;
}

/*
 * PartitionCheck is the check constraint ingest_slot_open: a row may only enter
 * the partition taking inserts.  It fails with an error of its own rather
 * than returning false, to say why and what to do.
 */
static bool
PartitionCheck(int32 slot, Oid ingest)
{
	int			open = OpenPartition(ingest);

	if (slot != open)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("queue partition %d of pipeline \"%s\" does not take inserts now",
						slot, get_namespace_name(get_rel_namespace(ingest))),
				 errdetail("Partition %d does; the other one may be sealed and draining, and a row added to it could be missed.", open),
				 errhint("Insert into the queue, %s.ingest, and leave ingest_slot to its default.",
						 quote_identifier(get_namespace_name(get_rel_namespace(ingest))))));
	return true;
}

/*
 * exactonce_pipeline_slot is the default of ingest.ingest_slot,
 * exactonce.ingest_slot(pipeline text).
 */
Datum
exactonce_pipeline_slot(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(OpenPartition(QueueOfPipeline(fcinfo, 0)));
}

/*
 * exactonce_pipeline_slot_check is the check ingest_slot_open,
 * exactonce.ingest_slot_check(slot integer, pipeline text).
 */
Datum
exactonce_pipeline_slot_check(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(PartitionCheck(PG_GETARG_INT32(0), QueueOfPipeline(fcinfo, 1)));
}

/*
 * exactonce_ingest_slot and exactonce_ingest_slot_check are the same for
 * queues made before 1.6, which name themselves by regclass.
 */
Datum
exactonce_ingest_slot(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(OpenPartition(PG_GETARG_OID(0)));
}

Datum
exactonce_ingest_slot_check(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(PartitionCheck(PG_GETARG_INT32(0), PG_GETARG_OID(1)));
}

/*
 * QueueSealed tells, without waiting, whether the partition of rotation - 1
 * is sealed: whether every transaction that held a lock on the queue when
 * the worker first looked after the rotation has ended.  Those are the only
 * ones that may have read the old rotation; the set is taken once and kept
 * in *seal (in TopMemoryContext), so that transactions starting later, which
 * insert into the new partition, cannot keep the old one open forever.
 */
bool
QueueSealed(Pipeline *p, int64 rotation, SealState **seal)
{
	SealState  *s = *seal;
	int			kept = 0;

	if (s == NULL || s->rotation != rotation || s->ingest != p->ingest)
	{
		LOCKTAG		tag;
		VirtualTransactionId *vxids;
		int			n = 0;

		SET_LOCKTAG_RELATION(tag, MyDatabaseId, p->ingest);
		vxids = GetLockConflicts(&tag, ShareLock, &n);
		if (s != NULL)
			pfree(s);
		s = MemoryContextAlloc(TopMemoryContext,
							   offsetof(SealState, vxids) + sizeof(VirtualTransactionId) * Max(n, 1));
		s->ingest = p->ingest;
		s->rotation = rotation;
		s->n = n;
		memcpy(s->vxids, vxids, sizeof(VirtualTransactionId) * n);
		*seal = s;
	}
	for (int i = 0; i < s->n; i++)
		if (!VirtualXactLock(s->vxids[i], false))
			s->vxids[kept++] = s->vxids[i];
	s->n = kept;
	return kept == 0;
}

/*
 * QueueFreeze waits for every transaction that is inserting into the queue
 * and keeps new ones out until the end of this transaction.
 */
void
QueueFreeze(Pipeline *p)
{
	LockRelationOid(p->ingest, ShareLock);
}

/*
 * KeyHash is the hash that cuts keys into shards: of the key's bytes, stable
 * for as long as the server's binaries are the same.
 */
static uint32
KeyHash(text *key)
{
	return hash_bytes((const unsigned char *) VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));
}

/*
 * QueueKeyShard returns the shard of a key.
 */
int
QueueKeyShard(Pipeline *p, text *key)
{
	if (p->nshards == 1)
		return 0;
	return (int) (KeyHash(key) % (uint32) p->nshards);
}

/*
 * The hash operator class exactonce.key_shard_ops, by which a queue laid out
 * by shard partitions its rows: its extended hash puts each key in the leaf
 * of its shard.  PostgreSQL routes a row of a HASH partitioned table to the
 * partition of remainder hash_combine64(0, h) % modulus, where h is what
 * the extended hash returns, which is h plus a constant: h is taken as
 * KeyHash less that constant, whatever the seed, so that the remainder is
 * QueueKeyShard, the cut shards have always had.  Not PostgreSQL's own
 * hash of text: a node of a distributed pipeline holds the keys of one
 * remainder of that hash, which would fall into few of its shards.  Bytes
 * hash alike only where equal strings are equal bytes: a deterministic
 * collation, as the queue's "C".
 */
static text *
ShardHashArg(FunctionCallInfo fcinfo)
{
	Oid			collid = PG_GET_COLLATION();

	/* the queue's "C" is known without a look at the catalog, once per row */
	if (collid != C_COLLATION_OID &&
		(!OidIsValid(collid) || !get_collation_isdeterministic(collid)))
		ereport(ERROR,
				(errcode(ERRCODE_INDETERMINATE_COLLATION),
				 errmsg("exactonce.key_shard_ops needs a deterministic collation"),
				 errhint("Use it on a column of collation \"C\", as the queue's key.")));
	return PG_GETARG_TEXT_PP(0);
}

Datum
exactonce_key_shard_hash(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32((int32) KeyHash(ShardHashArg(fcinfo)));
}

Datum
exactonce_key_shard_hash_extended(PG_FUNCTION_ARGS)
{
	uint64		h = KeyHash(ShardHashArg(fcinfo));

	PG_RETURN_INT64((int64) (h - hash_combine64(0, 0)));
}

/*
 * PositionTid turns a drain position (a TID as block << 16 | offset, 0
 * before the first row) into the first TID after it.
 */
static void
PositionTid(int64 position, ItemPointer tid)
{
	ItemPointerSet(tid, (BlockNumber) (position >> 16),
				   (OffsetNumber) ((position & 0xFFFF) + 1));
}

/*
 * TidPosition turns a TID into a drain position.
 */
static int64
TidPosition(ItemPointer tid)
{
	return ((int64) ItemPointerGetBlockNumber(tid) << 16) | ItemPointerGetOffsetNumber(tid);
}

/*
 * A partition's leaves: one per shard in a queue laid out by shard, holding
 * that shard's rows; else one, the partition, holding every shard's.
 */
static int
LeafCount(Pipeline *p)
{
	return p->queue_by_shard ? p->nshards : 1;
}

static Oid
Leaf(Pipeline *p, int slotno, int j)
{
	return p->queue_by_shard ? p->leaves[slotno][j] : p->partitions[slotno];
}

/* the leaf that holds a shard's rows, and whether it holds others' too */
static Oid
ShardLeaf(Pipeline *p, int slotno, int shard)
{
	return Leaf(p, slotno, p->queue_by_shard ? shard : 0);
}

static bool
LeafShared(Pipeline *p)
{
	return !p->queue_by_shard && p->nshards > 1;
}

/*
 * RowDigest is what a row adds to a position's digest: a hash of its
 * ingest_id, of the value rather than its bytes, so that it is the same on
 * any machine a dump is restored to.
 */
static int64
RowDigest(int64 id)
{
	return (int64) hash_bytes_uint32_extended((uint32) id, (uint64) id >> 32);
}

/*
 * QueuePositionStart puts a position before the first row of rotation's
 * partition.
 */
void
QueuePositionStart(QueuePosition *pos, int64 rotation)
{
	memset(pos, 0, sizeof(QueuePosition));
	pos->rotation = rotation;
	pos->digest_known = true;
}

/*
 * RowId returns the ingest_id of the row in slot.
 */
static int64
RowId(TupleTableSlot *slot, AttrNumber attnum)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, attnum, &isnull);

	if (isnull)
		elog(ERROR, "queue row without ingest_id");
	return DatumGetInt64(d);
}

/*
 * IdAttnum returns the attribute number of ingest_id in a queue partition.
 */
static AttrNumber
IdAttnum(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (!att->attisdropped && att->atttypid == INT8OID &&
			strcmp(NameStr(att->attname), "ingest_id") == 0)
			return att->attnum;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_COLUMN),
			 errmsg("queue partition \"%s\" has no column ingest_id of type bigint",
					RelationGetRelationName(rel)),
			 errhint("Run ALTER EXTENSION exactonce UPDATE.")));
	return InvalidAttrNumber;	/* keep the compiler quiet */
}

/*
 * PositionHolds tells whether the row a position names is still where it
 * was: in the file it was read from, at its TID, with its ingest_id.  Only
 * a rewrite gives a table another file, and only a rewrite moves rows; the
 * ingest_id alone would not tell a rewrite, as a producer may give many
 * rows one (COPY writes an identity column, as does OVERRIDING SYSTEM
 * VALUE).
 */
static bool
PositionHolds(Relation rel, Snapshot snap, AttrNumber id_attnum, QueuePosition *pos)
{
	ItemPointerData tid;
	TupleTableSlot *slot;
	bool		holds;

	if (pos->tid == 0)
		return true;
	if (!pos->digest_known || pos->file != rel->rd_node.relNode)
		return false;
	ItemPointerSet(&tid, (BlockNumber) (pos->tid >> 16), (OffsetNumber) (pos->tid & 0xFFFF));
	if (!ItemPointerIsValid(&tid) || ItemPointerGetBlockNumber(&tid) >= RelationGetNumberOfBlocks(rel))
		return false;
	slot = table_slot_create(rel, NULL);
	holds = table_tuple_fetch_row_version(rel, &tid, snap, slot) &&
		RowId(slot, id_attnum) == pos->row;
	ExecDropSingleTupleTableSlot(slot);
	return holds;
}

/*
 * Relocate finds a position again in a rewritten partition: after the
 * count-th row of the shard's keys in TID order, if the rows up to there
 * are the ones the shard took (their digest matches).  Otherwise it refuses
 * to go on: every way forward would miss or repeat events.
 */
static void
Relocate(Pipeline *p, Relation rel, Snapshot snap, int shard,
		 AttrNumber key_attnum, AttrNumber id_attnum, QueuePosition *pos)
{
	ItemPointerData mintid,
				maxtid;
	TableScanDesc scan;
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	int64		count = 0;
	int64		digest = 0;
	int64		tid = 0;
	int64		row = 0;

	/* a TID range scan, never a synchronized one that starts half way */
	ItemPointerSet(&mintid, 0, 1);
	ItemPointerSet(&maxtid, MaxBlockNumber, MaxOffsetNumber);
	scan = table_beginscan_tidrange(rel, snap, &mintid, &maxtid);
	while (count < pos->count &&
		   table_scan_getnextslot_tidrange(scan, ForwardScanDirection, slot))
	{
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		if (LeafShared(p) &&
			QueueKeyShard(p, DatumGetTextPP(slot_getattr(slot, key_attnum, &isnull))) != shard)
			continue;
		row = RowId(slot, id_attnum);
		digest += RowDigest(row);
		tid = TidPosition(&slot->tts_tid);
		count++;
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);

	if (count < pos->count || (pos->digest_known && digest != pos->digest))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shard %d of pipeline \"%s\" cannot find its position in queue partition \"%s\"",
						shard, p->name, RelationGetRelationName(rel)),
				 errdetail("The shard had taken " INT64_FORMAT " rows of the partition; the partition now %s.",
						   pos->count, count < pos->count ? "has fewer rows of its keys" :
						   "has other rows before that point"),
				 errhint("Queue partitions must keep their rows and their order: do not CLUSTER them or delete from them. Restore the pipeline from a backup taken before.")));
	ereport(LOG,
			(errmsg("shard %d of pipeline \"%s\" found its position in rewritten queue partition \"%s\" after " INT64_FORMAT " rows",
					shard, p->name, RelationGetRelationName(rel), count)));
	pos->tid = tid;
	pos->row = row;
	pos->digest = digest;
	pos->digest_known = true;
	pos->file = rel->rd_node.relNode;
}

/*
 * QueueReadBatch reads up to max events of a shard's keys from the sealed
 * partition of pos->rotation that follow pos, and moves pos past them.  In
 * a queue laid out by shard they are all the rows of the shard's leaf; the
 * first of each batch is checked to be of the shard, which the leaves'
 * bounds promise (PostgreSQL's routing and QueueKeyShard agree).
 */
int
QueueReadBatch(Pipeline *p, int shard, QueuePosition *pos, int max, Event *events)
{
	Relation	rel = table_open(ShardLeaf(p, pos->rotation % EXACTONCE_PARTITIONS, shard),
								 AccessShareLock);
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	AttrNumber	attnums[EV_ATTNUMS];
	AttrNumber	id_attnum = IdAttnum(rel);
	ItemPointerData mintid,
				maxtid;
	TableScanDesc scan;
	TupleTableSlot *slot;
	int			n = 0;

	EventAttnums(p, RelationGetDescr(rel), attnums);
	if (!PositionHolds(rel, snap, id_attnum, pos))
		Relocate(p, rel, snap, shard, attnums[EV_KEY], id_attnum, pos);

	PositionTid(pos->tid, &mintid);
	ItemPointerSet(&maxtid, MaxBlockNumber, MaxOffsetNumber);
	scan = table_beginscan_tidrange(rel, snap, &mintid, &maxtid);
	slot = table_slot_create(rel, NULL);

	while (n < max && table_scan_getnextslot_tidrange(scan, ForwardScanDirection, slot))
	{
		Event	   *ev = &events[n];
		const char *missing;
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		if (LeafShared(p) &&
			QueueKeyShard(p, DatumGetTextPP(slot_getattr(slot, attnums[EV_KEY], &isnull))) != shard)
			continue;
		missing = EventFromSlot(p, slot, attnums, ev);
		if (missing)
			elog(ERROR, "queue row of pipeline \"%s\" has no %s", p->name, missing);
		if (n == 0 && p->queue_by_shard && QueueKeyShard(p, ev->key) != shard)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("queue partition \"%s\" holds a key of shard %d, not of shard %d",
							RelationGetRelationName(rel), QueueKeyShard(p, ev->key), shard),
					 errdetail("PostgreSQL routed the row by a hash other than exactonce's.")));
		ev->ord = n++;
		pos->row = RowId(slot, id_attnum);
		pos->tid = TidPosition(&slot->tts_tid);
		pos->digest += RowDigest(pos->row);
		pos->count++;
	}

	pos->file = rel->rd_node.relNode;
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
	return n;
}

/*
 * QueueHasRows tells whether a partition may hold rows: any page with a
 * line pointer.  A partition that was emptied in place keeps its pages,
 * empty (ReuseInPlace), so the pages are looked at, the first with one
 * ending the look.  With nowait a table that cannot be locked at once, or
 * is gone (set_shards() makes them anew), may hold rows too.
 */
bool
QueueHasRows(Pipeline *p, int slotno, bool nowait)
{
	bool		has = false;

	for (int j = 0; j < LeafCount(p) && !has; j++)
	{
		Oid			relid = Leaf(p, slotno, j);
		Relation	rel;
		BlockNumber nblocks;

		if (nowait && !ConditionalLockRelationOid(relid, AccessShareLock))
			return true;
		rel = nowait ? try_table_open(relid, NoLock) : table_open(relid, AccessShareLock);
		if (rel == NULL)
		{
			UnlockRelationOid(relid, AccessShareLock);
			return true;
		}
		nblocks = RelationGetNumberOfBlocks(rel);
		for (BlockNumber blk = 0; blk < nblocks && !has; blk++)
		{
			Buffer		buf = ReadBuffer(rel, blk);
			Page		page = BufferGetPage(buf);

			CHECK_FOR_INTERRUPTS();
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			has = !PageIsNew(page) && PageGetMaxOffsetNumber(page) > 0;
			UnlockReleaseBuffer(buf);
		}
		table_close(rel, AccessShareLock);
	}
	return has;
}

/*
 * ScanStart returns where the rows of leaf rel of partition r that a shard
 * has still to take can begin, and whether the shards' TIDs tell which rows
 * are taken; the leaf holds the rows of shards first to last.  When every
 * such shard's position in r still holds (no rewrite moved the rows), a row
 * of shard s is taken if it lies at or before s's last TID, so the rows
 * before the lowest of those TIDs are all taken and need no look: what
 * remains is the backlog, not the leaf (nothing, where every shard has
 * passed r).  Otherwise only the counts can tell, from the first row.
 */
static bool
ScanStart(Relation rel, Snapshot snap, int64 r, QueuePosition *shards, int first, int last,
		  ItemPointer start)
{
	AttrNumber	id_attnum = IdAttnum(rel);
	int64		lowest = PG_INT64_MAX;

	ItemPointerSet(start, 0, 1);
	for (int s = first; s <= last; s++)
	{
		if (shards[s].rotation > r)
			continue;			/* it took all of r */
		if (shards[s].rotation < r)
			lowest = 0;			/* it took nothing of r */
		else if (!PositionHolds(rel, snap, id_attnum, &shards[s]))
			return false;
		else
			lowest = Min(lowest, shards[s].tid);
	}
	if (lowest == PG_INT64_MAX)
		ItemPointerSet(start, MaxBlockNumber, MaxOffsetNumber); /* all taken */
	else
		PositionTid(lowest, start);
	return true;
}

/*
 * QueueDepth counts the rows waiting in the queue (those of the partitions
 * not truncated yet that a shard has still to take), only those visible to
 * snapshot before if it is not NULL, and finds the oldest waiting
 * event_time; with limit > 0 it stops counting there (and *oldest is then
 * of the rows counted), and with a filter it counts only the rows of the
 * keys the filter keeps.  It never waits for a lock: while a partition is
 * locked exclusively (a drain truncating it, until that commits or rolls
 * back) the depth is unknown and it returns -1.
 */
int64
QueueDepth(Pipeline *p, int64 rotation, int64 drain_rotation,
		   QueuePosition *shards, Snapshot before, TimestampTz *oldest, int64 limit,
		   QueueKeyFilter filter, void *filter_arg)
{
	int64		depth = 0;
	int64		seen[EXACTONCE_MAX_SHARDS] = {0};

	*oldest = DT_NOEND;
	for (int64 r = drain_rotation; r <= rotation && (limit <= 0 || depth < limit); r++)
	{
		for (int j = 0; j < LeafCount(p) && (limit <= 0 || depth < limit); j++)
		{
			Oid			relid = Leaf(p, r % EXACTONCE_PARTITIONS, j);
			int			first = p->queue_by_shard ? j : 0;
			int			last = p->queue_by_shard ? j : p->nshards - 1;
			Relation	rel;
			Snapshot	snap;
			ItemPointerData mintid,
						maxtid;
			TableScanDesc scan;
			TupleTableSlot *slot;
			AttrNumber	key_attnum,
						time_attnum;
			bool		by_tid;

			if (!ConditionalLockRelationOid(relid, AccessShareLock))
				return -1;
			rel = table_open(relid, NoLock);
			key_attnum = get_attnum(relid, "key");
			time_attnum = get_attnum(relid, "event_time");
			snap = RegisterSnapshot(GetLatestSnapshot());
			memset(seen, 0, sizeof(seen));
			by_tid = ScanStart(rel, snap, r, shards, first, last, &mintid);
			ItemPointerSet(&maxtid, MaxBlockNumber, MaxOffsetNumber);
			scan = table_beginscan_tidrange(rel, snap, &mintid, &maxtid);
			slot = table_slot_create(rel, NULL);
			while ((limit <= 0 || depth < limit) &&
				   table_scan_getnextslot_tidrange(scan, ForwardScanDirection, slot))
			{
				bool		isnull;
				Datum		t;
				text	   *key = DatumGetTextPP(slot_getattr(slot, key_attnum, &isnull));
				int			shard = first == last ? first : QueueKeyShard(p, key);

				/*
				 * taken by its shard already: up to its TID, or its first
				 * rows
				 */
				CHECK_FOR_INTERRUPTS();
				if (r < shards[shard].rotation ||
					(r == shards[shard].rotation &&
					 (by_tid ? TidPosition(&slot->tts_tid) <= shards[shard].tid :
					  ++seen[shard] <= shards[shard].count)))
					continue;
				if (before != NULL && !table_tuple_satisfies_snapshot(rel, slot, before))
					continue;
				if (filter != NULL && !filter(key, filter_arg))
					continue;
				t = slot_getattr(slot, time_attnum, &isnull);
				depth++;
				if (!isnull)
					*oldest = Min(*oldest, DatumGetTimestampTz(t));
			}
			ExecDropSingleTupleTableSlot(slot);
			table_endscan(scan);
			UnregisterSnapshot(snap);
			table_close(rel, AccessShareLock);
		}
	}
	return depth;
}

/*
 * QueueLockPartition takes the ACCESS EXCLUSIVE lock that retiring a
 * partition needs, on it, its leaves and their TOAST tables, without
 * waiting: false when someone holds one (a reader, pg_dump, VACUUM).
 */
bool
QueueLockPartition(Pipeline *p, int slotno)
{
	if (p->queue_by_shard &&
		!ConditionalLockRelationOid(p->partitions[slotno], AccessExclusiveLock))
		return false;
	for (int j = 0; j < LeafCount(p); j++)
	{
		Oid			relid = Leaf(p, slotno, j);
		Relation	rel;
		Oid			toast;

		if (!ConditionalLockRelationOid(relid, AccessExclusiveLock))
			return false;
		rel = table_open(relid, NoLock);
		toast = rel->rd_rel->reltoastrelid;
		table_close(rel, NoLock);
		if (OidIsValid(toast) && !ConditionalLockRelationOid(toast, AccessExclusiveLock))
			return false;
	}
	return true;
}

/*
 * Young tells whether TRUNCATE need not give rel a new relfrozenxid and
 * relminmxid: whether they are within half of the ages at which autovacuum
 * would force a vacuum on it.  A partition emptied in place keeps its old
 * ones, and the queue's partitions are never autovacuumed otherwise.
 */
static bool
Young(Relation rel)
{
	TransactionId xid_limit = ReadNextTransactionId() - autovacuum_freeze_max_age / 2;
	MultiXactId mxid_limit = ReadNextMultiXactId() - autovacuum_multixact_freeze_max_age / 2;

	if (!TransactionIdIsNormal(xid_limit))
		xid_limit = FirstNormalTransactionId;
	if (mxid_limit < FirstMultiXactId)
		mxid_limit = FirstMultiXactId;
	return !(TransactionIdIsNormal(rel->rd_rel->relfrozenxid) &&
			 TransactionIdPrecedes(rel->rd_rel->relfrozenxid, xid_limit)) &&
		!(MultiXactIdIsValid(rel->rd_rel->relminmxid) &&
		  MultiXactIdPrecedes(rel->rd_rel->relminmxid, mxid_limit));
}

/*
 * InsertedEnd is the end of the WAL inserted so far.  Where the last record
 * ended on a page boundary, GetXLogInsertRecPtr points past the header of
 * the next page, which is not written yet and so cannot be flushed.
 */
static XLogRecPtr
InsertedEnd(void)
{
	XLogRecPtr	ptr = GetXLogInsertRecPtr();

	if (XLogSegmentOffset(ptr, wal_segment_size) == SizeOfXLogLongPHD)
		return ptr - SizeOfXLogLongPHD;
	if (ptr % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		return ptr - SizeOfXLogShortPHD;
	return ptr;
}

/*
 * The largest partition ReuseInPlace empties page by page rather than cut:
 * where emptying its pages costs less than a look at every buffer header,
 * and its empty pages cost little to the scans that pass over them.
 */
#define QUEUE_REUSE_MAX_PAGES	Min(1024, NBuffers / 512)

/*
 * ReuseInPlace empties each page of a small drained partition where it
 * stands and tells the free space map that the pages are free, so that the
 * next rotation's rows fill them; true if it did, false when the partition
 * is better cut (QUEUE_REUSE_MAX_PAGES) or has a visibility map (someone
 * vacuumed it), whose bits a new row would have to clear.
 *
 * Cutting a relation's pages, in place or by TRUNCATE, drops its buffers
 * by a look at every buffer header of shared_buffers (outside recovery
 * PostgreSQL does not know a relation's size well enough to look up its
 * pages instead), once per rotation, which is once per producer commit
 * when commits are apart: 4 million headers at 32 GB.  Emptying the pages
 * costs a buffer and a WAL record of an empty page each, whatever
 * shared_buffers is.  A page's old rows are gone for good, as a cut's are:
 * the same conditions hold (EmptyInPlace).
 */
static bool
ReuseInPlace(Relation rel)
{
	BlockNumber nblocks = RelationGetNumberOfBlocks(rel);

	if (nblocks > QUEUE_REUSE_MAX_PAGES ||
		smgrexists(RelationGetSmgr(rel), VISIBILITYMAP_FORKNUM))
		return false;
	for (BlockNumber blk = 0; blk < nblocks; blk++)
	{
		Buffer		buf = ReadBufferExtended(rel, MAIN_FORKNUM, blk, RBM_ZERO_AND_LOCK, NULL);
		Page		page = BufferGetPage(buf);

		CHECK_FOR_INTERRUPTS();
		START_CRIT_SECTION();
		PageInit(page, BufferGetPageSize(buf), 0);
		MarkBufferDirty(buf);
		if (RelationNeedsWAL(rel))
			log_newpage_buffer(buf, true);
		END_CRIT_SECTION();
		RecordPageWithFreeSpace(rel, blk, PageGetHeapFreeSpace(page));
		UnlockReleaseBuffer(buf);
	}
	FreeSpaceMapVacuumRange(rel, 0, nblocks);
	return true;
}

/*
 * TruncateTriggered tells whether rel has TRUNCATE triggers, which must hear
 * of its emptying.
 */
static bool
TruncateTriggered(Relation rel)
{
	return rel->trigdesc && (rel->trigdesc->trig_truncate_before_statement ||
							 rel->trigdesc->trig_truncate_after_statement);
}

/*
 * HasTruncateTrigger tells the same of a partition whose tables are
 * emptied: PostgreSQL fires its triggers only when it is truncated itself.
 */
static bool
HasTruncateTrigger(Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	bool		has = TruncateTriggered(rel);

	table_close(rel, AccessShareLock);
	return has;
}

/*
 * EmptyInPlace empties a drained partition's pages where they stand
 * (ReuseInPlace) or cuts its heap to zero pages, as VACUUM cuts off a heap's
 * empty tail, and returns true; or returns false when TRUNCATE must empty
 * it.
 *
 * TRUNCATE would give the partition, its TOAST table and the TOAST index
 * new files and pg_class rows, so every rotation would create three files
 * and leave three dead catalog rows, each with its index entries, and
 * every session would rebuild the partition's relcache entry.  Cut in
 * place, the cut is WAL-logged and under the AccessExclusiveLock the caller
 * holds (QueueLockPartition), but not undone if the transaction rolls back:
 * hence only rows that every shard took in transactions committed before,
 * whose commits are flushed first (they may have committed asynchronously),
 * so that no crash can leave the rows cut and their drain lost.  A
 * retirement that rolls back is simply done again.  Its free space map
 * keeps its first pages, zeroed, as after VACUUM's cut.
 *
 * TRUNCATE still empties a partition that is not a bare heap of the heap
 * access method (an index someone added, its TOAST table holding pages),
 * one a publication or a TRUNCATE trigger would hear truncated, and one
 * whose relfrozenxid or relminmxid has grown old (Young), which TRUNCATE
 * renews.
 */
static bool
EmptyInPlace(Oid relid)
{
	Relation	rel = table_open(relid, AccessExclusiveLock);
	PublicationDesc pubdesc;
	bool		bare;

	RelationBuildPublicationDesc(rel, &pubdesc);
	bare = rel->rd_rel->relkind == RELKIND_RELATION &&
		rel->rd_rel->relam == HEAP_TABLE_AM_OID &&
		RelationGetIndexList(rel) == NIL &&
		!pubdesc.pubactions.pubtruncate &&
		!TruncateTriggered(rel) &&
		Young(rel);
	if (bare && OidIsValid(rel->rd_rel->reltoastrelid))
	{
		Relation	toast = table_open(rel->rd_rel->reltoastrelid, AccessExclusiveLock);

		bare = RelationGetNumberOfBlocks(toast) == 0 && Young(toast);
		table_close(toast, NoLock);
	}
	if (bare)
	{
		XLogFlush(InsertedEnd());
		if (!ReuseInPlace(rel))
			table_relation_nontransactional_truncate(rel);
		pgstat_count_truncate(rel);
	}
	table_close(rel, NoLock);
	return bare;
}

/*
 * QueueRetire retires the partitions of rotations first to last, which every
 * shard has drained: it empties them, which returns their space at once,
 * and forgets the ledger tokens of the batches taken from them that are
 * applied.  No retry can stage those batches again: their events are gone
 * with the partitions.  Tokens still staged are forgotten by the retirement
 * of a later rotation.  drained_before says that the drains committed before
 * this transaction, so that a partition's tables may be emptied in place
 * (EmptyInPlace); otherwise, where one of them cannot be, or where a
 * TRUNCATE trigger of the partition must hear of it, TRUNCATE of the
 * partition empties them all with this transaction.
 */
void
QueueRetire(Pipeline *p, int64 first, int64 last, bool drained_before)
{
	Assert(p->progress_locked);
	Assert(first <= last && last - first < EXACTONCE_PARTITIONS);
	for (int64 rotation = first; rotation <= last; rotation++)
	{
		int			slotno = (int) (rotation % EXACTONCE_PARTITIONS);

		bool		in_place = drained_before &&
		!(p->queue_by_shard && HasTruncateTrigger(p->partitions[slotno]));

		/* what one table cannot have, TRUNCATE of the partition gives all */
		for (int j = 0; j < LeafCount(p) && in_place; j++)
			in_place = EmptyInPlace(Leaf(p, slotno, j));
		if (!in_place &&
			SPI_execute(psprintf("TRUNCATE %s.%s", quote_identifier(p->name),
								 quote_identifier(psprintf("ingest_%d", slotno))),
						false, 0) < 0)
			elog(ERROR, "could not truncate queue partition %d of pipeline \"%s\"",
				 slotno, p->name);
	}
	LedgerCollect(p, EXACTONCE_SOURCE_QUEUE, last);
}
