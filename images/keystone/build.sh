#!/usr/bin/env bash
# Builds the Keystone test image: a real Keystone v3 (Debian bookworm's python3-keystone, OpenStack
# Zed) on the weft node image, with a SQLite database, fernet tokens and a bootstrapped admin
# (user admin, password weft-admin, project admin, region RegionOne). For tests only.
#
# The tag is weft-keystone:<first 12 hex digits of this script's sha256>, so a changed script
# builds a new image and an unchanged one is built once per machine. The tests compute the same tag.
#
# Usage: images/keystone/build.sh [--print-name]
#   --print-name   print the tag and exit
# Needs the node image (images/build-node-image.sh) and network access for apt (about 3.5 minutes).
#
# Run: docker run -d --network host -e KEYSTONE_PORT=5000 [-e KEYSTONE_TOKEN_EXPIRATION=SECONDS] TAG
# serves Keystone on 127.0.0.1:$KEYSTONE_PORT (default 5000; tokens last 3600 s by default).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
hash=$(sha256sum "$here/build.sh" | cut -c1-12)
name="weft-keystone:$hash"
base=${WEFT_NODE_IMAGE:-weft-node:bookworm}
if [[ ${1:-} == --print-name ]]; then
  echo "$name"
  exit 0
fi
if docker image inspect "$name" >/dev/null 2>&1; then
  echo "image $name exists"
  exit 0
fi
docker image inspect "$base" >/dev/null 2>&1 ||
  { echo "the base image $base is missing: run images/build-node-image.sh first" >&2; exit 1; }

start=$(date +%s)
box="weft-keystone-build-$$"
trap 'docker rm -f "$box" >/dev/null 2>&1 || true' EXIT
# The setup runs inside a container of the node image; the result is committed as the image.
docker run -i --name "$box" "$base" bash -s >"/tmp/$box.log" 2>&1 <<'SETUP' ||
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3-keystone sqlite3 >/dev/null
mkdir -p /etc/keystone /var/lib/keystone
cat >/etc/keystone/keystone.conf <<'CONF'
[DEFAULT]
use_stderr = true
[database]
connection = sqlite:////var/lib/keystone/keystone.db
[token]
provider = fernet
expiration = 3600
[fernet_tokens]
key_repository = /etc/keystone/fernet-keys/
[credential]
key_repository = /etc/keystone/credential-keys/
CONF
cd /var/lib/keystone
keystone-manage db_sync
keystone-manage fernet_setup --keystone-user root --keystone-group root
keystone-manage credential_setup --keystone-user root --keystone-group root
keystone-manage bootstrap --bootstrap-password weft-admin \
  --bootstrap-public-url http://127.0.0.1:5000/v3/ --bootstrap-region-id RegionOne
# Write-ahead logging: without it, a write in one request often waits 5 s on a read transaction
# left open on another connection and fails with "database is locked" (a 500).
sqlite3 /var/lib/keystone/keystone.db 'PRAGMA journal_mode=WAL;' >/dev/null
# The entry point: token lifetime from the environment, then the public API on loopback.
cat >/usr/local/sbin/weft-keystone <<'SH'
#!/bin/sh
set -e
sed -i "s/^expiration = .*/expiration = ${KEYSTONE_TOKEN_EXPIRATION:-3600}/" /etc/keystone/keystone.conf
cd /var/lib/keystone
exec keystone-wsgi-public --host "${KEYSTONE_HOST:-127.0.0.1}" --port "${KEYSTONE_PORT:-5000}"
SH
chmod 755 /usr/local/sbin/weft-keystone
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/*
SETUP
  { tail -30 "/tmp/$box.log" >&2; rm -f "/tmp/$box.log"; exit 1; }
rm -f "/tmp/$box.log"
docker commit --change 'CMD ["/usr/local/sbin/weft-keystone"]' --change 'EXPOSE 5000' \
  "$box" "$name" >/dev/null
echo "built $name in $(( $(date +%s) - start ))s"
