/*-------------------------------------------------------------------------
 *
 * consumer.c
 *		A log consumer that delivers events exactly once through
 *		exactonce.ingest(), and can be told to crash at the worst moment.
 *
 * The input stands in for a partitioned log (Kafka, Kinesis): one event per
 * line, tab-separated,
 *
 *	 partition  offset  key  version  value  deleted  dim1 ... dimN
 *
 * partition a number >= 0, offsets increasing within a partition (gaps
 * allowed), deleted "t" or "f", the dimensions in the pipeline's order.
 * Fields cannot contain tabs or newlines; empty lines and lines starting
 * with '#' are skipped.
 *
 * The consumer groups each partition's events into batches and delivers a
 * batch in one transaction:
 *
 *	 BEGIN;
 *	 SELECT exactonce.ingest(pipeline, 'TOPIC:PARTITION', events, offsets);
 *	 COMMIT;
 *
 * and then records the batch's last offset in its progress file, as a real
 * consumer commits its offsets to the broker after processing.  Between the
 * COMMIT and that record lies the window every at-least-once consumer has: a
 * crash there makes the restarted consumer deliver the batch again.  The
 * pipeline's committed offset, moved in the same transaction as the events,
 * makes that replay a no-op.  --crash-every and --crash-random crash the
 * consumer (exit status 3, no progress recorded) exactly there, or just
 * before the COMMIT (--crash-point before), so that tests can show it.
 *
 * On start the consumer skips, per partition, the offsets its progress file
 * says it delivered; with --resume-from-server it asks the pipeline instead
 * (exactonce.committed_offset()), which needs no progress file at all.
 *
 * At the end it prints one line to stdout:
 *	 batches B events E ingested I skipped S
 * where events counts what it delivered in this run, ingested what the
 * pipeline queued and skipped what it recognised as already delivered.
 *
 * Build: make -C tools consumer (needs libpq only).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define EXIT_CRASH		3		/* a crash on purpose */
#define FIXED_FIELDS	6		/* partition offset key version value deleted */

typedef enum CrashPoint
{
	CRASH_AFTER_COMMIT,
	CRASH_BEFORE_COMMIT,
	CRASH_EITHER
} CrashPoint;

/* One event of the log: the line split into fields, which it owns. */
typedef struct LogEvent
{
	char	   *line;
	char	  **fields;			/* FIXED_FIELDS + ndims */
	int64_t		offset;
} LogEvent;

/* One partition: where the consumer is, and the batch it is filling. */
typedef struct Partition
{
	bool		seen;
	int64_t		done;			/* last offset delivered and recorded, -1: none */
	int64_t		last_read;		/* last offset read from the input */
	LogEvent   *batch;
	int			nbatch;
	int			target;			/* size at which the batch is delivered */
} Partition;

/* settings */
static const char *conninfo = "";
static const char *pipeline = NULL;
static const char *input_path = NULL;
static const char *progress_path = NULL;
static const char *topic = "log";
static int	batch_size = 500;
static bool random_batches = false;
static int	crash_every = 0;
static double crash_random = 0;
static CrashPoint crash_point = CRASH_AFTER_COMMIT;
static bool resume_from_server = false;
static uint64_t seed = 0;

/* state */
static PGconn *conn;
static char **dims;
static int	ndims;
static Partition *parts;
static int	nparts;
static int64_t stat_batches,
			stat_events,
			stat_ingested,
			stat_new_batches;	/* batches that queued something, for --crash-every */

/*
 * Fail prints an error and exits with status 1.
 */
