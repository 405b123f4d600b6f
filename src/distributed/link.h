/*-------------------------------------------------------------------------
 *
 * link.h
 *		The coordinator's connections to the nodes, in the caller's
 *		transaction.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_LINK_H
#define EXACTONCE_LINK_H

#include "lib/stringinfo.h"
#include "libpq-fe.h"

#define LINK_CHUNK		65536	/* bytes of COPY data sent at once */
/*
 * A connection to a node as a pipeline's owner, kept across transactions.
 * depth is the producer's transaction level its own transaction follows: 0
 * none, 1 the top, n with the savepoints s2 .. sn.  The statements that
 * start the node's transaction and its savepoints are owed until the next
 * one is sent, and go with it: a statement that sends events pays one
 * round trip, not three.
 */
typedef struct Link
{
	Oid			owner;			/* hash key: owner, then server */
	Oid			serverid;
	PGconn	   *conn;
	char		servername[NAMEDATALEN];
	int			depth;
	bool		open;			/* the node's transaction was started */
	StringInfoData owed;		/* statements to send before the next */
	bool		copying;		/* a COPY into the node's queue is open */
	bool		starting;		/* ... and the node has not answered yet */
	bool		ending;			/* a COPY was ended; its result is due */
	bool		binary;			/* the COPY open is in binary format */
	char	   *copy_sql;		/* its statement, in TopMemoryContext */
	bool		doomed;			/* events of this transaction were lost */
	bool		stale;			/* server or mapping changed: reconnect */
	StringInfoData buf;			/* COPY data not sent yet */
} Link;

extern Link *LinkGet(Oid owner, const char *servername);
extern void LinkPut(Link *link);
extern void LinkEndCopies(void);
extern void LinkStart(Link *link, const char *sql);
extern void LinkCopy(Link *link, const char *sql, bool binary);
extern void LinkLost(Link *link) pg_attribute_noreturn();

#endif							/* EXACTONCE_LINK_H */
