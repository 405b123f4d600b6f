/*-------------------------------------------------------------------------
 *
 * subxact.h
 *		Running a step in a subtransaction, keeping the errors it expects.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_SUBXACT_H
#define EXACTONCE_SUBXACT_H

extern ErrorData *SubxactRun(void (*fn) (void *), void *arg, bool (*caught) (int sqlerrcode));

#endif							/* EXACTONCE_SUBXACT_H */
