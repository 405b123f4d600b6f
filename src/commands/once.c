/*-------------------------------------------------------------------------
 *
 * once.c
 *		Idempotency tokens: exactly-once for any SQL work.
 *
 * exactonce.once(scope, token) claims a token with INSERT ... ON CONFLICT DO
 * NOTHING on the primary key of exactonce.once_token, in the caller's
 * transaction.  The claim commits or rolls back with the caller's work, so
 * there is no in-progress record that could get stuck and nothing expires:
 *
 *	 - among committed transactions a token is claimed exactly once;
 *	 - a second transaction claiming the same token waits on the unique
 *	   index until the first one ends; then it finds the token (false) if
 *	   the first committed, or inserts it (true) if the first rolled back;
 *	 - under REPEATABLE READ or SERIALIZABLE a claim that committed after the
 *	   caller's snapshot raises a serialization failure (ON CONFLICT DO
 *	   NOTHING does that by itself), and the retried transaction gets false.
 *
 * A token may carry the SHA-256 of a payload (PostgreSQL's common/cryptohash
 * API): claiming it again with another payload, or with none where there was
 * one, raises SQLSTATE EO002.  The transaction that claimed a token may store
 * a result with it, for retries to read with once_get().
 *
 * Tokens live in scopes.  A scope belongs to the role that claimed its first
 * token (exactonce.once_scope); claiming, storing, reading and forgetting
 * tokens of a scope need the privileges of that role.  Both tables belong to
 * the extension's owner and grant nothing to PUBLIC: the functions check the
 * caller's rights, then run their statements as the tables' owner with the
 * search_path pinned, the way catalog/pipeline.c writes the registry.  Tokens are
 * forgotten by exactonce.forget() and by nothing else.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "catalog/statement.h"
#include "exactonce.h"

PG_FUNCTION_INFO_V1(exactonce_once);
PG_FUNCTION_INFO_V1(exactonce_once_result);
PG_FUNCTION_INFO_V1(exactonce_once_get);
PG_FUNCTION_INFO_V1(exactonce_forget);

/* longest scope and token in bytes: both go into one btree key */
#define ONCE_MAX_SCOPE		255
#define ONCE_MAX_TOKEN		2048

/* the statements of this file, prepared once per backend */
enum
{
	ONCE_SCOPE_OWNER,
	ONCE_SCOPE_ADD,
	ONCE_CLAIM,
	ONCE_READ,
	ONCE_STORE,
	ONCE_FORGET,
	ONCE_NPLANS
};

typedef struct OnceStatement
{
	const char *sql;
	int			nargs;
	Oid			types[4];
} OnceStatement;

static const OnceStatement once_statements[ONCE_NPLANS] = {
	[ONCE_SCOPE_OWNER] = {
		"SELECT owner FROM exactonce.once_scope WHERE scope = $1",
		1, {TEXTOID}
	},
	[ONCE_SCOPE_ADD] = {
		"INSERT INTO exactonce.once_scope (scope, owner) VALUES ($1, $2)"
		" ON CONFLICT (scope) DO NOTHING",
		2, {TEXTOID, REGROLEOID}
	},
	[ONCE_CLAIM] = {
		"INSERT INTO exactonce.once_token (scope, token, fingerprint, claimed_by)"
		" VALUES ($1, $2, $3, $4) ON CONFLICT (scope, token) DO NOTHING",
		4, {TEXTOID, TEXTOID, BYTEAOID, REGROLEOID}
	},
	[ONCE_READ] = {
		"SELECT fingerprint, result, xmin FROM exactonce.once_token"
		" WHERE scope = $1 AND token = $2",
		2, {TEXTOID, TEXTOID}
	},
	[ONCE_STORE] = {
		"UPDATE exactonce.once_token SET result = $3 WHERE scope = $1 AND token = $2",
		3, {TEXTOID, TEXTOID, TEXTOID}
	},
	[ONCE_FORGET] = {
		"DELETE FROM exactonce.once_token WHERE scope = $1 AND claimed_at < now() - $2",
		2, {TEXTOID, INTERVALOID}
	},
};

/* A token's row, as ReadToken finds it. */
typedef struct TokenRow
{
	bool		found;
	bytea	   *fingerprint;	/* NULL: claimed without payload */
	Datum		result;
	bool		result_null;
	TransactionId xmin;
} TokenRow;

/*
 * OncePlan returns the kept plan of statement "which".
 */
static SPIPlanPtr
OncePlan(int which)
{
	const OnceStatement *s = &once_statements[which];

	return StatementPrepareFixed(s->sql, s->nargs, s->types);
}

/*
 * OnceArg returns argument argno, a scope or token: not NULL, not empty and
 * at most maxlen bytes long.
 */
