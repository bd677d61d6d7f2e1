#!/usr/bin/env bash
# A key's cost as the store grows, measured from outside on a real Redis: two
# redis-servers (no persistence) each behind its own idemgate, started alike,
# one backend. The full store is filled THROUGH ITS GATEWAY to FILL answered
# keys (a ~1 KiB Stripe event, keying/testdata, keyed on its "id", journaled,
# a fresh id each), the near-empty twin to TWIN_FILL. Then, in the same rounds
# and taking turns to go first (each round restarts both gateways and gives
# the twin a fresh redis-server filled to TWIN_FILL, so that it stays
# near-empty: its rows add one round's keys, ~35k, not all rounds'), both are given
#   first     fresh ids: every request a first copy
#   replay    one id for the whole row: every measured request a replay
# and it prints, per side, req/s and CPU µs per request of the gateway
# (/proc/<pid>/stat) and of redis-server (INFO cpu), the ratios full/twin
# (medians of the per-round ratios), and Redis used_memory per answered key
# (full less twin, over the keys the full store holds more). Last, HFILL
# header-keyed first copies (a small form body, Idempotency-Key) on a fresh
# twin: used_memory per such key. It measures from outside (CPU, INFO memory,
# DBSIZE), so it reads any record layout.
#
# Usage: scripts/scale.sh              (from anywhere inside the repository)
#        FILL=100000 scripts/scale.sh  (a quicker run; 1M takes minutes: see the fill rate)
#
# Environment:
#   FILL=1000000   answered keys in the full store   TWIN_FILL=1000 in the twin
#   CHUNK=50000    fill keys per wrk run (progress is printed after each)
#   ROUNDS=3       rounds of the four rows           DURATION=10s per row
#   WARMUP=1s      warm-up per row (a replay row's sends its key first)
#   CONNS=32  THREADS=2   wrk connections and threads, fill and rows alike
#   HFILL=20000    header-keyed keys for their memory figure (0 skips)
#   LOG_LEVEL=WARN Caddy's log level (INFO writes a line per request: 1M lines)
#   STRICT=1       exit 1 when a target is missed (otherwise they only report)
#   KEEP=1         keep the work directory (binaries, Caddyfiles, logs, wrk output)
#
# Needs go, wrk, redis-server, redis-cli, curl, python3 (free ports). Memory:
# Redis holds FILL × the per-key figure (1.6 GB at 1M on 2026-12-04).
# Everything listens on 127.0.0.1 only and every process it starts
# stops on exit; every wait is bounded. Exit status: 0 measured; 1 a row's
# forwarding or answers were wrong, or (STRICT=1) a target was missed; 2 setup
# or the fill failed.
set -euo pipefail

FILL=${FILL:-1000000}
TWIN_FILL=${TWIN_FILL:-1000}
CHUNK=${CHUNK:-50000}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
HFILL=${HFILL:-20000}
LOG_LEVEL=${LOG_LEVEL:-WARN}
STRICT=${STRICT:-0}
KEEP=${KEEP:-0}

# The contract's targets (docs/performance.md, issue 51).
TARGET_MEM=1536      # Redis bytes per answered key, 1 KiB notification journaled
TARGET_REDIS_CPU=1.10 # Redis CPU per first copy, full / twin
TARGET_FLAT=1.10      # the gateway's CPU per first copy, and replays: flat

die() { echo "scale.sh: $*" >&2; exit 2; }
for tool in go wrk redis-server redis-cli curl python3; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
for v in FILL TWIN_FILL CHUNK ROUNDS CONNS THREADS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done
[[ $HFILL =~ ^[0-9]+$ ]] || die "HFILL must be a whole number"
((FILL > TWIN_FILL)) || die "FILL must be larger than TWIN_FILL"
((CONNS >= THREADS)) || die "CONNS must be at least THREADS"
seconds() { # a wrk duration (10, 10s, 2m) in whole seconds
	case $1 in *m) echo $((${1%m} * 60)) ;; *s) echo "${1%s}" ;; *) echo "$1" ;; esac
}
[[ $(seconds "$DURATION") =~ ^[1-9][0-9]*$ ]] || die "DURATION must look like 10s or 2m"
[[ $(seconds "$WARMUP") =~ ^[0-9]+$ ]] || die "WARMUP must look like 1s, or 0"

