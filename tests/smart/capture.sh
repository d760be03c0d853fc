#!/usr/bin/env bash
# Capture real `smartctl --json` output as test fixtures for the SMART parser.
#
#   tests/smart/capture.sh            write the fixtures into crates/disk/tests/data/
#   tests/smart/capture.sh --out DIR  write them into DIR instead
#   tests/smart/capture.sh --keep     keep the work directory (images, console log)
#
# Real smartmontools (Debian's smartctl, copied into a small initramfs) runs inside a qemu VM
# (software emulation, TCG) against qemu's emulated disks:
#   smartctl-qemu-ata.json           smartctl --json=o -a /dev/sda      (ide-hd on the PIIX IDE
#                                                                        controller, ata_piix)
#   smartctl-qemu-ata-selftest.json  the same after `smartctl -t short /dev/sda` has finished
#   smartctl-qemu-nvme.json          smartctl --json=o -a /dev/nvme0n1  (qemu's nvme device)
# and on the host, against a loop device (no SMART at all; smartctl's error report):
#   smartctl-loop.json               smartctl --json=o -a /dev/loopN
# Each file is smartctl's output unchanged; its exit status is in .smartctl.exit_status (the
# script also checks it against the status the shell saw).
#
# The VM (qemu and the kernel from the md oracle's cache, the initramfs, the two disks) is
# tests/smart/vm-lib.sh, shared with tests/smart/e2e.sh. The initramfs (busybox, smartctl and
# its shared libraries, the ATA/SCSI/NVMe modules) is cached by content hash. Running it again
# rewrites the same files (timestamps and the like inside the JSON change).
set -euo pipefail
# One block, so bash parses the whole script before running it.
{

t_start=$(date +%s)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out="$repo/crates/disk/tests/data"
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift ;;
        --keep) keep=1 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "smart-capture: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

vm_tag=smart-capture
vm_timeout=${SMART_CAPTURE_VM_TIMEOUT:-900}
# shellcheck source=tests/smart/vm-lib.sh
. "$here/vm-lib.sh"

vm_host_setup python3:python3 losetup:mount
vm_find_qemu
vm_find_kernel
vm_resolve_modules

# ---------------------------------------------------------------- /init of the VM
# Runs smartctl and prints each output between markers on the serial console (vm-lib.sh).
read -r -d '' vm_body << 'EOF' || true
marked ata smartctl --json=o -a /dev/sda
marked nvme smartctl --json=o -a /dev/nvme0n1
# Short self-test on the ATA disk, then wait (at most 5 minutes) until the drive no longer
# reports one in progress.
marked ata-selftest-start smartctl --json=o -t short /dev/sda
i=0
while [ "$i" -lt 60 ]; do
    sleep 5
    i=$((i + 1))
    smartctl -c /dev/sda | grep -q 'in progress' || break
done
echo "smart-vm: self-test wait $((i * 5)) s"
marked ata-selftest smartctl --json=o -a /dev/sda
EOF

# ---------------------------------------------------------------- initramfs (cached)
vm_build_initramfs "$cache" "$(vm_init_script "$vm_body")" "${smartctl_files[@]}"

# ---------------------------------------------------------------- work directory
work=$(mktemp -d "${TMPDIR:-/tmp}/smart-capture.XXXXXX")
loopdev=""
cleanup() {
    if [ -n "$loopdev" ]; then losetup -d "$loopdev" 2>/dev/null || true; fi
    if [ "$keep" -eq 1 ]; then log "kept work directory $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---------------------------------------------------------------- boot the VM
if ! vm_boot "$work" 64M; then
    log "the VM did not finish"
    vm_console_tail "$work" 30
    die "no capture"
fi
grep '^smart-vm:' "$work/console.txt" >&2 || true
grep '^@@RKSMART STDERR' "$work/console.txt" >&2 || true

# check FILE STATUS: FILE parses as JSON and its .smartctl.exit_status is STATUS.
check() {
    python3 - "$1" "$2" << 'PY'
import json, sys
path, status = sys.argv[1], int(sys.argv[2])
with open(path) as f:
    doc = json.load(f)
got = doc.get("smartctl", {}).get("exit_status")
if got != status:
    sys.exit(f"{path}: smartctl.exit_status {got}, the shell saw {status}")
PY
}

declare -A status=()
for pair in ata:smartctl-qemu-ata.json nvme:smartctl-qemu-nvme.json \
            ata-selftest-start:- ata-selftest:smartctl-qemu-ata-selftest.json; do
    name=${pair%%:*} file=${pair#*:}
    if [ "$file" = - ]; then
        # The `smartctl -t short` output itself is not a fixture; kept only with --keep.
        file="$work/$name.json" dest=""
    else
        dest="$out/$file" file="$work/$file"
    fi
    rc=$(vm_extract "$work" "$name" "$file")
    [ -n "$rc" ] || die "no output for $name in the console log"
    check "$file" "$rc" || die "$name: not the JSON smartctl printed"
    if [ -n "$dest" ]; then cp "$file" "$dest"; fi
    status[$name]=$rc
done

# ---------------------------------------------------------------- host: a loop device
# A loop device has no SMART; smartctl's JSON error report is the fixture.
truncate -s 64M "$work/loop.img"
if loopdev=$(losetup -f --show "$work/loop.img" 2>/dev/null); then
    rc=0
    "$smartctl_bin" --json=o -a "$loopdev" > "$work/smartctl-loop.json" || rc=$?
    losetup -d "$loopdev" && loopdev=""
    check "$work/smartctl-loop.json" "$rc" || die "loop: not the JSON smartctl printed"
    cp "$work/smartctl-loop.json" "$out/smartctl-loop.json"
    status[loop]=$rc
else
    log "losetup failed: no loop device capture (smartctl-loop.json left as it was)"
fi

log "$smartctl_version"
log "guest kernel $kpkg $kver ($krel); host kernel $(uname -r)"
for name in ata nvme ata-selftest-start ata-selftest loop; do
    if [ -n "${status[$name]:-}" ]; then log "exit status $name: ${status[$name]}"; fi
done
log "wrote $out/smartctl-{qemu-ata,qemu-ata-selftest,qemu-nvme,loop}.json in $(( $(date +%s) - t_start )) s"
exit 0
}
