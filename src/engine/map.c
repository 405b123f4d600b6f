/*-------------------------------------------------------------------------
 *
 * map.c
 *		Stage 2: pre-aggregate a batch of deltas per rollup cell and stage it
 *		in the ledger under the SHA-256 of the batch's canonical encoding.
 *
 * The token hashes the deltas themselves, (key, version, cell, change)
 * sorted, not the pre-aggregate: two different batches can sum to the same
 * cells, but they never consist of the same transitions, because the state
 * stage applies each (key, version) once.  The ledger (ledger.c) stores a
 * token once, so a batch staged twice is stored once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "catalog/statement.h"
#include "engine/cell.h"
#include "engine/distinct.h"
#include "engine/ledger.h"
#include "engine/map.h"
#include "engine/progress.h"
#include "utils/fault.h"
#include "utils/decimal.h"

/* how many deltas ahead TokenAndRollUp asks for the texts */
#define MAP_PREFETCH 8

/*
 * DeltaCmp orders deltas canonically: key, version, cell, change.
 */
static int
DeltaCmp(const void *a, const void *b, void *arg)
{
	const Delta *da = *(Delta *const *) a;
	const Delta *db = *(Delta *const *) b;
	int			ndims = *(int *) arg;
	int			c;

	c = TextCmp(da->key, db->key);
	if (c != 0)
		return c;
	if (da->version != db->version)
		return da->version < db->version ? -1 : 1;
	for (int i = 0; i < ndims; i++)
	{
		c = TextCmp((text *) DatumGetPointer(da->cell[i]), (text *) DatumGetPointer(db->cell[i]));
		if (c != 0)
			return c;
	}
	if (da->keys != db->keys)
		return da->keys < db->keys ? -1 : 1;
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(da->total),
											 NumericGetDatum(db->total)));
}

/*
 * DeltaCmpAll orders deltas as DeltaCmp does, then by their measures (NULL
 * first), which only deltas a caller brings can need: the state stage
 * yields one delta per key, version and cell.
 */
static int
DeltaCmpAll(const void *a, const void *b, void *arg)
{
	const Delta *da = *(Delta *const *) a;
	const Delta *db = *(Delta *const *) b;
	Pipeline   *p = (Pipeline *) arg;
	int			c = DeltaCmp(a, b, &p->ndims);

	for (int i = 0; c == 0 && i < p->nmeasures; i++)
	{
		Numeric		ma = da->measures[i];
		Numeric		mb = db->measures[i];

		if (ma == NULL || mb == NULL)
			c = (ma != NULL) - (mb != NULL);
		else
			c = DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(ma),
												  NumericGetDatum(mb)));
	}
	for (int i = 0; c == 0 && i < p->ndistinct; i++)
	{
		Datum		xa = da->distincts[i];
		Datum		xb = db->distincts[i];

		if (xa == (Datum) 0 || xb == (Datum) 0)
			c = (xa != (Datum) 0) - (xb != (Datum) 0);
		else
			c = TextCmp((text *) DatumGetPointer(xa), (text *) DatumGetPointer(xb));
	}
	return c;
}

/*
 * HashBytes feeds len bytes into the hash.
 */
static void
HashBytes(pg_cryptohash_ctx *ctx, const void *data, size_t len)
{
	if (pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0)
		elog(ERROR, "could not update SHA-256: %s", pg_cryptohash_error(ctx));
}

/*
 * HashText feeds a length-prefixed text into the hash.
 */
