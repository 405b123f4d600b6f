/*-------------------------------------------------------------------------
 *
 * node.h
 *		The nodes of a distributed pipeline, reached with libpq.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_NODE_H
#define EXACTONCE_NODE_H

#include "libpq-fe.h"
#include "utils/timestamp.h"

/* what a statement that is failing already waits for a node */
#define NODE_QUIET_MS	10000

/* the COPY data a copy between nodes gathers before it sends them on */
#define NODE_COPY_BUFFER	65536

extern PGconn *NodeConnect(Oid owner, const char *servername);
extern bool NodeFlush(PGconn *conn);
extern PGresult *NodeWait(PGconn *conn, const char *servername);
extern int	NodeDrain(PGconn *conn, TimestampTz end);
extern bool NodeQuiet(PGconn *conn, const char *sql, int nparams, const char **params);
extern PGresult *NodeRun(PGconn *conn, const char *servername, const char *sql,
						 int nparams, const char **params);
extern char *NodeValue(PGresult *res, int col);

extern int64 NodeCopy(PGconn *from, const char *fromserver, const char *out_sql,
					  PGconn *to, const char *toserver, const char *in_sql);
extern char *NodeExec(Oid owner, const char *servername, const char *sql,
					  int nparams, const char **params);

#endif							/* EXACTONCE_NODE_H */