# shellcheck source=harness.sh
. "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
harness_init scale
BODY=$ROOT/keying/testdata/stripe_event.json
LUA=$ROOT/scripts/scale.lua
SIDES="full twin"

echo "== building (once) into $WORK"
(cd "$ROOT" && go build -o "$WORK/idemgate" ./cmd/idemgate && go build -o "$WORK/backend" ./examples/legacy-backend) ||
	die "build failed"

# The backend: answers each notification with a short 200 and counts them
# (GET /stats, POST /reset), no log line per request.
BP=$(port)
"$WORK/backend" -listen "127.0.0.1:$BP" -quiet >"$WORK/backend.log" 2>&1 &
BACKEND_PID=$!
PIDS+=("$BACKEND_PID")
up "$BP" "$BACKEND_PID"
reset_backend() { curl -fsS --max-time 10 -X POST "http://127.0.0.1:$BP/reset" >/dev/null || die "backend reset failed"; }
backend_total() { curl -fsS --max-time 30 "http://127.0.0.1:$BP/stats" | sed -n 's/.*"total":\([0-9]*\).*/\1/p'; }

# side <name>: a redis-server and an idemgate in front of it, with a JSON route
# (keyed on the body's "id", journaled as shipped) and a header-keyed route,
# and the admin endpoint for a key's lookup. Sets RPORT, GPID, RPID, JPORT,
# HPORT, APORT [<name>].
declare -A RPORT RPID GPID JPORT HPORT APORT
start_redis() { # start_redis <side>: a fresh, empty redis-server on the side's port
	redis-server --bind 127.0.0.1 --port "${RPORT[$1]}" --save '' --appendonly no \
		--dir "$WORK" --daemonize no >>"$WORK/redis-$1.log" 2>&1 &
	RPID[$1]=$!
	PIDS+=($!)
	up "${RPORT[$1]}" "$!"
}
start_gateway() { # start_gateway <side>
	XDG_DATA_HOME="$WORK/xdg-$1" XDG_CONFIG_HOME="$WORK/xdg-$1" \
		"$WORK/idemgate" run --config "$WORK/Caddyfile-$1" --adapter caddyfile >>"$WORK/caddy-$1.log" 2>&1 &
	GPID[$1]=$!
	PIDS+=($!)
	up "${JPORT[$1]}" "$!"
	up "${HPORT[$1]}" "$!"
}
# drop <pid>: stops one process this run started (SIGKILL after 10 s) and
# takes it off the list the exit trap stops.
drop() {
	local p keep=()
	kill "$1" 2>/dev/null || true
	for _ in $(seq 50); do
		[[ $(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) =~ ^(Z|X|)$ ]] && break
		sleep 0.2
	done
	kill -9 "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}
side() {
	local name=$1 r j h a
	r=$(port) j=$(port) h=$(port) a=$(port)
	RPORT[$name]=$r JPORT[$name]=$j HPORT[$name]=$h APORT[$name]=$a
	start_redis "$name"
	# Each site binds 127.0.0.1: a site address alone would listen on every interface.
	cat >"$WORK/Caddyfile-$name" <<EOF
{
	admin 127.0.0.1:$a
	persist_config off
	auto_https off
	storage file_system $WORK/caddy-data-$name
	log {
		level $LOG_LEVEL
	}
}
http://127.0.0.1:$j {
	bind 127.0.0.1
	idempotency {
		platform generic
		scope scalejson
		key {idempotency.json.id}
		store redis 127.0.0.1:$r
	}
	reverse_proxy 127.0.0.1:$BP
}
http://127.0.0.1:$h {
	bind 127.0.0.1
	idempotency {
		platform generic
		scope scaleheader
		key {http.request.header.Idempotency-Key}
		store redis 127.0.0.1:$r
	}
	reverse_proxy 127.0.0.1:$BP
}
EOF
	start_gateway "$name"
	echo "   $name: redis-server :$r, idemgate :$j (JSON) :$h (header), admin :$a"
}
echo "== two sides, started alike; backend :$BP"
for s in $SIDES; do side "$s"; done

