/*-------------------------------------------------------------------------
 *
 * init.c
 *		Module magic and _PG_init.
 *
 * Loaded through shared_preload_libraries the module also starts the
 * background workers; loaded any other way (on first use, through
 * session_preload_libraries or local_preload_libraries, or after the preload
 * was removed) every SQL function still works, exactonce.flush() drains
 * synchronously, and exactonce.pipelines says that no worker runs.  Each
 * subsystem registers its own settings, each defined in the file that owns
 * its meaning.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "catalog/utility.h"
#include "distributed/move.h"
#include "distributed/route.h"
#include "engine/drain.h"
#include "engine/feed.h"
#include "engine/queuecopy.h"
#include "utils/fault.h"
#include "utils/shmem.h"
#include "worker.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * _PG_init registers the settings and, when preloaded, the shared memory and
 * the launcher of the workers.
 */
void
_PG_init(void)
{
	DrainInit();
	FaultInit();
	FeedInit();
	MoveInit();
	RouteInit();
	/* after RouteInit: a COPY into a coordinator's ingest is routed */
	QueueCopyInit();
	UtilityInit();
	WorkerInit();
	MarkGUCPrefixReserved("exactonce");
	if (process_shared_preload_libraries_in_progress)
		ShmemInit();
}
