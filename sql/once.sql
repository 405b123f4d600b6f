-- Idempotency tokens: exactonce.once(scope, token, payload) is true exactly
-- once per (scope, token) among committed transactions; payload
-- fingerprints, stored results, forget(), rights and a pinned search_path.
-- (Two sessions racing on one token: test/isolation/specs/once_race.spec.)
CREATE EXTENSION exactonce;
SET client_min_messages = warning;

-- the first claim is true, every later one false, also in the same transaction
SELECT exactonce.once('orders', 'o-1') AS first, exactonce.once('orders', 'o-1') AS again;
SELECT exactonce.once('orders', 'o-1') AS next_transaction;
-- scopes are separate namespaces
SELECT exactonce.once('invoices', 'o-1') AS other_scope;

-- a claim rolls back with the transaction that made it
BEGIN;
SELECT exactonce.once('orders', 'o-2');
ROLLBACK;
SELECT exactonce.once('orders', 'o-2') AS after_rollback;
-- and with a savepoint
BEGIN;
SAVEPOINT s;
SELECT exactonce.once('orders', 'o-3');
ROLLBACK TO SAVEPOINT s;
SELECT exactonce.once('orders', 'o-3') AS after_savepoint_rollback;
COMMIT;
SELECT exactonce.once('orders', 'o-3') AS committed;

-- the claim commits with the caller's work: exactly-once for any SQL
CREATE TABLE payments (order_id text PRIMARY KEY, amount numeric);
CREATE FUNCTION pay(order_id text, amount numeric) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	IF NOT exactonce.once('payments', order_id, amount::text) THEN
		RETURN 'already paid: ' || exactonce.once_get('payments', order_id);
	END IF;
	INSERT INTO payments VALUES (order_id, amount);
	RETURN exactonce.once_result('payments', order_id, 'receipt ' || order_id);
END $$;
SELECT pay('p-1', 10);
SELECT pay('p-1', 10);
SELECT pay('p-2', 5);
SELECT * FROM payments ORDER BY order_id;

-- payload fingerprints: the same payload is a retry, another one an error
-- with its own SQLSTATE
\set VERBOSITY default
SELECT exactonce.once('fp', 'k', 'payload A') AS first;
SELECT exactonce.once('fp', 'k', 'payload A') AS retry;
SELECT exactonce.once('fp', 'k', 'payload B');
\echo :LAST_ERROR_SQLSTATE
SELECT exactonce.once('fp', 'k');
SELECT exactonce.once('fp', 'k2') AS no_payload;
SELECT exactonce.once('fp', 'k2', 'payload A');
SELECT exactonce.once('fp', 'k2') AS no_payload_again;
-- the fingerprint is the SHA-256 of the payload
SELECT fingerprint = sha256('payload A'::bytea) AS sha256 FROM exactonce.once_tokens
WHERE scope = 'fp' AND token = 'k';
-- pay() retried with another amount is refused
SELECT pay('p-1', 11);

-- arguments
SELECT exactonce.once(NULL, 'x');
SELECT exactonce.once('s', NULL);
SELECT exactonce.once('', 'x');
SELECT exactonce.once('s', '');
\echo :LAST_ERROR_SQLSTATE
SELECT exactonce.once('s', repeat('x', 2049));
\echo :LAST_ERROR_SQLSTATE
SELECT exactonce.once(repeat('s', 256), 'x');
SELECT exactonce.once('s', repeat('x', 2048)) AS longest_token;
SELECT exactonce.once('s', 'tökén ✓') AS any_text, exactonce.once('s', 'TÖKÉN ✓') AS case_matters;

-- stored results: only the claiming transaction stores one
BEGIN;
SELECT exactonce.once('res', 'r-1');
SELECT exactonce.once_result('res', 'r-1', 'first');
SELECT exactonce.once_result('res', 'r-1', 'changed in the same transaction');
SELECT exactonce.once_get('res', 'r-1');
COMMIT;
SELECT exactonce.once_get('res', 'r-1');
SELECT exactonce.once_result('res', 'r-1', 'overwrite');
\echo :LAST_ERROR_SQLSTATE
SELECT exactonce.once_result('res', 'never-claimed', 'x');
SELECT exactonce.once_result('no-such-scope', 'x', 'x');
-- a claim made in a released savepoint belongs to this transaction
BEGIN;
SAVEPOINT s;
SELECT exactonce.once('res', 'r-2');
RELEASE SAVEPOINT s;
SELECT exactonce.once_result('res', 'r-2', 'from a subtransaction');
COMMIT;
-- a NULL result is no result
BEGIN;
SELECT exactonce.once('res', 'r-3');
SELECT exactonce.once_result('res', 'r-3', NULL) IS NULL AS stored_null;
COMMIT;
SELECT token, exactonce.once_get(scope, token) FROM exactonce.once_tokens
WHERE scope = 'res' ORDER BY token;
SELECT exactonce.once_get('res', 'unknown') IS NULL AS unknown_token,
	   exactonce.once_get('unknown', 'x') IS NULL AS unknown_scope,
	   exactonce.once_get(NULL, 'x') IS NULL AS null_scope;

