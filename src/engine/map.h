/*-------------------------------------------------------------------------
 *
 * map.h
 *		Stage 2: pre-aggregate deltas and stage them under their token.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_MAP_H
#define EXACTONCE_MAP_H

#include "utils/hsearch.h"

#include "engine/event.h"

extern bool MapStage(Pipeline *p, Delta *deltas, int n, const char *source,
					 int64 position, uint8 *token);
extern HTAB *MapRollUp(Pipeline *p, Delta *deltas, int n, HTAB **members);

#endif							/* EXACTONCE_MAP_H */
