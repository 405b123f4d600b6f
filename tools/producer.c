/*-------------------------------------------------------------------------
 *
 * producer.c
 *		An at-least-once trade-risk event stream for an exactonce pipeline,
 *		and the aggregates that stream must end in.
 *
 * The stream is a trading book: trades (TradeID "TRD-0000042") with a risk
 * value, each in one cell of the hierarchy risk_type > region > trade_desk.
 * Every event is one version of one trade, versions counting from 0:
 *
 *	 new			version 0 of a new trade
 *	 modification	the next version of a live trade: a new value, and about
 *					half of the time a move to another desk, region or risk
 *					type
 *	 tombstone		the next version of a live trade, deleted = true
 *	 duplicate		an exact resend of an event already sent (mostly one of
 *					the last DUP_WINDOW sent, as a producer retrying a
 *					timed-out batch does)
 *	 stale			an older version of a trade re-sent after a newer one
 *
 * A version's content (value, cell, deleted) never changes once sent, so the
 * stream holds no conflicting duplicates; event_time is the time of sending,
 * arrival metadata that exactonce does not count as content.
 *
 * Events go to <pipeline>.ingest with COPY ... FROM STDIN, one transaction
 * per batch.  The producer keeps its own truth: every version of every trade
 * it sent, as integer cents.  At the end it writes the exact aggregates the
 * pipeline must hold -- the rollup over (risk_type, region, trade_desk) of
 * the live trades' latest versions, levels 0..3 with sum and count, one row
 * per cell with at least one live trade -- into the table named with -T, and
 * with -K each trade's latest version.  A summary goes to stdout as
 * "name value" lines, progress to stderr (at most every half second).
 *
 * For benchmarks (test/bench/run.sh): --output FILE writes the events to FILE
 * in COPY text format instead of sending them (no connection is made unless
 * -T or -K asks for one), --truth-file and --truth-state-file write the truth
 * to files in COPY text format, --moves F fixes the fraction of events that
 * are modifications moving their trade, and --batch-log FILE records, per
 * batch, the events sent so far, the batch's event_time and its commit time.
 * The same options (seed, counts, fractions) give the same events whether
 * they are sent or written, at any rate and batch size; only event_time
 * differs.
 *
 * Build (or "make -C tools"; it needs only libpq, not libm):
 *	 cc -O2 -Wall -Wextra -o tools/producer tools/producer.c \
 *		-I$(pg_config --includedir) -lpq
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

/* ---------- the hierarchy -------------------------------------------- */

typedef struct Dim
{
	const char *column;
	int			n;
	const char *const *names;
	const double *weights;		/* how often a trade is booked there */
} Dim;

static const char *const risk_names[] = {"Delta", "Gamma", "Vega", "Theta", "Rho"};
static const double risk_weights[] = {40, 15, 20, 10, 15};
static const char *const region_names[] = {"AMER", "EMEA", "APAC"};
static const double region_weights[] = {45, 35, 20};
static const char *const desk_names[] = {"FXSpot", "FXOption", "Rates", "Credit", "Equity", "Commodities"};
static const double desk_weights[] = {15, 15, 25, 20, 18, 7};

#define NDIMS 3
static const Dim dims[NDIMS] = {
	{"risk_type", 5, risk_names, risk_weights},
	{"region", 3, region_names, region_weights},
	{"trade_desk", 6, desk_names, desk_weights},
};

#define NCELLS (5 * 3 * 6)

/*
 * Duplicates are mostly resends of the last DUP_WINDOW events: two batches
 * of the default size, and a constant, so that the stream is the same at
 * any batch size.
 */
#define DUP_WINDOW 10000

static int
CellOf(const int *c)
{
	return (c[0] * dims[1].n + c[1]) * dims[2].n + c[2];
}

static void
CellCoords(int cell, int *c)
{
	c[2] = cell % dims[2].n;
	c[1] = (cell / dims[2].n) % dims[1].n;
	c[0] = cell / (dims[2].n * dims[1].n);
}

/* ---------- randomness (xoshiro256**, seeded by splitmix64) ---------- */

static uint64_t rng[4];

