#!/usr/bin/env bash
# Builds the images a weft deployment of several servers runs on (examples/several-servers and
# the test crates/weft/tests/it/several_servers_containers.rs), from Debian packages only: no
# registry, no Dockerfile. Each is made FROM the node image (weft-node:bookworm, built first when
# missing) by installing packages in a container and committing it:
#
#   weft-postgres:bookworm  Debian's postgresql-15, serving TLS only (see /usr/local/sbin/weft-postgres
#                           below for its environment and files);
#   weft-runtime:bookworm   what the weft binary needs at run time (ca-certificates) and tcpdump;
#                           the binary itself is not in the image: mount it read-only at
#                           /usr/local/bin/weft (the host must be Debian bookworm or as old).
#
# Usage: images/build-deploy-images.sh [--force] [--print-names]
# Each image carries a hash of this script in its label weft.build: an unchanged script does
# nothing (seconds), a changed one rebuilds (about a minute of apt).
set -euo pipefail

force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --print-names) echo "weft-postgres:bookworm weft-runtime:bookworm"; exit 0 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
  esac
done

here=$(cd "$(dirname "$0")" && pwd)
hash=$(sha256sum "$0" | cut -c1-16)
base=${WEFT_NODE_BASE:-weft-node:bookworm}

# The PostgreSQL entry point. Environment: POSTGRES_PASSWORD (required), POSTGRES_USER and
# POSTGRES_DB (default weft), PGDATA (default /var/lib/postgresql/data), TLS_CERT and TLS_KEY (PEM
# files, default /etc/weft/tls/server.pem and server-key.pem). The first start makes the cluster,
# the user (owner of the database, not a superuser) and the database. Every start copies the
# certificate and key where only postgres reads them (a mounted key is often root's) and serves
# TLS 1.2 and up only: pg_hba.conf accepts TCP connections over TLS with a SCRAM password and
# rejects every other.
read -r -d '' postgres_entry <<'SH' || true
#!/bin/sh
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
user=${POSTGRES_USER:-weft}
db=${POSTGRES_DB:-weft}
data=${PGDATA:-/var/lib/postgresql/data}
cert=${TLS_CERT:-/etc/weft/tls/server.pem}
key=${TLS_KEY:-/etc/weft/tls/server-key.pem}
bin=/usr/lib/postgresql/15/bin
[ -r "$cert" ] && [ -r "$key" ] || { echo "weft-postgres serves TLS only: mount $cert and $key" >&2; exit 1; }
as_postgres() { setpriv --reuid=postgres --regid=postgres --clear-groups "$@"; }
mkdir -p "$data" /run/postgresql /var/lib/postgresql/tls
chown postgres:postgres "$data" /run/postgresql /var/lib/postgresql/tls
chmod 700 "$data" /var/lib/postgresql/tls
install -o postgres -g postgres -m 600 "$cert" /var/lib/postgresql/tls/server.pem
install -o postgres -g postgres -m 600 "$key" /var/lib/postgresql/tls/server-key.pem
if [ ! -s "$data/PG_VERSION" ]; then
  as_postgres env HOME=/var/lib/postgresql "$bin/initdb" -D "$data" -U postgres -E UTF8 \
    --auth-local=peer --auth-host=reject >/dev/null
  quoted=$(printf '%s' "$POSTGRES_PASSWORD" | sed "s/'/''/g")
  printf 'CREATE ROLE "%s" LOGIN PASSWORD '"'"'%s'"'"';\nCREATE DATABASE "%s" OWNER "%s";\n' \
    "$user" "$quoted" "$db" "$user" |
    as_postgres env HOME=/var/lib/postgresql "$bin/postgres" --single -D "$data" postgres >/dev/null
fi
cat >"$data/pg_hba.conf" <<HBA
local all postgres peer
hostssl all all all scram-sha-256
hostnossl all all all reject
HBA
exec setpriv --reuid=postgres --regid=postgres --clear-groups env HOME=/var/lib/postgresql \
  "$bin/postgres" -D "$data" -c listen_addresses='*' -c ssl=on \
  -c ssl_cert_file=/var/lib/postgresql/tls/server.pem \
  -c ssl_key_file=/var/lib/postgresql/tls/server-key.pem \
  -c ssl_min_protocol_version=TLSv1.2 -c password_encryption=scram-sha-256 \
  -c unix_socket_directories=/run/postgresql
SH

# build NAME INSTALL CHANGE...: runs INSTALL (sh) in a container of the base image, then commits
# it as NAME with the CHANGEs and the label; does nothing when NAME has this script's label.
build() {
  local name=$1 install=$2
  shift 2
  local have
  have=$(docker image inspect -f '{{index .Config.Labels "weft.build"}}' "$name" 2>/dev/null || true)
  if [[ $force -eq 0 && "$have" == "$hash" ]]; then
    echo "image $name exists for this script ($hash; use --force to rebuild)"
    return 0
  fi
  local start cid
  start=$(date +%s)
  cid=$(docker create "$base" sh -c "set -e
    $install
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/*")
  # The container is removed however this function ends.
  trap 'docker rm -f "'"$cid"'" >/dev/null 2>&1 || true' EXIT
  docker start -a "$cid"
  [[ $(docker inspect -f '{{.State.ExitCode}}' "$cid") == 0 ]] || { echo "building $name failed" >&2; exit 1; }
  local changes=()
  for c in "$@"; do changes+=(--change "$c"); done
  docker commit "${changes[@]}" --change "LABEL weft.build=$hash" "$cid" "$name" >/dev/null
  docker rm -f "$cid" >/dev/null
  trap - EXIT
  echo "built $name ($hash) in $(( $(date +%s) - start ))s"
}

docker image inspect "$base" >/dev/null 2>&1 || "$here/build-node-image.sh" "$base"

entry_b64=$(printf '%s\n' "$postgres_entry" | base64 -w0)
# Debian's package would make a cluster of its own (15/main); the entry point makes the one it uses.
build weft-postgres:bookworm "apt-get update -qq
  mkdir -p /etc/postgresql-common
  echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confold postgresql-15 >/dev/null
  echo $entry_b64 | base64 -d >/usr/local/sbin/weft-postgres
  chmod 755 /usr/local/sbin/weft-postgres
  /usr/lib/postgresql/15/bin/postgres --version" \
  'CMD ["/usr/local/sbin/weft-postgres"]' 'EXPOSE 5432' \
  'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

build weft-runtime:bookworm "apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    ca-certificates tcpdump >/dev/null
  tcpdump --version | head -1" \
  'CMD ["weft", "--help"]'
