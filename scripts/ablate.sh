#!/usr/bin/env bash
# What each feature of a JSON first copy costs the gateway and Redis, side by
# side in one run on loopback: the ~1 KiB Stripe event of keying/testdata keyed
# on its id ({idempotency.json.id}, a fresh id per request), through
#   json        the route as shipped: journal on, one decision line per request
#   nojournal   the same with journal_body off (no notification kept)
# each in two gateway processes started alike but for their log level:
#   info        Caddy's default (the decision line is written)
#   warn        log level WARN (it is not)
# beside each process's own plain reverse_proxy given the same requests. The
# rows of a round are interleaved and each figure is the median over ROUNDS of
# the row's CPU µs per request less its process's plain one, paired per round;
# Redis CPU µs per request beside it. It answers "what stands between the JSON
# first copy and plain + 60 µs" with the features that cost it, measured.
#
# Usage: scripts/ablate.sh   (from anywhere in the repository)
#   env: DURATION=4s per row, ROUNDS=3, CONNS=32, THREADS=2, KEEP=1 keeps the
#        work directory. Needs go, wrk, redis-server, python3 (free ports). Loopback only; every
#        process it starts stops on exit. Exit 0 measured; 1 a row saw non-2xx
#        answers or socket errors (its figures do not count); 2 setup failed.
set -euo pipefail

DURATION=${DURATION:-4s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
KEEP=${KEEP:-0}

die() { echo "ablate.sh: $*" >&2; exit 2; }
for tool in go wrk redis-server python3; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"

# shellcheck source=harness.sh
. "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
harness_init ablate
harness_start

# gateway <name> <log level>: one Caddy with the three sites; sets PORT[<name>-<site>] and PID[<name>].
declare -A PORT PID
gateway() {
	local name=$1 level=$2 p q r
	p=$(port) q=$(port) r=$(port)
	PORT[$name-plain]=$p PORT[$name-json]=$q PORT[$name-nojournal]=$r
	cat >"$WORK/$name" <<EOF
{
	admin off
	persist_config off
	log {
		level $level
	}
}
:$p {
	bind 127.0.0.1
	reverse_proxy 127.0.0.1:$BP
}
:$q {
	bind 127.0.0.1
	idempotency {
		key {idempotency.json.id}
		scope $name-json
		store redis 127.0.0.1:$RP {
			prefix $name-json
		}
	}
	reverse_proxy 127.0.0.1:$BP
}
:$r {
	bind 127.0.0.1
	idempotency {
		key {idempotency.json.id}
		journal_body off
		scope $name-nojournal
		store redis 127.0.0.1:$RP {
			prefix $name-nojournal
		}
	}
	reverse_proxy 127.0.0.1:$BP
}
EOF
	XDG_DATA_HOME=$WORK XDG_CONFIG_HOME=$WORK "$WORK/idemgate" run --config "$WORK/$name" --adapter caddyfile \
		>"$WORK/$name.log" 2>&1 &
	PID[$name]=$!
	PIDS+=($!)
	up "$r" "$!"
}
gateway info INFO
gateway warn WARN

ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
RESULTS=$WORK/results
: >"$RESULTS"

# load <port> <run id> <duration> <output file>: wrk with fresh ids, bounded by timeout
# in case a server stops answering.
load() {
	WRK_LIB=$ROOT/scripts/wrklib.lua ABLATE_BODY=$ROOT/keying/testdata/stripe_event.json ABLATE_RUN=$2 \
		timeout 90 wrk -t"$THREADS" -c"$CONNS" -d"$3" -s "$ROOT/scripts/ablate.lua" \
		"http://127.0.0.1:$1/" >"$4" 2>&1 || die "wrk failed ($4)"
}

# row <process> <site> <round>: appends "process-site round requests gateway_us redis_us".
row() {
	local name=$1 site=$2 round=$3 g0 g1 r0 r1 out n bad
	out=$WORK/wrk-$name-$site-$round.txt
	load "${PORT[$name-$site]}" "$name$site$round$$" 1s "$out.warmup"
	g0=$(ticks "${PID[$name]}") r0=$(ticks "$REDIS_PID")
	load "${PORT[$name-$site]}" "$name$site$round$$m" "$DURATION" "$out"
	g1=$(ticks "${PID[$name]}") r1=$(ticks "$REDIS_PID")
	n=$(sed -n 's/.*ABLATE_RESULT requests=\([0-9]*\).*/\1/p' "$out")
	bad=$(sed -n 's/.*non2xx=\([0-9]*\) errors=\([0-9]*\).*/\1 \2/p' "$out" | awk '{ print $1 + $2 }')
	[[ -n $n && $n -gt 0 ]] || die "no requests counted ($out)"
	if [[ $bad != 0 ]]; then
		echo "ablate.sh: $name-$site round $round: $bad non-2xx answers or socket errors; the figures do not count" >&2
		FAILED=1
	fi
	awk -v c="$name-$site" -v r="$round" -v n="$n" -v g=$((g1 - g0)) -v d=$((r1 - r0)) -v hz="$HZ" \
		'BEGIN { printf "%s %d %d %.1f %.1f\n", c, r, n, g * 1e6 / hz / n, d * 1e6 / hz / n }' >>"$RESULTS"
}

FAILED=0
echo "== $ROUNDS round(s) of 6 rows, wrk -t$THREADS -c$CONNS -d$DURATION, loopback, $(redis-server --version | cut -d' ' -f1-3)"
for round in $(seq "$ROUNDS"); do
	for name in info warn; do
		for site in plain json nojournal; do
			row "$name" "$site" "$round"
		done
	done
	echo "   round $round done"
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { awk -v c="$1" -v k="$2" '$1 == c { print $k }' "$RESULTS" | median; }
over() { # over <row> <base row>: the row's gateway µs less the base's, paired per round, median
	awk -v c="$1" -v b="$2" '$1 == c { x[$2] = $4 } $1 == b { y[$2] = $4 } END { for (r in x) printf "%.1f\n", x[r] - y[r] }' "$RESULTS" | median
}
line() { # the decision line: (info-json - info-plain) - (warn-json - warn-plain), paired per round, median
	awk '{ v[$1, $2] = $4; r[$2] = 1 }
		END { for (k in r) printf "%.1f\n", (v["info-json", k] - v["info-plain", k]) - (v["warn-json", k] - v["warn-plain", k]) }' "$RESULTS" | median
}

echo
printf '%-16s %12s %14s %14s\n' row "gateway µs" "over plain" "Redis µs"
for name in info warn; do
	for site in plain json nojournal; do
		printf '%-16s %12s %14s %14s\n' "$name-$site" "$(col "$name-$site" 4)" \
			"$([[ $site == plain ]] && echo - || over "$name-$site" "$name-plain")" "$(col "$name-$site" 5)"
	done
done
echo
echo "what each feature costs a JSON first copy (medians of paired rounds, gateway CPU µs per request):"
printf '  %-44s %+.1f\n' "the journal (json - nojournal, info)" "$(over info-json info-nojournal)"
printf '  %-44s %+.1f\n' "the journal (json - nojournal, warn)" "$(over warn-json warn-nojournal)"
printf '  %-44s %+.1f\n' "the decision line (info - warn, json over plain)" "$(line)"
printf '  %-44s %+.1f   (target <= +60)\n' "shipped JSON first copy over plain" "$(over info-json info-plain)"
printf '  %-44s %+.1f\n' "without the journal and the decision line" "$(over warn-nojournal warn-plain)"
exit "$FAILED"