static void
HashText(pg_cryptohash_ctx *ctx, text *t)
{
	uint32		len = pg_hton32(VARSIZE_ANY_EXHDR(t));

	HashBytes(ctx, &len, sizeof(len));
	HashBytes(ctx, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

/*
 * HashInt64 feeds a big-endian int64 into the hash.
 */
static void
HashInt64(pg_cryptohash_ctx *ctx, int64 v)
{
	uint64		be = pg_hton64((uint64) v);

	HashBytes(ctx, &be, sizeof(be));
}

/*
 * HashNumeric feeds a normalised, length-prefixed numeric into the hash.
 */
static void
HashNumeric(pg_cryptohash_ctx *ctx, Numeric n)
{
	char		room[DECIMAL_ROOM];
	size_t		slen;
	const char *num = DecimalText(n, room, &slen);
	uint32		len = pg_hton32(slen);

	HashBytes(ctx, &len, sizeof(len));
	HashBytes(ctx, num, slen);
}

/*
 * HashNone feeds the mark of a NULL measure or distinct value.
 */
static void
HashNone(pg_cryptohash_ctx *ctx)
{
	uint32		none = 0xFFFFFFFF;

	HashBytes(ctx, &none, sizeof(none));
}

/*
 * TokenBegin starts the SHA-256 of a batch's canonical encoding: the number
 * of dimensions and, where the pipeline has them, of measures and distinct
 * counts.
 */
static pg_cryptohash_ctx *
TokenBegin(Pipeline *p)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (pg_cryptohash_init(ctx) < 0)
		elog(ERROR, "could not initialize SHA-256: %s", pg_cryptohash_error(ctx));
	HashInt64(ctx, p->ndims);
	if (p->nmeasures > 0)
		HashInt64(ctx, p->nmeasures);
	if (p->ndistinct > 0)
		HashInt64(ctx, p->ndistinct);
	return ctx;
}

/*
 * TokenAdd feeds the next delta in canonical order: key, version, cell
 * values and change, each text length-prefixed and each number in a fixed
 * format, then its measures (a NULL as the length 0xFFFFFFFF) and distinct
 * values.
 */
static void
TokenAdd(pg_cryptohash_ctx *ctx, Pipeline *p, Delta *d)
{
	HashText(ctx, d->key);
	HashInt64(ctx, d->version);
	for (int j = 0; j < p->ndims; j++)
		HashText(ctx, (text *) DatumGetPointer(d->cell[j]));
	HashNumeric(ctx, d->total);
	HashInt64(ctx, d->keys);
	for (int j = 0; j < p->nmeasures; j++)
	{
		if (d->measures[j] == NULL)
			HashNone(ctx);
		else
			HashNumeric(ctx, d->measures[j]);
	}
	for (int j = 0; j < p->ndistinct; j++)
	{
		if (d->distincts[j] == (Datum) 0)
			HashNone(ctx);
		else
			HashText(ctx, (text *) DatumGetPointer(d->distincts[j]));
	}
}

/*
 * TokenEnd writes the token and frees the hash.
 */
static void
TokenEnd(pg_cryptohash_ctx *ctx, uint8 *token)
{
	if (pg_cryptohash_final(ctx, token, EXACTONCE_TOKEN_LEN) < 0)
		elog(ERROR, "could not finalize SHA-256: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
}

/*
 * DeltaOrder compares two deltas in the canonical order of the token.
 */
static inline int
DeltaOrder(Pipeline *p, Delta *a, Delta *b)
{
	if (p->nmeasures > 0 || p->ndistinct > 0)
		return DeltaCmpAll(&a, &b, p);
	return DeltaCmp(&a, &b, &p->ndims);
}

/*
 * DeltaToken computes the SHA-256 of the canonical encoding of n deltas in
 * any order: sorted, then as TokenAdd encodes each.  Deltas that compare
 * equal encode alike, so any sort gives the same token.
 */
static void
DeltaToken(Pipeline *p, Delta *deltas, int n, uint8 *token)
{
	Delta	  **sorted = palloc(sizeof(Delta *) * n);
	pg_cryptohash_ctx *ctx;

	for (int i = 0; i < n; i++)
		sorted[i] = &deltas[i];
	if (p->nmeasures > 0 || p->ndistinct > 0)
		qsort_arg(sorted, n, sizeof(Delta *), DeltaCmpAll, p);
	else
		qsort_arg(sorted, n, sizeof(Delta *), DeltaCmp, &p->ndims);
	ctx = TokenBegin(p);
	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		TokenAdd(ctx, p, sorted[i]);
	}
	TokenEnd(ctx, token);
	pfree(sorted);
}

/*
 * DeltaExtremes sets the values a delta brings into its cell (keys 1) or
 * takes out of it (keys -1) of each measure with min_max, as the least and
 * greatest of each (extrema.c).
 */
static void
DeltaExtremes(Pipeline *p, Delta *d, int i, CellChange *change)
{
	bool		in = d->keys == 1;

	if ((d->keys != 1 && d->keys != -1) || (!in && p->mode == PIPELINE_ACCUMULATE))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("delta %d has keys " INT64_FORMAT ", but pipeline \"%s\" keeps min and max",
						i + 1, d->keys, p->name),
				 errdetail("A delta of a pipeline with min_max adds one key (1) or, in latest mode, takes one (-1)."),
				 errhint("Pass the deltas exactonce.state_upsert() returned.")));
	memset(change->ext, 0, sizeof(CellExtList) * CELL_NEXT(p));
	for (int slot = 0; slot <= p->nmeasures; slot++)
	{
		Numeric		v = slot == 0 ? d->total : d->measures[slot - 1];
		CellExtList *lo = &change->ext[CELL_EXT(p, in ? EXT_LO_IN : EXT_LO_OUT, slot)];
		CellExtList *hi = &change->ext[CELL_EXT(p, in ? EXT_HI_IN : EXT_HI_OUT, slot)];

		if (!p->min_max[slot] || v == NULL)
			continue;
		/* a delta carries a leaving value negated */
		if (!in)
			v = DatumGetNumeric(DirectFunctionCall1(numeric_uminus, NumericGetDatum(v)));
		lo->n = hi->n = 1;
		lo->v[0] = hi->v[0] = v;
	}
}

