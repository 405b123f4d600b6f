/*-------------------------------------------------------------------------
 *
 * distributed.h
 *		Key-sharded pipelines over several servers, on postgres_fdw.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_DISTRIBUTED_H
#define EXACTONCE_DISTRIBUTED_H

#include "libpq-fe.h"

#include "exactonce.h"

#define DIST_MAX_NODES	64

/* A distributed pipeline as its registry row has it. */
typedef struct Distributed
{
	char	   *name;
	Oid			owner;
	char	   *stale;			/* why the row outlived its schema, or NULL */
	bool		single;			/* a pipeline of one server has the name */
	int			nnodes;
	char	   *servers[DIST_MAX_NODES];
	int			ndims;
	char	   *dims[EXACTONCE_MAX_DIMENSIONS];
	int			nmeasures;		/* summed at the coordinator */
	char	   *measures[EXACTONCE_MAX_MEASURES];
	int			nminmax;		/* value or measures: min of mins, max of
								 * maxes */
	char	   *min_max[1 + EXACTONCE_MAX_MEASURES];
} Distributed;

extern bool DistributedRun(const char *name, const char *action, bool force, int64 *result);
extern bool DistributedLoad(const char *name, Distributed *d);
extern void DistributedOpen(const char *name, Distributed *d);
extern void DistributedForgetStale(const char *name);
extern char *DistributedPartitionDDL(Distributed *d, int m, int r, const char *server);
extern char *DistributedNodeDDL(Distributed *d, int i);
extern char *DistributedViewsDDL(Distributed *d);

extern PGconn *NodeConnect(Oid owner, const char *servername);
extern PGresult *NodeRun(PGconn *conn, const char *servername, const char *sql,
						 int nparams, const char **params);
extern char *NodeValue(PGresult *res, int col);

extern void MoveInit(void);

#endif							/* EXACTONCE_DISTRIBUTED_H */
