/*-------------------------------------------------------------------------
 *
 * link.c
 *		The coordinator's connections to the nodes, in the caller's
 *		transaction.
 *
 * A link is a connection to a node as a pipeline's owner (node.c), kept for
 * the session, on which the coordinator's ingest sends events and its
 * views read the nodes (forward.c).  A node's transaction starts with the
 * first statement sent on the link, at REPEATABLE READ (each node read
 * once per snapshot, as postgres_fdw does), follows the caller's
 * savepoints, and is committed just before the coordinator's, every node
 * asked at once; an error then aborts the coordinator's transaction.  If it
 * came after a node committed, the producer resends and the events that
 * reached that node are duplicates there.  A transaction that aborts closes
 * its links' connections, which aborts the nodes' transactions.  A server's
 * options or a user mapping changed: the links connect anew once idle.
 *
 * A statement's events go to its nodes side by side: each node's COPY is
 * started without waiting for its answer (the rows routed meanwhile wait
 * in the link's buffer), and at the statement's end every COPY is ended
 * before any result is waited for, so no node waits on another.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "distributed/link.h"
#include "distributed/node.h"

static HTAB *links = NULL;

/*
 * LinkSendQuiet sends a statement on a link after the statements it owes,
 * without raising an error: false if it could not.
 */
static bool
LinkSendQuiet(Link *link, const char *sql)
{
	bool		sent;

	if (link->owed.len > 0)
	{
		appendStringInfoString(&link->owed, sql);
		sql = link->owed.data;
	}
	sent = PQsendQuery(link->conn, sql) == 1;
	resetStringInfo(&link->owed);
	link->open = true;
	return sent;
}

/*
 * LinkQuiet fails what a link was doing for a failed statement, then runs
 * sql there, without raising an error, and tells whether it succeeded
 * within NODE_QUIET_MS.  A COPY the node has not started yet is failed by
 * NodeDrain once it has.
 */
static bool
LinkQuiet(Link *link, const char *sql)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), NODE_QUIET_MS);

	if (link->copying && !link->starting &&
		PQputCopyEnd(link->conn, "the statement at the coordinator failed") != 1)
		return false;
	link->copying = link->starting = link->ending = false;
	resetStringInfo(&link->buf);
	if (NodeDrain(link->conn, end) < 0 || !LinkSendQuiet(link, sql))
		return false;
	return NodeDrain(link->conn, end) == 1;
}

/*
 * LinkIdle forgets the transaction a link followed.
 */
static void
LinkIdle(Link *link)
{
	link->depth = 0;
	link->open = false;
	link->copying = link->starting = link->ending = false;
	resetStringInfo(&link->owed);
	resetStringInfo(&link->buf);
}

/*
 * LinkClose closes a link's connection; the node aborts what was open.
 */
static void
LinkClose(Link *link)
{
	PQfinish(link->conn);
	link->conn = NULL;
	LinkIdle(link);
}

/*
 * LinkLost raises the error of a link whose node could not be sent to or
 * read from, naming its server.
 */
void
LinkLost(Link *link)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("on server \"%s\": %s", link->servername, pchomp(PQerrorMessage(link->conn)))));
}

/*
 * LinkPut sends the COPY data gathered, once the node started the COPY,
 * waiting on the latch while the node cannot take more.
 */
void
LinkPut(Link *link)
{
	if (link->starting)
	{
		link->starting = false;
		PQclear(NodeWait(link->conn, link->servername));
	}
	if (link->buf.len > 0 && PQputCopyData(link->conn, link->buf.data, link->buf.len) != 1)
		LinkLost(link);
	resetStringInfo(&link->buf);
	if (!NodeFlush(link->conn))
		LinkLost(link);
}

/*
 * LinkSendCopyEnd sends the rest of the COPY open on a link and its end.
 */
static void
LinkSendCopyEnd(Link *link)
{
	static const int16 trailer = -1;
	int16		t = pg_hton16(trailer);

	if (!link->copying)
		return;
	if (link->binary)
		appendBinaryStringInfo(&link->buf, (char *) &t, sizeof(t));
	LinkPut(link);
	link->copying = false;
	if (PQputCopyEnd(link->conn, NULL) != 1)
		LinkLost(link);
	link->ending = true;
}

/*
 * LinkEnded waits for the result of a COPY ended on a link, and raises the
 * node's error if it refused the events.
 */