/*
 * DeltaChange is the change the i-th delta makes to its cell; ext, with
 * min_max, is where its lists go (CELL_NEXT(p) of them).
 */
static void
DeltaChange(Pipeline *p, Delta *d, int i, CellChange *change, CellExtList *ext)
{
	change->total = d->total;
	change->keys = d->keys;
	for (int j = 0; j < p->nmeasures; j++)
	{
		change->sums[j] = d->measures[j];
		change->counts[j] = d->measures[j] ? d->keys : 0;
	}
	memset(change->distinct, 0, sizeof(change->distinct));
	change->ext = NULL;
	if (p->any_min_max)
	{
		change->ext = ext;
		DeltaExtremes(p, d, i, change);
	}
}

/*
 * A leaf cell, with its total and measure sums (slot 0, then 1 + j) kept as
 * Decimals while they fit, scaled integers that add without allocating:
 * a batch adds numbers to its leaves for each of its deltas, and makes
 * numerics of their sums once (decimal.c).
 */
typedef struct LeafCell
{
	Cell		cell;			/* must be first */
	Decimal		sums[1 + EXACTONCE_MAX_MEASURES];
	bool		scaled[1 + EXACTONCE_MAX_MEASURES]; /* sums[s] is slot s's sum */
	bool		ahead[1 + EXACTONCE_MAX_MEASURES];	/* which the cell lacks */
#ifdef USE_ASSERT_CHECKING
	Numeric		check[1 + EXACTONCE_MAX_MEASURES];	/* numeric_add()'s sums */
#endif
} LeafCell;

/*
 * LeafSum is where slot s of a leaf's change is: the total or a sum (NULL:
 * none yet).
 */
static Numeric *
LeafSum(LeafCell *leaf, int s)
{
	return s == 0 ? &leaf->cell.change.total : &leaf->cell.change.sums[s - 1];
}

/*
 * LeafSettle puts the sum of slot s into the leaf's change, where its
 * Decimal is ahead of it.
 */