static uint64_t
SplitMix(uint64_t *x)
{
	uint64_t	z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void
Seed(uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		rng[i] = SplitMix(&seed);
}

static inline uint64_t
Rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t
Next(void)
{
	uint64_t	result = Rotl(rng[1] * 5, 7) * 9;
	uint64_t	t = rng[1] << 17;

	rng[2] ^= rng[0];
	rng[3] ^= rng[1];
	rng[1] ^= rng[2];
	rng[0] ^= rng[3];
	rng[2] ^= t;
	rng[3] = Rotl(rng[3], 45);
	return result;
}

/* uniform double in [0, 1) */
static double
Uniform(void)
{
	return (Next() >> 11) * 0x1.0p-53;
}

/* uniform integer in [0, n), n > 0 */
static int64_t
Below(int64_t n)
{
	return (int64_t) (Uniform() * (double) n);
}

/* approximately standard normal (Irwin-Hall: sum of 12 uniforms) */
static double
Gaussian(void)
{
	double		sum = 0;

	for (int i = 0; i < 12; i++)
		sum += Uniform();
	return sum - 6.0;
}

/* nearest integer, halves away from zero (no libm needed) */
static int64_t
Round(double x)
{
	return (int64_t) (x < 0 ? x - 0.5 : x + 0.5);
}

static int
Weighted(const Dim *d)
{
	double		sum = 0,
				u;

	for (int i = 0; i < d->n; i++)
		sum += d->weights[i];
	u = Uniform() * sum;
	for (int i = 0; i < d->n; i++)
	{
		if (u < d->weights[i])
			return i;
		u -= d->weights[i];
	}
	return d->n - 1;
}

/* ---------- the truth ------------------------------------------------ */

/* One version of one trade, as sent. */
typedef struct Version
{
	int64_t		cents;
	int32_t		trade;
	int32_t		prev;			/* the trade's previous version, or -1 */
	int32_t		version;
	uint8_t		cell;
	uint8_t		deleted;
} Version;

static Version *versions;		/* every version sent, in order of creation */
static int64_t nversions;
static int32_t *latest;			/* per trade: index of its highest version */
static int32_t *live;			/* trades whose latest version is not deleted */
static int32_t *live_pos;		/* per trade: its index in live, or -1 */
static int64_t nlive;
static int32_t *amended;		/* trades with a version above 0 */
static int64_t namended;
static int32_t *sent_log;		/* per event sent: the version it carried */
static int64_t nsent;

static void *
Alloc(size_t n, size_t size)
{
	void	   *p = calloc(n ? n : 1, size);

	if (p == NULL)
	{
		fprintf(stderr, "producer: out of memory\n");
		exit(1);
	}
	return p;
}

static void
LiveAdd(int32_t trade)
{
	live_pos[trade] = (int32_t) nlive;
	live[nlive++] = trade;
}

static void
LiveRemove(int32_t trade)
{
	int32_t		pos = live_pos[trade];
	int32_t		last = live[--nlive];

	live[pos] = last;
	live_pos[last] = pos;
	live_pos[trade] = -1;
}

/* A new version of a trade; returns its index. */
static int32_t
AddVersion(int32_t trade, int32_t prev, int64_t cents, int cell, bool deleted)
{
	Version    *v = &versions[nversions];

	v->cents = cents;
	v->trade = trade;
	v->prev = prev;
	v->version = prev < 0 ? 0 : versions[prev].version + 1;
	v->cell = (uint8_t) cell;
	v->deleted = deleted;
	latest[trade] = (int32_t) nversions;
	return (int32_t) nversions++;
}

/*
 * A risk value in cents from 10.00 to 9,999,999.99, spread evenly over the
 * six decades as risk sizes are, about a third of them short.
 */
static int64_t
RandomCents(void)
{
	int64_t		decade = 1000;	/* 10.00 */
	int64_t		cents;

	for (int d = (int) Below(6); d > 0; d--)
		decade *= 10;
	cents = decade + Below(9 * decade);
	return Uniform() < 0.35 ? -cents : cents;
}

/* An amended value: a market move of ~15%, sometimes a sign flip. */
static int64_t
AmendCents(int64_t cents)
{
	int64_t		v = Round((double) cents * (1.0 + 0.15 * Gaussian()));

	if (Uniform() < 0.05)
		v = -v;
	if (v > -1000 && v < 1000)	/* keep it at least 10.00 */
		v = v < 0 ? -1000 : 1000;
	return v;
}

/* The cell a moved trade goes to: another desk, region or risk type. */
static int
MoveCell(int cell)
{
	int			c[NDIMS];
	int			which = (int) Below(NDIMS);
	int			old;

	CellCoords(cell, c);
	old = c[which];
	while (c[which] == old)
		c[which] = Weighted(&dims[which]);
	return CellOf(c);
}

/* ---------- output --------------------------------------------------- */

typedef struct Buf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} Buf;

static void
BufReserve(Buf *b, size_t more)
{
	if (b->len + more <= b->cap)
		return;
	while (b->len + more > b->cap)
		b->cap = b->cap ? 2 * b->cap : 1 << 16;
	b->data = realloc(b->data, b->cap);
	if (b->data == NULL)
	{
		fprintf(stderr, "producer: out of memory\n");
		exit(1);
	}
}

