#!/usr/bin/env bash
# kv.sh ACTION [ROLE [PRIMARY_IP]]: the key-value store (kv-primary and kv-replica).
. "$WEFT_SCRIPTS/lib.sh"
action=$1; role=${2:-primary}; primary=${3:-}
dir="$WEFT_NODE_DIR/$WEFT_SERVICE"
port=${WEFT_CONFIG_KV_PORT:-7000}
case "$action" in
  install) mkdir -p "$dir"; cp "$WEFT_SCRIPTS/kv.py" "$dir/"; echo "installed $WEFT_SERVICE in $dir" ;;
  configure)
    follow=""
    if [ "$role" = replica ]; then follow="http://$primary:$port"; fi
    printf 'role=%s\nfollow=%s\n' "$role" "$follow" >"$dir/kv.conf"
    echo "configured $role${follow:+ following $follow}" ;;
  start)
    cd "$dir"; . ./kv.conf
    daemon kv python3 kv.py --bind "$WEFT_IP" --port "$port" --data data.json ${follow:+--follow "$follow"}
    wait_http "http://$WEFT_IP:$port/health" ;;
  stop) cd "$dir" 2>/dev/null && stop_daemon kv || true ;;
  health) check_http "http://$WEFT_IP:$port/health" ok ;;
  remove) rm -rf "$dir"; echo "removed $dir" ;;
  *) echo "unknown action $action" >&2; exit 2 ;;
esac
