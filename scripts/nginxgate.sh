#!/usr/bin/env bash
# idemgate beside the gate an ops team would write by hand instead: nginx with
# lua-nginx-module and Redis (scripts/nginxgate/gate.lua: SET NX with an owner token,
# the first copy forwarded, its 2xx answer stored and replayed to duplicates, a
# 422 for another body under the same key; no journal, no renewal, no order
# state). Both sides run on loopback against one backend and one redis-server,
# each with its own plain proxy, and are given the same requests:
#   plain     a small form POST through the side's plain proxy
#   hfirst    the same through the gate keyed on Idempotency-Key, a fresh key each
#   hreplay   the same with one key for the whole row (replays)
#   jplain    a ~1 KiB Stripe event (keying/testdata) through the plain proxy
#   jfirst    the event through the gate keyed on its "id", a fresh id each
#   jreplay   the event with one id for the whole row
#   hfirstnj, jfirstnj   idemgate only: hfirst and jfirst through its routes with
#             journal_body off (the nginx gate keeps no journal), held against the
#             nginx gate's hfirst and jfirst
# Rows of a round are interleaved; each figure is a median over ROUNDS. Rates
# swing on shared cores, so the figure to read is CPU µs per request from /proc:
# the gateway's (Caddy's process; nginx's master and workers) and redis-server's.
# A gate's cost is its row less its own side's plain row, paired per round: what
# the gate adds, whatever the proxy underneath costs.
#
# Usage: scripts/nginxgate.sh   (from anywhere in the repository)
#   env: D=3 seconds per row, ROUNDS=3, CONNS=32, THREADS=2, WORKERS=1 nginx
#        workers (idemgate's GOMAXPROCS is left alone), KEEP=1 keeps the work dir.
#   Needs go, wrk, redis-server, curl, python3 (free ports), nginx with
#   lua-nginx-module and lua-cjson. Exit 0 measured; 1 a check failed or a row
#   saw non-2xx answers; 2 setup failed or a tool is missing.
set -euo pipefail

D=${D:-3}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-1}
KEEP=${KEEP:-0}

die() { echo "nginxgate.sh: $*" >&2; exit 2; }
for tool in go wrk redis-server curl python3; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
[[ $D =~ ^[1-9][0-9]*$ ]] || die "D must be whole seconds"

NGINX=$(command -v nginx || ls /usr/sbin/nginx 2>/dev/null || true)
MODULES=/usr/lib/nginx/modules
if [[ -z $NGINX || ! -f $MODULES/ngx_http_lua_module.so || ! -f $MODULES/ndk_http_module.so ]]; then
	echo "nginxgate.sh: needs nginx with lua-nginx-module and lua-cjson:" >&2
	echo "  apt-get install nginx libnginx-mod-http-lua lua-cjson" >&2
	exit 2
fi

# shellcheck source=harness.sh
. "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
harness_init nginxgate
harness_start

declare -A PORT
PORT[idem-plain]=$(port) PORT[idem-header]=$(port) PORT[idem-json]=$(port)
PORT[idem-headernj]=$(port) PORT[idem-jsonnj]=$(port)
PORT[nginx-plain]=$(port) PORT[nginx-header]=$(port) PORT[nginx-json]=$(port)

# Each site binds 127.0.0.1: a site address alone would listen on every interface.
# Scopes of their own: the routes share one store and must not share keys.
# gate <site> <key template> [journal_body off]: an idempotency site, scope peer<site>.
gate() {
	cat <<EOF
http://127.0.0.1:${PORT[idem-$1]} {
	bind 127.0.0.1
	idempotency {
		platform generic
		scope peer$1
		key $2
		store redis 127.0.0.1:$RP${3:+
		$3}
	}
	reverse_proxy 127.0.0.1:$BP
}
EOF
}
{
	cat <<EOF
{
	admin off
	persist_config off
	auto_https off
	storage file_system $WORK/caddy-data
}
http://127.0.0.1:${PORT[idem-plain]} {
	bind 127.0.0.1
	reverse_proxy 127.0.0.1:$BP
}
EOF
	gate header '{http.request.header.Idempotency-Key}'
	gate json '{idempotency.json.id}'
	gate headernj '{http.request.header.Idempotency-Key}' 'journal_body off'
	gate jsonnj '{idempotency.json.id}' 'journal_body off'
} >"$WORK/gateway"
XDG_DATA_HOME=$WORK XDG_CONFIG_HOME=$WORK "$WORK/idemgate" run --config "$WORK/gateway" --adapter caddyfile \
	>"$WORK/gateway.log" 2>&1 &