static void
BufPrintf(Buf *b, const char *fmt,...)
{
	va_list		ap;
	int			n;

	BufReserve(b, 256);
	va_start(ap, fmt);
	n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		abort();
	if ((size_t) n >= b->cap - b->len)
	{
		BufReserve(b, (size_t) n + 1);
		va_start(ap, fmt);
		vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += (size_t) n;
}

/* Writes cents as a numeric literal with two decimals. */
static void
FormatCents(char *out, size_t size, int64_t cents)
{
	uint64_t	a = cents < 0 ? (uint64_t) 0 - (uint64_t) cents : (uint64_t) cents;

	snprintf(out, size, "%s%" PRIu64 ".%02" PRIu64, cents < 0 ? "-" : "", a / 100, a % 100);
}

static double
Now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The current time as a timestamptz literal in UTC; returns it as Unix time. */
static double
FormatEventTime(char *out, size_t size)
{
	struct timeval tv;
	struct tm	tm;

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	snprintf(out, size, "%04d-%02d-%02d %02d:%02d:%02d.%06ld+00",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			 tm.tm_hour, tm.tm_min, tm.tm_sec, (long) tv.tv_usec);
	return tv.tv_sec + tv.tv_usec / 1e6;
}

/* Unix time, as event_time is written. */
static double
WallClock(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv.tv_sec + tv.tv_usec / 1e6;
}

/* Opens a file for writing, or exits. */
static FILE *
OpenOutput(const char *path)
{
	FILE	   *f = fopen(path, "w");

	if (f == NULL)
	{
		fprintf(stderr, "producer: could not open \"%s\": %s\n", path, strerror(errno));
		exit(1);
	}
	return f;
}

/* Writes data to f, or exits. */
static void
WriteOut(FILE *f, const char *path, const char *data, size_t len)
{
	if (len > 0 && fwrite(data, 1, len, f) != len)
	{
		fprintf(stderr, "producer: could not write \"%s\": %s\n", path, strerror(errno));
		exit(1);
	}
}

/* Closes a file written with WriteOut, or exits. */
static void
CloseOutput(FILE *f, const char *path)
{
	if (fclose(f) != 0)
	{
		fprintf(stderr, "producer: could not write \"%s\": %s\n", path, strerror(errno));
		exit(1);
	}
}

/* Writes a whole buffer to a new file. */
static void
WriteFile(const char *path, const Buf *b)
{
	FILE	   *f = OpenOutput(path);

	WriteOut(f, path, b->data, b->len);
	CloseOutput(f, path);
}

/* ---------- the database --------------------------------------------- */

/* Server notices (such as DROP TABLE IF EXISTS skipping) are not progress. */
static void
IgnoreNotice(void *arg, const char *message)
{
	(void) arg;
	(void) message;
}

static PGconn *
Connect(const char *conninfo)
{
	const char *keys[] = {"dbname", "application_name", NULL};
	const char *values[] = {conninfo, "exactonce-producer", NULL};
	PGconn	   *conn = PQconnectdbParams(keys, values, 1);

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "producer: could not connect: %s", PQerrorMessage(conn));
		exit(1);
	}
	PQsetNoticeProcessor(conn, IgnoreNotice, NULL);
	return conn;
}

static void
Exec(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "producer: %s\nproducer: statement: %s\n", PQerrorMessage(conn), sql);
		exit(1);
	}
	PQclear(res);
}

/* Runs COPY sql FROM STDIN with data. */
static void
Copy(PGconn *conn, const char *sql, const char *data, size_t len)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COPY_IN)
	{
		fprintf(stderr, "producer: %s\nproducer: statement: %s\n", PQerrorMessage(conn), sql);
		exit(1);
	}
	PQclear(res);
	while (len > 0)
	{
		int			chunk = len > (1 << 20) ? 1 << 20 : (int) len;

		if (PQputCopyData(conn, data, chunk) != 1)
		{
			fprintf(stderr, "producer: COPY failed: %s", PQerrorMessage(conn));
			exit(1);
		}
		data += chunk;
		len -= chunk;
	}
	if (PQputCopyEnd(conn, NULL) != 1)
	{
		fprintf(stderr, "producer: COPY failed: %s", PQerrorMessage(conn));
		exit(1);
	}
	res = PQgetResult(conn);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "producer: COPY failed: %s", PQerrorMessage(conn));
		exit(1);
	}
	PQclear(res);
	while ((res = PQgetResult(conn)) != NULL)
		PQclear(res);
}

