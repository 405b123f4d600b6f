#!/usr/bin/env bash
# test/package.sh: build the Debian package (debian/) from the committed
# tree, check it with lintian, install it, run its autopkgtests against the
# installed files, and remove it again. Run as root; CI does.
#
# Installs what is missing with apt-get (dpkg-dev, debhelper,
# postgresql-server-dev-all for pg_buildext's dh sequence, autopkgtest,
# lintian). Builds the source and binary packages with dpkg-buildpackage in
# a temporary directory from "git archive HEAD" (uncommitted edits stay out),
# with -Werror added to Debian's build flags; the build runs the pg_regress
# and isolation suites against the built files. Then autopkgtest runs
# debian/tests/ on this machine (the null testbed): the same suites and a
# pipeline drained by the workers, against the installed package.
#
# The machine is left as it was found: files at the package's paths that were
# there before (a "make install") are kept aside and put back once the
# package is purged, also when the script is interrupted.
#
# Prints TAP ("ok N - ...", "not ok N - ...", comments with "#") and exits
# non-zero if anything failed.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
n=0
failed=0

ok() {
	n=$((n + 1))
	echo "ok $n - $1"
}

not_ok() {
	n=$((n + 1))
	failed=$((failed + 1))
	echo "not ok $n - $1"
}

# comment: stdin as TAP comment lines (the last $1 lines)
comment() {
	tail -n "${1:-40}" | sed 's/^/# /'
}

if [ "$(id -u)" != 0 ]; then
	echo "Bail out! test/package.sh runs as root (apt-get, dpkg)"
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q -o DPkg::Lock::Timeout=600 --no-install-recommends)

# 1. the tools, installed when missing
need=()
command -v dpkg-buildpackage >/dev/null || need+=(dpkg-dev)
command -v dh >/dev/null || need+=(debhelper)
command -v autopkgtest >/dev/null || need+=(autopkgtest)
command -v lintian >/dev/null || need+=(lintian)
dpkg-query -W -f='${Status}' postgresql-15 2>/dev/null | grep -q 'ok installed' ||
	need+=(postgresql-15)
if ! dpkg-query -W -f='${Status}' postgresql-server-dev-all 2>/dev/null | grep -q 'ok installed'; then
	# the version that goes with the installed postgresql-common, so that
	# this does not upgrade it
	common=$(dpkg-query -W -f='${Version}' postgresql-common 2>/dev/null)
	need+=(postgresql-server-dev-all)
