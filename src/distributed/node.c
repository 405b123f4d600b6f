/*-------------------------------------------------------------------------
 *
 * node.c
 *		The nodes of a distributed pipeline, reached with libpq.
 *
 * The nodes are reached through libpq, the way postgres_fdw connects, to
 * create, drop, flush, pause and resume the pipeline on each, and to move
 * keys (move.c): always with the foreign server's user mapping of the
 * pipeline's owner, whoever calls, never the caller's, so that a superuser
 * who flushes a role's pipeline runs nothing on a node with more rights
 * than that role's mapping gives.  An owner that is not a superuser must
 * connect with the password of its mapping, as postgres_fdw demands, never
 * with the server's own credentials.  The wait for a node's answer is on
 * the latch, so a cancel or statement_timeout interrupts it and cancels the
 * statement there; the connection itself waits at most the server's
 * connect_timeout.  What is sent while failing already (a cancel, a
 * rollback) waits for the node at most NODE_QUIET_MS and raises nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/defrem.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/lsyscache.h"

#include "distributed/node.h"

/*
 * CheckPassword insists, as postgres_fdw does, that an owner that is not a
 * superuser connects with a password of its own user mapping, unless a
 * superuser set password_required 'false' there: otherwise libpq could
 * authenticate it with the server's own credentials (a .pgpass of the
 * operating system user, peer or trust authentication).
 */
static void
CheckPassword(UserMapping *um, Oid owner, const char *servername)
{
	ListCell   *lc;
	bool		required = true;

	foreach(lc, um->options)
	{
		DefElem    *d = lfirst_node(DefElem, lc);

		if (strcmp(d->defname, "password") == 0 && defGetString(d)[0] != '\0')
			return;
		if (strcmp(d->defname, "password_required") == 0)
			required = defGetBoolean(d);
	}
	if (required)
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required"),
				 errdetail("The nodes are reached as the pipeline's owner, role \"%s\", which is not a superuser and connects only with a password of its user mapping.",
						   GetUserNameFromId(owner, false)),
				 errhint("Add a password to the user mapping for server \"%s\".", servername)));
}

/*
 * ConnectDeadline is when a connection attempt begun now gives up under
 * connect_timeout (the servers' option, the environment's or a service
 * file's, as libpq took it), or 0 for never.  libpq gives each host its
 * own connect_timeout (at least 2 s); so does this, all hosts together.
 */
static TimestampTz
ConnectDeadline(PGconn *conn)
{
	PQconninfoOption *opts = PQconninfo(conn);
	long		seconds = 0;
	int			hosts = 1;

	for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++)
	{
		if (o->val == NULL)
			continue;
		if (strcmp(o->keyword, "connect_timeout") == 0)
			seconds = strtol(o->val, NULL, 10);
		else if (strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0)
		{
			int			n = 1;

			for (const char *c = o->val; *c; c++)
				n += *c == ',';
			hosts = Max(hosts, n);
		}
	}
	PQconninfoFree(opts);
	if (seconds <= 0)
		return 0;
	/* at most a day a host: no overflow, and no wait that long matters */
	seconds = Min(Max(seconds, 2), SECS_PER_DAY) * hosts;
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seconds * 1000);
}

/*
 * ConnectPoll takes a connection begun with PQconnectStartParams as far as
 * it goes before deadline (0: none), waiting on the latch and the socket,
 * and returns where it stands.  Interruptible, a cancel, a timeout or a
 * shutdown ends the wait with an error; otherwise only deadline does (for
 * a caller that is failing already).
 */
static PostgresPollingStatusType
ConnectPoll(PGconn *conn, TimestampTz deadline, bool interruptible)
{
	PostgresPollingStatusType status = PGRES_POLLING_WRITING;

	while (PQstatus(conn) != CONNECTION_BAD &&
		   status != PGRES_POLLING_OK && status != PGRES_POLLING_FAILED)
	{
		long		timeout = -1;
		int			rc;

		if (deadline != 0)
		{
			timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
			if (timeout <= 0)
				break;
		}
		rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH |
							   (deadline != 0 ? WL_TIMEOUT : 0) |
							   (status == PGRES_POLLING_READING ? WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE),
							   PQsocket(conn), timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (interruptible)
			CHECK_FOR_INTERRUPTS();
		if (rc & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE))
			status = PQconnectPoll(conn);
	}
	return PQstatus(conn) == CONNECTION_BAD ? PGRES_POLLING_FAILED : status;
}

