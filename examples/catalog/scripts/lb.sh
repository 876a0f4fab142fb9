#!/usr/bin/env bash
# lb.sh ACTION: the load balancer over the web nodes (lb.backends in the cluster config).
. "$WEFT_SCRIPTS/lib.sh"
action=$1
dir="$WEFT_NODE_DIR/lb"
port=${WEFT_CONFIG_LB_PORT:-8000}
case "$action" in
  install) mkdir -p "$dir"; cp "$WEFT_SCRIPTS/lb.py" "$dir/"; echo "installed lb in $dir" ;;
  configure) printf 'backends=%s\n' "$WEFT_CONFIG_LB_BACKENDS" >"$dir/lb.conf"; cat "$dir/lb.conf" ;;
  start)
    cd "$dir"; . ./lb.conf
    daemon lb python3 lb.py --bind "$WEFT_IP" --port "$port" --backends "$backends" --conf "$dir/lb.conf"
    wait_http "http://$WEFT_IP:$port/health" ;;
  stop) cd "$dir" 2>/dev/null && stop_daemon lb || true ;;
  health) check_http "http://$WEFT_IP:$port/" '"greeting"' ;;
  remove) rm -rf "$dir"; echo "removed $dir" ;;
  *) echo "unknown action $action" >&2; exit 2 ;;
esac
