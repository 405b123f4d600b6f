/*-------------------------------------------------------------------------
 *
 * range.c
 *		A range of keys, and how a node refuses the ranges it gave away.
 *
 * A range of keys is a hash bucket: the keys whose key_bucket(key, modulus)
 * is remainder, which is PostgreSQL's hash partitioning of text COLLATE "C"
 * (compute_partition_hash_value), the function by which the coordinator's
 * ingest routes them.
 *
 * A node that gave a range away (move.c) refuses its keys, so that a
 * direct producer's event cannot be applied where the key's state no
 * longer is.  Two objects on its queue do it, both named
 * exactonce_moved_<modulus>_<remainder>: a row trigger
 * (exactonce.refuse_moved_key()), which also parks the range's events
 * while it moves (park.c), and, once the move is done, a check
 * (exactonce.key_stays()) in its place, which keeps COPY into the queue
 * batched where a row trigger makes it insert row by row.
 *
 * Whether they refuse is data, not DDL: the range's latest move on this
 * node, in exactonce.key_move, 'out' to refuse.  So a range that comes
 * back is taken in by the move's own row of key_move, in the move's
 * prepared transaction, and not by dropping the check, which would hold
 * the queue's ACCESS EXCLUSIVE lock in that transaction until the
 * coordinator's switch: the coordinator's producers would wait on it, and
 * the switch on them.  The objects are tidied (RangeTidy) where a short
 * lock allows: at the switch, or when a move is given up.
 *
 * Each backend keeps what it read of key_move until a relation's cache is
 * invalidated: a row of key_move invalidates the queue's at commit, and an
 * insert into the queue takes its lock, which reads the invalidations,
 * before it fires the trigger or check.  A read takes the latest snapshot,
 * not the transaction's: a producer through postgres_fdw runs in
 * REPEATABLE READ.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "parser/parse_func.h"
#include "partitioning/partbounds.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "catalog/statement.h"
#include "distributed/park.h"
#include "distributed/range.h"
#include "utils/subxact.h"

PG_FUNCTION_INFO_V1(exactonce_refuse_moved_key);
PG_FUNCTION_INFO_V1(exactonce_key_stays);
PG_FUNCTION_INFO_V1(exactonce_key_stays_here);

/* the trigger, then the check, of a node's queue that refuses a range */
#define REFUSAL_NAME	"exactonce_moved_%d_%d"

/*
 * RangeBucket returns the hash remainder of a key for a modulus, as the
 * hash partitioning of text COLLATE "C" computes it.
 */
int32
RangeBucket(Datum key, int32 modulus)
{
	static FmgrInfo hash;
	static bool ready = false;
	Oid			collation = C_COLLATION_OID;
	bool		isnull = false;

	if (!ready)
	{
		fmgr_info_cxt(F_HASHTEXTEXTENDED, &hash, TopMemoryContext);
		ready = true;
	}
	return (int32) (compute_partition_hash_value(1, &hash, &collation, &key, &isnull) % (uint64) modulus);
}

/*
 * RangeCheck insists on a valid (modulus, remainder).
 */
void
RangeCheck(int32 modulus, int32 remainder)
{
	if (modulus < 1 || remainder < 0 || remainder >= modulus)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a range of keys is a modulus of at least 1 and a remainder from 0 to modulus - 1, not (%d, %d)",
						modulus, remainder)));
}

/*
 * RangeOverlap tells whether two ranges share keys; one modulus divides the
 * other, as in any hash-partitioned table.
 */
bool
RangeOverlap(int32 m1, int32 r1, int32 m2, int32 r2)
{
	int32		g = Min(m1, m2);

	return r1 % g == r2 % g;
}

/*
 * LatestMove tells whether the range's latest move on this node, as
 * committed by now, took it away, and to which server (*server, if not
 * NULL, palloc'd in the caller's context).
 */
static bool
LatestMove(const char *pipeline, int32 modulus, int32 remainder, char **server)
{
	Oid			types[3] = {NAMEOID, INT4OID, INT4OID};
	Datum		values[3];
	MemoryContext cxt = CurrentMemoryContext;
	int			nestlevel;
	bool		away = false;

	values[0] = DirectFunctionCall1(namein, CStringGetDatum(pipeline));
	values[1] = Int32GetDatum(modulus);
	values[2] = Int32GetDatum(remainder);
	SPI_connect();
	nestlevel = StatementPinSearchPath();
	StatementReadLatestAs(StatementTableOwner("key_move"),
						  StatementPrepareFixed("SELECT direction OPERATOR(pg_catalog.=) 'out', peer FROM exactonce.key_move"
												" WHERE pipeline OPERATOR(pg_catalog.=) $1"
												" AND modulus OPERATOR(pg_catalog.=) $2 AND remainder OPERATOR(pg_catalog.=) $3"
												" ORDER BY moved_at DESC LIMIT 1", 3, types),
						  values, NULL, -1);
	if (SPI_processed > 0)
	{
		bool		isnull;

		away = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (server != NULL)
			*server = MemoryContextStrdup(cxt, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2));
	}
	StatementUnpinSearchPath(nestlevel);
	SPI_finish();
	return away;
}

