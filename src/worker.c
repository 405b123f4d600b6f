/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The launcher and the drain workers.
 *
 * The launcher (a static background worker) starts exactonce.workers drain
 * workers for each database in exactonce.database and restarts any that
 * exits.  A drain worker connects to its database and serves the key shards
 * of pipelines that ShmemWorkerServes assigns it: shard s of pipeline id goes to
 * worker (id + s) % workers, so every shard has exactly one drainer and the
 * shards of one pipeline spread over the workers.  Shards run state and map
 * in parallel; their reduces take turns on the pipeline's progress row
 * (drain.c), and flush() or an external caller queues behind the batches in
 * progress.
 *
 * A worker takes one step per shard per round (drain one batch and reduce
 * it, or finish a rotation), each in its own transaction and as the role
 * that owns the pipeline.  A step that fails is rolled back and the pipeline is
 * retried with exponential backoff (1 s doubling to 60 s) while the others go
 * on.  A worker with nothing to do sleeps on its latch, which the ingest
 * trigger sets; exactonce.naptime bounds the sleep as a safety net.
 *
 * Restart policy: drain workers are dynamic workers that are never restarted
 * by the postmaster; the launcher restarts them when they exit for any
 * reason: at once if the worker had run for a minute, otherwise after a
 * backoff of 1 s doubling to 10 s (a missing database, say, fails at once).  The launcher is
 * restarted by the postmaster 5 s after it dies; after a crash of any process
 * the postmaster restarts the launcher, which starts all drain workers anew.
 * SIGTERM ends a drain worker at once (die, as for a backend), also in a
 * lock wait: its open transaction rolls back and nothing is lost.  SIGHUP
 * reloads the configuration (exactonce.batch_size, exactonce.naptime, the
 * fault settings).
 *
 * No other session can hold a worker up for long: it skips shard rows that
 * are locked, gives up a pipeline's progress row after about a second
 * (DrainLockProgressPatiently in drain.c), and waits at most lock_timeout (WORKER_LOCK_TIMEOUT)
 * for any other lock.  Then it backs off that pipeline and serves the
 * others.  While the inserters of a rotated queue partition are still open
 * it looks again after 1 ms, doubling up to exactonce.naptime.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <unistd.h>

#include "access/xact.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/varlena.h"

#include "catalog/pipeline.h"
#include "catalog/shape.h"
#include "catalog/statement.h"
#include "engine/drain.h"
#include "engine/feed.h"
#include "utils/shmem.h"
#include "utils/wake.h"
#include "worker.h"

PGDLLEXPORT void exactonce_launcher_main(Datum arg);
PGDLLEXPORT void exactonce_drain_main(Datum arg);

/* settings: exactonce.database and exactonce.workers only when preloaded */
static char *exactonce_database = NULL;
static int	exactonce_workers = -1;
static int	exactonce_naptime = 1000;

static WorkerSlot *my_slot = NULL;

/* the launcher: drain workers it started for each database */
static int	launcher_nworkers = 0;

/* A shard of a pipeline: what a worker drains in one step. */
typedef struct WorkerUnit
{
	int32		id;
	int32		shard;
} WorkerUnit;

/* Backoff of each shard this worker serves, whatever their number; the
 * shared slot mirrors it (and latencies) per pipeline for the first few, for
 * the view. */
typedef struct Backoff
{
	WorkerUnit	unit;			/* hash key */
	uint64		round;			/* the last round that served the shard */
	int			failures;		/* consecutive failed steps */
	TimestampTz retry_at;		/* no step before this */
	SealState  *seal;			/* inserters the next drain waits for */
	TimestampTz trimmed_at;		/* last fold of the feed (shard 0) */
} Backoff;

static HTAB *backoffs = NULL;
static bool reset_caches = false;	/* a pipeline this worker served is gone */

static void WorkerRoom(void);

#define EXACTONCE_SEAL_POLL_MS	1	/* first sleep while waiting for inserters
									 * to end */
#define WORKER_LOCK_TIMEOUT		"1s"	/* longest wait for a lock another
										 * session holds */
#define WORKER_FEED_TRIM_MS		10000	/* how often the feed is folded */

