/*-------------------------------------------------------------------------
 *
 * wake.h
 *		Waking the drain workers, and the sessions in wait_applied().
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_WAKE_H
#define EXACTONCE_WAKE_H

extern void WakeWorkers(void);
extern void WakeWorkersAtCommit(void);
extern void WakeWaitersAtCommit(void);

#endif							/* EXACTONCE_WAKE_H */
