#!/bin/sh
# SPDX-License-Identifier: MIT
# cupool-bench workloads on the simulated driver, kept short (--quick, a 400 ms decay time so
# the service mix's warm-up lasts under a second):
#  - --devices takes 1 to the device count or "all" and refuses anything else (exit status 2);
#  - with one device the devices workload says it needs two and gives no figure, in the table
#    and in the JSON document;
#  - with two simulated devices (FAKECUDA_DEVICES=2) the devices workload runs the service mix
#    on device 0 alone, then on both at once, request threads spread over the two, each
#    device with its own completion thread and some events released with the other device
#    current; the bench itself fails on a wrong counter value or a handle of the wrong
#    context, so exit status 0 and the per-device rows are what is checked here.
set -u
bench=${CUPOOLTEST_BUILDDIR:?}/bench/cupool-bench
[ -x "$bench" ] || { echo "check_bench: no $bench"; exit 99; }
: "${CUPOOL_DRIVER_PATH:?the simulated driver}"
export CUPOOL_DRIVER_PATH
CUPOOL_DECAY_MS=400
export CUPOOL_DECAY_MS
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "check_bench: $*"; status=1; }

for bad in 0 17 x all2; do
    FAKECUDA_DEVICES=2 "$bench" workloads --devices "$bad" devices >"$tmp/bad.out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q "^cupool-bench: --devices must be" "$tmp/bad.out" ||
        fail "--devices $bad: exit status $rc, $(head -n 1 "$tmp/bad.out")"
done
FAKECUDA_DEVICES=2 "$bench" workloads --devices 3 devices >"$tmp/bad.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "device count (2 here), not 3" "$tmp/bad.out" ||
    fail "--devices 3 with two devices: exit status $rc, $(head -n 1 "$tmp/bad.out")"

FAKECUDA_DEVICES=1 "$bench" workloads devices --quick >"$tmp/one.out" 2>&1 ||
    { rc=$?; cat "$tmp/one.out"; fail "devices with one device: exit status $rc"; }
grep -q "^devices: needs two devices" "$tmp/one.out" ||
    { cat "$tmp/one.out"; fail "devices with one device does not say it needs two"; }
grep -q "device 0 alone" "$tmp/one.out" && fail "devices with one device printed figures"
FAKECUDA_DEVICES=1 "$bench" workloads devices --quick --json >"$tmp/one.json" 2>"$tmp/one.err" ||
    { rc=$?; cat "$tmp/one.err"; fail "devices --json with one device: exit status $rc"; }
grep -q '"devices":{"count":1,"skipped":"needs two devices"}' "$tmp/one.json" ||
    fail "devices --json with one device: no \"skipped\" member: $(cat "$tmp/one.json")"

start=$(date +%s)
FAKECUDA_DEVICES=2 "$bench" workloads devices --devices 2 --quick >"$tmp/two.out" 2>&1 ||
    { rc=$?; cat "$tmp/two.out"; fail "workloads devices --devices 2: exit status $rc"; }
secs=$(($(date +%s) - start))
for row in "checked, device 0 alone" "checked, device 0, 2 devices busy" \
           "checked, device 1, 2 devices busy" "promised, device 0 alone" \
           "promised, device 0, 2 devices busy" "promised, device 1, 2 devices busy"; do
    grep -q "^  $row  " "$tmp/two.out" || fail "workloads devices --devices 2: no row '$row'"
done
grep -q "^  checked: device 0 with 2 devices busy / alone: requests/s [0-9.]*x, p99.9 [0-9.]*x" \
    "$tmp/two.out" || fail "workloads devices --devices 2: no ratio line"
grep -q "^  promised: every value checked: [1-9][0-9]* counter slots as expected" "$tmp/two.out" ||
    fail "workloads devices --devices 2: no line of checked values"
[ $status -eq 0 ] || { cat "$tmp/two.out"; exit 1; }
sed -n '/^devices:/,/^$/p' "$tmp/two.out"
echo "check_bench: --devices refuses bad values; devices says it needs two devices with one;" \
     "with two it ran in ${secs} s, every value as expected"
exit 0