/* What a step is working on, for the context line of its errors. */
typedef struct StepContext
{
	WorkerUnit *unit;
	const char *name;			/* of the pipeline, once loaded */
} StepContext;

/*
 * CheckDatabaseList is the check_hook of exactonce.database: a list of
 * database names, each at most once.  Whether they exist is the workers'
 * concern: a missing database makes its workers fail and retry with backoff.
 */
static bool
CheckDatabaseList(char **newval, void **extra, GucSource source)
{
	char	   *copy = pstrdup(*newval);
	List	   *names = NIL;
	ListCell   *lc;

	if (!SplitIdentifierString(copy, ',', &names))
	{
		GUC_check_errdetail("List syntax is invalid.");
		return false;
	}
	foreach(lc, names)
	{
		for (int i = 0; i < foreach_current_index(lc); i++)
			if (strcmp(list_nth(names, i), lfirst(lc)) == 0)
			{
				GUC_check_errdetail("Database \"%s\" is listed twice.", (char *) lfirst(lc));
				return false;
			}
	}
	list_free(names);
	pfree(copy);
	return true;
}

/*
 * WorkerInit registers the workers' settings and, when preloaded, the
 * launcher.  The settings only the postmaster can take exist only while
 * preloading: defining a PGC_POSTMASTER setting later is an error, which
 * would fail the session that loads the library.
 */
void
WorkerInit(void)
{
	BackgroundWorker bgw = {0};

	DefineCustomIntVariable("exactonce.naptime",
							"Longest time an idle worker sleeps before looking at its queues again.",
							"Inserts wake the workers at once; this is only a safety net.",
							&exactonce_naptime,
							1000, 10, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomStringVariable("exactonce.database",
							   "Databases whose pipelines the background workers drain, comma separated.",
							   NULL,
							   &exactonce_database,
							   "postgres",
							   PGC_POSTMASTER,
							   GUC_LIST_INPUT,
							   CheckDatabaseList, NULL, NULL);
	DefineCustomIntVariable("exactonce.workers",
							"Number of drain workers per database; -1 sizes them from the machine.",
							"-1: one per CPU core, at most half of max_worker_processes.  The shards of a pipeline are spread over them.",
							&exactonce_workers,
							-1, -1, EXACTONCE_MAX_WORKERS,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	snprintf(bgw.bgw_name, BGW_MAXLEN, "exactonce launcher");
	snprintf(bgw.bgw_type, BGW_MAXLEN, "exactonce launcher");
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = 5;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "exactonce");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "exactonce_launcher_main");
	RegisterBackgroundWorker(&bgw);
	WorkerRoom();
}


/*
 * WorkerCores is the number of CPU cores online, 2 where it cannot be told.
 */
static int
WorkerCores(void)
{
#ifdef _SC_NPROCESSORS_ONLN
	long		cores = sysconf(_SC_NPROCESSORS_ONLN);

	if (cores > 0)
		return (int) Min(cores, INT_MAX);
#endif
	return 2;
}

/*
 * WorkerRoom makes room for one drain worker per core when the server runs
 * with PostgreSQL's built-in max_worker_processes (8, which -1 would cap at
 * 4 workers): it raises it to two per core (at most two per worker slot),
 * so that parallel queries and other extensions keep the other half.  It
 * runs in the postmaster before shared memory is sized.  A value set
 * anywhere (postgresql.conf, ALTER SYSTEM, the command line) is kept, as
 * is everything when exactonce.workers is set.  The value set is a
 * computed default, so a later setting in the file still wins at the next
 * restart.
 */
static void
WorkerRoom(void)
{
	struct config_generic **vars = get_guc_variables();
	int			room = Min(2 * WorkerCores(), 2 * EXACTONCE_MAX_WORKERS);
	char		value[16];

	if (exactonce_workers >= 0 || room <= max_worker_processes)
		return;
	for (int i = 0; i < GetNumConfigOptions(); i++)
		if (strcmp(vars[i]->name, "max_worker_processes") == 0 &&
			vars[i]->source != PGC_S_DEFAULT)
			return;
	ereport(LOG,
			(errmsg("exactonce raises max_worker_processes from %d to %d, two per core, to start a drain worker per core",
					max_worker_processes, room),
			 errhint("Set max_worker_processes to keep another value; a standby needs at least its primary's.")));
	snprintf(value, sizeof(value), "%d", room);
	SetConfigOption("max_worker_processes", value, PGC_POSTMASTER, PGC_S_DYNAMIC_DEFAULT);
}

