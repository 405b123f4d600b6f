/*-------------------------------------------------------------------------
 *
 * forward.c
 *		The coordinator's ingest: each statement's events, one COPY per node.
 *
 * The partitions of a distributed pipeline's ingest are foreign tables of
 * the wrapper exactonce_forward, each naming the postgres_fdw server of its
 * node.  PostgreSQL's hash partitioning routes each event of an INSERT or
 * COPY to its key's partition, as before; instead of one round trip per
 * row (what postgres_fdw does for COPY in PostgreSQL 15), the events of a
 * statement for one node go there as one binary COPY into the node's queue,
 * streamed as they come, and ended with the statement.  The producer sees
 * one table and the counts of its rows; the nodes see batches.
 *
 * The node is reached as the pipeline's owner (node.c), whoever inserts:
 * a producer with the right to insert into the coordinator's ingest has
 * the right to insert into the pipeline's queue, and nothing more.  A
 * partition is only served if the pipeline's registry row names its owner
 * and its server.
 *
 * The events go in the producer's transaction.  A node's transaction
 * starts at its first statement, follows the producer's savepoints, and is
 * committed just before the coordinator's, one node after another, as
 * postgres_fdw does; an error then aborts the coordinator's transaction.  If
 * it came after a node committed, the producer resends the statement and
 * the events that reached that node are duplicates there.  A transaction
 * that aborts closes its connections, which aborts the nodes' transactions.
 * Errors name the node's server, also when it goes away mid-statement.
 *
 * The queue cannot be read at the coordinator: each node's is read there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "access/xact.h"
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
#include "pgstat.h"
#include "port/pg_bswap.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "catalog/statement.h"
#include "distributed/coordinator.h"
#include "distributed/node.h"

PG_FUNCTION_INFO_V1(exactonce_forward_handler);
PG_FUNCTION_INFO_V1(exactonce_forward_validator);

#define LINK_CHUNK		65536	/* bytes of COPY data sent at once */
#define LINK_QUIET_MS	10000	/* what an abort waits for a node */

/*
 * A connection to a node as a pipeline's owner, kept across transactions.
 * depth is the producer's transaction level its own transaction follows: 0
 * none, 1 the top, n with the savepoints s2 .. sn.
 */
typedef struct Link
{
	Oid			owner;			/* hash key: owner, then server */
	Oid			serverid;
	PGconn	   *conn;
	char		servername[NAMEDATALEN];
	int			depth;
	bool		copying;		/* a COPY into the node's queue is open */
	char	   *copy_sql;		/* its statement, in TopMemoryContext */
	bool		doomed;			/* events of this transaction were lost */
	bool		stale;			/* server or mapping changed: reconnect */
	StringInfoData buf;			/* COPY data not sent yet */
} Link;

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

static HTAB *links = NULL;

/*
 * LinkDrain reads what a node answers until it is done, ending a COPY it
 * still waits on as failed, without raising an error (for the abort
 * callbacks): 1 if every answer was a success, 0 if one was an error, -1 if
 * the connection failed or end passed.
 */
static int
LinkDrain(Link *link, TimestampTz end)
{
	int			ok = 1;

	for (;;)
	{
		int			flushed = PQflush(link->conn);
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), end);
		PGresult   *res;

		if (flushed < 0 || left <= 0)
			return -1;
		if (flushed == 0 && !PQisBusy(link->conn))
		{
			res = PQgetResult(link->conn);
			if (res == NULL)
				return ok;
			if (PQresultStatus(res) == PGRES_COPY_IN)
			{
				if (PQputCopyEnd(link->conn, "the statement at the coordinator failed") != 1)
					ok = -1;
			}
			else if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
				ok = 0;
			PQclear(res);
			if (ok < 0)
				return ok;
			continue;
		}
		(void) WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT |
								 WL_EXIT_ON_PM_DEATH | (flushed ? WL_SOCKET_WRITEABLE : 0),
								 PQsocket(link->conn), left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (!PQconsumeInput(link->conn))
			return -1;
	}
}

/*
 * LinkQuiet fails what a link was doing for a failed statement, then runs
 * sql there, without raising an error, and tells whether it succeeded
 * within LINK_QUIET_MS.
 */
