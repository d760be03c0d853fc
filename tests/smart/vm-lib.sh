# shellcheck shell=bash
# The VM the SMART tests share (sourced by tests/smart/capture.sh and tests/smart/e2e.sh).
#
# A qemu VM (software emulation, TCG) with an IDE disk (/dev/sda: ide-hd on the PIIX IDE
# controller, serial RKSMART0001) and an NVMe disk (/dev/nvme0n1, serial RKNVME0001), booting
# Debian's kernel into a busybox initramfs that holds the given binaries (with their shared
# libraries) and the ATA/SCSI/NVMe modules. The VM's /init prints each command's output between
# marker lines on the serial console; the host reads them back with vm_extract.
#
# Reuses the md oracle's cache (tests/md-oracle/run): the same qemu (installed, or unpacked into
# the cache when qemu-system-x86 conflicts with installed packages) and the same Debian kernel
# package (unpacked into the cache, never installed).
#
# The caller sets vm_tag (its log prefix) before sourcing, then calls:
#   vm_host_setup [CMD:PACKAGE...]   install busybox-static, kmod, cpio, xz-utils, smartmontools
#                                    and the packages of the given commands when missing; sets
#                                    busybox, smartctl_bin, smartctl_version, smartctl_files
#                                    (smartctl and its drive database, for vm_build_initramfs)
#   vm_find_qemu                     sets qemu, qemu_args, qemu_version
#   vm_find_kernel                   sets kpkg, kver, krel, kernel, moddir
#   vm_resolve_modules               sets load_order (modules.dep order, dependencies first)
#   vm_init_script BODY              prints the VM's /init: the shared start, BODY, the shared end
#   vm_build_initramfs DIR INIT FILE[=DEST]...
#                                    sets initrd=DIR/initramfs-HASH.cpio (built unless there)
#   vm_boot WORK SIZE                boots the VM with two SIZE disks in WORK; WORK/console.txt;
#                                    status 1 when the VM did not finish
#   vm_console_tail WORK [LINES]     the console's last lines and qemu's messages, on stderr
#   vm_extract WORK NAME FILE        writes NAME's output to FILE; prints its exit status

