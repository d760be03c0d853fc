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
# Reuses the md oracle's cache (tests/md-oracle/run): the same qemu (installed, or unpacked into
# the cache when qemu-system-x86 conflicts with installed packages) and the same Debian kernel
# package (unpacked into the cache, never installed). The initramfs (busybox, smartctl and its
# shared libraries, the ATA/SCSI/NVMe modules) is cached by content hash. Running it again
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
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "smart-capture: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

log() { echo "smart-capture: $*" >&2; }
die() { echo "smart-capture: error: $*" >&2; exit 1; }

# The md oracle's cache: its qemu and kernel are reused as they are.
oracle_cache=${XDG_CACHE_HOME:-$HOME/.cache}/raidkit/md-oracle
cache=${XDG_CACHE_HOME:-$HOME/.cache}/raidkit/smart
mkdir -p "$oracle_cache" "$cache"
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
apt_get() {
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 "$@"
}
apt_updated=0
apt_update_once() {
    if [ "$apt_updated" -eq 0 ]; then
        apt_get update -qq
        apt_updated=1
    fi
}

# ---------------------------------------------------------------- host packages
need=()
command -v smartctl > /dev/null 2>&1 || [ -x /usr/sbin/smartctl ] || need+=(smartmontools)
[ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || need+=(busybox-static)
command -v depmod > /dev/null 2>&1 || need+=(kmod)
command -v cpio > /dev/null 2>&1 || need+=(cpio)
command -v xz > /dev/null 2>&1 || need+=(xz-utils)
command -v python3 > /dev/null 2>&1 || need+=(python3)
command -v losetup > /dev/null 2>&1 || need+=(mount)
if [ "${#need[@]}" -gt 0 ]; then
    log "installing ${need[*]}"
    apt_update_once
    apt_get install -y -qq --no-install-recommends "${need[@]}" > /dev/null
fi
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || busybox=/bin/busybox
if ! file -L "$busybox" 2>/dev/null | grep -q 'statically linked' && ldd "$busybox" > /dev/null 2>&1; then
    log "installing busybox-static (the busybox found is dynamic)"
    apt_update_once
    apt_get install -y -qq --no-install-recommends busybox-static > /dev/null
    busybox=/bin/busybox
fi
smartctl_bin=$(command -v smartctl || echo /usr/sbin/smartctl)
smartctl_version=$("$smartctl_bin" --version | head -1)

# ---------------------------------------------------------------- qemu (as tests/md-oracle/run)
qemu=$(command -v qemu-system-x86_64 || true)
qemu_args=()
if [ -z "$qemu" ]; then
    for q in "$oracle_cache"/qemu/*/usr/bin/qemu-system-x86_64; do
        if [ -x "$q" ] && [ -e "${q%/usr/bin/*}/complete" ] && "$q" --version > /dev/null 2>&1; then
            qemu=$q
        fi
    done
fi
if [ -z "$qemu" ]; then
    apt_update_once
    # Install it only if apt would neither remove nor replace an installed package.
    if sim=$(apt_get install -s --no-install-recommends qemu-system-x86 2>/dev/null) \
        && ! grep -qE '^(Remv |Inst [^ ]+ \[)' <<< "$sim"; then
        log "installing qemu-system-x86"
        apt_get install -y -qq --no-install-recommends qemu-system-x86 > /dev/null
        qemu=$(command -v qemu-system-x86_64)
    else
        log "qemu-system-x86 conflicts with installed packages; unpacking it into the cache"
        deps=$(apt-cache depends qemu-system-x86 qemu-system-common | awk '/ Depends: [^<]/{print $2}' \
            | grep -v '^qemu-system-common$' | sort -u)
        # shellcheck disable=SC2086 # deps is a whitespace-separated package list
        apt_get install -y -qq --no-install-recommends $deps > /dev/null
        qver=$(apt-cache show --no-all-versions qemu-system-x86 | awk '/^Version:/{print $2}' | tr ':~' '__')
        qdir="$oracle_cache/qemu/$qver"
        rm -rf "$qdir.tmp" && mkdir -p "$qdir.tmp"
        (cd "$qdir.tmp" && apt-get download qemu-system-x86 qemu-system-common > /dev/null 2>&1 \
            && for deb in ./*.deb; do dpkg -x "$deb" .; done && rm -f ./*.deb) \
            || die "apt-get download qemu-system-x86 qemu-system-common failed"
        touch "$qdir.tmp/complete"
        rm -rf "$qdir" && mv "$qdir.tmp" "$qdir"
        qemu="$qdir/usr/bin/qemu-system-x86_64"
    fi
fi
if [[ "$qemu" == "$oracle_cache"/* ]]; then
    # An unpacked qemu takes its firmware from the installed packages.
    for fw in /usr/share/qemu /usr/share/seabios /usr/lib/ipxe/qemu; do
        if [ -d "$fw" ]; then qemu_args+=(-L "$fw"); fi
    done
fi
"$qemu" --version > /dev/null || die "qemu-system-x86_64 does not run: $qemu"
qemu_version=$("$qemu" --version | head -1)

# ---------------------------------------------------------------- kernel (as tests/md-oracle/run)
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
if [ -z "$kpkg" ]; then
    apt_update_once
    kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
fi
[ -n "$kpkg" ] || die "cannot resolve the kernel package that linux-image-amd64 depends on"
kver=$(apt-cache show --no-all-versions "$kpkg" | awk '/^Version:/{print $2}' | tr ':~' '__')
kdir="$oracle_cache/kernel/$kpkg-$kver"
if [ ! -e "$kdir/ready" ]; then
    log "fetching $kpkg $kver (apt-get download; unpacked into the cache, not installed)"
    rm -rf "$kdir" && mkdir -p "$kdir/deb"
    (cd "$kdir/deb" && apt-get download "$kpkg" > /dev/null 2>&1) || die "apt-get download $kpkg failed"
    dpkg -x "$kdir"/deb/*.deb "$kdir/root"
    rm -rf "$kdir/deb"
    krel=$(ls "$kdir/root/lib/modules")
    depmod -b "$kdir/root" "$krel"
    vmlinuz=$(ls "$kdir"/root/boot/vmlinuz-*)
    # extract-vmlinux: qemu boots the ELF directly (PVH entry), skipping the decompression.
    for magic in '\xfd7zXZ\x00' '\x1f\x8b\x08' '\x28\xb5\x2f\xfd'; do
        case "$magic" in
            '\xfd7zXZ\x00') dec="xz -dc" ;;
            '\x1f\x8b\x08') dec="gzip -dc" ;;
            *) dec="zstd -dc" ;;
        esac
        for off in $(LC_ALL=C grep -aboP "$magic" "$vmlinuz" | cut -d: -f1 | head -5); do
            tail -c +$((off + 1)) "$vmlinuz" | $dec > "$kdir/vmlinux" 2>/dev/null || true
            if [ "$(head -c 4 "$kdir/vmlinux" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; then
                break 2
            fi
            rm -f "$kdir/vmlinux"
        done
    done
    cp "$vmlinuz" "$kdir/vmlinuz"
    touch "$kdir/ready"
fi
krel=$(ls "$kdir/root/lib/modules")
kernel="$kdir/vmlinuz"
if [ -s "$kdir/vmlinux" ]; then kernel="$kdir/vmlinux"; fi
moddir="$kdir/root/lib/modules/$krel"

# ---------------------------------------------------------------- modules
# Needed: the PIIX IDE driver (ata_piix, on libata + scsi_mod), the SCSI disk driver (sd_mod;
# smartctl reaches the ATA disk through libata's SCSI-ATA translation, SG_IO on /dev/sda), ahci
# (for an AHCI controller, e.g. -machine q35), and the NVMe PCI driver (nvme, on nvme-core).
# Whatever is built into the kernel (modules.builtin) is skipped. The optional ones are the
# generic CRC implementations the t10-pi library asks the crypto API for.
want_modules="ata_piix ahci sd_mod nvme"
optional_modules="crc64_rocksoft_generic crct10dif_generic"
# Resolve modules.dep into a load order (dependencies first), as modprobe would.
load_order=$(awk -v want="$want_modules" -v optional="$optional_modules" '
    function norm(p,   b) { b = p; sub(/.*\//, "", b); sub(/\.ko.*/, "", b); gsub(/-/, "_", b); return b }
    function visit(n, opt,   k, parts, i) {
        if (n in seen) return; seen[n] = 1
        if (!(n in path)) {
            if (!(n in builtin) && !opt) missing = missing " " n
            return
        }
        k = split(deps[n], parts, " ")
        for (i = k; i >= 1; i--) visit(norm(parts[i]), 0)
        order[++cnt] = path[n]
    }
    FILENAME ~ /modules\.builtin$/ { builtin[norm($1)] = 1; next }
    { sub(/:$/, "", $1); n = norm($1); path[n] = $1; d = ""; for (i = 2; i <= NF; i++) d = d " " $i; deps[n] = d }
    END {
        w = split(want, ws, " "); for (i = 1; i <= w; i++) visit(ws[i], 0)
        w = split(optional, ws, " "); for (i = 1; i <= w; i++) visit(ws[i], 1)
        if (missing != "") { print "MISSING" missing; exit 1 }
        for (i = 1; i <= cnt; i++) print order[i]
    }' "$moddir/modules.builtin" "$moddir/modules.dep") || die "modules not found in $kpkg: $load_order"