/* Quotes a possibly schema-qualified table name ("schema.table"). */
static char *
QuoteTable(PGconn *conn, const char *name)
{
	const char *dot = strchr(name, '.');
	char	   *out = Alloc(1, 2 * strlen(name) + 8);

	if (dot)
	{
		char	   *schema = strndup(name, dot - name);
		char	   *qs = PQescapeIdentifier(conn, schema, strlen(schema));
		char	   *qt = PQescapeIdentifier(conn, dot + 1, strlen(dot + 1));

		if (!qs || !qt)
		{
			fprintf(stderr, "producer: bad table name \"%s\"\n", name);
			exit(1);
		}
		sprintf(out, "%s.%s", qs, qt);
		PQfreemem(qs);
		PQfreemem(qt);
		free(schema);
	}
	else
	{
		char	   *qt = PQescapeIdentifier(conn, name, strlen(name));

		if (!qt)
		{
			fprintf(stderr, "producer: bad table name \"%s\"\n", name);
			exit(1);
		}
		strcpy(out, qt);
		PQfreemem(qt);
	}
	return out;
}

/* Creates (replacing) table name with the given columns, and its schema. */
static char *
CreateTable(PGconn *conn, const char *name, const char *columns)
{
	char	   *q = QuoteTable(conn, name);
	Buf			sql = {0};
	const char *dot = strchr(name, '.');

	if (dot)
	{
		char	   *schema = strndup(name, dot - name);
		char	   *qs = PQescapeIdentifier(conn, schema, strlen(schema));

		BufPrintf(&sql, "CREATE SCHEMA IF NOT EXISTS %s; ", qs);
		PQfreemem(qs);
		free(schema);
	}
	BufPrintf(&sql, "DROP TABLE IF EXISTS %s; CREATE TABLE %s (%s)", q, q, columns);
	Exec(conn, sql.data);
	free(sql.data);
	return q;
}

/*
 * The expected aggregates, one row per cell with live trades, as COPY text:
 * risk_type, region, trade_desk (\N where rolled up), level, total, keys.
 */
static void
BuildTruth(Buf *data)
{
	/* level 0 .. 3 cells, indexed by the first "level" coordinates */
	static int64_t total[NDIMS + 1][NCELLS];
	static int64_t keys[NDIMS + 1][NCELLS];

	memset(total, 0, sizeof(total));
	memset(keys, 0, sizeof(keys));
	for (int64_t i = 0; i < nlive; i++)
	{
		Version    *v = &versions[latest[live[i]]];
		int			c[NDIMS];

		CellCoords(v->cell, c);
		for (int level = 0, idx = 0; level <= NDIMS; level++)
		{
			total[level][idx] += v->cents;
			keys[level][idx]++;
			if (level < NDIMS)
				idx = idx * dims[level].n + c[level];
		}
	}

	for (int level = 0; level <= NDIMS; level++)
	{
		int			ncells = 1;

		for (int l = 0; l < level; l++)
			ncells *= dims[l].n;
		for (int idx = 0; idx < ncells; idx++)
		{
			char		num[32];
			int			c[NDIMS];
			int			rest = idx;

			if (keys[level][idx] == 0)
				continue;
			for (int l = level - 1; l >= 0; l--)
			{
				c[l] = rest % dims[l].n;
				rest /= dims[l].n;
			}
			for (int l = 0; l < NDIMS; l++)
				BufPrintf(data, "%s\t", l < level ? dims[l].names[c[l]] : "\\N");
			FormatCents(num, sizeof(num), total[level][idx]);
			BufPrintf(data, "%d\t%s\t%" PRId64 "\n", level, num, keys[level][idx]);
		}
	}
}

/* Writes the expected aggregates: one row per cell with live trades. */
static void
WriteTruth(PGconn *conn, const char *table)
{
	char	   *q;
	Buf			sql = {0},
				data = {0};

	BuildTruth(&data);
	q = CreateTable(conn, table, "risk_type text, region text, trade_desk text,"
					" level integer NOT NULL, total numeric NOT NULL, keys bigint NOT NULL");
	BufPrintf(&sql, "COPY %s (risk_type, region, trade_desk, level, total, keys) FROM STDIN", q);
	Copy(conn, sql.data, data.data, data.len);
	free(sql.data);
	free(data.data);
	free(q);
}

/*
 * Each trade's latest version, as state should hold it, as COPY text: key,
 * version, value, risk_type, region, trade_desk, deleted.
 */
static void
BuildTruthState(Buf *data, int64_t ntrades)
{
	for (int64_t t = 0; t < ntrades; t++)
	{
		Version    *v = &versions[latest[t]];
		int			c[NDIMS];
		char		num[32];

		CellCoords(v->cell, c);
		FormatCents(num, sizeof(num), v->cents);
		BufPrintf(data, "TRD-%07" PRId64 "\t%d\t%s\t%s\t%s\t%s\t%c\n", t, v->version, num,
				  dims[0].names[c[0]], dims[1].names[c[1]], dims[2].names[c[2]],
				  v->deleted ? 't' : 'f');
	}
}

