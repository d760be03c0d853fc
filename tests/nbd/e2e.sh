#!/usr/bin/env bash
# End to end through real kernels and tools: raidkit's NBD server -> nbdfuse (FUSE file) ->
# losetup (loop device) -> mkfs.ext4 -> mount -> write files -> umount -> e2fsck -fn ->
# mount again -> checksums; then SIGTERM the server, which must flush and exit 0.
#
#   tests/nbd/e2e.sh [memory|file]     (default: both)
#
# Needs root, /dev/fuse and loop devices. Exit codes: 0 pass, 1 fail, 2 cannot run here.
# The server is the raidkit-nbd `serve` example; arrays will be added as a third kind.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$#" -gt 0 ]; then kinds=("$@"); else kinds=(memory file); fi

if [ "$(id -u)" -ne 0 ]; then echo "e2e.sh: needs root (loop devices, mount)"; exit 2; fi
if [ ! -e /dev/fuse ]; then echo "e2e.sh: needs /dev/fuse"; exit 2; fi
missing=()
for pair in nbdfuse:nbdfuse fusermount3:fuse3 losetup:mount mkfs.ext4:e2fsprogs e2fsck:e2fsprogs sha256sum:coreutils; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "e2e.sh: missing tools; apt-get install ${missing[*]}"; exit 2
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release -q -p raidkit-nbd --example serve
serve="$CARGO_TARGET_DIR/release/examples/serve"

work=$(mktemp -d /tmp/raidkit-nbd-e2e.XXXXXX)
server_pid=""; fuse_mounted=""; loop=""; mounted=""
cleanup() {
    set +e
    [ -n "$mounted" ] && umount "$work/mnt" 2>/dev/null
    [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null
    [ -n "$fuse_mounted" ] && fusermount3 -u "$work/fuse" 2>/dev/null
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

wait_for() { # path, what
    for _ in $(seq 200); do [ -e "$1" ] && return 0; sleep 0.05; done
    echo "e2e.sh: $2 did not appear"; exit 1
}

run_kind() {
    local kind=$1 size_mib=256
    echo "== $kind export"
    mkdir -p "$work/fuse" "$work/mnt"
    rm -f "$work/nbd.sock" "$work/nbdfuse.pid"
    case "$kind" in
        memory) "$serve" --socket "$work/nbd.sock" --memory "disk=${size_mib}M" & ;;
        file)
            truncate -s "${size_mib}M" "$work/disk.img"
            "$serve" --socket "$work/nbd.sock" --file "disk=$work/disk.img" & ;;
        *) echo "e2e.sh: unknown kind $kind"; exit 2 ;;
    esac
    server_pid=$!
    wait_for "$work/nbd.sock" "server socket"

    nbdfuse -P "$work/nbdfuse.pid" "$work/fuse/disk" --unix "$work/nbd.sock" &
    wait_for "$work/nbdfuse.pid" "nbdfuse"
    fuse_mounted=1
    wait_for "$work/fuse/disk" "nbdfuse file"

    loop=$(losetup --find --show "$work/fuse/disk")
    mkfs.ext4 -q -F "$loop"
    mount "$loop" "$work/mnt"; mounted=1
    mkdir -p "$work/mnt/dir/sub"
    for i in $(seq 1 24); do
        head -c $(( (i * 37 % 500 + 1) * 4096 + i )) /dev/urandom > "$work/mnt/dir/file$i"
    done
    head -c $((20 << 20)) /dev/urandom > "$work/mnt/dir/sub/big"
    (cd "$work/mnt" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$work/sums"
    umount "$work/mnt"; mounted=""
    e2fsck -fn "$loop"
    mount -o ro "$loop" "$work/mnt"; mounted=1
    (cd "$work/mnt" && sha256sum --quiet -c "$work/sums")
    umount "$work/mnt"; mounted=""
    losetup -d "$loop"; loop=""
    fusermount3 -u "$work/fuse"; fuse_mounted=""
    sleep 0.2

    kill -TERM "$server_pid"
    if ! wait "$server_pid"; then echo "e2e.sh: server did not shut down cleanly"; exit 1; fi
    server_pid=""
    if [ "$kind" = file ]; then
        # The flushed image file holds the same file system.
        e2fsck -fn "$work/disk.img"
        rm -f "$work/disk.img"
    fi
    echo "== $kind export: ok ($(wc -l < "$work/sums") files verified)"
}

for kind in "${kinds[@]}"; do run_kind "$kind"; done
echo "e2e.sh: pass"
