/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		Shared state of the background workers: one slot per drain worker,
 *		and what the monitoring view and the wake-up trigger need from it.
 *
 * Locking: ExactonceShared->lock (an LWLock of our own tranche) protects the
 * slots.  A worker writes its own slot under the lock in exclusive mode; the
 * view reads all slots under it in shared mode.  The wake-up trigger only
 * reads slot->latch and slot->dboid, under the shared lock, and sets the
 * latch; a latch pointer is set by its worker at start and cleared at exit.
 * A slot's count of wake-ups is an atomic: bumped under the shared lock by
 * any number of wakers at once, read by its worker without the lock.
 *
 * Without shared_preload_libraries there is no shared state: the trigger and
 * the view then see no workers, and everything else works as before.
 *
 *-------------------------------------------------------------------------
 */
#include "exactonce.h"

#include "access/xact.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"

PG_FUNCTION_INFO_V1(exactonce_wake);

ExactonceShared *exactonce_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * SharedSize is the size of the shared state.
 */
static Size
SharedSize(void)
{
	return add_size(offsetof(ExactonceShared, slots),
					mul_size(sizeof(WorkerSlot), EXACTONCE_MAX_WORKERS));
}

/*
 * ShmemRequest asks for our shared memory and lock.
 */
static void
ShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(SharedSize());
	RequestNamedLWLockTranche("exactonce", 1);
}

/*
 * ShmemStartup creates or attaches to the shared state.
 */
static void
ShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	exactonce_shared = ShmemInitStruct("exactonce", SharedSize(), &found);
	if (!found)
	{
		memset(exactonce_shared, 0, SharedSize());
		exactonce_shared->lock = &(GetNamedLWLockTranche("exactonce"))->lock;
		for (int i = 0; i < FAULT_STAGES; i++)
			pg_atomic_init_u64(&exactonce_shared->faults[i], 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * ShmemInit installs the hooks; only when preloaded.
 */
void
ShmemInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ShmemStartup;
}

/*
 * WakeWorkers sets the latch of every drain worker of this database.  It
 * counts the wake-up first: a worker that is waiting for a lock when its
 * latch is set loses the wake-up to the lock wait, and looks at the count
 * before it sleeps.
 */
void
WakeWorkers(void)
{
	if (exactonce_shared == NULL)
		return;
	LWLockAcquire(exactonce_shared->lock, LW_SHARED);
	for (int i = 0; i < EXACTONCE_MAX_WORKERS; i++)
	{
		WorkerSlot *slot = &exactonce_shared->slots[i];

		if (slot->latch != NULL && slot->dboid == MyDatabaseId)
		{
			pg_atomic_fetch_add_u64(&slot->wakes, 1);
			SetLatch(slot->latch);
		}
	}
	LWLockRelease(exactonce_shared->lock);
}

/* WakeWorkersAtCommit was called in this transaction */
static bool wake_at_commit = false;

/*
 * WakeAtCommit is the transaction callback of WakeWorkersAtCommit.  At
 * XACT_EVENT_COMMIT the transaction no longer counts as running, so the rows
 * it locked are free to the workers it wakes.
 */
static void
WakeAtCommit(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && wake_at_commit)
		WakeWorkers();
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		wake_at_commit = false;
}

/*
 * WakeWorkersAtCommit wakes the workers of this database once the current
 * transaction commits: for changes they must see, made under locks they
 * would otherwise find taken.
 */
void
WakeWorkersAtCommit(void)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(WakeAtCommit, NULL);
		registered = true;
	}
	wake_at_commit = true;
}

/*
 * exactonce_wake is the statement trigger on each ingest queue: it wakes the
 * workers, which then wait for the inserting transaction to commit.
 */
Datum
exactonce_wake(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "exactonce_wake must be called as a trigger");
	WakeWorkers();
	return PointerGetDatum(NULL);
}
