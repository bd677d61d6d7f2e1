# Sourced by the measuring scripts (ablate.sh, nginxgate.sh): the parts every
# run shares. The caller sets KEEP and die() first, then calls harness_init
# <name>; every process it starts goes in PIDS, which the exit trap stops.
# Everything listens on 127.0.0.1 only.

# harness_init <name>: ROOT, a work directory WORK, and the exit trap.
harness_init() {
	ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/idemgate-$1.XXXXXX")
	PIDS=()
	trap harness_cleanup EXIT
	trap 'exit 130' INT TERM
}

harness_cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [[ $KEEP == 1 ]]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
up() { # up <port> <pid>: wait until the port answers, up to ~30 s
	for _ in $(seq 150); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || break
		sleep 0.2
	done
	die "nothing listens on :$1 (see $WORK, KEEP=1 keeps it)"
}

# harness_start: builds idemgate into WORK once, starts redis-server (no
# persistence) on RP and the backend on BP: idemgate too, one binary, its
# cost in no side's figures, answering "success" to any host.
harness_start() {
	echo "== building into $WORK"
	(cd "$ROOT" && go build -o "$WORK/idemgate" ./cmd/idemgate) || die "build failed"

	RP=$(port)
	redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no >"$WORK/redis.log" 2>&1 &
	REDIS_PID=$!
	PIDS+=("$REDIS_PID")
	up "$RP" "$REDIS_PID"

	BP=$(port)
	printf '{\n\tadmin off\n\tpersist_config off\n\tauto_https off\n}\nhttp://:%s {\n\tbind 127.0.0.1\n\trespond "success" 200\n}\n' "$BP" >"$WORK/backend"
	XDG_DATA_HOME=$WORK XDG_CONFIG_HOME=$WORK "$WORK/idemgate" run --config "$WORK/backend" --adapter caddyfile \
		>"$WORK/backend.log" 2>&1 &
	PIDS+=($!)
	up "$BP" "$!"
}