rcli() { timeout 60 redis-cli -h 127.0.0.1 -p "${RPORT[$1]}" "${@:2}"; }
dbsize() { rcli "$1" dbsize | tr -d '\r'; }
used_memory() { rcli "$1" info memory | tr -d '\r' | sed -n 's/^used_memory://p'; }
redis_cpu_us() { # CPU time redis-server has used, in µs (finer than /proc's ticks)
	rcli "$1" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.0f\n", s * 1e6 }'
}
HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)
gw_cpu_us() { awk -v hz="$HZ" '{ sub(/^.*\) /, ""); printf "%.0f\n", ($12 + $13) * 1e6 / hz }' "/proc/${GPID[$1]}/stat"; }

# wrk_run <case> <run id> <port> <seconds> <output> [quota per thread]:
# bounded by timeout in case a server stops answering.
wrk_run() {
	WRK_LIB=$ROOT/scripts/wrklib.lua SCALE_CASE=$1 SCALE_RUN=$2 SCALE_BODY=$BODY SCALE_QUOTA=${6:-0} SCALE_DONE=$5.done SCALE_THREADS=$THREADS \
		timeout $(($4 + 60)) wrk -t"$THREADS" -c"$CONNS" -d"$4s" -s "$LUA" "http://127.0.0.1:$3/notify" >"$5" 2>&1 ||
		die "wrk failed on :$3 (see $5; KEEP=1 keeps it)"
	grep -q '^SCALE_RESULT' "$5" || die "no result from wrk on :$3 (see $5; KEEP=1 keeps it)"
}
field() { grep -m1 '^SCALE_RESULT' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

# fill <side> <case> <keys> <port> <label>: sends <keys> first copies in
# chunks of CHUNK, printing progress; adds the 2xx answers to ANSWERED[<label>]
# and the backend's runs to RUNS[<label>]. A chunk with a non-2xx answer or a
# socket error stops the run: its figures would not be what they say.
declare -A ANSWERED RUNS FILL_SECONDS LAST_QUOTA
fill() {
	local s=$1 kind=$2 keys=$3 port=$4 label=$5 left n quota out t0 t1 start req bad c=0 limit
	left=$keys start=$(date +%s%N)
	ANSWERED[$label]=${ANSWERED[$label]:-0} RUNS[$label]=${RUNS[$label]:-0}
	while ((left > 0)); do
		c=$((c + 1))
		n=$((left < CHUNK ? left : CHUNK))
		quota=$(((n + THREADS - 1) / THREADS)) LAST_QUOTA[$label]=$quota
		# At least 100 first copies a second, or the chunk gives up.
		limit=$((n / 100 + 30))
		out="$WORK/fill-$label-$c.txt"
		reset_backend
		t0=$(date +%s%N)
		wrk_run "$kind" "f$label$c-$$" "$port" "$limit" "$out" "$quota"
		t1=$(date +%s%N)
		req=$(field requests "$out") bad=$(($(field non2xx "$out") + $(field errors "$out")))
		((bad == 0)) || die "fill $label chunk $c: $bad non-2xx answers or socket errors (see $out; KEEP=1 keeps it)"
		((req >= quota * THREADS)) || die "fill $label chunk $c: $req answers of $((quota * THREADS)) within ${limit}s (under 100/s?)"
		ANSWERED[$label]=$((ANSWERED[$label] + req)) RUNS[$label]=$((RUNS[$label] + $(backend_total)))
		left=$((keys - ANSWERED[$label]))
		awk -v l="$label" -v a="${ANSWERED[$label]}" -v k="$keys" -v n="$req" -v dt=$((t1 - t0)) \
			-v el=$((t1 - start)) -v m="$(used_memory "$s")" -v d="$(dbsize "$s")" \
			'BEGIN { printf "   %-6s %9d / %d answered   %6.0f/s this chunk   %5.0f s   used_memory %6.0f MB   DBSIZE %d\n",
				l, a, k, n / (dt / 1e9), el / 1e9, m / 1048576, d }'
	done
	FILL_SECONDS[$label]=$(awk -v d=$(($(date +%s%N) - start)) 'BEGIN { printf "%.1f", d / 1e9 }')
}