/*
 * TriggerOf and CheckOf find the trigger and the check of the range on the
 * pipeline's queue; InvalidOid if there is none.
 */
static Oid
TriggerOf(Pipeline *p, int32 modulus, int32 remainder)
{
	return get_trigger_oid(p->ingest, psprintf(REFUSAL_NAME, modulus, remainder), true);
}

static Oid
CheckOf(Pipeline *p, int32 modulus, int32 remainder)
{
	return get_relation_constraint_oid(p->ingest, psprintf(REFUSAL_NAME, modulus, remainder), true);
}

/*
 * RangeAway tells whether the range has moved away from the pipeline's
 * node: the queue has its refusal, and the range's latest move here took
 * it away.  Its events are refused, unless they are parked.
 */
bool
RangeAway(Pipeline *p, int32 modulus, int32 remainder)
{
	return (OidIsValid(TriggerOf(p, modulus, remainder)) || OidIsValid(CheckOf(p, modulus, remainder))) &&
		LatestMove(p->name, modulus, remainder, NULL);
}

/*
 * RangeParking tells whether the node parks the range's events: a move of
 * the range away is under way, or cut off.
 */
bool
RangeParking(Pipeline *p, int32 modulus, int32 remainder)
{
	return OidIsValid(ParkTable(p->nspid, modulus, remainder));
}

/* What a backend read of a range's latest move, for a role (Refused). */
typedef struct RefusalKey
{
	NameData	pipeline;
	Oid			role;
	int32		modulus;
	int32		remainder;
} RefusalKey;

typedef struct Refusal
{
	RefusalKey	key;
	bool		away;
	char		server[NAMEDATALEN];
} Refusal;

static HTAB *refusals = NULL;
static bool refusals_stale = false;

static void
RefusalsForget(Datum arg, Oid relid)
{
	refusals_stale = true;
}

/*
 * Refused tells whether the pipeline's queue refuses the range's keys, for
 * the trigger and the check, as the current role, who must be allowed to
 * insert into the queue; *server is where they went.
 */
static bool
Refused(const char *pipeline, int32 modulus, int32 remainder, const char **server)
{
	RefusalKey	key;
	Refusal    *r;
	Oid			ingest;
	char	   *peer = NULL;
	bool		away;

	AcceptInvalidationMessages();
	if (refusals == NULL || refusals_stale)
	{
		HASHCTL		ctl;

		if (refusals == NULL)
			CacheRegisterRelcacheCallback(RefusalsForget, (Datum) 0);
		else
			hash_destroy(refusals);
		ctl.keysize = sizeof(RefusalKey);
		ctl.entrysize = sizeof(Refusal);
		ctl.hcxt = TopMemoryContext;
		refusals = hash_create("exactonce refusals", 16, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		refusals_stale = false;
	}
	memset(&key, 0, sizeof(key));
	namestrcpy(&key.pipeline, pipeline);
	key.role = GetUserId();
	key.modulus = modulus;
	key.remainder = remainder;
	r = hash_search(refusals, &key, HASH_FIND, NULL);
	if (r == NULL)
	{
		/* whether a queue takes a key is for those who may insert into it */
		ingest = get_relname_relid("ingest", get_namespace_oid(pipeline, true));
		if (!OidIsValid(ingest))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("pipeline \"%s\" does not exist", pipeline),
					 errhint("The view exactonce.pipelines lists the pipelines.")));
		if (pg_class_aclcheck(ingest, key.role, ACL_INSERT) != ACLCHECK_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for the queue of pipeline \"%s\"", pipeline),
					 errdetail("Whether a pipeline's queue refuses a key is for the roles that may insert into it.")));
		away = LatestMove(pipeline, modulus, remainder, &peer);
		r = hash_search(refusals, &key, HASH_ENTER, NULL);
		r->away = away;
		strlcpy(r->server, peer ? peer : "", NAMEDATALEN);
	}
	*server = r->server;
	return r->away;
}

/*
 * RefuseMovedKey raises the error of an event of a key that moved away.
 */