static bool
LinkQuiet(Link *link, const char *sql)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), LINK_QUIET_MS);

	if (link->copying && PQputCopyEnd(link->conn, "the statement at the coordinator failed") != 1)
		return false;
	link->copying = false;
	resetStringInfo(&link->buf);
	if (LinkDrain(link, end) < 0 || !PQsendQuery(link->conn, sql))
		return false;
	return LinkDrain(link, end) == 1;
}

/*
 * LinkClose closes a link's connection; the node aborts what was open.
 */
static void
LinkClose(Link *link)
{
	PQfinish(link->conn);
	link->conn = NULL;
	link->depth = 0;
	link->copying = false;
	resetStringInfo(&link->buf);
}

/*
 * LinkPut sends the COPY data gathered, waiting on the latch while the
 * node cannot take more.
 */
static void
LinkPut(Link *link)
{
	int			rc;

	if (link->buf.len > 0 && PQputCopyData(link->conn, link->buf.data, link->buf.len) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not send events to server \"%s\": %s", link->servername,
						pchomp(PQerrorMessage(link->conn)))));
	resetStringInfo(&link->buf);
	while ((rc = PQflush(link->conn)) == 1)
	{
		(void) WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_WRITEABLE | WL_EXIT_ON_PM_DEATH,
								 PQsocket(link->conn), -1L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (rc < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not send events to server \"%s\": %s", link->servername,
						pchomp(PQerrorMessage(link->conn)))));
}

/*
 * LinkEndCopy ends the COPY open on a link, and raises the node's error
 * if it refused the events.
 */
static void
LinkEndCopy(Link *link)
{
	static const int16 trailer = -1;
	int16		t = pg_hton16(trailer);
	PGresult   *res;

	if (!link->copying)
		return;
	appendBinaryStringInfo(&link->buf, (char *) &t, sizeof(t));
	LinkPut(link);
	link->copying = false;
	if (PQputCopyEnd(link->conn, NULL) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not send events to server \"%s\": %s", link->servername,
						pchomp(PQerrorMessage(link->conn)))));
	res = NodeWait(link->conn, link->servername);
	PQclear(res);
}

/*
 * LinkRun runs a statement on a link's node, raising its error.
 */
static void
LinkRun(Link *link, const char *sql)
{
	PQclear(NodeRun(link->conn, link->servername, sql, 0, NULL));
}

/*
 * LinkXactCallback commits the nodes' transactions just before the
 * coordinator's, all at once, and closes the connections of one that
 * aborts.
 */
static void
LinkXactCallback(XactEvent event, void *arg)
{
	HASH_SEQ_STATUS seq;
	Link	   *link;
	bool		commit = event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT;

	hash_seq_init(&seq, links);
	while ((link = hash_seq_search(&seq)) != NULL)
	{
		if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		{
			link->doomed = false;
			if (link->conn != NULL && link->depth > 0)
				LinkClose(link);
			continue;
		}
		if (link->doomed && (commit || event == XACT_EVENT_PRE_PREPARE))
		{
			hash_seq_term(&seq);
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("events sent to server \"%s\" in this transaction were lost", link->servername),
					 errdetail("A savepoint rolled back at the coordinator could not be rolled back on the node.")));
		}
		if (link->conn == NULL || link->depth == 0)
			continue;
		if (event == XACT_EVENT_PRE_PREPARE)
		{
			hash_seq_term(&seq);
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot prepare a transaction that sent events to server \"%s\"", link->servername),
					 errdetail("Events sent through a distributed pipeline's coordinator are committed on its nodes with the coordinator's transaction.")));
		}
		if (commit)
		{
			LinkEndCopy(link);
			if (!PQsendQuery(link->conn, "COMMIT"))
			{
				hash_seq_term(&seq);
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("could not commit on server \"%s\": %s", link->servername,
								pchomp(PQerrorMessage(link->conn)))));
			}
		}
	}
	if (!commit)
		return;
	/* the answers, once every node was asked */
	hash_seq_init(&seq, links);
	while ((link = hash_seq_search(&seq)) != NULL)
	{
		if (link->conn == NULL || link->depth == 0)
			continue;
		link->depth = 0;
		PQclear(NodeWait(link->conn, link->servername));
	}
}

