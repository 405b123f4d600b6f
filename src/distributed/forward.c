/*-------------------------------------------------------------------------
 *
 * forward.c
 *		exactonce_forward: the coordinator's foreign tables on the nodes.
 *
 * The coordinator of a distributed pipeline reaches its nodes through
 * foreign tables of the wrapper exactonce_forward, each naming the
 * postgres_fdw server of its node (option server), on links (link.c) as
 * the pipeline's owner, whoever inserts or reads: a role with the right to
 * insert into the coordinator's ingest may insert into the pipeline's
 * queue, one that may read its views may read the nodes' cells, and
 * nothing more.  A table is only served if the registry row of the
 * pipeline its schema names has its owner and its server.
 *
 * Inserts: the partitions of ingest.  PostgreSQL's hash partitioning
 * routes each event of an INSERT or COPY to its key's partition; instead
 * of one round trip per row (what postgres_fdw does for COPY in PostgreSQL
 * 15), the events of a statement for one node go there as one binary COPY
 * into the node's queue, streamed as they come and ended with the
 * statement.  The producer sees one table and the counts of its rows; the
 * nodes see batches.  The queue itself cannot be read at the coordinator.
 *
 * Reads: the nodes' cells, distinct values, watermarks and rows of
 * exactonce.pipelines (options schema_name, table_name), which the views
 * aggregates, nodes and windows combine.  A scan copies the remote table's
 * columns out in binary, each cast on the node to the local column's
 * type, into a tuplestore, so the link is free again for the statement's
 * inserts.
 *
 * Errors name the node's server, also when it goes away mid-statement.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_table.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "foreign/fdwapi.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "miscadmin.h"
#include "nodes/plannodes.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "optimizer/restrictinfo.h"
#include "pgstat.h"
#include "port/pg_bswap.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

#include "catalog/statement.h"
#include "distributed/coordinator.h"
#include "distributed/forward.h"
#include "distributed/link.h"
#include "distributed/node.h"

PG_FUNCTION_INFO_V1(exactonce_forward_handler);
PG_FUNCTION_INFO_V1(exactonce_forward_validator);

/* A partition being inserted into: its node and how its rows are sent. */
typedef struct Target
{
	Link	   *link;
	char	   *copy_sql;
	int			natts;
	AttrNumber *attnums;
	FmgrInfo   *send;
	Oid		   *types;			/* written directly: text, int8, bool,
								 * timestamptz; others by their send */
	MemoryContext rowcxt;
} Target;

/* A foreign table of exactonce_forward: its options, checked. */
typedef struct Remote
{
	char	   *pipeline;		/* the schema's name */
	char	   *server;
	char	   *schema_name;	/* the relation read, if one is */
	char	   *table_name;
	Link	   *link;
} Remote;

/*
 * RemoteOpen checks a foreign table of exactonce_forward and returns the
 * link to its node: the registry row of the pipeline its schema names must
 * have its owner and its server.
 */
static Remote
RemoteOpen(Relation rel)
{
	ForeignTable *ft = GetForeignTable(RelationGetRelid(rel));
	Remote		r = {0};
	Distributed d;
	bool		ok = false;
	int			nestlevel;
	ListCell   *lc;

	r.pipeline = get_namespace_name(RelationGetNamespace(rel));
	foreach(lc, ft->options)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (strcmp(def->defname, "server") == 0)
			r.server = defGetString(def);
		else if (strcmp(def->defname, "schema_name") == 0)
			r.schema_name = defGetString(def);
		else if (strcmp(def->defname, "table_name") == 0)
			r.table_name = defGetString(def);
	}
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	if (CoordinatorLoad(r.pipeline, &d) && d.owner == rel->rd_rel->relowner && r.server != NULL)
		for (int i = 0; i < d.nnodes; i++)
			ok |= strcmp(d.servers[i], r.server) == 0;
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("foreign table \"%s.%s\" is not a table of a distributed pipeline",
						r.pipeline, RelationGetRelationName(rel)),
				 errdetail("exactonce_forward serves only a node of the pipeline named by the table's schema, and only a table of the pipeline's owner.")));
	r.link = LinkGet(d.owner, r.server);
	return r;
}

