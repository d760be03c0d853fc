#!/usr/bin/env bash
# End to end: real raidkit reads real SMART (smartctl) from real block devices in a qemu VM.
#
#   tests/smart/e2e.sh                 build raidkit (cargo build --release) and run the test
#   RAIDKIT=PATH tests/smart/e2e.sh    use the raidkit binary at PATH instead of building one
#   tests/smart/e2e.sh --keep          keep the work directory (initramfs, images, console log)
#
# The VM of tests/smart/capture.sh (tests/smart/vm-lib.sh: Debian's kernel and qemu from the md
# oracle's cache, software emulation) with raidkit and smartctl in its initramfs and two 64 MiB
# disks, /dev/sda (ide-hd, ata_piix) and /dev/nvme0n1 (qemu's nvme). In the VM:
#   raidkit create --level 1 --init none /dev/sda /dev/nvme0n1
#   raidkit detail /dev/sda /dev/nvme0n1           "Drive Health" with both drives PASSED
#   raidkit detail --json /dev/sda /dev/nvme0n1    both members' health: a smartctl report, passed
# Prints a PASS or FAIL line per check; exit status 0 only if all passed.
set -euo pipefail
# One block, so bash parses the whole script before running it.
{

t_start=$(date +%s)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --keep) keep=1 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "smart-e2e: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

vm_tag=smart-e2e
vm_timeout=${SMART_E2E_VM_TIMEOUT:-900}
# shellcheck source=tests/smart/vm-lib.sh
. "$here/vm-lib.sh"

vm_host_setup jq:jq
vm_find_qemu
vm_find_kernel
vm_resolve_modules

# ---------------------------------------------------------------- raidkit
if [ -n "${RAIDKIT:-}" ]; then
    raidkit=$RAIDKIT
else
    log "cargo build --release -p raidkit-cli"
    (cd "$repo" && cargo build --release -p raidkit-cli)
    raidkit="$repo/target/release/raidkit"
fi
[ -x "$raidkit" ] || die "no raidkit binary at $raidkit"

work=$(mktemp -d "${TMPDIR:-/tmp}/smart-e2e.XXXXXX")
cleanup() {
    if [ "$keep" -eq 1 ]; then log "kept work directory $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# Without its debug info (the release profile keeps it): a smaller initramfs, faster to boot.
if command -v strip > /dev/null 2>&1 && strip --strip-debug -o "$work/raidkit" "$raidkit" 2> /dev/null; then
    raidkit_copy="$work/raidkit"
else
    raidkit_copy=$raidkit
fi

# ---------------------------------------------------------------- /init of the VM
members="/dev/sda /dev/nvme0n1"
read -r -d '' vm_body << EOF || true
marked create raidkit create --level 1 --init none $members
marked detail raidkit detail $members
marked detail-json raidkit detail --json $members
EOF
# In the work directory: a new raidkit makes a new initramfs, not worth caching.
vm_build_initramfs "$work" "$(vm_init_script "$vm_body")" \
    "$raidkit_copy=/usr/sbin/raidkit" "${smartctl_files[@]}"

# ---------------------------------------------------------------- run and check
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "smart-e2e: PASS $*"; }
fail() {
    failed=$((failed + 1))
    echo "smart-e2e: FAIL $1"
    shift
    for line in "$@"; do echo "smart-e2e:     $line"; done
}
# step NAME: NAME's output (in $work/NAME.out) and exit status; a FAIL when it did not run or
# did not exit 0 (with its standard error).
step() {
    local name=$1 rc
    rc=$(vm_extract "$work" "$name" "$work/$name.out")
    if [ "$rc" = 0 ]; then return 0; fi
    local -a err=()
    mapfile -t err < <(sed -n "s/^@@RKSMART STDERR $name: //p" "$work/console.txt" | head -n 20)
    fail "$name: raidkit $([ -n "$rc" ] && echo "exited $rc" || echo "did not run (no output)")" "${err[@]}" \
        "output: $(head -c 2000 "$work/$name.out" 2>/dev/null || true)"
    return 1
}

vm_boot "$work" 64M || log "the VM did not finish"
grep '^smart-vm:' "$work/console.txt" >&2 || true

if step create; then
    pass "create: raidkit create --level 1 --init none $members"
fi

if step detail; then
    sed 's/^/smart-e2e:   | /' "$work/detail.out"
    if grep -q 'Drive Health' "$work/detail.out"; then
        pass "detail: a Drive Health block"
    else
        fail "detail: no Drive Health line"
    fi
    for m in $members; do
        if line=$(grep -E "^[[:space:]]*$m: PASSED" "$work/detail.out"); then
            pass "detail: $(echo "$line" | sed 's/^[[:space:]]*//')"
        else
            fail "detail: no line \"$m: PASSED\"" "$(grep -F "$m:" "$work/detail.out" || echo "no line names $m")"
        fi
    done
fi

if step detail-json; then
    if ! jq -e . "$work/detail-json.out" > /dev/null 2>&1; then
        fail "detail --json: not JSON" "$(head -c 2000 "$work/detail-json.out")"
    else
        for m in $members; do
            health=$(jq -c --arg m "$m" '[.status.members[] | select(.name == $m)][0].health' "$work/detail-json.out")
            if jq -e '.health == "report" and .passed == true and (.source | type == "string" and startswith("smartctl"))' \
                <<< "$health" > /dev/null 2>&1; then
                pass "detail --json: $m $(jq -r '"health \(.health), passed \(.passed), source \(.source)"' <<< "$health")"
            else
                fail "detail --json: $m health is not a passed smartctl report" "health: $health"
            fi
        done
    fi
fi

if [ "$failed" -gt 0 ] || ! grep -q '^@@RKSMART DONE' "$work/console.txt"; then
    vm_console_tail "$work" 40
fi
echo "smart-e2e: $passed passed, $failed failed in $(( $(date +%s) - t_start )) s"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
exit $?
}
