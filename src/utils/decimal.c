/*-------------------------------------------------------------------------
 *
 * decimal.c
 *		Numerics read in their stored form, without unpacking them: their
 *		canonical text, whether one is surely below a power of ten in
 *		magnitude, and sums of them as scaled integers.
 *
 * A batch's token hashes every number of its deltas as its canonical text,
 * numeric_normalize()'s (map.c), and so does an accumulated event's content
 * digest (state.c): equal values, 1.5 and 1.50, give the same text.
 * numeric_normalize() unpacks the value, prints it at its display scale
 * into memory of its own and cuts the trailing zeros of the fraction; with
 * two measures a delta has three numbers, and those steps were a tenth of
 * the drain's CPU.  DecimalText prints the same text straight from the
 * stored digits: the sign, the integer part from the first base-10000
 * digit without its leading zeros, then the fraction up to the display
 * scale, less its trailing zeros and the point if nothing is left after
 * it.  The state stage refuses numbers of 1e1000 or more in magnitude
 * (state.c), which the weight alone rules out for nearly all of them.
 * Map adds each delta's numbers to its leaf cell's sums (map.c), and
 * numeric_add() unpacks both, adds digit arrays and packs a new value,
 * each in memory of its own: a sum of numbers that fit in an integer of
 * their largest display scale is kept as that integer (Decimal) and made
 * a numeric once, with the display scale numeric_add() gives a sum, the
 * largest of its terms'.
 *
 * The form read here is numeric's on-disk format, which pg_upgrade carries
 * across major versions: a header word that says short or long form, sign,
 * display scale and weight (the long form keeps the weight in a second
 * word), then the base-10000 digits.  NaN and the infinities, a value not
 * plainly in memory and a text longer than the caller's room go to
 * PostgreSQL's own functions; a build with assertions checks every text
 * against numeric_normalize().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"

#include "utils/decimal.h"

/*
 * A Decimal's units stay below this in magnitude, so that DecimalNumeric's
 * int64_div_fast_to_numeric() can shift them by up to three decimal places.
 */
#define DECIMAL_MAX_UNITS		(PG_INT64_MAX / 1000)
/* and its scale at most this: powers of ten up to it fit in an int64 */
#define DECIMAL_MAX_SCALE 18

static const int64 Pow10[DECIMAL_MAX_SCALE + 1] = {
	1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
	INT64CONST(10000000000), INT64CONST(100000000000), INT64CONST(1000000000000),
	INT64CONST(10000000000000), INT64CONST(100000000000000),
	INT64CONST(1000000000000000), INT64CONST(10000000000000000),
	INT64CONST(100000000000000000), INT64CONST(1000000000000000000)
};

/* the header word: its top bits say short, special, or long and the sign */
#define HDR_FLAGS		0xC000
#define HDR_NEG			0x4000
#define HDR_SHORT		0x8000
#define HDR_SPECIAL		0xC000
/* a short header's sign, display scale and weight */
#define HDR_SHORT_NEG	0x2000
#define HDR_SHORT_DSCALE(h) (((h) & 0x1F80) >> 7)
#define HDR_SHORT_WEIGHT(h) (((h) & 0x0040) ? (int) ((h) & 0x003F) - 64 : (int) ((h) & 0x003F))
/* a long header's display scale */
#define HDR_LONG_DSCALE(h) ((h) & 0x3FFF)

/*
 * PutDigit4 writes a base-10000 digit as four decimal digits.
 */
static inline char *
PutDigit4(char *cp, int dig)
{
	cp[0] = '0' + dig / 1000;
	cp[1] = '0' + dig / 100 % 10;
	cp[2] = '0' + dig / 10 % 10;
	cp[3] = '0' + dig % 10;
	return cp + 4;
}

/*
 * PutDigit writes a base-10000 digit without leading zeros ("0" for 0).
 */
static inline char *
PutDigit(char *cp, int dig)
{
	char		four[4];
	int			skip = dig >= 1000 ? 0 : dig >= 100 ? 1 : dig >= 10 ? 2 : 3;

	PutDigit4(four, dig);
	memcpy(cp, four + skip, 4 - skip);
	return cp + 4 - skip;
}

/*
 * Normalized returns numeric_normalize()'s text and its length.
 */
static const char *
Normalized(Numeric n, size_t *len)
{
	char	   *s = numeric_normalize(n);

	*len = strlen(s);
	return s;
}

/* a finite numeric's parts, as stored */
typedef struct NumParts
{
	bool		neg;
	int			dscale;
	int			weight;			/* of digits[0], in base 10000 */
	int			ndigits;
	const int16 *digits;
} NumParts;

/*
 * Unpacked reads n's parts in place; false for NaN, an infinity or a value
 * that is not plainly in memory.
 */