IDEM_PID=$!
PIDS+=("$IDEM_PID")
up "${PORT[idem-json]}" "$IDEM_PID"

# As root, nginx would hand its workers to nobody, who cannot enter the work dir.
NGX_USER="# user: the caller's"
[[ $EUID == 0 ]] && NGX_USER="user root;"
mkdir -p "$WORK/nginx"
sed -e "s|@USER@|$NGX_USER|" -e "s|@WORKERS@|$WORKERS|" -e "s|@MODULES@|$MODULES|g" \
	-e "s|@WORK@|$WORK|g" -e "s|@DIR@|$ROOT/scripts/nginxgate|g" -e "s|@BACKEND_PORT@|$BP|g" \
	-e "s|@REDIS_PORT@|$RP|g" -e "s|@PLAIN_PORT@|${PORT[nginx-plain]}|" \
	-e "s|@HEADER_PORT@|${PORT[nginx-header]}|" -e "s|@JSON_PORT@|${PORT[nginx-json]}|" \
	"$ROOT/scripts/nginxgate/nginx.conf.in" >"$WORK/nginx.conf"
"$NGINX" -t -p "$WORK/nginx" -c "$WORK/nginx.conf" >"$WORK/nginx-test.log" 2>&1 ||
	{ cat "$WORK/nginx-test.log" >&2; die "nginx refused its configuration (lua-cjson missing? apt-get install nginx libnginx-mod-http-lua lua-cjson)"; }
"$NGINX" -p "$WORK/nginx" -c "$WORK/nginx.conf" -g 'daemon off;' >"$WORK/nginx.log" 2>&1 &
NGX_PID=$!
PIDS+=("$NGX_PID")
up "${PORT[nginx-json]}" "$NGX_PID"

BODY=$ROOT/keying/testdata/stripe_event.json
FAILED=0

# The checks: each gate forwards a first copy, replays it byte for byte, refuses a
# request without a key (400) and, where it compares bodies, another body (422).
post() { # post <port> <body> [header]: prints "status body"
	local args=(-s -o "$WORK/answer" -w '%{http_code}' -X POST --data-binary "$2" "http://127.0.0.1:$1/")
	[[ -n ${3:-} ]] && args+=(-H "$3")
	local code
	code=$(curl "${args[@]}")
	echo "$code $(tr -d '\n' <"$WORK/answer")"
}
expect() { # expect <what> <got> <want>
	if [[ $2 == "$3" ]]; then
		printf '   ok    %-44s %s\n' "$1" "$2"
	else
		printf '   FAIL  %-44s got %s, want %s\n' "$1" "$2" "$3"
		FAILED=1
	fi
}
event() { sed "s/\"evt_a1b2c3d4e5f60100000042\"/\"$1\"/; s/\"amount\": *[0-9]*/\"amount\": $2/" "$BODY"; }
echo "== checks"
for side in idem nginx; do
	p=${PORT[$side-header]} k="check-$side-$$"
	first=$(post "$p" "order=1&amount=9.90" "Idempotency-Key: $k")
	expect "$side header: first copy" "$first" "200 success"
	expect "$side header: replay" "$(post "$p" "order=1&amount=9.90" "Idempotency-Key: $k")" "$first"
	expect "$side header: no key" "$(post "$p" "order=1&amount=9.90" | cut -d' ' -f1)" 400
	expect "$side header: other body" "$(post "$p" "order=1&amount=1.00" "Idempotency-Key: $k" | cut -d' ' -f1)" 422
	p=${PORT[$side-json]} k="evt_check_${side}_$$"
	first=$(post "$p" "$(event "$k" 100)")
	expect "$side json: first copy" "$first" "200 success"
	expect "$side json: replay" "$(post "$p" "$(event "$k" 100)")" "$first"
	expect "$side json: no id" "$(post "$p" '{"object":"event"}' | cut -d' ' -f1)" 400
	# idemgate's body-keyed route has no fingerprint by default (docs/caddyfile.md):
	# a retry that differs in other bytes gets the replay; the nginx gate compares.
	if [[ $side == idem ]]; then
		expect "$side json: other body, same id (replay)" "$(post "$p" "$(event "$k" 999)")" "$first"
	else
		expect "$side json: other body, same id" "$(post "$p" "$(event "$k" 999)" | cut -d' ' -f1)" 422
	fi
