# exactonce: PGXS build.  The extension is installed from one base script,
# src/scripts/exactonce--1.0.sql, and the chain of upgrade scripts after it, up to
# default_version in exactonce.control: CREATE EXTENSION runs the chain, so
# a fresh install and an upgraded one are the same by construction.

EXTENSION = exactonce

MODULE_big = exactonce
PGFILEDESC = "exactonce - exact aggregates over at-least-once event streams"
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c src/*/*.c)))

DATA = $(wildcard src/scripts/$(EXTENSION)--*.sql)

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --inputdir=. --outputdir=test/regress_out

# isolation specs (test/isolation/specs), run by pg_isolation_regress
ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/isolation_out

# TAP tests (test/t/*.pl) with PostgreSQL::Test::Cluster, each on clusters
# of its own.  "make installcheck" runs all three kinds against the
# installed extension: pg_regress and the isolation specs on the server in
# PGHOST/PGPORT, the TAP tests on their own clusters.
TAP_TESTS = 1
PROVE_TESTS = $(sort $(wildcard test/t/*.pl))
# -Wextra on top of PGXS's -Wall; the three exclusions are noise from the
# server headers themselves, not from this code.
PG_CFLAGS = -Wextra -Wno-unused-parameter -Wno-sign-compare -Wno-missing-field-initializers

# headers are named from src/ ("engine/queue.h"); distributed/node.c
# reaches the nodes of a distributed pipeline with libpq
PG_CPPFLAGS = -Isrc -I$(libpq_srcdir)
SHLIB_LINK_INTERNAL = $(libpq)

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# after PGXS, which sets it empty: the tests' shared module
PROVE_FLAGS = -I test/t

# every object depends on the shared header (PGXS tracks no dependencies)
$(OBJS): $(wildcard src/*.h src/*/*.h)

# Each suite on its own.  The *check targets stand alone: pg_regress starts
# a temporary instance (initdb, so not as root) with the library preloaded
# (test/preload.conf, workers on), the *check-nopreload ones without it
# (flush() drives), and the TAP tests start clusters of their own.
TEMP_INSTANCE = --temp-instance=test/tmp_instance
PRELOAD = --temp-config=test/preload.conf

regresscheck:
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(TEMP_INSTANCE) $(PRELOAD) $(REGRESS)

regresscheck-nopreload:
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(TEMP_INSTANCE) $(REGRESS)

isolationcheck:
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) $(TEMP_INSTANCE) $(PRELOAD) $(ISOLATION)

isolationcheck-nopreload:
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) $(TEMP_INSTANCE) $(ISOLATION)

tapcheck:
	$(prove_installcheck)

# each header compiles on its own after postgres.h, and no file includes a
# header of a higher layer or calls in a circle (tools/layercheck, which
# lists the layers)
headerscheck:
	@for h in $$(cd src && find . -name '*.h' | sed 's|^\./||' | LC_ALL=C sort); do \
		printf '#include "postgres.h"\n#include "%s"\n' $$h | \
			$(CC) $(CPPFLAGS) -fsyntax-only -x c - || exit 1; \
	done
	@tools/layercheck

.PHONY: regresscheck regresscheck-nopreload isolationcheck isolationcheck-nopreload tapcheck headerscheck bench

# the benchmark: COPY floor, the naive SQL peer and exactonce on the same events
bench:
	bash test/bench/run.sh