static void
LeafSettle(LeafCell *leaf, int s)
{
	if (leaf->ahead[s])
		*LeafSum(leaf, s) = DecimalNumeric(&leaf->sums[s]);
	leaf->ahead[s] = false;
#ifdef USE_ASSERT_CHECKING
	if (*LeafSum(leaf, s) != NULL)
		Assert(strcmp(DatumGetCString(DirectFunctionCall1(numeric_out,
														  NumericGetDatum(*LeafSum(leaf, s)))),
					  DatumGetCString(DirectFunctionCall1(numeric_out,
														  NumericGetDatum(leaf->check[s])))) == 0);
#endif
}

/*
 * LeafSumAdd adds x (NULL: none) to slot s of a leaf: to its Decimal
 * where both fit, else as a numeric.
 */
static void
LeafSumAdd(LeafCell *leaf, int s, Numeric x)
{
	Numeric    *sum = LeafSum(leaf, s);
	bool		first = *sum == NULL;
	Decimal		sx;

	if (x == NULL)
		return;
	if (first)
	{
		*sum = x;
		leaf->scaled[s] = DecimalOf(x, &leaf->sums[s]);
	}
	else if (leaf->scaled[s] && DecimalOf(x, &sx) && DecimalAdd(&leaf->sums[s], &sx))
		leaf->ahead[s] = true;
	else
	{
		LeafSettle(leaf, s);
		leaf->scaled[s] = false;
		*sum = NumericAdd(*sum, x);
	}
#ifdef USE_ASSERT_CHECKING
	leaf->check[s] = first ? x : NumericAdd(leaf->check[s], x);
#endif
}

/*
 * LeafAdd adds the change of the i-th delta to its leaf cell, the cell
 * that groups by every dimension; ext, with min_max, is scratch space for
 * its lists.
 */
static void
LeafAdd(Pipeline *p, HTAB *leaves, Delta *deltas, int i, CellExtList *ext)
{
	CellChange	change;
	bool		found;
	LeafCell   *leaf;

	DeltaChange(p, &deltas[i], i, &change, ext);
	leaf = CellTableEnter(leaves, CELL_LEVEL_MASK(p->ndims), deltas[i].cell, NULL, 0, &found);
	if (!found)
	{
		CellInit(&leaf->cell, p, CELL_LEVEL_MASK(p->ndims), deltas[i].cell, &change);
		leaf->cell.change.total = NULL;
		memset(leaf->cell.change.sums, 0, sizeof(leaf->cell.change.sums));
		memset(leaf->ahead, 0, sizeof(leaf->ahead));
	}
	else
		CellAddCounts(&leaf->cell, p, &change);
	LeafSumAdd(leaf, 0, change.total);
	for (int j = 0; j < p->nmeasures; j++)
		LeafSumAdd(leaf, 1 + j, change.sums[j]);
}

/*
 * RollUpLeaves adds the leaf cells into every cell of the pipeline's
 * grouping (every level of its rollup, or each of its grouping sets), a
 * few additions per leaf, and frees the leaves.
 */
static HTAB *
RollUpLeaves(Pipeline *p, HTAB *leaves)
{
	HTAB	   *cells = CellTableCreate();
	HASH_SEQ_STATUS seq;
	Cell	   *leaf;

	hash_seq_init(&seq, leaves);
	while ((leaf = hash_seq_search(&seq)) != NULL)
	{
		CellChange	above;

		for (int s = 0; s <= p->nmeasures; s++)
			LeafSettle((LeafCell *) leaf, s);
		/* above the leaves a list's first value is all extrema.c reads */
		above = leaf->change;

		if (above.ext != NULL)
		{
			above.ext = palloc(sizeof(CellExtList) * CELL_NEXT(p));
			for (int i = 0; i < CELL_NEXT(p); i++)
			{
				above.ext[i] = leaf->change.ext[i];
				above.ext[i].more |= above.ext[i].n > 1;
				above.ext[i].n = Min(above.ext[i].n, 1);
			}
		}
		for (int s = 0; s < p->nsets; s++)
			CellTableAdd(cells, p, p->sets[s], leaf->dims,
						 p->sets[s] == CELL_LEVEL_MASK(p->ndims) ? &leaf->change : &above);
	}
	hash_destroy(leaves);
	return cells;
}