static bool
Unpacked(Numeric n, NumParts *parts)
{
	const uint16 *words = (const uint16 *) VARDATA(n);
	uint16		head;

	if (VARATT_IS_EXTENDED(n))
		return false;
	head = words[0];
	if ((head & HDR_FLAGS) == HDR_SPECIAL)
		return false;
	if ((head & HDR_FLAGS) == HDR_SHORT)
	{
		parts->neg = (head & HDR_SHORT_NEG) != 0;
		parts->dscale = HDR_SHORT_DSCALE(head);
		parts->weight = HDR_SHORT_WEIGHT(head);
		parts->digits = (const int16 *) (words + 1);
	}
	else
	{
		parts->neg = (head & HDR_FLAGS) == HDR_NEG;
		parts->dscale = HDR_LONG_DSCALE(head);
		parts->weight = (int16) words[1];
		parts->digits = (const int16 *) (words + 2);
	}
	parts->ndigits = ((const char *) n + VARSIZE(n) - (const char *) parts->digits) / sizeof(int16);
	return true;
}

/*
 * DecimalText returns n's canonical text (numeric_normalize's) and its
 * length: written into room, DECIMAL_ROOM bytes, or where it does not fit
 * into memory of the current context.  The text is not NUL-terminated.
 */
const char *
DecimalText(Numeric n, char *room, size_t *len)
{
	NumParts	v;
	char	   *cp = room;

	/* sign, integer part, point and fraction, and a digit's overrun */
	if (!Unpacked(n, &v) ||
		1 + (v.weight < 0 ? 1 : 4 * (v.weight + 1)) + 1 + v.dscale + 4 > DECIMAL_ROOM)
		return Normalized(n, len);

	if (v.neg)
		*cp++ = '-';
	if (v.weight < 0)
		*cp++ = '0';
	else
	{
		cp = PutDigit(cp, v.ndigits > 0 ? v.digits[0] : 0);
		for (int d = 1; d <= v.weight; d++)
			cp = PutDigit4(cp, d < v.ndigits ? v.digits[d] : 0);
	}
	if (v.dscale > 0)
	{
		char	   *point = cp;
		char	   *end = point + 1 + v.dscale;

		*cp++ = '.';
		for (int d = v.weight + 1; cp < end; d++)
			cp = PutDigit4(cp, d >= 0 && d < v.ndigits ? v.digits[d] : 0);
		cp = end;
		while (cp[-1] == '0')
			cp--;
		if (cp - 1 == point)
			cp = point;
	}
	*len = cp - room;

#ifdef USE_ASSERT_CHECKING
	{
		size_t		want_len;
		const char *want = Normalized(n, &want_len);

		Assert(want_len == *len && memcmp(want, room, want_len) == 0);
	}
#endif
	return room;
}

/*
 * DecimalSurelyBelow tells whether |n| < 10^exp10 can be read off n's
 * weight: its digits stand for less than 10000^(weight + 1).  False means
 * that it cannot, not that |n| is not below.
 */
bool
DecimalSurelyBelow(Numeric n, int exp10)
{
	NumParts	v;

	return Unpacked(n, &v) && 4 * (v.weight + 1) <= exp10;
}

/*
 * DecimalOf reads n as a whole number of units of 10^-dscale into s;
 * false where n is not finite and plainly in memory, has digits past its
 * display scale, or does not fit a Decimal.
 */
bool
DecimalOf(Numeric n, Decimal *s)
{
	NumParts	v;
	int64		units = 0;
	int			shift;

	if (!Unpacked(n, &v) || v.dscale > DECIMAL_MAX_SCALE)
		return false;
	for (int i = 0; i < v.ndigits; i++)
		if (pg_mul_s64_overflow(units, 10000, &units) ||
			pg_add_s64_overflow(units, v.digits[i], &units))
			return false;
	/* units counts 10000^-(ndigits - 1 - weight); make it 10^-dscale */
	shift = v.dscale - 4 * (v.ndigits - 1 - v.weight);
	if (units != 0 && shift > 0 &&
		(shift > DECIMAL_MAX_SCALE || pg_mul_s64_overflow(units, Pow10[shift], &units)))
		return false;
	if (units != 0 && shift < 0)
	{
		if (-shift > DECIMAL_MAX_SCALE || units % Pow10[-shift] != 0)
			return false;
		units /= Pow10[-shift];
	}
	if (units > DECIMAL_MAX_UNITS)
		return false;
	s->units = v.neg ? -units : units;
	s->scale = v.dscale;
	return true;
}

/*
 * DecimalAdd adds s to sum, at the larger of their scales; false, with sum
 * unchanged, where the result would not fit.
 */
bool
DecimalAdd(Decimal *sum, const Decimal *s)
{
	int64		a = sum->units;
	int64		b = s->units;
	int			scale = Max(sum->scale, s->scale);

	if (pg_mul_s64_overflow(a, Pow10[scale - sum->scale], &a) ||
		pg_mul_s64_overflow(b, Pow10[scale - s->scale], &b) ||
		pg_add_s64_overflow(a, b, &a) || a > DECIMAL_MAX_UNITS || a < -DECIMAL_MAX_UNITS)
		return false;
	sum->units = a;
	sum->scale = scale;
	return true;
}

/*
 * DecimalNumeric makes a Decimal a numeric, of display scale its scale.
 */
Numeric
DecimalNumeric(const Decimal *sum)
{
	return int64_div_fast_to_numeric(sum->units, sum->scale);
}
