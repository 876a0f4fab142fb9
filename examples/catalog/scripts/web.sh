#!/usr/bin/env bash
# web.sh ACTION: a web node answering from the key-value store (a replica if the cluster has one).
. "$WEFT_SCRIPTS/lib.sh"
action=$1
dir="$WEFT_NODE_DIR/web"
port=${WEFT_CONFIG_WEB_PORT:-8080}
case "$action" in
  install) mkdir -p "$dir"; cp "$WEFT_SCRIPTS/web.py" "$dir/"; echo "installed web in $dir" ;;
  configure)
    kv=${WEFT_SERVICE_IPS_KV_REPLICA:-}; kv=${kv%%,*}
    [ -n "$kv" ] || kv=${WEFT_SERVICE_IPS_KV_PRIMARY%%,*}
    printf 'kv=http://%s:%s\n' "$kv" "${WEFT_CONFIG_KV_PORT:-7000}" >"$dir/web.conf"
    cat "$dir/web.conf" ;;
  start)
    cd "$dir"; . ./web.conf
    daemon web python3 web.py --bind "$WEFT_IP" --port "$port" --kv "$kv" --name "$WEFT_HOSTNAME" \
      --greeting "${WEFT_CONFIG_WEB_GREETING:-hello}"
    wait_http "http://$WEFT_IP:$port/health" ;;
  stop) cd "$dir" 2>/dev/null && stop_daemon web || true ;;
  health) check_http "http://$WEFT_IP:$port/" '"greeting"' "store unreachable" ;;
  remove) rm -rf "$dir"; echo "removed $dir" ;;
  *) echo "unknown action $action" >&2; exit 2 ;;
esac
