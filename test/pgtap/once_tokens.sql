-- test/pgtap/once_tokens.sql
--
-- Idempotency tokens, rule by rule:
--
--	 exactonce.once(scope, token, payload DEFAULT NULL)	-> boolean
--	 exactonce.once_result(scope, token, result)			-> text
--	 exactonce.once_get(scope, token)					-> text
--	 exactonce.forget(scope, older_than)					-> bigint
--
-- plus a randomized run: 20,000 claims of 3,000 tokens in random order,
-- each token true exactly once.  Claims racing between two sessions are in
-- test/isolation/specs/once_race.spec (pgTAP has one session).
--
-- Everything happens in one transaction that is rolled back.

BEGIN;
SELECT plan(57);

------------------------------------------------------------------------------
-- The interface
------------------------------------------------------------------------------

SELECT has_function('exactonce', 'once', ARRAY['text', 'text', 'text'], 'once(scope, token, payload) exists');
SELECT function_returns('exactonce', 'once', ARRAY['text', 'text', 'text'], 'boolean', 'once() returns boolean');
SELECT has_function('exactonce', 'once_result', ARRAY['text', 'text', 'text'], 'once_result(scope, token, result) exists');
SELECT has_function('exactonce', 'once_get', ARRAY['text', 'text'], 'once_get(scope, token) exists');
SELECT function_returns('exactonce', 'forget', ARRAY['text', 'interval'], 'bigint', 'forget(scope, older_than) returns bigint');
SELECT table_privs_are('exactonce', 'once_token', 'public', ARRAY[]::text[], 'PUBLIC has no privilege on the tokens');
SELECT table_privs_are('exactonce', 'once_scope', 'public', ARRAY[]::text[], 'PUBLIC has no privilege on the scopes');
SELECT table_privs_are('exactonce', 'once_tokens', 'public', ARRAY['SELECT'], 'PUBLIC may read the filtered view');
SELECT ok((SELECT 'security_barrier=true' = ANY (reloptions) FROM pg_class WHERE oid = 'exactonce.once_tokens'::regclass),
	'the view is a security barrier');
SELECT ok((SELECT bool_and(c::regclass::text <> '') AND count(*) = 2 FROM pg_extension, unnest(extconfig) c
		   WHERE extname = 'exactonce' AND c::regclass::text IN ('exactonce.once_token', 'exactonce.once_scope')),
	'tokens and scopes are dumped with the database');

------------------------------------------------------------------------------
-- true once, then false
------------------------------------------------------------------------------

SELECT is(exactonce.once('tap', 'a'), true, 'the first claim is true');
SELECT is(exactonce.once('tap', 'a'), false, 'the second claim is false');
SELECT is(exactonce.once('tap', 'a', NULL), false, 'an explicit NULL payload is no payload');
SELECT is(exactonce.once('tap2', 'a'), true, 'the same token in another scope is another token');
SELECT is(exactonce.once('tap', 'A'), true, 'tokens are compared byte for byte');
SELECT is((SELECT count(*) FROM exactonce.once_tokens WHERE scope = 'tap' AND token = 'a'), 1::bigint,
	'one row per claimed token');
SELECT is((SELECT claimed_by::text FROM exactonce.once_tokens WHERE scope = 'tap' AND token = 'a'), current_user::text,
	'the token records who claimed it');

SAVEPOINT before_claim;
SELECT is(exactonce.once('tap', 'sp'), true, 'a claim in a savepoint');
ROLLBACK TO SAVEPOINT before_claim;
SELECT is(exactonce.once('tap', 'sp'), true, 'is undone with the savepoint: the token is free again');
SELECT is(exactonce.once('tap', 'sp'), false, 'and taken now');

------------------------------------------------------------------------------
-- payload fingerprints
------------------------------------------------------------------------------

SELECT is(exactonce.once('tap', 'p', '{"amount": 10}'), true, 'a claim with a payload');
SELECT is(exactonce.once('tap', 'p', '{"amount": 10}'), false, 'a retry with the same payload is false');
SELECT is((SELECT fingerprint FROM exactonce.once_tokens WHERE scope = 'tap' AND token = 'p'),
	sha256(convert_to('{"amount": 10}', 'UTF8')), 'the fingerprint is the SHA-256 of the payload');
SELECT throws_ok($$SELECT exactonce.once('tap', 'p', '{"amount": 11}')$$, 'EO002',
	'token "p" of scope "tap" was claimed with another payload', 'another payload raises EO002');
SELECT throws_ok($$SELECT exactonce.once('tap', 'p')$$, 'EO002', NULL, 'no payload where there was one raises EO002');
SELECT throws_ok($$SELECT exactonce.once('tap', 'a', 'x')$$, 'EO002', NULL, 'a payload where there was none raises EO002');
SELECT is(exactonce.once('tap', 'p', '{"amount": 10}'), false, 'a refused retry changed nothing');

------------------------------------------------------------------------------
-- arguments
------------------------------------------------------------------------------

SELECT throws_ok($$SELECT exactonce.once(NULL, 'x')$$, '22004', 'scope must not be NULL', 'NULL scope');
SELECT throws_ok($$SELECT exactonce.once('tap', NULL)$$, '22004', 'token must not be NULL', 'NULL token');
SELECT throws_ok($$SELECT exactonce.once('tap', '')$$, '22023', 'token must not be empty', 'empty token');
SELECT throws_ok($$SELECT exactonce.once('', 'x')$$, '22023', 'scope must not be empty', 'empty scope');
SELECT throws_ok($$SELECT exactonce.once('tap', repeat('x', 2049))$$, '22001', 'token is too long', 'a token of 2049 bytes');
SELECT is(exactonce.once('tap', repeat('é', 1024)), true, 'a token of 2048 bytes');

