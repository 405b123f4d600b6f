/*-------------------------------------------------------------------------
 *
 * queuecopy.h
 *		A producer's COPY into a pipeline's queue, its rows inserted a page at
 *		a time from slots that cost the resource owner nothing.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_QUEUECOPY_H
#define EXACTONCE_QUEUECOPY_H

extern void QueueCopyInit(void);

#endif							/* EXACTONCE_QUEUECOPY_H */