static void
Fail(const char *fmt,...)
{
	va_list		ap;

	fputs("consumer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/*
 * Alloc returns zeroed memory or exits.
 */
static void *
Alloc(size_t n, size_t size)
{
	void	   *p = calloc(n ? n : 1, size);

	if (p == NULL)
		Fail("out of memory");
	return p;
}

/*
 * Next returns the next pseudo-random number (splitmix64): crash points and
 * batch sizes are reproducible from --seed.
 */
static uint64_t
Next(void)
{
	uint64_t	z = (seed += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * Uniform returns a pseudo-random double in [0, 1).
 */
static double
Uniform(void)
{
	return (Next() >> 11) * 0x1.0p-53;
}

/*
 * ParseInt64 parses a whole non-negative decimal number, or returns false.
 */
static bool
ParseInt64(const char *s, int64_t *v)
{
	char	   *end;

	errno = 0;
	*v = strtoll(s, &end, 10);
	return errno == 0 && end != s && *end == '\0' && *v >= 0;
}

/* ---------- a growable string ----------------------------------------- */

typedef struct Buf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} Buf;

/*
 * BufAppend appends n bytes to a buffer.
 */
static void
BufAppend(Buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap)
	{
		b->cap = (b->len + n + 1) * 2;
		b->data = realloc(b->data, b->cap);
		if (b->data == NULL)
			Fail("out of memory");
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

/*
 * BufPuts appends a C string.
 */
static void
BufPuts(Buf *b, const char *s)
{
	BufAppend(b, s, strlen(s));
}

/*
 * ArrayLiteral builds the text form of an array of one field of a batch,
 * quoting each element (quote set) or not.
 */
static void
ArrayLiteral(Buf *b, LogEvent *events, int n, int field, bool quote)
{
	b->len = 0;
	BufPuts(b, "{");
	for (int i = 0; i < n; i++)
	{
		const char *s = events[i].fields[field];

		if (i > 0)
			BufPuts(b, ",");
		if (!quote)
		{
			BufPuts(b, s);
			continue;
		}
		BufPuts(b, "\"");
		for (; *s; s++)
		{
			if (*s == '"' || *s == '\\')
				BufPuts(b, "\\");
			BufAppend(b, s, 1);
		}
		BufPuts(b, "\"");
	}
	BufPuts(b, "}");
}

/* ---------- the database ---------------------------------------------- */

/*
 * Check exits unless res has the expected status.
 */
static void
Check(PGresult *res, ExecStatusType want, const char *what)
{
	if (PQresultStatus(res) != want)
		Fail("%s: %s", what, PQerrorMessage(conn));
}

/*
 * Exec runs a statement without parameters that returns no rows.
 */
static void
Exec(const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	Check(res, PGRES_COMMAND_OK, sql);
	PQclear(res);
}

/*
 * LoadDimensions reads the pipeline's dimensions, in rollup order.
 */
static void
LoadDimensions(void)
{
	const char *params[1] = {pipeline};
	PGresult   *res = PQexecParams(conn,
								   "SELECT d FROM exactonce.pipeline,"
								   " pg_catalog.unnest(dimensions) WITH ORDINALITY AS u(d, n)"
								   " WHERE name OPERATOR(pg_catalog.=) $1 ORDER BY n",
								   1, NULL, params, NULL, NULL, 0);

	Check(res, PGRES_TUPLES_OK, "reading the pipeline's dimensions");
	ndims = PQntuples(res);
	if (ndims == 0)
		Fail("pipeline \"%s\" does not exist", pipeline);
	dims = Alloc(ndims, sizeof(char *));
	for (int i = 0; i < ndims; i++)
		dims[i] = strdup(PQgetvalue(res, i, 0));
	PQclear(res);
}

/*
 * PrepareIngest prepares the statement that delivers a batch: the fields
 * travel as parallel arrays, become records with the ingest columns' names,
 * and go to exactonce.ingest() with their offsets, in one order.
 */
static void
PrepareIngest(void)
{
	Buf			sql = {0};
	char		num[64];
	PGresult   *res;

	BufPuts(&sql, "SELECT exactonce.ingest($1, $2, pg_catalog.array_agg(e ORDER BY u.c_ord),"
			" pg_catalog.array_agg(u.c_off ORDER BY u.c_ord))"
			" FROM ROWS FROM (pg_catalog.unnest($3::pg_catalog.int8[]),"
			" pg_catalog.unnest($4::pg_catalog.text[]), pg_catalog.unnest($5::pg_catalog.int8[]),"
			" pg_catalog.unnest($6::pg_catalog.numeric[]), pg_catalog.unnest($7::pg_catalog.bool[])");
	for (int i = 0; i < ndims; i++)
	{
		snprintf(num, sizeof(num), ", pg_catalog.unnest($%d::pg_catalog.text[])", 8 + i);
		BufPuts(&sql, num);
	}
	BufPuts(&sql, ") WITH ORDINALITY AS u(c_off, c_key, c_version, c_value, c_deleted");
	for (int i = 0; i < ndims; i++)
	{
		snprintf(num, sizeof(num), ", c_dim%d", i);
		BufPuts(&sql, num);
	}
	BufPuts(&sql, ", c_ord), LATERAL (SELECT u.c_key AS key, u.c_version AS version,"
			" u.c_value AS value, u.c_deleted AS deleted");
	for (int i = 0; i < ndims; i++)
	{
		char	   *ident = PQescapeIdentifier(conn, dims[i], strlen(dims[i]));

		snprintf(num, sizeof(num), ", u.c_dim%d AS ", i);
		BufPuts(&sql, num);
		BufPuts(&sql, ident);
		PQfreemem(ident);
	}
	BufPuts(&sql, ") AS e");

	res = PQprepare(conn, "ingest", sql.data, 0, NULL);
	Check(res, PGRES_COMMAND_OK, "preparing the ingest statement");
	PQclear(res);
	free(sql.data);
}

/*
 * ServerOffset asks the pipeline for a source's committed offset, -1 if none.
 */
static int64_t
ServerOffset(const char *source)
{
	const char *params[2] = {pipeline, source};
	PGresult   *res = PQexecParams(conn, "SELECT exactonce.committed_offset($1, $2)",
								   2, NULL, params, NULL, NULL, 0);
	int64_t		v = -1;

	Check(res, PGRES_TUPLES_OK, "reading the committed offset");
	if (!PQgetisnull(res, 0, 0) && !ParseInt64(PQgetvalue(res, 0, 0), &v))
		Fail("bad committed offset \"%s\"", PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

/* ---------- progress -------------------------------------------------- */

/*
 * PartitionGet returns partition p, growing the table as needed.
 */
static Partition *
PartitionGet(int p)
{
	if (p >= nparts)
	{
		int			n = p + 1;

		parts = realloc(parts, sizeof(Partition) * n);
		if (parts == NULL)
			Fail("out of memory");
		for (int i = nparts; i < n; i++)
		{
			memset(&parts[i], 0, sizeof(Partition));
			parts[i].done = -1;
			parts[i].last_read = -1;
		}
		nparts = n;
	}
	return &parts[p];
}

/*
 * SourceName returns "TOPIC:partition".
 */
static const char *
SourceName(int p)
{
	static char name[512];

	snprintf(name, sizeof(name), "%s:%d", topic, p);
	return name;
}

/*
 * LoadProgress reads the progress file: "partition offset" lines.
 */
static void
LoadProgress(void)
{
	FILE	   *f;
	long		p;
	long long	off;

	if (progress_path == NULL || resume_from_server)
		return;
	f = fopen(progress_path, "r");
	if (f == NULL)
	{
		if (errno == ENOENT)
			return;
		Fail("could not open %s: %s", progress_path, strerror(errno));
	}
	while (fscanf(f, "%ld %lld", &p, &off) == 2)
	{
		if (p < 0 || p > 1000000 || off < 0)
			Fail("bad line in %s", progress_path);
		PartitionGet((int) p)->done = off;
	}
	fclose(f);
}

/*
 * SaveProgress writes the progress file anew and renames it into place, so
 * that a crash leaves the old file or the new one.
 */
static void
SaveProgress(void)
{
	char		tmp[4096];
	FILE	   *f;

	if (progress_path == NULL)
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", progress_path);
	f = fopen(tmp, "w");
	if (f == NULL)
		Fail("could not write %s: %s", tmp, strerror(errno));
	for (int p = 0; p < nparts; p++)
		if (parts[p].done >= 0)
			fprintf(f, "%d %" PRId64 "\n", p, parts[p].done);
	if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0)
		Fail("could not write %s: %s", tmp, strerror(errno));
	if (rename(tmp, progress_path) != 0)
		Fail("could not rename %s: %s", tmp, strerror(errno));
}

/* ---------- delivery -------------------------------------------------- */

/*
 * MaybeCrash exits without a word to the server or the progress file when
 * this is where and when the settings say to crash.
 */
static void
MaybeCrash(CrashPoint here, bool queued_something)
{
	bool		crash = false;

	if (crash_point != CRASH_EITHER && crash_point != here)
		return;
	if (crash_random > 0 && Uniform() < crash_random)
		crash = true;
	/* counting only batches that queued something guarantees progress */
	if (crash_every > 0 && here == CRASH_AFTER_COMMIT && queued_something &&
		stat_new_batches % crash_every == 0)
		crash = true;
	if (crash_every > 0 && here == CRASH_BEFORE_COMMIT && crash_point == CRASH_BEFORE_COMMIT &&
		(stat_batches + 1) % crash_every == 0)
		crash = true;
	if (!crash)
		return;
	fprintf(stderr, "consumer: crashing %s batch %" PRId64 ", progress not recorded\n",
			here == CRASH_AFTER_COMMIT ? "after the commit of" : "before the commit of",
			stat_batches + (here == CRASH_BEFORE_COMMIT));
	_exit(EXIT_CRASH);
}

/*
 * Deliver sends the pending batch of partition p in one transaction and
 * records its last offset.
 */
static void
Deliver(int p)
{
	Partition  *part = &parts[p];
	int			n = part->nbatch;
	int			nparams = 7 + ndims;
	const char **params = Alloc(nparams, sizeof(char *));
	Buf		   *arrays = Alloc(nparams, sizeof(Buf));
	PGresult   *res;
	int64_t		ingested;
	bool		quoted[FIXED_FIELDS] = {false, false, true, false, false, false};

	if (n == 0)
		return;
	params[0] = pipeline;
	params[1] = SourceName(p);
	/* offsets, then key, version, value, deleted, dimensions */
	for (int i = 0; i < nparams - 2; i++)
	{
		int			field = i + 1;

		ArrayLiteral(&arrays[i], part->batch, n, field,
					 field >= FIXED_FIELDS || quoted[field]);
		params[i + 2] = arrays[i].data;
	}

	Exec("BEGIN");
	res = PQexecPrepared(conn, "ingest", nparams, params, NULL, NULL, 0);
	Check(res, PGRES_TUPLES_OK, "exactonce.ingest()");
	if (!ParseInt64(PQgetvalue(res, 0, 0), &ingested))
		Fail("bad result of exactonce.ingest(): %s", PQgetvalue(res, 0, 0));
	PQclear(res);
	MaybeCrash(CRASH_BEFORE_COMMIT, ingested > 0);
	Exec("COMMIT");

	stat_batches++;
	stat_events += n;
	stat_ingested += ingested;
	if (ingested > 0)
		stat_new_batches++;
	MaybeCrash(CRASH_AFTER_COMMIT, ingested > 0);

	part->done = part->batch[n - 1].offset;
	SaveProgress();

	for (int i = 0; i < n; i++)
	{
		free(part->batch[i].line);
		free(part->batch[i].fields);
	}
	part->nbatch = 0;
	part->target = random_batches ? 1 + (int) (Uniform() * batch_size) : batch_size;
	for (int i = 0; i < nparams - 2; i++)
		free(arrays[i].data);
	free(arrays);
	free(params);
}

/*
 * ReadLine takes one input line: it checks it, skips it if its partition is
 * past it, or adds it to its partition's batch, delivering the batch when
 * full.  It returns whether the batch took the line (and will free it).
 */
static bool
ReadLine(char *line, long lineno)
{
	int			nfields = FIXED_FIELDS + ndims;
	char	  **fields;
	char	   *s;
	int			n = 0;
	int64_t		p,
				off;
	Partition  *part;
	LogEvent   *ev;

	line[strcspn(line, "\r\n")] = '\0';
	if (line[0] == '\0' || line[0] == '#')
		return false;
	fields = Alloc(nfields, sizeof(char *));
	for (s = line; n < nfields; n++)
	{
		fields[n] = s;
		s = strchr(s, '\t');
		if (s == NULL)
		{
			n++;
			break;
		}
		*s++ = '\0';
	}
	if (n != nfields || s != NULL)
		Fail("line %ld: expected %d tab-separated fields (partition, offset, key, version, value, deleted and %d dimensions)",
			 lineno, nfields, ndims);
	if (!ParseInt64(fields[0], &p) || p > 1000000)
		Fail("line %ld: bad partition \"%s\"", lineno, fields[0]);
	if (!ParseInt64(fields[1], &off))
		Fail("line %ld: bad offset \"%s\"", lineno, fields[1]);

	part = PartitionGet((int) p);
	if (!part->seen)
	{
		part->seen = true;
		part->target = random_batches ? 1 + (int) (Uniform() * batch_size) : batch_size;
		part->batch = Alloc(batch_size, sizeof(LogEvent));
		if (resume_from_server)
			part->done = ServerOffset(SourceName((int) p));
	}
	if (off <= part->last_read)
		Fail("line %ld: offset %" PRId64 " of partition %" PRId64 " follows offset %" PRId64,
			 lineno, off, p, part->last_read);
	part->last_read = off;
	if (off <= part->done)
	{
		free(fields);
		return false;
	}

	ev = &part->batch[part->nbatch++];
	ev->line = line;
	ev->fields = fields;
	ev->offset = off;
	if (part->nbatch >= part->target)
		Deliver((int) p);
	return true;
}

/*
 * Usage prints how to call the consumer.
 */
static void
Usage(FILE *f)
{
	fprintf(f,
			"usage: consumer -p PIPELINE [options]\n"
			"Deliver a partitioned log to exactonce.ingest(), exactly once.\n\n"
			"  -p, --pipeline NAME        pipeline to ingest into (required)\n"
			"  -d, --dbname DB            database name or connection string\n"
			"                             (default: PG* environment)\n"
			"  -i, --input FILE           the log, one event per line (default: stdin):\n"
			"                             partition offset key version value deleted dims...\n"
			"  -f, --progress FILE        progress file: last offset delivered per partition\n"
			"  -t, --topic NAME           sources are NAME:PARTITION (default: log)\n"
			"  -b, --batch-size N         events per batch (default: 500)\n"
			"  -R, --random-batches       batches of 1..N events, chosen at random\n"
			"  -c, --crash-every N        crash after every Nth batch that queued events\n"
			"  -r, --crash-random P       crash with probability P at each crash point\n"
			"  -k, --crash-point WHERE    after (the commit, default), before, or either\n"
			"  -S, --resume-from-server   resume from exactonce.committed_offset()\n"
			"  -s, --seed N               seed of batch sizes and random crashes\n"
			"  -h, --help                 this text\n\n"
			"A crash exits with status 3 and records no progress; run the consumer\n"
			"again until it exits with 0.\n");
}

/*
 * main parses the options, connects and consumes the input.
 */
int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"pipeline", required_argument, NULL, 'p'},
		{"dbname", required_argument, NULL, 'd'},
		{"input", required_argument, NULL, 'i'},
		{"progress", required_argument, NULL, 'f'},
		{"topic", required_argument, NULL, 't'},
		{"batch-size", required_argument, NULL, 'b'},
		{"random-batches", no_argument, NULL, 'R'},
		{"crash-every", required_argument, NULL, 'c'},
		{"crash-random", required_argument, NULL, 'r'},
		{"crash-point", required_argument, NULL, 'k'},
		{"resume-from-server", no_argument, NULL, 'S'},
		{"seed", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	FILE	   *in = stdin;
	char	   *line = NULL;
	size_t		cap = 0;
	long		lineno = 0;
	int			opt;
	struct timeval tv;

	gettimeofday(&tv, NULL);
	seed = (uint64_t) tv.tv_sec * 1000000 + tv.tv_usec + (uint64_t) getpid();
	while ((opt = getopt_long(argc, argv, "p:d:i:f:t:b:Rc:r:k:Ss:h", longopts, NULL)) != -1)
	{
		switch (opt)
		{
			case 'p':
				pipeline = optarg;
				break;
			case 'd':
				conninfo = optarg;
				break;
			case 'i':
				input_path = optarg;
				break;
			case 'f':
				progress_path = optarg;
				break;
			case 't':
				topic = optarg;
				break;
			case 'b':
				batch_size = atoi(optarg);
				if (batch_size < 1)
					Fail("--batch-size must be at least 1");
				break;
			case 'R':
				random_batches = true;
				break;
			case 'c':
				crash_every = atoi(optarg);
				if (crash_every < 1)
					Fail("--crash-every must be at least 1");
				break;
			case 'r':
				crash_random = atof(optarg);
				if (crash_random < 0 || crash_random >= 1)
					Fail("--crash-random must be in [0, 1)");
				break;
			case 'k':
				if (strcmp(optarg, "after") == 0)
					crash_point = CRASH_AFTER_COMMIT;
				else if (strcmp(optarg, "before") == 0)
					crash_point = CRASH_BEFORE_COMMIT;
				else if (strcmp(optarg, "either") == 0)
					crash_point = CRASH_EITHER;
				else
					Fail("--crash-point is after, before or either");
				break;
			case 'S':
				resume_from_server = true;
				break;
			case 's':
				seed = strtoull(optarg, NULL, 10);
				break;
			case 'h':
				Usage(stdout);
				return 0;
			default:
				Usage(stderr);
				return 2;
		}
	}
	if (pipeline == NULL || optind < argc)
	{
		Usage(stderr);
		return 2;
	}
	if (crash_every > 0 && crash_point == CRASH_EITHER)
		Fail("--crash-every needs --crash-point after or before");
	if (crash_every == 1 && crash_point == CRASH_BEFORE_COMMIT)
		Fail("--crash-every 1 --crash-point before would never commit a batch");

	if (input_path && (in = fopen(input_path, "r")) == NULL)
		Fail("could not open %s: %s", input_path, strerror(errno));
	{
		const char *keys[3] = {"dbname", "fallback_application_name", NULL};
		const char *values[3] = {conninfo, "exactonce consumer", NULL};

		/* like psql -d: a database name or a connection string */
		conn = PQconnectdbParams(keys, values, 1);
	}
	if (PQstatus(conn) != CONNECTION_OK)
		Fail("could not connect: %s", PQerrorMessage(conn));
	LoadDimensions();
	PrepareIngest();
	LoadProgress();

	while (getline(&line, &cap, in) != -1)
	{
		if (ReadLine(line, ++lineno))
		{
			line = NULL;		/* the batch owns it now */
			cap = 0;
		}
	}
	if (ferror(in))
		Fail("could not read the input: %s", strerror(errno));
	free(line);
	for (int p = 0; p < nparts; p++)
		Deliver(p);

	printf("batches %" PRId64 " events %" PRId64 " ingested %" PRId64 " skipped %" PRId64 "\n",
		   stat_batches, stat_events, stat_ingested, stat_events - stat_ingested);
	PQfinish(conn);
	return 0;
}
