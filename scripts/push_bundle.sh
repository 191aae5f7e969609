#!/usr/bin/env bash
# Push an edgespec bundle to an Android device, to the path the demo app reads.
#   scripts/push_bundle.sh [BUNDLE_DIR] [DEVICE_PATH]
# Defaults: bundles/default -> /data/local/tmp/edgespec/bundle. Needs `adb` and one device
# (set ANDROID_SERIAL to choose). The bundle is verified here first (edgespec verify when
# available, else sha256sum against manifest.json) and its checksums again by the app.
set -euo pipefail
BUNDLE="${1:-bundles/default}"
DEST="${2:-/data/local/tmp/edgespec/bundle}"

die() { echo "push_bundle: $*" >&2; exit 1; }
[ -d "$BUNDLE" ] || die "bundle directory '$BUNDLE' not found (make one with: edgespec export)"
[ -f "$BUNDLE/manifest.json" ] || die "'$BUNDLE' has no manifest.json (not an edgespec bundle)"
command -v adb >/dev/null || die "adb not found: install Android platform-tools and put adb on PATH"

if command -v edgespec >/dev/null; then
  edgespec verify --bundle "$BUNDLE" >/dev/null || die "bundle '$BUNDLE' failed verification (run: edgespec verify --bundle $BUNDLE)"
else
  python3 - "$BUNDLE" <<'PY' || die "bundle '$BUNDLE' failed its checksums"
import hashlib, json, pathlib, sys
d = pathlib.Path(sys.argv[1]); m = json.loads((d / "manifest.json").read_text())
for name, f in m["files"].items():
    if hashlib.sha256((d / name).read_bytes()).hexdigest() != f["sha256"]:
        sys.exit(f"{name}: SHA-256 mismatch")
PY
fi

[ "$(adb get-state 2>/dev/null)" = "device" ] || die "no device: connect one with USB debugging on (adb devices)"
adb shell "rm -rf '$DEST.partial' && mkdir -p '$DEST.partial'"
for f in "$BUNDLE"/*; do
  adb push "$f" "$DEST.partial/" >/dev/null
  echo "pushed $(basename "$f")"
done
# swap in whole, so the app never sees a half-copied bundle
adb shell "rm -rf '$DEST' && mv '$DEST.partial' '$DEST'"
echo "bundle at $DEST on $(adb get-serialno); start the app: adb shell am start -n dev.edgespec.app/.MainActivity"