/*
 * ForwardIngestLink checks a partition of a coordinator's ingest, a foreign
 * table of exactonce_forward, and returns the link to its node.
 */
Link *
ForwardIngestLink(Relation rel)
{
	Remote		r = RemoteOpen(rel);

	if (r.table_name != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("foreign table \"%s.%s\" cannot be inserted into", r.pipeline, RelationGetRelationName(rel)),
				 errdetail("It reads a node's %s; only the partitions of ingest take events.", r.table_name)));
	return r.link;
}

/*
 * TargetOpen readies a partition of ingest for the events routed to it.
 */
static Target *
TargetOpen(Relation rel, CmdType operation)
{
	Target	   *t;
	TupleDesc	desc = RelationGetDescr(rel);
	StringInfoData sql;

	if (operation != CMD_INSERT)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("events in \"%s\" can only be inserted", RelationGetRelationName(rel)),
				 errdetail("It is the coordinator's queue of a distributed pipeline; its nodes hold the events.")));
	t = palloc0(sizeof(Target));
	t->link = ForwardIngestLink(rel);
	t->attnums = palloc(sizeof(AttrNumber) * desc->natts);
	t->send = palloc(sizeof(FmgrInfo) * desc->natts);
	t->types = palloc(sizeof(Oid) * desc->natts);
	initStringInfo(&sql);
	appendStringInfo(&sql, "COPY %s.ingest (", quote_identifier(get_namespace_name(RelationGetNamespace(rel))));
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Oid			sendfn;
		bool		varlena;

		if (att->attisdropped || att->attgenerated)
			continue;
		getTypeBinaryOutputInfo(att->atttypid, &sendfn, &varlena);
		fmgr_info(sendfn, &t->send[t->natts]);
		t->types[t->natts] = att->atttypid;
		t->attnums[t->natts] = att->attnum;
		appendStringInfo(&sql, "%s%s", t->natts > 0 ? ", " : "", quote_identifier(NameStr(att->attname)));
		t->natts++;
	}
	appendStringInfoString(&sql, ") FROM STDIN (FORMAT binary)");
	t->copy_sql = sql.data;
	t->rowcxt = AllocSetContextCreate(CurrentMemoryContext, "exactonce forward row", ALLOCSET_DEFAULT_SIZES);
	return t;
}

/*
 * AppendField appends one field of binary COPY: its length, then its bytes.
 */
static inline void
AppendField(StringInfo buf, const char *data, int32 len)
{
	int32		n = pg_hton32(len);

	enlargeStringInfo(buf, sizeof(n) + len);
	memcpy(buf->data + buf->len, &n, sizeof(n));
	memcpy(buf->data + buf->len + sizeof(n), data, len);
	buf->len += sizeof(n) + len;
	buf->data[buf->len] = '\0';
}

/*
 * ForwardInsert appends an event to its node's COPY.  The columns of the
 * queue's usual types are written as their send functions would write
 * them (text as is: the connection's encoding is the database's), without
 * allocating; others go through their send function.
 */
static TupleTableSlot *
ForwardInsert(EState *estate, ResultRelInfo *rinfo, TupleTableSlot *slot, TupleTableSlot *planSlot)
{
	Target	   *t = rinfo->ri_FdwState;
	StringInfo	buf = &t->link->buf;
	MemoryContext old;
	int16		n = pg_hton16((int16) t->natts);
	static const int32 null = -1;

	LinkCopy(t->link, t->copy_sql, true);
	slot_getallattrs(slot);
	old = MemoryContextSwitchTo(t->rowcxt);
	appendBinaryStringInfo(buf, (char *) &n, sizeof(n));
	for (int i = 0; i < t->natts; i++)
	{
		int			att = t->attnums[i] - 1;
		Datum		value = slot->tts_values[att];

		if (slot->tts_isnull[att])
		{
			int32		len = pg_hton32(null);

			appendBinaryStringInfo(buf, (char *) &len, sizeof(len));
			continue;
		}
		switch (t->types[i])
		{
			case TEXTOID:
				{
					text	   *v = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(value));

					AppendField(buf, VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v));
					break;
				}
			case INT8OID:
			case TIMESTAMPTZOID:
				{
					uint64		v = pg_hton64((uint64) DatumGetInt64(value));

					AppendField(buf, (char *) &v, sizeof(v));
					break;
				}
			case BOOLOID:
				{
					char		v = DatumGetBool(value) ? 1 : 0;

					AppendField(buf, &v, 1);
					break;
				}
			default:
				{
					bytea	   *b = SendFunctionCall(&t->send[i], value);

					AppendField(buf, VARDATA(b), VARSIZE(b) - VARHDRSZ);
					break;
				}
		}
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(t->rowcxt);
	if (buf->len >= LINK_CHUNK)
		LinkPut(t->link);
	return slot;
}

