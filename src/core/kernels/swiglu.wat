;; SwiGLU's elementwise arithmetic around its sigmoid, for the tfjs WASM backend, with WebAssembly SIMD, on the tfjs
;; heap. model/ops.ts swigluPlain is (g·σ(g))·u as tfjs ops; autodiff's backward for it is, op by op (tfjs-core's
;; Multiply and Sigmoid gradients, the two partial gradients of g added):
;;   dz = dy·u,  dg = dz·s + (dz·g)·(s·(1 − s)),  du = dy·(g·s),   s = σ(g)
;; These two functions do the same float32 operations in the same order (IEEE multiply, add and subtract: exact to
;; the bit), so their results are the ops' bit for bit; the sigmoid stays tfjs's (XNNPACK's) kernel. Pointers are
;; byte offsets of float32 arrays of n elements; four lanes at a time, then the leftover elements one by one. Built
;; into src/core/kernels/swiglu-wasm.ts by scripts/build-wasm-kernels.ts, twice: as written, and importing a shared
;; memory (tfjs's threaded build).
(module
  (import "env" "memory" (memory 1))

  ;; out = (g·s)·u
  (func (export "swiglu_fwd") (param $g i32) (param $s i32) (param $u i32) (param $out i32) (param $n i32)
    (local $i i32) (local $n4 i32) (local $o i32)
    (local.set $n4 (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2)))
    (local.set $n (i32.shl (local.get $n) (i32.const 2)))
    (block $done4
      (loop $l4
        (br_if $done4 (i32.ge_u (local.get $o) (local.get $n4)))
        (v128.store (i32.add (local.get $out) (local.get $o))
          (f32x4.mul
            (f32x4.mul (v128.load (i32.add (local.get $g) (local.get $o))) (v128.load (i32.add (local.get $s) (local.get $o))))
            (v128.load (i32.add (local.get $u) (local.get $o)))))
        (local.set $o (i32.add (local.get $o) (i32.const 16)))
        (br $l4)))
    (block $done
      (loop $l1
        (br_if $done (i32.ge_u (local.get $o) (local.get $n)))
        (f32.store (i32.add (local.get $out) (local.get $o))
          (f32.mul
            (f32.mul (f32.load (i32.add (local.get $g) (local.get $o))) (f32.load (i32.add (local.get $s) (local.get $o))))
            (f32.load (i32.add (local.get $u) (local.get $o)))))
        (local.set $o (i32.add (local.get $o) (i32.const 4)))
        (br $l1))))

  ;; dg = (dy·u)·s + ((dy·u)·g)·(s·(1 − s)),  du = dy·(g·s)
  (func (export "swiglu_bwd") (param $dy i32) (param $g i32) (param $u i32) (param $s i32)
    (param $dg i32) (param $du i32) (param $n i32)
    (local $o i32) (local $n4 i32) (local $vdy v128) (local $vg v128) (local $vs v128) (local $vdz v128)
    (local $one v128) (local $fdy f32) (local $fg f32) (local $fs f32) (local $fdz f32)
    (local.set $one (f32x4.splat (f32.const 1)))
    (local.set $n4 (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2)))
    (local.set $n (i32.shl (local.get $n) (i32.const 2)))
    (block $done4
      (loop $l4
        (br_if $done4 (i32.ge_u (local.get $o) (local.get $n4)))
        (local.set $vdy (v128.load (i32.add (local.get $dy) (local.get $o))))
        (local.set $vg (v128.load (i32.add (local.get $g) (local.get $o))))
        (local.set $vs (v128.load (i32.add (local.get $s) (local.get $o))))
        (local.set $vdz (f32x4.mul (local.get $vdy) (v128.load (i32.add (local.get $u) (local.get $o)))))
        (v128.store (i32.add (local.get $dg) (local.get $o))
          (f32x4.add
            (f32x4.mul (local.get $vdz) (local.get $vs))
            (f32x4.mul (f32x4.mul (local.get $vdz) (local.get $vg))
              (f32x4.mul (local.get $vs) (f32x4.sub (local.get $one) (local.get $vs))))))
        (v128.store (i32.add (local.get $du) (local.get $o))
          (f32x4.mul (local.get $vdy) (f32x4.mul (local.get $vg) (local.get $vs))))
        (local.set $o (i32.add (local.get $o) (i32.const 16)))
        (br $l4)))
    (block $done
      (loop $l1
        (br_if $done (i32.ge_u (local.get $o) (local.get $n)))
        (local.set $fdy (f32.load (i32.add (local.get $dy) (local.get $o))))
        (local.set $fg (f32.load (i32.add (local.get $g) (local.get $o))))
        (local.set $fs (f32.load (i32.add (local.get $s) (local.get $o))))
        (local.set $fdz (f32.mul (local.get $fdy) (f32.load (i32.add (local.get $u) (local.get $o)))))
        (f32.store (i32.add (local.get $dg) (local.get $o))
          (f32.add
            (f32.mul (local.get $fdz) (local.get $fs))
            (f32.mul (f32.mul (local.get $fdz) (local.get $fg))
              (f32.mul (local.get $fs) (f32.sub (f32.const 1) (local.get $fs))))))
        (f32.store (i32.add (local.get $du) (local.get $o))
          (f32.mul (local.get $fdy) (f32.mul (local.get $fg) (local.get $fs))))
        (local.set $o (i32.add (local.get $o) (i32.const 4)))
        (br $l1))))
)
