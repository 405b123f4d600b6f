/*-------------------------------------------------------------------------
 *
 * remake.c
 *		What was made on a pipeline's table or view that exactonce drops and
 *		makes again, made again on the new one, or refused.
 *
 * set_shards() makes the queue's tables anew (ingest_0, ingest_1 and their
 * tables per shard) and alter_pipeline_as() the view result.  Their owner,
 * or a DBA, may have made things on the old ones: a trigger that hears of
 * each retirement, a grant to the readers of the view, an index.  None of
 * it is dropped without a word.  The triggers, the privileges the owner
 * granted and the storage parameters are kept (RemakeKeep) and made again
 * on the relation of the same name once it exists (RemakeRestore), the
 * parameters where it is of the same kind (a partition that set_shards()
 * cuts by shard, or makes plain again, has none to take them: its tables
 * get the queue's own); anything else, a privilege on a column, and a
 * privilege that another role granted (the owner cannot grant it again in
 * that role's name) make the command fail, naming it, as a DROP without
 * CASCADE would.  Comments are exactonce's own, and made anew.  What a
 * relation gets anew on its own -- a partition's clones of its parent's
 * triggers and indexes, inherited constraints, defaults, its own
 * partitions, a view's query -- is left out.
 *
 * The statements are made from the catalogs (pg_get_triggerdef, quoted
 * names) under the pinned search_path and run as the pipeline's owner, who
 * could have made each of them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "catalog/remake.h"

/*
 * TextsOf returns the texts a query of one text column, with relid as its
 * parameter $1, reads.
 */
static List *
TextsOf(const char *sql, Oid relid)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};
	List	   *texts = NIL;
	bool		isnull;

	if (SPI_execute_with_args(sql, 1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the catalog for relation %u", relid);
	for (uint64 i = 0; i < SPI_processed; i++)
		texts = lappend(texts, TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[i],
																 SPI_tuptable->tupdesc, 1, &isnull)));
	return texts;
}

/*
 * RemakeKeep reads what was made on relation relid, which command is about
 * to drop and make again under the same name, and refuses what it cannot
 * make again.
 */
RemakeKept *
RemakeKeep(Oid relid, const char *command)
{
	RemakeKept *kept = palloc0(sizeof(RemakeKept));
	List	   *refused;
	List	   *settings;

	kept->relname = get_rel_name(relid);
	refused = TextsOf("SELECT CASE WHEN w.rulename = '_RETURN'"
					  " THEN pg_catalog.format('view %s', w.ev_class::pg_catalog.regclass)"
					  " ELSE pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) END"
					  " FROM pg_catalog.pg_depend d LEFT JOIN pg_catalog.pg_rewrite w"
					  " ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND w.oid = d.objid"
					  " WHERE d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass"
					  " AND d.refobjid = $1 AND d.deptype IN ('n', 'a')"
					  " AND d.classid NOT IN ('pg_catalog.pg_attrdef'::pg_catalog.regclass,"
					  " 'pg_catalog.pg_trigger'::pg_catalog.regclass)"
					  " AND NOT (d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass"
					  " AND EXISTS (SELECT FROM pg_catalog.pg_inherits i WHERE i.inhrelid = d.objid))"
					  " AND NOT (d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass"
					  " AND EXISTS (SELECT FROM pg_catalog.pg_constraint k WHERE k.oid = d.objid AND NOT k.conislocal))"
					  " AND NOT (d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass"
					  " AND EXISTS (SELECT FROM pg_catalog.pg_rewrite r WHERE r.oid = d.objid"
					  " AND r.ev_class = $1 AND r.rulename = '_RETURN'))"
					  " UNION ALL"
					  " SELECT pg_catalog.format('a privilege on %s granted by role %s',"
					  " c.oid::pg_catalog.regclass, a.grantor::pg_catalog.regrole)"
					  " FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a"
					  " WHERE c.oid = $1 AND a.grantor <> c.relowner"
					  " UNION ALL"
					  " SELECT pg_catalog.format('a privilege on column %s of %s', a.attname,"
					  " a.attrelid::pg_catalog.regclass)"
					  " FROM pg_catalog.pg_attribute a WHERE a.attrelid = $1 AND a.attacl IS NOT NULL"
					  " LIMIT 1", relid);
	if (refused != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("%s would drop %s", command, (char *) linitial(refused)),
				 errdetail("%s makes %s anew; it keeps the triggers made on it, the privileges its owner granted and its storage parameters.",
						   command, quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
															   kept->relname)),
				 errhint("Drop it first, and make it again afterwards.")));

	kept->triggers = TextsOf("SELECT pg_catalog.pg_get_triggerdef(t.oid) FROM pg_catalog.pg_trigger t"
							 " WHERE t.tgrelid = $1 AND NOT t.tgisinternal AND t.tgparentid = 0", relid);
	kept->grants = TextsOf("SELECT pg_catalog.format('GRANT %s ON %s TO %s%s', a.privilege_type,"
						   " c.oid::pg_catalog.regclass,"
						   " CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END,"
						   " CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)"
						   " FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a"
						   " WHERE c.oid = $1 AND a.grantee <> c.relowner", relid);
	kept->relkind = get_rel_relkind(relid);
	settings = TextsOf("SELECT pg_catalog.format('ALTER %s %s SET (%s)',"
					   " CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, c.oid::pg_catalog.regclass,"
					   " pg_catalog.array_to_string(c.reloptions, ', '))"
					   " FROM pg_catalog.pg_class c WHERE c.oid = $1 AND c.reloptions IS NOT NULL", relid);
	kept->settings = settings != NIL ? linitial(settings) : NULL;
	return kept;
}

/*
 * RemakeRestore makes what RemakeKeep kept again on the relation of the same
 * name in schema nspid.  Where command made none, the privileges go with the
 * old relation, as with any dropped table; a trigger would never fire again:
 * that is an error.
 */
void
RemakeRestore(RemakeKept *kept, Oid nspid, const char *command)
{
	Oid			relid = get_relname_relid(kept->relname, nspid);
	ListCell   *lc;

	if (!OidIsValid(relid))
	{
		if (kept->triggers != NIL)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("%s would drop a trigger on %s.%s, which it does not make anew",
							command, quote_identifier(get_namespace_name(nspid)),
							quote_identifier(kept->relname)),
					 errdetail("The trigger: %s", (char *) linitial(kept->triggers)),
					 errhint("Drop the trigger first, or make it on the queue, whose tables all get it.")));
		return;
	}
	foreach(lc, kept->triggers)
	{
		if (SPI_execute(lfirst(lc), false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "could not make the trigger of %s again", kept->relname);
	}
	foreach(lc, kept->grants)
	{
		if (SPI_execute(lfirst(lc), false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "could not grant the privileges on %s again", kept->relname);
	}
	if (kept->settings != NULL && get_rel_relkind(relid) == kept->relkind &&
		SPI_execute(kept->settings, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not set the storage parameters of %s again", kept->relname);
}
