#!/usr/bin/env bash
# Load comparison, side by side in one run on loopback: plain reverse_proxy, a
# Caddy respond (the floor of any answer from the gateway itself), the floor
# under a first copy (internal/loadfloor: the body read and two empty script
# round trips through go-redis before and after the backend), the same floor
# with Redis kept as busy as a first copy keeps it (busyfloor), and
# idemgate with a real Redis, for unique keys (first-copy path), one
# repeated key (replay path), and the contract's ~1 KiB JSON notification
# keyed on its id (json, against plain on the same bodies: jplain). Reports requests/s, p50, p99 and the contract's ratios,
# checks what reached the backend, and counts Redis round trips and CPU time
# per request (the steadiest figure when the machine is shared).
#
# Usage: scripts/load.sh            (from anywhere inside the repository)
#
# Environment:
#   DURATION=10s   measured time per case       WARMUP=2s   warm-up per case (0 skips)
#   CONNS=32       wrk connections              THREADS=2   wrk threads
#   ROUNDS=1       rounds of the three cases; with more, each figure is the median
#   FLOOR_WORK=32  commands each busyfloor script runs (EXISTS): chosen so Redis
#                  spends about what a first copy costs it (compare the Redis CPU
#                  line: 27 µs against a first copy's 22 on 2026-12-05; it was 112
#                  while a first copy cost Redis ~60); on two shared cores Redis's
#                  CPU is taken from the gateway's
#   LAT_DURATION=5s  then plain and unique again over ONE connection, where p99
#                  is the path's own cost rather than queueing (0 skips)
#   STRICT=1       exit 1 when a target is missed (otherwise the targets only report)
#   KEEP=1         keep the work directory (binaries, Caddyfile, logs, wrk output)
#   LOG_LEVEL=WARN Caddy's log level during the run
#   PROFILE=1      also take a CPU profile of idemgate during each measured run
#                  (implies KEEP=1; read with: go tool pprof -top <work>/idemgate <work>/unique-1.pprof)
#   BASE=<git rev> also build idemgate at that revision and measure its unique and
#                  replay cases in the same rounds (unique@base, replay@base):
#                  before/after figures that the machine's drift between runs
#                  does not blur. They are compared with unique@tree and
#                  replay@tree: this tree in a process of its own, started as
#                  the base's is, the two pairs taking turns to go first: the
#                  process that also serves plain and respond is not started
#                  like the base. With the same code on both sides (BASE=HEAD)
#                  the shared process read +30 µs per first copy in one run,
#                  the twin +11 in the next: differences of that size are noise.
#
# Needs: go, wrk, redis-server, curl (redis-cli for the round trips). Everything listens on 127.0.0.1 only, on
# free ports, and stops on exit. Exit status: 0 ok; 1 forwarding was wrong
# (unique must reach the backend once per request, replay exactly once) or,
# with STRICT=1, a target was missed; 2 setup failure.
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-1}
LAT_DURATION=${LAT_DURATION:-5s}
FLOOR_WORK=${FLOOR_WORK:-32}
STRICT=${STRICT:-0}
KEEP=${KEEP:-0}
LOG_LEVEL=${LOG_LEVEL:-WARN}
PROFILE=${PROFILE:-0}
BASE=${BASE:-}
[[ $PROFILE == 1 ]] && KEEP=1

# The performance targets (docs/performance.md).
TARGET_UNIQUE=0.75 # unique-key req/s ≥ 0.75 × plain (the limit here with two round trips is ~0.78)
TARGET_REPLAY=1.5  # replay req/s ≥ 1.5 × plain
TARGET_P99_MS=1    # added p99 on the first-copy path ≤ 1 ms
TARGET_UNIQUE_CPU=60 # first copy: gateway CPU µs per request ≤ plain's + 60
TARGET_JSON_CPU=60   # a ~1 KiB JSON first copy, journaled: ≤ plain's on the same bodies + 60
TARGET_JSON_REDIS=30 # and Redis CPU µs per such first copy ≤ 30
TARGET_REPLAY_CPU=45 # replay (one round trip to Redis, no in-process cache): gateway CPU µs per request ≤ respond's + 45

die() { echo "load.sh: $*" >&2; exit 2; }

for tool in go wrk redis-server curl; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
[[ $FLOOR_WORK =~ ^[1-9][0-9]*$ ]] || die "FLOOR_WORK must be a positive integer"