/* Writes each trade's latest version, as state should hold it. */
static void
WriteTruthState(PGconn *conn, const char *table, int64_t ntrades)
{
	char	   *q = CreateTable(conn, table, "key text PRIMARY KEY, version bigint NOT NULL,"
								" value numeric NOT NULL, risk_type text NOT NULL,"
								" region text NOT NULL, trade_desk text NOT NULL,"
								" deleted boolean NOT NULL");
	Buf			sql = {0},
				data = {0};

	BuildTruthState(&data, ntrades);
	BufPrintf(&sql, "COPY %s FROM STDIN", q);
	Copy(conn, sql.data, data.data, data.len);
	free(sql.data);
	free(data.data);
	free(q);
}

/* ---------- the stream ----------------------------------------------- */

enum Kind
{
	K_NEW, K_MOD, K_TOMB, K_DUP, K_STALE, NKINDS
};
static const char *const kind_names[NKINDS] = {
	"new_trades", "modifications", "tombstones", "duplicates", "stale_resends"
};

static bool
Feasible(int k, int64_t created, int64_t ntrades)
{
	switch (k)
	{
		case K_NEW:
			return created < ntrades;
		case K_MOD:
		case K_TOMB:
			return nlive > 0;
		case K_DUP:
			return nsent > 0;
		case K_STALE:
			return namended > 0;
	}
	return false;
}

/* Draws the next event's kind from the remaining quota of the feasible kinds. */
static int
DrawKind(int64_t *quota, int64_t created, int64_t ntrades)
{
	int64_t		sum = 0;
	int64_t		u;

	for (int k = 0; k < NKINDS; k++)
		if (quota[k] > 0 && Feasible(k, created, ntrades))
			sum += quota[k];
	if (sum == 0)
	{
		/* only infeasible quota is left: resend something instead */
		for (int k = 0; k < NKINDS; k++)
			if (quota[k] > 0)
			{
				quota[k]--;
				return Feasible(K_DUP, created, ntrades) ? K_DUP : K_NEW;
			}
		return K_DUP;
	}
	u = Below(sum);
	for (int k = 0; k < NKINDS; k++)
	{
		if (quota[k] <= 0 || !Feasible(k, created, ntrades))
			continue;
		if (u < quota[k])
		{
			quota[k]--;
			return k;
		}
		u -= quota[k];
	}
	abort();
}

static void
Usage(FILE *f)
{
	fprintf(f,
			"usage: producer [options]\n"
			"Sends an at-least-once trade-risk event stream to an exactonce pipeline with\n"
			"dimensions risk_type, region, trade_desk, and writes the aggregates it must end in.\n\n"
			"  -n, --events N         events to send (default 1000000)\n"
			"  -t, --trades N         distinct trades (default events / 5: 200000)\n"
			"  -D, --duplicates F     fraction of exact resends of events already sent (0.10)\n"
			"  -m, --modifications F  fraction of new versions of live trades, about half of them\n"
			"                         moving the trade (default: all events not otherwise used)\n"
			"  -s, --stale F          fraction of older versions re-sent after a newer one (0.03)\n"
			"  -x, --tombstones F     fraction of deletions, deleted = true (0.02)\n"
			"  -r, --rate N           events per second, 0 = as fast as possible (default 0)\n"
			"  -b, --batch N          events per COPY transaction (default 5000)\n"
			"  -S, --seed N           random seed (default 42)\n"
			"  -d, --dbname CONNINFO  connection string (default: PG* environment variables)\n"
			"  -p, --pipeline NAME    pipeline, events go to NAME.ingest (default trades)\n"
			"  -T, --truth TABLE      write the expected aggregates to TABLE, replacing it\n"
			"                         (risk_type, region, trade_desk, level, total, keys)\n"
			"  -K, --truth-state TABLE  write each trade's latest version to TABLE\n"
			"  -M, --moves F          fraction of events that are modifications moving the\n"
			"                         trade to another cell (default: half of the modifications)\n"
			"  -o, --output FILE      write the events to FILE in COPY text format (columns key,\n"
			"                         version, value, risk_type, region, trade_desk, deleted,\n"
			"                         event_time) instead of sending them; no connection unless\n"
			"                         -T or -K is given\n"
			"      --truth-file FILE  write the expected aggregates to FILE as COPY text\n"
			"      --truth-state-file FILE  write each trade's latest version to FILE as COPY text\n"
			"      --batch-log FILE   per batch: batch number, events sent so far, the batch's\n"
			"                         event_time and the time its COPY committed (Unix seconds)\n"
			"  -q, --quiet            no progress on stderr\n"
			"  -N, --dry-run          check the options, print the plan and exit\n"
			"  -h, --help             this help\n");
}