/*
 * TokenAndRollUp pre-aggregates n deltas per leaf cell, then the leaves into
 * every cell of the pipeline's grouping, and returns those cells; in the
 * same pass it adds the leaf members of their distinct values to members
 * (unless NULL) and writes their token (unless token is NULL), so that the
 * texts of a large batch, scattered in memory, come into the CPU's cache
 * once.  A delta in canonical order after the one before goes into the
 * token as it comes (the state stage yields its deltas so, map.c's callers
 * any way); if one does not, the token is made anew from the sorted
 * deltas.  The texts of the deltas a few ahead are asked for early.
 */
static HTAB *
TokenAndRollUp(Pipeline *p, Delta *deltas, int n, uint8 *token, HTAB *members)
{
	HTAB	   *leaves = CellTableCreateOf(sizeof(LeafCell));
	CellExtList *ext = p->any_min_max ? palloc(sizeof(CellExtList) * CELL_NEXT(p)) : NULL;
	pg_cryptohash_ctx *ctx = token != NULL ? TokenBegin(p) : NULL;
	bool		inorder = token != NULL;

	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
#ifdef __GNUC__
		if (i + MAP_PREFETCH < n)
		{
			Delta	   *ahead = &deltas[i + MAP_PREFETCH];

			__builtin_prefetch(ahead->key);
			for (int j = 0; j < p->ndims; j++)
				__builtin_prefetch(DatumGetPointer(ahead->cell[j]));
		}
#endif
		if (inorder && i > 0 && DeltaOrder(p, &deltas[i - 1], &deltas[i]) > 0)
			inorder = false;
		if (inorder)
			TokenAdd(ctx, p, &deltas[i]);
		LeafAdd(p, leaves, deltas, i, ext);
		if (members != NULL)
			DistinctOfDelta(p, deltas, i, members);
	}
	if (inorder)
		TokenEnd(ctx, token);
	else if (token != NULL)
	{
		pg_cryptohash_free(ctx);
		DeltaToken(p, deltas, n, token);
	}
	return RollUpLeaves(p, leaves);
}

/*
 * MapRollUp is map without staging, for a change that is applied at once
 * in the transaction that makes it (a move of keys, move.c): the cells n
 * deltas change, and in *members the leaf members of their distinct
 * values (NULL without distinct counts), for ReduceApplyCells.
 */
HTAB *
MapRollUp(Pipeline *p, Delta *deltas, int n, HTAB **members)
{
	*members = p->ndistinct > 0 ? DistinctTableCreate() : NULL;
	return TokenAndRollUp(p, deltas, n, NULL, *members);
}

/*
 * MapStage pre-aggregates n deltas at every rollup level and stages them
 * under their token, which it writes to token.  It returns false (staging
 * nothing) for an empty batch.
 */
bool
MapStage(Pipeline *p, Delta *deltas, int n, const char *source, int64 position,
		 uint8 *token)
{
	HTAB	   *cells;
	HTAB	   *leaves = NULL;
	CellColumns cols;
	MemberColumns members;

	if (n == 0)
		return false;
	if (p->ndistinct > 0)
		leaves = DistinctTableCreate();
	cells = TokenAndRollUp(p, deltas, n, token, leaves);
	CellColumnsOf(p, cells, &cols);
	members.nmembers = 0;
	if (leaves != NULL)
	{
		DistinctColumnsOf(p, leaves, &members);
		hash_destroy(leaves);
	}
	LedgerStage(p, token, source, position, n, &cols, &members);
	hash_destroy(cells);

	FaultMaybeFail(FAULT_MAP);
	return true;
}
