/*-------------------------------------------------------------------------
 *
 * utility.h
 *		Refusing ALTER TABLE of the columns exactonce reads and writes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_UTILITY_H
#define EXACTONCE_UTILITY_H

extern void UtilityInit(void);

#endif							/* EXACTONCE_UTILITY_H */