static text *
OnceArg(FunctionCallInfo fcinfo, int argno, const char *what, int maxlen)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", what)));
	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what),
				 errhint("An empty %s is almost always a missing value; pass a real one.", what)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", what),
				 errdetail("A %s has at most %d bytes; this one has %d.", what, maxlen, len),
				 errhint("Pass a digest of a longer %s, for example encode(sha256(convert_to(%s, 'UTF8')), 'hex').",
						 what, what)));
	return t;
}

/*
 * Fingerprint returns the SHA-256 of a payload as a bytea.
 */
static bytea *
Fingerprint(text *payload)
{
	bytea	   *fp = palloc(VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	SET_VARSIZE(fp, VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (uint8 *) VARDATA_ANY(payload), VARSIZE_ANY_EXHDR(payload)) < 0 ||
		pg_cryptohash_final(ctx, (uint8 *) VARDATA(fp), PG_SHA256_DIGEST_LENGTH) < 0)
		elog(ERROR, "could not compute SHA-256: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
	return fp;
}

/*
 * ScopeAccess checks that the current role has the privileges of the owner
 * of scope.  A scope nobody claimed yet is registered as the current role's
 * if claim is set; otherwise ScopeAccess returns false for it.  read_only is
 * for the callers that are STABLE.
 */
static bool
ScopeAccess(text *scope, bool claim, Oid table_owner, bool read_only)
{
	Oid			user = GetUserId();
	Datum		values[2] = {PointerGetDatum(scope), ObjectIdGetDatum(user)};
	Oid			owner;
	bool		isnull;
	char	   *name;

	StatementExecAs(table_owner, OncePlan(ONCE_SCOPE_OWNER), values, NULL, read_only, -1);
	if (SPI_processed == 0)
	{
		if (!claim)
			return false;
		/* first claim: the scope becomes ours, unless someone beats us */
		StatementExecAs(table_owner, OncePlan(ONCE_SCOPE_ADD), values, NULL, false, -1);
		StatementExecAs(table_owner, OncePlan(ONCE_SCOPE_OWNER), values, NULL, false, 1);
	}
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (has_privs_of_role(user, owner))
		return true;

	name = GetUserNameFromId(owner, true);
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for scope \"%s\"", text_to_cstring(scope)),
			 name ?
			 errdetail("Scope \"%s\" belongs to role %s, the role that claimed its first token.",
					   text_to_cstring(scope), name) :
			 errdetail("Scope \"%s\" belongs to a dropped role (OID %u).",
					   text_to_cstring(scope), owner),
			 errhint("Use a scope of your own, or run this as a member of the scope's owner.")));
	pg_unreachable();
}

/*
 * ReadToken reads a token's row; values stay valid until SPI_finish.
 */
static TokenRow
ReadToken(text *scope, text *token, Oid table_owner, bool read_only)
{
	Datum		values[2] = {PointerGetDatum(scope), PointerGetDatum(token)};
	TokenRow	row = {0};
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;

	StatementExecAs(table_owner, OncePlan(ONCE_READ), values, NULL, read_only, -1);
	if (SPI_processed == 0)
		return row;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	row.found = true;
	d = SPI_getbinval(tup, desc, 1, &isnull);
	row.fingerprint = isnull ? NULL : DatumGetByteaPP(d);
	row.result = SPI_getbinval(tup, desc, 2, &row.result_null);
	row.xmin = DatumGetTransactionId(SPI_getbinval(tup, desc, 3, &isnull));
	return row;
}

/*
 * SameFingerprint tells whether two fingerprints (NULL: no payload) agree.
 */
static bool
SameFingerprint(bytea *a, bytea *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * CheckPayload raises EO002 when a token that was already claimed is
 * claimed again with another payload.
 */
static void
CheckPayload(text *scope, text *token, bytea *fp, Oid table_owner)
{
	TokenRow	row = ReadToken(scope, token, table_owner, false);

	/* forgotten since our INSERT found it: nothing left to compare */
	if (!row.found || SameFingerprint(row.fingerprint, fp))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_TOKEN_MISMATCH),
			 errmsg("token \"%s\" of scope \"%s\" was claimed with another payload",
					text_to_cstring(token), text_to_cstring(scope)),
			 row.fingerprint == NULL ?
			 errdetail("The token was claimed without a payload; this call passes one.") :
			 fp == NULL ?
			 errdetail("The token was claimed with a payload; this call passes none.") :
			 errdetail("The SHA-256 of this payload differs from that of the payload the token was claimed with."),
			 errhint("A retry must pass the same payload as the first call; use a new token for a different request.")));
}

/*
 * exactonce_once claims (scope, token) in the caller's transaction: true the
 * first time among committed transactions, false afterwards.
 */