/*
 * NodeConnectWait opens a connection as PQconnectdbParams does, but waits
 * for the node on the latch and the socket, so that a cancel, a timeout or
 * a shutdown interrupts the wait: a node that stops answering (a process
 * stopped, a network that drops what it is sent) holds the backend no
 * longer than its statement_timeout, where libpq's own wait would hold it
 * until the node answered.  connect_timeout, which libpq keeps only in its
 * own wait, bounds this one (ConnectDeadline).
 */
static PGconn *
NodeConnectWait(const char **keywords, const char **values, const char *servername)
{
	PGconn	   *volatile conn = PQconnectStartParams(keywords, values, false);
	volatile PostgresPollingStatusType status = PGRES_POLLING_FAILED;

	if (conn == NULL || PQstatus(conn) == CONNECTION_BAD)
		return conn;
	PG_TRY();
	{
		status = ConnectPoll(conn, ConnectDeadline(conn), true);
	}
	PG_CATCH();
	{
		PQfinish(conn);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (status != PGRES_POLLING_OK && status != PGRES_POLLING_FAILED)
	{
		PQfinish(conn);
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to server \"%s\"", servername),
				 errdetail("The node did not answer within the server's connect_timeout.")));
	}
	return conn;
}

/*
 * NodeConnect connects to the node of a postgres_fdw foreign server with
 * the user mapping of owner, the pipeline's owner, whoever the caller is.
 */
PGconn *
NodeConnect(Oid owner, const char *servername)
{
	ForeignServer *server = GetForeignServerByName(servername, false);
	ForeignDataWrapper *fdw = GetForeignDataWrapper(server->fdwid);
	UserMapping *um;
	PQconninfoOption *known = PQconndefaults();
	const char **keywords;
	const char **values;
	int			n = 0;
	List	   *options;
	ListCell   *lc;
	PGconn	   *conn;

	if (strcmp(fdw->fdwname, "postgres_fdw") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("server \"%s\" is not a postgres_fdw server", servername)));
	if (pg_foreign_server_aclcheck(server->serverid, owner, ACL_USAGE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for foreign server %s", servername),
				 errdetail("The nodes are reached as the pipeline's owner, role \"%s\".",
						   GetUserNameFromId(owner, false))));
	um = GetUserMapping(owner, server->serverid);
	if (!superuser_arg(owner))
		CheckPassword(um, owner, servername);
	options = list_concat(list_copy(server->options), um->options);
	keywords = palloc(sizeof(char *) * (list_length(options) + 3));
	values = palloc(sizeof(char *) * (list_length(options) + 3));

	/* the options libpq knows; postgres_fdw's own ones are not for it */
	foreach(lc, options)
	{
		DefElem    *d = lfirst_node(DefElem, lc);

		for (PQconninfoOption *o = known; o != NULL && o->keyword != NULL; o++)
			if (strcmp(o->keyword, d->defname) == 0 && strchr(o->dispchar, 'D') == NULL)
			{
				keywords[n] = d->defname;
				values[n++] = defGetString(d);
				break;
			}
	}
	keywords[n] = "fallback_application_name";
	values[n++] = "exactonce";
	keywords[n] = "client_encoding";
	values[n++] = GetDatabaseEncodingName();
	keywords[n] = NULL;
	values[n] = NULL;
	PQconninfoFree(known);

	conn = NodeConnectWait(keywords, values, servername);
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
	{
		char	   *msg = conn ? pchomp(PQerrorMessage(conn)) : "out of memory";

		PQfinish(conn);
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to server \"%s\"", servername),
				 errdetail_internal("%s", msg)));
	}
	if (!superuser_arg(owner) && !PQconnectionUsedPassword(conn))
	{
		PQfinish(conn);
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required"),
				 errdetail("The pipeline's owner, role \"%s\", is not a superuser, and server \"%s\" did not ask for a password.",
						   GetUserNameFromId(owner, false), servername),
				 errhint("The user mapping for server \"%s\" must carry a password the node asks for.",
						 servername)));
	}
	/* every wait on a node is on the latch: libpq must never block */
	if (PQsetnonblocking(conn, 1) != 0)
	{
		PQfinish(conn);
		elog(ERROR, "could not make the connection to server \"%s\" nonblocking", servername);
	}
	return conn;
}

