# shellcheck shell=bash
# Throwaway Redis + Postgres servers for the seckill test and run scripts.
#
# Source this file (do not execute it), then:
#   seckill_ensure_tools      install/locate redis-server, redis-cli, Postgres server binaries, curl
#                             (with --browser also chromium and chromedriver, for the browser test)
#   seckill_start_services    start a private Redis, Postgres and (unless SECKILL_TEST_CLUSTER=0) a
#                             3-master Redis Cluster on free loopback ports, export SECKILL_* vars
#   seckill_start_redis_cluster   start just the cluster (after seckill_start_services with
#                             SECKILL_TEST_CLUSTER=0; a no-op if it is already up)
#   seckill_stop_services     stop them all, remove their temp dir (idempotent, safe from an EXIT trap)
#   seckill_free_port         print a free TCP port on 127.0.0.1
#
# The Redis Cluster: 3 redis-server --cluster-enabled yes nodes (no replicas, same settings as the
# single node, cluster-node-timeout SECKILL_TEST_CLUSTER_NODE_TIMEOUT ms, default 3000), joined
# with redis-cli --cluster create and waited for until every node says cluster_state:ok with all
# 16384 slots. Exported:
#   SECKILL_TEST_REDIS_CLUSTER_URL    redis://127.0.0.1:P1,redis://127.0.0.1:P2,redis://127.0.0.1:P3
#   SECKILL_TEST_REDIS_CLUSTER_NODES  "P1:CONF1 P2:CONF2 P3:CONF3" (space-separated PORT:CONF)
# A test may stop a node (its PID is in redis.pid next to CONF) and restart it with
# `redis-server CONF`: same port, dir, nodes.conf and AOF. seckill_stop_services finds the
# current PID from that pidfile, so restarted nodes are stopped too.
#
# These servers never touch the machine's own Redis/Postgres (6379/5432): they get their own
# ports, data dirs and sockets in a temp dir, and are stopped by PID, never by name.

if [[ -n "${_SECKILL_SERVICES_LIB_LOADED:-}" ]]; then
    return 0
fi
_SECKILL_SERVICES_LIB_LOADED=1
_SECKILL_OWNED_DIR="" # temp dir of the servers this shell started (not exported on purpose)

# Marker for the temporary policy-rc.d we may create while apt installs server packages.
_SECKILL_POLICY_MARKER='# seckill-services: temporary, blocks service auto-start during apt-get install'

_seckill_log() {
    printf 'services: %s\n' "$*" >&2
}

_seckill_is_root() {
    [[ "$(id -u)" -eq 0 ]]
}