# seconds converts a wrk duration (10, 10s, 2m, 1h) to whole seconds.
seconds() {
	local d=$1
	case $d in
	*h) echo $((${d%h} * 3600)) ;; *m) echo $((${d%m} * 60)) ;;
	*s) echo "${d%s}" ;; *) echo "$d" ;;
	esac
}
[[ $(seconds "$DURATION") =~ ^[1-9][0-9]*$ ]] || die "DURATION must look like 10s, 2m or 1h"
[[ $(seconds "$WARMUP") =~ ^[0-9]+$ ]] || die "WARMUP must look like 2s, or 0"
[[ $(seconds "$LAT_DURATION") =~ ^[0-9]+$ ]] || die "LAT_DURATION must look like 5s, or 0"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LUA="$ROOT/scripts/load.lua"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-load.XXXXXX")
PIDS=()

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [[ $KEEP == 1 ]]; then
		echo "work directory kept: $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port prints a loopback TCP port no socket uses (in any state) and this
# run has not handed out yet. Ports come from below the kernel's ephemeral
# range, so outgoing connections (wrk's, the proxy's) never hold one.
TAKEN=" "
EPHEMERAL_LOW=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
((EPHEMERAL_LOW > 11000)) || EPHEMERAL_LOW=32768
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((10000 + RANDOM % (EPHEMERAL_LOW - 10000)))
		[[ $TAKEN == *" $p "* ]] && continue
		if command -v ss >/dev/null; then
			[[ -z $(ss -Htan "( sport = :$p )" 2>/dev/null) ]] || continue
		elif (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			continue
		fi
		TAKEN+="$p "
		echo "$p"
		return
	done
	die "no free port found"
}

# wait_up <what> <pid> <log> <cmd...> waits until cmd succeeds, up to about
# 30 s, and gives up early, with the log's tail, if the process has died.
wait_up() {
	local what=$1 pid=$2 log=$3
	shift 3
	for _ in $(seq 150); do
		"$@" >/dev/null 2>&1 && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	echo "load.sh: $what did not come up; last lines of $log:" >&2
	tail -n 5 "$log" >&2
	exit 2
}

echo "== building (once) into $WORK"
# -tags loadfloor: the binary also serves the floor case (internal/loadfloor).
(cd "$ROOT" && go build -tags loadfloor -o "$WORK/idemgate" ./cmd/idemgate && go build -o "$WORK/backend" ./examples/legacy-backend) ||
	die "build failed"
MAIN_CASES="plain respond floor busyfloor unique replay jplain json"
CASES=$MAIN_CASES
TREE_PAIR="unique@tree replay@tree" BASE_PAIR="unique@base replay@base"
if [[ -n $BASE ]]; then
	echo "== building idemgate at $BASE (the base)"
	mkdir "$WORK/base-src"
	git -C "$ROOT" archive "$BASE" | tar -x -C "$WORK/base-src" || die "cannot read revision $BASE"
	(cd "$WORK/base-src" && go build -o "$WORK/idemgate-base" ./cmd/idemgate) || die "building the base failed"
	CASES+=" $TREE_PAIR $BASE_PAIR"
fi
# Captured first: grep -q stopping early would fail the pipeline under pipefail.
modules=$("$WORK/idemgate" list-modules 2>/dev/null) || die "idemgate list-modules failed"
grep -qx 'http.handlers.idempotency' <<<"$modules" ||
	die "cmd/idemgate does not include the idempotency module (import github.com/idemgate/idemgate)"

REDIS_PORT=$(free_port)
BACKEND_PORT=$(free_port)
PLAIN_PORT=$(free_port)
RESPOND_PORT=$(free_port)
FLOOR_PORT=$(free_port)
BUSY_FLOOR_PORT=$(free_port)
UNIQUE_PORT=$(free_port)
REPLAY_PORT=$(free_port)
JSON_PORT=$(free_port)
BASE_UNIQUE_PORT=$(free_port)
BASE_REPLAY_PORT=$(free_port)
TREE_UNIQUE_PORT=$(free_port)
TREE_REPLAY_PORT=$(free_port)
ADMIN="admin off"
if [[ $PROFILE == 1 ]]; then
	ADMIN_PORT=$(free_port)
	ADMIN="admin 127.0.0.1:$ADMIN_PORT" # serves /debug/pprof/
fi
BACKEND="http://127.0.0.1:$BACKEND_PORT"

echo "== redis-server on 127.0.0.1:$REDIS_PORT, backend on :$BACKEND_PORT"
# No persistence: the run measures the gateway, not Redis's disk.
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
	--dir "$WORK" --daemonize no >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
REDIS_PID=$!
if command -v redis-cli >/dev/null; then
	wait_up redis-server "$!" "$WORK/redis.log" redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping
else
	wait_up redis-server "$!" "$WORK/redis.log" bash -c "exec 3<>/dev/tcp/127.0.0.1/$REDIS_PORT"
fi

