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

#include "exactonce.h"

extern void FeedInit(void);
extern void FeedRecord(Pipeline *p, HTAB *cells, SPITupleTable *rows);
extern int64 FeedTrim(Pipeline *p);

#endif							/* EXACTONCE_FEED_H */