/*
 * NodeFlush sends what conn holds unsent, waiting on the latch and the
 * socket while the node takes no more, so that a cancel, a timeout or a
 * shutdown interrupts the wait: false if the connection failed.  What the
 * node sends meanwhile is read, as libpq asks of a nonblocking connection:
 * a node writing its notices may not be reading until they are.
 */
bool
NodeFlush(PGconn *conn)
{
	int			flushed;

	while ((flushed = PQflush(conn)) == 1)
	{
		int			rc = WaitLatchOrSocket(MyLatch,
										   WL_LATCH_SET | WL_SOCKET_WRITEABLE | WL_SOCKET_READABLE |
										   WL_EXIT_ON_PM_DEATH,
										   PQsocket(conn), -1L, PG_WAIT_EXTENSION);

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if ((rc & WL_SOCKET_READABLE) && !PQconsumeInput(conn))
			return false;
	}
	return flushed == 0;
}

/*
 * NodeResult waits for the last result of the query sent on conn, on the
 * latch and the socket, so that a cancel, a timeout or a shutdown
 * interrupts the wait.  What the connection has not sent yet is sent
 * first.  A COPY's start is returned as it comes: the data follow.
 */
static PGresult *
NodeResult(PGconn *conn)
{
	PGresult   *last = NULL;

	/*
	 * a failed connection's error is PQgetResult's: the node's own, if it
	 * sent one
	 */
	(void) NodeFlush(conn);
	for (;;)
	{
		PGresult   *res;

		while (PQisBusy(conn))
		{
			int			rc = WaitLatchOrSocket(MyLatch,
											   WL_LATCH_SET | WL_SOCKET_READABLE | WL_EXIT_ON_PM_DEATH,
											   PQsocket(conn), -1L, PG_WAIT_EXTENSION);

			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			/* connection trouble: PQgetResult says what */
			if ((rc & WL_SOCKET_READABLE) && !PQconsumeInput(conn))
				break;
		}
		res = PQgetResult(conn);
		if (res == NULL)
			return last;
		PQclear(last);
		last = res;
		if (PQresultStatus(res) == PGRES_COPY_IN || PQresultStatus(res) == PGRES_COPY_OUT)
			return res;
	}
}

/*
 * NodeRaise raises a node's error, or the connection's, with its SQLSTATE
 * (08006 for a lost connection), naming the server; it clears res.
 */
static void
NodeRaise(PGconn *conn, const char *servername, PGresult *res)
{
	char	   *error;
	int			code = ERRCODE_FDW_ERROR;
	const char *sqlstate;

	error = pchomp(res && PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res) : PQerrorMessage(conn));
	sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	if (sqlstate && strlen(sqlstate) == 5)
		code = MAKE_SQLSTATE(sqlstate[0], sqlstate[1], sqlstate[2], sqlstate[3], sqlstate[4]);
	else if (PQstatus(conn) == CONNECTION_BAD)
		code = ERRCODE_CONNECTION_FAILURE;
	PQclear(res);
	ereport(ERROR,
			(errcode(code),
			 errmsg("on server \"%s\": %s", servername, error)));
}

/*
 * NodeDrain reads what a node still answers on conn until it is done,
 * ending a COPY it waits on as failed and reading to the end of one it
 * sends, without raising an error and without taking interrupts (the
 * caller is failing already): 1 if every answer was a success, 0 if one
 * was an error, -1 if the connection failed or end passed.
 */
