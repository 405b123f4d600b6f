/*-------------------------------------------------------------------------
 *
 * exactonce.c
 *		Module magic, settings and _PG_init.
 *
 * Loaded through shared_preload_libraries the module also starts the
 * background workers; loaded any other way (on first use, through
 * session_preload_libraries or local_preload_libraries, or after the preload
 * was removed) every SQL function still works, exactonce.flush() drains
 * synchronously, and exactonce.pipelines says that no worker runs.  The
 * settings that only the postmaster can take (exactonce.database and
 * exactonce.workers) exist only when preloaded: defining a PGC_POSTMASTER
 * setting after startup is an error, as pg_stat_statements guards too.
 *
 *-------------------------------------------------------------------------
 */
#include "exactonce.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

char	   *exactonce_database = NULL;
int			exactonce_workers = 2;
int			exactonce_batch_size = 10000;
int			exactonce_naptime = 1000;

void		_PG_init(void);

/*
 * DefineWorkerSettings registers the settings the postmaster reads to start
 * the workers; only while preloading.
 */
static void
DefineWorkerSettings(void)
{
	DefineCustomStringVariable("exactonce.database",
							   "Database whose pipelines the background workers drain.",
							   NULL,
							   &exactonce_database,
							   "postgres",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("exactonce.workers",
							"Number of drain workers per database.",
							"The shards of a pipeline are spread over them, so a pipeline with two shards uses two workers.",
							&exactonce_workers,
							2, 0, 64,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
}

/*
 * DefineSettings registers the exactonce.* settings every backend has, fault
 * injection aside (fault.c owns those).
 */
static void
DefineSettings(void)
{
	DefineCustomIntVariable("exactonce.batch_size",
							"Maximum number of events taken from a queue in one batch.",
							"Workers pick up a new value on reload; a session may set its own for flush().",
							&exactonce_batch_size,
							10000, 1, 1000000,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("exactonce.naptime",
							"Longest time an idle worker sleeps before looking at its queues again.",
							"Inserts wake the workers at once; this is only a safety net.",
							&exactonce_naptime,
							1000, 10, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/*
 * _PG_init registers the settings and, when preloaded, the shared memory and
 * the launcher of the workers.
 */
void
_PG_init(void)
{
	if (process_shared_preload_libraries_in_progress)
		DefineWorkerSettings();
	DefineSettings();
	FaultInit();
	MarkGUCPrefixReserved("exactonce");
	if (process_shared_preload_libraries_in_progress)
	{
		ShmemInit();
		WorkerInit();
	}
}
