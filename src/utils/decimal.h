/*-------------------------------------------------------------------------
 *
 * decimal.h
 *		Numerics read in their stored form, without unpacking them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_DECIMAL_H
#define EXACTONCE_DECIMAL_H

#include "utils/numeric.h"

/* room that DecimalText writes into; longer texts come from the heap */
#define DECIMAL_ROOM 128

/*
 * A number as a whole number of units of 10^-scale (DecimalOf), and so a
 * sum of them while it fits (DecimalAdd): its numeric is the one
 * numeric_add() would give, display scale included.
 */
typedef struct Decimal
{
	int64		units;
	int			scale;
} Decimal;

extern const char *DecimalText(Numeric n, char *room, size_t *len);
extern bool DecimalSurelyBelow(Numeric n, int exp10);
extern bool DecimalOf(Numeric n, Decimal *d);
extern bool DecimalAdd(Decimal *sum, const Decimal *d);
extern Numeric DecimalNumeric(const Decimal *sum);

#endif							/* EXACTONCE_DECIMAL_H */
