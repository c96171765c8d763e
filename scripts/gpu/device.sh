#!/usr/bin/env bash
# The command to give the device tool: runs scripts/gpu/run.sh and packs its results into $OUT as
# summary.txt and gpu-results.tgz (the tool brings back at most 8 files).
#   device tool:  command "scripts/gpu/device.sh [run.sh options]", carry [".gpu-bundle.tgz"]
# The bundle is unpacked from .gpu-bundle.tgz (made by prepare.sh) into /tmp first.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${OUT:?device.sh runs on the device machine, where OUT names the directory that comes back}"
work=/tmp/hpdt-gpu-results
rm -rf "$work"
bundle_args=()
if [ -f "$root/.gpu-bundle.tgz" ]; then
  rm -rf /tmp/hpdt-bundle && mkdir -p /tmp/hpdt-bundle && tar xzf "$root/.gpu-bundle.tgz" -C /tmp/hpdt-bundle
  bundle_args=(--bundle /tmp/hpdt-bundle/.gpu-bundle)
fi
"$root/scripts/gpu/run.sh" "$work" "${bundle_args[@]}" "$@"
rc=$?
cp "$work/summary.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/gpu-results.tgz" -C "$(dirname "$work")" "$(basename "$work")"
exit $rc
