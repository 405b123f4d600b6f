/*-------------------------------------------------------------------------
 *
 * ledger.h
 *		The token ledger: staged batches, applied tokens, and forgetting
 *		them once no retry can stage them again.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_LEDGER_H
#define EXACTONCE_LEDGER_H

#include "datatype/timestamp.h"
#include "executor/spi.h"

#include "exactonce.h"
#include "engine/cell.h"
#include "engine/distinct.h"

extern void LedgerStage(Pipeline *p, const uint8 *token, const char *source,
						int64 position, int ndeltas, CellColumns *cells,
						MemberColumns *members);
extern SPITupleTable *LedgerLockStaged(Pipeline *p, Datum tokens,
									   bool have_tokens);
extern int64 LedgerStagedCount(Pipeline *p, const char *source, TimestampTz before);
extern void LedgerMarkApplied(Pipeline *p, Datum *tokens, int n);
extern int64 LedgerCollect(Pipeline *p, const char *source, int64 position);

#endif							/* EXACTONCE_LEDGER_H */
