# Helpers for the example services, sourced by kv.sh, web.sh, lb.sh, etcd.sh and redis.sh.
# The shell automator runs each script in the node's directory with WEFT_* variables set.
set -eu

# daemon NAME CMD...: start CMD in the background, its pid in NAME.pid, output in NAME.log.
daemon() {
  name=$1; shift
  if [ -f "$name.pid" ] && kill -0 "$(cat "$name.pid")" 2>/dev/null; then
    echo "$name already running (pid $(cat "$name.pid"))"; return 0
  fi
  nohup "$@" >"$name.log" 2>&1 </dev/null &
  echo $! >"$name.pid"
  echo "$name started (pid $!)"
}

# running PID: PID is a live process (an exited one nobody has reaped yet does not count).
running() {
  [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

# stop_daemon NAME: stop the process in NAME.pid, if any, and wait (up to 10 s) until it has
# exited, so a start after it finds the port free.
stop_daemon() {
  name=$1
  if [ -f "$name.pid" ]; then
    pid=$(cat "$name.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$name.pid"
    echo "$name stopped"
  fi
}

# wait_http URL [SECONDS]: wait until URL answers 200.
wait_http() {
  python3 - "$1" "${2:-15}" <<'PY'
import sys, time, urllib.request
url, limit = sys.argv[1], float(sys.argv[2])
end = time.time() + limit
while True:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception as e:
        err = e
    if time.time() > end:
        print("no answer from %s: %s" % (url, err), file=sys.stderr)
        sys.exit(1)
    time.sleep(0.1)
PY
}

# check_http URL [WANT [AVOID]]: one request to URL (the health checks); fails unless it answers
# 200 with WANT in its body and without AVOID. Prints what it got.
check_http() {
  python3 - "$1" "${2:-}" "${3:-}" <<'PY'
import sys, urllib.request
url, want, avoid = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    with urllib.request.urlopen(url, timeout=3) as r:
        body = r.read().decode(errors="replace")
except Exception as e:
    print("%s: %s" % (url, e), file=sys.stderr)
    sys.exit(1)
print("%s: %s" % (url, body[:300]))
if want and want not in body:
    print("the answer lacks %r" % want, file=sys.stderr)
    sys.exit(1)
if avoid and avoid in body:
    print("the answer says %r" % avoid, file=sys.stderr)
    sys.exit(1)
PY
}

# apt_install PACKAGE...: installs Debian packages without starting the services they ship (the
# containers have no init system, and the scripts run the daemons themselves).
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  made=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made=1
  fi
  rc=0
  apt-get -o DPkg::Lock::Timeout=120 update -qq || rc=$?
  if [ "$rc" = 0 ]; then
    apt-get -o DPkg::Lock::Timeout=120 install -y -qq --no-install-recommends "$@" >/dev/null || rc=$?
  fi
  if [ -n "$made" ]; then rm -f /usr/sbin/policy-rc.d; fi
  [ "$rc" = 0 ] && echo "installed $*"
  return "$rc"
}

# wait_for SECONDS WHAT CMD...: polls CMD (quietly) until it succeeds; fails naming WHAT after
# SECONDS.
wait_for() {
  limit=$1; what=$2; shift 2
  for _ in $(seq $(( limit * 5 ))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "$what: no answer after ${limit}s" >&2
  return 1
}
