/*-------------------------------------------------------------------------
 *
 * benchmon.c
 *		The benchmark's sampler: watches a pipeline and a server process at a
 *		fixed interval and writes what it saw as CSV.
 *
 * One process, one connection, one of two modes:
 *
 *	 sample (default)  every --interval ms: the pipeline's row of
 *					   exactonce.pipelines (ingested, queued, staged, latency
 *					   p50/p99, worker pid), how many (auto)vacuums run in
 *					   the database, and RssAnon, VmHWM and CPU time of
 *					   processes from /proc/<pid>.  With --until-drained N
 *					   it stops at the first sample showing ingested >= N,
 *					   queued = 0 and staged = 0, and prints that sample's time.
 *	 probe			   every --interval ms: ingested from <pipeline>.progress and .shard
 *					   and the events each shard took from <pipeline>.shard,
 *					   small reads that never wait for a lock; a line is
 *					   written whenever ingested changes, so the file tells
 *					   when each drain transaction became visible, to within
 *					   the interval.
 *
 * Times are Unix seconds (gettimeofday), the clock the producer's event_time
 * and batch log use.  A sample's time is taken when its answer arrived: the
 * state it shows was committed by then.  At the end a summary goes to
 * stdout as "name value" lines.
 *
 * Build: cc -O2 -Wall -Wextra -o benchmon benchmon.c -I$(pg_config --includedir) -lpq
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*
 * the events a pipeline ingested (%s three times: its schema), from its
 * progress row and its shard rows; before 1.21 the shard rows had no
 * counters, which this reads as 0, so that libraries can be compared
 */
#define INGESTED_SQL \
	"(SELECT ingested FROM %s.progress)" \
	" + (SELECT coalesce(sum((to_jsonb(s) ->> 'ingested')::bigint), 0) FROM %s.shard s)"
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define MAX_PIDS 8				/* processes sampled at once */

static volatile sig_atomic_t stop_requested = 0;

/* HandleStop makes the main loop end after the current sample. */
static void
HandleStop(int sig)
{
	(void) sig;
	stop_requested = 1;
}

/* WallClock returns Unix time in seconds. */
static double
WallClock(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv.tv_sec + tv.tv_usec / 1e6;
}

/* SleepUntil sleeps until Unix time t (returns at once if it has passed). */
static void
SleepUntil(double t)
{
	double		d = t - WallClock();

	if (d > 0)
	{
		struct timespec ts;

		ts.tv_sec = (time_t) d;
		ts.tv_nsec = (long) ((d - (double) ts.tv_sec) * 1e9);
		nanosleep(&ts, NULL);
	}
}

/* Die prints a message and exits with status 1. */
static void
Die(const char *what, PGconn *conn)
{
	fprintf(stderr, "benchmon: %s%s%s", what, conn ? ": " : "\n",
			conn ? PQerrorMessage(conn) : "");
	exit(1);
}

/*
 * ReadStatus reads RssAnon and VmHWM (kB) of a process; false when the
 * process is gone.
 */
static bool
ReadStatus(int pid, long *rss_anon, long *vm_hwm)
{
	char		path[64];
	char		line[256];
	FILE	   *f;

	*rss_anon = *vm_hwm = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	while (fgets(line, sizeof(line), f))
	{
		if (strncmp(line, "RssAnon:", 8) == 0)
			*rss_anon = strtol(line + 8, NULL, 10);
		else if (strncmp(line, "VmHWM:", 6) == 0)
			*vm_hwm = strtol(line + 6, NULL, 10);
	}
	fclose(f);
	return true;
}

/* ReadCpu returns the CPU time (user + system) of a process in seconds, or -1. */
static double
ReadCpu(int pid)
{
	char		path[64];
	char		buf[1024];
	FILE	   *f;
	char	   *p;
	unsigned long utime,
				stime;
	size_t		n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the command name may hold spaces: fields count from its closing ')' */
	p = strrchr(buf, ')');
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
							&utime, &stime) != 2)
		return -1;
	return (double) (utime + stime) / (double) sysconf(_SC_CLK_TCK);
}

/* ResetHWM resets a process's peak RSS (VmHWM) to its current RSS. */
static void
ResetHWM(int pid)
{
	char		path[64];
	FILE	   *f;

	snprintf(path, sizeof(path), "/proc/%d/clear_refs", pid);
	f = fopen(path, "w");
	if (f == NULL)
		return;
	fputs("5", f);
	fclose(f);
}