log() { echo "$vm_tag: $*" >&2; }
die() { echo "$vm_tag: error: $*" >&2; exit 1; }

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
vm_host_setup() {
    local need=() pair f
    command -v smartctl > /dev/null 2>&1 || [ -x /usr/sbin/smartctl ] || need+=(smartmontools)
    [ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || need+=(busybox-static)
    command -v depmod > /dev/null 2>&1 || need+=(kmod)
    command -v cpio > /dev/null 2>&1 || need+=(cpio)
    command -v xz > /dev/null 2>&1 || need+=(xz-utils)
    for pair in "$@"; do
        command -v "${pair%%:*}" > /dev/null 2>&1 || need+=("${pair#*:}")
    done
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
    # smartctl and its drive database, for vm_build_initramfs.
    smartctl_files=("$smartctl_bin=/usr/sbin/smartctl")
    for f in /var/lib/smartmontools/drivedb/drivedb.h /usr/share/smartmontools/drivedb.h; do
        if [ -f "$f" ]; then smartctl_files+=("$f"); fi
    done
}

# ---------------------------------------------------------------- qemu (as tests/md-oracle/run)
vm_find_qemu() {
    local q sim deps qver qdir fw
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
}

# ---------------------------------------------------------------- kernel (as tests/md-oracle/run)
vm_find_kernel() {
    local kdir vmlinuz magic dec off
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
}

# ---------------------------------------------------------------- modules
# Needed: the PIIX IDE driver (ata_piix, on libata + scsi_mod), the SCSI disk driver (sd_mod;
# smartctl reaches the ATA disk through libata's SCSI-ATA translation, SG_IO on /dev/sda), ahci
# (for an AHCI controller, e.g. -machine q35), and the NVMe PCI driver (nvme, on nvme-core).
# Whatever is built into the kernel (modules.builtin) is skipped. The optional ones are the
# generic CRC implementations the t10-pi library asks the crypto API for.
vm_want_modules="ata_piix ahci sd_mod nvme"
vm_optional_modules="crc64_rocksoft_generic crct10dif_generic"
vm_resolve_modules() {
    # Resolve modules.dep into a load order (dependencies first), as modprobe would.
    load_order=$(awk -v want="$vm_want_modules" -v optional="$vm_optional_modules" '
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
}

# ---------------------------------------------------------------- /init of the VM
# busybox sh. Mounts proc, sysfs, devtmpfs and a tmpfs on /tmp, loads the modules, waits for
# /dev/sda and /dev/nvme0n1, runs BODY and powers off. In BODY, `marked NAME CMD...` runs CMD
# and prints its standard output between "@@RKSMART BEGIN NAME" and "@@RKSMART END NAME <exit
# status>" lines, then its standard error as "@@RKSMART STDERR NAME: <line>" lines; lines of
# BODY's own start with "smart-vm:". "@@RKSMART DONE" ends a complete run.
vm_init_script() {
    cat << 'EOF'
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
marked() {
    name=$1; shift
    # The empty line ends whatever the console line holds (e.g. SeaBIOS' last message).
    echo
    echo "@@RKSMART BEGIN $name"
    "$@" 2> /tmp/marked.err
    rc=$?
    echo
    echo "@@RKSMART END $name $rc"
    sed "s/^/@@RKSMART STDERR $name: /" /tmp/marked.err
}
EOF
    printf '%s\n' "$1"
    cat << 'EOF'
echo "@@RKSMART DONE"
sync
poweroff -f
EOF
}

# ---------------------------------------------------------------- initramfs
# vm_build_initramfs DIR INIT FILE[=DEST]...: busybox, INIT as /init, the modules of
# load_order, and each FILE at DEST (by default its own path) with the shared libraries ldd
# names for it. Named by the hash of its content: built only when DIR does not hold it yet.
vm_build_initramfs() {
    local dir=$1 init=$2 spec src dest libs="" ikey stage applet f m base
    shift 2
    local -a srcs=() dests=()
    for spec in "$@"; do
        src=${spec%%=*} dest=${spec#*=}
        [ -e "$src" ] || die "initramfs: $src does not exist"
        srcs+=("$src") dests+=("$dest")
        libs="$libs $(ldd "$src" 2>/dev/null | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}' || true)"
    done
    # shellcheck disable=SC2086 # libs is a list of paths
    libs=$(printf '%s\n' $libs | sort -u)
    # shellcheck disable=SC2086 # libs is a list of paths
    ikey=$( (echo "$init"; printf '%s\n' "${dests[@]}"; cat "$busybox" "${srcs[@]}" $libs;
             echo "$kpkg $kver $load_order") | sha256sum | cut -c1-16)
    initrd="$dir/initramfs-$ikey.cpio"
    if [ -s "$initrd" ]; then return 0; fi
    log "building initramfs $ikey"
    stage=$(mktemp -d)
    mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc,modules}
    cp "$busybox" "$stage/bin/busybox"
    for applet in $("$busybox" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$stage/bin/$applet"
    done
    for f in $libs; do
        mkdir -p "$stage$(dirname "$f")"
        cp -L "$f" "$stage$f"
    done
    for ((f = 0; f < ${#srcs[@]}; f++)); do
        mkdir -p "$stage$(dirname "${dests[f]}")"
        cp -L "${srcs[f]}" "$stage${dests[f]}"
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
    printf '%s\n' "$init" > "$stage/init" && chmod 755 "$stage/init"
    (cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$initrd.tmp"
    mv "$initrd.tmp" "$initrd"
    rm -rf "$stage"
}

# ---------------------------------------------------------------- boot the VM
# Machine "pc" (i440fx): its built-in PIIX3 IDE controller takes the ide-hd disk (ata_piix in
# the guest); the nvme device sits on the PCI bus. Sparse raw images of SIZE (truncate's
# syntax). Gives up after vm_timeout seconds (900 unless the caller sets it).
vm_boot() {
    local work=$1 size=$2 t_vm
    truncate -s "$size" "$work/ata.img" "$work/nvme.img"
    log "booting the VM ($qemu_version, kernel $kpkg $kver, TCG)"
    t_vm=$(date +%s)
    timeout "${vm_timeout:-900}" "$qemu" -nodefaults -nographic -no-reboot \
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
    grep -q '^@@RKSMART DONE' "$work/console.txt"
}

vm_console_tail() {
    local work=$1 lines=${2:-30}
    log "last console lines:"
    tail -n "$lines" "$work/console.txt" >&2 || true
    cat "$work/qemu.log" >&2 || true
}

# vm_extract WORK NAME FILE: the output printed between the markers of NAME; prints its exit
# status (nothing when NAME's markers are missing).
vm_extract() {
    local work=$1 name=$2 file=$3
    awk -v name="$name" -v file="$file" '
        $0 == "@@RKSMART BEGIN " name { on = 1; printf "" > file; next }
        on && index($0, "@@RKSMART END " name " ") == 1 { on = 0; print $4; exit }
        on { print >> file }
    ' "$work/console.txt"
}
