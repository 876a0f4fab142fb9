#!/usr/bin/env bash
# redis.sh ACTION: Redis with replicas under Sentinel (Debian's redis-server and redis-sentinel).
# Every node of the service runs a Redis server (WEFT_IP:6379) and a Sentinel (WEFT_IP:26379)
# watching the primary under the name `weft`. At create the first node (in node number order) is
# the primary and the others replicate it; later Sentinel says which node is the primary. No
# systemd: both run in the background with pid files; settings, logs and data in <node dir>/redis.
# Redis and Sentinel rewrite their own files (redis.conf, sentinel.conf) as roles change, so
# configure writes them only once.
#
#   install     apt-get install redis-server redis-sentinel (nothing when installed)
#   configure   writes redis.conf and sentinel.conf when missing; a running node keeps running
#   initialize  nothing: a replica gets its data from the primary
#   join        follows the primary Sentinel names (a replica), watches it with a Sentinel of its
#               own, and has the Sentinels that still know a member that is down forget it
#   start       starts Redis, then Sentinel; returns once a replica is in sync (bounded wait)
#   stop        stops Sentinel, then Redis (which writes its data to disk)
#   leave       a primary hands over first (writes paused, a Sentinel failover, wait for every
#               other node to follow the new primary); then it stops, and every other Sentinel
#               forgets it (SENTINEL RESET)
#   health      Redis and Sentinel answer; a replica's link to its primary is up
#   remove      stops both and removes the node's redis directory
. "$WEFT_SCRIPTS/lib.sh"
action=$1
dir="$WEFT_NODE_DIR/$WEFT_SERVICE"
port=${WEFT_CONFIG_REDIS_PORT:-6379}
sport=${WEFT_CONFIG_REDIS_SENTINEL_PORT:-26379}
master=${WEFT_CONFIG_REDIS_MASTER_NAME:-weft}
quorum=${WEFT_CONFIG_REDIS_QUORUM:-2}
svc=$(printf '%s' "$WEFT_SERVICE" | tr -c 'A-Za-z0-9' '_' | tr 'a-z' 'A-Z')
ips_var="WEFT_SERVICE_IPS_$svc"

rcli() { local h=$1 pt=$2; shift 2; timeout 5 redis-cli --no-auth-warning -h "$h" -p "$pt" "$@"; }
role() { rcli "$1" "$port" ROLE 2>/dev/null | head -1; }

# others: the addresses of the service's other members (after this change when there is one).
others() {
  local all=${WEFT_MEMBERS_AFTER_IPS:-${!ips_var:-}}
  if [ "$WEFT_ACTION" = join ]; then all=${WEFT_MEMBERS_BEFORE_IPS:-${!ips_var:-}}; fi
  tr ',' '\n' <<<"$all" | grep -vx "$WEFT_IP" | grep -v '^$' || true
}

# sentinel_primary [IP...]: the primary's address as the first Sentinel that answers says.
sentinel_primary() {
  local ip a
  for ip in "$@"; do
    a=$(rcli "$ip" "$sport" SENTINEL get-master-addr-by-name "$master" 2>/dev/null | head -1) || continue
    if [ -n "$a" ]; then echo "$a"; return 0; fi
  done
  return 1
}

# current_primary: the primary the other members' Sentinels name, once it answers as a primary
# (waits up to 60 s, through a failover under way).
current_primary() {
  local p
  for _ in $(seq 60); do
    p=$(sentinel_primary $(others) || true)
    if [ -n "$p" ] && [ "$p" != "$WEFT_IP" ] && [ "$(role "$p")" = master ]; then
      echo "$p"; return 0
    fi
    sleep 1
  done
  echo "no Sentinel of $(others | paste -sd, -) names a live primary" >&2
  return 1
}

write_sentinel_conf() {
  cat >"$dir/sentinel.conf" <<EOF
port $sport
bind $WEFT_IP 127.0.0.1
protected-mode no
dir $dir
sentinel announce-ip $WEFT_IP
sentinel announce-port $sport
sentinel monitor $master $1 $port $quorum
sentinel down-after-milliseconds $master ${WEFT_CONFIG_REDIS_DOWN_AFTER_MS:-3000}
sentinel failover-timeout $master 15000
sentinel parallel-syncs $master 1
EOF
}