/* QueryInt runs a one-value query and returns the value, or -1 for no row or NULL. */
static long
QueryInt(PGconn *conn, const char *sql, const char *param)
{
	const char *params[1] = {param};
	PGresult   *res = PQexecParams(conn, sql, param ? 1 : 0, NULL, params, NULL, NULL, 0);
	long		v = -1;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		Die("query failed", conn);
	if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
		v = strtol(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return v;
}

static void
Usage(FILE *f)
{
	fprintf(f,
			"usage: benchmon [options]\n"
			"  -d, --dbname CONNINFO   connection string (default: PG* environment variables)\n"
			"  -p, --pipeline NAME     the pipeline to watch\n"
			"  -i, --interval MS       sampling interval (default 200)\n"
			"  -o, --output FILE       CSV to write (default stdout)\n"
			"      --probe             probe mode: progress.ingested and the shards' taken on every change\n"
			"      --pid N[,N...]      processes whose memory (the largest) and CPU (summed) to sample\n"
			"      --app NAME          ... the backend with this application_name\n"
			"      --worker            ... the drain worker of the pipeline\n"
			"      --reset-hwm         reset that process's VmHWM when it is found\n"
			"      --until-drained N   stop once ingested >= N, queued = 0, staged = 0\n"
			"      --stop-file FILE    stop once FILE exists\n"
			"      --timeout S         give up after S seconds (exit 3)\n"
			"      --view-every N      read the full view on every Nth sample only (default 20;\n"
			"                          0 = the first only): its queued column scans the queue,\n"
			"                          which at millions of queued rows costs seconds of CPU\n");
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dbname", required_argument, NULL, 'd'},
		{"pipeline", required_argument, NULL, 'p'},
		{"interval", required_argument, NULL, 'i'},
		{"output", required_argument, NULL, 'o'},
		{"probe", no_argument, NULL, 1},
		{"pid", required_argument, NULL, 2},
		{"app", required_argument, NULL, 3},
		{"worker", no_argument, NULL, 4},
		{"reset-hwm", no_argument, NULL, 5},
		{"until-drained", required_argument, NULL, 6},
		{"stop-file", required_argument, NULL, 7},
		{"timeout", required_argument, NULL, 8},
		{"view-every", required_argument, NULL, 9},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *conninfo = "";
	const char *pipeline = NULL;
	char	   *cheap_sql = NULL;
	const char *output = NULL;
	const char *app = NULL;
	const char *stop_file = NULL;
	int			view_every = 20;
	bool		probe = false,
				worker = false,
				reset_hwm = false;
	int			pid = 0;
	int			pids[MAX_PIDS];
	int			npids = 0;
	long		interval_ms = 200;
	long long	until = -1;
	double		timeout = 0;
	FILE	   *out = stdout;
	PGconn	   *conn;
	const char *keys[] = {"dbname", "application_name", NULL};
	const char *values[] = {NULL, "exactonce-benchmon", NULL};
	char	   *probe_sql = NULL;
	double		t0,
				next,
				cpu_first = -1,
				cpu_last = -1,
				done_at = 0,
				query_ms_sum = 0,
				query_ms_max = 0;
	long		peak_rss = -1,
				peak_hwm = -1,
				last_ingested = -2,
				nsamples = 0;
	int			opt;
	int			status = 0;

	while ((opt = getopt_long(argc, argv, "d:p:i:o:h", longopts, NULL)) != -1)
	{
		switch (opt)
		{
			case 'd':
				conninfo = optarg;
				break;
			case 'p':
				pipeline = optarg;
				break;
			case 'i':
				interval_ms = atol(optarg);
				break;
			case 'o':
				output = optarg;
				break;
			case 1:
				probe = true;
				break;
			case 2:
				for (char *tok = strtok(optarg, ","); tok && npids < MAX_PIDS; tok = strtok(NULL, ","))
					pids[npids++] = atoi(tok);
				pid = npids > 0 ? pids[0] : 0;
				break;
			case 3:
				app = optarg;
				break;
			case 4:
				worker = true;
				break;
			case 5:
				reset_hwm = true;
				break;
			case 6:
				until = atoll(optarg);
				break;
			case 7:
				stop_file = optarg;
				break;
			case 8:
				timeout = atof(optarg);
				break;
			case 9:
				view_every = atoi(optarg);
				break;
			case 'h':
				Usage(stdout);
				return 0;
			default:
				Usage(stderr);
				return 2;
		}
	}
	if (interval_ms < 1 || (probe && pipeline == NULL) || (until >= 0 && pipeline == NULL))
	{
		Usage(stderr);
		return 2;
	}

	signal(SIGTERM, HandleStop);
	signal(SIGINT, HandleStop);
	values[0] = conninfo;
	conn = PQconnectdbParams(keys, values, 1);
	if (PQstatus(conn) != CONNECTION_OK)
		Die("could not connect", conn);
	if (output && (out = fopen(output, "w")) == NULL)
	{
		fprintf(stderr, "benchmon: could not open \"%s\": %s\n", output, strerror(errno));
		return 1;
	}
	if (probe)
	{
		char	   *q = PQescapeIdentifier(conn, pipeline, strlen(pipeline));

		probe_sql = malloc(4 * strlen(q) + 256);
		sprintf(probe_sql, "SELECT " INGESTED_SQL ", (SELECT array_agg(taken ORDER BY shard) FROM %s.shard)",
				q, q, q);
		PQfreemem(q);
		fprintf(out, "t,ingested,taken\n");
	}
	else
		fprintf(out, "t,ingested,queued,staged,latency_p50_ms,latency_p99_ms,pid,rss_anon_kb,vm_hwm_kb,query_ms,cpu_s,vacuums,"
				"state_live,state_dead,state_autovacuums\n");
	if (pipeline)
	{
		char	   *q = PQescapeIdentifier(conn, pipeline, strlen(pipeline));

		cheap_sql = malloc(4 * strlen(q) + 256);
		sprintf(cheap_sql, "SELECT " INGESTED_SQL ", (SELECT count(*) FROM %s.ledger WHERE applied_at IS NULL)",
				q, q, q);
		PQfreemem(q);
	}

	if (reset_hwm)
		for (int i = 0; i < npids; i++)
			ResetHWM(pids[i]);

	t0 = next = WallClock();
	while (!stop_requested)
	{
		double		ts = WallClock(),
					t;

		if (timeout > 0 && ts - t0 > timeout)
		{
			fprintf(stderr, "benchmon: timed out after %.0f s\n", timeout);
			status = 3;
			break;
		}
		if (probe)
		{
			PGresult   *res = PQexec(conn, probe_sql);
			long		ingested;

			if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
				Die("probe query failed", conn);
			ingested = strtol(PQgetvalue(res, 0, 0), NULL, 10);
			t = WallClock();
			if (ingested != last_ingested)
			{
				fprintf(out, "%.6f,%ld,\"%s\"\n", t, ingested, PQgetvalue(res, 0, 1));
				last_ingested = ingested;
			}
			PQclear(res);
			if (until >= 0 && ingested >= until && done_at == 0)
				done_at = t;
		}
		else
		{
			long		ingested = -1,
						queued = -1,
						staged = -1,
						rss = -1,
						hwm = -1,
						vacuums,
						state[3] = {-1, -1, -1};
			double		cpu = -1;
			char		p50[32] = "",
						p99[32] = "";

			if (pid == 0 && app)
			{
				pid = (int) QueryInt(conn, "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
									 " ORDER BY backend_start DESC LIMIT 1", app);
				if (pid < 0)
					pid = 0;
				else
				{
					pids[npids++] = pid;
					if (reset_hwm)
						ResetHWM(pid);
				}
			}
			if (pipeline && nsamples > 0 && (view_every == 0 || nsamples % view_every != 0))
			{
				/* between full samples, only what the stop test needs: the
				 * view counts the queue with a scan, which would compete
				 * with the worker for the CPU every 50 ms */
				PGresult   *res = PQexec(conn, cheap_sql);

				if (PQresultStatus(res) != PGRES_TUPLES_OK)
					Die("query of the pipeline's progress failed", conn);
				ingested = atol(PQgetvalue(res, 0, 0));
				staged = atol(PQgetvalue(res, 0, 1));
				PQclear(res);
			}
			else if (pipeline)
			{
				const char *params[1] = {pipeline};
				PGresult   *res = PQexecParams(conn,
											   "SELECT ingested, queued, staged,"
											   " round(extract(epoch FROM latency_p50) * 1000, 1),"
											   " round(extract(epoch FROM latency_p99) * 1000, 1), worker_pid"
											   " FROM exactonce.pipelines WHERE name = $1",
											   1, NULL, params, NULL, NULL, 0);

				if (PQresultStatus(res) != PGRES_TUPLES_OK)
					Die("query of exactonce.pipelines failed", conn);
				if (PQntuples(res) == 1)
				{
					ingested = atol(PQgetvalue(res, 0, 0));
					queued = atol(PQgetvalue(res, 0, 1));
					staged = atol(PQgetvalue(res, 0, 2));
					snprintf(p50, sizeof(p50), "%s", PQgetvalue(res, 0, 3));
					snprintf(p99, sizeof(p99), "%s", PQgetvalue(res, 0, 4));
					if (worker && pid == 0 && !PQgetisnull(res, 0, 5))
					{
						pid = pids[npids++] = atoi(PQgetvalue(res, 0, 5));
						if (reset_hwm)
							ResetHWM(pid);
					}
				}
				PQclear(res);
			}
			vacuums = QueryInt(conn, "SELECT count(*) FROM pg_stat_progress_vacuum", NULL);
			if (pipeline)
			{
				/* how far autovacuum is behind on state: its dead rows */
				const char *params[1] = {pipeline};
				PGresult   *res = PQexecParams(conn,
											   "SELECT n_live_tup, n_dead_tup, autovacuum_count FROM pg_stat_user_tables"
											   " WHERE schemaname = $1 AND relname = 'state'",
											   1, NULL, params, NULL, NULL, 0);

				if (PQresultStatus(res) != PGRES_TUPLES_OK)
					Die("query of pg_stat_user_tables failed", conn);
				for (int c = 0; c < 3 && PQntuples(res) == 1; c++)
					state[c] = atol(PQgetvalue(res, 0, c));
				PQclear(res);
			}
			t = WallClock();
			for (int i = 0; i < npids; i++)
			{
				long		prss,
							phwm;
				double		pcpu;

				if (!ReadStatus(pids[i], &prss, &phwm))
					continue;
				rss = prss > rss ? prss : rss;
				hwm = phwm > hwm ? phwm : hwm;
				pcpu = ReadCpu(pids[i]);
				if (pcpu >= 0)
					cpu = (cpu < 0 ? 0 : cpu) + pcpu;
			}
			if (rss > peak_rss)
				peak_rss = rss;
			if (hwm > peak_hwm)
				peak_hwm = hwm;
			if (cpu >= 0)
			{
				if (cpu_first < 0)
					cpu_first = cpu;
				cpu_last = cpu;
			}
			query_ms_sum += (t - ts) * 1000;
			if ((t - ts) * 1000 > query_ms_max)
				query_ms_max = (t - ts) * 1000;
			nsamples++;
			fprintf(out, "%.6f,%ld,%ld,%ld,%s,%s,%d,%ld,%ld,%.1f,%.2f,%ld,%ld,%ld,%ld\n", t, ingested, queued, staged,
					p50, p99, pid, rss, hwm, (t - ts) * 1000, cpu, vacuums, state[0], state[1], state[2]);
			if (until >= 0 && ingested >= until && staged == 0)
			{
				done_at = t;
				break;
			}
		}
		fflush(out);
		if (stop_file)
		{
			struct stat st;

			if (stat(stop_file, &st) == 0)
				break;
		}
		next += interval_ms / 1000.0;
		if (next < WallClock())
			next = WallClock();	/* a slow query: no burst of catch-up samples */
		SleepUntil(next);
	}

	if (output)
		fclose(out);
	printf("samples %ld\n", nsamples);
	printf("pid %d\n", pid);
	printf("peak_rss_anon_kb %ld\n", peak_rss);
	printf("peak_vm_hwm_kb %ld\n", peak_hwm);
	printf("query_ms_avg %.1f\n", nsamples ? query_ms_sum / nsamples : 0.0);
	printf("query_ms_max %.1f\n", query_ms_max);
	printf("done_at %.6f\n", done_at);
	printf("cpu_s %.2f\n", cpu_first >= 0 ? cpu_last - cpu_first : -1.0);
	PQfinish(conn);
	return status;
}
