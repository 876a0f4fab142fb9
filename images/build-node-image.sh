#!/usr/bin/env bash
# Builds the weft node image: a minimal Debian bookworm with openssh-server, python3, iproute2 and
# procps, imported into the local Docker Engine with sshd as its command. No registry is needed:
# the root file system comes from debootstrap (Debian packages only).
#
# Usage: images/build-node-image.sh [--force] [--cm | --docker] [NAME]  (NAME defaults to
#        weft-node:bookworm, weft-node:bookworm-cm with --cm, weft-node:bookworm-docker with --docker)
# Idempotent: does nothing when NAME already exists, unless --force. --cm and --docker build a
# variant FROM the base image (built first if missing), keyed by a hash of this script (label
# weft.build), so a changed script rebuilds it and an unchanged one does nothing:
#   --cm      the configuration-management tools: ansible-core and puppet-agent from Debian;
#   --docker  Debian's docker CLI (the `docker` binary of the docker.io package, without the engine:
#             a node runs `docker` against an engine whose socket is mounted into it).
set -euo pipefail

force=0
variant=
name=
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --cm) variant=cm ;;
    --docker) variant=docker ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) name="$arg" ;;
  esac
done

# ---- the variants (--cm, --docker) ----
# No Dockerfile and no registry: a container of the base image installs the packages, and is
# committed with the base image's command and a label holding this script's hash.
if [[ -n $variant ]]; then
  name=${name:-weft-node:bookworm-$variant}
  base=${WEFT_NODE_BASE:-weft-node:bookworm}
  hash=$(sha256sum "$0" | cut -c1-16)
  have=$(docker image inspect -f '{{index .Config.Labels "weft.build"}}' "$name" 2>/dev/null || true)
  if [[ $force -eq 0 && "$have" == "$hash" ]]; then
    echo "image $name exists for this script ($hash; use --force to rebuild)"
    exit 0
  fi
  docker image inspect "$base" >/dev/null 2>&1 || "$0" "$base"
  case $variant in
    cm) install='apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        ansible-core puppet-agent >/dev/null
      ansible-playbook --version | head -1
      puppet --version' ;;
    docker) install='apt-get update -qq
      cd /tmp && apt-get download -qq docker.io 2>/dev/null
      dpkg-deb --fsys-tarfile docker.io_*.deb | tar -x -C / ./usr/bin/docker
      rm -f docker.io_*.deb
      docker --version' ;;
  esac
  start=$(date +%s)
  cid=$(docker create "$base" sh -c "set -e
    $install
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/*")
  trap 'docker rm -f "$cid" >/dev/null 2>&1 || true' EXIT
  docker start -a "$cid"
  [[ $(docker inspect -f '{{.State.ExitCode}}' "$cid") == 0 ]] || { echo "installing failed" >&2; exit 1; }
  docker commit \
    --change 'CMD ["/usr/local/sbin/weft-sshd"]' \
    --change "LABEL weft.build=$hash" \
    "$cid" "$name" >/dev/null
  echo "built $name ($hash) in $(( $(date +%s) - start ))s"
  exit 0
fi

name=${name:-weft-node:bookworm}

if [[ $force -eq 0 ]] && docker image inspect "$name" >/dev/null 2>&1; then
  echo "image $name exists (use --force to rebuild)"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is required (apt-get install debootstrap)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "debootstrap needs root" >&2; exit 1; }

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
dir=$(mktemp -d /tmp/weft-node-rootfs.XXXXXX)
trap 'rm -rf "$dir"' EXIT

start=$(date +%s)
debootstrap --variant=minbase --include=openssh-server,python3,iproute2,procps,sudo \
  bookworm "$dir" "$mirror" >"$dir.log" 2>&1 || { tail -30 "$dir.log" >&2; rm -f "$dir.log"; exit 1; }
rm -f "$dir.log"

# Host keys are generated when a container starts (below), so each container has its own.
rm -f "$dir"/etc/ssh/ssh_host_*
mkdir -p "$dir/run/sshd" "$dir/root/.ssh"
chmod 700 "$dir/root/.ssh"
cat >"$dir/etc/ssh/sshd_config.d/weft.conf" <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AcceptEnv WEFT_*
HostKey /etc/ssh/ssh_host_ed25519_key
CONF
# The entry point: a host key for this container (ed25519 only: an RSA key takes most of a second
# to make, and every node starts with this), an authorized key from $AUTHORIZED_KEY, then sshd.
cat >"$dir/usr/local/sbin/weft-sshd" <<'SH'
#!/bin/sh
set -e
[ -f /etc/ssh/ssh_host_ed25519_key ] ||
  ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
mkdir -p /run/sshd /root/.ssh
if [ -n "$AUTHORIZED_KEY" ]; then
  printf '%s\n' "$AUTHORIZED_KEY" >> /root/.ssh/authorized_keys
  chmod 600 /root/.ssh/authorized_keys
fi
exec /usr/sbin/sshd -D -e "$@"
SH
chmod 755 "$dir/usr/local/sbin/weft-sshd"
# Slim the image: apt lists, caches, docs.
rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/usr/share/doc/* "$dir"/usr/share/man/*

tar -C "$dir" -c . | docker import \
  --change 'CMD ["/usr/local/sbin/weft-sshd"]' \
  --change 'EXPOSE 22' \
  - "$name" >/dev/null
echo "built $name in $(( $(date +%s) - start ))s"