fi
if [ ${#need[@]} -gt 0 ]; then
	echo "# installing ${need[*]}"
	apt-get update -qq >/dev/null 2>&1
	if [ -n "${common:-}" ] && apt-cache madison postgresql-server-dev-all | grep "| $common |" >/dev/null; then
		need=("${need[@]/#postgresql-server-dev-all/postgresql-server-dev-all=$common}")
	fi
	if ! apt-get install "${apt_opts[@]}" "${need[@]}" >/tmp/exactonce-package-apt.log 2>&1; then
		comment 20 </tmp/exactonce-package-apt.log
		echo "Bail out! could not install ${need[*]}"
		exit 1
	fi
fi

tmp=$(mktemp -d /tmp/exactonce-package.XXXXXX)
# the servers of the tests run as postgres and read files under it
chmod 755 "$tmp"
pkg=
backup=$tmp/backup

# keep FILE: copy a file aside to be put back after the package is gone
keep() {
	mkdir -p "$backup$(dirname "$1")" && cp -a "$1" "$backup$1" && echo "$1" >>"$backup.list"
}

# remove_package: purge the package and put back the files kept aside. A
# file of the package that was replaced while it was installed (a "make
# install" meanwhile) is kept too, and wins over the older copy.
remove_package() {
	local f
	dpkg --verify "$pkg" 2>/dev/null | awk '$1 ~ /^..5/ { print $NF }' |
		while read -r f; do keep "$f"; done
	apt-get purge "${apt_opts[@]}" "$pkg" >"$tmp/purge.log" 2>&1
	sort -u "$backup.list" | while read -r f; do
		mkdir -p "$(dirname "$f")"
		cp -a "$backup$f" "$f"
	done
}

# cleanup: remove the package if this run left it installed; remove the
# temporary directory unless something failed or EXACTONCE_PACKAGE_KEEP is
# set (its logs: build.log, autopkgtest/, ...)
cleanup() {
	if [ -n "$pkg" ] && dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
		remove_package
		comment 20 <"$tmp/purge.log"
	fi
	if [ $failed -eq 0 ] && [ -z "${EXACTONCE_PACKAGE_KEEP:-}" ]; then
		rm -rf "$tmp"
	else
		echo "# packages and logs kept in $tmp"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 2. the source: the committed tree, and the upstream tarball without debian/
name=$(git -C "$repo" show HEAD:debian/changelog | sed -n '1s/^\([^ ]*\) .*/\1/p')
debversion=$(git -C "$repo" show HEAD:debian/changelog | sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p')
upstream=${debversion%-*}
extversion=$(git -C "$repo" show HEAD:exactonce.control | sed -n "s/^default_version = '\(.*\)'/\1/p")
if [ "$upstream" = "$extversion" ]; then
	ok "debian/changelog's version $debversion is default_version $extversion"
else
	not_ok "debian/changelog's version $debversion is default_version $extversion"
fi
src=$tmp/$name-$upstream
git -C "$repo" archive --format=tar --prefix="$name-$upstream/" HEAD -- . ':(exclude)debian' |
	gzip -n >"$tmp/${name}_$upstream.orig.tar.gz"
mkdir "$src"
git -C "$repo" archive --format=tar HEAD | tar -x -C "$src"

# 3. the build, with the build-time tests
start=$SECONDS
if (cd "$src" && DEB_CFLAGS_APPEND=-Werror dpkg-buildpackage --no-sign) >"$tmp/build.log" 2>&1; then
	ok "package built with -Werror, build-time tests passed ($((SECONDS - start)) s)"
else
	not_ok "package built with -Werror, build-time tests passed"
	comment 60 <"$tmp/build.log"
	echo "1..$n"
	exit 1
fi
deb=$(ls "$tmp"/postgresql-*-"$name"_"$debversion"_*.deb)
pkg=$(dpkg-deb -f "$deb" Package)
changes=$(ls "$tmp"/"$name"_"$debversion"_*.changes)

# 4. lintian on the source and binary packages: errors fail, the rest is told
lintian_out=$(cd "$tmp" && lintian -I "$changes" 2>&1)
lintian_rc=$?
lintian_out=$(grep -v 'running with root privileges' <<<"$lintian_out")
if [ $lintian_rc -eq 0 ] && ! grep -q '^E: ' <<<"$lintian_out"; then
	ok "lintian: no errors ($(grep -c '^W: ' <<<"$lintian_out") warnings, $(grep -c '^I: ' <<<"$lintian_out") info)"
else
	not_ok "lintian: no errors"
fi
[ -n "$lintian_out" ] && comment 40 <<<"$lintian_out"

# 5. install it; keep aside the files at its paths that are there now
if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
	echo "# $pkg was installed already (an interrupted run?): purging it first"
	apt-get purge "${apt_opts[@]}" "$pkg" >/dev/null 2>&1
fi
mkdir "$backup"
: >"$backup.list"
while read -r f; do
	[ -f "$f" ] && [ ! -L "$f" ] && keep "$f"
done < <(dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n 's|^\./|/|p')
# (grep reads the whole list: grep -q could leave dpkg a SIGPIPE, which
# pipefail counts as a failure)
if apt-get install "${apt_opts[@]}" "$deb" >"$tmp/install.log" 2>&1 &&
	dpkg-query -W -f='${Status}' "$pkg" | grep -q 'ok installed' &&
	dpkg -L "$pkg" | grep "/$name\.so$" >/dev/null; then
	ok "$pkg installed ($(wc -l <"$backup.list") files of an earlier install kept aside)"
else
	not_ok "$pkg installed"
	comment 20 <"$tmp/install.log"
fi

# 6. the autopkgtests against the installed package, on this machine
start=$SECONDS
autopkgtest --summary-file="$tmp/summary" --output-dir="$tmp/autopkgtest" \
	"$tmp/${name}_$debversion.dsc" "$deb" -- null >"$tmp/autopkgtest.log" 2>&1
rc=$?
tests=$(sed -n 's/^Tests: *//p' "$src/debian/tests/control")
for t in $tests; do
	result=$(awk -v t="$t" '$1 == t { print $2 }' "$tmp/summary" 2>/dev/null)
	if [ "$result" = PASS ]; then
		ok "autopkgtest $t"
	else
		not_ok "autopkgtest $t: ${result:-not run}"
		[ -f "$tmp/autopkgtest/$t-stdout" ] && comment 60 <"$tmp/autopkgtest/$t-stdout"
		[ -f "$tmp/autopkgtest/$t-stderr" ] && comment 20 <"$tmp/autopkgtest/$t-stderr"
	fi
done
echo "# autopkgtest exited with $rc in $((SECONDS - start)) s"
[ $rc -ne 0 ] && [ ! -s "$tmp/summary" ] && comment 40 <"$tmp/autopkgtest.log"

# 7. remove it; the files of before are back as they were
remove_package
restored=1
while read -r f; do
	cmp -s "$backup$f" "$f" || restored=
done < <(sort -u "$backup.list")
if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' && [ -n "$restored" ]; then
	ok "$pkg purged, the files of before put back"
else
	not_ok "$pkg purged, the files of before put back"
	comment 20 <"$tmp/purge.log"
fi

echo "1..$n"
[ $failed -eq 0 ]
