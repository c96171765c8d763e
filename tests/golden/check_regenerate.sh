#!/usr/bin/env bash
# Runs make_fixtures.py into a temporary folder and compares every file with the committed one.
#   check_regenerate.sh GOLDEN_DIR
set -euo pipefail
golden=$1
py=/usr/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "SKIP: $py cannot import torch (apt-get install python3-torch)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$golden/make_fixtures.py" "$tmp" > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
status=0
for f in "$golden"/fixtures/*.json; do
  name=$(basename "$f")
  if [ ! -f "$tmp/$name" ]; then
    echo "FAIL: make_fixtures.py did not write $name"
    status=1
  elif ! cmp -s "$f" "$tmp/$name"; then
    echo "FAIL: regenerated $name differs from the committed tests/golden/fixtures/$name"
    status=1
  fi
done
n_new=$(ls "$tmp"/*.json | wc -l)
n_old=$(ls "$golden"/fixtures/*.json | wc -l)
[ "$n_new" = "$n_old" ] || { echo "FAIL: make_fixtures.py wrote $n_new files, $n_old are committed"; status=1; }
[ $status = 0 ] && echo "all $n_old fixture files regenerate byte for byte"
exit $status
