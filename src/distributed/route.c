/*-------------------------------------------------------------------------
 *
 * route.c
 *		A producer's COPY into a coordinator's ingest, routed line by line
 *		by its key, without parsing the rest.
 *
 * PostgreSQL's COPY into the coordinator's ingest parses every field of
 * every line with its type's input function (a timestamptz's is dear), to
 * route the row by its key and hand it to exactonce_forward, which sends it
 * on in binary; the node parses nothing more.  Most of that work is for
 * nothing: the coordinator needs only the key.  So, with the library
 * preloaded, the library's ProcessUtility hook (catalog/utility.c) hands
 * each COPY here first, and a COPY FROM STDIN or a server file into a
 * distributed pipeline's ingest is split into its fields as COPY splits
 * it (NextCopyFromRawFields: the format's quoting and escapes, the
 * client's encoding); each line's key is hashed as the hash partitioning
 * hashes it, and its fields are appended as a line of text to the COPY
 * open on its partition's node, on the link exactonce_forward uses
 * (ForwardIngestLink: the same checks, the same connection, the
 * pipeline's owner, the producer's transaction).  The node's COPY parses
 * the fields, as it would if fed directly, and refuses a bad one with its
 * error.  A line of the default text format without a backslash (no
 * escape, no null) or a zero byte is its fields joined by tabs already: it
 * goes as it was read, converted to the server's encoding (the line COPY
 * keeps in its state, copyfrom_internal.h); only other lines are written
 * anew from their fields.
 *
 * It takes the path only where it changes nothing else: text or CSV, every
 * column of ingest given (no default to compute at the coordinator), no
 * WHERE, no trigger on ingest or a partition, no row-level security, every
 * partition a table of exactonce_forward; and the rights to insert are
 * checked as COPY checks them.  Anything else, and exactonce.route_copy
 * off, goes to PostgreSQL's COPY, as before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/copy.h"
#include "commands/copyfrom_internal.h"
#include "commands/defrem.h"
#include "commands/progress.h"
#include "executor/executor.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/syscache.h"

#include "catalog/utility.h"
#include "distributed/forward.h"
#include "distributed/route.h"

static bool exactonce_route_copy = true;

/*
 * CopyOptionsPlain says whether a COPY's options are ones the raw fields
 * carry whole: text or CSV, their delimiter, NULL string, quoting, header
 * and encoding.  FORCE_NULL and FORCE_NOT_NULL act after the split, FREEZE
 * on a local table, binary has no text to split.
 */
static bool
CopyOptionsPlain(List *options)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (strcmp(def->defname, "format") == 0)
		{
			if (def->arg == NULL || strcmp(defGetString(def), "binary") == 0)
				return false;
		}
		else if (strcmp(def->defname, "delimiter") != 0 && strcmp(def->defname, "null") != 0 &&
				 strcmp(def->defname, "header") != 0 && strcmp(def->defname, "quote") != 0 &&
				 strcmp(def->defname, "escape") != 0 && strcmp(def->defname, "encoding") != 0)
			return false;
	}
	return true;
}

/*
 * IngestRoutable says whether rel, opened, is an ingest this path serves
 * as PostgreSQL's COPY would: hash partitioned by a text key, every
 * partition a table of exactonce_forward, no trigger, no row-level
 * security.  Whether the partitions are a distributed pipeline's, and its
 * owner's, ForwardIngestLink checks as for an INSERT.
 */
