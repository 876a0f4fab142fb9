#!/usr/bin/env bash
# etcd.sh ACTION: a member of an etcd cluster (Debian's etcd-server and etcd-client), named by its
# hostname, clients on WEFT_IP:2379 (and 127.0.0.1:2379), peers on WEFT_IP:2380. No systemd: etcd
# runs in the background with a pid file; its settings, log and data are in <node dir>/etcd.
#
#   install     apt-get install etcd-server etcd-client (nothing when installed; no service started)
#   configure   writes the member's settings (etcd.env); a running member keeps running
#   initialize  writes how a new cluster forms (cluster.env: every member of the service, state
#               new), unless the member has data or a cluster.env already
#   join        adds this member through a live one (`etcdctl member add`, after removing a stale
#               member of the same name or peer URL) and writes what it prints (state existing)
#   start       starts etcd; returns once it answers healthy, or after a bounded wait
#   stop        stops etcd (a leader hands over its leadership as it stops)
#   leave       moves the leadership away, removes itself through another live member, stops
#   health      `etcdctl endpoint health` on its own endpoint
#   remove      stops etcd and removes the node's etcd directory
. "$WEFT_SCRIPTS/lib.sh"
action=$1
dir="$WEFT_NODE_DIR/$WEFT_SERVICE"
member=$WEFT_HOSTNAME
peer="http://$WEFT_IP:2380"
client="http://$WEFT_IP:2379"
svc=$(printf '%s' "$WEFT_SERVICE" | tr -c 'A-Za-z0-9' '_' | tr 'a-z' 'A-Z')
ips_var="WEFT_SERVICE_IPS_$svc"
hosts_var="WEFT_SERVICE_HOSTS_$svc"
start_wait=${WEFT_CONFIG_ETCD_START_WAIT:-40}

ectl() { etcdctl --dial-timeout=2s --command-timeout=10s "$@"; }

# others: the addresses of the service's other members (after this change when there is one).
others() {
  local all=${WEFT_MEMBERS_AFTER_IPS:-${!ips_var:-}}
  if [ "$WEFT_ACTION" = join ]; then all=${WEFT_MEMBERS_BEFORE_IPS:-${!ips_var:-}}; fi
  tr ',' '\n' <<<"$all" | grep -vx "$WEFT_IP" | grep -v '^$' || true
}

# live_endpoint: the client URL of another member that answers healthy (tries each for 30 s).
live_endpoint() {
  local ip
  for _ in $(seq 15); do
    for ip in $(others); do
      if ectl --endpoints "http://$ip:2379" endpoint health >/dev/null 2>&1; then
        echo "http://$ip:2379"; return 0
      fi
    done
    sleep 2
  done
  echo "no other member of $WEFT_SERVICE answers ($(others | paste -sd, -))" >&2
  return 1
}

# members EP: one line per member known to the member at EP: hex id, name, first peer URL, and
# whether it has started ("started" or "unstarted").
members() {
  ectl --endpoints "$1" member list -w json | python3 -c '
import json, sys
for m in json.load(sys.stdin).get("members", []):
    peers = m.get("peerURLs") or ["-"]
    state = "started" if m.get("name") else "unstarted"
    print("%x %s %s %s" % (m["ID"], m.get("name") or "-", peers[0], state))'
}

# leader_handover: when this member leads, moves the leadership to another started member.
leader_handover() {
  local me leader to
  ectl --endpoints "$client" endpoint status -w json 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)[0]["Status"]
print("%x %x" % (s["header"]["member_id"], s["leader"]))' >"$dir/status" || return 0
  read -r me leader <"$dir/status"; rm -f "$dir/status"
  [ "$me" = "$leader" ] || return 0
  to=$(members "$client" | awk -v me="$me" '$1 != me && $4 == "started" {print $1; exit}')
  [ -n "$to" ] && ectl --endpoints "$client" move-leader "$to" || true
}

# reconfig CMD...: an etcdctl membership change, tried again while etcd answers "unhealthy
# cluster" (its strict reconfiguration check counts only the members connected for 5 s, so a
# member that just joined does not count yet), for up to 20 s.
reconfig() {
  local out try
  for try in $(seq 20); do
    if out=$("$@" 2>&1); then echo "$out"; return 0; fi
    if ! grep -q 'unhealthy cluster' <<<"$out" || [ "$try" = 20 ]; then echo "$out" >&2; return 1; fi
    sleep 1
  done
}