static void
ForwardBeginInsert(ModifyTableState *mtstate, ResultRelInfo *rinfo)
{
	ModifyTable *plan = (ModifyTable *) mtstate->ps.plan;

	if (plan != NULL && plan->onConflictAction != ONCONFLICT_NONE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("INSERT ... ON CONFLICT is not supported by a distributed pipeline's ingest"),
				 errdetail("Resent events are duplicates on the node of their key, which counts them once.")));
	rinfo->ri_FdwState = TargetOpen(rinfo->ri_RelationDesc, mtstate->operation);
}

static void
ForwardBeginModify(ModifyTableState *mtstate, ResultRelInfo *rinfo, List *fdw_private,
				   int subplan_index, int eflags)
{
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	ForwardBeginInsert(mtstate, rinfo);
}

/*
 * ForwardEnd ends the statement's COPY on the partition's node: the node
 * has the events, or the statement fails with its error.  The first
 * partition to end ends them all, so the nodes finish side by side.
 */
static void
ForwardEnd(EState *estate, ResultRelInfo *rinfo)
{
	if (rinfo->ri_FdwState != NULL)
		LinkEndCopies();
}

static int
ForwardUpdatable(Relation rel)
{
	return 1 << CMD_INSERT;
}

/* A scan of a node's relation: its rows, fetched at the first one. */
typedef struct Fetch
{
	Remote		remote;
	char	   *sql;
	FmgrInfo   *recv;
	Oid		   *ioparams;
	int32	   *typmods;
	bool		fetched;
	Tuplestorestate *rows;
	TupleTableSlot *mslot;
	MemoryContext rowcxt;
} Fetch;

/*
 * ForwardRelSize: a relation a node holds may be read; the queue is read on
 * each node.
 */
static void
ForwardRelSize(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid)
{
	ForeignTable *ft = GetForeignTable(foreigntableid);
	ListCell   *lc;

	foreach(lc, ft->options)
		if (strcmp(lfirst_node(DefElem, lc)->defname, "table_name") == 0)
	{
		baserel->rows = 1000;
		return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("the coordinator's ingest of a distributed pipeline cannot be read"),
			 errdetail("Its events are in the queues of the nodes, each drained there."),
			 errhint("The view nodes of the pipeline's schema shows each node's queue.")));
}

static void
ForwardPaths(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid)
{
	add_path(baserel, (Path *) create_foreignscan_path(root, baserel, NULL, baserel->rows, 10, 10 + baserel->rows,
													   NIL, baserel->lateral_relids, NULL, NIL));
}

static ForeignScan *
ForwardPlan(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid, ForeignPath *best_path,
			List *tlist, List *scan_clauses, Plan *outer_plan)
{
	/* every condition is checked here, on the rows fetched */
	return make_foreignscan(tlist, extract_actual_clauses(scan_clauses, false), baserel->relid,
							NIL, NIL, NIL, NIL, outer_plan);
}

/*
 * ForwardBeginScan readies the copy of a node's relation: its columns, by
 * the local names, each cast on the node to the local type.
 */