int
NodeDrain(PGconn *conn, TimestampTz end)
{
	int			ok = 1;

	for (;;)
	{
		int			flushed = PQflush(conn);
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), end);
		PGresult   *res;

		if (flushed < 0 || left <= 0)
			return -1;
		if (flushed == 0 && !PQisBusy(conn))
		{
			ExecStatusType status;
			int			len = -1;

			res = PQgetResult(conn);
			if (res == NULL)
				return ok;
			status = PQresultStatus(res);
			PQclear(res);
			if (status == PGRES_COPY_IN)
			{
				if (PQputCopyEnd(conn, "the statement at the coordinator failed") != 1)
					return -1;
			}
			else if (status == PGRES_COPY_OUT)
			{
				/* its rows, discarded, up to its end (-1) or what is here (0) */
				char	   *row;

				while ((len = PQgetCopyData(conn, &row, 1)) > 0)
					PQfreemem(row);
				if (len == -2)
					return -1;
			}
			else if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
				ok = 0;
			if (len != 0)
				continue;
		}
		(void) WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT |
								 WL_EXIT_ON_PM_DEATH | (flushed ? WL_SOCKET_WRITEABLE : 0),
								 PQsocket(conn), left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (!PQconsumeInput(conn))
			return -1;
	}
}

/*
 * NodeQuiet runs one statement with text parameters on conn, after what
 * the node still answers, as NodeDrain waits: true if it succeeded within
 * NODE_QUIET_MS.  It raises no error.
 */
bool
NodeQuiet(PGconn *conn, const char *sql, int nparams, const char **params)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), NODE_QUIET_MS);

	return NodeDrain(conn, end) >= 0 &&
		PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0) == 1 &&
		NodeDrain(conn, end) == 1;
}

/*
 * NodeCancel cancels the statement that conn's backend runs on the node,
 * as pg_cancel_backend() from a connection of its own to the same host and
 * port with the same options, waiting at most NODE_QUIET_MS in all and
 * raising nothing.  libpq's PQcancel would wait for the node's postmaster
 * without a bound and deaf to interrupts (PostgreSQL 15): a node that
 * stopped answering would hold the backend for good.
 */
static void
NodeCancel(PGconn *conn)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), NODE_QUIET_MS);
	PQconninfoOption *opts = PQconninfo(conn);
	const char *keywords[128];
	const char *values[128];
	int			n = 0;
	PGconn	   *c;
	char		pid[16];
	const char *params[1] = {pid};

	if (opts == NULL || PQbackendPID(conn) == 0)
	{
		PQconninfoFree(opts);
		return;
	}
	/* room for host, hostaddr, port and the end */
	for (PQconninfoOption *o = opts; o->keyword != NULL && n < lengthof(keywords) - 4; o++)
	{
		/* the host the backend is on, not another of a list */
		if (o->val == NULL || strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0 ||
			strcmp(o->keyword, "port") == 0)
			continue;
		keywords[n] = o->keyword;
		values[n++] = o->val;
	}
	keywords[n] = "host";
	values[n++] = PQhost(conn);
	if (PQhostaddr(conn) != NULL && PQhostaddr(conn)[0] != '\0')
	{
		keywords[n] = "hostaddr";
		values[n++] = PQhostaddr(conn);
	}
	keywords[n] = "port";
	values[n++] = PQport(conn);
	keywords[n] = NULL;
	values[n] = NULL;

	c = PQconnectStartParams(keywords, values, false);
	PQconninfoFree(opts);
	snprintf(pid, sizeof(pid), "%d", PQbackendPID(conn));

	/* logged in as conn was: with its password where it used one */
	if (c != NULL && ConnectPoll(c, end, false) == PGRES_POLLING_OK &&
		(!PQconnectionUsedPassword(conn) || PQconnectionUsedPassword(c)) &&
		PQsetnonblocking(c, 1) == 0 &&
		PQsendQueryParams(c, "SELECT pg_catalog.pg_cancel_backend($1::integer)", 1, NULL, params,
						  NULL, NULL, 0) == 1)
		(void) NodeDrain(c, end);
	PQfinish(c);
}

/*
 * NodeWait returns the result of what was sent on an open connection to the
 * node of a server, which the caller clears.  An error there is raised
 * here, with its SQLSTATE, naming the server; a lost connection is 08006.
 * Interrupted, it cancels the statement on the node.
 */