# state <side> <key>: the key's state, from the gateway's admin endpoint.
state() {
	curl -fsS --max-time 10 "http://127.0.0.1:${APORT[$1]}/idempotency/keys/$2" | sed -n 's/.*"state": *"\([a-z_]*\)".*/\1/p' | head -n1
}

echo "== filling through the gateways: twin $TWIN_FILL, full $FILL answered keys (~1 KiB JSON, journaled; wrk -t$THREADS -c$CONNS, chunks of $CHUNK)"
fill twin json "$TWIN_FILL" "${JPORT[twin]}" twin
fill full json "$FILL" "${JPORT[full]}" full
# A few past the quota are cut off in flight when a thread stops: the
# backend may have run them (their keys answered or released), not counted.
for s in $SIDES; do
	extra=$((RUNS[$s] - ANSWERED[$s]))
	((extra >= 0 && extra <= 2 * CONNS * (ANSWERED[$s] / CHUNK + 1))) ||
		die "$s: the backend ran $((RUNS[$s])) times for ${ANSWERED[$s]} answers: forwarding was wrong"
done
# One key of the last chunk (the last thread's, half way), looked up: answered, not merely sent.
probe="scalejson:evt_ffull$(((FILL + CHUNK - 1) / CHUNK))-$$_$((THREADS - 1))_$(((LAST_QUOTA[full] + 1) / 2))"
st=$(state full "$probe") || true
[[ $st == answered ]] || die "the last chunk's first key $probe reads '${st:-nothing}', not answered"

declare -A MEM KEYS0
for s in $SIDES; do MEM[$s]=$(used_memory "$s") KEYS0[$s]=$(dbsize "$s"); done
MEM_PER_KEY=$(awk -v a="${MEM[full]}" -v b="${MEM[twin]}" -v n=$((ANSWERED[full] - ANSWERED[twin])) 'BEGIN { printf "%.0f", (a - b) / n }')
RATE=$(awk -v n="${ANSWERED[full]}" -v t="${FILL_SECONDS[full]}" 'BEGIN { printf "%.0f", n / t }')
echo "   full: ${ANSWERED[full]} answered in ${FILL_SECONDS[full]} s ($RATE/s), backend ran ${RUNS[full]}; $probe: $st"
printf '   used_memory full %d, twin %d: %s bytes per answered key; DBSIZE %d and %d (%.2f Redis keys per answered key)\n' \
	"${MEM[full]}" "${MEM[twin]}" "$MEM_PER_KEY" "${KEYS0[full]}" "${KEYS0[twin]}" \
	"$(awk -v a="${KEYS0[full]}" -v b="${KEYS0[twin]}" -v n=$((ANSWERED[full] - ANSWERED[twin])) 'BEGIN { print (a - b) / n }')"

