# Functions for md oracle job scripts (sourced by /init inside the VM; busybox sh).
#
# A job script is a list of calls to the oracle_* functions below. Each call appends result
# records to /tmp/results, one per line: "<array-name> <key> <value...>". The host reads the
# records back from the rk-out disk (see crates/oracle/src/records.rs). Member disks are named
# by their virtio serial, never by /dev/vdX order, so a job is independent of PCI slot order.
#
# Scenario types are sequences of these calls:
#   md -> raidkit:  oracle_create, oracle_write..., [oracle_crash_arm,
#                   [oracle_journal_mode,] oracle_write..., [dm_drop_writes,]] oracle_report
#   raidkit -> md:  oracle_assemble, oracle_report (members prepared on the host)
#   RAID 50/60 stacks (spans=N): oracle_create_stack, oracle_write..., oracle_report_stack
#                   (md -> raidkit); oracle_assemble_stack, oracle_report_stack (raidkit -> md)
# FLAGS (oracle_create, oracle_assemble, oracle_report): "-" or a comma list of what else to
# do and record:
#   bitmap   mdadm --examine-bitmap of every member before assembly and after the stop;
#   rebuild  md resumes a recovery raidkit stopped part way: assemble read-only, record what
#            md read, start the recovery held at its first step to record where it starts
#            (sync_completed, each member's recovery_start, md_do_sync's "resuming" debug
#            message), then let it finish (resume_recovery);
#   reshape  raidkit rows: md assembles read-only, then goes on with a reshape raidkit
#            stopped part way and finishes it (finish_reshape); md rows: md's reshape is
#            stopped part way (oracle_reshape) for raidkit to go on, measured (without md's
#            check) before;
#   journal  the last serial is the array's write journal (mdadm --write-journal); md rows
#            also record mdadm --detail before the stop;
#   crash    (with journal, md rows) md runs on device-mapper maps of its devices, so that
#            oracle_crash_arm can make the members drop every write: the writes after it
#            reach only the journal, and oracle_report's stop is a crash (see there); with
#            oracle_journal_mode write-back after it, those writes stay in md's cache as
#            data-only stripes;
#   ppl      (md rows) the array is created with md's partial parity log
#            (--consistency-policy=ppl); with crash, md runs on device-mapper maps, and
#            oracle_ppl_crash_arm makes the next write miss its parity (see there).

# last_sha NAME: the sha256 recorded for NAME so far.
last_sha() { sed -n "s/^$1 sha256 //p" "$RESULTS" | tail -n 1; }

RESULTS=/tmp/results

emit() { echo "$*" >> "$RESULTS"; }

# stamp NAME STEP: record the VM's uptime after a step (for the timing summary on the host).
stamp() { emit "$1 time $2 $(cut -d' ' -f1 /proc/uptime)"; }

# serial_map: write /tmp/serials, one "SERIAL /dev/vdX" line per virtio disk. Built once (and
# again after a miss): reading a hundred sysfs files per lookup costs seconds per array in an
# emulated CPU, where every external command is a fork. Only shell builtins here.
SERIALS=/tmp/serials
serial_map() {
    : > "$SERIALS.new"
    for d in /sys/block/vd*; do
        [ -r "$d/serial" ] || continue
        s=""
        read -r s < "$d/serial"
        echo "$s /dev/${d##*/}" >> "$SERIALS.new"
    done
    mv "$SERIALS.new" "$SERIALS"
}

# dev_of SERIAL: print /dev/vdX of the virtio disk with that serial.
dev_of() {
    for attempt in 1 2; do
        if [ -s "$SERIALS" ]; then
            while read -r s d; do
                if [ "$s" = "$1" ]; then
                    echo "$d"
                    return 0
                fi
            done < "$SERIALS"
        fi
        [ "$attempt" = 1 ] && serial_map
    done
    return 1
}

# serial_of vdX: the serial of a virtio disk (reverse of dev_of).
serial_of() {
    while read -r s d; do
        if [ "$d" = "/dev/$1" ]; then
            echo "$s"
            return 0
        fi
    done < "$SERIALS"
    echo "$1"
}

# has_flag FLAGS WORD: whether the comma list FLAGS holds WORD.
has_flag() {
    case ",$1," in
        *",$2,"*) return 0 ;;
    esac
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