static void
ForwardBeginScan(ForeignScanState *node, int eflags)
{
	Relation	rel = node->ss.ss_currentRelation;
	TupleDesc	desc = RelationGetDescr(rel);
	Fetch	   *sc;
	StringInfoData sql;

	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	sc = palloc0(sizeof(Fetch));
	sc->remote = RemoteOpen(rel);
	sc->recv = palloc(sizeof(FmgrInfo) * desc->natts);
	sc->ioparams = palloc(sizeof(Oid) * desc->natts);
	sc->typmods = palloc(sizeof(int32) * desc->natts);
	initStringInfo(&sql);
	appendStringInfoString(&sql, "COPY (SELECT ");
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Oid			recvfn;

		getTypeBinaryInputInfo(att->atttypid, &recvfn, &sc->ioparams[i]);
		fmgr_info(recvfn, &sc->recv[i]);
		sc->typmods[i] = att->atttypmod;
		appendStringInfo(&sql, "%s%s::%s", i > 0 ? ", " : "",
						 att->attisdropped ? "NULL" : quote_identifier(NameStr(att->attname)),
						 format_type_extended(att->atttypid, att->atttypmod,
											  FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY));
	}
	appendStringInfo(&sql, " FROM %s.%s) TO STDOUT (FORMAT binary)",
					 quote_identifier(sc->remote.schema_name ? sc->remote.schema_name : sc->remote.pipeline),
					 quote_identifier(sc->remote.table_name));
	sc->sql = sql.data;
	sc->rowcxt = AllocSetContextCreate(CurrentMemoryContext, "exactonce forward scan row", ALLOCSET_DEFAULT_SIZES);
	/* here, in the query's context: the scan runs in each row's */
	sc->rows = tuplestore_begin_heap(false, false, work_mem);
	sc->mslot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	node->fdw_state = sc;
}

/*
 * FetchField reads one field of a row of binary COPY at *pos of msg.
 */
static Datum
FetchField(Fetch *sc, int i, const char *msg, int len, int *pos, bool *isnull, StringInfo field)
{
	int32		flen;
	Datum		value;

	if (*pos + 4 > len)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("a row from server \"%s\" ends early", sc->remote.server)));
	memcpy(&flen, msg + *pos, 4);
	flen = pg_ntoh32(flen);
	*pos += 4;
	*isnull = flen < 0;
	if (*isnull)
		return ReceiveFunctionCall(&sc->recv[i], NULL, sc->ioparams[i], sc->typmods[i]);
	if (flen > len - *pos)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("a row from server \"%s\" ends early", sc->remote.server)));
	resetStringInfo(field);
	appendBinaryStringInfo(field, msg + *pos, flen);
	*pos += flen;
	value = ReceiveFunctionCall(&sc->recv[i], field, sc->ioparams[i], sc->typmods[i]);
	if (field->cursor != field->len)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("a value from server \"%s\" is not in the format of its column", sc->remote.server)));
	return value;
}

/*
 * FetchRows copies the node's rows into a tuplestore.  Each message of the
 * copy holds whole rows (the first one after the header).
 */
static void
FetchRows(ForeignScanState *node, Fetch *sc)
{
	static const char signature[] = "PGCOPY\n\377\r\n";
	TupleDesc	desc = RelationGetDescr(node->ss.ss_currentRelation);
	Link	   *link = sc->remote.link;
	MemoryContext cxt = MemoryContextSwitchTo(node->ss.ps.state->es_query_cxt);
	Datum	   *values = palloc(sizeof(Datum) * desc->natts);
	bool	   *nulls = palloc(sizeof(bool) * desc->natts);
	StringInfoData field;
	StringInfoData message;
	bool		header = false;
	bool		done = false;

	initStringInfo(&field);
	LinkStart(link, sc->sql);
	initStringInfo(&message);
	for (;;)
	{
		char	   *msg;
		int			len = PQgetCopyData(link->conn, &msg, 1);
		int			pos = 0;

		if (len == 0)
		{
			(void) WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_EXIT_ON_PM_DEATH,
									 PQsocket(link->conn), -1L, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			if (!PQconsumeInput(link->conn))
				LinkLost(link);
			continue;
		}
		if (len == -1)
			break;
		if (len < 0)
			LinkLost(link);

		/* libpq's buffer, freed at once: the checks below may throw */
		resetStringInfo(&message);
		appendBinaryStringInfo(&message, msg, len);
		PQfreemem(msg);
		msg = message.data;
		if (!header)
		{
			int32		ext;

			if (len < 19 || memcmp(msg, signature, sizeof(signature)) != 0)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_ERROR),
						 errmsg("server \"%s\" sent no binary COPY", link->servername)));
			memcpy(&ext, msg + 15, 4);
			ext = pg_ntoh32(ext);
			/* a server the owner points anywhere may send anything */
			if (ext < 0 || ext > len - 19)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_ERROR),
						 errmsg("server \"%s\" sent a binary COPY header longer than its message", link->servername)));
			pos = 19 + ext;
			header = true;
		}
		while (pos + 2 <= len && !done)
		{
			int16		n;
			MemoryContext old;

			memcpy(&n, msg + pos, 2);
			n = pg_ntoh16(n);
			pos += 2;
			if (n == -1)
			{
				done = true;
				break;
			}
			if (n != desc->natts)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_ERROR),
						 errmsg("server \"%s\" sent rows of %d columns for %d", link->servername, n, desc->natts)));
			old = MemoryContextSwitchTo(sc->rowcxt);
			for (int i = 0; i < desc->natts; i++)
				values[i] = FetchField(sc, i, msg, len, &pos, &nulls[i], &field);
			MemoryContextSwitchTo(old);
			tuplestore_putvalues(sc->rows, desc, values, nulls);
			MemoryContextReset(sc->rowcxt);
		}
	}
	/* after the trailer, the end of the copy: its result, or the node's error */
	PQclear(NodeWait(link->conn, link->servername));
	pfree(field.data);
	pfree(message.data);
	MemoryContextSwitchTo(cxt);
}

