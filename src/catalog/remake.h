/*-------------------------------------------------------------------------
 *
 * remake.h
 *		What was made on a relation that exactonce drops and makes again.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_REMAKE_H
#define EXACTONCE_REMAKE_H

#include "nodes/pg_list.h"

/* What RemakeKeep kept of a relation, to make again on its successor. */
typedef struct RemakeKept
{
	char	   *relname;
	List	   *triggers;		/* CREATE TRIGGER statements */
	List	   *grants;			/* GRANT statements */
	char		relkind;
	char	   *settings;		/* ALTER ... SET (its storage parameters), or
								 * NULL */
} RemakeKept;

extern RemakeKept *RemakeKeep(Oid relid, const char *command);
extern void RemakeRestore(RemakeKept *kept, Oid nspid, const char *command);

#endif							/* EXACTONCE_REMAKE_H */