/*
 * WorkerCount is the number of drain workers for each of ndbs databases:
 * exactonce.workers, or with -1 one per CPU core, at most half of
 * max_worker_processes (parallel queries and other extensions draw on
 * those too), and never more than the slots of shared memory.
 */
static int
WorkerCount(int ndbs)
{
	int			n = exactonce_workers;

	if (n < 0)
		n = Max(1, Min(WorkerCores(), max_worker_processes / 2));
	return Min(n, EXACTONCE_MAX_WORKERS / Max(ndbs, 1));
}

/*
 * StartDrainWorker starts the drain worker of one slot.
 */
static BackgroundWorkerHandle *
StartDrainWorker(int slotno, const char *dbname)
{
	BackgroundWorker bgw = {0};
	BackgroundWorkerHandle *handle;

	snprintf(bgw.bgw_name, BGW_MAXLEN, "exactonce drain %s #%d", dbname,
			 exactonce_shared->slots[slotno].index);
	snprintf(bgw.bgw_type, BGW_MAXLEN, "exactonce drain");
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "exactonce");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "exactonce_drain_main");
	bgw.bgw_main_arg = Int32GetDatum(slotno);
	strlcpy(bgw.bgw_extra, dbname, BGW_EXTRALEN);
	bgw.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&bgw, &handle))
	{
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start exactonce drain worker for database \"%s\"", dbname),
				 errhint("Raise max_worker_processes.")));
		return NULL;
	}
	return handle;
}

/*
 * LauncherSlots gives each (database, worker index) a slot of shared
 * memory, WorkerCount per database, and returns how many.
 */
static int
LauncherSlots(List *dbs, char **dbnames)
{
	int			nworkers = WorkerCount(list_length(dbs));
	int			nslots = 0;
	ListCell   *lc;

	LWLockAcquire(exactonce_shared->lock, LW_EXCLUSIVE);
	for (int s = 0; s < EXACTONCE_MAX_WORKERS; s++)
	{
		memset(&exactonce_shared->slots[s], 0, sizeof(WorkerSlot));
		pg_atomic_init_u64(&exactonce_shared->slots[s].wakes, 0);
	}
	foreach(lc, dbs)
	{
		for (int i = 0; i < nworkers; i++)
		{
			WorkerSlot *slot = &exactonce_shared->slots[nslots];

			slot->index = i;
			slot->nworkers = nworkers;
			namestrcpy(&slot->dbname, lfirst(lc));
			dbnames[nslots++] = lfirst(lc);
		}
	}
	LWLockRelease(exactonce_shared->lock);
	launcher_nworkers = nworkers;
	if (exactonce_workers < 0 && nworkers < WorkerCores() &&
		nworkers == max_worker_processes / 2)
		ereport(LOG,
				(errmsg("exactonce starts %d drain workers for each of %d databases, on %d cores",
						nworkers, list_length(dbs), WorkerCores()),
				 errhint("Raise max_worker_processes to %d (a restart) to give every core a drain worker.",
						 2 * WorkerCores())));
	else
		ereport(LOG,
				(errmsg("exactonce starts %d drain workers for each of %d databases",
						nworkers, list_length(dbs))));
	return nslots;
}

/*
 * LauncherStopAll stops the drain workers and waits until they are gone: a
 * worker's open transaction rolls back, so nothing is lost.  It looks every
 * 100 ms rather than waiting for the postmaster's word of each exit.
 */