done
k="check-nj-$$"
first=$(post "${PORT[idem-headernj]}" "order=1&amount=9.90" "Idempotency-Key: $k")
expect "idem header, journal off: first copy" "$first" "200 success"
expect "idem header, journal off: replay" "$(post "${PORT[idem-headernj]}" "order=1&amount=9.90" "Idempotency-Key: $k")" "$first"
k="evt_check_nj_$$"
first=$(post "${PORT[idem-jsonnj]}" "$(event "$k" 100)")
expect "idem json, journal off: first copy" "$first" "200 success"
expect "idem json, journal off: replay" "$(post "${PORT[idem-jsonnj]}" "$(event "$k" 100)")" "$first"
[[ $FAILED == 0 ]] || { echo "nginxgate.sh: a check failed; nothing measured" >&2; exit 1; }

HZ=$(getconf CLK_TCK)
ticks() { # ticks <pid>...: utime + stime of the processes
	local pid
	for pid in "$@"; do awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat"; done | awk '{ s += $1 } END { print s }'
}
# nginx's CPU is its master's and its workers'.
gwpids() { if [[ $1 == idem ]]; then echo "$IDEM_PID"; else echo "$NGX_PID $(cat /proc/"$NGX_PID"/task/*/children)"; fi; }

RESULTS=$WORK/results
: >"$RESULTS"
load() { # load <port> <case> <run id> <seconds> <output>; bounded in case a server hangs
	WRK_LIB=$ROOT/scripts/wrklib.lua PEER_CASE=$2 PEER_RUN=$3 PEER_BODY=$BODY timeout 90 wrk -t"$THREADS" -c"$CONNS" -d"$4s" \
		-s "$ROOT/scripts/nginxgate/wrk.lua" "http://127.0.0.1:$1/" >"$5" 2>&1 || die "wrk failed ($5)"
}
# row <side> <row> <round>: appends "side-row round req/s gateway_us redis_us".
row() {
	local side=$1 name=$2 round=$3 site case pids g0 g1 r0 r1 out n bad
	case $name in
	plain) site=plain case=header ;; hfirst) site=header case=header ;; hreplay) site=header case=hreplay ;;
	jplain) site=plain case=json ;; jfirst) site=json case=json ;; jreplay) site=json case=jreplay ;;
	hfirstnj) site=headernj case=header ;; jfirstnj) site=jsonnj case=json ;;
	esac
	out=$WORK/wrk-$side-$name-$round.txt
	# A replay row's warm-up sends its key first, so that every measured request
	# is a replay (the nginx gate answers 409 to copies while the first is in flight).
	local run=m$side$name$round$$ warm=w$side$name$round$$
	[[ $case == *replay ]] && warm=$run
	load "${PORT[$side-$site]}" "$case" "$warm" 1 "$out.warmup"
	pids=$(gwpids "$side")
	# shellcheck disable=SC2086
	g0=$(ticks $pids) r0=$(ticks "$REDIS_PID")
	load "${PORT[$side-$site]}" "$case" "$run" "$D" "$out"
	# shellcheck disable=SC2086
	g1=$(ticks $pids) r1=$(ticks "$REDIS_PID")
	n=$(sed -n 's/.*PEER_RESULT requests=\([0-9]*\).*/\1/p' "$out")
	bad=$(sed -n 's/.*non2xx=\([0-9]*\) errors=\([0-9]*\).*/\1 \2/p' "$out" | awk '{ print $1 + $2 }')
	[[ -n $n && $n -gt 0 ]] || die "no requests counted ($out)"
	if [[ $bad != 0 ]]; then
		echo "nginxgate.sh: $side-$name round $round: $bad non-2xx answers or socket errors; the figures do not count" >&2
		FAILED=1
	fi
	awk -v c="$side-$name" -v r="$round" -v n="$n" -v d="$D" -v g=$((g1 - g0)) -v x=$((r1 - r0)) -v hz="$HZ" \
		'BEGIN { printf "%s %d %.0f %.1f %.1f\n", c, r, n / d, g * 1e6 / hz / n, x * 1e6 / hz / n }' >>"$RESULTS"
}

