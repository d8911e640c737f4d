#!/usr/bin/env bash
# ISA check of the hip backend, run by ctest where hipcc builds the module (no GPU
# needed): extracts the <arch> code objects from the module's objects with the LLVM
# tools that come with hipcc and asserts that
#   1. the MFMA forward kernels (mfma_forward_kernel) and backward kernels
#      (mfma_dq_kernel, mfma_dkdv_kernel) exist and each contains at least
#      MIN_MFMA v_mfma instructions;
#   2. no MFMA kernel uses scratch (private segment <= MFMA_SCRATCH_MAX bytes, zero VGPR
#      and SGPR spills);
#   3. no portable kernel uses more than PORTABLE_SCRATCH_MAX bytes of scratch or
#      spills more than PORTABLE_SPILL_MAX VGPRs;
#   4. all kernels are wave64 on CDNA.
# Usage: check_code_object.sh <llvm-bin-dir> <arch> <object.o>...
set -euo pipefail
MIN_MFMA=${MIN_MFMA:-4}
MFMA_SCRATCH_MAX=${MFMA_SCRATCH_MAX:-0}
PORTABLE_SCRATCH_MAX=${PORTABLE_SCRATCH_MAX:-0}
PORTABLE_SPILL_MAX=${PORTABLE_SPILL_MAX:-0}

bin=$1 arch=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target="hipv4-amdgcn-amd-amdhsa--$arch"

n=0
for obj in "$@"; do
  "$bin/llvm-objcopy" --dump-section=.hip_fatbin="$work/fat.bin" "$obj" "$work/discard.o"
  # A section may hold several bundles (one per translation unit after linking);
  # split at each bundle's magic string and unbundle every piece.
  mapfile -t offsets < <(grep -obUa "__CLANG_OFFLOAD_BUNDLE__" "$work/fat.bin" | cut -d: -f1)
  size=$(stat -c %s "$work/fat.bin")
  for idx in "${!offsets[@]}"; do
    start=${offsets[$idx]}
    end=${offsets[$((idx + 1))]:-$size}
    dd if="$work/fat.bin" of="$work/piece.bin" bs=1 skip="$start" count=$((end - start)) \
      status=none
    if "$bin/clang-offload-bundler" --list --type=o --input="$work/piece.bin" |
        grep -qx "$target"; then
      "$bin/clang-offload-bundler" --unbundle --type=o --input="$work/piece.bin" \
        --targets="$target" --output="$work/co$n.elf"
      n=$((n + 1))
    fi
  done
done
[ "$n" -gt 0 ] || { echo "FAIL: no $arch code object in $*"; exit 1; }

# One line per kernel: name scratch vgpr_spills sgpr_spills vgprs wave mfma_count
for ((c = 0; c < n; ++c)); do
  co="$work/co$c.elf"
  "$bin/llvm-objdump" -d --mcpu="$arch" "$co" |
    awk '/^[0-9a-f]+ <.*>:$/ { name = substr($2, 2, length($2) - 3) }
         /v_mfma/ { count[name]++ }
         END { for (k in count) print k, count[k] }' >"$work/mfma$c.txt"
  "$bin/llvm-readelf" --notes "$co" |
    awk -v counts="$work/mfma$c.txt" '
      BEGIN { while ((getline line < counts) > 0) { split(line, f, " "); m[f[1]] = f[2] } }
      function flush() { if (name != "") print name, scratch, vspill, sspill, vgpr, wave, (name in m ? m[name] : 0) }
      /^  - \./ { flush(); name = "" }
      /^    \.name:/ { name = $2 }
      /^ *\.private_segment_fixed_size:/ { scratch = $2 }
      /^ *\.vgpr_spill_count:/ { vspill = $2 }
      /^ *\.sgpr_spill_count:/ { sspill = $2 }
      /^ *\.vgpr_count:/ { vgpr = $2 }
      /^ *\.wavefront_size:/ { wave = $2 }
      END { flush() }'
done >"$work/kernels.txt"

status=0
fail() { echo "FAIL: $*"; status=1; }
printf '%-10s %-8s %-7s %-7s %-5s %-5s %s\n' kind scratch vspill sspill vgpr mfma kernel
declare -A seen=()
while read -r name scratch vspill sspill vgpr wave mfma; do
  # (A kernel of neither family is "other": listed, not checked.)
  short=$(echo "$name" | grep -oE '(mfma|portable)_[a-z_]+_kernel' | head -1 || true)
  kind=${short:-other}
  printf '%-10s %-8s %-7s %-7s %-5s %-5s %s\n' "${kind%_kernel}" "$scratch" "$vspill" \
    "$sspill" "$vgpr" "$mfma" "$(echo "$name" | c++filt | cut -c1-90)"
  seen[$kind]=1
  [ "$wave" = 64 ] || fail "$kind: wavefront_size $wave, expected 64 on $arch"
  case $kind in
    mfma_*)
      [ "$mfma" -ge "$MIN_MFMA" ] || fail "$kind has $mfma v_mfma instructions (< $MIN_MFMA)"
      [ "$scratch" -le "$MFMA_SCRATCH_MAX" ] || fail "$kind uses $scratch bytes of scratch"
      [ "$vspill" -eq 0 ] && [ "$sspill" -eq 0 ] || fail "$kind spills ($vspill v, $sspill s)"
      ;;
    portable_*)
      [ "$scratch" -le "$PORTABLE_SCRATCH_MAX" ] || fail "$kind uses $scratch bytes of scratch"
      [ "$vspill" -le "$PORTABLE_SPILL_MAX" ] || fail "$kind spills $vspill VGPRs"
      ;;
  esac
done <"$work/kernels.txt"
for need in mfma_forward_kernel mfma_dq_kernel mfma_dkdv_kernel portable_forward_kernel \
            portable_dq_kernel portable_dkdv_kernel; do
  [ -n "${seen[$need]:-}" ] || fail "no $need in the $arch code objects"
done
[ $status = 0 ] && echo "PASS: $arch: MFMA in forward and backward kernels, scratch within bounds"
exit $status
