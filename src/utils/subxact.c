/*-------------------------------------------------------------------------
 *
 * subxact.c
 *		Running a step in a subtransaction, keeping the errors it expects.
 *
 * The drain retries a batch whose state and map stages failed for a
 * reason that may go away, and a move settles a node's queue only if the
 * queue's lock comes soon: both run the step in a subtransaction, which
 * rolls back alone on the errors the caller accepts.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "utils/subxact.h"

/*
 * SubxactRun runs fn(arg) in a subtransaction.  It returns NULL on success,
 * or an error that caught(sqlerrcode) accepts, with the subtransaction
 * rolled back; other errors are re-thrown and end the transaction.
 */
ErrorData *
SubxactRun(void (*fn) (void *), void *arg, bool (*caught) (int sqlerrcode))
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile err = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		err = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;

	if (err && !caught(err->sqlerrcode))
		ReThrowError(err);
	return err;
}