static void
LauncherStopAll(BackgroundWorkerHandle **handles, int nslots)
{
	bool		running = true;

	for (int s = 0; s < nslots; s++)
		if (handles[s] != NULL)
			TerminateBackgroundWorker(handles[s]);
	while (running && !ShutdownRequestPending)
	{
		running = false;
		for (int s = 0; s < nslots; s++)
		{
			pid_t		pid;

			if (handles[s] == NULL)
				continue;
			if (GetBackgroundWorkerPid(handles[s], &pid) != BGWH_STOPPED)
				running = true;
			else
			{
				pfree(handles[s]);
				handles[s] = NULL;
			}
		}
		if (running)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 100, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

/*
 * exactonce_launcher_main starts and supervises the drain workers.
 */
void
exactonce_launcher_main(Datum arg)
{
	char	   *dblist = pstrdup(exactonce_database);
	List	   *dbs = NIL;
	int			nslots = 0;
	char	   *dbnames[EXACTONCE_MAX_WORKERS];
	BackgroundWorkerHandle *handles[EXACTONCE_MAX_WORKERS] = {0};
	TimestampTz start_at[EXACTONCE_MAX_WORKERS] = {0};
	TimestampTz started[EXACTONCE_MAX_WORKERS] = {0};
	int			backoff[EXACTONCE_MAX_WORKERS] = {0};

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	if (!SplitIdentifierString(dblist, ',', &dbs))
		ereport(FATAL,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid list syntax in exactonce.database: \"%s\"", exactonce_database)));

	nslots = LauncherSlots(dbs, dbnames);
	while (!ShutdownRequestPending)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		sleep_ms = 10000;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (WorkerCount(list_length(dbs)) != launcher_nworkers)
			{
				/* every shard changes hands: stop them all, start anew */
				LauncherStopAll(handles, nslots);
				nslots = LauncherSlots(dbs, dbnames);
				memset(start_at, 0, sizeof(start_at));
				memset(backoff, 0, sizeof(backoff));
			}
		}

		for (int s = 0; s < nslots; s++)
		{
			pid_t		pid;

			if (handles[s] != NULL &&
				GetBackgroundWorkerPid(handles[s], &pid) != BGWH_STOPPED)
				continue;
			if (handles[s] != NULL)
			{
				/* it exited: back off if it did not last a minute */
				pfree(handles[s]);
				handles[s] = NULL;
				backoff[s] = TimestampDifferenceExceeds(started[s], now, 60000) ? 0 :
					Min(Max(backoff[s] * 2, 1000), 10000);
				start_at[s] = TimestampTzPlusMilliseconds(now, backoff[s]);
			}
			if (now >= start_at[s])
			{
				handles[s] = StartDrainWorker(s, dbnames[s]);
				started[s] = now;
				if (handles[s] == NULL)
					start_at[s] = TimestampTzPlusMilliseconds(now, 10000);
			}
			else
				sleep_ms = Min(sleep_ms, TimestampDifferenceMilliseconds(now, start_at[s]) + 1);
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	proc_exit(0);
}

/*
 * ForgetStats frees the shared statistics entries of pipelines this worker
 * no longer serves (dropped ones, for instance).
 */
static void
ForgetStats(List *ids)
{
	LWLockAcquire(exactonce_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < EXACTONCE_WORKER_PIPELINES; i++)
		if (my_slot->pipes[i].id != 0 && !list_member_int(ids, my_slot->pipes[i].id))
			memset(&my_slot->pipes[i], 0, sizeof(PipelineStat));
	LWLockRelease(exactonce_shared->lock);
}

/*
 * ForgetBackoffs frees the backoff entries of shards this worker no longer
 * serves (those the round just ended did not visit), so that creating and
 * dropping pipelines keeps its memory flat.
 */
static void
ForgetBackoffs(uint64 round)
{
	HASH_SEQ_STATUS seq;
	Backoff    *b;

	hash_seq_init(&seq, backoffs);
	while ((b = hash_seq_search(&seq)) != NULL)
	{
		if (b->round == round)
			continue;
		if (b->seal)
			pfree(b->seal);
		(void) hash_search(backoffs, &b->unit, HASH_REMOVE, NULL);
		reset_caches = true;
	}
}

/*
 * StatFor returns the slot's statistics entry of a pipeline, making one;
 * NULL when all are taken.
 */
