#!/usr/bin/env bash
# Make what a GPU machine without npm needs to run the CLI, scripts/gpu-checks.ts and the decode profiles (docs/gpu.md,
# "How it was run"): esbuild bundles of them (every JavaScript dependency inlined), the `webgpu` package's index.js with its
# dawn.node and this machine's Node binary (both xz-compressed: the device run carries at most 64 MiB), a stub for
# playwright (imported by the CLI's browser bench, never run there), and Debian's Vulkan loader and GL dispatch
# libraries as .deb files (a bare machine may lack libvulkan.so.1). Writes .gpu/ and .gl/ (both git-ignored through
# .git/info/exclude); scripts/gpu-device-run.sh unpacks and runs them on the device.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
grep -qx '/.gl/' .git/info/exclude 2>/dev/null || echo '/.gl/' >> .git/info/exclude
rm -rf .gpu .gl
mkdir -p .gpu/bundle .gpu/node_modules/webgpu .gpu/node_modules/playwright .gl
# The CLI (bench --gpu), the kernel checks, and the two decode profiles (GPU kernel times; the host's share).
# The matmul variants' sweep (scripts/matmul-sweep.ts), the load's memory (scripts/load-memory.ts) and the few-rows
# program's vector loads against its one-element loads (scripts/vec-rows.ts), the fused linear's tiles
# (scripts/linear-tiles.ts), the f16 step's kernel profile (scripts/profile-f16-step.ts) and the replayed decode
# token's profile (scripts/profile-replay.ts) too.
for entry in src/cli/main.ts scripts/gpu-checks.ts scripts/profile-webgpu.ts scripts/profile-decode-host.ts \
  scripts/matmul-sweep.ts scripts/load-memory.ts scripts/vec-rows.ts scripts/linear-tiles.ts \
  scripts/profile-f16-step.ts scripts/profile-replay.ts; do
  [ -f "$entry" ] || continue
  npx esbuild "$entry" --bundle --platform=node --format=esm --target=node20 --ignore-annotations --log-level=warning \
    --external:webgpu --external:playwright --external:playwright-core --external:@napi-rs/canvas \
    --external:vite --external:fsevents \
    --banner:js="import { createRequire as __ppoCreateRequire } from 'module'; const require = __ppoCreateRequire(import.meta.url);" \
    --outfile=".gpu/bundle/$(basename "$entry" .ts).mjs"
  xz -T2 -6 ".gpu/bundle/$(basename "$entry" .ts).mjs" # JavaScript compresses ~8×: the carry limit is 64 MiB
done
cp node_modules/webgpu/package.json node_modules/webgpu/index.js .gpu/node_modules/webgpu/
xz -T2 -6 -c node_modules/webgpu/dist/linux-x64/dawn.node > .gpu/dawn.node.xz
xz -T2 -6 -c "$(command -v node)" > .gpu/node.xz
cat > .gpu/node_modules/playwright/package.json <<'JSON'
{ "name": "playwright", "version": "0.0.0-stub", "type": "module", "exports": { ".": "./test.js", "./test": "./test.js" } }
JSON
printf 'export default {};\nexport const chromium = undefined;\n' > .gpu/node_modules/playwright/test.js
# PEFT and accelerate (pure Python) and psutil from the local wheelhouse, for a device Python without them.
mkdir -p .gpu/wheels
for w in peft accelerate psutil; do
  f=$(find /opt/pypi/files /opt/wheels -name "$w-*.whl" 2>/dev/null | sort | tail -1)
  [ -n "$f" ] && cp "$f" .gpu/wheels/ || echo "no $w wheel here: the device's Python must have it"
done
(cd .gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
du -sh .gpu .gl
echo "carry: [\".gpu\", \".gl\"]; on the device: bash scripts/gpu-device-run.sh"