-- forget: the only way a token is forgotten; by claim age
SELECT exactonce.forget('orders', '1 hour') AS younger_kept;
SELECT exactonce.forget('orders', '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT exactonce.forget('orders', NULL);
SELECT exactonce.forget('no-such-scope', '0') AS unknown_scope;
BEGIN;
SELECT exactonce.once('orders', 'o-4');
SELECT exactonce.forget('orders', '0') AS claimed_before_this_transaction;
SELECT token FROM exactonce.once_tokens WHERE scope = 'orders';
COMMIT;
SELECT exactonce.once('orders', 'o-1') AS claimable_again;

-- REPEATABLE READ and SERIALIZABLE work too
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT exactonce.once('iso', 'rr'), exactonce.once('iso', 'rr');
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT exactonce.once('iso', 'rr') AS serializable, exactonce.once('iso', 's');
COMMIT;

-- rights: a scope belongs to the role that claimed its first token
CREATE ROLE regress_eo_once_a;
CREATE ROLE regress_eo_once_b;
CREATE ROLE regress_eo_once_member IN ROLE regress_eo_once_a;
SET ROLE regress_eo_once_a;
SELECT exactonce.once('a-scope', 't-1');
BEGIN;
SELECT exactonce.once('a-scope', 't-2');
SELECT exactonce.once_result('a-scope', 't-2', 'secret');
COMMIT;
SELECT scope, scope_owner, token, result, claimed_by FROM exactonce.once_tokens ORDER BY token;
RESET ROLE;
SELECT scope, owner FROM exactonce.once_scope WHERE scope = 'a-scope';

SET ROLE regress_eo_once_b;
-- another role can neither claim, read nor forget tokens of the scope
SELECT exactonce.once('a-scope', 't-1');
\echo :LAST_ERROR_SQLSTATE
SELECT exactonce.once('a-scope', 't-new');
SELECT exactonce.once_get('a-scope', 't-2');
SELECT exactonce.once_result('a-scope', 't-2', 'x');
SELECT exactonce.forget('a-scope', '0');
-- nor touch the tables
SELECT * FROM exactonce.once_token;
SELECT * FROM exactonce.once_scope;
DELETE FROM exactonce.once_token;
UPDATE exactonce.once_scope SET owner = 'regress_eo_once_b';
INSERT INTO exactonce.once_token (scope, token, claimed_by) VALUES ('a-scope', 't-9', 'regress_eo_once_b');
-- the view shows only its own scopes
SELECT count(*) AS visible FROM exactonce.once_tokens;
-- a leaky function cannot see through the view
CREATE FUNCTION pg_temp.leak(text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS
	$$BEGIN RAISE NOTICE 'saw %', $1; RETURN true; END$$;
SET client_min_messages = notice;
SELECT count(*) FROM exactonce.once_tokens WHERE pg_temp.leak(token);
SET client_min_messages = warning;
DROP FUNCTION pg_temp.leak(text);
-- its own scope is its own
SELECT exactonce.once('b-scope', 't-1');
RESET ROLE;

-- members of the owner share the scope
SET ROLE regress_eo_once_member;
SELECT exactonce.once('a-scope', 't-1') AS member_retry, exactonce.once('a-scope', 't-3') AS member_claim;
SELECT exactonce.once_get('a-scope', 't-2') AS member_reads;
SELECT exactonce.forget('a-scope', '0') AS member_forgets;
RESET ROLE;
-- a superuser may forget any scope
SELECT exactonce.forget('b-scope', '0') AS superuser_forgets;

-- nothing planted in the caller's search_path changes what once() and
-- forget() do, also when they prepare their statements in a new session
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$;
CREATE TABLE public.once_token (scope text, token text);
\c -
SET client_min_messages = warning;
SET search_path = public, pg_catalog;
SELECT now() < '2001-01-01' AS planted;
SELECT exactonce.once('orders', 'o-5') AS claimed;
SELECT count(*) AS decoy_rows FROM public.once_token;
SELECT claimed_at > '2001-01-01' AS real_time FROM exactonce.once_tokens WHERE token = 'o-5';
SELECT exactonce.forget('orders', '0') AS forgets_by_real_time;
RESET search_path;
DROP FUNCTION public.now();
DROP TABLE public.once_token;

-- tokens are part of the extension's dumped data
SELECT c::regclass FROM pg_extension, unnest(extconfig) c
WHERE extname = 'exactonce' AND c::regclass::text ~ '^exactonce\.(once_|source_)' ORDER BY 1;

DROP FUNCTION pay(text, numeric);
DROP TABLE payments;
DROP EXTENSION exactonce;
DROP ROLE regress_eo_once_a, regress_eo_once_b, regress_eo_once_member;
