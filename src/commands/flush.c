/*-------------------------------------------------------------------------
 *
 * flush.c
 *		flush(): a pipeline drained synchronously, here or on its nodes.
 *
 * What a worker does in many steps, flush does in one transaction of the
 * caller (engine/drain.c, DrainPipeline), and then folds the feed, which is
 * all there is to do it without the preload.  A distributed pipeline of
 * that name is flushed on each of its nodes instead.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "catalog/pipeline.h"
#include "catalog/statement.h"
#include "distributed/coordinator.h"
#include "engine/drain.h"
#include "engine/feed.h"

PG_FUNCTION_INFO_V1(exactonce_flush);

/*
 * exactonce_flush drains a pipeline synchronously and returns the number of
 * events it took from the queue.
 */
Datum
exactonce_flush(PG_FUNCTION_ARGS)
{
	Pipeline   *p;
	int64		taken;
	int			nestlevel;

	if (CoordinatorRun(text_to_cstring(PG_GETARG_TEXT_PP(0)), "flush", false, &taken))
		PG_RETURN_INT64(taken);
	PipelineRequireReadCommitted("exactonce.flush()");
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	p = PipelineLoad(text_to_cstring(PG_GETARG_TEXT_PP(0)), true);
	PipelineActAsOwner(p);
	taken = DrainPipeline(p);
	/* the workers fold the feed; so does a flush, which may be all there is */
	(void) FeedTrim(p);
	PipelineActAsCaller(p);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_INT64(taken);
}