# Fast backend: no delay, no per-request log line.
"$WORK/backend" -listen "127.0.0.1:$BACKEND_PORT" -quiet >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
BACKEND_PID=$!
wait_up backend "$!" "$WORK/backend.log" curl -fsS --max-time 1 "$BACKEND/stats"

# gateway_sites <unique port> <replay port>: the two idemgate sites.
gateway_sites() {
	cat <<EOF
# (b) a fresh key per request: claim + complete on Redis, then the backend
http://127.0.0.1:$1 {
	bind 127.0.0.1
	idempotency {
		platform generic
		key load:{http.request.header.X-Order}
		store redis 127.0.0.1:$REDIS_PORT
		in_flight wait 5s
	}
	reverse_proxy 127.0.0.1:$BACKEND_PORT
}

# (c) one key for every request: the replay path, never the backend
http://127.0.0.1:$2 {
	bind 127.0.0.1
	idempotency {
		platform generic
		key replay:{http.request.header.X-Order}
		store redis 127.0.0.1:$REDIS_PORT
		in_flight wait 5s
	}
	reverse_proxy 127.0.0.1:$BACKEND_PORT
}
EOF
}

# Each site binds 127.0.0.1: a site address alone would listen on every interface.
cat >"$WORK/Caddyfile" <<EOF
{
	$ADMIN
	persist_config off
	auto_https off
	storage file_system $WORK/caddy-data
	log {
		level $LOG_LEVEL
	}
}

# (a) plain reverse_proxy: the baseline
http://127.0.0.1:$PLAIN_PORT {
	bind 127.0.0.1
	reverse_proxy 127.0.0.1:$BACKEND_PORT
}

# (a') Caddy answering by itself: what the replay path is measured against
http://127.0.0.1:$RESPOND_PORT {
	bind 127.0.0.1
	respond "success" 200
}

# (a'') the floor under a first copy: the body read, two round trips of an
# empty script through go-redis as the store sends its scripts, then the
# backend; no key, no record (internal/loadfloor)
http://127.0.0.1:$FLOOR_PORT {
	bind 127.0.0.1
	idempotency_floor 127.0.0.1:$REDIS_PORT
	reverse_proxy 127.0.0.1:$BACKEND_PORT
}

# (a''') the same floor, each script running $FLOOR_WORK commands: Redis as
# busy as under first copies, the gateway's side still the floor's
http://127.0.0.1:$BUSY_FLOOR_PORT {
	bind 127.0.0.1
	idempotency_floor 127.0.0.1:$REDIS_PORT work $FLOOR_WORK
	reverse_proxy 127.0.0.1:$BACKEND_PORT
}

$(gateway_sites "$UNIQUE_PORT" "$REPLAY_PORT")

# (d) the contract's ~1 KiB JSON notification keyed on its top-level id,
# journaled as shipped: a fresh id per request (plain, on the same bodies,
# is the jplain case)
http://127.0.0.1:$JSON_PORT {
	bind 127.0.0.1
	idempotency {
		platform generic
		key {idempotency.json.id}
		store redis 127.0.0.1:$REDIS_PORT
		in_flight wait 5s
	}
	reverse_proxy 127.0.0.1:$BACKEND_PORT
}
EOF

echo "== idemgate on :$PLAIN_PORT (plain, jplain), :$RESPOND_PORT (respond), :$FLOOR_PORT (floor), :$BUSY_FLOOR_PORT (busyfloor), :$UNIQUE_PORT (unique keys), :$REPLAY_PORT (replay), :$JSON_PORT (json)"
XDG_DATA_HOME="$WORK/xdg-data" XDG_CONFIG_HOME="$WORK/xdg-config" \
	"$WORK/idemgate" run --config "$WORK/Caddyfile" --adapter caddyfile >"$WORK/caddy.log" 2>&1 &
PIDS+=($!)
CADDY_PID=$!
for port in "$PLAIN_PORT" "$RESPOND_PORT" "$FLOOR_PORT" "$UNIQUE_PORT" "$REPLAY_PORT" "$JSON_PORT"; do
	# Any HTTP answer will do: the gateway sites refuse a request without a key.
	wait_up "idemgate on :$port" "${PIDS[-1]}" "$WORK/caddy.log" curl -sS -o /dev/null --max-time 1 "http://127.0.0.1:$port/"