static void
LinkEnded(Link *link)
{
	if (!link->ending)
		return;
	link->ending = false;
	PQclear(NodeWait(link->conn, link->servername));
}

/*
 * LinkEndCopy ends the COPY open on a link, and raises the node's error
 * if it refused the events.
 */
static void
LinkEndCopy(Link *link)
{
	LinkSendCopyEnd(link);
	LinkEnded(link);
}

/*
 * LinkEndCopies ends the COPYs open on every link: each node is sent its
 * end before the first result is waited for.
 */
void
LinkEndCopies(void)
{
	HASH_SEQ_STATUS seq;
	Link	   *link;
	Link	  **busy;
	int			n = 0;

	if (links == NULL)
		return;
	busy = palloc(sizeof(Link *) * hash_get_num_entries(links));
	hash_seq_init(&seq, links);
	while ((link = hash_seq_search(&seq)) != NULL)
		if (link->conn != NULL && (link->copying || link->ending))
			busy[n++] = link;
	for (int i = 0; i < n; i++)
		LinkSendCopyEnd(busy[i]);
	for (int i = 0; i < n; i++)
		LinkEnded(busy[i]);
	pfree(busy);
}

/*
 * LinkSend sends a statement on a link after the statements it owes.
 */
static void
LinkSend(Link *link, const char *sql)
{
	LinkEndCopy(link);
	if (!LinkSendQuiet(link, sql))
		LinkLost(link);
}

/*
 * LinkStart sends a statement on a link, a COPY's for one, and waits until
 * the node has started it.
 */
void
LinkStart(Link *link, const char *sql)
{
	LinkSend(link, sql);
	PQclear(NodeWait(link->conn, link->servername));
}

/*
 * LinkCopy makes sure a COPY into the node by statement sql, in binary
 * format or text, is open on a link: if another is, it is ended first.  The
 * statement is sent without waiting for the node to start the COPY:
 * LinkPut does, before the first data.
 */
void
LinkCopy(Link *link, const char *sql, bool binary)
{
	static const char header[] = "PGCOPY\n\377\r\n";
	uint32		zero = 0;

	if (link->copying && strcmp(link->copy_sql, sql) == 0)
		return;
	LinkSend(link, sql);
	if (PQflush(link->conn) < 0)
		LinkLost(link);
	link->copying = link->starting = true;
	link->binary = binary;
	if (link->copy_sql)
		pfree(link->copy_sql);
	link->copy_sql = MemoryContextStrdup(TopMemoryContext, sql);
	resetStringInfo(&link->buf);
	if (binary)
	{
		appendBinaryStringInfo(&link->buf, header, sizeof(header)); /* with its \0 */
		appendBinaryStringInfo(&link->buf, (char *) &zero, sizeof(zero));	/* flags */
		appendBinaryStringInfo(&link->buf, (char *) &zero, sizeof(zero));	/* extension */
	}
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

	if (commit)
		LinkEndCopies();
	hash_seq_init(&seq, links);
	while ((link = hash_seq_search(&seq)) != NULL)
	{
		if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		{
			link->doomed = false;
			if (link->conn != NULL && link->open)
				LinkClose(link);
			else
				LinkIdle(link);
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
		if (!link->open)
		{
			/* nothing was sent: the node has no transaction to end */
			LinkIdle(link);
			continue;
		}
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
			if (!LinkSendQuiet(link, "COMMIT"))
			{
				hash_seq_term(&seq);
				LinkLost(link);
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
		LinkIdle(link);
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
			appendStringInfo(&link->owed, "RELEASE SAVEPOINT s%d; ", level);
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
Link *
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
		link->copy_sql = NULL;
		link->doomed = false;
		link->stale = false;
		initStringInfo(&link->buf);
		initStringInfo(&link->owed);
		LinkIdle(link);
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
	}
	if (link->depth == 0)
	{
		appendStringInfoString(&link->owed, "START TRANSACTION ISOLATION LEVEL REPEATABLE READ; ");
		link->depth = 1;
	}
	while (link->depth < level)
	{
		/*
		 * the rows from here on go after the savepoint, in a COPY of their
		 * own
		 */
		LinkEndCopy(link);
		appendStringInfo(&link->owed, "SAVEPOINT s%d; ", ++link->depth);
	}
	return link;
}