# wait_healthy SECONDS: until etcd answers healthy on this node; false after SECONDS.
wait_healthy() {
  local end=$(( $(date +%s) + $1 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    ectl --endpoints "$client" endpoint health >/dev/null 2>&1 && return 0
    running "$(cat "$dir/etcd.pid")" || { tail -20 "$dir/etcd.log" >&2; exit 1; }
    sleep 0.5
  done
  return 1
}

case "$action" in
  install)
    if dpkg -s etcd-server etcd-client >/dev/null 2>&1; then echo "etcd already installed"
    else apt_install etcd-server etcd-client; fi
    mkdir -p "$dir"; etcd --version | head -1 ;;
  configure)
    mkdir -p "$dir"
    cat >"$dir/etcd.env.new" <<EOF
ETCD_NAME=$member
ETCD_DATA_DIR=$dir/data
ETCD_LISTEN_PEER_URLS=$peer
ETCD_LISTEN_CLIENT_URLS=$client,http://127.0.0.1:2379
ETCD_ADVERTISE_CLIENT_URLS=$client
ETCD_INITIAL_ADVERTISE_PEER_URLS=$peer
ETCD_INITIAL_CLUSTER_TOKEN=weft-$WEFT_CLUSTER_ID-$WEFT_SERVICE
ETCD_HEARTBEAT_INTERVAL=${WEFT_CONFIG_ETCD_HEARTBEAT_MS:-100}
ETCD_ELECTION_TIMEOUT=${WEFT_CONFIG_ETCD_ELECTION_MS:-1000}
ETCD_LOGGER=zap
EOF
    mv "$dir/etcd.env.new" "$dir/etcd.env"
    echo "configured $member (peer $peer, client $client); a running member keeps running" ;;
  initialize)
    cd "$dir"
    if [ -d data ] || [ -f cluster.env ]; then echo "$member has its cluster already"; exit 0; fi
    IFS=, read -r -a ips <<<"${!ips_var}"; IFS=, read -r -a hosts <<<"${!hosts_var}"
    initial=""
    for i in "${!ips[@]}"; do initial="$initial${initial:+,}${hosts[$i]}=http://${ips[$i]}:2380"; done
    printf 'ETCD_INITIAL_CLUSTER="%s"\nETCD_INITIAL_CLUSTER_STATE="new"\n' "$initial" >cluster.env
    echo "a new cluster of ${#ips[@]}: $initial" ;;
  join)
    cd "$dir"
    ep=$(live_endpoint)
    # A stale entry (the member this node replaces, or a join that never started) goes first.
    members "$ep" | while read -r id mname mpeer _; do
      if [ "$mname" = "$member" ] || [ "$mpeer" = "$peer" ]; then
        echo "removing the stale member $id ($mname, $mpeer)"
        reconfig ectl --endpoints "$ep" member remove "$id"
      fi
    done
    reconfig ectl --endpoints "$ep" member add "$member" --peer-urls="$peer" >added
    cat added
    grep '^ETCD_INITIAL_CLUSTER\(_STATE\)\?=' added >cluster.env.new
    grep -q 'STATE="existing"' cluster.env.new || { echo "unexpected answer from member add" >&2; exit 1; }
    rm -rf data added; mv cluster.env.new cluster.env ;;
  start)
    cd "$dir"
    set -a; . ./etcd.env; . ./cluster.env; set +a
    daemon etcd etcd
    if wait_healthy "$start_wait"; then echo "$member is healthy"
    else echo "$member is not healthy after ${start_wait}s (its peers may still be starting)"; fi ;;
  stop) cd "$dir" 2>/dev/null && stop_daemon etcd || true ;;
  leave)
    cd "$dir"
    ep=$(live_endpoint)
    id=$(members "$ep" | awk -v n="$member" -v p="$peer" '$2 == n || $3 == p {print $1; exit}')
    if [ -z "$id" ]; then echo "$member is no member any more"
    else
      leader_handover
      reconfig ectl --endpoints "$ep" member remove "$id"
    fi
    stop_daemon etcd
    rm -rf data cluster.env ;;
  health) ectl --endpoints "$client" endpoint health ;;
  remove) cd "$dir" 2>/dev/null && stop_daemon etcd || true; rm -rf "$dir"; echo "removed $dir" ;;
  *) echo "unknown action $action" >&2; exit 2 ;;
esac