# oracle_create NAME MD LEVEL LAYOUT CHUNK_KIB FLAGS SERIAL...   (LAYOUT, CHUNK_KIB: "-" = md
# default; FLAGS above: with journal the last serial is the write journal, with crash every
# device is used through a device-mapper map named rk-SERIAL)
# Members start all-zero, so --assume-clean is truthful for every level (zero data has zero
# parity and identical mirrors); the check in oracle_report confirms it.
oracle_create() {
    name=$1 md=$2 level=$3 layout=$4 chunk=$5 flags=$6
    shift 6
    emit "$name begin create"
    stamp "$name" begin
    : > "/tmp/created.$name"
    dmesg -c > /dev/null 2>&1
    devs=$(devs_of "$name" "$@") || return 1
    if has_flag "$flags" crash; then
        devs=$(dm_linear "$name" "$@") || return 1
    fi
    journal=""
    if has_flag "$flags" journal; then
        # The last device is the journal; mdadm asks about a bitmap unless told (md refuses
        # a bitmap beside a journal anyway).
        for d in $devs; do journal=$d; done
        devs=${devs%" $journal"}
    fi
    n=$#
    [ -n "$journal" ] && n=$((n - 1))
    set -- --create "/dev/$md" --run --metadata=1.2 --level="$level" --raid-devices="$n" --assume-clean
    [ "$layout" != - ] && set -- "$@" --layout="$layout"
    [ "$chunk" != - ] && set -- "$@" --chunk="$chunk"
    [ -n "$journal" ] && set -- "$@" --write-journal="$journal" --bitmap=none
    has_flag "$flags" ppl && set -- "$@" --consistency-policy=ppl
    # size=KIB: each member's share (--size), room left behind the data (reshape rows).
    for f in $(echo "$flags" | tr , ' '); do
        case $f in
            size=*) set -- "$@" --size="${f#size=}" ;;
        esac
    done
    # shellcheck disable=SC2086 # devs is a list of /dev paths without spaces
    if ! mdadm "$@" $devs > /tmp/mdadm.log 2>&1; then
        emit "$name error mdadm --create failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
        return 1
    fi
}

# grow_args GROW: the mdadm options of GROW, a comma list of option=value: --option=value ...
# (but direction=, which is not mdadm's: see oracle_reshape)
grow_args() {
    for opt in $(echo "$1" | tr , ' '); do
        case $opt in
            direction=*) ;;
            *) printf ' --%s' "$opt" ;;
        esac
    done
}

