#!/usr/bin/env bash
# On the GPU device machine: the Python package against a built libflashattn whose cuda
# backend is there. Runs the whole pytest suite (its CUDA half runs here: every test on
# cuda tensors, realistic shapes on the tensor-core kernels, the current stream, CUDA
# graph capture, torch.compile through the custom ops), the flash_attn script on cuda
# (acceptance: FlashAttention code with its import changed), bench_compat.py (compat
# flash_attn_func vs torch SDPA flash / cuDNN, forward, and forward+backward), and the
# binding's per-call overhead. Logs and JSON under $OUT.
# Usage (device, repo root, carry [".carry"]):
#   source .ci/device_build.sh            # builds build-device/ (libflashattn.so + cuda module)
#   bash python/tests/device.sh build-device [commit]
# The argument: a directory holding libflashattn.so, or an install prefix (its lib/).
# pytest: the machine's when importable, else .carry/pytest (Debian 12's pure-Python
# pytest and its dependencies, `apt-get download` + `dpkg -x`, see tests/README.md).
# Last line: "python device: N passed, M failed, K skipped; script ok|FAIL; bench ok|FAIL".
set -uo pipefail
where=${1:-build-device}
commit=${2:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
out=${OUT:-/tmp/out}
py=${PYTHON:-python3}
mkdir -p "$out"
if [ -f "$where/libflashattn.so" ]; then lib=$where
elif [ -f "$where/lib/libflashattn.so" ]; then lib=$where/lib
else echo "python device: no libflashattn.so in $where or $where/lib"; exit 1; fi
export FLASHATTN_LIBRARY; FLASHATTN_LIBRARY=$(cd "$lib" && pwd)
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"  # the package from this checkout
if ! $py -c "import pytest" 2>/dev/null; then
  export PYTHONPATH="$PYTHONPATH:$PWD/.carry/pytest/usr/lib/python3/dist-packages"
fi
$py - <<'PY'
import flashattn, torch
print("torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO GPU VISIBLE TO TORCH")
print("libflashattn", flashattn.version(), flashattn.library_path())
for b in flashattn.backends():
    print(" ", b.name, "available" if b.available else "UNAVAILABLE: " + b.reason, b.detail)
PY

timeout 1200 $py -m pytest -p no:cacheprovider -rs python/tests > "$out/pytest.log" 2>&1
pytest_rc=$?
grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -20
grep -E "^SKIPPED" "$out/pytest.log" | head -20
summary=$(tail -1 "$out/pytest.log")
echo "pytest (rc=$pytest_rc): $summary"
count() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE "^[0-9]+" || echo 0; }
passed=$(count passed) failed=$(count failed) errors=$(count error) skipped=$(count skipped)
[ "$pytest_rc" -ne 0 ] && [ "$failed" -eq 0 ] && [ "$errors" -eq 0 ] && failed=1  # died before its summary

$py python/tests/flash_attn_script.py cuda > "$out/flash_attn_script.log" 2>&1
script_rc=$?
cat "$out/flash_attn_script.log"

bench_rc=0
# BENCH=0 skips the compat timings (a correctness-only run).
for mode in $([ "${BENCH:-1}" = 0 ] || echo "fwd --backward"); do
  [ "$mode" = fwd ] && mode=""
  name=bench_compat${mode:+_bwd}
  timeout 600 $py python/bench_compat.py $mode --commit "$commit" --json "$out/$name.json" > "$out/$name.md" 2>&1 \
    || bench_rc=1
  cat "$out/$name.md"
done
$py python/bench_overhead.py > "$out/overhead.txt" 2>&1 || bench_rc=1
cat "$out/overhead.txt"

ok() { [ "$1" -eq 0 ] && echo ok || echo FAIL; }
echo "python device: $passed passed, $((failed + errors)) failed, $skipped skipped; script $(ok $script_rc); bench $(ok $bench_rc)"
[ "$((failed + errors))" -eq 0 ] && [ "$script_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
