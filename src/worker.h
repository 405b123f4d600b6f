/*-------------------------------------------------------------------------
 *
 * worker.h
 *		The launcher and the drain workers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_WORKER_H
#define EXACTONCE_WORKER_H

extern void WorkerInit(void);

#endif							/* EXACTONCE_WORKER_H */
