#!/usr/bin/env bash
# The command to give the device tool: runs scripts/gpu/run.sh and packs its results into $OUT as
# summary.txt, gpu-results.tgz and ncu-reports.tar (the Nsight Compute reports; the tool brings back at most 8 files).
#   device tool:  command "scripts/gpu/device.sh [run.sh options]", carry [".gpu-bundle.txz"]
# The bundle is unpacked from .gpu-bundle.txz (made by prepare.sh) into /tmp first (tar's xz, or Python's
# lzma where the machine has no xz).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${OUT:?device.sh runs on the device machine, where OUT names the directory that comes back}"
export PATH=$PATH:/usr/local/cuda/bin
command -v ncu > /dev/null || for d in /opt/nvidia/nsight-compute/*/; do [ -x "$d/ncu" ] && PATH=$PATH:$d && break; done
work=/tmp/hpdt-gpu-results
rm -rf "$work"
bundle_args=()
if [ -f "$root/.gpu-bundle.txz" ]; then
  rm -rf /tmp/hpdt-bundle && mkdir -p /tmp/hpdt-bundle
  tar xJf "$root/.gpu-bundle.txz" -C /tmp/hpdt-bundle 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$root/.gpu-bundle.txz" /tmp/hpdt-bundle ||
    { echo "device.sh: cannot unpack .gpu-bundle.txz" >&2; exit 2; }
  bundle_args=(--bundle /tmp/hpdt-bundle/.gpu-bundle)
fi
"$root/scripts/gpu/run.sh" "$work" "${bundle_args[@]}" "$@"
rc=$?
cp "$work/summary.txt" "$OUT/" 2>/dev/null
# The results first, so that they come back even if the rendering below runs past the call's limit; then again
# with the renderings.
tar czf "$OUT/gpu-results.tgz" --exclude='*.ncu-rep' -C "$(dirname "$work")" "$(basename "$work")"
# Nsight Compute reports travel in one archive of their own, ncu-reports.tar (written before any rendering), with their
# details pages and their kernels' machine code with the stall samples per instruction in the results (the hot spots
# also in the summary): ncu_reports.sh, each rendering within NCU_RENDER_TIMEOUT seconds (default 60).
if ls "$work"/bench/*.ncu-rep > /dev/null 2>&1; then
  "$root/scripts/gpu/ncu_reports.sh" "$work/bench" "$OUT" "$OUT/summary.txt"
  tar czf "$OUT/gpu-results.tgz" -C "$(dirname "$work")" "$(basename "$work")"
fi
exit $rc