Datum
exactonce_once(PG_FUNCTION_ARGS)
{
	text	   *scope = OnceArg(fcinfo, 0, "scope", ONCE_MAX_SCOPE);
	text	   *token = OnceArg(fcinfo, 1, "token", ONCE_MAX_TOKEN);
	bytea	   *fp = PG_ARGISNULL(2) ? NULL : Fingerprint(PG_GETARG_TEXT_PP(2));
	Datum		values[4];
	char		nulls[4] = {' ', ' ', fp ? ' ' : 'n', ' '};
	Oid			table_owner;
	bool		claimed;
	int			nestlevel;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	table_owner = StatementTableOwner("once_token");
	ScopeAccess(scope, true, table_owner, false);

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(token);
	values[2] = PointerGetDatum(fp);
	values[3] = ObjectIdGetDatum(GetUserId());
	StatementExecAs(table_owner, OncePlan(ONCE_CLAIM), values, nulls, false, -1);
	claimed = SPI_processed == 1;
	if (!claimed)
		CheckPayload(scope, token, fp, table_owner);

	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_BOOL(claimed);
}

/*
 * exactonce_once_result stores the result of the work a token stands for.
 * Only the transaction that claimed the token may do so, so the result
 * commits with the claim and the work, or not at all.
 */
Datum
exactonce_once_result(PG_FUNCTION_ARGS)
{
	text	   *scope = OnceArg(fcinfo, 0, "scope", ONCE_MAX_SCOPE);
	text	   *token = OnceArg(fcinfo, 1, "token", ONCE_MAX_TOKEN);
	Datum		values[3];
	char		nulls[3] = {' ', ' ', PG_ARGISNULL(2) ? 'n' : ' '};
	Oid			table_owner;
	TokenRow	row = {0};
	int			nestlevel;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	table_owner = StatementTableOwner("once_token");
	if (ScopeAccess(scope, false, table_owner, false))
		row = ReadToken(scope, token, table_owner, false);
	if (!row.found)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("token \"%s\" of scope \"%s\" is not claimed",
						text_to_cstring(token), text_to_cstring(scope)),
				 errhint("Call exactonce.once() for the token first, in the same transaction.")));
	if (!TransactionIdIsCurrentTransactionId(row.xmin))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("token \"%s\" of scope \"%s\" was claimed by another transaction",
						text_to_cstring(token), text_to_cstring(scope)),
				 errdetail("A result is stored by the transaction that claimed the token, so that it commits with the work."),
				 errhint("Store the result where exactonce.once() returned true; on a retry read it with exactonce.once_get().")));

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(token);
	values[2] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	StatementExecAs(table_owner, OncePlan(ONCE_STORE), values, nulls, false, 1);

	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	if (PG_ARGISNULL(2))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(PG_GETARG_DATUM(2));
}

/*
 * exactonce_once_get returns the result stored with a token, or NULL when
 * the token is not claimed or has no result.
 */
Datum
exactonce_once_get(PG_FUNCTION_ARGS)
{
	text	   *scope = OnceArg(fcinfo, 0, "scope", ONCE_MAX_SCOPE);
	text	   *token = OnceArg(fcinfo, 1, "token", ONCE_MAX_TOKEN);
	Oid			table_owner;
	TokenRow	row = {0};
	Datum		result = (Datum) 0;
	int			nestlevel;

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	table_owner = StatementTableOwner("once_token");
	if (ScopeAccess(scope, false, table_owner, true))
		row = ReadToken(scope, token, table_owner, true);
	if (row.found && !row.result_null)
		result = SPI_datumTransfer(row.result, false, -1);
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();

	if (!row.found || row.result_null)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/*
 * exactonce_forget deletes the tokens of a scope claimed more than
 * older_than ago and returns how many it deleted.  It is the only way a
 * token is ever forgotten.
 */
Datum
exactonce_forget(PG_FUNCTION_ARGS)
{
	text	   *scope = OnceArg(fcinfo, 0, "scope", ONCE_MAX_SCOPE);
	Interval   *older_than;
	Interval	zero = {0};
	Datum		values[2];
	Oid			table_owner;
	int64		forgotten = 0;
	int			nestlevel;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("older_than must not be NULL"),
				 errhint("Pass '0' to forget every token of the scope claimed before this transaction.")));
	older_than = PG_GETARG_INTERVAL_P(1);
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(older_than),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("older_than must not be negative"),
				 errhint("Pass how long ago the oldest token to keep was claimed, for example '30 days'.")));

	SPI_connect();
	nestlevel = StatementPinSearchPath();
	table_owner = StatementTableOwner("once_token");
	if (ScopeAccess(scope, false, table_owner, false))
	{
		values[0] = PointerGetDatum(scope);
		values[1] = IntervalPGetDatum(older_than);
		StatementExecAs(table_owner, OncePlan(ONCE_FORGET), values, NULL, false, -1);
		forgotten = (int64) SPI_processed;
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	PG_RETURN_INT64(forgotten);
}