static TupleTableSlot *
ForwardIterate(ForeignScanState *node)
{
	Fetch	   *sc = node->fdw_state;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;

	if (!sc->fetched)
	{
		FetchRows(node, sc);
		sc->fetched = true;
	}
	ExecClearTuple(slot);
	if (!tuplestore_gettupleslot(sc->rows, true, false, sc->mslot))
		return slot;
	slot_getallattrs(sc->mslot);
	memcpy(slot->tts_values, sc->mslot->tts_values, sizeof(Datum) * slot->tts_tupleDescriptor->natts);
	memcpy(slot->tts_isnull, sc->mslot->tts_isnull, sizeof(bool) * slot->tts_tupleDescriptor->natts);
	return ExecStoreVirtualTuple(slot);
}

static void
ForwardRescan(ForeignScanState *node)
{
	Fetch	   *sc = node->fdw_state;

	tuplestore_rescan(sc->rows);
}

static void
ForwardEndScan(ForeignScanState *node)
{
	Fetch	   *sc = node->fdw_state;

	if (sc == NULL)
		return;
	ExecDropSingleTupleTableSlot(sc->mslot);
	tuplestore_end(sc->rows);
}

Datum
exactonce_forward_handler(PG_FUNCTION_ARGS)
{
	FdwRoutine *r = makeNode(FdwRoutine);

	r->GetForeignRelSize = ForwardRelSize;
	r->GetForeignPaths = ForwardPaths;
	r->GetForeignPlan = ForwardPlan;
	r->BeginForeignScan = ForwardBeginScan;
	r->IterateForeignScan = ForwardIterate;
	r->ReScanForeignScan = ForwardRescan;
	r->EndForeignScan = ForwardEndScan;
	r->IsForeignRelUpdatable = ForwardUpdatable;
	r->BeginForeignModify = ForwardBeginModify;
	r->ExecForeignInsert = ForwardInsert;
	r->EndForeignModify = ForwardEnd;
	r->BeginForeignInsert = ForwardBeginInsert;
	r->EndForeignInsert = ForwardEnd;
	PG_RETURN_POINTER(r);
}

/*
 * exactonce_forward_validator: a foreign table of exactonce_forward names
 * the postgres_fdw server of its node, and the relation it reads there;
 * nothing else takes options.
 */
Datum
exactonce_forward_validator(PG_FUNCTION_ARGS)
{
	List	   *options = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			catalog = PG_GETARG_OID(1);
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (catalog != ForeignTableRelationId ||
			(strcmp(def->defname, "server") != 0 && strcmp(def->defname, "schema_name") != 0 &&
			 strcmp(def->defname, "table_name") != 0))
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("invalid option \"%s\"", def->defname),
					 errhint("A foreign table of exactonce_forward takes the options server (the postgres_fdw server of its node), and schema_name and table_name of the relation it reads there.")));
		if (strcmp(def->defname, "server") == 0)
			(void) GetForeignServerByName(defGetString(def), false);
	}
	PG_RETURN_VOID();
}