# row <side> <case> <round>: warm-up, then the measured run; appends
# "side case round requests rps gateway_us redis_us bad forwarded".
RESULTS=$WORK/results
: >"$RESULTS"
WRONG=0
row() {
	local s=$1 kind=$2 round=$3 wcase=json run warm out g0 g1 r0 r1 req dur bad fwd
	run="m$s$kind$round-$$" warm="w$s$kind$round-$$"
	out="$WORK/wrk-$s-$kind-$round.txt"
	if [[ $kind == replay ]]; then
		# The warm-up sends the row's key first: every measured request is a replay.
		wcase=jreplay warm=$run
		reset_backend
	fi
	(($(seconds "$WARMUP") > 0)) && wrk_run "$wcase" "$warm" "${JPORT[$s]}" "$(seconds "$WARMUP")" "$out.warmup"
	[[ $kind == first ]] && reset_backend
	g0=$(gw_cpu_us "$s") r0=$(redis_cpu_us "$s")
	wrk_run "$wcase" "$run" "${JPORT[$s]}" "$(seconds "$DURATION")" "$out"
	g1=$(gw_cpu_us "$s") r1=$(redis_cpu_us "$s")
	req=$(field requests "$out") dur=$(field duration_us "$out") bad=$(($(field non2xx "$out") + $(field errors "$out")))
	fwd=$(backend_total)
	((req > 0)) || die "no requests answered on $s $kind (see $out)"
	if ((bad > 0)); then
		echo "scale.sh: $s $kind round $round: $bad non-2xx answers or socket errors (see $out)" >&2
		WRONG=1
	fi
	# Each first copy reached the backend once (a few in flight at the end are
	# not counted by wrk); the replay row's key, once, in its warm-up.
	if [[ $kind == first ]] && ! ((fwd >= req && fwd <= req + 2 * CONNS)); then
		echo "scale.sh: $s first round $round: backend ran $fwd times for $req first copies" >&2
		WRONG=1
	elif [[ $kind == replay ]] && ((fwd != 1)); then
		echo "scale.sh: $s replay round $round: backend ran $fwd times for one key" >&2
		WRONG=1
	fi
	awk -v s="$s" -v c="$kind" -v r="$round" -v q="$req" -v d="$dur" -v g=$((g1 - g0)) -v x=$((r1 - r0)) -v b="$bad" -v f="$fwd" \
		'BEGIN { printf "%s %s %d %d %.0f %.1f %.1f %d %d\n", s, c, r, q, q / (d / 1e6), g / q, x / q, b, f }' >>"$RESULTS"
	tail -n1 "$RESULTS" | awk '{ printf "   %-4s %-6s round %d: %7.0f req/s   gateway %6.1f µs   Redis %6.1f µs per request\n", $1, $2, $3, $5, $6, $7 }'
}

echo "== $ROUNDS round(s): first copies and replays on each side, wrk -t$THREADS -c$CONNS -d$DURATION (warm-up $WARMUP)"
echo "   each round: both gateways restarted, the twin a fresh redis-server filled to $TWIN_FILL (its rows add a round's keys, not all rounds')"
TWIN_MAX=0
for round in $(seq "$ROUNDS"); do
	if ((round > 1)); then
		drop "${GPID[twin]}"
		drop "${RPID[twin]}"
		start_redis twin
		start_gateway twin
		fill twin json "$TWIN_FILL" "${JPORT[twin]}" "twin-r$round" >/dev/null
	fi
	drop "${GPID[full]}"
	start_gateway full
	((round == 1)) && { drop "${GPID[twin]}"; start_gateway twin; }
	# The sides take turns to go first: the machine drifts within a round.
	if ((round % 2)); then order="full twin"; else order="twin full"; fi
	for kind in first replay; do
		for s in $order; do row "$s" "$kind" "$round"; done
	done
	d=$(dbsize twin)
	((d > TWIN_MAX)) && TWIN_MAX=$d
done
KEYS1_FULL=$(dbsize full)

# The header-keyed key: HFILL first copies on a fresh twin, its used_memory before and after.
HMEM=
if ((HFILL > 0)); then
	echo "== $HFILL header-keyed first copies (a small form body, Idempotency-Key) on a fresh twin"
	drop "${GPID[twin]}"
	drop "${RPID[twin]}"
	start_redis twin
	start_gateway twin
	m0=$(used_memory twin)
	fill twin header "$HFILL" "${HPORT[twin]}" header
	m1=$(used_memory twin)
	HMEM=$(awk -v a="$m1" -v b="$m0" -v n="${ANSWERED[header]}" 'BEGIN { printf "%.0f", (a - b) / n }')
