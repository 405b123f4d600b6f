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

extern PGconn *NodeConnect(Oid owner, const char *servername);
extern PGresult *NodeWait(PGconn *conn, const char *servername);
extern PGresult *NodeRun(PGconn *conn, const char *servername, const char *sql,
						 int nparams, const char **params);
extern char *NodeValue(PGresult *res, int col);

extern int64 NodeCopy(PGconn *from, const char *fromserver, const char *out_sql,
					  PGconn *to, const char *toserver, const char *in_sql);
extern char *NodeExec(Oid owner, const char *servername, const char *sql,
					  int nparams, const char **params);

#endif							/* EXACTONCE_NODE_H */
