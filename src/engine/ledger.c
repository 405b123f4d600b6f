/*-------------------------------------------------------------------------
 *
 * ledger.c
 *		The token ledger of a pipeline: batches staged under their token,
 *		marked applied by reduce, and forgotten once no retry can stage them
 *		again.
 *
 * Staging is INSERT ... ON CONFLICT DO NOTHING on the token, so a batch
 * staged twice is stored once, and a batch already applied (its row kept,
 * without its payload) is not staged again.  Reduce locks the staged rows,
 * applies them and marks them applied in one transaction, so a token is
 * applied exactly once: a retry finds it applied, or finds it staged because
 * the first attempt rolled back.
 *
 * The ledger is a table of the pipeline's owner, who may write into it
 * whatever rows the table takes: reduce reads a staged batch only through
 * CellStagedArray and CellStagedNumbers (cell.c), which refuse one map did
 * not make (a payload column null, arrays that disagree in length, a NaN).
 *
 * The ledger keeps an applied token for as long as something could stage the
 * same batch again, which is tied to consumption, not to time:
 *	 - batches from the queue are staged in the transaction that takes their
 *	   events from the queue, so no retry can produce them again; their tokens
 *	   are forgotten when their queue partition is truncated (QueueRetire).
 *	   That transaction applies its batch too, unless another worker held
 *	   the pipeline's reduce: then it leaves the batch staged, and the other
 *	   applies it with the next (DrainReduceOrLeave);
 *	 - batches staged by an external consumer are forgotten when it says its
 *	   source has moved past them, with exactonce.release().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog/statement.h"
#include "engine/ledger.h"

/*
 * A pipeline with measures or min_max stages these too; the ledgers of
 * pipelines made before 1.3 do not have them.
 */
#define LEDGER_MORE(p)	((p)->nmeasures > 0 || (p)->any_min_max || (p)->ndistinct > 0)
#define LEDGER_MORE_COLUMNS ", measure_sums, measure_counts, extrema, member_cells," \
	" member_columns, member_values, member_counts"

/*
 * BuildLedgerStage: stage one batch unless its token is already known.
 */
static const char *
BuildLedgerStage(Pipeline *p)
{
	return psprintf("INSERT INTO %s.ledger (token, source, position, staged_at,"
					" deltas, levels, cells, totals, keys%s)"
					" VALUES ($1, $2, $3, now(), $4, $5, $6, $7, $8%s)"
					" ON CONFLICT (token) DO NOTHING",
					quote_identifier(p->name),
					LEDGER_MORE(p) ? LEDGER_MORE_COLUMNS : "",
					LEDGER_MORE(p) ? ", $9, $10, $11, $12, $13, $14, $15" : "");
}

/*
 * BuildLedgerKnown: the row of token $1.
 */
static const char *
BuildLedgerKnown(Pipeline *p)
{
	return psprintf("SELECT 1 FROM %s.ledger WHERE token OPERATOR(pg_catalog.=) $1",
					quote_identifier(p->name));
}

/*
 * BuildLedgerPending: lock the staged batches, oldest first.
 */
static const char *
BuildLedgerPending(Pipeline *p)
{
	return psprintf("SELECT token, levels, cells, totals, keys%s FROM %s.ledger"
					" WHERE applied_at IS NULL ORDER BY staged_at, token FOR UPDATE",
					LEDGER_MORE(p) ? LEDGER_MORE_COLUMNS : "", quote_identifier(p->name));
}

/*
 * BuildLedgerPendingTokens: lock the named staged batches.
 */
static const char *
BuildLedgerPendingTokens(Pipeline *p)
{
	return psprintf("SELECT token, levels, cells, totals, keys%s FROM %s.ledger"
					" WHERE applied_at IS NULL AND token = ANY($1)"
					" ORDER BY staged_at, token FOR UPDATE",
					LEDGER_MORE(p) ? LEDGER_MORE_COLUMNS : "", quote_identifier(p->name));
}

/*
 * BuildLedgerStagedCount: how many batches are staged, of source $1 or of
 * any (NULL), at or before $2.
 */
static const char *
BuildLedgerStagedCount(Pipeline *p)
{
	return psprintf("SELECT pg_catalog.count(*) FROM %s.ledger WHERE applied_at IS NULL"
					" AND ($1 IS NULL OR source OPERATOR(pg_catalog.=) $1)"
					" AND staged_at OPERATOR(pg_catalog.<=) $2",
					quote_identifier(p->name));
}

/*
 * BuildLedgerApplied: mark batches applied and drop their payload.
 */
static const char *
BuildLedgerApplied(Pipeline *p)
{
	return psprintf("UPDATE %s.ledger SET applied_at = now(), levels = NULL,"
					" cells = NULL, totals = NULL, keys = NULL%s"
					" WHERE token = ANY($1) AND applied_at IS NULL",
					quote_identifier(p->name),
					LEDGER_MORE(p) ? ", measure_sums = NULL, measure_counts = NULL,"
					" extrema = NULL, member_cells = NULL, member_columns = NULL,"
					" member_values = NULL, member_counts = NULL" : "");
}

/*
 * BuildLedgerGC: forget applied tokens of a source up to a position.
 */
static const char *
BuildLedgerGC(Pipeline *p)
{
	return psprintf("DELETE FROM %s.ledger WHERE applied_at IS NOT NULL"
					" AND source = $1 AND (position <= $2 OR position IS NULL)",
					quote_identifier(p->name));
}