# oracle_reshape NAME MD GROW PERCENT [SERIAL...]: (md rows) add the spares SERIAL... and
# reshape the array: mdadm --grow with GROW, a comma list of option=value
# (raid-devices=5,level=6,layout=NAME,chunk=KIB), each given as --option=value, without a
# backup file (mdadm moves the data offset instead). md stops once the reshape has passed
# PERCENT of each member (of the array for a RAID 10, whose reshape counts array sectors)
# (sync_max, set before: mdadm --grow leaves it alone when it moves the data offset), its
# position recorded there; the reshape is then frozen and where it stopped recorded. What md
# reads is measured before (see there); oracle_report stops the array without reading it,
# and the host goes on with the reshape with raidkit.
#
# GROW of a RAID 0 is TAKEOVER/RESHAPE: a RAID 0 has no sync_max (md gives an array one with
# redundancy) and cannot hold spares, so mdadm --grow TAKEOVER first makes it a RAID 4 or a
# RAID 5 parity-last with its parity slot empty (md's takeover, nothing else: mdadm asks md
# for the level alone), sync_max is set, and mdadm --grow RESHAPE --add SERIAL... adds the
# spares and reshapes, as mdadm's single --grow does after its takeover.
#
# GROW of a shrink (fewer members) is SHRINK/RESHAPE: mdadm --grow --array-size=KIB first
# (mdadm refuses to give up members of a larger array), then direction=backwards (written to
# sysfs reshape_direction: mdadm 4.2 sets new_offset above the data offset without it, which
# md refuses for a forward reshape, "Cannot set new_offset") and --raid-devices=N.
#
# A reshape frozen anywhere else is not safe to go on with when the number of data members
# stays (chunk, layout and level changes): md then records its position only every 10 s
# (it set its offset rule up before mdadm moved the offset) while its writes in the new
# layout go on overwriting the old one beyond that position. Seen: md froze with RAID 5 ->
# 6 recorded at 125184 sectors and the old layout overwritten up to 8064 sectors past it;
# md itself, going on from there, read the same wrong data as raidkit did.
oracle_reshape() {
    name=$1 md=$2 grow=$3 pct=$4
    shift 4
    sys=/sys/block/$md/md
    # What md reads, before the reshape: reads of the region a frozen reshape was moving
    # wait for it to move on, so nothing reads the array once it is frozen.
    md_measure "$name" "$md" reshape
    spares=""
    if [ $# -gt 0 ]; then
        spares=$(devs_of "$name" "$@") || return 1
    fi
    takeover=""
    case $grow in
        */*) takeover=${grow%%/*} grow=${grow#*/} ;;
    esac
    add=""
    if [ -n "$takeover" ]; then
        args=$(grow_args "$takeover")
        emit "$name held takeover$args"
        # shellcheck disable=SC2086 # args holds options without spaces
        if ! mdadm --grow "/dev/$md" $args > /tmp/mdadm.log 2>&1; then
            emit "$name error mdadm --grow$args failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
            emit_lines "$name" assemble_out < /tmp/mdadm.log
            return 1
        fi
        emit_lines "$name" assemble_out < /tmp/mdadm.log
        for f in level layout raid_disks degraded sync_action; do
            emit "$name held takeover_$f $(cat "$sys/$f" 2> /dev/null)"
        done
        [ -n "$spares" ] && add="--add$spares"
    elif [ -n "$spares" ]; then
        # shellcheck disable=SC2086
        if ! mdadm "/dev/$md" --add $spares > /tmp/mdadm.log 2>&1; then
            emit "$name error mdadm --add failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
            return 1
        fi
    fi
    # sync_max must be a multiple of the chunk (md's old one); md moves whole chunks of the
    # larger of the old and the new.
    chunk=$(($(cut -d' ' -f1 < "$sys/chunk_size") / 512))
    for opt in $(echo "$grow" | tr , ' '); do
        case $opt in
            chunk=*) c=$((${opt#chunk=} * 2)); [ "$c" -gt "$chunk" ] && chunk=$c ;;
        esac
    done
    level=$(cat "$sys/level")
    if [ "$level" = raid10 ]; then
        total=$(blockdev --getsz "/dev/$md")
    else
        total=$(($(cat "$sys/component_size") * 2))
    fi
    max=$((total * pct / 100 / chunk * chunk))
    args=$(grow_args "$grow")
    emit "$name held grow${args}${add:+ $add}"
    emit "$name held hold $max"
    echo "$max" > "$sys/sync_max" || emit "$name error cannot set sync_max $max"
    for opt in $(echo "$grow" | tr , ' '); do
        case $opt in
            direction=*)
                echo "${opt#direction=}" > "$sys/reshape_direction" \
                    || emit "$name error cannot set reshape_direction ${opt#direction=}"
                emit "$name held reshape_direction $(cat "$sys/reshape_direction")" ;;
        esac
    done
    # shellcheck disable=SC2086 # args and add hold options and /dev paths without spaces
    if ! mdadm --grow "/dev/$md" $args $add > /tmp/mdadm.log 2>&1; then
        emit "$name error mdadm --grow$args $add failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
        emit_lines "$name" assemble_out < /tmp/mdadm.log
        return 1
    fi
    emit_lines "$name" assemble_out < /tmp/mdadm.log
    stamp "$name" grow
    # Wait (up to 60 s) until md waits at sync_max: its last step recorded the position.
    # md's RAID 10 reshape records its position at its own checkpoints only, so sync_completed
    # stays there: it waits at sync_max once its live position (/proc/mdstat, KiB) is there,
    # or (should mdstat not say) once sync_completed has not moved for 3 s; a position md
    # recorded is one md itself goes on from after a crash.
    i=0 last="" still=0
    while [ "$i" -lt 1200 ]; do
        done_s=$(cut -d' ' -f1 < "$sys/sync_completed")
        [ "$(cat "$sys/sync_action")" = idle ] && break
        [ "$done_s" != none ] && [ "$done_s" -ge "$max" ] 2> /dev/null && break
        if [ "$level" = raid10 ]; then
            live=$(sed -n "/^$md :/,/^\$/s/.*reshape *= *[0-9.]*% (\([0-9]*\)\/.*/\1/p" /proc/mdstat)
            [ -n "$live" ] && [ $((live * 2)) -ge "$max" ] && break
            if [ "$done_s" = "$last" ]; then still=$((still + 1)); else still=0 last=$done_s; fi
            [ "$still" -ge 60 ] && break
        fi
        sleep 0.05
        i=$((i + 1))
    done
    emit "$name held waiting $(cat "$sys/sync_completed")"
    grep -A3 "^$md :" /proc/mdstat | emit_lines "$name" held_mdstat
    # mdadm --grow leaves a process behind when the level changes at the end (a RAID 0
    # growing, a RAID 4 reshape for mdadm: it makes it a RAID 0 again once sync_action is no
    # longer "reshape"). Frozen, the reshape looks over to it: it sets sync_action idle and
    # fails the members it takes for parity (seen: the spare in slot 3, "Cannot continue
    # operation (2/5 failed)"). It goes first, as on a machine stopped part way.
    for p in /proc/[0-9]*; do
        cmd=$(tr '\0' ' ' < "$p/cmdline" 2> /dev/null) || continue
        case $cmd in
            *mdadm*--grow*" /dev/$md "*)
                kill "${p#/proc/}" 2> /dev/null && emit "$name held stopped mdadm ${p#/proc/}: $cmd"
                i=0
                while [ -e "$p" ] && [ "$i" -lt 100 ]; do
                    sleep 0.05
                    i=$((i + 1))
                done ;;
        esac
    done
    echo frozen > "$sys/sync_action"
    for f in sync_action sync_completed reshape_position raid_disks level layout chunk_size; do
        emit "$name held $f $(cat "$sys/$f")"
    done
    record_sync "$name" "$md" held
    stamp "$name" reshape
}