static bool
IngestRoutable(Relation rel)
{
	PartitionKey key;
	PartitionDesc pd;
	Oid			fdw = InvalidOid;

	if (rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE ||
		strcmp(RelationGetRelationName(rel), "ingest") != 0 || rel->trigdesc != NULL ||
		check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_ENABLED)
		return false;
	key = RelationGetPartitionKey(rel);
	if (key->strategy != PARTITION_STRATEGY_HASH || key->partnatts != 1 ||
		key->partattrs[0] == 0 || key->parttypid[0] != TEXTOID)
		return false;
	pd = RelationGetPartitionDesc(rel, true);
	if (pd->nparts == 0)
		return false;
	for (int i = 0; i < pd->nparts; i++)
	{
		HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(pd->oids[i]));
		Form_pg_class form;
		bool		plain;

		if (!HeapTupleIsValid(tup))
			return false;
		form = (Form_pg_class) GETSTRUCT(tup);
		plain = form->relkind == RELKIND_FOREIGN_TABLE && !form->relhastriggers;
		ReleaseSysCache(tup);
		if (!plain)
			return false;
		if (!OidIsValid(fdw))
		{
			ForeignDataWrapper *w = GetForeignDataWrapperByName("exactonce_forward", true);

			if (w == NULL)
				return false;
			fdw = w->fdwid;
		}
		if (GetForeignServer(GetForeignTable(pd->oids[i])->serverid)->fdwid != fdw)
			return false;
	}
	return true;
}

/*
 * AppendText appends a field as COPY's text format writes it.  The server's
 * encoding keeps ASCII bytes ASCII, so bytes alone tell what to escape.
 */
static void
AppendText(StringInfo buf, const char *s)
{
	const char *start = s;

	if (s == NULL)
	{
		appendBinaryStringInfo(buf, "\\N", 2);
		return;
	}
	for (; *s; s++)
	{
		char		c;

		switch (*s)
		{
			case '\\':
				c = '\\';
				break;
			case '\t':
				c = 't';
				break;
			case '\n':
				c = 'n';
				break;
			case '\r':
				c = 'r';
				break;
			default:
				continue;
		}
		appendBinaryStringInfo(buf, start, s - start);
		appendStringInfoChar(buf, '\\');
		appendStringInfoChar(buf, c);
		start = s + 1;
	}
	appendBinaryStringInfo(buf, start, s - start);
}

/*
 * RouteCopy runs a COPY FROM STDIN or a file into a distributed pipeline's ingest
 * (see the top of the file), and returns how many events it sent; or -1,
 * having read nothing, where PostgreSQL's COPY is to run it.
 */