# The *nj rows are idemgate's alone: its routes with journal_body off, the work
# the nginx gate does (it keeps no journal).
ROWS="plain hfirst hfirstnj hreplay jplain jfirst jfirstnj jreplay"
echo "== $ROUNDS round(s) of 14 rows, wrk -t$THREADS -c$CONNS -d${D}s, nginx workers $WORKERS, loopback, $(redis-server --version | cut -d' ' -f1-3)"
for round in $(seq "$ROUNDS"); do
	# The sides take turns to go first: the machine drifts within a round.
	if ((round % 2)); then sides="idem nginx"; else sides="nginx idem"; fi
	for name in $ROWS; do
		for side in $sides; do
			[[ $name == *nj && $side == nginx ]] || row "$side" "$name" "$round"
		done
	done
	echo "   round $round done"
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { awk -v c="$1" -v k="$2" '$1 == c { print $k }' "$RESULTS" | median; }
over() { # over <row> <base row> <with redis 0|1>: the row less the base, paired per round, median
	awk -v c="$1" -v b="$2" -v w="$3" '$1 == c { x[$2] = $4 + w * $5 } $1 == b { y[$2] = $4 + w * $5 }
		END { for (r in x) printf "%.1f\n", x[r] - y[r] }' "$RESULTS" | median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }'; }

echo
echo "per row, medians (req/s are noise on shared cores; CPU µs per request is the figure):"
printf '%-16s %9s %12s %10s\n' row "req/s" "gateway µs" "Redis µs"
for name in $ROWS; do
	for side in idem nginx; do
		[[ $name == *nj && $side == nginx ]] && continue
		printf '%-16s %9s %12s %10s\n' "$side-$name" "$(col "$side-$name" 3)" "$(col "$side-$name" 4)" "$(col "$side-$name" 5)"
	done
done
echo
echo "gate cost over the side's own plain proxy, CPU µs per request (medians of paired rounds):"
printf '%-16s %10s %10s %7s   %12s %12s %7s\n' case "idemgate" "nginx" ratio "idem+Redis" "nginx+Redis" ratio
for pair in "hfirst plain hfirst" "hfirstnj plain hfirst" "hreplay plain hreplay" "jfirst jplain jfirst" "jfirstnj jplain jfirst" "jreplay jplain jreplay"; do
	set -- $pair # idemgate's row, the plain row, nginx's row
	ig=$(over "idem-$1" "idem-$2" 0) ng=$(over "nginx-$3" "nginx-$2" 0)
	ir=$(over "idem-$1" "idem-$2" 1) nr=$(over "nginx-$3" "nginx-$2" 1)
	printf '%-16s %+10.1f %+10.1f %7s   %+12.1f %+12.1f %7s\n' "$1" "$ig" "$ng" "$(ratio "$ig" "$ng")" "$ir" "$nr" "$(ratio "$ir" "$nr")"
done
echo "(ratio: idemgate/nginx, only when both costs are positive; a negative cost is a gate cheaper than its proxy;"
echo " *nj: idemgate with journal_body off, beside the nginx gate's same row, which keeps no journal either)"
echo
printf 'plain proxy alone, gateway µs: idemgate %s, nginx %s (ratio %s)\n' "$(col idem-plain 4)" "$(col nginx-plain 4)" \
	"$(ratio "$(col idem-plain 4)" "$(col nginx-plain 4)")"
exit "$FAILED"