/*
 * LinkSubXactCallback follows the producer's savepoints on the nodes: a
 * rolled-back one takes back the events sent since.
 */
static void
LinkSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	HASH_SEQ_STATUS seq;
	Link	   *link;
	int			level = GetCurrentTransactionNestLevel();

	if (event != SUBXACT_EVENT_PRE_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB)
		return;
	hash_seq_init(&seq, links);
	while ((link = hash_seq_search(&seq)) != NULL)
	{
		if (link->conn == NULL || link->depth < level)
			continue;
		if (event == SUBXACT_EVENT_PRE_COMMIT_SUB)
		{
			LinkEndCopy(link);
			LinkRun(link, psprintf("RELEASE SAVEPOINT s%d", level));
		}
		else if (!LinkQuiet(link, psprintf("ROLLBACK TO SAVEPOINT s%d; RELEASE SAVEPOINT s%d", level, level)))
		{
			LinkClose(link);
			link->doomed = true;
			continue;
		}
		link->depth = level - 1;
	}
}

/*
 * LinkInvalidate marks every link to be connected anew once idle: a
 * server's options or a user mapping changed.
 */
static void
LinkInvalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	HASH_SEQ_STATUS seq;
	Link	   *link;

	hash_seq_init(&seq, links);
	while ((link = hash_seq_search(&seq)) != NULL)
		link->stale = true;
}

/*
 * LinkGet returns the link to a server's node as owner, connected, with a
 * transaction at the producer's level.
 */
static Link *
LinkGet(Oid owner, const char *servername)
{
	ForeignServer *server = GetForeignServerByName(servername, false);
	Oid			key[2] = {owner, server->serverid};
	Link	   *link;
	bool		found;
	int			level = GetCurrentTransactionNestLevel();

	if (links == NULL)
	{
		HASHCTL		ctl = {.keysize = sizeof(key),.entrysize = sizeof(Link),.hcxt = TopMemoryContext};

		links = hash_create("exactonce node links", 8, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		RegisterXactCallback(LinkXactCallback, NULL);
		RegisterSubXactCallback(LinkSubXactCallback, NULL);
		CacheRegisterSyscacheCallback(FOREIGNSERVEROID, LinkInvalidate, (Datum) 0);
		CacheRegisterSyscacheCallback(USERMAPPINGOID, LinkInvalidate, (Datum) 0);
	}
	link = hash_search(links, key, HASH_ENTER, &found);
	if (!found)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		link->conn = NULL;
		link->depth = 0;
		link->copying = false;
		link->copy_sql = NULL;
		link->doomed = false;
		link->stale = false;
		initStringInfo(&link->buf);
		MemoryContextSwitchTo(old);
	}
	strlcpy(link->servername, servername, NAMEDATALEN);
	if (link->doomed)
		ereport(ERROR,
				(errcode(ERRCODE_IN_FAILED_SQL_TRANSACTION),
				 errmsg("events sent to server \"%s\" in this transaction were lost", servername),
				 errhint("Roll back the transaction and send its events again.")));
	if (link->conn != NULL && link->depth == 0 &&
		(link->stale || PQstatus(link->conn) != CONNECTION_OK))
		LinkClose(link);
	if (link->conn == NULL)
	{
		link->stale = false;
		link->conn = NodeConnect(owner, servername);
		if (PQsetnonblocking(link->conn, 1) != 0)
		{
			LinkClose(link);
			elog(ERROR, "could not make the connection to server \"%s\" nonblocking", servername);
		}
	}
	if (link->depth == 0)
	{
		LinkRun(link, "START TRANSACTION");
		link->depth = 1;
	}
	while (link->depth < level)
	{
		LinkEndCopy(link);
		LinkRun(link, psprintf("SAVEPOINT s%d", link->depth + 1));
		link->depth++;
	}
	return link;
}

/*
 * TargetOpen readies a partition for the events routed to it: its node
 * must be one of its pipeline's, and the partition its owner's.
 */