static PipelineStat *
StatFor(int32 id)
{
	PipelineStat *entry = NULL;

	LWLockAcquire(exactonce_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < EXACTONCE_WORKER_PIPELINES && entry == NULL; i++)
		if (my_slot->pipes[i].id == id)
			entry = &my_slot->pipes[i];
	for (int i = 0; i < EXACTONCE_WORKER_PIPELINES && entry == NULL; i++)
		if (my_slot->pipes[i].id == 0)
		{
			entry = &my_slot->pipes[i];
			memset(entry, 0, sizeof(PipelineStat));
			entry->id = id;
		}
	LWLockRelease(exactonce_shared->lock);
	return entry;
}

/*
 * SetState publishes what the worker does.
 */
static void
SetState(WorkerState state, int32 pipeline_id)
{
	LWLockAcquire(exactonce_shared->lock, LW_EXCLUSIVE);
	my_slot->state = state;
	my_slot->pipeline_id = pipeline_id;
	LWLockRelease(exactonce_shared->lock);
}

/*
 * ReleaseSlot clears the worker's slot at exit.
 */
static void
ReleaseSlot(int code, Datum arg)
{
	LWLockAcquire(exactonce_shared->lock, LW_EXCLUSIVE);
	my_slot->latch = NULL;
	my_slot->pid = 0;
	my_slot->state = WORKER_FREE;
	LWLockRelease(exactonce_shared->lock);
}

/*
 * ServedPipelines lists the shards of pipelines this worker drains, as
 * WorkerUnits, or NIL when the extension is not installed in its database.
 */
static List *
ServedPipelines(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *mine = NIL;
	ListCell   *lc;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();

	/* as drop_pipeline() does for its session (pipelinecmds.c) */
	if (reset_caches)
		InvalidateSystemCaches();
	reset_caches = false;
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(get_extension_oid("exactonce", true)))
	{
		List	   *ids,
				   *shards;
		ListCell   *lc2;

		SPI_connect();
		ids = PipelineListIds(&shards); /* in SPI's memory, gone at SPI_finish */
		MemoryContextSwitchTo(cxt);
		forboth(lc, ids, lc2, shards)
		{
			for (int s = 0; s < lfirst_int(lc2); s++)
				if (ShmemWorkerServes(lfirst_int(lc), s, my_slot->nworkers, my_slot->index))
				{
					WorkerUnit *u = palloc(sizeof(WorkerUnit));

					u->id = lfirst_int(lc);
					u->shard = s;
					mine = lappend(mine, u);
				}
		}
		SPI_finish();
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return mine;
}

/*
 * StepErrorContext names the pipeline and shard of a step in its errors.
 */
static void
StepErrorContext(void *arg)
{
	StepContext *sc = arg;

	if (sc->name)
		errcontext("exactonce drain of pipeline \"%s\", shard %d", sc->name, sc->unit->shard);
	else
		errcontext("exactonce drain of pipeline %d, shard %d", sc->unit->id, sc->unit->shard);
}

/*
 * TrimFeed folds the feed of a pipeline, if it has one, in a transaction of
 * its own, as the pipeline's owner (feed.c).
 */
