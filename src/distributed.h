/*-------------------------------------------------------------------------
 *
 * distributed.h
 *		Key-sharded pipelines over several servers, on postgres_fdw.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_DISTRIBUTED_H
#define EXACTONCE_DISTRIBUTED_H

#include "exactonce.h"

extern bool DistributedRun(const char *name, const char *action, bool force, int64 *result);

#endif							/* EXACTONCE_DISTRIBUTED_H */
