#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu-bundle.sh made .gpu/ and .gl/ here and the device run carried them: unpack
# Node and dawn.node (python's lzma: the machine may lack xz), the Vulkan loader (dpkg -x, no root needed), then
# run the fused-kernel checks and `bench --gpu` twice in one process (PPO_GPU_BENCH_REPEAT), PyTorch beside us
# where python3 has torch with CUDA (the Qwen GRPO row's PyTorch side needs transformers and peft too; device.txt
# says whether they import). The default-plan PPO row and the Qwen GRPO row need no variable: they always run.
# Results go to $OUT (the device tool brings them back), or to ./gpu-out.
# Usage: bash scripts/gpu-device-run.sh [checks|sweep|toggles|bench|f16|bounded|profile|f16profile|replayprofile|load|vec|tiles|shared|all] (default all: checks and bench; sweep: the
# matmul variants of scripts/matmul-sweep.ts; f16: issue #36's f16-base rows, one process per shape so that each
# reading of GPU memory starts from a fresh device, then Qwen2.5-1.5B at the memory-bounded plan; bounded: that last process alone; profile: GPT-2's decode, GPU kernel times by tf.profile and the
# host's share by scripts/profile-decode-host.ts; toggles: the matmul sweep again under Dawn toggle sets,
# PPO_DAWN_TOGGLES; load: a full-size Qwen2.5-1.5B-shaped folder with random bf16 weights loaded with the base in
# f16 a weight at a time and as before 2026-11-30, one process each: host memory, time and the process's GPU memory
# after the load by scripts/load-memory.ts; vec: the few-rows program's vector loads, Qwen2.5-1.5B's f16 GRPO row
# at the default (the device's timing chose them or not) with the decode comparison, which times both forms, then
# with the other form (PPO_WEBGPU_VEC_ROWS); tiles: the fused linear on the tile kernel against its 64 x 64 tiles at the scoring's and update's products
# (scripts/linear-tiles.ts), then Qwen2.5-1.5B's f16 GRPO row with PPO_WEBGPU_LINEAR_TILES=fast and the vector loads
# on; f16profile: Qwen2.5-1.5B's f16 GRPO step under tf.profile, GPU time per kernel and phase,
# scripts/profile-f16-step.ts; replayprofile: a replayed decode token's GPU time per dispatch and program, GPT-2 at
# batch 16 and 1, Qwen2.5-1.5B at batch 1 with the base in f16 and in f32 and under LoRA at batch 16 sampled (GRPO's
# generation), scripts/profile-replay.ts; shared: Qwen2.5-1.5B's f16 GRPO row with every row in full,
# PPO_SHARED_PREFIX=0, beside vec's default row, which runs each group's prompt once). Several modes: comma-separated (checks,sweep,bench). docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out" .gpu/bin .gpu/node_modules/webgpu/dist/linux-x64 .gl/root
python3 - <<'PY'
import glob, lzma, os, shutil
pairs = [('.gpu/node.xz', '.gpu/bin/node'),
         ('.gpu/dawn.node.xz', '.gpu/node_modules/webgpu/dist/linux-x64/dawn.node')]
pairs += [(f, f[:-3]) for f in glob.glob('.gpu/bundle/*.mjs.xz')]
for src, dst in pairs:
    if not os.path.exists(dst):
        with lzma.open(src) as f, open(dst, 'wb') as g:
            shutil.copyfileobj(f, g)
