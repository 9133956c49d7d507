;; The fused Adam update for the tfjs WASM backend, with WebAssembly SIMD, in place on the tfjs heap.
;;
;;   g' = f32(gs·g);  m' = b1·m + (1 − b1)·g';  v' = b2·v + (1 − b2)·g'·g';  w' = w − lr·(m'/bc1) / (√(v'/bc2) + eps)
;;
;; The same operations in the same order as adamUpdateArrays in fused-adam.ts — float64 arithmetic on float32
;; loads, rounded to float32 where that loop rounds (g' and the stores) — so the results are bit-identical to it.
;; Two float64 lanes at a time, then a leftover element. Pointers are byte offsets of float32 arrays of n
;; elements. Built into src/core/kernels/adam-wasm.ts by scripts/build-wasm-kernels.ts, twice: as written, and
;; importing a shared memory (tfjs's threaded build) — the same code.
(module
  (import "env" "memory" (memory 1))
  (func (export "adam")
    (param $w i32) (param $m i32) (param $v i32) (param $g i32)
    (param $ow i32) (param $om i32) (param $ov i32) (param $n i32)
    (param $lr f64) (param $b1 f64) (param $b2 f64) (param $bc1 f64) (param $bc2 f64) (param $eps f64) (param $gs f64)
    (local $i i32) (local $o i32) (local $n2 i32) (local $c1 f64) (local $c2 f64)
    (local $G v128) (local $M v128) (local $V v128)
    (local $sg f64) (local $sm f64) (local $sv f64)
    (local.set $c1 (f64.sub (f64.const 1) (local.get $b1)))
    (local.set $c2 (f64.sub (f64.const 1) (local.get $b2)))
    (local.set $n2 (i32.and (local.get $n) (i32.const -2)))
    (block $done2
      (loop $l2
        (br_if $done2 (i32.ge_u (local.get $i) (local.get $n2)))
        (local.set $o (i32.shl (local.get $i) (i32.const 2)))
        ;; g' rounded to float32, as Math.fround does
        (local.set $G (f64x2.promote_low_f32x4 (f32x4.demote_f64x2_zero
          (f64x2.mul (f64x2.promote_low_f32x4 (v128.load64_zero (i32.add (local.get $g) (local.get $o)))) (f64x2.splat (local.get $gs))))))
        (local.set $M (f64x2.add
          (f64x2.mul (f64x2.splat (local.get $b1)) (f64x2.promote_low_f32x4 (v128.load64_zero (i32.add (local.get $m) (local.get $o)))))
          (f64x2.mul (f64x2.splat (local.get $c1)) (local.get $G))))
        (local.set $V (f64x2.add
          (f64x2.mul (f64x2.splat (local.get $b2)) (f64x2.promote_low_f32x4 (v128.load64_zero (i32.add (local.get $v) (local.get $o)))))
          (f64x2.mul (f64x2.mul (f64x2.splat (local.get $c2)) (local.get $G)) (local.get $G))))
        (v128.store64_lane 0 (i32.add (local.get $om) (local.get $o)) (f32x4.demote_f64x2_zero (local.get $M)))
        (v128.store64_lane 0 (i32.add (local.get $ov) (local.get $o)) (f32x4.demote_f64x2_zero (local.get $V)))
        (v128.store64_lane 0 (i32.add (local.get $ow) (local.get $o)) (f32x4.demote_f64x2_zero
          (f64x2.sub
            (f64x2.promote_low_f32x4 (v128.load64_zero (i32.add (local.get $w) (local.get $o))))
            (f64x2.div
              (f64x2.mul (f64x2.splat (local.get $lr)) (f64x2.div (local.get $M) (f64x2.splat (local.get $bc1))))
              (f64x2.add (f64x2.sqrt (f64x2.div (local.get $V) (f64x2.splat (local.get $bc2)))) (f64x2.splat (local.get $eps)))))))
        (local.set $i (i32.add (local.get $i) (i32.const 2)))
        (br $l2)))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $o (i32.shl (local.get $i) (i32.const 2)))
        (local.set $sg (f64.promote_f32 (f32.demote_f64
          (f64.mul (f64.promote_f32 (f32.load (i32.add (local.get $g) (local.get $o)))) (local.get $gs)))))
        (local.set $sm (f64.add (f64.mul (local.get $b1) (f64.promote_f32 (f32.load (i32.add (local.get $m) (local.get $o)))))
          (f64.mul (local.get $c1) (local.get $sg))))
        (local.set $sv (f64.add (f64.mul (local.get $b2) (f64.promote_f32 (f32.load (i32.add (local.get $v) (local.get $o)))))
          (f64.mul (f64.mul (local.get $c2) (local.get $sg)) (local.get $sg))))
        (f32.store (i32.add (local.get $om) (local.get $o)) (f32.demote_f64 (local.get $sm)))
        (f32.store (i32.add (local.get $ov) (local.get $o)) (f32.demote_f64 (local.get $sv)))
        (f32.store (i32.add (local.get $ow) (local.get $o)) (f32.demote_f64
          (f64.sub (f64.promote_f32 (f32.load (i32.add (local.get $w) (local.get $o))))
            (f64.div (f64.mul (local.get $lr) (f64.div (local.get $sm) (local.get $bc1)))
              (f64.add (f64.sqrt (f64.div (local.get $sv) (local.get $bc2))) (local.get $eps)))))))))
)
