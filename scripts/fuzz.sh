#!/usr/bin/env bash
# Runs every native fuzz target of keying/ for a bounded time each.
# Not part of CI. Usage: FUZZTIME=20s scripts/fuzz.sh [regexp]
# New crashers land in keying/testdata/fuzz/<Target>/; commit the ones you fix.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME="${FUZZTIME:-20s}"
FILTER="${1:-.}"
PKG=./keying

targets=$(go test -list '^Fuzz' "$PKG" | grep '^Fuzz' | grep -E -- "$FILTER" || true)
if [ -z "$targets" ]; then
	echo "no fuzz target matches $FILTER" >&2
	exit 1
fi

failed=0
for t in $targets; do
	echo "== $t ($FUZZTIME)"
	# -parallel keeps the fuzzer from taking every core of a shared machine.
	if ! go test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" -parallel "${FUZZPARALLEL:-1}" "$PKG"; then
		failed=$((failed + 1))
	fi
done
if [ "$failed" -ne 0 ]; then
	echo "$failed fuzz target(s) failed" >&2
	exit 1
fi
echo "all fuzz targets passed"
