#!/usr/bin/env bash
# End to end through real kernels and tools.
#
#   tests/nbd/e2e.sh [memory|file|array|faults|tls]...     (default: all five)
#
# memory, file: the raidkit-nbd `serve` example -> nbdfuse (FUSE file) -> losetup (loop device)
#   -> mkfs.ext4 -> mount -> write files -> umount -> e2fsck -fn -> mount again -> checksums;
#   then SIGTERM the server, which must flush and exit 0.
# array: the real `raidkit` binary. `raidkit create` a RAID 6 of five image files ->
#   `raidkit serve` -> nbdfuse -> losetup -> ext4 as above; then, with the file system mounted,
#   through the control socket: fail a member, verify (checksums read through the array with
#   caches dropped, e2fsck of the frozen file system), write more files degraded, remove the
#   failed member, add a spare and poll `detail --json` while it rebuilds (reading the files
#   meanwhile), verify again; SIGTERM the server, which must flush and mark the array clean
#   (`raidkit examine` and `mdadm --examine` of every member say clean); offline `raidkit read`
#   of the array equals the device as the file system had it, also with two original members
#   left out (so the rebuilt member's contents are used), and e2fsck finds that image clean.
# faults: two arrays in one `raidkit serve` (RAID 6 "A", RAID 5 "B") and one global spare.
#   Faults are injected (`--inject`): one of A's members fails after a request countdown, one
#   is slow, one of B's members cannot read a range. nbdcopy writes random data to A while the
#   countdown fails its member; the global spare goes to A and is rebuilt in the background;
#   nbdcopy reads A back equal. nbdcopy reads B: the unreadable range is served from redundancy
#   and logged as bad, and the member stays. B, failed by hand afterwards, stays degraded (the
#   pool is empty). After SIGTERM, offline `raidkit read` of A's members equals the data, also
#   with two members left out (the rebuilt spare's contents take part); degraded B refuses to
#   read with "data unavailable" where b2's bad range has no redundancy left.
# tls: `raidkit serve --tls require` with a client CA, certificates made by openssl: a RAID 5
#   through nbdfuse over TLS (libnbd's nbds+unix URI with tls-certificates) -> loop -> ext4,
#   written, checked and read back; a client without TLS and one whose certificate another CA
#   signed are refused, and the server logs both refusals with their reasons (JSON log).
#
# Needs root, /dev/fuse and loop devices. Exit codes: 0 pass, 1 fail, 2 cannot run here.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$#" -gt 0 ]; then kinds=("$@"); else kinds=(memory file array faults tls); fi

if [ "$(id -u)" -ne 0 ]; then echo "e2e.sh: needs root (loop devices, mount)"; exit 2; fi
if [ ! -e /dev/fuse ]; then echo "e2e.sh: needs /dev/fuse"; exit 2; fi
missing=()
for pair in nbdfuse:nbdfuse fusermount3:fuse3 losetup:mount mkfs.ext4:e2fsprogs e2fsck:e2fsprogs \
    sha256sum:coreutils fsfreeze:util-linux fallocate:util-linux jq:jq mdadm:mdadm \
    openssl:openssl nbdinfo:libnbd-bin; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "e2e.sh: missing tools; apt-get install ${missing[*]}"; exit 2
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release -q -p raidkit-nbd --example serve
cargo build --release -q -p raidkit-cli
serve="$CARGO_TARGET_DIR/release/examples/serve"
raidkit="$CARGO_TARGET_DIR/release/raidkit"