fi

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { awk -v s="$1" -v c="$2" -v k="$3" '$1 == s && $2 == c { print $k }' "$RESULTS" | median; }
# ratio <case> <column>: full / twin, per round, and their median; prints "median (r1, r2, …)".
ratio() {
	local rs
	rs=$(awk -v c="$1" -v k="$2" '$2 == c && $1 == "full" { f[$3] = $k } $2 == c && $1 == "twin" { t[$3] = $k }
		END { for (r in f) if (t[r] > 0) printf "%d %.3f\n", r, f[r] / t[r] }' "$RESULTS" | sort -n)
	printf '%.2f (rounds %s)' "$(awk '{ print $2 }' <<<"$rs" | median)" "$(awk '{ printf "%s%.2f", (NR > 1 ? ", " : ""), $2 }' <<<"$rs")"
}
# verdict <value> <op> <target>: ok or MISSED; runs in $(…), so a miss is
# kept in a file.
verdict() {
	if awk -v v="$1" -v t="$3" -v op="$2" 'BEGIN { exit !(op == "<=" ? v <= t : v >= t) }'; then echo ok; else echo MISSED; echo "$1" >>"$WORK/missed"; fi
}

echo
echo "== scale: full ${ANSWERED[full]} answered keys (DBSIZE ${KEYS0[full]} → $KEYS1_FULL over the rounds) against a twin of ${ANSWERED[twin]} (DBSIZE ${KEYS0[twin]}, at most $TWIN_MAX at a round's end)"
echo "   medians of $ROUNDS rounds, $DURATION each, wrk -t$THREADS -c$CONNS, loopback, $(redis-server --version | cut -d' ' -f1-3); CPU µs per request"
printf '%-26s %10s %10s   %-30s %s\n' "" full twin "full/twin (per round)" target
for kind in first replay; do
	for k in "5 req/s" "6 gateway µs" "7 Redis µs"; do
		set -- $k
		label="$kind: $2 ${3:-}"
		target=
		case $kind-$2 in
		first-Redis) r=$(ratio "$kind" "$1"); target="≤ $TARGET_REDIS_CPU  $(verdict "${r%% *}" "<=" "$TARGET_REDIS_CPU")" ;;
		first-gateway | replay-gateway | replay-Redis) r=$(ratio "$kind" "$1"); target="≤ $TARGET_FLAT (flat)  $(verdict "${r%% *}" "<=" "$TARGET_FLAT")" ;;
		*) r=$(ratio "$kind" "$1") ;;
		esac
		f='%10.1f' && [[ $2 == req/s ]] && f='%10.0f'
		printf "%-26s $f $f   %-30s %s\n" "$label" "$(col full "$kind" "$1")" "$(col twin "$kind" "$1")" "$r" "$target"
	done
done
printf '%-26s %10s %10s   %-30s %s\n' "memory per answered key" "$MEM_PER_KEY B" "" "(full − twin) / keys" "≤ $TARGET_MEM B  $(verdict "$MEM_PER_KEY" "<=" "$TARGET_MEM")"
[[ -n $HMEM ]] && printf '%-26s %10s %10s   %-30s\n' "  a header-keyed key" "" "$HMEM B" "(a fresh twin, $HFILL keys)"
printf '%-26s %10s %10s   %s\n' "Redis keys per answered" \
	"$(awk -v a="${KEYS0[full]}" -v b="${KEYS0[twin]}" -v n=$((ANSWERED[full] - ANSWERED[twin])) 'BEGIN { printf "%.2f", (a - b) / n }')" "" "(DBSIZE, full − twin, after the fill)"
printf '%-26s %10s %10s   %s\n' "fill rate" "$RATE/s" "" "(${ANSWERED[full]} keys in ${FILL_SECONDS[full]} s through the gateway)"
echo "(ratios are the figures to read: the machine is shared, and both sides ran in the same rounds)"

if ((WRONG)); then
	echo "forwarding or answers were wrong: see above"
	exit 1
fi
if [[ -s $WORK/missed && $STRICT == 1 ]]; then
	echo "STRICT=1: a target was missed"
	exit 1
fi
exit 0
