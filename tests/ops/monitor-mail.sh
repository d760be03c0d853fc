#!/usr/bin/env bash
# `raidkit monitor --mail` through a real MTA: a member failed in a served array reaches a
# local mailbox within 2 seconds, as mdadm's monitor mail (Fail and DegradedArray, with the
# member and the array in the subject), and `--test` mails a TestMessage. The mail goes
# through the machine's `sendmail -t` interface (Debian's exim4 in its default local-delivery
# configuration, installed by scripts/test) to the mailbox of a local user this test adds.
# Needs root (the user and its mailbox).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release -q -p raidkit-cli
R="$CARGO_TARGET_DIR/release/raidkit"
USER_NAME=raidkitmon
BOX=/var/mail/$USER_NAME
[ -x /usr/sbin/sendmail ] || { echo "monitor-mail: no /usr/sbin/sendmail (install exim4-daemon-light)" >&2; exit 1; }
id "$USER_NAME" >/dev/null 2>&1 \
    || useradd -m -d "/var/lib/$USER_NAME" -s /usr/sbin/nologin "$USER_NAME"
: > "$BOX" 2>/dev/null || true
chown "$USER_NAME:mail" "$BOX" 2>/dev/null || true

D=$(mktemp -d /tmp/raidkit-monitor-mail.XXXXXX)
cleanup() {
    [ -n "${MON:-}" ] && kill "$MON" 2>/dev/null || true
    [ -n "${SRV:-}" ] && kill "$SRV" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
"$R" create --level 5 --image-size 16M "$D"/m{0..2}.img > /dev/null
"$R" serve --socket "$D/nbd.sock" --name md0 "$D"/m{0..2}.img 2> "$D/serve.log" &
SRV=$!
for _ in $(seq 100); do [ -S "$D/nbd.sock.ctl" ] && break; sleep 0.1; done
[ -S "$D/nbd.sock.ctl" ] || { cat "$D/serve.log" >&2; echo "monitor-mail: no control socket" >&2; exit 1; }

mails() { grep -c '^Subject: ' "$BOX" 2>/dev/null || true; }
# wait_mail N: until the mailbox holds N messages, at most 2 s; prints the time it took.
wait_mail() {
    local start=$(date +%s%N)
    while [ "$(mails)" -lt "$1" ]; do
        [ $(( $(date +%s%N) - start )) -gt 2000000000 ] && { echo "timeout"; return 1; }
        sleep 0.02
    done
    echo "$(( ($(date +%s%N) - start) / 1000000 )) ms"
}

"$R" monitor --control "$D/nbd.sock.ctl" --mail "$USER_NAME" --test > "$D/monitor.out" 2>&1 &
MON=$!
took=$(wait_mail 1) || { cat "$D/monitor.out" >&2; echo "monitor-mail: no TestMessage mail" >&2; exit 1; }
grep -q "^Subject: TestMessage event on $D/nbd.sock.ctl:md0:" "$BOX" \
    || { cat "$BOX" >&2; echo "monitor-mail: TestMessage subject" >&2; exit 1; }
echo "monitor-mail: TestMessage delivered in $took"
sleep 0.3
"$R" fail --control "$D/nbd.sock.ctl" --member "$D/m1.img" > /dev/null
took=$(wait_mail 3) || { cat "$D/monitor.out" "$BOX" >&2; echo "monitor-mail: Fail and DegradedArray not mailed within 2 s" >&2; exit 1; }
grep -q "^Subject: Fail event on $D/nbd.sock.ctl:md0:" "$BOX" \
    || { cat "$BOX" >&2; echo "monitor-mail: no Fail mail" >&2; exit 1; }
grep -q "^Subject: DegradedArray event on $D/nbd.sock.ctl:md0:" "$BOX" \
    || { cat "$BOX" >&2; echo "monitor-mail: no DegradedArray mail" >&2; exit 1; }
grep -q "m1.img" "$BOX" || { cat "$BOX" >&2; echo "monitor-mail: the mail does not name the member" >&2; exit 1; }
echo "monitor-mail: Fail and DegradedArray delivered to $BOX in $took after the failure"
echo "monitor-mail: pass"