# follow PRIMARY: redis.conf makes this node a replica of PRIMARY (or the primary when it is this
# node).
follow() {
  sed -i '/^replicaof /d;/^slaveof /d' "$dir/redis.conf"
  if [ "$1" != "$WEFT_IP" ]; then echo "replicaof $1 $port" >>"$dir/redis.conf"; fi
}

# in_sync SECONDS: this node is a primary, or a replica whose link to its primary is up.
in_sync() {
  local info
  for _ in $(seq $(( $1 * 2 ))); do
    info=$(rcli "$WEFT_IP" "$port" INFO replication 2>/dev/null | tr -d '\r' || true)
    if grep -q '^role:master' <<<"$info" || grep -q '^master_link_status:up' <<<"$info"; then
      return 0
    fi
    sleep 0.5
  done
  return 1
}

# hand_over: this primary pauses writes, lets its replicas catch up, and has a Sentinel fail
# over; returns once every other member follows the new primary (up to 60 s).
hand_over() {
  local info off behind done_ ip p ok n
  rcli "$WEFT_IP" "$port" CLIENT PAUSE 15000 WRITE >/dev/null
  for _ in $(seq 20); do
    info=$(rcli "$WEFT_IP" "$port" INFO replication | tr -d '\r')
    off=$(sed -n 's/^master_repl_offset://p' <<<"$info")
    behind=$(grep '^slave[0-9]*:' <<<"$info" | grep -vc "offset=$off," || true)
    [ "$behind" = 0 ] && break
    sleep 0.1
  done
  done_=""
  for ip in $(others); do
    if rcli "$ip" "$sport" SENTINEL FAILOVER "$master" | grep -q OK; then done_=$ip; break; fi
  done
  [ -n "$done_" ] || { echo "no Sentinel would fail over" >&2; rcli "$WEFT_IP" "$port" CLIENT UNPAUSE; return 1; }
  for n in $(seq 120); do
    p=$(sentinel_primary "$done_" || true)
    ok=1
    if [ -z "$p" ] || [ "$p" = "$WEFT_IP" ] || [ "$(role "$p")" != master ]; then ok=""; fi
    [ -n "$ok" ] && settled "$done_" "$p" || ok=""
    for ip in $(others); do
      [ -n "$ok" ] || break
      if ! settled "$ip" "$p"; then
        ok=""
        # After 20 s, a Sentinel that missed the failover is told.
        if [ "$n" -gt 40 ]; then repoint "$ip" "$p"; fi
        break
      fi
      [ "$ip" != "$p" ] || continue
      if ! rcli "$ip" "$port" INFO replication 2>/dev/null | tr -d '\r' | grep -q "^master_host:$p\$"; then
        # A replica the failover missed (Sentinel learns replicas every 10 s) follows it now.
        rcli "$ip" "$port" REPLICAOF "$p" "$port" >/dev/null && rcli "$ip" "$port" CONFIG REWRITE >/dev/null || true
        ok=""
      fi
    done
    if [ -n "$ok" ]; then echo "handed over to $p"; return 0; fi
    sleep 0.5
  done
  echo "the failover did not finish (primary now: ${p:-unknown})" >&2
  return 1
}

# settled IP PRIMARY: the Sentinel at IP watches PRIMARY, with no failover under way (a
# SENTINEL RESET during one would abort it, and the Sentinel would go back to the old primary).
settled() {
  rcli "$1" "$sport" SENTINEL master "$master" 2>/dev/null | tr -d '\r' | paste - - |
    awk -v p="$2" '$1 == "ip" && $2 == p {ip = 1} $1 == "flags" && $2 !~ /failover/ {f = 1}
      END {exit !(ip && f)}'
}

# agree IP PRIMARY: waits (up to 20 s) until the Sentinel at IP watches PRIMARY with no failover
# under way; a Sentinel that still watches another node then (one that missed the failover, and
# cannot hear of it from a primary that is gone) is pointed at PRIMARY.
agree() {
  wait_for 20 "the Sentinel at $1 on $2" settled "$1" "$2" || repoint "$1" "$2"
}

