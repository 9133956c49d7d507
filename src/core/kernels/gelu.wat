;; gelu_new's elementwise arithmetic around its sigmoid, for the tfjs WASM backend, with WebAssembly SIMD, on the
;; tfjs heap. model/ops.ts geluNew computes y = x·σ(k·(x + c·x³)) and its gradient
;;   dx = dy·(s + (x·(s·(1 − s)))·(k + k3·(x·x))),  s = σ(k·(x + c·x³)), k3 = 3·c·k,
;; as tfjs ops: 5 kernels for the sigmoid's argument, 9 for the gradient, each a pass over the tensor. These two
;; functions do the same float32 operations in the same order, each rounded as tfjs's kernel rounds it (IEEE
;; float32 multiply, add and subtract: exact to the bit), so their results are the ops' bit for bit; the sigmoid
;; itself stays tfjs's (XNNPACK's) kernel. Pointers are byte offsets of float32 arrays of n elements; four lanes
;; at a time, then the leftover elements one by one. Built into src/core/kernels/gelu-wasm.ts by
;; scripts/build-wasm-kernels.ts, twice: as written, and importing a shared memory (tfjs's threaded build).
(module
  (import "env" "memory" (memory 1))

  ;; out = k·(x + c·((x·x)·x))
  (func (export "gelu_inner") (param $x i32) (param $out i32) (param $n i32) (param $c f32) (param $k f32)
    (local $end i32) (local $end4 i32) (local $v v128) (local $cv v128) (local $kv v128) (local $s f32)
    (local.set $cv (f32x4.splat (local.get $c)))
    (local.set $kv (f32x4.splat (local.get $k)))
    (local.set $end (i32.add (local.get $x) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end4 (i32.add (local.get $x) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (block $done4
      (loop $l4
        (br_if $done4 (i32.ge_u (local.get $x) (local.get $end4)))
        (local.set $v (v128.load (local.get $x)))
        (v128.store (local.get $out)
          (f32x4.mul (local.get $kv)
            (f32x4.add (local.get $v)
              (f32x4.mul (local.get $cv) (f32x4.mul (f32x4.mul (local.get $v) (local.get $v)) (local.get $v))))))
        (local.set $x (i32.add (local.get $x) (i32.const 16)))
        (local.set $out (i32.add (local.get $out) (i32.const 16)))
        (br $l4)))
    (block $done
      (loop $l1
        (br_if $done (i32.ge_u (local.get $x) (local.get $end)))
        (local.set $s (f32.load (local.get $x)))
        (f32.store (local.get $out)
          (f32.mul (local.get $k)
            (f32.add (local.get $s)
              (f32.mul (local.get $c) (f32.mul (f32.mul (local.get $s) (local.get $s)) (local.get $s))))))
        (local.set $x (i32.add (local.get $x) (i32.const 4)))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (br $l1))))

  ;; out = dy·(s + (x·(s·(1 − s)))·(k + k3·(x·x)))
  (func (export "gelu_grad") (param $dy i32) (param $x i32) (param $sp i32) (param $out i32) (param $n i32)
    (param $k f32) (param $k3 f32)
    (local $end i32) (local $end4 i32) (local $v v128) (local $s v128) (local $kv v128) (local $k3v v128)
    (local $one v128) (local $a f32) (local $b f32)
    (local.set $kv (f32x4.splat (local.get $k)))
    (local.set $k3v (f32x4.splat (local.get $k3)))
    (local.set $one (f32x4.splat (f32.const 1)))
    (local.set $end (i32.add (local.get $x) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end4 (i32.add (local.get $x) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (block $done4
      (loop $l4
        (br_if $done4 (i32.ge_u (local.get $x) (local.get $end4)))
        (local.set $v (v128.load (local.get $x)))
        (local.set $s (v128.load (local.get $sp)))
        (v128.store (local.get $out)
          (f32x4.mul (v128.load (local.get $dy))
            (f32x4.add (local.get $s)
              (f32x4.mul
                (f32x4.mul (local.get $v) (f32x4.mul (local.get $s) (f32x4.sub (local.get $one) (local.get $s))))
                (f32x4.add (local.get $kv) (f32x4.mul (local.get $k3v) (f32x4.mul (local.get $v) (local.get $v))))))))
        (local.set $x (i32.add (local.get $x) (i32.const 16)))
        (local.set $sp (i32.add (local.get $sp) (i32.const 16)))
        (local.set $dy (i32.add (local.get $dy) (i32.const 16)))
        (local.set $out (i32.add (local.get $out) (i32.const 16)))
        (br $l4)))
    (block $done
      (loop $l1
        (br_if $done (i32.ge_u (local.get $x) (local.get $end)))
        (local.set $a (f32.load (local.get $x)))
        (local.set $b (f32.load (local.get $sp)))
        (f32.store (local.get $out)
          (f32.mul (f32.load (local.get $dy))
            (f32.add (local.get $b)
              (f32.mul
                (f32.mul (local.get $a) (f32.mul (local.get $b) (f32.sub (f32.const 1) (local.get $b))))
                (f32.add (local.get $k) (f32.mul (local.get $k3) (f32.mul (local.get $a) (local.get $a))))))))
        (local.set $x (i32.add (local.get $x) (i32.const 4)))
        (local.set $sp (i32.add (local.get $sp) (i32.const 4)))
        (local.set $dy (i32.add (local.get $dy) (i32.const 4)))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (br $l1))))
)
