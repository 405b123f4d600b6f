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
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"

#include "utils/shmem.h"

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
		for (int i = 0; i < SHMEM_FAULT_COUNTERS; i++)
			pg_atomic_init_u64(&exactonce_shared->faults[i], 0);
		ConditionVariableInit(&exactonce_shared->applied);
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
 * ShmemIsWorker tells whether process pid is a drain worker.
 */
bool
ShmemIsWorker(int pid)
{
	bool		found = false;

	if (exactonce_shared == NULL || pid == 0)
		return false;
	LWLockAcquire(exactonce_shared->lock, LW_SHARED);
	for (int i = 0; i < EXACTONCE_MAX_WORKERS && !found; i++)
		found = exactonce_shared->slots[i].pid == pid;
	LWLockRelease(exactonce_shared->lock);
	return found;
}

/*
 * ShmemWorkersOf returns how many drain workers the launcher runs for
 * database dbname: 0 when it runs none, or the library was not preloaded.
 */
int
ShmemWorkersOf(const char *dbname)
{
	int			n = 0;

	if (exactonce_shared == NULL)
		return 0;
	LWLockAcquire(exactonce_shared->lock, LW_SHARED);
	for (int i = 0; i < EXACTONCE_MAX_WORKERS && n == 0; i++)
		if (strcmp(NameStr(exactonce_shared->slots[i].dbname), dbname) == 0)
			n = exactonce_shared->slots[i].nworkers;
	LWLockRelease(exactonce_shared->lock);
	return n;
}