static void
RefuseMovedKey(Datum key, int32 modulus, int32 remainder, const char *server)
{
	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_KEY_MOVED),
			 errmsg("key \"%s\" has moved to server \"%s\"", TextDatumGetCString(key), server),
			 errdetail("The keys whose exactonce.key_bucket(key, %d) is %d were moved from this node by exactonce.move_keys().",
					   modulus, remainder),
			 errhint("Insert through the coordinator's ingest, which routes each key to its node.")));
}

/*
 * exactonce_refuse_moved_key is the trigger on a node's queue that parks
 * the events of a range while it moves away (park.c), and refuses them
 * once it has: arguments modulus, remainder, server (where it first went).
 */
Datum
exactonce_refuse_moved_key(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Trigger    *trigger;
	Relation	rel;
	TupleDesc	desc;
	int			attnum;
	int32		modulus,
				remainder;
	bool		isnull;
	Datum		key;
	const char *server;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) || !TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("exactonce.refuse_moved_key() must be a BEFORE INSERT trigger FOR EACH ROW")));
	trigger = trigdata->tg_trigger;
	rel = trigdata->tg_relation;
	desc = RelationGetDescr(rel);
	attnum = SPI_fnumber(desc, "key");
	if (trigger->tgnargs != 3 || attnum <= 0 || TupleDescAttr(desc, attnum - 1)->atttypid != TEXTOID)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("exactonce.refuse_moved_key() takes a modulus, a remainder and a server, on a table with a text column key")));
	modulus = pg_strtoint32(trigger->tgargs[0]);
	remainder = pg_strtoint32(trigger->tgargs[1]);
	RangeCheck(modulus, remainder);
	key = heap_getattr(trigdata->tg_trigtuple, attnum, desc, &isnull);
	if (isnull || RangeBucket(key, modulus) != remainder)
		return PointerGetDatum(trigdata->tg_trigtuple);
	/* while the keys move, the new node is to apply their events */
	if (ParkRow(rel, trigdata->tg_trigtuple, modulus, remainder))
		return PointerGetDatum(NULL);
	/* the queue's schema is its pipeline's */
	if (!Refused(get_namespace_name(RelationGetNamespace(rel)), modulus, remainder, &server))
		return PointerGetDatum(trigdata->tg_trigtuple);
	RefuseMovedKey(key, modulus, remainder, server);
	pg_unreachable();
}

/*
 * exactonce_key_stays_here is the check of a node's queue that refuses the
 * keys of a range once they have moved away (key, pipeline, modulus,
 * remainder): true for a key of another range, or of a range that is here
 * again.  A check, unlike a row trigger, leaves COPY into the queue its
 * batches.
 */
Datum
exactonce_key_stays_here(PG_FUNCTION_ARGS)
{
	int32		modulus = PG_GETARG_INT32(2);
	int32		remainder = PG_GETARG_INT32(3);
	const char *server;

	RangeCheck(modulus, remainder);
	if (RangeBucket(PG_GETARG_DATUM(0), modulus) != remainder ||
		!Refused(NameStr(*PG_GETARG_NAME(1)), modulus, remainder, &server))
		PG_RETURN_BOOL(true);
	RefuseMovedKey(PG_GETARG_DATUM(0), modulus, remainder, server);
	pg_unreachable();
}

/*
 * exactonce_key_stays is the check made before 1.26 (key, modulus,
 * remainder, server): it refuses the range's keys for as long as it is
 * there, and a range that comes back drops it (RangeTakeBack).
 */
Datum
exactonce_key_stays(PG_FUNCTION_ARGS)
{
	int32		modulus = PG_GETARG_INT32(1);
	int32		remainder = PG_GETARG_INT32(2);

	RangeCheck(modulus, remainder);
	if (RangeBucket(PG_GETARG_DATUM(0), modulus) != remainder)
		PG_RETURN_BOOL(true);
	RefuseMovedKey(PG_GETARG_DATUM(0), modulus, remainder, text_to_cstring(PG_GETARG_TEXT_PP(3)));
	pg_unreachable();
}

/*
 * CheckBefore126 tells whether a check of a range is the kind made before
 * 1.26, which refuses for as long as it is there.
 */
