/*-------------------------------------------------------------------------
 *
 * feed.h
 *		The change feed: the cells each reduce changed, for consumers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_FEED_H
#define EXACTONCE_FEED_H

#include "executor/spi.h"
#include "utils/hsearch.h"

#include "pipeline.h"

extern void FeedRecord(Pipeline *p, HTAB *cells, SPITupleTable *rows);

#endif							/* EXACTONCE_FEED_H */