# ---------------------------------------------------------------- /init of the VM
# busybox sh. Loads the modules, waits for /dev/sda and /dev/nvme0n1, runs smartctl and prints
# each output between "@@RKSMART BEGIN <name>" and "@@RKSMART END <name> <exit status>" lines
# on the serial console, then powers off.
read -r -d '' vm_init << 'EOF' || true
#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
# Keep kernel messages (e.g. libata reporting commands qemu rejects) off the console, so they
# cannot land in the middle of an output.
echo 1 > /proc/sys/kernel/printk
while read -r m; do
    insmod "/modules/$m" 2>/dev/null || echo "smart-vm: insmod $m failed"
done < /modules/load-order
i=0
while [ ! -b /dev/sda ] || [ ! -b /dev/nvme0n1 ] || [ ! -c /dev/nvme0 ]; do
    i=$((i + 1))
    if [ "$i" -gt 600 ]; then echo "smart-vm: /dev/sda or /dev/nvme0n1 missing"; ls /dev; break; fi
    sleep 0.1
done
capture() {
    name=$1; shift
    # The empty line ends whatever the console line holds (e.g. SeaBIOS' last message).
    echo
    echo "@@RKSMART BEGIN $name"
    smartctl "$@"
    rc=$?
    echo
    echo "@@RKSMART END $name $rc"
}
capture ata --json=o -a /dev/sda
capture nvme --json=o -a /dev/nvme0n1
# Short self-test on the ATA disk, then wait (at most 5 minutes) until the drive no longer
# reports one in progress.
capture ata-selftest-start --json=o -t short /dev/sda
i=0
while [ "$i" -lt 60 ]; do
    sleep 5
    i=$((i + 1))
    smartctl -c /dev/sda | grep -q 'in progress' || break
