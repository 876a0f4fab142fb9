#!/usr/bin/env bash
# Makes, in this directory, what docker-compose.yml mounts: a CA (tls/ca.pem, its key
# tls/ca-key.pem), a server certificate for each of postgres, weft-a and weft-b (their names on the
# network, in the SAN), a certificate for each provisioner (presented to the servers and served by
# its own API, under the name the servers call it by: provisioners), the provisioner token, the
# master key of the secrets sealed in the store (secrets.key) and .env with the database password. Files that exist are kept: delete tls/ to make new certificates.
# Needs openssl. Keys are P-256; leaf certificates last 365 days, the CA ten years.
set -euo pipefail
cd "$(dirname "$0")"
umask 077
mkdir -p tls
if [[ ! -f tls/ca.pem ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -subj "/CN=weft example CA" -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout tls/ca-key.pem -out tls/ca.pem 2>/dev/null
fi

# issue NAME server|client: tls/NAME/{ca.pem, server.pem, server-key.pem} (or client.pem...).
issue() {
  local name=$1 kind=$2 dir=tls/$1 ext
  [[ -f $dir/$kind.pem ]] && return 0
  mkdir -p "$dir"
  if [[ $kind == server ]]; then
    ext="subjectAltName=DNS:$name
extendedKeyUsage=serverAuth"
  else
    ext="subjectAltName=DNS:provisioners
extendedKeyUsage=clientAuth,serverAuth"
  fi
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
    -keyout "$dir/$kind-key.pem" -out "$dir/$kind.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$kind.csr" -CA tls/ca.pem -CAkey tls/ca-key.pem -CAcreateserial \
    -days 365 -extfile <(printf '%s\n' "$ext") -out "$dir/$kind.pem" 2>/dev/null
  rm -f "$dir/$kind.csr"
  cp tls/ca.pem "$dir/ca.pem"
}
issue postgres server
issue weft-a server
issue weft-b server
issue provisioner-1 client
issue provisioner-2 client

[[ -f provisioner.token ]] || openssl rand -hex 32 >provisioner.token
[[ -f secrets.key ]] || openssl rand -hex 32 >secrets.key
[[ -f .env ]] || echo "WEFT_DB_PASSWORD=$(openssl rand -hex 16)" >.env
echo "made tls/, provisioner.token, secrets.key and .env in $(pwd)"