static void
TrimFeed(WorkerUnit *u)
{
	Pipeline   *p = NULL;
	int			nestlevel;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	if (OidIsValid(get_extension_oid("exactonce", true)))
		p = PipelineLoadById(u->id, SHAPE_FEED);
	if (p != NULL && p->feed)
	{
		PipelineActAsOwner(p);
		(void) FeedTrim(p);
		PipelineActAsCaller(p);
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * StepPipeline runs one step on a shard of a pipeline in a transaction of its
 * own, as the pipeline's owner; then, with trim, folds its feed in another.
 */
static DrainResult
StepPipeline(WorkerUnit *u, SealState **seal, bool trim)
{
	MemoryContext cxt = CurrentMemoryContext;
	DrainResult r = {false, 0, DT_NOEND, false, false, false};
	Pipeline   *p = NULL;
	int			nestlevel;
	StepContext sc = {u, NULL};
	ErrorContextCallback errcallback = {error_context_stack, StepErrorContext, &sc};

	error_context_stack = &errcallback;
	SetCurrentStatementStartTimestamp();	/* now() of the step's transaction */
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	SPI_connect();
	nestlevel = StatementPinSearchPath();

	/* the extension or the pipeline may have gone since the round began */
	if (OidIsValid(get_extension_oid("exactonce", true)))
		p = PipelineLoadById(u->id, SHAPE_ALL);
	if (p != NULL && u->shard < p->nshards)
	{
		sc.name = p->name;
		pgstat_report_activity(STATE_RUNNING, psprintf("draining pipeline %s", p->name));
		PipelineActAsOwner(p);
		r = DrainStep(p, u->shard, seal);
		PipelineActAsCaller(p);
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	if (trim)
		TrimFeed(u);
	MemoryContextSwitchTo(cxt);
	error_context_stack = errcallback.previous;

	/*
	 * a worker has no idle loop that reports statistics: without them
	 * autovacuum would never learn about the dead rows in state
	 */
	pgstat_report_stat(false);

	/* the workers of the other shards have a partition to drain now */
	if (r.rotated)
		WakeWorkers();
	return r;
}

/*
 * RecordStep updates the pipeline's statistics after a step: latency of the
 * batch on success, error and backoff on failure.
 */
static void
RecordStep(Backoff *b, PipelineStat *st, DrainResult *r, ErrorData *err)
{
	TimestampTz now = GetCurrentTimestamp();

	if (err == NULL)
		b->failures = 0;
	else
		b->failures++;
	b->retry_at = err == NULL ? 0 :
		TimestampTzPlusMilliseconds(now, Min(1000 << Min(b->failures - 1, 6), 60000));
	if (st == NULL)
		return;
	LWLockAcquire(exactonce_shared->lock, LW_EXCLUSIVE);
	if (err == NULL)
	{
		st->failures = 0;
		st->retry_at = 0;
		if (r->taken > 0 && r->oldest != DT_NOEND)
		{
			memmove(&st->latency_ms[1], &st->latency_ms[0],
					sizeof(double) * (EXACTONCE_LATENCY_SAMPLES - 1));
			st->latency_ms[0] = (double) (now - r->oldest) / 1000.0;
			st->nlatency = Min(st->nlatency + 1, EXACTONCE_LATENCY_SAMPLES);
		}
	}
	else
	{
		st->failures = b->failures;
		st->retry_at = b->retry_at;
		st->waiting = err->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE;
		strlcpy(st->last_error, err->message ? err->message : "unknown error",
				sizeof(st->last_error));
	}
	LWLockRelease(exactonce_shared->lock);
}

/*
 * TryStep runs StepPipeline and returns NULL, or the error it raised after
 * rolling its transaction back.
 */
static pg_noinline ErrorData *
TryStep(WorkerUnit *u, SealState **seal, bool trim, DrainResult *r, MemoryContext cxt)
{
	ErrorData  *volatile err = NULL;

	PG_TRY();
	{
		*r = StepPipeline(u, seal, trim);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		err = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	return err;
}

/*
 * WorkerRound gives every served shard one step; it returns whether any step
 * did work, and sets *sealing if a shard waits for inserters.
 */
static bool
WorkerRound(MemoryContext round_cxt, bool *sealing, int *wait_ms)
{
	static uint64 round = 0;
	List	   *units = ServedPipelines();
	List	   *ids = NIL;
	ListCell   *lc;
	bool		worked = false;

	round++;
	foreach(lc, units)
		ids = list_append_unique_int(ids, ((WorkerUnit *) lfirst(lc))->id);
	ForgetStats(ids);
	foreach(lc, units)
	{
		WorkerUnit *u = lfirst(lc);
		PipelineStat *st = StatFor(u->id);
		DrainResult r = {false, 0, DT_NOEND, false, false, false};
		ErrorData  *err;
		Backoff    *b;
		bool		found;
		bool		trim;
		TimestampTz now;

		CHECK_FOR_INTERRUPTS();
		b = hash_search(backoffs, u, HASH_ENTER, &found);
		if (!found)
		{
			b->failures = 0;
			b->retry_at = 0;
			b->seal = NULL;
			b->trimmed_at = 0;
		}
		b->round = round;
		now = GetCurrentTimestamp();
		if (b->retry_at > now)
			continue;
		trim = u->shard == 0 && TimestampDifferenceExceeds(b->trimmed_at, now, WORKER_FEED_TRIM_MS);
		if (trim)
			b->trimmed_at = now;
		SetState(WORKER_DRAINING, u->id);
		err = TryStep(u, &b->seal, trim, &r, round_cxt);
		RecordStep(b, st, &r, err);
		worked |= r.worked;
		*sealing |= r.sealing;
		if (r.wait_ms > 0 && (*wait_ms == 0 || r.wait_ms < *wait_ms))
			*wait_ms = r.wait_ms;
	}
	SetState(WORKER_IDLE, 0);
	ForgetBackoffs(round);
	return worked;
}

/*
 * exactonce_drain_main is the drain worker: rounds over its pipelines while
 * there is work, sleeps on its latch when there is none.
 */
void
exactonce_drain_main(Datum arg)
{
	int			slotno = DatumGetInt32(arg);
	char		dbname[NAMEDATALEN];
	MemoryContext round_cxt;
	int			seal_poll_ms = EXACTONCE_SEAL_POLL_MS;
	bool		kept = false;	/* worked since it last went idle */

	strlcpy(dbname, MyBgworkerEntry->bgw_extra, sizeof(dbname));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(dbname, NULL, 0);
	SetConfigOption("lock_timeout", WORKER_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);

	my_slot = &exactonce_shared->slots[slotno];
	LWLockAcquire(exactonce_shared->lock, LW_EXCLUSIVE);
	my_slot->pid = MyProcPid;
	my_slot->dboid = MyDatabaseId;
	my_slot->latch = MyLatch;
	my_slot->state = WORKER_IDLE;
	memset(my_slot->pipes, 0, sizeof(my_slot->pipes));
	LWLockRelease(exactonce_shared->lock);
	before_shmem_exit(ReleaseSlot, 0);

	round_cxt = AllocSetContextCreate(TopMemoryContext, "exactonce round",
									  ALLOCSET_DEFAULT_SIZES);
#ifdef __GLIBC__

	/*
	 * A batch's arrays (events, key states, deltas) are megabytes, freed at
	 * its end; glibc would hand them back to the kernel and the next batch
	 * would fault every page in again.  The worker keeps up to 128 MB of them
	 * instead (exactonce.batch_memory, 128 MB, bounds what a batch takes)
	 * until it goes idle, and only arrays over 32 MB get mappings of their
	 * own.
	 */
	mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 128 * 1024 * 1024);
#endif
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(WorkerUnit);
		ctl.entrysize = sizeof(Backoff);
		backoffs = hash_create("exactonce backoff", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	for (;;)
	{
		bool		worked;
		bool		sealing;
		int			wait_ms = 0;
		uint64		wakes;

		ResetLatch(MyLatch);
		wakes = pg_atomic_read_u64(&my_slot->wakes);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		MemoryContextSwitchTo(round_cxt);
		sealing = false;
		worked = WorkerRound(round_cxt, &sealing, &wait_ms);
		MemoryContextReset(round_cxt);

		/*
		 * Sleep unless there was work or a wake-up came during the round
		 * (whose latch a lock wait may have spent).  An inserting
		 * transaction's commit sets no latch: poll for it while sealing, at
		 * growing intervals, so that one left open costs nothing.  A queue
		 * held back by exactonce.batch_delay is looked at again when it may
		 * rotate.
		 */
		if (worked)
		{
			seal_poll_ms = EXACTONCE_SEAL_POLL_MS;
			kept = true;
		}
		else if (pg_atomic_read_u64(&my_slot->wakes) == wakes)
		{
#ifdef __GLIBC__
			/* idle: hand back the memory kept for the batches (see above) */
			if (kept)
				malloc_trim(0);
#endif
			kept = false;
			pgstat_report_activity(STATE_IDLE, NULL);
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(sealing ? seal_poll_ms : exactonce_naptime,
								 wait_ms > 0 ? wait_ms : INT_MAX),
							 PG_WAIT_EXTENSION);
			seal_poll_ms = sealing ? Min(seal_poll_ms * 2, exactonce_naptime) :
				EXACTONCE_SEAL_POLL_MS;
		}
	}
}
