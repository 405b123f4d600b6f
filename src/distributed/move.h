/*-------------------------------------------------------------------------
 *
 * move.h
 *		Moving a range of keys between the nodes of a distributed pipeline.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_MOVE_H
#define EXACTONCE_MOVE_H

extern void MoveInit(void);

#endif							/* EXACTONCE_MOVE_H */