done
echo "smart-vm: self-test wait $((i * 5)) s"
capture ata-selftest --json=o -a /dev/sda
echo "@@RKSMART DONE"
sync
poweroff -f
EOF

# ---------------------------------------------------------------- initramfs (cached)
smartctl_libs=$(ldd "$smartctl_bin" | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}' | sort -u)
drivedb=""
for f in /var/lib/smartmontools/drivedb/drivedb.h /usr/share/smartmontools/drivedb.h; do
    if [ -f "$f" ]; then drivedb="$drivedb $f"; fi
done
# shellcheck disable=SC2086 # lists of paths
ikey=$( (echo "$vm_init"; cat "$busybox" "$smartctl_bin" $smartctl_libs $drivedb;
         echo "$kpkg $kver $load_order") | sha256sum | cut -c1-16)
initrd="$cache/initramfs-$ikey.cpio"
if [ ! -s "$initrd" ]; then
    log "building initramfs $ikey"
    stage=$(mktemp -d)
    mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc,modules}
    cp "$busybox" "$stage/bin/busybox"
    for applet in $("$busybox" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$stage/bin/$applet"
    done
    cp "$smartctl_bin" "$stage/usr/sbin/smartctl"
    for f in $smartctl_libs $drivedb; do
        mkdir -p "$stage$(dirname "$f")"
        cp -L "$f" "$stage$f"
    done
    : > "$stage/modules/load-order"
    for m in $load_order; do
        base=$(basename "$m")
        case "$base" in
            *.ko.xz) xz -dc "$moddir/$m" > "$stage/modules/${base%.xz}"; base=${base%.xz} ;;
            *.ko.zst) zstd -qdc "$moddir/$m" > "$stage/modules/${base%.zst}"; base=${base%.zst} ;;
            *.ko.gz) gzip -dc "$moddir/$m" > "$stage/modules/${base%.gz}"; base=${base%.gz} ;;
            *) cp "$moddir/$m" "$stage/modules/$base" ;;
        esac
        echo "$base" >> "$stage/modules/load-order"
    done
    printf '%s\n' "$vm_init" > "$stage/init" && chmod 755 "$stage/init"
    (cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$initrd.tmp"
    mv "$initrd.tmp" "$initrd"
    rm -rf "$stage"
fi

# ---------------------------------------------------------------- work directory
work=$(mktemp -d "${TMPDIR:-/tmp}/smart-capture.XXXXXX")
loopdev=""
cleanup() {
    if [ -n "$loopdev" ]; then losetup -d "$loopdev" 2>/dev/null || true; fi
    if [ "$keep" -eq 1 ]; then log "kept work directory $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---------------------------------------------------------------- boot the VM
# Machine "pc" (i440fx): its built-in PIIX3 IDE controller takes the ide-hd disk (ata_piix in
# the guest); the nvme device sits on the PCI bus. 64 MiB sparse raw images.
truncate -s 64M "$work/ata.img" "$work/nvme.img"
log "booting the VM ($qemu_version, kernel $kpkg $kver, TCG)"
t_vm=$(date +%s)
timeout "${SMART_CAPTURE_VM_TIMEOUT:-900}" "$qemu" -nodefaults -nographic -no-reboot \
    -machine pc -accel tcg -m 512 -smp 1 "${qemu_args[@]}" \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off" \
    -monitor none -serial "file:$work/console.log" \
    -drive "file=$work/ata.img,if=none,id=d0,format=raw" \
    -device "ide-hd,drive=d0,serial=RKSMART0001" \
    -drive "file=$work/nvme.img,if=none,id=d1,format=raw" \
    -device "nvme,drive=d1,serial=RKNVME0001" \
    < /dev/null > "$work/qemu.log" 2>&1 || true
log "VM ran $(( $(date +%s) - t_vm )) s"
tr -d '\r' < "$work/console.log" > "$work/console.txt"
if ! grep -q '^@@RKSMART DONE' "$work/console.txt"; then
    log "the VM did not finish; last console lines:"
    tail -n 30 "$work/console.txt" >&2
    cat "$work/qemu.log" >&2
    die "no capture"
fi
grep '^smart-vm:' "$work/console.txt" >&2 || true

# extract NAME FILE: the output printed between the markers of NAME; prints its exit status.
extract() {
    local name=$1 file=$2
    awk -v name="$name" -v file="$file" '
        $0 == "@@RKSMART BEGIN " name { on = 1; printf "" > file; next }
        on && index($0, "@@RKSMART END " name " ") == 1 { on = 0; print $4; exit }
        on { print >> file }
    ' "$work/console.txt"
}

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
    rc=$(extract "$name" "$file")
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
