#!/bin/sh
# device_errors.sh — devices and their errors, the same on every machine:
# CUDA_VISIBLE_DEVICES= hides any GPU, so only cpu:0 exists and asking for
# another device must say exactly which exist (docs/gpu.md).
# Without hiding, devices() must start with cpu:0 and CUDA's start-up must
# leave stderr empty (a CUDA build on a machine without a GPU).
: "${TFE:?TFE is not set (run through make check)}"
fail=0
check() { # check LABEL EXPECTED-STDERR EXPECTED-STDOUT ARGS...
    label=$1 want_err=$2 want_out=$3
    shift 3
    for mode in "" --eager --stage-all; do
        out=$($TFE_TEST_WRAPPER "$TFE" $mode "$@" 2>/tmp/device_errors.$$)
        err=$(grep -v '^tfe: --stage-all: ' /tmp/device_errors.$$)
        if [ "$out" != "$want_out" ] || [ "$err" != "$want_err" ]; then
            echo "FAIL $label ($mode): stdout [$out] want [$want_out]; stderr [$err] want [$want_err]"
            fail=1
        fi
    done
    rm -f /tmp/device_errors.$$
}
CUDA_VISIBLE_DEVICES=
export CUDA_VISIBLE_DEVICES

check devices "" 'list("cpu:0")' -e 'print(devices())'
check device-missing "<cmdline>:1:1: error: device(): no device 'gpu:0' (devices: cpu:0)
 1 | device(\"gpu:0\")
   | ^~~~~~" "" -e 'device("gpu:0")'
check to-missing "<cmdline>:2:7: error: to(): no device 'gpu:1' (devices: cpu:0)
 2 | print(to(x, \"gpu:1\"))
   |       ^~" "[1.0, 2.0]" -e 'let x = [1.0, 2.0]; print(x)
print(to(x, "gpu:1"))'
check with-missing "<cmdline>:1:6: error: device(): no device 'tpu' (devices: cpu:0)
 1 | with device(\"tpu\") { print(1) }
   |      ^~~~~~" "" -e 'with device("tpu") { print(1) }'
check with-nested "" "cpu:0 cpu:0 cpu:0" -e 'with device("cpu") { with device("cpu:0") as d { print(d.name, ([1.0] * 2).device, end=" ") } }
print(to([1.0], "cpu").device)'
TFE_DEVICE=gpu:0
export TFE_DEVICE
check env-missing "tfe: TFE_DEVICE: no device 'gpu:0' (devices: cpu:0); using cpu:0" "cpu:0" \
    -e 'print(([1.0] + 1).device)'
unset TFE_DEVICE
unset CUDA_VISIBLE_DEVICES
out=$("$TFE" -e 'print(devices())' 2>/tmp/device_errors.$$)
case $out in 'list("cpu:0"'*) ;; *) echo "FAIL devices() does not start with cpu:0: $out"; fail=1 ;; esac
if [ -s /tmp/device_errors.$$ ]; then echo "FAIL devices() wrote to stderr:"; cat /tmp/device_errors.$$; fail=1; fi
rm -f /tmp/device_errors.$$
[ $fail = 0 ] && echo "device_errors: all passed"
exit $fail