static Target *
TargetOpen(Relation rel, CmdType operation)
{
	ForeignTable *ft = GetForeignTable(RelationGetRelid(rel));
	char	   *name = get_namespace_name(RelationGetNamespace(rel));
	char	   *servername = NULL;
	Distributed d;
	bool		ok = false;
	int			nestlevel;
	Target	   *t;
	TupleDesc	desc = RelationGetDescr(rel);
	StringInfoData sql;
	ListCell   *lc;

	if (operation != CMD_INSERT)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("events in \"%s\" can only be inserted", RelationGetRelationName(rel)),
				 errdetail("It is the coordinator's queue of a distributed pipeline; its nodes hold the events.")));
	foreach(lc, ft->options)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (strcmp(def->defname, "server") == 0)
			servername = defGetString(def);
	}
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	if (CoordinatorLoad(name, &d) && d.owner == rel->rd_rel->relowner && servername != NULL)
		for (int i = 0; i < d.nnodes; i++)
			ok |= strcmp(d.servers[i], servername) == 0;
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("foreign table \"%s.%s\" is not a partition of a distributed pipeline's ingest",
						name, RelationGetRelationName(rel)),
				 errdetail("Events go through exactonce_forward only to a node of the pipeline named by its schema, and only into a table of the pipeline's owner.")));

	t = palloc0(sizeof(Target));
	t->link = LinkGet(d.owner, servername);
	t->attnums = palloc(sizeof(AttrNumber) * desc->natts);
	t->send = palloc(sizeof(FmgrInfo) * desc->natts);
	t->types = palloc(sizeof(Oid) * desc->natts);
	initStringInfo(&sql);
	appendStringInfo(&sql, "COPY %s.ingest (", quote_identifier(name));
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
 * TargetCopy makes sure a COPY of the target's columns is open on its link.
 */
static void
TargetCopy(Target *t)
{
	static const char header[] = "PGCOPY\n\377\r\n";
	Link	   *link = t->link;
	PGresult   *res;
	uint32		zero = 0;

	if (link->copying && strcmp(link->copy_sql, t->copy_sql) == 0)
		return;
	LinkEndCopy(link);
	if (!PQsendQuery(link->conn, t->copy_sql))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not send events to server \"%s\": %s", link->servername,
						pchomp(PQerrorMessage(link->conn)))));
	res = NodeWait(link->conn, link->servername);
	PQclear(res);
	if (link->copy_sql)
		pfree(link->copy_sql);
	link->copy_sql = MemoryContextStrdup(TopMemoryContext, t->copy_sql);
	link->copying = true;
	resetStringInfo(&link->buf);
	appendBinaryStringInfo(&link->buf, header, sizeof(header)); /* with its \0 */
	appendBinaryStringInfo(&link->buf, (char *) &zero, sizeof(zero));	/* flags */
	appendBinaryStringInfo(&link->buf, (char *) &zero, sizeof(zero));	/* extension */
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

	TargetCopy(t);
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
 * has the events, or the statement fails with its error.
 */
static void
ForwardEnd(EState *estate, ResultRelInfo *rinfo)
{
	Target	   *t = rinfo->ri_FdwState;

	if (t != NULL)
		LinkEndCopy(t->link);
}

static int
ForwardUpdatable(Relation rel)
{
	return 1 << CMD_INSERT;
}

/*
 * ForwardRefuseScan: the queue is read on each node.
 */
static void
ForwardRefuseScan(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("the coordinator's ingest of a distributed pipeline cannot be read"),
			 errdetail("Its events are in the queues of the nodes, each drained there."),
			 errhint("The view nodes of the pipeline's schema shows each node's queue.")));
}

Datum
exactonce_forward_handler(PG_FUNCTION_ARGS)
{
	FdwRoutine *r = makeNode(FdwRoutine);

	r->GetForeignRelSize = ForwardRefuseScan;
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
 * the postgres_fdw server of its node; nothing else takes options.
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

		if (catalog != ForeignTableRelationId || strcmp(def->defname, "server") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("invalid option \"%s\"", def->defname),
					 errhint("A foreign table of exactonce_forward takes the option server, the postgres_fdw server of its node.")));
		(void) GetForeignServerByName(defGetString(def), false);
	}
	PG_RETURN_VOID();
}
