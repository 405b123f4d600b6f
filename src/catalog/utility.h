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
extern void UtilityExecOwn(const char *sql);

#endif							/* EXACTONCE_UTILITY_H */