------------------------------------------------------------------------------
-- stored results
------------------------------------------------------------------------------

SELECT is(exactonce.once_result('tap', 'a', 'receipt 1'), 'receipt 1', 'the claiming transaction stores a result');
SELECT is(exactonce.once_get('tap', 'a'), 'receipt 1', 'once_get returns it');
SELECT is(exactonce.once_get('tap', 'nope'), NULL, 'once_get of an unclaimed token is NULL');
SELECT is(exactonce.once_get('nope', 'a'), NULL, 'once_get in an unknown scope is NULL');
SELECT throws_ok($$SELECT exactonce.once_result('tap', 'nope', 'x')$$, '55000',
	'token "nope" of scope "tap" is not claimed', 'no result without a claim');
-- a token claimed two days ago (inserted directly, as only the extension's
-- owner can)
INSERT INTO exactonce.once_scope (scope, owner) VALUES ('tap-old', current_user::regrole);
INSERT INTO exactonce.once_token (scope, token, claimed_by, claimed_at, result)
	VALUES ('tap-old', 'old', current_user::regrole, now() - interval '2 days', 'stored long ago');
SELECT is(exactonce.once('tap-old', 'old'), false, 'a token claimed long ago is still claimed');
SELECT is(exactonce.once_get('tap-old', 'old'), 'stored long ago', 'and its result is there for a retry');

------------------------------------------------------------------------------
-- forget
------------------------------------------------------------------------------

SELECT is(exactonce.forget('tap-old', '3 days'), 0::bigint, 'forget keeps tokens younger than older_than');
SELECT is(exactonce.forget('tap-old', '1 day'), 1::bigint, 'and forgets older ones');
SELECT is(exactonce.once('tap-old', 'old'), true, 'a forgotten token can be claimed again');
SELECT is(exactonce.forget('tap', '0'), 0::bigint, 'tokens claimed in this transaction are not older than 0');
SELECT throws_ok($$SELECT exactonce.forget('tap', '-1 day')$$, '22023', 'older_than must not be negative', 'negative older_than');

------------------------------------------------------------------------------
-- rights
------------------------------------------------------------------------------

CREATE ROLE regress_once_owner;
CREATE ROLE regress_once_other;
CREATE ROLE regress_once_member IN ROLE regress_once_owner;
SET LOCAL ROLE regress_once_owner;
SELECT is(exactonce.once('tap-owned', 't'), true, 'a role claims the first token of a scope');
RESET ROLE;
SELECT is((SELECT owner::text FROM exactonce.once_scope WHERE scope = 'tap-owned'), 'regress_once_owner',
	'and owns the scope');
SET LOCAL ROLE regress_once_other;
SELECT throws_ok($$SELECT exactonce.once('tap-owned', 'u')$$, '42501', 'permission denied for scope "tap-owned"',
	'another role cannot claim in it');
SELECT throws_ok($$SELECT exactonce.once_get('tap-owned', 't')$$, '42501', NULL, 'nor read its results');
SELECT throws_ok($$SELECT exactonce.forget('tap-owned', '0')$$, '42501', NULL, 'nor forget its tokens');
SELECT throws_ok($$SELECT token FROM exactonce.once_token$$, '42501', NULL, 'nor read the tokens table');
SELECT is((SELECT count(*) FROM exactonce.once_tokens), 0::bigint, 'the view shows it nothing of other scopes');
RESET ROLE;
SET LOCAL ROLE regress_once_member;
SELECT is(exactonce.once('tap-owned', 't'), false, 'a member of the owner shares the scope');
RESET ROLE;

------------------------------------------------------------------------------
-- randomized: 20,000 claims of 3,000 tokens, in random order, with payloads
-- and results; each token is true exactly once, its first caller's result
-- is what every later caller reads
------------------------------------------------------------------------------

SELECT setseed(0.42);
CREATE TEMP TABLE calls AS
SELECT i, 'tok-' || (random() * 2999)::int AS token FROM generate_series(1, 20000) i;
CREATE TEMP TABLE answers (i int, token text, claimed boolean, result text);
DO $$
DECLARE
	c record;
	claimed boolean;
BEGIN
	FOR c IN SELECT * FROM calls ORDER BY i LOOP
		claimed := exactonce.once('tap-random', c.token, 'payload of ' || c.token);
		IF claimed THEN
			PERFORM exactonce.once_result('tap-random', c.token, 'first call ' || c.i);
		END IF;
		INSERT INTO answers VALUES (c.i, c.token, claimed, exactonce.once_get('tap-random', c.token));
	END LOOP;
END $$;
SELECT is((SELECT count(*) FROM answers WHERE claimed), (SELECT count(DISTINCT token) FROM calls),
	'as many true answers as distinct tokens');
SELECT is((SELECT count(*) FROM (SELECT token FROM answers WHERE claimed GROUP BY token HAVING count(*) > 1) d), 0::bigint,
	'no token was true twice');
SELECT is((SELECT count(*) FROM answers a
		   JOIN (SELECT token, 'first call ' || min(i) AS result FROM calls GROUP BY token) f USING (token)
		   WHERE a.result IS DISTINCT FROM f.result), 0::bigint,
	'every caller read the result of the first call of its token');
SELECT is((SELECT count(*) FROM exactonce.once_tokens WHERE scope = 'tap-random'), (SELECT count(DISTINCT token) FROM calls),
	'one stored token per distinct token');

SELECT * FROM finish();
ROLLBACK;
