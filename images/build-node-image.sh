#!/usr/bin/env bash
# Builds the weft node image: a minimal Debian bookworm with openssh-server, python3, iproute2 and
# procps, imported into the local Docker Engine with sshd as its command. No registry is needed:
# the root file system comes from debootstrap (Debian packages only).
#
# Usage: images/build-node-image.sh [--force] [NAME]     (NAME defaults to weft-node:bookworm)
# Idempotent: does nothing when NAME already exists, unless --force.
set -euo pipefail

force=0
name=weft-node:bookworm
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) name="$arg" ;;
  esac
done

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