static bool
CheckBefore126(Oid check)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(check)};

	if (SPI_execute_with_args("SELECT 1 FROM pg_catalog.pg_depend"
							  " WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_constraint'::pg_catalog.regclass"
							  " AND objid OPERATOR(pg_catalog.=) $1"
							  " AND refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass"
							  " AND refobjid OPERATOR(pg_catalog.=)"
							  "  'exactonce.key_stays(pg_catalog.text, pg_catalog.int4, pg_catalog.int4, pg_catalog.text)'::pg_catalog.regprocedure",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read what check %u calls", check);
	return SPI_processed > 0;
}

/*
 * RangeClose readies the pipeline's queue to park, then refuse, the
 * range's events, as a range that leaves for server target: it adds the
 * range's trigger, or, where the trigger is there from an earlier move,
 * takes the lock that adding it would, so that every insert after this
 * transaction fires it with what this transaction did in view.  SPI is
 * connected; the caller acts as the owner.
 */
void
RangeClose(Pipeline *p, int32 modulus, int32 remainder, const char *target)
{
	const char *trigger = psprintf(REFUSAL_NAME, modulus, remainder);
	const char *s = quote_identifier(p->name);

	if (OidIsValid(TriggerOf(p, modulus, remainder)))
	{
		if (SPI_execute(psprintf("LOCK TABLE %s.ingest IN SHARE ROW EXCLUSIVE MODE", s), false, 0) < 0)
			elog(ERROR, "could not lock the queue of pipeline \"%s\"", p->name);
		return;
	}
	if (SPI_execute(psprintf("CREATE TRIGGER %1$s BEFORE INSERT ON %2$s.ingest FOR EACH ROW"
							 " EXECUTE FUNCTION exactonce.refuse_moved_key('%3$d', '%4$d', %5$s);\n"
							 "COMMENT ON TRIGGER %1$s ON %2$s.ingest IS %6$s",
							 quote_identifier(trigger), s, modulus, remainder, quote_literal_cstr(target),
							 quote_literal_cstr(psprintf("exactonce: parks the events of the keys whose key_bucket(key, %d) is %d while they move away, and refuses them once they have (first moved to server %s)",
														 modulus, remainder, target))),
					false, 0) < 0)
		elog(ERROR, "could not close the queue of pipeline \"%s\" to the keys moved", p->name);
}

/*
 * RangeTakeBack readies the pipeline's queue to take a range of keys that
 * comes back to the node, in the move's transaction: the row the move
 * adds to key_move lifts the range's refusal, but a check made before
 * 1.26 is dropped.  A range that overlaps one away from here without being
 * it is refused.  SPI is connected; the caller acts as the owner.
 */
void
RangeTakeBack(Pipeline *p, int32 modulus, int32 remainder)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(p->ingest)};
	List	   *names = NIL;
	ListCell   *lc;
	Oid			check;

	if (SPI_execute_with_args("SELECT tgname::pg_catalog.text FROM pg_catalog.pg_trigger"
							  " WHERE tgrelid OPERATOR(pg_catalog.=) $1 AND tgparentid OPERATOR(pg_catalog.=) 0"
							  " AND tgname OPERATOR(pg_catalog.~) '^exactonce_moved_[0-9]+_[0-9]+$'"
							  " UNION SELECT conname::pg_catalog.text FROM pg_catalog.pg_constraint"
							  " WHERE conrelid OPERATOR(pg_catalog.=) $1 AND contype OPERATOR(pg_catalog.=) 'c'"
							  " AND conname OPERATOR(pg_catalog.~) '^exactonce_moved_[0-9]+_[0-9]+$'",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the triggers and checks of pipeline \"%s\"", p->name);
	for (uint64 i = 0; i < SPI_processed; i++)
		names = lappend(names, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
	foreach(lc, names)
	{
		int32		m,
					r;

		if (sscanf(lfirst(lc), "exactonce_moved_%d_%d", &m, &r) != 2 || m < 1 ||
			(m == modulus && r == remainder))
			continue;
		if (RangeOverlap(m, r, modulus, remainder) && RangeAway(p, m, r))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("the keys (%d, %d) of pipeline \"%s\" overlap the keys (%d, %d) this node gave away",
							modulus, remainder, p->name, m, r),
					 errhint("Move the keys (%d, %d) back to this node whole.", m, r)));
	}
	check = CheckOf(p, modulus, remainder);
	if (OidIsValid(check) && CheckBefore126(check) &&
		SPI_execute(psprintf("ALTER TABLE %s.ingest DROP CONSTRAINT %s", quote_identifier(p->name),
							 quote_identifier(psprintf(REFUSAL_NAME, modulus, remainder))),
					false, 0) < 0)
		elog(ERROR, "could not open the queue of pipeline \"%s\" to the keys again", p->name);
}

/*
 * HaveNewCheck tells whether the catalog has the check of 1.26, which
 * refuses only while the range is away (before ALTER EXTENSION UPDATE,
 * checks of the kind made before go in).
 */
