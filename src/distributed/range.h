/*-------------------------------------------------------------------------
 *
 * range.h
 *		A range of keys, and how a node refuses the ranges it gave away.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_RANGE_H
#define EXACTONCE_RANGE_H

#include "exactonce.h"

extern int32 RangeBucket(Datum key, int32 modulus);
extern void RangeCheck(int32 modulus, int32 remainder);
extern bool RangeOverlap(int32 m1, int32 r1, int32 m2, int32 r2);
extern bool RangeAway(Pipeline *p, int32 modulus, int32 remainder);
extern bool RangeParking(Pipeline *p, int32 modulus, int32 remainder);
extern void RangeClose(Pipeline *p, int32 modulus, int32 remainder, const char *target);
extern void RangeTakeBack(Pipeline *p, int32 modulus, int32 remainder);
extern bool RangeTidy(Pipeline *p, int32 modulus, int32 remainder);

#endif							/* EXACTONCE_RANGE_H */