static int64_t
ParseCount(const char *opt, const char *s, int64_t min)
{
	char	   *end;
	long long	v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > INT32_MAX)
	{
		fprintf(stderr, "producer: invalid %s \"%s\"\n", opt, s);
		exit(2);
	}
	return v;
}

static double
ParseFraction(const char *opt, const char *s)
{
	char	   *end;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0.0 && v <= 1.0))
	{
		fprintf(stderr, "producer: invalid %s \"%s\" (a fraction from 0 to 1)\n", opt, s);
		exit(2);
	}
	return v;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"events", required_argument, NULL, 'n'},
		{"trades", required_argument, NULL, 't'},
		{"duplicates", required_argument, NULL, 'D'},
		{"modifications", required_argument, NULL, 'm'},
		{"stale", required_argument, NULL, 's'},
		{"tombstones", required_argument, NULL, 'x'},
		{"rate", required_argument, NULL, 'r'},
		{"batch", required_argument, NULL, 'b'},
		{"seed", required_argument, NULL, 'S'},
		{"dbname", required_argument, NULL, 'd'},
		{"pipeline", required_argument, NULL, 'p'},
		{"truth", required_argument, NULL, 'T'},
		{"truth-state", required_argument, NULL, 'K'},
		{"moves", required_argument, NULL, 'M'},
		{"output", required_argument, NULL, 'o'},
		{"truth-file", required_argument, NULL, 1001},
		{"truth-state-file", required_argument, NULL, 1002},
		{"batch-log", required_argument, NULL, 1003},
		{"quiet", no_argument, NULL, 'q'},
		{"dry-run", no_argument, NULL, 'N'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int64_t		nevents = 1000000,
				ntrades = -1,
				batch = 5000,
				rate = 0;
	double		f_dup = 0.10,
				f_mod = -1,
				f_stale = 0.03,
				f_tomb = 0.02;
	uint64_t	seed = 42;
	const char *conninfo = "";
	const char *pipeline = "trades";
	const char *truth = NULL;
	const char *truth_state = NULL;
	const char *output = NULL;
	const char *truth_file = NULL;
	const char *truth_state_file = NULL;
	const char *batch_log = NULL;
	FILE	   *out = NULL;
	FILE	   *blog = NULL;
	double		f_moves = -1;
	int64_t		moves_left = 0;
	bool		quiet = false;
	bool		dry_run = false;
	bool		batch_given = false;
	int64_t		quota[NKINDS],
				quota_planned[NKINDS],
				done[NKINDS] = {0};
	int64_t		moved = 0,
				created = 0,
				nbatches = 0;
	PGconn	   *conn = NULL;
	char	   *copy_sql = NULL;
	Buf			buf = {0};
	double		t0,
				last_print,
				last_sent_at;
	int64_t		last_sent = 0;
	int			opt;

	while ((opt = getopt_long(argc, argv, "n:t:D:m:s:x:r:b:S:d:p:T:K:M:o:qNh", longopts, NULL)) != -1)
	{
		switch (opt)
		{
			case 'n':
				nevents = ParseCount("number of events", optarg, 1);
				break;
			case 't':
				ntrades = ParseCount("number of trades", optarg, 1);
				break;
			case 'D':
				f_dup = ParseFraction("duplicate fraction", optarg);
				break;
			case 'm':
				f_mod = ParseFraction("modification fraction", optarg);
				break;
			case 's':
				f_stale = ParseFraction("stale fraction", optarg);
				break;
			case 'x':
				f_tomb = ParseFraction("tombstone fraction", optarg);
				break;
			case 'r':
				rate = ParseCount("rate", optarg, 0);
				break;
			case 'b':
				batch = ParseCount("batch size", optarg, 1);
				batch_given = true;
				break;
			case 'S':
				seed = (uint64_t) strtoull(optarg, NULL, 10);
				break;
			case 'd':
				conninfo = optarg;
				break;
			case 'p':
				pipeline = optarg;
				break;
			case 'T':
				truth = optarg;
				break;
			case 'K':
				truth_state = optarg;
				break;
			case 'M':
				f_moves = ParseFraction("move fraction", optarg);
				break;
			case 'o':
				output = optarg;
				break;
			case 1001:
				truth_file = optarg;
				break;
			case 1002:
				truth_state_file = optarg;
				break;
			case 1003:
				batch_log = optarg;
				break;
			case 'q':
				quiet = true;
				break;
			case 'N':
				dry_run = true;
				break;
			case 'h':
				Usage(stdout);
				return 0;
			default:
				Usage(stderr);
				return 2;
		}
	}
	if (optind < argc)
	{
		fprintf(stderr, "producer: unexpected argument \"%s\"\n", argv[optind]);
		Usage(stderr);
		return 2;
	}

	/* how many events of each kind: new trades first, modifications the rest */
	if (ntrades < 0)
		ntrades = nevents / 5 > 0 ? nevents / 5 : 1;
	quota[K_NEW] = ntrades;
	quota[K_DUP] = Round(f_dup * nevents);
	quota[K_STALE] = Round(f_stale * nevents);
	quota[K_TOMB] = Round(f_tomb * nevents);
	{
		int64_t		rest = nevents - quota[K_NEW] - quota[K_DUP] - quota[K_STALE] - quota[K_TOMB];

		if (rest < 0)
		{
			fprintf(stderr, "producer: %" PRId64 " trades plus the duplicate, stale and tombstone"
					" fractions need more than %" PRId64 " events\n", ntrades, nevents);
			return 2;
		}
		if (f_mod >= 0 && labs((long) (Round(f_mod * nevents) - rest)) > nevents / 100 + 1)
		{
			fprintf(stderr, "producer: with %" PRId64 " trades in %" PRId64 " events the other"
					" fractions leave %.4f for modifications, not %.4f; leave -m out to let"
					" modifications take the rest\n",
					ntrades, nevents, (double) rest / nevents, f_mod);
			return 2;
		}
		quota[K_MOD] = rest;
	}
	if (f_moves >= 0)
	{
		moves_left = Round(f_moves * nevents);
		if (moves_left > quota[K_MOD])
		{
			fprintf(stderr, "producer: %" PRId64 " moves are more than the %" PRId64
					" modifications; lower the move fraction\n", moves_left, quota[K_MOD]);
			return 2;
		}
	}
	if (quota[K_TOMB] > ntrades)
	{
		fprintf(stderr, "producer: %" PRId64 " tombstones would delete more than the %" PRId64
				" trades; lower the tombstone fraction or raise the number of trades\n",
				quota[K_TOMB], ntrades);
		return 2;
	}
	if (rate > 0 && !batch_given && batch > rate / 10)
		batch = rate / 10 > 0 ? rate / 10 : 1;
	memcpy(quota_planned, quota, sizeof(quota));
	if (dry_run)
	{
		printf("events %" PRId64 "\n", nevents);
		for (int k = 0; k < NKINDS; k++)
			printf("%s %" PRId64 "\n", kind_names[k], quota[k]);
		if (f_moves >= 0)
			printf("moves %" PRId64 "\n", moves_left);
		printf("batch %" PRId64 "\nrate %" PRId64 "\nseed %" PRIu64 "\n", batch, rate, seed);
		return 0;
	}

	Seed(seed);
	versions = Alloc(quota[K_NEW] + quota[K_MOD] + quota[K_TOMB] + 1, sizeof(Version));
	latest = Alloc(ntrades, sizeof(int32_t));
	live = Alloc(ntrades, sizeof(int32_t));
	live_pos = Alloc(ntrades, sizeof(int32_t));
	amended = Alloc(ntrades, sizeof(int32_t));
	sent_log = Alloc(nevents, sizeof(int32_t));

	if (output == NULL || truth || truth_state)
		conn = Connect(conninfo);
	if (output)
		out = OpenOutput(output);
	else
	{
		char	   *qp = PQescapeIdentifier(conn, pipeline, strlen(pipeline));

		copy_sql = Alloc(1, strlen(qp) + 200);
		sprintf(copy_sql, "COPY %s.ingest (key, version, value, risk_type, region, trade_desk,"
				" deleted, event_time) FROM STDIN", qp);
		PQfreemem(qp);
	}
	if (batch_log)
		blog = OpenOutput(batch_log);

	t0 = last_print = last_sent_at = Now();
	while (nsent < nevents)
	{
		int64_t		n = nevents - nsent < batch ? nevents - nsent : batch;
		char		event_time[64];
		double		sent_at;

		buf.len = 0;
		sent_at = FormatEventTime(event_time, sizeof(event_time));
		for (int64_t i = 0; i < n; i++)
		{
			int			k = DrawKind(quota, created, ntrades);
			int32_t		vi;
			Version    *v;
			int			c[NDIMS];
			char		num[32];

			switch (k)
			{
				case K_NEW:
					{
						int32_t		trade = (int32_t) created++;

						c[0] = Weighted(&dims[0]);
						c[1] = Weighted(&dims[1]);
						c[2] = Weighted(&dims[2]);
						vi = AddVersion(trade, -1, RandomCents(), CellOf(c), false);
						LiveAdd(trade);
						break;
					}
				case K_MOD:
				case K_TOMB:
					{
						int32_t		trade = live[Below(nlive)];
						Version    *prev = &versions[latest[trade]];
						int			cell = prev->cell;
						int64_t		cents = prev->cents;

						if (k == K_MOD)
						{
							bool		move;

							cents = AmendCents(cents);
							if (f_moves >= 0)
							{
								/* exactly moves_left of the modifications left */
								move = Below(quota[K_MOD] + 1) < moves_left;
								if (move)
									moves_left--;
							}
							else
								move = Uniform() < 0.5;
							if (move)
							{
								cell = MoveCell(cell);
								moved++;
							}
						}
						if (prev->version == 0)
							amended[namended++] = trade;
						vi = AddVersion(trade, latest[trade], cents, cell, k == K_TOMB);
						if (k == K_TOMB)
							LiveRemove(trade);
						break;
					}
				case K_DUP:
					{
						/* mostly a retry of something just sent, else anything */
						int64_t		window = DUP_WINDOW < nsent ? DUP_WINDOW : nsent;

						if (Uniform() < 0.7)
							vi = sent_log[nsent - 1 - Below(window)];
						else
							vi = sent_log[Below(nsent)];
						break;
					}
				case K_STALE:
					{
						int32_t		trade = amended[Below(namended)];
						int32_t		top = versions[latest[trade]].version;
						int32_t		want = (int32_t) Below(top);

						vi = latest[trade];
						while (versions[vi].version > want)
							vi = versions[vi].prev;
						break;
					}
				default:
					abort();
			}
			done[k]++;
			sent_log[nsent++] = vi;
			v = &versions[vi];
			CellCoords(v->cell, c);
			FormatCents(num, sizeof(num), v->cents);
			BufPrintf(&buf, "TRD-%07d\t%d\t%s\t%s\t%s\t%s\t%c\t%s\n", v->trade, v->version, num,
					  dims[0].names[c[0]], dims[1].names[c[1]], dims[2].names[c[2]],
					  v->deleted ? 't' : 'f', event_time);
		}
		if (out)
			WriteOut(out, output, buf.data, buf.len);
		else
			Copy(conn, copy_sql, buf.data, buf.len);
		nbatches++;
		if (blog)
			fprintf(blog, "%" PRId64 "\t%" PRId64 "\t%.6f\t%.6f\n", nbatches, nsent, sent_at,
					WallClock());

		if (rate > 0 && out == NULL)
		{
			double		due = t0 + (double) nsent / rate;
			double		now = Now();

			if (due > now)
				usleep((useconds_t) ((due - now) * 1e6));
		}
		{
			double		now = Now();

			if (!quiet && (now - last_print >= 0.5 || nsent == nevents))
			{
				fprintf(stderr, "producer: %" PRId64 " of %" PRId64 " events sent, %.0f events/s now, %.0f events/s average\n",
						nsent, nevents, (nsent - last_sent) / (now - last_sent_at),
						nsent / (now - t0));
				last_print = last_sent_at = now;
				last_sent = nsent;
			}
		}
	}

	if (out)
		CloseOutput(out, output);
	if (blog)
		CloseOutput(blog, batch_log);
	{
		double		seconds = Now() - t0;

		printf("events_sent %" PRId64 "\n", nsent);
		for (int k = 0; k < NKINDS; k++)
			printf("%s %" PRId64 "\n", kind_names[k], done[k]);
		printf("moved_trades %" PRId64 "\n", moved);
		printf("live_trades %" PRId64 "\n", nlive);
		printf("batches %" PRId64 "\n", nbatches);
		printf("seconds %.3f\n", seconds);
		printf("events_per_second %.0f\n", nsent / seconds);
		if (done[K_MOD] < quota_planned[K_MOD] || done[K_TOMB] < quota_planned[K_TOMB])
			fprintf(stderr, "producer: warning: only %" PRId64 " modifications and %" PRId64
					" tombstones of %" PRId64 " and %" PRId64 " planned: no live trade was left;"
					" the rest were sent as duplicates\n", done[K_MOD], done[K_TOMB],
					quota_planned[K_MOD], quota_planned[K_TOMB]);
		fflush(stdout);
	}

	{
		double		t1 = Now();

		if (truth)
			WriteTruth(conn, truth);
		if (truth_state)
			WriteTruthState(conn, truth_state, created);
		if (truth_file)
		{
			Buf			data = {0};

			BuildTruth(&data);
			WriteFile(truth_file, &data);
			free(data.data);
		}
		if (truth_state_file)
		{
			Buf			data = {0};

			BuildTruthState(&data, created);
			WriteFile(truth_state_file, &data);
			free(data.data);
		}
		printf("truth_seconds %.3f\n", Now() - t1);
	}
	if (conn)
		PQfinish(conn);
	free(buf.data);
	free(copy_sql);
	free(versions);
	free(latest);
	free(live);
	free(live_pos);
	free(amended);
	free(sent_log);
	return 0;
}