static bool
HaveNewCheck(void)
{
	Oid			args[4] = {TEXTOID, NAMEOID, INT4OID, INT4OID};

	return OidIsValid(LookupFuncName(list_make2(makeString("exactonce"), makeString("key_stays")), 4, args, true));
}

/* A range whose refusal is tidied (Tidy). */
typedef struct TidyArgs
{
	Pipeline   *p;
	int32		modulus;
	int32		remainder;
	bool		tidy;
} TidyArgs;

/*
 * Tidy leaves the range's refusal as it should be once no move of the
 * range is under way: a check if the range is away, nothing otherwise.
 * It waits at most 100 ms for the queue's lock, and does nothing while
 * the range is parked.
 */
static void
Tidy(void *arg)
{
	TidyArgs   *t = arg;
	Pipeline   *p = t->p;
	const char *s = quote_identifier(p->name);
	const char *name = quote_identifier(psprintf(REFUSAL_NAME, t->modulus, t->remainder));
	int			gucs = NewGUCNestLevel();
	StringInfoData sql;
	char	   *server = NULL;
	bool		away;
	Oid			check;

	(void) set_config_option("lock_timeout", "100", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	/* after the lock, no move of the range can start or end unseen */
	if (SPI_execute(psprintf("LOCK TABLE %s.ingest IN ACCESS EXCLUSIVE MODE", s), false, 0) < 0)
		elog(ERROR, "could not lock the queue of pipeline \"%s\"", p->name);
	AtEOXact_GUC(true, gucs);
	if (RangeParking(p, t->modulus, t->remainder))
		return;
	away = LatestMove(p->name, t->modulus, t->remainder, &server);
	check = CheckOf(p, t->modulus, t->remainder);
	initStringInfo(&sql);
	if (OidIsValid(TriggerOf(p, t->modulus, t->remainder)))
		appendStringInfo(&sql, "DROP TRIGGER %s ON %s.ingest;\n", name, s);
	/* a check made before 1.26 gives way to one that a move back lifts */
	if (OidIsValid(check) && (!away || (CheckBefore126(check) && HaveNewCheck())))
	{
		appendStringInfo(&sql, "ALTER TABLE %s.ingest DROP CONSTRAINT %s;\n", s, name);
		check = InvalidOid;
	}
	if (away && !OidIsValid(check))
	{
		if (HaveNewCheck())
			appendStringInfo(&sql, "ALTER TABLE %1$s.ingest ADD CONSTRAINT %2$s"
							 " CHECK (exactonce.key_stays(key, %3$s::pg_catalog.name, %4$d, %5$d)) NOT VALID;\n",
							 s, name, quote_literal_cstr(p->name), t->modulus, t->remainder);
		else
			appendStringInfo(&sql, "ALTER TABLE %1$s.ingest ADD CONSTRAINT %2$s"
							 " CHECK (exactonce.key_stays(key, %3$d, %4$d, %5$s)) NOT VALID;\n",
							 s, name, t->modulus, t->remainder, quote_literal_cstr(server));
		appendStringInfo(&sql, "COMMENT ON CONSTRAINT %s ON %s.ingest IS %s;\n", name, s,
						 quote_literal_cstr(psprintf("exactonce: refuses the keys whose key_bucket(key, %d) is %d while they are away from this node",
													 t->modulus, t->remainder)));
	}
	if (sql.len > 0 && SPI_execute(sql.data, false, 0) < 0)
		elog(ERROR, "could not tidy the refusal of keys (%d, %d) of pipeline \"%s\"", t->modulus, t->remainder,
			 p->name);
	t->tidy = true;
}

static bool
LockTimedOut(int sqlerrcode)
{
	return sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE;
}

/*
 * RangeTidy leaves the pipeline's queue refusing the range with a check if
 * it has moved away, and not at all otherwise (no row trigger, which makes
 * COPY insert row by row), and tells whether it does.  False while the
 * range's events are parked, or if the queue's lock did not come within
 * 100 ms.  SPI is connected; the caller acts as the owner.
 */
bool
RangeTidy(Pipeline *p, int32 modulus, int32 remainder)
{
	TidyArgs	t = {p, modulus, remainder, false};

	/* nothing to do, nothing to lock */
	if (!OidIsValid(TriggerOf(p, modulus, remainder)) && !RangeParking(p, modulus, remainder))
	{
		Oid			check = CheckOf(p, modulus, remainder);

		if (RangeAway(p, modulus, remainder) == OidIsValid(check) &&
			!(OidIsValid(check) && CheckBefore126(check) && HaveNewCheck()))
			return true;
	}
	return SubxactRun(Tidy, &t, LockTimedOut) == NULL && t.tidy;
}