static int64
RouteCopy(CopyStmt *stmt, const char *query)
{
	Relation	rel;
	List	   *attnums;
	TupleDesc	desc;
	ParseState *pstate;
	CopyFromState cstate;
	ErrorContextCallback errcallback;
	PartitionKey key;
	PartitionDesc pd;
	Link	  **links;
	StringInfoData sql;
	StringInfoData keybuf;
	char	  **fields;
	int			nfields;
	int			natts;
	int			keyfield = -1;
	int64		processed = 0;
	int32		header = 0;		/* the key's varlena header, set per line */
	bool		plain_text;
	ListCell   *lc;

	if (!exactonce_route_copy || !CopyOptionsPlain(stmt->options) || (rel = UtilityCopyTarget(stmt)) == NULL)
		return -1;
	if (!IngestRoutable(rel))
	{
		table_close(rel, NoLock);
		return -1;
	}
	desc = RelationGetDescr(rel);
	attnums = CopyGetAttnums(desc, rel, stmt->attlist);
	natts = list_length(attnums);

	/* every column given, so that the coordinator has no default to make */
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && !att->attgenerated && !list_member_int(attnums, att->attnum))
		{
			table_close(rel, NoLock);
			return -1;
		}
	}

	pstate = UtilityCopyParseState(rel, attnums, query);

	/* the node's COPY: the same columns in the same order, as text */
	key = RelationGetPartitionKey(rel);
	initStringInfo(&sql);
	appendStringInfo(&sql, "COPY %s.ingest (", quote_identifier(get_namespace_name(RelationGetNamespace(rel))));
	foreach(lc, attnums)
	{
		AttrNumber	attnum = lfirst_int(lc);

		if (attnum == key->partattrs[0])
			keyfield = foreach_current_index(lc);
		appendStringInfo(&sql, "%s%s", foreach_current_index(lc) > 0 ? ", " : "",
						 quote_identifier(NameStr(TupleDescAttr(desc, attnum - 1)->attname)));
	}
	appendStringInfoString(&sql, ") FROM STDIN");
	Assert(keyfield >= 0);

	pd = RelationGetPartitionDesc(rel, true);
	links = palloc0(sizeof(Link *) * pd->nparts);
	initStringInfo(&keybuf);
	cstate = BeginCopyFrom(pstate, rel, NULL, stmt->filename, false, NULL, stmt->attlist, stmt->options);
	errcallback.callback = CopyFromErrorCallback;
	errcallback.arg = (void *) cstate;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;
	plain_text = !cstate->opts.csv_mode && cstate->opts.delim[0] == '\t' &&
		strcmp(cstate->opts.null_print, "\\N") == 0;

	while (NextCopyFromRawFields(cstate, &fields, &nfields))
	{
		Datum		value;
		bool		isnull = false;
		uint64		hash;
		int			part;
		Link	   *link;

		CHECK_FOR_INTERRUPTS();
		if (nfields > natts)
			ereport(ERROR,
					(errcode(ERRCODE_BAD_COPY_FILE_FORMAT),
					 errmsg("extra data after last expected column")));
		if (nfields < natts)
			ereport(ERROR,
					(errcode(ERRCODE_BAD_COPY_FILE_FORMAT),
					 errmsg("missing data for column \"%s\"",
							NameStr(TupleDescAttr(desc, list_nth_int(attnums, nfields) - 1)->attname))));
		if (fields[keyfield] == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_NOT_NULL_VIOLATION),
					 errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
							NameStr(TupleDescAttr(desc, key->partattrs[0] - 1)->attname),
							RelationGetRelationName(rel))));

		/* the key's partition, as the hash partitioning finds it */
		resetStringInfo(&keybuf);
		appendBinaryStringInfo(&keybuf, (char *) &header, VARHDRSZ);
		appendStringInfoString(&keybuf, fields[keyfield]);
		SET_VARSIZE(keybuf.data, keybuf.len);
		value = PointerGetDatum(keybuf.data);
		hash = compute_partition_hash_value(1, key->partsupfunc, key->partcollation, &value, &isnull);
		part = pd->boundinfo->indexes[hash % pd->boundinfo->nindexes];
		if (part < 0)
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("no partition of relation \"%s\" found for row", RelationGetRelationName(rel))));
		if (links[part] == NULL)
		{
			Relation	partrel = table_open(pd->oids[part], RowExclusiveLock);

			if (partrel->trigdesc != NULL)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("a trigger was made on \"%s\" while events were copied into it",
								RelationGetRelationName(partrel))));
			links[part] = ForwardIngestLink(partrel);
			table_close(partrel, NoLock);
			/* open until the statement ends it (a link may serve others) */
			LinkCopy(links[part], sql.data, false);
		}

		/* the line, as text, to the COPY open on the node */
		link = links[part];
		if (plain_text && strcspn(cstate->line_buf.data, "\\") == (size_t) cstate->line_buf.len)
			appendBinaryStringInfo(&link->buf, cstate->line_buf.data, cstate->line_buf.len);
		else
			for (int i = 0; i < nfields; i++)
			{
				if (i > 0)
					appendStringInfoChar(&link->buf, '\t');
				AppendText(&link->buf, fields[i]);
			}
		appendStringInfoChar(&link->buf, '\n');
		if (link->buf.len >= LINK_CHUNK)
			LinkPut(link);
		pgstat_progress_update_param(PROGRESS_COPY_TUPLES_PROCESSED, ++processed);
	}

	error_context_stack = errcallback.previous;
	EndCopyFrom(cstate);
	LinkEndCopies();
	table_close(rel, NoLock);
	return processed;
}

/*
 * RouteInit defines exactonce.route_copy and hands RouteCopy the COPYs
 * that utility.c's hook sees (when the library is preloaded).
 */
void
RouteInit(void)
{
	DefineCustomBoolVariable("exactonce.route_copy",
							 "Routes a COPY into a distributed pipeline's ingest by key, leaving the other fields for the nodes to parse.",
							 "Off, the coordinator parses every field, as for INSERT. Needs the library in shared_preload_libraries.",
							 &exactonce_route_copy,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	UtilityAddCopyHandler(RouteCopy);
}