# repoint IP PRIMARY: the Sentinel at IP watches PRIMARY from now on.
repoint() {
  echo "the Sentinel at $1 watches $(sentinel_primary "$1" || echo nothing): pointing it at $2"
  rcli "$1" "$sport" SENTINEL REMOVE "$master" >/dev/null || true
  rcli "$1" "$sport" SENTINEL MONITOR "$master" "$2" "$port" "$quorum" >/dev/null
  rcli "$1" "$sport" SENTINEL SET "$master" down-after-milliseconds "${WEFT_CONFIG_REDIS_DOWN_AFTER_MS:-3000}" \
    failover-timeout 15000 parallel-syncs 1 >/dev/null
}

# forget IP PRIMARY [IF_DOWN]: the Sentinel at IP, once it agrees on PRIMARY, forgets the replicas
# and Sentinels it knows (SENTINEL RESET) and learns the live ones again from PRIMARY; with
# IF_DOWN, only when it knows one that is down (the member a new node replaces).
forget() {
  rcli "$1" "$sport" PING >/dev/null 2>&1 || return 0
  agree "$1" "$2"
  if [ -n "${3:-}" ] && ! { rcli "$1" "$sport" SENTINEL replicas "$master"
      rcli "$1" "$sport" SENTINEL sentinels "$master"; } 2>/dev/null | grep -q 's_down'; then
    return 0
  fi
  rcli "$1" "$sport" SENTINEL RESET "$master" >/dev/null && echo "the Sentinel at $1 forgot the members that left"
}

case "$action" in
  install)
    if dpkg -s redis-server redis-sentinel >/dev/null 2>&1; then echo "redis already installed"
    else apt_install redis-server redis-sentinel; fi
    mkdir -p "$dir"; redis-server --version ;;
  configure)
    mkdir -p "$dir/data"
    primary=$(cut -d, -f1 <<<"${!ips_var}")
    if [ ! -f "$dir/redis.conf" ]; then
      cat >"$dir/redis.conf" <<EOF
bind $WEFT_IP 127.0.0.1
port $port
protected-mode no
dir $dir/data
appendonly yes
appendfsync everysec
repl-diskless-sync-delay 0
replica-announce-ip $WEFT_IP
min-replicas-to-write 1
min-replicas-max-lag 10
EOF
      follow "$primary"
      echo "configured redis (primary $primary)"
    else echo "redis.conf is there already (Redis keeps it)"; fi
    if [ ! -f "$dir/sentinel.conf" ]; then write_sentinel_conf "$primary"; fi ;;
  initialize) echo "nothing to initialize: a replica gets its data from the primary" ;;
  join)
    p=$(current_primary)
    follow "$p"; write_sentinel_conf "$p"; rm -rf "$dir/data"; mkdir -p "$dir/data"
    for ip in $(others); do forget "$ip" "$p" if-down; done
    echo "joining as a replica of $p" ;;
  start)
    cd "$dir"
    daemon redis redis-server "$dir/redis.conf"
    wait_for 15 "redis on $WEFT_IP:$port" rcli "$WEFT_IP" "$port" PING
    daemon sentinel redis-sentinel "$dir/sentinel.conf"
    wait_for 15 "sentinel on $WEFT_IP:$sport" rcli "$WEFT_IP" "$sport" PING
    if in_sync "${WEFT_CONFIG_REDIS_START_WAIT:-30}"; then echo "$(role "$WEFT_IP") in sync"
    else echo "the replica is not in sync yet"; fi ;;
  stop) cd "$dir" 2>/dev/null && { stop_daemon sentinel; stop_daemon redis; } || true ;;
  leave)
    cd "$dir"
    if [ "$(role "$WEFT_IP")" = master ]; then hand_over; fi
    p=$(current_primary)
    stop_daemon sentinel; stop_daemon redis
    for ip in $(others); do forget "$ip" "$p"; done ;;
  health)
    [ "$(rcli "$WEFT_IP" "$sport" PING)" = PONG ] || { echo "sentinel does not answer" >&2; exit 1; }
    if in_sync 1; then echo "redis on $WEFT_IP: $(role "$WEFT_IP")"
    else echo "redis on $WEFT_IP does not answer, or its link to the primary is down" >&2; exit 1; fi ;;
  remove) cd "$dir" 2>/dev/null && { stop_daemon sentinel; stop_daemon redis; } || true; rm -rf "$dir"; echo "removed $dir" ;;
  *) echo "unknown action $action" >&2; exit 2 ;;
esac