# dm_linear NAME SERIAL...: a device-mapper map rk-SERIAL (linear, the whole disk) over each
# disk; prints their /dev/dm-N paths in order.
dm_linear() {
    name=$1
    shift
    list=""
    for s in "$@"; do
        d=$(dev_of "$s") || { emit "$name error member disk $s not found"; return 1; }
        if ! echo "0 $(blockdev --getsz "$d") linear $d 0" | dmsetup create --noudevsync "rk-$s" > /tmp/dm.log 2>&1; then
            emit "$name error dmsetup create rk-$s failed: $(tr '\n' ' ' < /tmp/dm.log)"
            return 1
        fi
        list="$list /dev/dm-$(dmsetup info -c --noheadings -o minor "rk-$s" | tr -d ' ')"
    done
    echo "$list"
}

# dm_drop_writes NAME JOURNAL_SERIAL JOURNAL_DATA_OFFSET SERIAL...: swap the maps of the
# members (every SERIAL but the journal) for dm-flakey maps that drop every write and report
# it done (reads still reach the disk), and the first JOURNAL_DATA_OFFSET sectors of the
# journal (its superblock) likewise; only the journal's log area still takes writes. md's
# superblock updates are then lost on every device alike, as in a crash. JOURNAL_SERIAL "-":
# every SERIAL drops every write.
dm_drop_writes() {
    name=$1 jserial=$2 joff=$3
    shift 3
    for s in "$@"; do
        d=$(dev_of "$s")
        sz=$(blockdev --getsz "$d")
        if [ "$s" = "$jserial" ]; then
            printf '0 %s flakey %s 0 0 1 1 drop_writes\n%s %s linear %s %s\n' \
                "$joff" "$d" "$joff" $((sz - joff)) "$d" "$joff"
        else
            echo "0 $sz flakey $d 0 0 1 1 drop_writes"
        fi | dmsetup load --noudevsync "rk-$s" > /tmp/dm.log 2>&1 \
            || emit "$name error dmsetup load rk-$s failed: $(tr '\n' ' ' < /tmp/dm.log)"
    done
    for s in "$@"; do dmsetup suspend --noudevsync "rk-$s"; done
    for s in "$@"; do dmsetup resume --noudevsync "rk-$s"; done
    dmsetup table | emit_lines "$name" dm_table
}

# emit_lines NAME KEY: one record per line of stdin (leading blanks kept).
emit_lines() {
    while IFS= read -r line; do
        emit "$1 $2 $line"
    done
}

# examine_members NAME KEY SERIAL...: one mdadm --examine for all members, recorded as
# "NAME KEY SERIAL LINE"; its "/dev/vdX:" headers say whose lines follow.
examine_members() {
    name=$1 key=$2
    shift 2
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
        emit "$name $key ${serial:-unknown} $line"
    done
}

# examine_bitmaps NAME KEY SERIAL...: mdadm --examine-bitmap of each member, recorded as
# "NAME KEY SERIAL LINE".
examine_bitmaps() {
    name=$1 key=$2
    shift 2
    for s in "$@"; do
        d=$(dev_of "$s") || continue
        mdadm --examine-bitmap "$d" 2>&1 | emit_lines "$name" "$key $s"
    done
}

# debug_md_do_sync: have the kernel log md_do_sync's debug messages (among them "resuming
# recovery of mdX from checkpoint", md's only message saying a recovery did not start at 0).
# Prints "on" when it worked.
debug_md_do_sync() {
    ctl=/proc/dynamic_debug/control
    if [ ! -w "$ctl" ]; then
        mkdir -p /sys/kernel/debug
        mount -t debugfs debugfs /sys/kernel/debug 2> /dev/null
        ctl=/sys/kernel/debug/dynamic_debug/control
    fi
    if [ -w "$ctl" ] && echo 'func md_do_sync +p' > "$ctl" 2> /dev/null; then
        echo on
    else
        echo off
    fi
}

# record_sync NAME MD KEY: sync state and every member's slot, state and recovery_start.
record_sync() {
    sys=/sys/block/$2/md
    for f in array_state sync_action sync_completed sync_max degraded; do
        [ -r "$sys/$f" ] && emit "$1 $3 $f $(cat "$sys/$f")"
    done
    for d in "$sys"/dev-*; do
        [ -d "$d" ] || continue
        s=$(serial_of "${d##*/dev-}")
        emit "$1 ${3}_dev $s slot $(cat "$d/slot") state $(tr ' ,' '_+' < "$d/state") recovery_start $(cat "$d/recovery_start")"
    done
}