os.chmod('.gpu/bin/node', 0o755)
PY
for d in .gl/*.deb; do dpkg -x "$d" .gl/root; done
export LD_LIBRARY_PATH="$PWD/.gl/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export PPO_WEBGPU_VULKAN="${PPO_WEBGPU_VULKAN:-system}" PPO_PYTHON="${PPO_PYTHON:-python3}"
# PEFT (and accelerate, which it imports) for the Qwen GRPO row's PyTorch side, when the machine's Python lacks them:
# pure-Python wheels carried in .gpu/wheels (scripts/gpu-bundle.sh), installed into a folder on PYTHONPATH.
if ! "$PPO_PYTHON" -c "import peft" >/dev/null 2>&1 && ls .gpu/wheels/*.whl >/dev/null 2>&1; then
  "$PPO_PYTHON" -m pip install --quiet --no-deps --no-index --target .gpu/py .gpu/wheels/*.whl >/dev/null 2>&1 || true
  export PYTHONPATH="$PWD/.gpu/py${PYTHONPATH:+:$PYTHONPATH}"
fi
node=.gpu/bin/node
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "no nvidia-smi"; } > "$out/device.txt"
$node --version >> "$out/device.txt"
{ "$PPO_PYTHON" -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" 2>&1 | tail -1 || true; } >> "$out/device.txt"
want() { [ "$what" = all ] && [ "$1" != f16 ] && [ "$1" != bounded ] && [ "$1" != sweep ] && [ "$1" != toggles ] && [ "$1" != profile ] && [ "$1" != load ] && [ "$1" != vec ] && [ "$1" != tiles ] && [ "$1" != f16profile ] && [ "$1" != replayprofile ] && [ "$1" != shared ] && return 0; case ",$what," in *",$1,"*) return 0;; esac; return 1; }
if want checks; then
  $node .gpu/bundle/gpu-checks.mjs 2>&1 | tee "$out/gpu-checks.txt" | tail -40
fi
if want sweep && [ -f .gpu/bundle/matmul-sweep.mjs ]; then
  $node .gpu/bundle/matmul-sweep.mjs 2>&1 | tee "$out/matmul-sweep.txt" | tail -30
fi
if want toggles && [ -f .gpu/bundle/matmul-sweep.mjs ]; then
  # The sweep under Dawn toggle sets (docs/gpu.md, "Dawn toggles"): Tint's bounds clamps and workgroup zeroing off,
  # then only the clamps Tint's range analysis proves needless. Dawn's defaults: the sweep mode.
  for set in disable_robustness,disable_workgroup_init,disable_polyfills_on_integer_div_and_mod \
    enable_integer_range_analysis_in_robustness; do
    echo "== matmul sweep, PPO_DAWN_TOGGLES=$set"
    PPO_DAWN_TOGGLES=$set $node .gpu/bundle/matmul-sweep.mjs 2>&1 | tee "$out/matmul-sweep-${set%%,*}.txt" | tail -30
  done
fi
if want bench; then
  PPO_GPU_BENCH_REPEAT="${PPO_GPU_BENCH_REPEAT:-2}" PPO_GPU_BENCH_SKIP_PLAIN="${PPO_GPU_BENCH_SKIP_PLAIN:-1}" \
    $node .gpu/bundle/main.mjs bench --gpu --json > "$out/bench-gpu.json" 2> "$out/bench-gpu.log" || {
      echo "bench --gpu failed:"; tail -40 "$out/bench-gpu.log"; exit 1; }
  tail -5 "$out/bench-gpu.log"
fi
if want bounded && ! want f16; then
  # Only the memory-bounded f16 rows: Qwen2.5-1.5B with recompute at micro-batches of each size in
  # $PPO_GPU_BOUNDED_MICROS (default 4, as the last step of f16), one process each. With $PPO_GPU_BOUNDED_TOGGLES (a
  # Dawn toggle set, e.g. disable_resource_suballocation: docs/gpu.md, "Where Dawn's memory goes"), one more process
  # at the last (smallest) of those micro-batches with those toggles on (files tagged with the first toggle's name).
  bounded_row() { # micro-batch, tag, toggles
    PPO_DAWN_TOGGLES=${3:-${PPO_DAWN_TOGGLES:-}} \
      PPO_GPU_BENCH_ROWS=f16 PPO_GPU_BENCH_F16_MODELS=qwen2.5-1.5b PPO_GPU_BENCH_F16_DECODE=0 PPO_GPU_BENCH_F16_PLANS=boundedPlan \
      PPO_GPU_BENCH_BOUNDED_MICRO=$1 $node .gpu/bundle/main.mjs bench --gpu --json \
      > "$out/bench-f16-bounded-$2.json" 2> "$out/bench-f16-bounded-$2.log" || {
        echo "bench --gpu (f16, bounded plan, micro-batch $1${3:+, toggles $3}) failed:"; tail -40 "$out/bench-f16-bounded-$2.log"; }
    tail -4 "$out/bench-f16-bounded-$2.log"
  }
  for micro in ${PPO_GPU_BOUNDED_MICROS:-4}; do bounded_row "$micro" "$micro" ""; done
  if [ -n "${PPO_GPU_BOUNDED_TOGGLES:-}" ]; then
    last=$(for m in ${PPO_GPU_BOUNDED_MICROS:-4}; do :; done; echo "$m")
    t=${PPO_GPU_BOUNDED_TOGGLES%%,*}
    bounded_row "$last" "$last-$t" "$PPO_GPU_BOUNDED_TOGGLES"
  fi
fi
if want f16; then
  # Qwen2.5-1.5B (with the f16/f32 decode comparison), then Qwen3-1.7B, each in its own process.
  for m in qwen2.5-1.5b qwen3-1.7b; do
    decode=0; [ "$m" = qwen2.5-1.5b ] && decode=1
    PPO_GPU_BENCH_ROWS=f16 PPO_GPU_BENCH_F16_MODELS=$m PPO_GPU_BENCH_F16_DECODE=$decode \
      $node .gpu/bundle/main.mjs bench --gpu --json > "$out/bench-f16-$m.json" 2> "$out/bench-f16-$m.log" || {
        echo "bench --gpu (f16, $m) failed:"; tail -40 "$out/bench-f16-$m.log"; }
    tail -4 "$out/bench-f16-$m.log"
  done
  # Qwen2.5-1.5B at the memory-bounded plan (micro-batches of 4 with recompute), first in its process so that its
  # GPU memory reading is its own; no PyTorch or decode again.
  PPO_GPU_BENCH_ROWS=f16 PPO_GPU_BENCH_F16_MODELS=qwen2.5-1.5b PPO_GPU_BENCH_F16_DECODE=0 PPO_GPU_BENCH_F16_PLANS=boundedPlan \
    $node .gpu/bundle/main.mjs bench --gpu --json > "$out/bench-f16-bounded.json" 2> "$out/bench-f16-bounded.log" || {
      echo "bench --gpu (f16, bounded plan) failed:"; tail -40 "$out/bench-f16-bounded.log"; }
  tail -4 "$out/bench-f16-bounded.log"
fi
if want vec; then
  # Vector loads in the few-rows program (docs/gpu.md, "Vector loads in the few-rows program"): the default first
  # (its decode comparison times batch-1 decode with and without them), then the same row with them on. First the
  # kernels alone at Qwen2.5-1.5B's decode linears: checked against the one-element loads, and timed.
  if [ -f .gpu/bundle/vec-rows.mjs ]; then
    $node .gpu/bundle/vec-rows.mjs 2>&1 | tee "$out/vec-rows.txt" | tail -3 || echo "vec-rows failed"
  fi
  # The default first: the form the device's timing chose (docs/gpu.md, "Kernels chosen by timing on the device"),
  # its decode comparison timing batch-1 decode with and without them; then the row with the other form, set.
  PPO_GPU_BENCH_ROWS=f16 PPO_GPU_BENCH_F16_MODELS=qwen2.5-1.5b PPO_GPU_BENCH_F16_DECODE=1 \
    $node .gpu/bundle/main.mjs bench --gpu --json > "$out/bench-f16-vec-default.json" 2> "$out/bench-f16-vec-default.log" || {
      echo "bench --gpu (f16, the default) failed:"; tail -40 "$out/bench-f16-vec-default.log"; }
  tail -6 "$out/bench-f16-vec-default.log"
  other=$($node -e 'try { const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").pop()); console.log(r.linearKernels?.inForce?.vecRows ? 0 : 1) } catch { console.log(1) }' "$out/bench-f16-vec-default.json")
  PPO_WEBGPU_VEC_ROWS=$other PPO_GPU_BENCH_ROWS=f16 PPO_GPU_BENCH_F16_MODELS=qwen2.5-1.5b PPO_GPU_BENCH_F16_DECODE=0 \
    $node .gpu/bundle/main.mjs bench --gpu --json > "$out/bench-f16-vec$other.json" 2> "$out/bench-f16-vec$other.log" || {
      echo "bench --gpu (f16, PPO_WEBGPU_VEC_ROWS=$other) failed:"; tail -40 "$out/bench-f16-vec$other.log"; }
  tail -6 "$out/bench-f16-vec$other.log"
fi
if want shared; then
  # A group's prompt once (docs/engine.md, "A group's prompt, once"): the f16 row with every row in full, to set
  # beside the default row (vec's bench-f16-vec-default.json, or f16's), which shares it.
  PPO_SHARED_PREFIX=0 PPO_GPU_BENCH_ROWS=f16 PPO_GPU_BENCH_F16_MODELS=qwen2.5-1.5b PPO_GPU_BENCH_F16_DECODE=0 \
    $node .gpu/bundle/main.mjs bench --gpu --json > "$out/bench-f16-shared0.json" 2> "$out/bench-f16-shared0.log" || {
      echo "bench --gpu (f16, PPO_SHARED_PREFIX=0) failed:"; tail -40 "$out/bench-f16-shared0.log"; }
  tail -6 "$out/bench-f16-shared0.log"
fi
if want tiles; then
  # The fused linear on matMulFast's tile kernel (docs/gpu.md, "The fused linear on the tile kernel"): the products
  # alone, checked and timed both ways, then the f16 row with it (and the vector loads, timed by `vec` beside it).
  if [ -f .gpu/bundle/linear-tiles.mjs ]; then
    $node .gpu/bundle/linear-tiles.mjs 2>&1 | tee "$out/linear-tiles.txt" | tail -2 || echo "linear-tiles failed"
  fi
  PPO_WEBGPU_LINEAR_TILES=fast PPO_WEBGPU_VEC_ROWS=1 PPO_GPU_BENCH_ROWS=f16 PPO_GPU_BENCH_F16_MODELS=qwen2.5-1.5b PPO_GPU_BENCH_F16_DECODE=0 \
    $node .gpu/bundle/main.mjs bench --gpu --json > "$out/bench-f16-tiles.json" 2> "$out/bench-f16-tiles.log" || {
      echo "bench --gpu (f16, PPO_WEBGPU_LINEAR_TILES=fast) failed:"; tail -40 "$out/bench-f16-tiles.log"; }
  tail -6 "$out/bench-f16-tiles.log"
fi
if want f16profile && [ -f .gpu/bundle/profile-f16-step.mjs ]; then
  # Where the f16 step's GPU time goes (docs/gpu.md, "Where the f16 step's time goes"), one process.
  $node .gpu/bundle/profile-f16-step.mjs qwen2.5-1.5b 25 2>&1 | tee "$out/profile-f16-step.txt" | tail -3 || echo "profile-f16-step failed"
fi
if want replayprofile && [ -f .gpu/bundle/profile-replay.mjs ]; then
  # Where a replayed decode token's GPU time goes (docs/gpu.md, "Where a replayed token's time goes"), one process.
  $node .gpu/bundle/profile-replay.mjs gpt2,qwen > "$out/profile-replay.txt" 2>&1 || echo "profile-replay failed"
  grep -v '^{' "$out/profile-replay.txt" | tail -50 || true
fi
if want profile; then
  $node .gpu/bundle/profile-webgpu.mjs gpt2 2>&1 | tee "$out/profile-webgpu.txt" | tail -25
  for width in 64 768; do
    $node .gpu/bundle/profile-decode-host.mjs "$width" 16 24 2>&1 | tee "$out/profile-decode-host-$width.txt" | tail -16
  done
fi
if want load && [ -f .gpu/bundle/load-memory.mjs ]; then
  # The first process writes the 3.1 GB folder (about a minute), the second reads it again.
  for mode in "" --together; do
    $node --expose-gc .gpu/bundle/load-memory.mjs /tmp/ppo-load-qwen25 --make qwen2.5-1.5b --half $mode \
      2>&1 | tee -a "$out/load-memory.txt" | tail -1
  done
  rm -rf /tmp/ppo-load-qwen25
fi