done
BASE_PID=$CADDY_PID TREE_PID=$CADDY_PID
# start_twin <name> <binary> <unique port> <replay port>: an idemgate serving
# the two gateway sites alone; sets TWIN_PID. The base and this tree's twin
# start alike, so their figures compare.
start_twin() {
	{
		printf '{\n\tadmin off\n\tpersist_config off\n\tauto_https off\n\tstorage file_system %s\n\tlog {\n\t\tlevel %s\n\t}\n}\n\n' \
			"$WORK/caddy-data-$1" "$LOG_LEVEL"
		gateway_sites "$3" "$4"
	} >"$WORK/Caddyfile-$1"
	XDG_DATA_HOME="$WORK/xdg-data-$1" XDG_CONFIG_HOME="$WORK/xdg-config-$1" \
		"$2" run --config "$WORK/Caddyfile-$1" --adapter caddyfile >"$WORK/caddy-$1.log" 2>&1 &
	PIDS+=($!)
	TWIN_PID=$!
	for port in "$3" "$4"; do
		wait_up "$1 idemgate on :$port" "$TWIN_PID" "$WORK/caddy-$1.log" curl -sS -o /dev/null --max-time 1 "http://127.0.0.1:$port/"
	done
}
if [[ -n $BASE ]]; then
	echo "== base idemgate ($BASE) on :$BASE_UNIQUE_PORT (unique keys), :$BASE_REPLAY_PORT (replay)"
	start_twin base "$WORK/idemgate-base" "$BASE_UNIQUE_PORT" "$BASE_REPLAY_PORT"
	BASE_PID=$TWIN_PID
	echo "== this tree's idemgate again, started as the base is, on :$TREE_UNIQUE_PORT (unique keys), :$TREE_REPLAY_PORT (replay)"
	start_twin tree "$WORK/idemgate" "$TREE_UNIQUE_PORT" "$TREE_REPLAY_PORT"
	TREE_PID=$TWIN_PID
fi

# redis_calls prints "<script calls> <all commands>" Redis has run so far, or
# nothing without redis-cli. The contract: a replay costs at most one round
# trip, a first copy two; the store's round trips are script calls (EVALSHA, or EVAL
# on a cold cache) and, on Redis 7, a first copy's claim (a SET and an HGET, which
# commandstats cannot tell from those inside scripts).
redis_calls() {
	command -v redis-cli >/dev/null || return 0
	redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info commandstats 2>/dev/null | awk -F'[:=,]' '
		/^cmdstat_(evalsha|eval|evalsha_ro|eval_ro|fcall):/ { scripts += $3 }
		/^cmdstat_/ && !/^cmdstat_info:/ { all += $3 }
		END { print scripts + 0, all + 0 }'
}

# cpu_ticks [<gateway pid>] prints the CPU time (user + system, in clock ticks)
# that idemgate, redis-server and the backend have used so far. Per request,
# it is a figure that other load on a shared machine moves much less than
# requests/s.
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
cpu_ticks() {
	local pid
	for pid in "${1:-$CADDY_PID}" "$REDIS_PID" "$BACKEND_PID"; do
		awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null || echo 0
	done | tr '\n' ' '
}

# gw_syscalls <gateway pid> prints the read and write system calls the
# gateway process has made so far (/proc/<pid>/io): per request, how well
# its Redis client batches (a round trip shared by more requests costs each
# fewer), beside the CPU.
gw_syscalls() { awk '/^sysc[rw]:/ { n += $2 } END { print n + 0 }' "/proc/$1/io" 2>/dev/null || echo 0; }

reset_backend() { curl -fsS --max-time 5 -X POST "$BACKEND/reset" >/dev/null; }
backend_total() { curl -fsS --max-time 5 "$BACKEND/stats" | sed -n 's/.*"total":\([0-9]*\).*/\1/p'; }

# run_wrk <mode> <run id> <duration> <port> <output file>: wrk with $W_THREADS
# threads and $W_CONNS connections, bounded by timeout in case a server stops
# answering.
W_THREADS=$THREADS W_CONNS=$CONNS
run_wrk() {
	WRK_LIB=$ROOT/scripts/wrklib.lua LOAD_BODY=$ROOT/keying/testdata/stripe_event.json \
		LOAD_MODE=$1 LOAD_RUN=$2 timeout $(($(seconds "$3") + 30)) \
		wrk --latency -t "$W_THREADS" -c "$W_CONNS" -d "$3" -s "$LUA" "http://127.0.0.1:$4/notify" >"$5" 2>&1 ||
		die "wrk failed on :$4 (see $5; rerun with KEEP=1)"
}

RESULTS="$WORK/results"
: >"$RESULTS"
run_id() { echo "$1-r$2-$$-$(date +%s%N)"; }

