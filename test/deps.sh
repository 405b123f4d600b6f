#!/usr/bin/env bash
# test/deps.sh: install what building and testing exactonce needs on Debian
# bookworm, if it is missing: server headers, pgTAP and pg_prove, IPC::Run
# (for the TAP tests), pg_repack, sqlsmith, gnuplot, pg_bsd_indent (for
# tools/pgindent), prometheus-postgres-exporter (scraped in a TAP test).
set -euo pipefail

need=()
[ -f /usr/include/postgresql/15/server/postgres.h ] || need+=(postgresql-server-dev-15)
[ -f /usr/share/postgresql/15/extension/pgtap.control ] || need+=(postgresql-15-pgtap)
command -v pg_prove >/dev/null || need+=(libtap-parser-sourcehandler-pgtap-perl)
command -v gcc >/dev/null || need+=(gcc make)
command -v gnuplot >/dev/null || need+=(gnuplot-nox)
[ -f /usr/include/postgresql/libpq-fe.h ] || need+=(libpq-dev)
perl -MIPC::Run -e 1 2>/dev/null || need+=(libipc-run-perl)
[ -x /usr/lib/postgresql/15/bin/pg_repack ] || need+=(postgresql-15-repack)
command -v sqlsmith >/dev/null || need+=(sqlsmith)
command -v pg_bsd_indent >/dev/null || need+=(pg-bsd-indent)
command -v objdump >/dev/null || need+=(binutils)
command -v prometheus-postgres-exporter >/dev/null || need+=(prometheus-postgres-exporter)

if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "missing packages: ${need[*]} (run as root or install them)" >&2
		exit 1
	fi
	echo "installing: ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