PGresult *
NodeWait(PGconn *conn, const char *servername)
{
	PGresult   *volatile res = NULL;

	PG_TRY();
	{
		res = NodeResult(conn);
	}
	PG_CATCH();
	{
		NodeCancel(conn);
		PQclear(res);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (res != NULL && (PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK ||
						PQresultStatus(res) == PGRES_COPY_IN || PQresultStatus(res) == PGRES_COPY_OUT))
		return res;
	NodeRaise(conn, servername, res);
	pg_unreachable();
}

/*
 * NodeRun runs one statement with text parameters on an open connection to
 * the node of a server and returns its result, as NodeWait does.
 */
PGresult *
NodeRun(PGconn *conn, const char *servername, const char *sql, int nparams, const char **params)
{
	if (!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))
		ereport(ERROR,
				(errcode(PQstatus(conn) == CONNECTION_BAD ? ERRCODE_CONNECTION_FAILURE : ERRCODE_FDW_ERROR),
				 errmsg("on server \"%s\": %s", servername, pchomp(PQerrorMessage(conn)))));
	return NodeWait(conn, servername);
}

/*
 * NodeValue returns column col of the first row of a result, or NULL.
 */
char *
NodeValue(PGresult *res, int col)
{
	if (PQntuples(res) == 0 || PQgetisnull(res, 0, col))
		return NULL;
	return pstrdup(PQgetvalue(res, 0, col));
}

/*
 * NodeExec runs one statement on the node of a server, on a connection of
 * its own with owner's user mapping, and returns the first column of its
 * first row (NULL if none).
 */
char *
NodeExec(Oid owner, const char *servername, const char *sql, int nparams, const char **params)
{
	PGconn	   *volatile conn = NodeConnect(owner, servername);
	char	   *volatile result = NULL;

	PG_TRY();
	{
		PGresult   *res = NodeRun(conn, servername, sql, nparams, params);

		result = NodeValue(res, 0);
		PQclear(res);
	}
	PG_FINALLY();
	{
		PQfinish(conn);
	}
	PG_END_TRY();
	return result;
}

/*
 * NodeCopy copies rows from one node to another: what out_sql (a COPY ...
 * TO STDOUT) sends on from is fed to in_sql (a COPY ... FROM STDIN) on to,
 * as it comes, a buffer at a time, sending no more while the second node
 * takes none.  Returns how many rows the second node took.  Every wait is
 * on the latch; an error on either node is raised naming it, and an
 * interrupt cancels the statements on both.
 */
int64
NodeCopy(PGconn *from, const char *fromserver, const char *out_sql,
		 PGconn *to, const char *toserver, const char *in_sql)
{
	StringInfoData buf;
	PGresult   *res;
	int64		rows;

	PQclear(NodeRun(to, toserver, in_sql, 0, NULL));
	PQclear(NodeRun(from, fromserver, out_sql, 0, NULL));
	initStringInfo(&buf);
	PG_TRY();
	{
		for (;;)
		{
			char	   *data;
			int			len = PQgetCopyData(from, &data, 1);

			if (len > 0)
			{
				appendBinaryStringInfo(&buf, data, len);
				PQfreemem(data);
			}
			CHECK_FOR_INTERRUPTS();
			if ((len < 0 && buf.len > 0) || buf.len >= NODE_COPY_BUFFER)
			{
				if (PQputCopyData(to, buf.data, buf.len) != 1 || !NodeFlush(to))
					NodeRaise(to, toserver, NULL);
				resetStringInfo(&buf);
			}
			if (len < 0)
				break;
			if (len > 0)
				continue;
			(void) WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_EXIT_ON_PM_DEATH,
									 PQsocket(from), -1L, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			if (!PQconsumeInput(from))
				NodeRaise(from, fromserver, NULL);
		}
	}
	PG_CATCH();
	{
		NodeCancel(to);
		NodeCancel(from);
		PG_RE_THROW();
	}
	PG_END_TRY();
	pfree(buf.data);
	/* the end of the COPY out, or its error */
	PQclear(NodeWait(from, fromserver));
	if (PQputCopyEnd(to, NULL) != 1)
		NodeRaise(to, toserver, NULL);
	res = NodeWait(to, toserver);
	rows = pg_strtoint64(PQcmdTuples(res)[0] ? PQcmdTuples(res) : "0");
	PQclear(res);
	return rows;
}