# measure <case> <round> [<duration>]: warm-up, then the measured run; appends
# a result line: case round rps p50_ms p99_ms requests forwarded non2xx errors
# redis_scripts redis_commands (-1: not counted) cpu_ticks_idemgate _redis _backend
# idemgate_syscalls
measure() {
	local name=$1 round=$2 duration=${3:-$DURATION} port mode run out gw=$CADDY_PID
	case $name in
	plain | plain-1c) port=$PLAIN_PORT mode=unique ;;
	respond) port=$RESPOND_PORT mode=unique ;;
	floor) port=$FLOOR_PORT mode=unique ;;
	busyfloor) port=$BUSY_FLOOR_PORT mode=unique ;;
	unique | unique-1c) port=$UNIQUE_PORT mode=unique ;;
	replay) port=$REPLAY_PORT mode=fixed ;;
	jplain) port=$PLAIN_PORT mode=json ;;
	json) port=$JSON_PORT mode=json ;;
	unique@tree) port=$TREE_UNIQUE_PORT mode=unique gw=$TREE_PID ;;
	replay@tree) port=$TREE_REPLAY_PORT mode=fixed gw=$TREE_PID ;;
	unique@base) port=$BASE_UNIQUE_PORT mode=unique gw=$BASE_PID ;;
	replay@base) port=$BASE_REPLAY_PORT mode=fixed gw=$BASE_PID ;;
	esac
	run=$(run_id "$name" "$round")
	out="$WORK/wrk-$name-$round.txt"

	if [[ $name == replay* ]]; then
		# The replay key is answered once, before anything is measured: count
		# from here, through warm-up and run, and the backend must run once.
		reset_backend
		curl -fsS --max-time 10 -o /dev/null \
			-H "X-Order: $run-fixed" -H 'Content-Type: application/x-www-form-urlencoded' \
			--data 'out_trade_no=load&trade_status=TRADE_SUCCESS&total_amount=9.90' \
			"http://127.0.0.1:$port/notify" || die "priming the replay key failed"
	fi
	if [[ $(seconds "$WARMUP") -gt 0 ]]; then
		# Unique keys: a different run id, so the run's keys are all new too.
		local warm=$run
		[[ $mode != fixed ]] && warm=$(run_id "warm-$name" "$round")
		run_wrk "$mode" "$warm" "$WARMUP" "$port" "$out.warmup"
	fi
	[[ $name != replay* ]] && reset_backend
	local prof= calls_before cpu_before sys_before
	calls_before=($(redis_calls))
	cpu_before=($(cpu_ticks "$gw"))
	sys_before=$(gw_syscalls "$gw")
	if [[ $PROFILE == 1 && $gw == "$CADDY_PID" ]]; then
		curl -fsS --max-time $(($(seconds "$duration") + 30)) -o "$WORK/$name-$round.pprof" \
			"http://127.0.0.1:$ADMIN_PORT/debug/pprof/profile?seconds=$(seconds "$duration")" &
		prof=$!
	fi
	run_wrk "$mode" "$run" "$duration" "$port" "$out"
	if [[ -n $prof ]]; then
		wait "$prof" || echo "   (CPU profile of $name failed)"
	fi

	local result forwarded scripts=-1 commands=-1 calls_after cpu_after sys_after
	cpu_after=($(cpu_ticks "$gw"))
	sys_after=$(gw_syscalls "$gw")
	result=$(grep '^LOAD_RESULT' "$out") || die "no result from wrk on :$port (see $out)"
	forwarded=$(backend_total)
	if ((${#calls_before[@]} == 2)); then
		calls_after=($(redis_calls))
		scripts=$((calls_after[0] - calls_before[0])) commands=$((calls_after[1] - calls_before[1]))
	fi
	local requests duration_us p50_us p99_us non2xx errors
	eval "$(echo "${result#LOAD_RESULT }" | tr ' ' '\n' | sed 's/^/local /')"
	awk -v n="$name" -v r="$round" -v q="$requests" -v d="$duration_us" -v p50="$p50_us" -v p99="$p99_us" \
		-v f="$forwarded" -v s="$non2xx" -v e="$errors" -v sc="$scripts" -v c="$commands" \
		-v cg=$((cpu_after[0] - cpu_before[0])) -v cr=$((cpu_after[1] - cpu_before[1])) -v cb=$((cpu_after[2] - cpu_before[2])) \
		-v sy=$((sys_after - sys_before)) \
		'BEGIN { printf "%s %d %.1f %.3f %.3f %d %d %d %d %d %d %d %d %d %d\n", n, r, q / (d / 1e6), p50 / 1000, p99 / 1000, q, f, s, e, sc, c, cg, cr, cb, sy }' >>"$RESULTS"
	tail -n1 "$RESULTS" | awk '{ printf "   %-11s round %d: %9.0f req/s  p50 %.3f ms  p99 %.3f ms  (%d requests, backend ran %d)\n", $1, $2, $3, $4, $5, $6, $7 }'
}

echo "== $ROUNDS round(s) × ${CASES// /, }: wrk -t$THREADS -c$CONNS -d$DURATION (warm-up $WARMUP)"
for round in $(seq "$ROUNDS"); do
	order=$CASES
	if ((round % 2 == 0)) && [[ -n $BASE ]]; then
		# The base's pair first every other round: neither side always
		# follows the same case.
		order="$MAIN_CASES $BASE_PAIR $TREE_PAIR"
	fi
	for name in $order; do
		measure "$name" "$round"
	done
done
if (($(seconds "$LAT_DURATION") > 0)); then
	echo "== one connection: plain, unique: wrk -t1 -c1 -d$LAT_DURATION"
	W_THREADS=1 W_CONNS=1
	measure plain-1c 1 "$LAT_DURATION"
	measure unique-1c 1 "$LAT_DURATION"
fi

# median_of: the median of the numbers on stdin, one a line.
median_of() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# median <case> <column>: the median over rounds of one column of $RESULTS.
median() { awk -v n="$1" -v c="$2" '$1 == n { print $c }' "$RESULTS" | median_of; }
# sum <case> <column>: the total over rounds.
sum() { awk -v n="$1" -v c="$2" '$1 == n { s += $c } END { print s + 0 }' "$RESULTS"; }

# var <case>: the case's name as a shell variable prefix (unique@base → unique_base).
var() { echo "${1//@/_}"; }
for name in $CASES; do
	v=$(var "$name")
	declare "${v}_rps=$(median "$name" 3)" "${v}_p50=$(median "$name" 4)" "${v}_p99=$(median "$name" 5)"
	declare "${v}_req=$(sum "$name" 6)" "${v}_fwd=$(sum "$name" 7)" "${v}_bad=$(( $(sum "$name" 8) + $(sum "$name" 9) ))"
done

echo
label="median of $ROUNDS rounds"
[[ $ROUNDS == 1 ]] && label="one round"
printf '%-11s %11s %10s %10s %10s %10s %14s\n' case req/s p50 p99 requests forwarded "non-2xx/errors"
for name in $CASES; do
	v=$(var "$name")
	rps=${v}_rps p50=${v}_p50 p99=${v}_p99 req=${v}_req fwd=${v}_fwd bad=${v}_bad
	printf '%-11s %11.0f %8.3fms %8.3fms %10d %10d %14d\n' "$name" "${!rps}" "${!p50}" "${!p99}" "${!req}" "${!fwd}" "${!bad}"
done
echo "($label; $THREADS threads, $CONNS connections, $DURATION each, loopback, redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'))"
echo

verdict() { awk -v ok="$1" 'BEGIN { print (ok ? "ok" : "MISSED") }'; }
missed=0
check() { # check <label> <value> <op> <target> <unit/format>
	local ok
	ok=$(awk -v v="$2" -v t="$4" -v op="$3" 'BEGIN { print (op == ">=" ? v >= t : v <= t) }')
	printf '%-34s %8s   (target %s %s)  %s\n' "$1" "$5" "$3" "$4" "$(verdict "$ok")"
	[[ $ok == 1 ]] || missed=1
}
r_unique=$(awk -v a="$unique_rps" -v b="$plain_rps" 'BEGIN { printf "%.2f", a / b }')
r_replay=$(awk -v a="$replay_rps" -v b="$plain_rps" 'BEGIN { printf "%.2f", a / b }')
added_p99=$(awk -v a="$unique_p99" -v b="$plain_p99" 'BEGIN { printf "%.3f", a - b }')
check "unique / plain throughput" "$r_unique" ">=" "$TARGET_UNIQUE" "${r_unique}×"
check "replay / plain throughput" "$r_replay" ">=" "$TARGET_REPLAY" "${r_replay}×"
if (($(seconds "$LAT_DURATION") > 0)); then
	# Under saturation p99 is mostly queueing, which the throughput ratio
	# already shows; over one connection it is what the gateway adds per request.
	printf '%-34s %8s   (queueing included: plain %.3f, unique %.3f ms)\n' \
		"added p99 at $CONNS connections" "${added_p99} ms" "$plain_p99" "$unique_p99"
	lat_p99=$(awk -v a="$(median unique-1c 5)" -v b="$(median plain-1c 5)" 'BEGIN { printf "%.3f", a - b }')
	check "added p99 over one connection" "$lat_p99" "<=" "$TARGET_P99_MS" "${lat_p99} ms"
	printf '%-34s p50/p99: plain %.3f/%.3f ms, unique %.3f/%.3f ms\n' "  one connection" \
		"$(median plain-1c 4)" "$(median plain-1c 5)" "$(median unique-1c 4)" "$(median unique-1c 5)"
else
	check "added p99 (unique − plain)" "$added_p99" "<=" "$TARGET_P99_MS" "${added_p99} ms"
fi

# Forwarding: every unique request reached the backend exactly once (wrk does
# not count the requests still in flight when it stops, hence the slack), and
# the replay key reached it exactly once per round.
wrong=0
slack=$((2 * CONNS * ROUNDS))
for f in unique floor busyfloor json; do
	fwd=${f}_fwd req=${f}_req bad=${f}_bad
	delta=$((${!fwd} - ${!req}))
	if ((delta >= 0 && delta <= slack && ${!bad} == 0)); then fwd_ok=ok; else fwd_ok=WRONG wrong=1; fi
	printf '%-34s %s of %s wrk requests reached the backend (%+d in flight at the end)  %s\n' \
		"$f: forwarded" "${!fwd}" "${!req}" "$delta" "$fwd_ok"
done
if ((replay_fwd == ROUNDS && replay_bad == 0)); then fwd_ok=ok; else fwd_ok=WRONG wrong=1; fi
printf '%-34s backend ran %s time(s) for %s requests on one key (expect %s)  %s\n' \
	"replay: forwarded" "$replay_fwd" "$replay_req" "$ROUNDS" "$fwd_ok"
# CPU per request: µs of CPU time per completed request, over all rounds.
us() { awk -v t="$(sum "$1" "$2")" -v q="$3" -v hz="$CLK_TCK" 'BEGIN { printf "%.0f", t * 1e6 / hz / q }'; }
printf '%-34s %s\n' "CPU µs per request" "idemgate / redis-server / backend   (idemgate's read and write system calls per request)"
for name in $CASES; do
	req=$(var "$name")_req
	printf '%-34s %s / %s / %s   (%s)\n' "  $name" "$(us "$name" 12 "${!req}")" "$(us "$name" 13 "${!req}")" "$(us "$name" 14 "${!req}")" \
		"$(awk -v s="$(sum "$name" 15)" -v q="${!req}" 'BEGIN { printf "%.1f", s / q }')"
done
# The contract's CPU targets: the figure that holds on a shared machine.
cpu_plain=$(us plain 12 "$plain_req") cpu_respond=$(us respond 12 "$respond_req")
cpu_unique=$(us unique 12 "$unique_req") cpu_replay=$(us replay 12 "$replay_req")
check "first copy CPU − plain's" "$((cpu_unique - cpu_plain))" "<=" "$TARGET_UNIQUE_CPU" "$((cpu_unique - cpu_plain)) µs"
# paired <case> <against>: the case's gateway CPU per request less the
# other's, round by round (the two ran a few seconds apart, so the drift
# between rounds cancels), then their median: how far apart the rounds
# are is the figure's own noise.
paired() {
	local d
	d=$(awk -v a="$1" -v b="$2" -v hz="$CLK_TCK" '
		$1 == a { ca[$2] = $12 * 1e6 / hz / $6 }
		$1 == b { cb[$2] = $12 * 1e6 / hz / $6 }
		END { for (r in ca) if (r in cb) print ca[r] - cb[r] }' "$RESULTS" | sort -g)
	printf '%+.0f µs, the rounds %s' "$(median_of <<<"$d")" "$(awk '{ printf "%s%+.0f", (NR > 1 ? ", " : ""), $1 }' <<<"$d")"
}
if ((ROUNDS > 1)); then
	printf '%-34s %s\n' "  paired by round" "$(paired unique plain)"
fi
check "replay CPU − respond's" "$((cpu_replay - cpu_respond))" "<=" "$TARGET_REPLAY_CPU" "$((cpu_replay - cpu_respond)) µs"
# The contract's first figure: the ~1 KiB JSON notification, journaled,
# against plain on the same bodies.
cpu_jplain=$(us jplain 12 "$jplain_req") cpu_json=$(us json 12 "$json_req")
check "JSON first copy CPU − plain's" "$((cpu_json - cpu_jplain))" "<=" "$TARGET_JSON_CPU" "$((cpu_json - cpu_jplain)) µs"
if ((ROUNDS > 1)); then
	printf '%-34s %s\n' "  paired by round" "$(paired json jplain)"
fi
redis_json=$(us json 13 "$json_req")
check "JSON first copy Redis CPU" "$redis_json" "<=" "$TARGET_JSON_REDIS" "$redis_json µs"
# What stands under the first copy's target: the floor (the body read and
# two empty round trips through go-redis, nothing kept) over plain is what
# any Go gate with a claim before the backend and an answer after pays
# here; the first copy over the floor is idemgate's own work.
cpu_floor=$(us floor 12 "$floor_req")
printf '%-34s %d µs over plain; first copy %d µs over the floor (the gateway'"'"'s own work)\n' \
	"floor (two empty round trips)" "$((cpu_floor - cpu_plain))" "$((cpu_unique - cpu_floor))"
# The busy floor: what Redis's own CPU, taken from the same two cores,
# adds to the gateway's (the first copy over it is the gateway's own work
# with that share set aside).
cpu_busy=$(us busyfloor 12 "$busyfloor_req")
printf '%-34s %d µs over plain, %+d over the floor; first copy %d µs over it   (Redis %s µs per request, the first copy %s)\n' \
	"busy floor ($FLOOR_WORK commands a script)" "$((cpu_busy - cpu_plain))" "$((cpu_busy - cpu_floor))" "$((cpu_unique - cpu_busy))" \
	"$(us busyfloor 13 "$busyfloor_req")" "$(us unique 13 "$unique_req")"
if [[ -n $BASE ]]; then
	b_unique=$(us unique@base 12 "$unique_base_req") b_replay=$(us replay@base 12 "$replay_base_req")
	t_unique=$(us unique@tree 12 "$unique_tree_req") t_replay=$(us replay@tree 12 "$replay_tree_req")
	printf '%-34s first copy %+d µs (%d → %d), replay %+d µs (%d → %d) per request   (@base → @tree)\n' "this tree against $BASE" \
		"$((t_unique - b_unique))" "$b_unique" "$t_unique" "$((t_replay - b_replay))" "$b_replay" "$t_replay"
	for side in base tree; do
		fwd=replay_${side}_fwd u_bad=unique_${side}_bad r_bad=replay_${side}_bad
		if ((${!fwd} != ROUNDS || ${!u_bad} + ${!r_bad} > 0)); then
			echo "@$side: forwarding or answers were wrong (see caddy-$side.log)"
			wrong=1
		fi
	done
fi
if command -v redis-cli >/dev/null; then
	# wrk does not count the requests in flight when it stops: a little above
	# the exact figure is expected.
	per() { awk -v c="$(sum "$1" "$2")" -v q="$3" 'BEGIN { printf "%.2f", c / q }'; }
	# On Redis 7 a first copy's claim is no script (a SET and an HGET in
	# one round trip), so its round trips are one more than its scripts.
	printf '%-34s unique %s, replay %s   (a first copy: one more round trip, its claim, no script on Redis 7; contract: at most 2 and 1 round trips; all commands, inside scripts too: %s, %s)\n' \
		"Redis scripts per request" "$(per unique 10 "$unique_req")" "$(per replay 10 "$replay_req")" \
		"$(per unique 11 "$unique_req")" "$(per replay 11 "$replay_req")"
	printf '%-34s unique %s, replay %s, json %s, floor %s   (what the store costs Redis, per request; the floor: two empty scripts)\n' \
		"Redis CPU µs per request" "$(us unique 13 "$unique_req")" "$(us replay 13 "$replay_req")" "$(us json 13 "$json_req")" "$(us floor 13 "$floor_req")"
fi
# The floor under any gate's Redis CPU on this machine, measured on the
# same redis-server with as many connections: one round trip of PING (no
# work at all) and of an empty EVALSHA (a script's own overhead). A first
# copy needs two round trips (its claim goes before the backend runs, its
# answer after), so twice the floor is spent before a single write.
if command -v redis-benchmark >/dev/null && command -v redis-cli >/dev/null; then
	floor() { # floor <label> <command…>: Redis CPU µs per call under $CONNS connections
		local label=$1 n=100000 t0 t1
		shift
		t0=$(cpu_ticks | awk '{ print $2 }')
		timeout 60 redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$CONNS" -n "$n" -q "$@" >/dev/null 2>&1 || return 0
		t1=$(cpu_ticks | awk '{ print $2 }')
		printf '%s %.1f' "$label" "$(awk -v t="$((t1 - t0))" -v n="$n" -v hz="$CLK_TCK" 'BEGIN { print t * 1e6 / hz / n }')"
	}
	empty=$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" script load 'return 1' 2>/dev/null || true)
	printf '%-34s %s, %s µs per round trip   (redis-benchmark, %d connections)\n' "Redis CPU floor" \
		"$(floor PING ping)" "$(floor 'empty EVALSHA' evalsha "$empty" 0)" "$CONNS"
fi
if ((plain_bad + unique_bad + replay_bad > 0)); then
	echo "note: some answers were not 2xx or failed; see the wrk output (KEEP=1) and caddy.log"
fi
logs=$(wc -l <"$WORK/caddy.log")
echo "caddy log: $logs line(s) at level $LOG_LEVEL and above"

if ((wrong)); then
	exit 1
fi
if ((missed)) && [[ $STRICT == 1 ]]; then
	echo "STRICT=1: a target was missed"
	exit 1
fi
exit 0