# Prints the directory holding initdb, pg_ctl and postgres, or returns 1.
# Prefers the highest /usr/lib/postgresql/<version>/bin, then PATH.
_seckill_find_pg_bin() {
    local dir best=""
    local -a dirs=()
    for dir in /usr/lib/postgresql/*/bin; do
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" && -x "$dir/postgres" ]]; then
            dirs+=("$dir")
        fi
    done
    if ((${#dirs[@]} > 0)); then
        best="$(printf '%s\n' "${dirs[@]}" | sort -V | tail -n 1)"
        printf '%s\n' "$best"
        return 0
    fi
    local initdb_path
    if initdb_path="$(command -v initdb 2>/dev/null)" && command -v pg_ctl >/dev/null 2>&1 \
        && command -v postgres >/dev/null 2>&1; then
        # Resolve symlinks so pg_ctl/initdb find their sibling binaries.
        dir="$(dirname "$(readlink -f "$initdb_path")")"
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" && -x "$dir/postgres" ]]; then
            printf '%s\n' "$dir"
        else
            printf '%s\n' "$(dirname "$initdb_path")"
        fi
        return 0
    fi
    return 1
}

# Prints the path of a psql binary (next to the server binaries if possible), or returns 1.
_seckill_find_psql() {
    local pg_bin="$1"
    if [[ -x "$pg_bin/psql" ]]; then
        printf '%s\n' "$pg_bin/psql"
    elif command -v psql >/dev/null 2>&1; then
        command -v psql
    else
        return 1
    fi
}

# Lists the apt packages needed for what is missing (one per line); with --browser, also
# Chromium and chromedriver (the live page's browser test).
_seckill_missing_packages() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        echo redis-server
    fi
    local pg_bin
    if ! pg_bin="$(_seckill_find_pg_bin)" || ! _seckill_find_psql "$pg_bin" >/dev/null; then
        echo postgresql
    fi
    if ! command -v curl >/dev/null 2>&1; then
        echo curl
    fi
    if [[ "${1:-}" == --browser ]]; then
        command -v chromium >/dev/null 2>&1 || echo chromium
        command -v chromedriver >/dev/null 2>&1 || echo chromium-driver
    fi
}

# apt-get install with service auto-start blocked (via a temporary policy-rc.d, only if the
# machine has none), so the distro's own redis/postgres services are not started by the install.
_seckill_apt_install() {
    local policy=/usr/sbin/policy-rc.d created_policy=0 rc=0
    if [[ -f "$policy" ]] && grep -qF "$_SECKILL_POLICY_MARKER" "$policy" 2>/dev/null; then
        rm -f "$policy" # stale one of ours from an interrupted run
    fi
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\n%s\nexit 101\n' "$_SECKILL_POLICY_MARKER" >"$policy" && chmod 755 "$policy" \
            && created_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! timeout 900 apt-get install -y --no-install-recommends "$@"; then
        _seckill_log "apt-get install failed; running apt-get update and retrying"
        timeout 600 apt-get update || true
        timeout 900 apt-get install -y --no-install-recommends "$@" || rc=$?
    fi
    if ((created_policy)); then
        rm -f "$policy"
    fi
    return "$rc"
}

# Make sure redis-server, redis-cli, Postgres server binaries (initdb, pg_ctl, postgres), psql
# and curl (with --browser: chromium and chromedriver too) are available; install the Debian
# packages when running as root, else fail.
seckill_ensure_tools() {
    local -a missing=()
    mapfile -t missing < <(_seckill_missing_packages "$@")
    if ((${#missing[@]} == 0)); then
        return 0
    fi
    if ! _seckill_is_root; then
        _seckill_log "missing tools; install them first, e.g.: sudo apt-get install -y ${missing[*]}"
        _seckill_log "(needed: redis-server and redis-cli; Postgres server binaries initdb, pg_ctl, postgres and psql; curl; for the tests chromium and chromedriver)"
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        _seckill_log "missing ${missing[*]} and apt-get is not available; install them by hand"
        return 1
    fi
    _seckill_log "installing: ${missing[*]}"
    if ! _seckill_apt_install "${missing[@]}"; then
        _seckill_log "apt-get install ${missing[*]} failed"
        return 1
    fi
    mapfile -t missing < <(_seckill_missing_packages "$@")
    if ((${#missing[@]} > 0)); then
        _seckill_log "still missing after install: ${missing[*]}"
        return 1
    fi
}

# True if something uses TCP port $1 locally (listening or connected).
_seckill_port_in_use() {
    local port="$1"
    if command -v ss >/dev/null 2>&1; then
        [[ -n "$(ss -Htan "( sport = :$port )" 2>/dev/null)" ]]
    else
        # A connect that succeeds means something is listening there.
        timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null
    fi
}

# Prints a free TCP port on 127.0.0.1 in 20000-60999.
seckill_free_port() {
    local i port rnd
    for ((i = 0; i < 200; i++)); do
        rnd="$(od -An -N2 -tu2 /dev/urandom 2>/dev/null | tr -d ' ')" || rnd=""
        [[ -n "$rnd" ]] || rnd=$((RANDOM * 2))
        port=$((rnd % 41000 + 20000))
        if ! _seckill_port_in_use "$port"; then
            printf '%s\n' "$port"
            return 0
        fi
    done
    _seckill_log "could not find a free TCP port"
    return 1
}

# True if PID $1 is alive and its working directory is inside directory $2 (i.e. it is ours).
_seckill_pid_is_ours() {
    local pid="$1" dir="$2" cwd
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    cwd="$(readlink "/proc/$pid/cwd" 2>/dev/null)" || return 1
    [[ "$cwd" == "$dir" || "$cwd" == "$dir"/* ]]
}

# True if PID $1 exists and has not exited. A zombie counts as exited: daemonized servers are
# reaped by PID 1, which in some containers does that only every few seconds.
_seckill_pid_running() {
    local pid="$1" state=""
    kill -0 "$pid" 2>/dev/null || return 1
    state="$(sed -n 's/^State:[[:space:]]*\([A-Za-z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null)" || state=""
    [[ "$state" != Z ]]
}

# Waits up to $2 tenths of a second for PID $1 to exit.
_seckill_wait_pid_gone() {
    local pid="$1" tenths="$2" i
    for ((i = 0; i < tenths; i++)); do
        _seckill_pid_running "$pid" || return 0
        sleep 0.1
    done
    ! _seckill_pid_running "$pid"
}

# SIGTERM, bounded wait, then SIGKILL.
_seckill_kill_pid() {
    local pid="$1" tenths="${2:-100}"
    kill -TERM "$pid" 2>/dev/null || return 0
    if ! _seckill_wait_pid_gone "$pid" "$tenths"; then
        _seckill_log "pid $pid did not exit after SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        _seckill_wait_pid_gone "$pid" 50 || true
    fi
}

# Runs a Postgres command as the user owning the cluster (postgres when we are root).
_seckill_pg_run() {
    local dir="$1"
    shift
    if _seckill_is_root; then
        (cd "$dir" && runuser -u postgres -- "$@")
    else
        (cd "$dir" && "$@")
    fi
}

_seckill_tail_log() {
    local file="$1"
    if [[ -f "$file" ]]; then
        _seckill_log "--- last lines of $file ---"
        tail -n 40 "$file" >&2 || true
        _seckill_log "--- end of $file ---"
    fi
}

_seckill_start_redis() {
    local tmp="$1" redis_server="$2" attempt port conf deadline pid
    mkdir -p "$tmp/redis" || return 1
    conf="$tmp/redis/redis.conf"
    for ((attempt = 1; attempt <= 3; attempt++)); do
        port="$(seckill_free_port)" || return 1
        rm -f "$tmp/redis/redis.pid" "$tmp/redis/redis.log"
        # Same settings as: redis-server --bind 127.0.0.1 --port P --daemonize yes --appendonly yes
        #   --appendfsync everysec --save "" --dir/--logfile/--pidfile in the temp dir.
        # Kept in a file so fault-injection tests can restart it with: redis-server "$SECKILL_TEST_REDIS_CONF"
        cat >"$conf" <<EOF || return 1
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
dir "$tmp/redis"
logfile "$tmp/redis/redis.log"
pidfile "$tmp/redis/redis.pid"
appendonly yes
appendfsync everysec
save ""
EOF
        if ! (cd "$tmp/redis" && timeout 30 "$redis_server" "$conf"); then
            _seckill_log "redis-server failed to start on port $port (attempt $attempt)"
            _seckill_tail_log "$tmp/redis/redis.log"
            continue
        fi
        deadline=$((SECONDS + 10))
        while ((SECONDS < deadline)); do
            if [[ "$(timeout 3 redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == "PONG" ]]; then
                _SECKILL_REDIS_PORT_STARTED="$port"
                return 0
            fi
            # Fail fast if the daemon already died (e.g. port taken in the meantime).
            if grep -qE 'Address already in use|aborting' "$tmp/redis/redis.log" 2>/dev/null; then
                break
            fi
            pid="$(tr -dc '0-9' 2>/dev/null <"$tmp/redis/redis.pid")" || pid=""
            if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
                break
            fi
            sleep 0.1
        done
        _seckill_log "redis-server on port $port did not answer PING (attempt $attempt)"
        _seckill_tail_log "$tmp/redis/redis.log"
        _seckill_stop_redis "$tmp"
    done
    return 1
}

_seckill_stop_redis() {
    local tmp="$1" pid=""
    if [[ -f "$tmp/redis/redis.pid" ]]; then
        pid="$(tr -dc '0-9' 2>/dev/null <"$tmp/redis/redis.pid")" || pid=""
    fi
    if [[ -n "$pid" ]] && _seckill_pid_is_ours "$pid" "$tmp"; then
        _seckill_kill_pid "$pid" 100
    fi
    rm -f "$tmp/redis/redis.pid"
}

_seckill_start_postgres() {
    local tmp="$1" pg_bin="$2" attempt port opts
    mkdir -p "$tmp/pg" "$tmp/pgsock" && touch "$tmp/postgres.log" || return 1
    if _seckill_is_root; then
        # Postgres refuses to run as root: the cluster belongs to the postgres user.
        chown postgres: "$tmp/pg" "$tmp/pgsock" "$tmp/postgres.log" || return 1
    fi
    chmod 700 "$tmp/pg" || return 1
    if ! _seckill_pg_run "$tmp" timeout 180 "$pg_bin/initdb" -D "$tmp/pg" --auth=trust --username=seckill \
        --encoding=UTF8 --locale=C --no-sync >"$tmp/initdb.log" 2>&1; then
        _seckill_log "initdb failed"
        _seckill_tail_log "$tmp/initdb.log"
        return 1
    fi
    for ((attempt = 1; attempt <= 3; attempt++)); do
        port="$(seckill_free_port)" || return 1
        # Also written to postgresql.conf so a plain `pg_ctl -D "$SECKILL_TEST_PG_DATA" -w start`
        # (fault-injection tests) comes back on the same port and socket dir.
        _seckill_pg_run "$tmp" tee -a "$tmp/pg/postgresql.conf" >/dev/null <<EOF || return 1

# seckill throwaway test server (attempt $attempt; later lines win)
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$tmp/pgsock'
fsync = off
max_connections = 300
EOF
        opts="-p $port -c listen_addresses=127.0.0.1 -k $tmp/pgsock -c fsync=off -c max_connections=300"
        if _seckill_pg_run "$tmp" timeout 90 "$pg_bin/pg_ctl" -D "$tmp/pg" -l "$tmp/postgres.log" -w -t 60 \
            -o "$opts" start >"$tmp/pg_ctl.log" 2>&1; then
            _SECKILL_PG_PORT_STARTED="$port"
            return 0
        fi
        _seckill_log "postgres failed to start on port $port (attempt $attempt)"
        _seckill_tail_log "$tmp/pg_ctl.log"
        _seckill_tail_log "$tmp/postgres.log"
        _seckill_stop_postgres "$tmp" "$pg_bin/pg_ctl"
    done
    return 1
}

_seckill_stop_postgres() {
    local tmp="$1" pg_ctl="${2:-}" pid="" owner
    [[ -f "$tmp/pg/postmaster.pid" ]] || return 0
    pid="$(head -n 1 "$tmp/pg/postmaster.pid" 2>/dev/null | tr -dc '0-9')" || pid=""
    if [[ -z "$pg_ctl" || ! -x "$pg_ctl" ]]; then
        local pg_bin
        pg_bin="$(_seckill_find_pg_bin)" && pg_ctl="$pg_bin/pg_ctl"
    fi
    if [[ -n "$pg_ctl" && -x "$pg_ctl" ]]; then
        owner="$(stat -c %U "$tmp/pg" 2>/dev/null)" || owner=""
        local -a run=()
        if _seckill_is_root && [[ -n "$owner" && "$owner" != root ]]; then
            run=(runuser -u "$owner" --)
        fi
        if ! (cd "$tmp" && timeout 60 "${run[@]}" "$pg_ctl" -D "$tmp/pg" -m fast -w -t 30 stop) >/dev/null 2>&1; then
            (cd "$tmp" && timeout 30 "${run[@]}" "$pg_ctl" -D "$tmp/pg" -m immediate -w -t 20 stop) >/dev/null 2>&1 || true
        fi
    fi
    if [[ -n "$pid" ]] && _seckill_pid_is_ours "$pid" "$tmp"; then
        _seckill_kill_pid "$pid" 100
    fi
}

# Redis Cluster (3 masters, no replicas), started by seckill_start_redis_cluster.

# Prints a free port P on 127.0.0.1 whose cluster bus port P+10000 is free too (so P <= 55535)
# and which is neither of the ports given as arguments (nor their bus ports).
_seckill_cluster_free_port() {
    local i port taken ok
    for ((i = 0; i < 200; i++)); do
        port="$(seckill_free_port)" || return 1
        ((port + 10000 <= 65535)) || continue
        ok=1
        for taken in "$@"; do
            if ((port == taken || port == taken + 10000 || port + 10000 == taken)); then
                ok=0
                break
            fi
        done
        ((ok)) || continue
        if ! _seckill_port_in_use "$((port + 10000))"; then
            printf '%s\n' "$port"
            return 0
        fi
    done
    _seckill_log "could not find a free TCP port pair (port, port+10000) for a cluster node"
    return 1
}

# Starts cluster node $3 (1..3) in $1/cluster/node$3 on a free port (other than the ports in
# $4...), retrying on a new port if that one is taken meanwhile. Sets _SECKILL_CLUSTER_NODE_PORT.
_seckill_start_cluster_node() {
    local tmp="$1" redis_server="$2" index="$3" attempt port conf dir deadline pid
    shift 3
    dir="$tmp/cluster/node$index"
    conf="$dir/redis.conf"
    mkdir -p "$dir" || return 1
    for ((attempt = 1; attempt <= 3; attempt++)); do
        port="$(_seckill_cluster_free_port "$@")" || return 1
        rm -rf "$dir/redis.pid" "$dir/redis.log" "$dir/nodes.conf" "$dir/appendonlydir" "$dir/appendonly.aof"
        # The single node's settings plus cluster mode. Restart with: redis-server "$conf" (same
        # port, dir, nodes.conf and AOF); redis-server chdirs to $dir and writes $dir/redis.pid.
        cat >"$conf" <<EOC || return 1
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
dir "$dir"
logfile "$dir/redis.log"
pidfile "$dir/redis.pid"
appendonly yes
appendfsync everysec
save ""
cluster-enabled yes
cluster-config-file "$dir/nodes.conf"
cluster-node-timeout $_SECKILL_CLUSTER_NODE_TIMEOUT
EOC
        if ! (cd "$dir" && timeout 30 "$redis_server" "$conf"); then
            _seckill_log "cluster node $index failed to start on port $port (attempt $attempt)"
            _seckill_tail_log "$dir/redis.log"
            continue
        fi
        deadline=$((SECONDS + 10))
        while ((SECONDS < deadline)); do
            if [[ "$(timeout 3 redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == "PONG" ]]; then
                _SECKILL_CLUSTER_NODE_PORT="$port"
                return 0
            fi
            if grep -qE 'Address already in use|aborting' "$dir/redis.log" 2>/dev/null; then
                break
            fi
            pid="$(tr -dc '0-9' 2>/dev/null <"$dir/redis.pid")" || pid=""
            if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
                break
            fi
            sleep 0.1
        done
        _seckill_log "cluster node $index on port $port did not answer PING (attempt $attempt)"
        _seckill_tail_log "$dir/redis.log"
        _seckill_stop_cluster_node "$tmp" "$dir"
    done
    return 1
}

# Stops the cluster node whose directory is $2, by the PID in its pidfile (which redis-server
# rewrites on every start, so this also finds a node that a test stopped and restarted).
_seckill_stop_cluster_node() {
    local tmp="$1" dir="$2" pid=""
    if [[ -f "$dir/redis.pid" ]]; then
        pid="$(tr -dc '0-9' 2>/dev/null <"$dir/redis.pid")" || pid=""
    fi
    if [[ -n "$pid" ]] && _seckill_pid_is_ours "$pid" "$tmp"; then
        _seckill_kill_pid "$pid" 100
    fi
    rm -f "$dir/redis.pid"
}

_seckill_stop_redis_cluster() {
    local tmp="$1" dir
    for dir in "$tmp"/cluster/node*; do
        [[ -d "$dir" ]] || continue
        _seckill_stop_cluster_node "$tmp" "$dir"
    done
}

# True once every node on the given ports reports cluster_state:ok, all 16384 slots assigned
# and ok, and knows all the given nodes.
_seckill_cluster_is_ok() {
    local port info
    for port in "$@"; do
        info="$(timeout 3 redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | tr -d '\r')" || return 1
        grep -qx 'cluster_state:ok' <<<"$info" || return 1
        grep -qx 'cluster_slots_assigned:16384' <<<"$info" || return 1
        grep -qx 'cluster_slots_ok:16384' <<<"$info" || return 1
        grep -qx "cluster_known_nodes:$#" <<<"$info" || return 1
    done
}

# Starts a 3-master Redis Cluster (no replicas) next to the servers of seckill_start_services
# (call that first) and exports SECKILL_TEST_REDIS_CLUSTER_URL and SECKILL_TEST_REDIS_CLUSTER_NODES.
# On failure, stops the nodes it started and returns 1 (the single node and Postgres stay up).
seckill_start_redis_cluster() {
    local tmp="${_SECKILL_OWNED_DIR:-}" redis_server index deadline started_ns elapsed_ms port
    local -a ports=() seeds=() nodes=()
    if [[ -z "$tmp" || ! -d "$tmp" ]]; then
        _seckill_log "seckill_start_redis_cluster: run seckill_start_services first"
        return 1
    fi
    if [[ -n "${SECKILL_TEST_REDIS_CLUSTER_URL:-}" && -d "$tmp/cluster" ]]; then
        return 0 # already started by this shell
    fi
    redis_server="$(command -v redis-server)" || {
        _seckill_log "redis-server not found (run seckill_ensure_tools)"
        return 1
    }
    started_ns="$(date +%s%N)"
    _SECKILL_CLUSTER_NODE_TIMEOUT="${SECKILL_TEST_CLUSTER_NODE_TIMEOUT:-3000}"
    if ! [[ "$_SECKILL_CLUSTER_NODE_TIMEOUT" =~ ^[1-9][0-9]*$ ]]; then
        _seckill_log "SECKILL_TEST_CLUSTER_NODE_TIMEOUT must be a number of milliseconds"
        return 1
    fi
    for index in 1 2 3; do
        _SECKILL_CLUSTER_NODE_PORT=""
        if ! _seckill_start_cluster_node "$tmp" "$redis_server" "$index" "${ports[@]}"; then
            _seckill_log "could not start Redis Cluster node $index"
            _seckill_stop_redis_cluster "$tmp"
            return 1
        fi
        ports+=("$_SECKILL_CLUSTER_NODE_PORT")
        seeds+=("127.0.0.1:$_SECKILL_CLUSTER_NODE_PORT")
        nodes+=("$_SECKILL_CLUSTER_NODE_PORT:$tmp/cluster/node$index/redis.conf")
    done

    # --cluster create assigns the slots, introduces the nodes and waits until they agree on the
    # configuration; cluster_state:ok on every node can still lag behind by a moment.
    if ! timeout 60 redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes \
        </dev/null >"$tmp/cluster/create.log" 2>&1; then
        _seckill_log "redis-cli --cluster create ${seeds[*]} failed"
        _seckill_tail_log "$tmp/cluster/create.log"
        _seckill_stop_redis_cluster "$tmp"
        return 1
    fi
    deadline=$((SECONDS + 30))
    until _seckill_cluster_is_ok "${ports[@]}"; do
        if ((SECONDS >= deadline)); then
            _seckill_log "Redis Cluster ${seeds[*]} did not reach cluster_state:ok within 30 s"
            for port in "${ports[@]}"; do
                _seckill_log "--- CLUSTER INFO of 127.0.0.1:$port ---"
                timeout 3 redis-cli -h 127.0.0.1 -p "$port" cluster info >&2 2>/dev/null || true
            done
            _seckill_stop_redis_cluster "$tmp"
            return 1
        fi
        sleep 0.1
    done

    export SECKILL_TEST_REDIS_CLUSTER_URL
    SECKILL_TEST_REDIS_CLUSTER_URL="$(printf 'redis://%s,' "${seeds[@]}")"
    SECKILL_TEST_REDIS_CLUSTER_URL="${SECKILL_TEST_REDIS_CLUSTER_URL%,}"
    export SECKILL_TEST_REDIS_CLUSTER_NODES="${nodes[*]}"
    elapsed_ms=$((($(date +%s%N) - started_ns) / 1000000))
    _seckill_log "redis cluster $SECKILL_TEST_REDIS_CLUSTER_URL (3 masters, node timeout ${_SECKILL_CLUSTER_NODE_TIMEOUT} ms, up in $((elapsed_ms / 1000)).$(printf '%03d' $((elapsed_ms % 1000))) s)"
}

# Last resort: any redis-server/postgres process whose working directory is inside our temp dir.
_seckill_sweep() {
    local tmp="$1" proc pid cwd comm
    for proc in /proc/[0-9]*; do
        pid="${proc#/proc/}"
        cwd="$(readlink "$proc/cwd" 2>/dev/null)" || continue
        [[ "$cwd" == "$tmp" || "$cwd" == "$tmp"/* ]] || continue
        comm="$(cat "$proc/comm" 2>/dev/null)" || continue
        case "$comm" in
            redis-server* | redis-check-rdb* | postgres* | postmaster*)
                _seckill_log "stopping leftover $comm (pid $pid)"
                _seckill_kill_pid "$pid" 50
                ;;
        esac
    done
}

# Starts a private Redis, Postgres and, unless SECKILL_TEST_CLUSTER=0, a Redis Cluster; exports
# the SECKILL_* variables (see below and the top of this file).
# On failure, stops whatever it started and returns 1.
seckill_start_services() {
    local redis_server pg_bin psql tmp base

    # Only servers started by this shell count: SECKILL_* values inherited from a parent process
    # (e.g. a nested scripts/test.sh) are replaced, and never stopped by us.
    if [[ -n "${_SECKILL_OWNED_DIR:-}" && -d "$_SECKILL_OWNED_DIR" ]]; then
        _seckill_log "services already started in $_SECKILL_OWNED_DIR"
        return 0
    fi
    redis_server="$(command -v redis-server)" || {
        _seckill_log "redis-server not found (run seckill_ensure_tools)"
        return 1
    }
    command -v redis-cli >/dev/null 2>&1 || {
        _seckill_log "redis-cli not found (run seckill_ensure_tools)"
        return 1
    }
    pg_bin="$(_seckill_find_pg_bin)" || {
        _seckill_log "Postgres server binaries not found (run seckill_ensure_tools)"
        return 1
    }
    psql="$(_seckill_find_psql "$pg_bin")" || {
        _seckill_log "psql not found (run seckill_ensure_tools)"
        return 1
    }

    if _seckill_is_root && ! id -u postgres >/dev/null 2>&1; then
        _seckill_log "creating system user postgres"
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin postgres || return 1
    fi

    # The Postgres socket path must stay short (< 108 bytes) and, when root, reachable by postgres.
    base="${TMPDIR:-/tmp}"
    if [[ ! -d "$base" || ${#base} -gt 60 ]]; then
        base=/tmp
    fi
    tmp="$(mktemp -d "$base/seckill-services.XXXXXXXX")" || return 1
    if _seckill_is_root && [[ "$base" != /tmp ]] && ! runuser -u postgres -- test -x "$tmp" 2>/dev/null; then
        rmdir "$tmp"
        tmp="$(mktemp -d /tmp/seckill-services.XXXXXXXX)" || return 1
    fi
    chmod 755 "$tmp"
    _SECKILL_OWNED_DIR="$tmp"
    export SECKILL_SERVICES_DIR="$tmp"

    _SECKILL_REDIS_PORT_STARTED=""
    if ! _seckill_start_redis "$tmp" "$redis_server"; then
        _seckill_log "could not start redis-server"
        seckill_stop_services
        return 1
    fi
    export SECKILL_REDIS_PORT="$_SECKILL_REDIS_PORT_STARTED"

    _SECKILL_PG_PORT_STARTED=""
    if ! _seckill_start_postgres "$tmp" "$pg_bin"; then
        _seckill_log "could not start postgres"
        seckill_stop_services
        return 1
    fi
    export SECKILL_PG_PORT="$_SECKILL_PG_PORT_STARTED"

    if ! timeout 30 "$psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$SECKILL_PG_PORT" -U seckill -d postgres \
        -c 'create database seckill' >"$tmp/createdb.log" 2>&1; then
        _seckill_log "could not create database seckill"
        _seckill_tail_log "$tmp/createdb.log"
        seckill_stop_services
        return 1
    fi

    export SECKILL_REDIS_URL="redis://127.0.0.1:$SECKILL_REDIS_PORT"
    export SECKILL_DATABASE_URL="postgres://seckill@127.0.0.1:$SECKILL_PG_PORT/seckill"
    export SECKILL_TEST_REDIS_URL="$SECKILL_REDIS_URL"
    export SECKILL_TEST_DATABASE_URL="postgres://seckill@127.0.0.1:$SECKILL_PG_PORT/postgres"
    export SECKILL_TEST_PG_CTL="$pg_bin/pg_ctl"
    export SECKILL_TEST_PG_DATA="$tmp/pg"
    export SECKILL_TEST_PG_LOG="$tmp/postgres.log"
    if _seckill_is_root; then
        export SECKILL_TEST_PG_RUNAS=postgres
    else
        export SECKILL_TEST_PG_RUNAS=""
    fi
    export SECKILL_TEST_REDIS_SERVER="$redis_server"
    export SECKILL_TEST_REDIS_CONF="$tmp/redis/redis.conf"

    _seckill_log "redis    $SECKILL_REDIS_URL (pid $(cat "$tmp/redis/redis.pid" 2>/dev/null || echo '?'))"
    _seckill_log "postgres $SECKILL_DATABASE_URL (data $tmp/pg)"

    # A cluster inherited from a parent process is not ours: only export the one we start.
    unset SECKILL_TEST_REDIS_CLUSTER_URL SECKILL_TEST_REDIS_CLUSTER_NODES
    case "${SECKILL_TEST_CLUSTER:-1}" in
        0 | no | false | off)
            _seckill_log "redis cluster not started (SECKILL_TEST_CLUSTER=$SECKILL_TEST_CLUSTER)"
            ;;
        *)
            if ! seckill_start_redis_cluster; then
                _seckill_log "could not start the Redis Cluster (SECKILL_TEST_CLUSTER=0 skips it)"
                seckill_stop_services
                return 1
            fi
            ;;
    esac
}

# Stops the servers started by seckill_start_services and removes their temp dir.
# Idempotent; safe from an EXIT trap, also after a half-finished start.
seckill_stop_services() {
    local tmp="${_SECKILL_OWNED_DIR:-}"
    if [[ -z "$tmp" ]]; then
        return 0 # nothing started by this shell (or already stopped)
    fi
    if [[ -d "$tmp" ]]; then
        case "$tmp" in
            */seckill-services.*)
                _seckill_stop_postgres "$tmp" "${SECKILL_TEST_PG_CTL:-}"
                _seckill_stop_redis "$tmp"
                _seckill_stop_redis_cluster "$tmp"
                _seckill_sweep "$tmp"
                rm -rf -- "$tmp" || _seckill_log "could not remove $tmp"
                ;;
            *)
                _seckill_log "refusing to clean up unexpected directory $tmp"
                ;;
        esac
    fi
    _SECKILL_OWNED_DIR=""
    unset SECKILL_SERVICES_DIR SECKILL_REDIS_PORT SECKILL_PG_PORT SECKILL_REDIS_URL SECKILL_DATABASE_URL \
        SECKILL_TEST_REDIS_URL SECKILL_TEST_DATABASE_URL SECKILL_TEST_PG_CTL SECKILL_TEST_PG_DATA \
        SECKILL_TEST_PG_LOG SECKILL_TEST_PG_RUNAS SECKILL_TEST_REDIS_SERVER SECKILL_TEST_REDIS_CONF \
        SECKILL_TEST_REDIS_CLUSTER_URL SECKILL_TEST_REDIS_CLUSTER_NODES
    return 0
}
