/*-------------------------------------------------------------------------
 *
 * wake.c
 *		Waking the drain workers, and the sessions in wait_applied().
 *
 * Any layer may have something for the workers to do (an insert, a new
 * pipeline, a changed shard count) or something a waiting session must
 * look at again (a position moved on).  Both are signals through shared
 * memory: a worker's latch, and the condition variable "applied".  Without
 * the preload there is no shared memory, and both are no-ops.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

#include "utils/shmem.h"
#include "utils/wake.h"

PG_FUNCTION_INFO_V1(exactonce_wake);

/* WakeWorkersAtCommit and WakeWaitersAtCommit were called in this transaction */
static bool wake_at_commit = false;
static bool applied_at_commit = false;

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

/*
 * WakeAtCommit is the transaction callback of WakeWorkersAtCommit and
 * WakeWaitersAtCommit.  At XACT_EVENT_COMMIT the transaction no longer
 * counts as running, so the rows it locked are free to the workers it
 * wakes, and what it applied is visible to the sessions it tells.
 */
static void
WakeAtCommit(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && wake_at_commit)
		WakeWorkers();
	if (event == XACT_EVENT_COMMIT && applied_at_commit && exactonce_shared != NULL)
		ConditionVariableBroadcast(&exactonce_shared->applied);
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		wake_at_commit = applied_at_commit = false;
}

/*
 * RegisterAtCommit registers WakeAtCommit once per process.
 */
static void
RegisterAtCommit(void)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(WakeAtCommit, NULL);
		registered = true;
	}
}

/*
 * WakeWorkersAtCommit wakes the workers of this database once the current
 * transaction commits: for changes they must see, made under locks they
 * would otherwise find taken.
 */
void
WakeWorkersAtCommit(void)
{
	RegisterAtCommit();
	wake_at_commit = true;
}

/*
 * WakeWaitersAtCommit tells the sessions in wait_applied() to look again
 * once the current transaction commits: it moved a shard's position or the
 * queue's rotation on.
 */
void
WakeWaitersAtCommit(void)
{
	RegisterAtCommit();
	applied_at_commit = true;
}

/*
 * exactonce_wake is the statement trigger on each ingest queue: it wakes the
 * workers, which then wait for the inserting transaction to commit.
 */
Datum
exactonce_wake(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("exactonce.wake() must be called as a trigger")));
	WakeWorkers();
	return PointerGetDatum(NULL);
}