work=$(mktemp -d /tmp/raidkit-nbd-e2e.XXXXXX)
server_pid=""; fuse_mounted=""; loop=""; mounted=""; frozen=""; holder_pid=""; shm_dir=""
cleanup() {
    set +e
    [ -n "$frozen" ] && fsfreeze -u "$work/mnt" 2>/dev/null
    [ -n "$holder_pid" ] && kill "$holder_pid" 2>/dev/null && wait "$holder_pid" 2>/dev/null
    [ -n "$mounted" ] && umount "$work/mnt" 2>/dev/null
    [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null
    [ -n "$fuse_mounted" ] && fusermount3 -u "$work/fuse" 2>/dev/null
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    [ -f "$work/serve.log" ] && { echo "--- server log"; cat "$work/serve.log"; }
    rm -rf "$work"
    [ -n "$shm_dir" ] && rm -rf "$shm_dir"
}
trap cleanup EXIT

fail() { echo "e2e.sh: FAIL: $*"; exit 1; }

wait_for() { # path, what
    for _ in $(seq 200); do [ -e "$1" ] && return 0; sleep 0.05; done
    fail "$2 did not appear"
}

# nbdfuse -> loop device on the export behind $work/nbd.sock.
attach() {
    mkdir -p "$work/fuse" "$work/mnt"
    rm -f "$work/nbdfuse.pid"
    nbdfuse -P "$work/nbdfuse.pid" "$work/fuse/disk" --unix "$work/nbd.sock" &
    wait_for "$work/nbdfuse.pid" "nbdfuse"
    fuse_mounted=1
    wait_for "$work/fuse/disk" "nbdfuse file"
    loop=$(losetup --find --show "$work/fuse/disk")
}

detach() {
    losetup -d "$loop"; loop=""
    fusermount3 -u "$work/fuse"; fuse_mounted=""
    sleep 0.2
}

# write_files DIR COUNT SEED: files of assorted sizes, from /dev/urandom.
write_files() {
    mkdir -p "$1"
    for i in $(seq 1 "$2"); do
        head -c $(( ((i + $3) * 37 % 500 + 1) * 4096 + i )) /dev/urandom > "$1/file$i"
    done
}

checksum_all() { (cd "$work/mnt" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$work/sums"; }

# Reads every file back through loop -> FUSE -> NBD -> the array (caches dropped first).
verify_mounted() {
    sync
    echo 3 > /proc/sys/vm/drop_caches
    (cd "$work/mnt" && sha256sum --quiet -c "$work/sums") || fail "checksums differ ($1)"
}

# e2fsck of the mounted file system, frozen so the image on the device is consistent.
fsck_mounted() {
    fsfreeze -f "$work/mnt"; frozen=1
    echo 3 > /proc/sys/vm/drop_caches
    local rc=0
    e2fsck -fn "$loop" > "$work/fsck.out" 2>&1 || rc=$?
    fsfreeze -u "$work/mnt"; frozen=""
    # With -n on a mounted file system e2fsck warns that it is mounted; anything it finds
    # makes the exit code non-zero.
    if [ "$rc" -ne 0 ]; then cat "$work/fsck.out"; fail "e2fsck found problems ($1)"; fi
    echo "   e2fsck ($1): $(tail -1 "$work/fsck.out")"
}

stop_server() { # must flush and exit 0
    kill -TERM "$server_pid"
    if ! wait "$server_pid"; then fail "server did not shut down cleanly"; fi
    server_pid=""
}

run_simple_kind() {
    local kind=$1 size_mib=256
    echo "== $kind export"
    rm -f "$work/nbd.sock"
    case "$kind" in
        memory) "$serve" --socket "$work/nbd.sock" --memory "disk=${size_mib}M" & ;;
        file)
            truncate -s "${size_mib}M" "$work/disk.img"
            "$serve" --socket "$work/nbd.sock" --file "disk=$work/disk.img" & ;;
    esac
    server_pid=$!
    wait_for "$work/nbd.sock" "server socket"
    attach
    mkfs.ext4 -q -F "$loop"
    mount "$loop" "$work/mnt"; mounted=1
    write_files "$work/mnt/dir" 24 0
    mkdir -p "$work/mnt/dir/sub"
    head -c $((20 << 20)) /dev/urandom > "$work/mnt/dir/sub/big"
    checksum_all
    umount "$work/mnt"; mounted=""
    e2fsck -fn "$loop"
    mount -o ro "$loop" "$work/mnt"; mounted=1
    (cd "$work/mnt" && sha256sum --quiet -c "$work/sums")
    umount "$work/mnt"; mounted=""
    detach
    stop_server
    if [ "$kind" = file ]; then
        # The flushed image file holds the same file system.
        e2fsck -fn "$work/disk.img"
        rm -f "$work/disk.img"
    fi
    echo "== $kind export: ok ($(wc -l < "$work/sums") files verified)"
}

# detail_json: the served array's status, through the control socket.
detail_json() { "$raidkit" detail --control "$ctl" --json; }

run_array() {
    echo "== array export: raidkit RAID 6 over 5 image files, served by raidkit serve"
    # On tmpfs and allocated in full, the members are mapped into memory by the server, so
    # this whole run also covers mapped member I/O; elsewhere they take pread/pwrite.
    local d="$work/array" mapped=0
    if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
        shm_dir=$(mktemp -d /dev/shm/raidkit-nbd-e2e.XXXXXX); d="$shm_dir"; mapped=1
    fi
    mkdir -p "$d"
    local m=("$d/m0.img" "$d/m1.img" "$d/m2.img" "$d/m3.img" "$d/m4.img")
    # Members large enough that the rebuild takes a moment (writes and polls overlap it).
    member_size=512M
    "$raidkit" create --level 6 --chunk 64K --image-size "$member_size" "${m[@]}"
    [ "$mapped" = 1 ] && for f in "${m[@]}"; do fallocate -l "$(stat -c %s "$f")" "$f"; done
    rm -f "$work/nbd.sock"
    "$raidkit" serve --socket "$work/nbd.sock" --name md0 "${m[@]}" 2> "$work/serve.log" &
    server_pid=$!
    ctl="$work/nbd.sock.ctl"
    wait_for "$ctl" "control socket"
    if [ "$mapped" = 1 ]; then
        [ "$(grep -c 'mapped into memory' "$work/serve.log")" = 5 ] \
            || fail "raidkit serve did not map the five fully allocated tmpfs members"
        echo "   members on tmpfs, mapped into memory by the server"
    fi
    [ "$(stat -c %a "$ctl")" = 600 ] || fail "control socket mode is $(stat -c %a "$ctl"), not 600"
    attach
    # Inode tables and journal written now, so the kernel does not keep writing in the
    # background while members change (only what the test does reaches the array).
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$loop"
    mount -o noatime "$loop" "$work/mnt"; mounted=1
    write_files "$work/mnt/dir" 24 0
    mkdir -p "$work/mnt/dir/sub"
    head -c $((20 << 20)) /dev/urandom > "$work/mnt/dir/sub/big"
    checksum_all
    umount "$work/mnt"; mounted=""
    e2fsck -fn "$loop" || fail "e2fsck after the first writes"
    mount -o noatime "$loop" "$work/mnt"; mounted=1
    verify_mounted "whole array"
    echo "   whole: $(wc -l < "$work/sums") files verified"

    # The file system stays mounted and in use from here on.
    (cd "$work/mnt" && exec sleep 3600) &
    holder_pid=$!

    "$raidkit" fail --control "$ctl" --member "${m[2]}"
    [ "$(detail_json | jq -r '.status.degraded')" = true ] || fail "not degraded after fail"
    [ "$(detail_json | jq -c '.status.missing_slots')" = "[2]" ] || fail "slot 2 not missing"
    verify_mounted "degraded"
    fsck_mounted "degraded"
    write_files "$work/mnt/degraded" 12 7
    checksum_all
    verify_mounted "degraded, after degraded writes"
    fsck_mounted "degraded, after degraded writes"
    echo "   degraded: $(wc -l < "$work/sums") files verified"

    "$raidkit" remove --control "$ctl" --member "${m[2]}"
    sync
    # add returns at once or after the rebuild, depending on the engine: either way poll
    # detail --json until the new member is active, reading the files meanwhile, while
    # another process keeps writing files (each synced to the array) until add returns.
    "$raidkit" add --control "$ctl" --member "$d/new.img" --image-size "$member_size" > "$work/add.out" &
    local add_pid=$! polls=0 state=""
    mkdir -p "$work/mnt/rebuild"
    (
        i=0
        while kill -0 "$add_pid" 2>/dev/null || [ "$i" -lt 4 ]; do
            i=$((i + 1))
            head -c $(( (i * 53 % 256 + 1) * 4096 )) /dev/urandom > "$work/mnt/rebuild/file$i"
            sync "$work/mnt/rebuild/file$i"
        done
        echo "$i" > "$work/rebuild-writes"
    ) &
    local writer_pid=$!
    (cd "$work/mnt" && sha256sum --quiet -c "$work/sums") > "$work/reader.out" 2>&1 &
    local reader_pid=$! started=$SECONDS rebuilding=0
    while :; do
        state=$(detail_json | jq -r --arg n "$d/new.img" \
            '(.status.members[] | select(.name == $n) | .role) // "absent"')
        if [ "$state" = active ] && [ "$(detail_json | jq -r '.status.degraded')" = false ]; then
            break
        fi
        [ "$state" = spare ] && rebuilding=$((rebuilding + 1))
        polls=$((polls + 1))
        [ "$polls" -lt 6000 ] || fail "rebuild did not finish in 10 minutes (new member: $state)"
        sleep 0.1
    done
    wait "$add_pid" || fail "raidkit add failed: $(cat "$work/add.out")"
    wait "$writer_pid" || fail "writing files during the rebuild failed"
    wait "$reader_pid" || { cat "$work/reader.out"; fail "checksums read during the rebuild differ"; }
    echo "   rebuilt in about $((SECONDS - started)) s; $polls polls of detail --json ($rebuilding saw the new member rebuilding), $(cat "$work/rebuild-writes") files written and $(wc -l < "$work/sums") read meanwhile"
    echo "   $(cat "$work/add.out")"
    checksum_all
    verify_mounted "rebuilt"
    fsck_mounted "rebuilt"
    echo "   rebuilt: $(wc -l < "$work/sums") files verified"

    kill "$holder_pid"; wait "$holder_pid" 2>/dev/null || true; holder_pid=""
    umount "$work/mnt"; mounted=""
    e2fsck -fn "$loop" || fail "e2fsck after umount"
    # The whole device as the file system left it, read through NBD.
    local device_sum
    device_sum=$(sha256sum < "$work/fuse/disk" | cut -d' ' -f1)
    detach
    stop_server
    grep -q "md0: flushed and marked clean" "$work/serve.log" || fail "server did not mark md0 clean"

    local live=("${m[0]}" "${m[1]}" "${m[3]}" "${m[4]}" "$d/new.img")
    local states
    states=$("$raidkit" examine --json "${live[@]}" | jq -r '.[].superblock.state' | sort -u)
    [ "$states" = clean ] || fail "raidkit examine: member states are '$states', not clean"
    for f in "${live[@]}"; do
        mdadm --examine "$f" | grep -Eq '^ +State : clean$' || {
            mdadm --examine "$f"; fail "mdadm --examine $f: not clean"; }
        mdadm --examine "$f" | grep -Eq '^ +Array State : AAAAA ' || {
            mdadm --examine "$f"; fail "mdadm --examine $f: not every slot active"; }
    done
    echo "   members clean (raidkit examine, mdadm --examine): ${live[*]##*/}"

    "$raidkit" read --output "$work/offline.img" "${live[@]}"
    [ "$(sha256sum < "$work/offline.img" | cut -d' ' -f1)" = "$device_sum" ] \
        || fail "offline raidkit read differs from what the file system had"
    # Without m0 and m1 the new member's contents take part in every stripe.
    [ "$("$raidkit" read "${m[3]}" "${m[4]}" "$d/new.img" 2>/dev/null | sha256sum | cut -d' ' -f1)" \
        = "$device_sum" ] || fail "read using the rebuilt member differs"
    e2fsck -fn "$work/offline.img" > /dev/null 2>&1 || fail "e2fsck of the offline image"
    rm -f "$work/offline.img"
    echo "   offline raidkit read (all members, and without m0 m1) = the device the file system used"
    rm -f "$work/serve.log"
    echo "== array export: ok"
}

run_faults() {
    echo "== faults: injected faults under raidkit serve, a global spare shared by two arrays"
    local d="$work/faults"
    mkdir -p "$d"
    local a=("$d/a0" "$d/a1" "$d/a2" "$d/a3" "$d/a4") b=("$d/b0" "$d/b1" "$d/b2")
    "$raidkit" create --level 6 --chunk 64K --image-size 64M "${a[@]}" > /dev/null
    "$raidkit" create --level 5 --chunk 64K --image-size 64M "${b[@]}" > /dev/null
    local list_a list_b
    list_a=$(IFS=,; echo "${a[*]}"); list_b=$(IFS=,; echo "${b[*]}")
    rm -f "$work/nbd.sock"
    # a1 fails once 300 requests have passed (mid-copy); a3 is slow; b2 cannot read 1 MiB
    # of its data area, for good (a rewrite does not help).
    "$raidkit" serve --socket "$work/nbd.sock" --array "A=$list_a" --array "B=$list_b" \
        --spare "$d/s0" --spare-size 64M \
        --inject "${a[1]}=fail-after=300" --inject "${a[3]}=delay=200us" \
        --inject "${b[2]}=bad-read=8M-9M" 2> "$work/serve.log" &
    server_pid=$!
    ctl="$work/nbd.sock.ctl"
    wait_for "$ctl" "control socket"
    grep -q "injecting faults into ${a[1]}: fail-after=300" "$work/serve.log" \
        || fail "server did not say it injects faults"
    local size_a
    size_a=$("$raidkit" detail --control "$ctl" --array A --json | jq -r '.status.array_bytes')
    head -c "$size_a" /dev/urandom > "$d/data"
    nbdcopy "$d/data" "nbd+unix:///A?socket=$work/nbd.sock" || fail "nbdcopy write to A"
    local polls=0
    while :; do
        local st
        st=$("$raidkit" detail --control "$ctl" --array A --json)
        if [ "$(jq -r '.status.degraded' <<< "$st")" = false ] \
            && [ "$(jq -r --arg n "$d/s0" '.status.members[] | select(.name == $n) | .role' <<< "$st")" = active ]; then
            break
        fi
        polls=$((polls + 1))
        [ "$polls" -lt 1200 ] || { echo "$st"; fail "A did not rebuild onto the global spare in 2 minutes"; }
        sleep 0.1
    done
    st=$("$raidkit" detail --control "$ctl" --array A --json)
    [ "$(jq -r --arg n "${a[1]}" '.status.members[] | select(.name == $n) | .role' <<< "$st")" = faulty ] \
        || fail "a1 is not faulty after its countdown"
    [ "$(jq -c '.global_spares' <<< "$st")" = "[]" ] || fail "the global spare is still in the pool"
    jq -e --arg m "A: global spare $d/s0 taken" 'any(.global_spare_log[]; contains($m))' <<< "$st" > /dev/null \
        || fail "no log line for the spare taken"
    nbdcopy "nbd+unix:///A?socket=$work/nbd.sock" "$d/back" || fail "nbdcopy read of A"
    cmp -s "$d/data" "$d/back" || fail "A read back differs from what was written"
    echo "   A: a1 failed by its countdown mid-copy, the global spare rebuilt its slot in about $((polls / 10)) s, data read back equal"

    # B was never written: it reads as zeroes, also where b2 cannot read (served from the
    # other members; the range goes to b2's bad-block log and b2 stays in the array).
    local size_b
    size_b=$("$raidkit" detail --control "$ctl" --array B --json | jq -r '.status.array_bytes')
    nbdcopy "nbd+unix:///B?socket=$work/nbd.sock" "$d/back-b" || fail "nbdcopy read of B"
    cmp -s "$d/back-b" <(head -c "$size_b" /dev/zero) || fail "B does not read as zeroes"
    st=$("$raidkit" detail --control "$ctl" --array B --json)
    [ "$(jq -r '.status.degraded' <<< "$st")" = false ] || fail "B: a read error failed b2"
    jq -e --arg m "${b[2]}" 'any(.status.log[]; .event == "bad-blocks-recorded" and .member == $m)' <<< "$st" > /dev/null \
        || { jq -c '.status.log[]' <<< "$st"; fail "B: b2's unreadable range is not in its bad-block log"; }
    echo "   B: read errors in b2 served from redundancy, the range logged as bad, b2 stays in"
    "$raidkit" fail --control "$ctl" --array B --member "${b[1]}"
    sleep 1
    st=$("$raidkit" detail --control "$ctl" --array B --json)
    [ "$(jq -r '.status.degraded' <<< "$st")" = true ] || fail "B not degraded after fail"
    [ "$(jq -r '[.status.members[] | select(.role == "rebuilding" or .role == "spare")] | length' <<< "$st")" = 0 ] \
        || fail "B got a spare from an empty pool"
    echo "   B: failed by hand afterwards, stays degraded (the pool is empty)"
    stop_server
    grep -q "A: flushed and marked clean" "$work/serve.log" || fail "server did not mark A clean"

    local live_a=("${a[0]}" "${a[2]}" "${a[3]}" "${a[4]}" "$d/s0")
    "$raidkit" read --output "$d/offline" "${live_a[@]}" 2> /dev/null
    cmp -s "$d/data" "$d/offline" || fail "offline read of A differs"
    # Without a0 and a2, the spare's chunks and the parity over them reconstruct theirs.
    [ "$("$raidkit" read "${a[3]}" "${a[4]}" "$d/s0" 2>/dev/null | cmp -s - "$d/data" && echo same)" = same ] \
        || fail "offline read of A without a0 and a2 differs"
    # Degraded B cannot serve b2's logged bad range any more: the read refuses with the data
    # unavailable code instead of returning something else there.
    local rc=0
    "$raidkit" read "${b[0]}" "${b[2]}" > /dev/null 2> "$d/read-b.err" || rc=$?
    [ "$rc" = 4 ] || { cat "$d/read-b.err"; fail "offline read of degraded B: exit $rc, not 4"; }
    echo "   offline: A's members with the rebuilt spare read back the data, also without a0 and a2"
    rm -f "$work/serve.log"
    rm -rf "$d"
    echo "== faults: ok"
}

# make_pki DIR: a CA, a server certificate for localhost, and two client directories in
# libnbd's layout (ca-cert.pem, client-cert.pem, client-key.pem): DIR/client signed by the CA,
# DIR/rogue by another CA.
make_pki() {
    local dir=$1
    mkdir -p "$dir/ca" "$dir/client" "$dir/rogue-ca" "$dir/rogue"
    ossl() { openssl "$@" > /dev/null 2>&1 || fail "openssl $1 failed"; }
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    for ca in ca rogue-ca; do
        ossl req -x509 "${ec[@]}" -keyout "$dir/$ca/ca-key.pem" -out "$dir/$ca/ca-cert.pem" \
            -days 2 -subj "/CN=raidkit e2e $ca" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    done
    printf 'basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$dir/server.ext"
    printf 'basicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n' > "$dir/client.ext"
    # issue CA-DIR OUT-DIR NAME SUBJECT EXT
    issue() {
        ossl req -new "${ec[@]}" -keyout "$2/$3-key.pem" -out "$2/$3.csr" -subj "$4"
        ossl x509 -req -in "$2/$3.csr" -CA "$1/ca-cert.pem" -CAkey "$1/ca-key.pem" \
            -set_serial "$RANDOM" -days 2 -out "$2/$3-cert.pem" -extfile "$5"
    }
    issue "$dir/ca" "$dir/ca" server /CN=localhost "$dir/server.ext"
    issue "$dir/ca" "$dir/client" client /CN=raidkit-e2e-client "$dir/client.ext"
    issue "$dir/rogue-ca" "$dir/rogue" client /CN=raidkit-e2e-rogue "$dir/client.ext"
    cp "$dir/ca/ca-cert.pem" "$dir/client/ca-cert.pem"
    cp "$dir/ca/ca-cert.pem" "$dir/rogue/ca-cert.pem"
}

run_tls() {
    echo "== tls: raidkit serve --tls require with client certificates, ext4 through nbdfuse over TLS"
    local d="$work/tls" pki="$work/pki"
    mkdir -p "$d"
    make_pki "$pki"
    local m=("$d/m0.img" "$d/m1.img" "$d/m2.img" "$d/m3.img")
    "$raidkit" create --level 5 --chunk 64K --image-size 128M "${m[@]}" > /dev/null
    rm -f "$work/nbd.sock"
    "$raidkit" serve --socket "$work/nbd.sock" --name md0 --log-format json \
        --tls require --tls-cert "$pki/ca/server-cert.pem" --tls-key "$pki/ca/server-key.pem" \
        --tls-client-ca "$pki/ca/ca-cert.pem" "${m[@]}" 2> "$work/serve.log" &
    server_pid=$!
    ctl="$work/nbd.sock.ctl"
    wait_for "$ctl" "control socket"
    local uri="nbds+unix:///md0?socket=$work/nbd.sock&tls-certificates=$pki/client"
    # A client in the clear, and one with a certificate from another CA, are refused.
    if nbdinfo "nbd+unix:///md0?socket=$work/nbd.sock" > /dev/null 2>&1; then
        fail "a client without TLS got in"
    fi
    if nbdinfo "nbds+unix:///md0?socket=$work/nbd.sock&tls-certificates=$pki/rogue" > /dev/null 2>&1; then
        fail "a client with another CA's certificate got in"
    fi
    nbdinfo "$uri" > "$work/info.out" || fail "nbdinfo over TLS"
    local size
    size=$("$raidkit" detail --control "$ctl" --json | jq -r '.status.array_bytes')
    grep -q "export-size: $size " "$work/info.out" || { cat "$work/info.out"; fail "nbdinfo: not the array's size ($size)"; }
    # ext4 over TLS: nbdfuse -> loop device -> mount, written, checked, read back.
    mkdir -p "$work/fuse" "$work/mnt"
    rm -f "$work/nbdfuse.pid"
    # nbdfuse does not let a URI name certificate files (and as root libnbd's default is
    # /etc/pki/libnbd), so nbdfuse runs nbdkit's nbd plugin, whose libnbd is the TLS client
    # of raidkit serve with the client certificate; nbdfuse speaks to it over a pipe.
    nbdfuse -P "$work/nbdfuse.pid" "$work/fuse/disk" --command nbdkit -s nbd \
        socket="$work/nbd.sock" export=md0 tls=require tls-certificates="$pki/client" &
    wait_for "$work/nbdfuse.pid" "nbdfuse"
    fuse_mounted=1
    wait_for "$work/fuse/disk" "nbdfuse file"
    loop=$(losetup --find --show "$work/fuse/disk")
    mkfs.ext4 -q -F "$loop"
    mount "$loop" "$work/mnt"; mounted=1
    write_files "$work/mnt/dir" 16 3
    head -c $((16 << 20)) /dev/urandom > "$work/mnt/big"
    checksum_all
    umount "$work/mnt"; mounted=""
    e2fsck -fn "$loop" > /dev/null || fail "e2fsck over TLS"
    mount -o ro "$loop" "$work/mnt"; mounted=1
    verify_mounted "over TLS"
    umount "$work/mnt"; mounted=""
    detach
    stop_server
    jq -s -e 'any(.[]; .event == "connection-refused" and ((.reason // "") | test("TLS")))' "$work/serve.log" > /dev/null \
        || fail "the refusal of the client in the clear is not logged with its reason"
    [ "$(jq -s '[.[] | select(.event == "connection-refused")] | length' "$work/serve.log")" -ge 2 ] \
        || fail "the refusal of the other CA's client is not logged"
    jq -s -e 'any(.[]; .event == "connection-negotiated" and .tls == true)' "$work/serve.log" > /dev/null \
        || fail "no connection logged as negotiated over TLS"
    # What went over TLS is on the members: offline, e2fsck finds the file system whole.
    "$raidkit" read --output "$d/offline.img" "${m[@]}" 2> /dev/null
    e2fsck -fn "$d/offline.img" > /dev/null 2>&1 || fail "e2fsck of the array read offline"
    rm -f "$work/serve.log"
    rm -rf "$d" "$pki"
    echo "== tls: ok ($(wc -l < "$work/sums") files verified over TLS; clear and foreign-CA clients refused and logged)"
}

for kind in "${kinds[@]}"; do
    case "$kind" in
        memory|file) run_simple_kind "$kind" ;;
        array) run_array ;;
        faults) run_faults ;;
        tls) run_tls ;;
        *) echo "e2e.sh: unknown kind $kind"; exit 2 ;;
    esac
done
echo "e2e.sh: pass"
