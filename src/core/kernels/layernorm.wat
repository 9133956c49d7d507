;; Layer norm over the last axis, forward and backward, for the tfjs WASM backend, on the tfjs heap. model/ops.ts
;; layerNorm computes, as tfjs ops on rows of C values (tf.moments, then its hand-written gradient):
;;   μ = Σx / C,  σ² = Σ(x − μ)² / C,  r = 1 / √(σ² + ε),  x̂ = (x − μ)·r,  y = x̂·g + b
;;   dx̂ = dy·g,  m1 = Σdx̂ / C,  m2 = Σ(dx̂·x̂) / C,  dx = r·((dx̂ − m1) − x̂·m2),  dg = Σ_rows dy·x̂,  db = Σ_rows dy
;; tfjs-backend-wasm's Mean adds a row's values one after another in float32 from 0 and divides by C; its Rsqrt is
;; 1 / sqrtf; the column sums (kernels/wasm-extra.ts fastSum) add the rows in increasing order. These functions do
;; the same float32 operations in the same order, so every output is the ops' bit for bit; ~20 tfjs kernels (and
;; their passes over [rows, C]) become two. Row sums are sequential (as tfjs's); the elementwise parts and the
;; column sums run four lanes at a time (lanes are columns, each summed over the rows in order), then the leftover
;; columns one by one. Pointers are byte offsets of float32 arrays: x, y, x̂, dy, dx [R, C]; g, b, dg, db [C];
;; r [R]. Built into src/core/kernels/layernorm-wasm.ts by scripts/build-wasm-kernels.ts, twice: as written, and
;; importing a shared memory (tfjs's threaded build).
(module
  (import "env" "memory" (memory 1))

  (func (export "ln_fwd") (param $x i32) (param $g i32) (param $b i32) (param $y i32) (param $xh i32) (param $r i32)
    (param $R i32) (param $C i32) (param $eps f32)
    (local $row i32) (local $j i32) (local $c4 i32) (local $cb i32)
    (local $sum f32) (local $mean f32) (local $d f32) (local $rr f32) (local $cf f32) (local $t f32)
    (local $vm v128) (local $vr v128) (local $v v128)
    (local.set $cf (f32.convert_i32_u (local.get $C)))
    (local.set $cb (i32.shl (local.get $C) (i32.const 2)))
    (local.set $c4 (i32.shl (i32.and (local.get $C) (i32.const -4)) (i32.const 2)))
    (block $rows_done
      (loop $rows
        (br_if $rows_done (i32.ge_u (local.get $row) (local.get $R)))
        ;; μ: the row's values added in order from 0
        (local.set $sum (f32.const 0))
        (local.set $j (i32.const 0))
        (block $s_done
          (loop $s
            (br_if $s_done (i32.ge_u (local.get $j) (local.get $cb)))
            (local.set $sum (f32.add (local.get $sum) (f32.load (i32.add (local.get $x) (local.get $j)))))
            (local.set $j (i32.add (local.get $j) (i32.const 4)))
            (br $s)))
        (local.set $mean (f32.div (local.get $sum) (local.get $cf)))
        ;; σ²: (x − μ)² added in order from 0
        (local.set $sum (f32.const 0))
        (local.set $j (i32.const 0))
        (block $v_done
          (loop $vl
            (br_if $v_done (i32.ge_u (local.get $j) (local.get $cb)))
            (local.set $d (f32.sub (f32.load (i32.add (local.get $x) (local.get $j))) (local.get $mean)))
            (local.set $sum (f32.add (local.get $sum) (f32.mul (local.get $d) (local.get $d))))
            (local.set $j (i32.add (local.get $j) (i32.const 4)))
            (br $vl)))
        (local.set $rr (f32.div (f32.const 1)
          (f32.sqrt (f32.add (f32.div (local.get $sum) (local.get $cf)) (local.get $eps)))))
        (f32.store (local.get $r) (local.get $rr))
        ;; x̂ = (x − μ)·r,  y = x̂·g + b
        (local.set $vm (f32x4.splat (local.get $mean)))
        (local.set $vr (f32x4.splat (local.get $rr)))
        (local.set $j (i32.const 0))
        (block $e4_done
          (loop $e4
            (br_if $e4_done (i32.ge_u (local.get $j) (local.get $c4)))
            (local.set $v (f32x4.mul (f32x4.sub (v128.load (i32.add (local.get $x) (local.get $j))) (local.get $vm))
              (local.get $vr)))
            (v128.store (i32.add (local.get $xh) (local.get $j)) (local.get $v))
            (v128.store (i32.add (local.get $y) (local.get $j))
              (f32x4.add (f32x4.mul (local.get $v) (v128.load (i32.add (local.get $g) (local.get $j))))
                (v128.load (i32.add (local.get $b) (local.get $j)))))
            (local.set $j (i32.add (local.get $j) (i32.const 16)))
            (br $e4)))
        (block $e1_done
          (loop $e1
            (br_if $e1_done (i32.ge_u (local.get $j) (local.get $cb)))
            (local.set $t (f32.mul (f32.sub (f32.load (i32.add (local.get $x) (local.get $j))) (local.get $mean))
              (local.get $rr)))
            (f32.store (i32.add (local.get $xh) (local.get $j)) (local.get $t))
            (f32.store (i32.add (local.get $y) (local.get $j))
              (f32.add (f32.mul (local.get $t) (f32.load (i32.add (local.get $g) (local.get $j))))
                (f32.load (i32.add (local.get $b) (local.get $j)))))
            (local.set $j (i32.add (local.get $j) (i32.const 4)))
            (br $e1)))
        (local.set $x (i32.add (local.get $x) (local.get $cb)))
        (local.set $y (i32.add (local.get $y) (local.get $cb)))
        (local.set $xh (i32.add (local.get $xh) (local.get $cb)))
        (local.set $r (i32.add (local.get $r) (i32.const 4)))
        (local.set $row (i32.add (local.get $row) (i32.const 1)))
        (br $rows))))

  (func (export "ln_bwd") (param $dy i32) (param $xh i32) (param $r i32) (param $g i32) (param $dx i32)
    (param $dg i32) (param $db i32) (param $R i32) (param $C i32)
    (local $row i32) (local $j i32) (local $c4 i32) (local $cb i32)
    (local $s1 f32) (local $s2 f32) (local $m1 f32) (local $m2 f32) (local $rr f32) (local $cf f32) (local $t f32)
    (local $vy v128) (local $vh v128) (local $vd v128) (local $vm1 v128) (local $vm2 v128) (local $vr v128)
    (local $fy f32) (local $fh f32)
    (local.set $cf (f32.convert_i32_u (local.get $C)))
    (local.set $cb (i32.shl (local.get $C) (i32.const 2)))
    (local.set $c4 (i32.shl (i32.and (local.get $C) (i32.const -4)) (i32.const 2)))
    ;; dg and db start at 0 (the column sums add every row into them, in order)
    (memory.fill (local.get $dg) (i32.const 0) (local.get $cb))
    (memory.fill (local.get $db) (i32.const 0) (local.get $cb))
    (block $rows_done
      (loop $rows
        (br_if $rows_done (i32.ge_u (local.get $row) (local.get $R)))
        ;; m1 = Σ dy·g / C,  m2 = Σ (dy·g)·x̂ / C, each added in order from 0
        (local.set $s1 (f32.const 0))
        (local.set $s2 (f32.const 0))
        (local.set $j (i32.const 0))
        (block $s_done
          (loop $s
            (br_if $s_done (i32.ge_u (local.get $j) (local.get $cb)))
            (local.set $t (f32.mul (f32.load (i32.add (local.get $dy) (local.get $j)))
              (f32.load (i32.add (local.get $g) (local.get $j)))))
            (local.set $s1 (f32.add (local.get $s1) (local.get $t)))
            (local.set $s2 (f32.add (local.get $s2) (f32.mul (local.get $t) (f32.load (i32.add (local.get $xh) (local.get $j))))))
            (local.set $j (i32.add (local.get $j) (i32.const 4)))
            (br $s)))
        (local.set $m1 (f32.div (local.get $s1) (local.get $cf)))
        (local.set $m2 (f32.div (local.get $s2) (local.get $cf)))
        (local.set $rr (f32.load (local.get $r)))
        (local.set $vm1 (f32x4.splat (local.get $m1)))
        (local.set $vm2 (f32x4.splat (local.get $m2)))
        (local.set $vr (f32x4.splat (local.get $rr)))
        ;; dx = r·((dy·g − m1) − x̂·m2);  dg += dy·x̂;  db += dy
        (local.set $j (i32.const 0))
        (block $e4_done
          (loop $e4
            (br_if $e4_done (i32.ge_u (local.get $j) (local.get $c4)))
            (local.set $vy (v128.load (i32.add (local.get $dy) (local.get $j))))
            (local.set $vh (v128.load (i32.add (local.get $xh) (local.get $j))))
            (local.set $vd (f32x4.mul (local.get $vy) (v128.load (i32.add (local.get $g) (local.get $j)))))
            (v128.store (i32.add (local.get $dx) (local.get $j))
              (f32x4.mul (local.get $vr)
                (f32x4.sub (f32x4.sub (local.get $vd) (local.get $vm1)) (f32x4.mul (local.get $vh) (local.get $vm2)))))
            (v128.store (i32.add (local.get $dg) (local.get $j))
              (f32x4.add (v128.load (i32.add (local.get $dg) (local.get $j))) (f32x4.mul (local.get $vy) (local.get $vh))))
            (v128.store (i32.add (local.get $db) (local.get $j))
              (f32x4.add (v128.load (i32.add (local.get $db) (local.get $j))) (local.get $vy)))
            (local.set $j (i32.add (local.get $j) (i32.const 16)))
            (br $e4)))
        (block $e1_done
          (loop $e1
            (br_if $e1_done (i32.ge_u (local.get $j) (local.get $cb)))
            (local.set $fy (f32.load (i32.add (local.get $dy) (local.get $j))))
            (local.set $fh (f32.load (i32.add (local.get $xh) (local.get $j))))
            (local.set $t (f32.mul (local.get $fy) (f32.load (i32.add (local.get $g) (local.get $j)))))
            (f32.store (i32.add (local.get $dx) (local.get $j))
              (f32.mul (local.get $rr)
                (f32.sub (f32.sub (local.get $t) (local.get $m1)) (f32.mul (local.get $fh) (local.get $m2)))))
            (f32.store (i32.add (local.get $dg) (local.get $j))
              (f32.add (f32.load (i32.add (local.get $dg) (local.get $j))) (f32.mul (local.get $fy) (local.get $fh))))
            (f32.store (i32.add (local.get $db) (local.get $j))
              (f32.add (f32.load (i32.add (local.get $db) (local.get $j))) (local.get $fy)))
            (local.set $j (i32.add (local.get $j) (i32.const 4)))
            (br $e1)))
        (local.set $dy (i32.add (local.get $dy) (local.get $cb)))
        (local.set $xh (i32.add (local.get $xh) (local.get $cb)))
        (local.set $dx (i32.add (local.get $dx) (local.get $cb)))
        (local.set $r (i32.add (local.get $r) (i32.const 4)))
        (local.set $row (i32.add (local.get $row) (i32.const 1)))
        (br $rows))))
)
