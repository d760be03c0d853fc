# Functions for md oracle job scripts (sourced by /init inside the VM; busybox sh).
#
# A job script is a list of calls to the oracle_* functions below. Each call appends result
# records to /tmp/results, one per line: "<array-name> <key> <value...>". The host reads the
# records back from the rk-out disk (see crates/oracle/src/records.rs). Member disks are named
# by their virtio serial, never by /dev/vdX order, so a job is independent of PCI slot order.
#
# Scenario types are sequences of these calls:
#   md -> raidkit:  oracle_create, oracle_write..., oracle_report
#   raidkit -> md:  oracle_assemble, oracle_report (members prepared on the host)

RESULTS=/tmp/results

emit() { echo "$*" >> "$RESULTS"; }

# stamp NAME STEP: record the VM's uptime after a step (for the timing summary on the host).
stamp() { emit "$1 time $2 $(cut -d' ' -f1 /proc/uptime)"; }

# dev_of SERIAL: print /dev/vdX of the virtio disk with that serial.
dev_of() {
    for d in /sys/block/vd*; do
        [ -e "$d/serial" ] || continue
        if [ "$(cat "$d/serial")" = "$1" ]; then
            echo "/dev/${d##*/}"
            return 0
        fi
    done
    return 1
}

# devs_of SERIAL...: the /dev paths, in order; records an error for a missing one.
devs_of() {
    name=$1
    shift
    list=""
    for s in "$@"; do
        if ! d=$(dev_of "$s"); then
            emit "$name error member disk $s not found"
            return 1
        fi
        list="$list $d"
    done
    echo "$list"
}

# oracle_create NAME MD LEVEL LAYOUT CHUNK_KIB SERIAL...   (LAYOUT, CHUNK_KIB: "-" = md default)
# Members start all-zero, so --assume-clean is truthful for every level (zero data has zero
# parity and identical mirrors); the check in oracle_report confirms it.
oracle_create() {
    name=$1 md=$2 level=$3 layout=$4 chunk=$5
    shift 5
    emit "$name begin create"
    stamp "$name" begin
    devs=$(devs_of "$name" "$@") || return 1
    set -- --create "/dev/$md" --run --metadata=1.2 --level="$level" --raid-devices=$# --assume-clean
    [ "$layout" != - ] && set -- "$@" --layout="$layout"
    [ "$chunk" != - ] && set -- "$@" --chunk="$chunk"
    # shellcheck disable=SC2086 # devs is a list of /dev paths without spaces
    if ! mdadm "$@" $devs > /tmp/mdadm.log 2>&1; then
        emit "$name error mdadm --create failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
        return 1
    fi
}

# oracle_assemble NAME MD SERIAL...: assemble existing members (prepared on the host).
oracle_assemble() {
    name=$1 md=$2
    shift 2
    emit "$name begin assemble"
    devs=$(devs_of "$name" "$@") || return 1
    # shellcheck disable=SC2086
    if ! mdadm --assemble "/dev/$md" --run $devs > /tmp/mdadm.log 2>&1; then
        emit "$name error mdadm --assemble failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
        return 1
    fi
}

# oracle_write NAME MD SEED OFFSET LEN: write the rkpattern stream; LEN "rest" = to the end.
oracle_write() {
    name=$1 md=$2 seed=$3 off=$4 len=$5
    [ -b "/dev/$md" ] || return 1
    size=$(blockdev --getsize64 "/dev/$md")
    [ "$len" = rest ] && len=$((size - off))
    if [ $((off + len)) -gt "$size" ]; then
        emit "$name error write $off+$len beyond array size $size"
        return 1
    fi
    if rkpattern write "/dev/$md" "$seed" "$off" "$len"; then
        emit "$name write $seed $off $len"
        stamp "$name" "write$seed"
    else
        emit "$name error rkpattern write $seed $off $len failed"
    fi
}

# oracle_report NAME MD SERIAL...: size, sha256 of the whole array, md's geometry from sysfs,
# md's own parity/mirror check, then stop the array and record mdadm --examine of each member.
oracle_report() {
    name=$1 md=$2
    shift 2
    if [ -b "/dev/$md" ]; then
        sys=/sys/block/$md/md
        emit "$name size_bytes $(blockdev --getsize64 "/dev/$md")"
        emit "$name sha256 $(sha256sum "/dev/$md" | cut -d' ' -f1)"
        stamp "$name" sha256
        for f in level layout chunk_size raid_disks component_size; do
            [ -r "$sys/$f" ] && emit "$name sysfs $f $(cat "$sys/$f")"
        done
        if [ -w "$sys/sync_action" ] && [ "$(cat "$sys/level")" != raid0 ]; then
            echo check > "$sys/sync_action"
            sleep 0.2
            mdadm --wait "/dev/$md" > /dev/null 2>&1
            while [ "$(cat "$sys/sync_action")" != idle ]; do sleep 0.2; done
            emit "$name mismatch_cnt $(cat "$sys/mismatch_cnt")"
            stamp "$name" check
        fi
        sync
        mdadm --stop "/dev/$md" > /dev/null 2>&1 || emit "$name error mdadm --stop failed"
    fi
    # One mdadm --examine for all members; its "/dev/vdX:" headers say whose lines follow.
    map="" devs=""
    for s in "$@"; do
        d=$(dev_of "$s") || continue
        map="$map $d:=$s"
        devs="$devs $d"
    done
    serial=""
    # shellcheck disable=SC2086 # devs is a list of /dev paths without spaces
    mdadm --examine $devs 2>&1 | while IFS= read -r line; do
        case "$line" in
            /dev/vd*:)
                for pair in $map; do
                    [ "${pair%%=*}" = "$line" ] && serial=${pair#*=}
                done ;;
        esac
        emit "$name examine ${serial:-unknown} $line"
    done
    stamp "$name" examine
    emit "$name end"
}
