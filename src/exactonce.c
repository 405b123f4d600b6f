/*-------------------------------------------------------------------------
 *
 * exactonce.c
 *		Module magic, settings and _PG_init.
 *
 * Loaded through shared_preload_libraries the module also starts the
 * background workers; loaded on demand every SQL function still works and
 * exactonce.flush() drains synchronously.
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
 * DefineSettings registers the exactonce.* settings that are not about fault
 * injection (fault.c owns those).
 */
static void
DefineSettings(void)
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
 * _PG_init registers settings, fault injection and monitoring.
 */
void
_PG_init(void)
{
	DefineSettings();
	FaultInit();
	MarkGUCPrefixReserved("exactonce");
	if (process_shared_preload_libraries_in_progress)
	{
		ShmemInit();
		WorkerInit();
	}
}