/*
 * LedgerStage stages one batch of ndeltas deltas under its token, unless the
 * token is known already: its cells as parallel arrays (levels, a 2-D text[]
 * of cells, totals, key counts, 2-D arrays of measure sums and counts and
 * of the least and greatest values entering and leaving for min and max),
 * the changes of the leaf cells' distinct values, and the source and
 * position it came from (position < 0: none).
 */
void
LedgerStage(Pipeline *p, const uint8 *token, const char *source, int64 position,
			int ndeltas, CellColumns *cells, MemberColumns *members)
{
	Oid			types[15] = {BYTEAOID, TEXTOID, INT8OID, INT4OID, INT4ARRAYOID,
		TEXTARRAYOID, NUMERICARRAYOID, INT8ARRAYOID, NUMERICARRAYOID, INT8ARRAYOID,
	NUMERICARRAYOID, TEXTARRAYOID, INT4ARRAYOID, TEXTARRAYOID, INT8ARRAYOID};
	Datum		values[15];
	char		nulls[16] = "               ";
	bytea	   *tok = palloc(VARHDRSZ + EXACTONCE_TOKEN_LEN);

	SET_VARSIZE(tok, VARHDRSZ + EXACTONCE_TOKEN_LEN);
	memcpy(VARDATA(tok), token, EXACTONCE_TOKEN_LEN);
	values[0] = PointerGetDatum(tok);
	values[1] = CStringGetTextDatum(source);
	values[2] = Int64GetDatum(position);
	if (position < 0)
		nulls[2] = 'n';
	values[3] = Int32GetDatum(ndeltas);
	/* a rollup's level stands for its grouping; other groupings go as such */
	values[4] = p->rollup ? cells->levels : cells->masks;
	values[5] = CellFlatten(cells->dims, p->ndims, cells->ncells, TEXTOID);
	values[6] = cells->totals;
	values[7] = cells->keys;
	if (LEDGER_MORE(p))
	{
		values[8] = CellFlatten(cells->sums, p->nmeasures, cells->ncells, NUMERICOID);
		values[9] = CellFlatten(cells->counts, p->nmeasures, cells->ncells, INT8OID);
		values[10] = CellFlatten(cells->ext, p->any_min_max ? CELL_NEXT(p) * CELL_EXT_COLS : 0,
								 cells->ncells, NUMERICOID);
		if (members->nmembers > 0)
		{
			values[11] = CellFlatten(members->dims, p->ndims, members->nmembers, TEXTOID);
			values[12] = members->cols;
			values[13] = members->values;
			values[14] = members->counts;
		}
		else
			memset(nulls + 11, 'n', 4);
	}
	StatementExec(StatementPrepare(p, BuildLedgerStage, LEDGER_MORE(p) ? 15 : 8, types),
				  values, nulls, -1);

	/*
	 * Nothing inserted: the token is there already (a batch staged again), or
	 * a trigger of the owner's skipped the row, and the batch, whose events
	 * state has taken, would never reach the aggregates.
	 */
	if (SPI_processed == 0)
	{
		StatementExec(StatementPrepare(p, BuildLedgerKnown, 1, types), values, NULL, -1);
		if (SPI_processed != 1)
			StatementRowRefused(p->name, "ledger",
								"A batch map staged is not in the ledger: a trigger skipped its row.");
	}
}

/*
 * LedgerLockStaged locks the staged batches, all of them or those among
 * tokens (a bytea[]) when have_tokens, oldest first, and returns them: token,
 * levels, cells, totals, keys and, for a pipeline with measures or min_max,
 * measure_sums, measure_counts, extrema, member_cells, member_columns,
 * member_values, member_counts.  The caller frees the table.
 */
SPITupleTable *
LedgerLockStaged(Pipeline *p, Datum tokens, bool have_tokens)
{
	Oid			types[1] = {BYTEAARRAYOID};
	Datum		values[1] = {tokens};

	Assert(p->progress_locked);
	if (have_tokens)
		StatementExec(StatementPrepare(p, BuildLedgerPendingTokens, 1, types),
					  values, NULL, -1);
	else
		StatementExec(StatementPrepare(p, BuildLedgerPending, 0, NULL), NULL, NULL, -1);
	return SPI_tuptable;
}

/*
 * LedgerStagedCount returns how many batches source (NULL: any) has staged
 * at or before a time (DT_NOEND: any) and not applied, as a new snapshot
 * sees them.
 */
int64
LedgerStagedCount(Pipeline *p, const char *source, TimestampTz before)
{
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2] = {source ? CStringGetTextDatum(source) : (Datum) 0,
	TimestampTzGetDatum(before)};
	bool		isnull;

	StatementExec(StatementPrepare(p, BuildLedgerStagedCount, 2, types), values,
				  source ? "  " : "n ", 1);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * LedgerMarkApplied marks n staged batches applied and drops their payload;
 * the caller locked them with LedgerLockStaged.
 */
void
LedgerMarkApplied(Pipeline *p, Datum *tokens, int n)
{
	Oid			types[1] = {BYTEAARRAYOID};
	Datum		values[1];

	Assert(p->progress_locked && n > 0);
	values[0] = PointerGetDatum(construct_array(tokens, n, BYTEAOID, -1, false, TYPALIGN_INT));
	StatementExec(StatementPrepare(p, BuildLedgerApplied, 1, types), values, NULL, n);
}

/*
 * LedgerCollect forgets the applied tokens that source staged at or below
 * position, or without a position, and returns how many it forgot.
 */
int64
LedgerCollect(Pipeline *p, const char *source, int64 position)
{
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {CStringGetTextDatum(source), Int64GetDatum(position)};

	StatementExec(StatementPrepare(p, BuildLedgerGC, 2, types), values, NULL, -1);
	return (int64) SPI_processed;
}
