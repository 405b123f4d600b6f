/*-------------------------------------------------------------------------
 *
 * coordinator.h
 *		Key-sharded pipelines over several servers, on postgres_fdw.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_COORDINATOR_H
#define EXACTONCE_COORDINATOR_H

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
	int			ndistinct;		/* counted over the union of the nodes' values
								 * of each cell */
	char	   *distincts[EXACTONCE_MAX_DISTINCT];
	char	   *window_width;	/* an interval, or NULL: no windows */
	char	   *lateness;		/* the allowed lateness, an interval */
} Distributed;

extern bool CoordinatorRun(const char *name, const char *action, bool force, int64 *result);
extern bool CoordinatorLoad(const char *name, Distributed *d);
extern void CoordinatorOpen(const char *name, Distributed *d);
extern void CoordinatorForgetStale(const char *name);
extern char *CoordinatorPartitionDDL(Distributed *d, int m, int r, const char *server);
extern char *CoordinatorNodeDDL(Distributed *d, int i);
extern char *CoordinatorViewsDDL(Distributed *d);

#endif							/* EXACTONCE_COORDINATOR_H */
