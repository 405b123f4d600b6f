/*-------------------------------------------------------------------------
 *
 * state.h
 *		Stage 1: apply events to state, yielding per-cell deltas.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_STATE_H
#define EXACTONCE_STATE_H

#include "engine/event.h"

extern Delta *StateApply(Pipeline *p, Event *events, int n, int *ndeltas,
						 StageCounts *counts);
extern const char *StateNumberFault(Numeric n);
extern char *StateEventFault(Pipeline *p, Event *ev);

#endif							/* EXACTONCE_STATE_H */