# resume_recovery NAME MD: md holds raidkit's members read-only (assembled with --readonly):
# record what md read (each member's recovery_start), then let the recovery start with
# sync_max just below that point, so md_do_sync waits right where it resumes and
# sync_completed shows it; record that, lift the limit and wait until the recovery is done.
resume_recovery() {
    name=$1 md=$2
    sys=/sys/block/$md/md
    record_sync "$name" "$md" held
    emit "$name recovering debug_messages $(debug_md_do_sync)"
    # The lowest recovery_start, and the multiple of the chunk (sync_max's unit) below it.
    low=""
    for d in "$sys"/dev-*; do
        r=$(cat "$d/recovery_start")
        [ "$r" = none ] && continue
        if [ -z "$low" ] || [ "$r" -lt "$low" ]; then low=$r; fi
    done
    unit=$(($(cat "$sys/chunk_size") / 512))
    [ "$unit" -gt 0 ] || unit=1
    hold=0
    [ -n "$low" ] && [ "$low" -gt 0 ] && hold=$(((low - 1) / unit * unit))
    echo "$hold" > "$sys/sync_max" || emit "$name error cannot set sync_max $hold"
    emit "$name recovering hold $hold"
    if ! mdadm --readwrite "/dev/$md" > /tmp/mdadm.log 2>&1; then
        emit "$name error mdadm --readwrite failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
    fi
    # md starts the recovery from its own thread: wait (up to 20 s) until it waits at sync_max.
    i=0
    while [ "$i" -lt 200 ]; do
        c=$(cat "$sys/sync_completed")
        [ "$(cat "$sys/sync_action")" = recover ] && [ "$c" != none ] && [ "$c" != delayed ] && break
        sleep 0.1
        i=$((i + 1))
    done
    record_sync "$name" "$md" recovering
    mdadm --detail "/dev/$md" 2>&1 | emit_lines "$name" recovering_detail
    echo max > "$sys/sync_max"
    # Poll sync_action rather than mdadm --wait: after md's "recovery done" mdadm --wait
    # went on waiting for its next /proc/mdstat poll, 5 s more per array.
    i=0
    while [ "$(cat "$sys/sync_action")" != idle ] && [ "$i" -lt 3000 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    record_sync "$name" "$md" rebuilt
    mdadm --detail "/dev/$md" 2>&1 | emit_lines "$name" rebuilt_detail
    stamp "$name" recovered
}

# oracle_assemble NAME MD SHA256 FLAGS SERIAL...: assemble members prepared on the host
# (raidkit created and wrote them; SHA256 is the host's expectation of the whole array).
# Records mdadm --examine before md touches the members, mdadm's messages, md's state right
# after assembly (a clean array must not resync) and mdadm --detail; FLAGS as above. With
# rebuild, md assembles read-only first (resume_recovery).
oracle_assemble() {
    name=$1 md=$2 want=$3 flags=$4
    shift 4
    emit "$name begin assemble"
    stamp "$name" begin
    echo "$want" > "/tmp/want.$name"
    devs=$(devs_of "$name" "$@") || return 1
    examine_members "$name" pre_examine "$@"
    has_flag "$flags" bitmap && examine_bitmaps "$name" pre_bitmap "$@"
    ro=""
    has_flag "$flags" rebuild && ro=--readonly
    # A reshape too: md goes on with it only once read-write (finish_reshape), so what md
    # read from the superblocks is recorded first, however fast md finishes it then.
    has_flag "$flags" reshape && ro=--readonly
    dmesg -c > /dev/null 2>&1
    # shellcheck disable=SC2086
    if ! mdadm --assemble "/dev/$md" --run $ro $devs > /tmp/mdadm.log 2>&1; then
        emit "$name error mdadm --assemble failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
        emit_lines "$name" assemble_out < /tmp/mdadm.log
        return 1
    fi
    emit_lines "$name" assemble_out < /tmp/mdadm.log
    sys=/sys/block/$md/md
    for f in array_state sync_action resync_start degraded raid_disks reshape_position; do
        [ -r "$sys/$f" ] && emit "$name assembled $f $(cat "$sys/$f")"
    done
    mdadm --detail "/dev/$md" 2>&1 | emit_lines "$name" detail
    stamp "$name" assemble
    has_flag "$flags" rebuild && resume_recovery "$name" "$md"
    has_flag "$flags" reshape && finish_reshape "$name" "$md"
}

# finish_reshape NAME MD: md goes on with a reshape raidkit stopped part way; wait (up to
# 10 min) until md is done with it, then record md's state ("rebuilt" records) and detail.
finish_reshape() {
    name=$1 md=$2
    sys=/sys/block/$md/md
    # md assembled the array read-only (oracle_assemble); it reshapes once read-write.
    case $(cat "$sys/array_state") in
        readonly | read-auto)
            mdadm --readwrite "/dev/$md" > /tmp/mdadm.log 2>&1 \
                || emit "$name error mdadm --readwrite failed: $(tr '\n' ' ' < /tmp/mdadm.log)" ;;
    esac
    i=0
    while [ "$(cat "$sys/sync_action")" != idle ] && [ "$i" -lt 3000 ]; do
        sleep 0.2
        i=$((i + 1))
    done
    for f in sync_action reshape_position raid_disks degraded level; do
        emit "$name rebuilt $f $(cat "$sys/$f")"
    done
    mdadm --detail "/dev/$md" 2>&1 | emit_lines "$name" rebuilt_detail
    stamp "$name" reshape
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

# md_measure NAME MD FLAGS: size, sha256 of the whole array (and per-MiB hashes when the host
# expected another), md's geometry from sysfs, md's own parity/mirror check; with the journal
# flag also mdadm --detail.
md_measure() {
    name=$1 md=$2 flags=$3
    sys=/sys/block/$md/md
    emit "$name size_bytes $(blockdev --getsize64 "/dev/$md")"
    emit "$name sha256 $(sha256sum "/dev/$md" | cut -d' ' -f1)"
    stamp "$name" sha256
    # With the host's expectation (oracle_assemble) and a different hash: per-MiB hashes,
    # so the host can say where md's data differs.
    if [ -r "/tmp/want.$name" ] && [ "$(cat "/tmp/want.$name")" != "$(last_sha "$name")" ]; then
        size=$(blockdev --getsize64 "/dev/$md")
        i=0
        while [ $((i * 1048576)) -lt "$size" ] && [ "$i" -lt 512 ]; do
            len=$((size - i * 1048576))
            [ "$len" -gt 1048576 ] && len=1048576
            h=$(dd if="/dev/$md" bs=1048576 skip="$i" count=1 2>/dev/null | sha256sum | cut -d' ' -f1)
            emit "$name region_sha256 $((i * 1048576)) $len $h"
            i=$((i + 1))
        done
    fi
    for f in level layout chunk_size raid_disks component_size degraded consistency_policy; do
        [ -r "$sys/$f" ] && emit "$name sysfs $f $(cat "$sys/$f")"
    done
    # md's check compares redundancy; with a member missing there is none to compare.
    degraded=0
    [ -r "$sys/degraded" ] && degraded=$(cat "$sys/degraded")
    # Nor on md rows that reshape (measured right before md's reshape).
    reshaping=0
    has_flag "$flags" reshape && [ -e "/tmp/created.$name" ] && reshaping=1
    if [ -w "$sys/sync_action" ] && [ "$(cat "$sys/level")" != raid0 ] && [ "$degraded" = 0 ] \
        && [ "$reshaping" = 0 ]; then
        # A resync md started at assembly (an array created to be initialised in the
        # background) runs to its end first: check is refused while it runs.
        mdadm --wait "/dev/$md" > /dev/null 2>&1 || true
        while [ "$(cat "$sys/sync_action")" != idle ]; do sleep 0.2; done
        echo check > "$sys/sync_action"
        sleep 0.2
        mdadm --wait "/dev/$md" > /dev/null 2>&1
        while [ "$(cat "$sys/sync_action")" != idle ]; do sleep 0.2; done
        emit "$name mismatch_cnt $(cat "$sys/mismatch_cnt")"
        stamp "$name" check
    fi
    # (arrays md assembled have theirs from right after the assembly)
    if has_flag "$flags" journal && [ -e "/tmp/created.$name" ]; then
        mdadm --detail "/dev/$md" 2>&1 | emit_lines "$name" detail
    fi
}

# oracle_crash_arm NAME MD SERIAL...: (md rows with journal,crash; md runs on dm maps, the last
# serial is the journal) measure the array as oracle_report does, wait until md has marked
# it clean (no superblock write in flight), then make the members drop every write
# (dm_drop_writes): the writes that follow reach only the journal's log.
oracle_crash_arm() {
    name=$1 md=$2
    shift 2
    sys=/sys/block/$md/md
    md_measure "$name" "$md" journal
    sync
    i=0
    while [ "$(cat "$sys/array_state")" != clean ] && [ "$i" -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    emit "$name crash array_state $(cat "$sys/array_state")"
    jserial="" joff=""
    for s in "$@"; do jserial=$s; done
    for d in "$sys"/dev-*; do
        [ "$(cat "$d/slot")" = journal ] && joff=$(cat "$d/offset")
    done
    if [ -z "$joff" ]; then
        emit "$name error no journal device in $sys"
        return 1
    fi
    emit "$name crash journal_data_offset $joff"
    dm_drop_writes "$name" "$jserial" "$joff" "$@"
    stamp "$name" armed
}

# oracle_journal_mode NAME MD MODE: (md rows with journal,crash, after oracle_crash_arm) set
# md's journal mode (write-back: a write completes once its pages are in the log, as data
# alone; md writes the stripe back later) and record what sysfs says then. The job makes
# every device drop every write (dm_drop_writes NAME - 0 ...) after the writes, before
# oracle_report's stop: md's stop writes every cached stripe back, logging its parity first,
# and the log must keep the data-only stripes as the crash left them.
oracle_journal_mode() {
    name=$1 md=$2 mode=$3
    sys=/sys/block/$md/md
    echo "$mode" > "$sys/journal_mode" 2> /tmp/mode.log \
        || emit "$name error cannot set journal_mode $mode: $(tr '\n' ' ' < /tmp/mode.log)"
    emit "$name crash journal_mode $(cat "$sys/journal_mode" 2> /dev/null)"
    stamp "$name" "$mode"
}

# oracle_ppl_crash_arm NAME MD PARITY_SERIAL SERIAL...: (md rows with ppl,crash; md runs on
# dm maps) measure the array as oracle_report does, keep md from marking it clean by itself
# (safe_mode_delay), and make the member holding the parity of the next write drop what md
# writes to its data area; its superblock and its log area (before the data) still take
# writes. The write that follows then reaches its data member and md's log, not its parity;
# after it, dm_drop_writes makes every member drop every write and the stop is a crash.
oracle_ppl_crash_arm() {
    name=$1 md=$2 pserial=$3
    shift 3
    sys=/sys/block/$md/md
    md_measure "$name" "$md" -
    sync
    echo 3600 > "$sys/safe_mode_delay" 2> /dev/null || emit "$name error cannot set safe_mode_delay"
    off=""
    for d in "$sys"/dev-*; do
        off=$(cat "$d/offset")
        break
    done
    dev=$(dev_of "$pserial") || { emit "$name error parity member $pserial not found"; return 1; }
    sz=$(blockdev --getsz "$dev")
    emit "$name crash parity_member $pserial data_offset $off"
    printf '0 %s linear %s 0\n%s %s flakey %s %s 0 1 1 drop_writes\n' \
        "$off" "$dev" "$off" $((sz - off)) "$dev" "$off" \
        | dmsetup load --noudevsync "rk-$pserial" > /tmp/dm.log 2>&1 \
        || emit "$name error dmsetup load rk-$pserial failed: $(tr '\n' ' ' < /tmp/dm.log)"
    dmsetup suspend --noudevsync "rk-$pserial"
    dmsetup resume --noudevsync "rk-$pserial"
    dmsetup table | emit_lines "$name" dm_table
    stamp "$name" armed
}

# oracle_report NAME MD FLAGS SERIAL...: md_measure, then stop the array and record mdadm
# --examine of each member (and, with the bitmap flag, mdadm --examine-bitmap). With the crash
# flag the array was measured before oracle_crash_arm and every device drops what md writes
# now, so the stop is a crash: md's last superblock updates and its journal checkpoint are
# lost and the journal keeps the writes the members never got; the maps are removed, the
# examine reads the disks themselves.
oracle_report() {
    name=$1 md=$2 flags=$3
    shift 3
    if has_flag "$flags" crash; then
        mdadm --stop "/dev/$md" > /dev/null 2>&1 || emit "$name error mdadm --stop failed"
        for s in "$@"; do
            dmsetup remove --noudevsync "rk-$s" > /tmp/dm.log 2>&1 \
                || emit "$name error dmsetup remove rk-$s failed: $(tr '\n' ' ' < /tmp/dm.log)"
        done
    elif [ -b "/dev/$md" ]; then
        # md rows that reshape were measured before their reshape was frozen.
        if ! has_flag "$flags" reshape || [ ! -e "/tmp/created.$name" ]; then
            md_measure "$name" "$md" "$flags"
        fi
        sync
        mdadm --stop "/dev/$md" > /dev/null 2>&1 || emit "$name error mdadm --stop failed"
    fi
    examine_members "$name" examine "$@"
    has_flag "$flags" bitmap && examine_bitmaps "$name" bitmap "$@"
    dmesg -c 2>/dev/null | grep -E 'md[0-9]|md/|md:|raid' | emit_lines "$name" dmesg
    stamp "$name" examine
    emit "$name end"
}

# RAID 50/60 stacks (rows with spans=N): SPANS arrays of LEVEL on runs of the members
# (/dev/md(MD+1) ... in member order) and a RAID 0 on /dev/MD over them, as md stacks them.

# stack_spans MD SPANS: the md device names of the spans of the stack on MD.
stack_spans() {
    base=${1#md}
    i=1
    while [ "$i" -le "$2" ]; do
        echo "md$((base + i))"
        i=$((i + 1))
    done
}

# stack_run NAME MD SPANS MDADM_ARGS... -- SERIAL...: mdadm MDADM_ARGS for every span (its
# members appended), then the RAID 0 (mdadm MDADM_ARGS' first word with the spans). Records
# mdadm's messages as assemble_out.
stack_run() {
    name=$1 md=$2 spans=$3
    shift 3
    args=""
    while [ "$1" != -- ]; do
        args="$args $1"
        shift
    done
    shift
    devs=$(devs_of "$name" "$@") || return 1
    per=$(($# / spans))
    set -- $devs
    span_devs=""
    for sp in $(stack_spans "$md" "$spans"); do
        list=""
        i=0
        while [ "$i" -lt "$per" ]; do
            list="$list $1"
            shift
            i=$((i + 1))
        done
        # shellcheck disable=SC2086
        if ! mdadm $args "/dev/$sp" $list > /tmp/mdadm.log 2>&1; then
            emit "$name error mdadm$args /dev/$sp failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
            return 1
        fi
        emit_lines "$name" assemble_out < /tmp/mdadm.log
        span_devs="$span_devs /dev/$sp"
    done
    echo "$span_devs" > "/tmp/spans.$name"
}

# oracle_create_stack NAME MD LEVEL LAYOUT CHUNK_KIB SPANS SERIAL...: md creates the stack on
# all-zero members (--assume-clean is truthful for the spans; the RAID 0 has no parity).
oracle_create_stack() {
    name=$1 md=$2 level=$3 layout=$4 chunk=$5 spans=$6
    shift 6
    emit "$name begin create"
    stamp "$name" begin
    : > "/tmp/created.$name"
    dmesg -c > /dev/null 2>&1
    opts="--create --run --metadata=1.2 --level=$level --raid-devices=$(($# / spans)) --assume-clean"
    [ "$layout" != - ] && opts="$opts --layout=$layout"
    [ "$chunk" != - ] && opts="$opts --chunk=$chunk"
    # shellcheck disable=SC2086
    stack_run "$name" "$md" "$spans" $opts -- "$@" || return 1
    set -- --create "/dev/$md" --run --metadata=1.2 --level=0 --raid-devices="$spans"
    [ "$chunk" != - ] && set -- "$@" --chunk="$chunk"
    # shellcheck disable=SC2046
    if ! mdadm "$@" $(cat "/tmp/spans.$name") > /tmp/mdadm.log 2>&1; then
        emit "$name error mdadm --create /dev/$md failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
        return 1
    fi
}

# oracle_assemble_stack NAME MD SHA256 SPANS SERIAL...: md assembles raidkit's stack: each span
# from its own members (the serials in span order), then the RAID 0 on the spans.
oracle_assemble_stack() {
    name=$1 md=$2 want=$3 spans=$4
    shift 4
    emit "$name begin assemble"
    stamp "$name" begin
    echo "$want" > "/tmp/want.$name"
    examine_members "$name" pre_examine "$@"
    dmesg -c > /dev/null 2>&1
    stack_run "$name" "$md" "$spans" --assemble -- "$@" || return 1
    # shellcheck disable=SC2046
    if ! mdadm --assemble "/dev/$md" $(cat "/tmp/spans.$name") > /tmp/mdadm.log 2>&1; then
        emit "$name error mdadm --assemble /dev/$md failed: $(tr '\n' ' ' < /tmp/mdadm.log)"
        return 1
    fi
    emit_lines "$name" assemble_out < /tmp/mdadm.log
    for sp in $(stack_spans "$md" "$spans") "$md"; do
        for f in array_state sync_action degraded; do
            [ -r "/sys/block/$sp/md/$f" ] && emit "$name assembled $sp.$f $(cat "/sys/block/$sp/md/$f")"
        done
    done
    mdadm --detail "/dev/$md" 2>&1 | emit_lines "$name" detail
    stamp "$name" assemble
}

# oracle_report_stack NAME MD SPANS: the RAID 0's size and sha256, md's check of every span
# (mismatch_cnt: the sum), then the RAID 0 and the spans stopped.
oracle_report_stack() {
    name=$1 md=$2 spans=$3
    [ -b "/dev/$md" ] || { emit "$name end"; return 1; }
    emit "$name size_bytes $(blockdev --getsize64 "/dev/$md")"
    emit "$name sha256 $(sha256sum "/dev/$md" | cut -d' ' -f1)"
    emit "$name sysfs level $(cat "/sys/block/$md/md/level")"
    emit "$name sysfs raid_disks $(cat "/sys/block/$md/md/raid_disks")"
    stamp "$name" sha256
    sync
    total=0
    for sp in $(stack_spans "$md" "$spans"); do
        sys=/sys/block/$sp/md
        mdadm --wait "/dev/$sp" > /dev/null 2>&1 || true
        while [ "$(cat "$sys/sync_action")" != idle ]; do sleep 0.2; done
        echo check > "$sys/sync_action"
        sleep 0.2
        mdadm --wait "/dev/$sp" > /dev/null 2>&1
        while [ "$(cat "$sys/sync_action")" != idle ]; do sleep 0.2; done
        total=$((total + $(cat "$sys/mismatch_cnt")))
    done
    emit "$name mismatch_cnt $total"
    stamp "$name" check
    mdadm --stop "/dev/$md" > /dev/null 2>&1 || emit "$name error mdadm --stop /dev/$md failed"
    for sp in $(stack_spans "$md" "$spans"); do
        mdadm --stop "/dev/$sp" > /dev/null 2>&1 || emit "$name error mdadm --stop /dev/$sp failed"
    done
    dmesg -c 2>/dev/null | grep -E 'md[0-9]|md/|md:|raid' | emit_lines "$name" dmesg
    emit "$name end"
}
