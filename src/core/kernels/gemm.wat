;; Register-blocked float32 matrix product for the tfjs WASM backend, with WebAssembly SIMD and, in the build this
;; text is written for, relaxed SIMD's fused multiply-add.
;;
;;   C = A · B    A: M×K, B: K×N, C: M×N, float32
;;
;; Pointers are byte offsets into the imported memory (the tfjs WASM heap); strides are in elements. Both operands
;; are first packed into the layout the microkernel reads, from any strides (so Aᵀ and Bᵀ — the backward's Xᵀ·dY
;; and dY·Wᵀ — are the same products with the strides swapped):
;;   pack_a: strips of 4 rows; strip s holds, for k = 0..K−1, the 4 floats A[4s..4s+3, k] (rows past M repeat
;;           row M−1);
;;   pack_b: panels of 8 columns; panel p holds, for k = 0..K−1, the 8 floats B[k, 8p..8p+7] (zeros past N).
;;           A Bᵀ (columns contiguous in k: a weight stored [out, in]) packs its full panels 4 k at a time, a 4 × 4
;;           transpose in registers (2.8–11× the element loop's speed, scripts/bench-gemm-pack.ts).
;; A frozen weight can be packed once and kept; otherwise the caller packs into scratch before each product. The
;; microkernel ($mk) is XNNPACK's broadcast design: a 4 × 8 tile of C in 8 f32x4 accumulators for the whole k loop;
;; per k it loads the panel's two vectors and broadcasts one element of A per row, each load feeding 2–4
;; multiply-adds, with two pointers that advance by constants. Every C element is the sum over k in increasing
;; order, each step one f32x4.relaxed_madd: fused (one rounding) where the hardware has FMA, a multiply then an add
;; (two roundings) elsewhere — relaxed SIMD lets the engine pick. The plain-SIMD build (scripts/build-wasm-kernels.ts)
;; has f32x4.mul then f32x4.add in its place: two roundings everywhere, bit-equal to a float32 plain loop.
;; Loop order: blocks of panels of ≈512 KB (L2), within a block each strip of A (kept in L1 across the block's
;; panels), within a strip the panels.
;; Built into src/core/kernels/gemm-wasm.ts four times: relaxed or plain SIMD, importing a plain or a shared
;; memory (tfjs's threaded build) — the same code otherwise.
(module
  (import "env" "memory" (memory 1))

  ;; Store the first n (1..7) lanes of [v0, v1] at p.
  (func $store_part (param $p i32) (param $v0 v128) (param $v1 v128) (param $n i32)
    (f32.store (local.get $p) (f32x4.extract_lane 0 (local.get $v0)))
    (if (i32.gt_u (local.get $n) (i32.const 1)) (then (f32.store offset=4 (local.get $p) (f32x4.extract_lane 1 (local.get $v0)))))
    (if (i32.gt_u (local.get $n) (i32.const 2)) (then (f32.store offset=8 (local.get $p) (f32x4.extract_lane 2 (local.get $v0)))))
    (if (i32.gt_u (local.get $n) (i32.const 3)) (then (f32.store offset=12 (local.get $p) (f32x4.extract_lane 3 (local.get $v0)))))
    (if (i32.gt_u (local.get $n) (i32.const 4)) (then (f32.store offset=16 (local.get $p) (f32x4.extract_lane 0 (local.get $v1)))))
    (if (i32.gt_u (local.get $n) (i32.const 5)) (then (f32.store offset=20 (local.get $p) (f32x4.extract_lane 1 (local.get $v1)))))
    (if (i32.gt_u (local.get $n) (i32.const 6)) (then (f32.store offset=24 (local.get $p) (f32x4.extract_lane 2 (local.get $v1))))))

  ;; Pack A (M×K; element [i, k] at a + 4·(i·rsa + k·csa)) into ⌈M/4⌉ strips of K×4 floats at dst: 16·K·⌈M/4⌉ bytes.
  (func (export "pack_a") (param $a i32) (param $rsa i32) (param $csa i32) (param $M i32) (param $K i32) (param $dst i32)
    (local $i i32) (local $k i32) (local $p0 i32) (local $p1 i32) (local $p2 i32) (local $p3 i32)
    (local.set $rsa (i32.shl (local.get $rsa) (i32.const 2)))
    (local.set $csa (i32.shl (local.get $csa) (i32.const 2)))
    (block $idone
      (loop $li
        (br_if $idone (i32.ge_u (local.get $i) (local.get $M)))
        (local.set $p0 (i32.add (local.get $a) (i32.mul (local.get $i) (local.get $rsa))))
        (local.set $p1 (select (i32.add (local.get $p0) (local.get $rsa)) (local.get $p0)
          (i32.lt_u (i32.add (local.get $i) (i32.const 1)) (local.get $M))))
        (local.set $p2 (select (i32.add (local.get $p1) (local.get $rsa)) (local.get $p1)
          (i32.lt_u (i32.add (local.get $i) (i32.const 2)) (local.get $M))))
        (local.set $p3 (select (i32.add (local.get $p2) (local.get $rsa)) (local.get $p2)
          (i32.lt_u (i32.add (local.get $i) (i32.const 3)) (local.get $M))))
        (local.set $k (i32.const 0))
        (if (i32.and (i32.eq (local.get $rsa) (i32.const 4)) (i32.le_u (i32.add (local.get $i) (i32.const 4)) (local.get $M)))
          (then
            ;; Aᵀ stored (rows adjacent): one vector per k
            (block $kd
              (loop $lk
                (br_if $kd (i32.ge_u (local.get $k) (local.get $K)))
                (v128.store (local.get $dst) (v128.load (local.get $p0)))
                (local.set $p0 (i32.add (local.get $p0) (local.get $csa)))
                (local.set $dst (i32.add (local.get $dst) (i32.const 16)))
                (local.set $k (i32.add (local.get $k) (i32.const 1)))
                (br $lk))))
          (else
            (block $kd2
              (loop $lk2
                (br_if $kd2 (i32.ge_u (local.get $k) (local.get $K)))
                (f32.store (local.get $dst) (f32.load (local.get $p0)))
                (f32.store offset=4 (local.get $dst) (f32.load (local.get $p1)))
                (f32.store offset=8 (local.get $dst) (f32.load (local.get $p2)))
                (f32.store offset=12 (local.get $dst) (f32.load (local.get $p3)))
                (local.set $p0 (i32.add (local.get $p0) (local.get $csa)))
                (local.set $p1 (i32.add (local.get $p1) (local.get $csa)))
                (local.set $p2 (i32.add (local.get $p2) (local.get $csa)))
                (local.set $p3 (i32.add (local.get $p3) (local.get $csa)))
                (local.set $dst (i32.add (local.get $dst) (i32.const 16)))
                (local.set $k (i32.add (local.get $k) (i32.const 1)))
                (br $lk2)))))
        (local.set $i (i32.add (local.get $i) (i32.const 4)))
        (br $li))))

  ;; Pack B (K×N; element [k, j] at b + 4·(k·rsb + j·csb)) into ⌈N/8⌉ panels of K×8 floats at dst, zero-padded
  ;; past N: 32·K·⌈N/8⌉ bytes.
  (func (export "pack_b") (param $b i32) (param $rsb i32) (param $csb i32) (param $K i32) (param $N i32) (param $dst i32)
    (local $j i32) (local $w i32) (local $k i32) (local $t i32) (local $row i32) (local $src i32)
    (local $v0 v128) (local $v1 v128) (local $v2 v128) (local $v3 v128) (local $t0 v128) (local $t1 v128)
    (local.set $rsb (i32.shl (local.get $rsb) (i32.const 2)))
    (local.set $csb (i32.shl (local.get $csb) (i32.const 2)))
    (block $jdone
      (loop $lj
        (br_if $jdone (i32.ge_u (local.get $j) (local.get $N)))
        (local.set $w (select (i32.const 8) (i32.sub (local.get $N) (local.get $j))
          (i32.ge_u (i32.sub (local.get $N) (local.get $j)) (i32.const 8))))
        (local.set $row (i32.add (local.get $b) (i32.mul (local.get $j) (local.get $csb))))
        (local.set $k (i32.const 0))
        (if (i32.and (i32.eq (local.get $w) (i32.const 8)) (i32.eq (local.get $csb) (i32.const 4)))
          (then
            ;; a full panel of contiguous rows: two vectors per k
            (block $kd
              (loop $lk
                (br_if $kd (i32.ge_u (local.get $k) (local.get $K)))
                (v128.store (local.get $dst) (v128.load (local.get $row)))
                (v128.store offset=16 (local.get $dst) (v128.load offset=16 (local.get $row)))
                (local.set $row (i32.add (local.get $row) (local.get $rsb)))
                (local.set $dst (i32.add (local.get $dst) (i32.const 32)))
                (local.set $k (i32.add (local.get $k) (i32.const 1)))
                (br $lk))))
          (else
            ;; Bᵀ (a weight stored [out, in] read as [in, out]: each column contiguous in k) in a full panel: four k
            ;; at a time, one vector from each of the panel's 8 columns, transposed in registers as two 4 × 4
            ;; blocks (columns 0–3, then 4–7) into the 4 k-rows of 8 floats; the k past the last multiple of 4 go
            ;; to the element loop below. A copy either way: the packed bytes are the element loop's.
            (if (i32.and (i32.eq (local.get $w) (i32.const 8)) (i32.eq (local.get $rsb) (i32.const 4)))
              (then
                (block $kd4
                  (loop $lk4
                    (br_if $kd4 (i32.gt_u (i32.add (local.get $k) (i32.const 4)) (local.get $K)))
                    (local.set $src (local.get $row))
                    (local.set $t (i32.const 0))
                    ;; $t = 0: columns 0–3 into bytes 0–15 of each k-row; $t = 16: columns 4–7 into bytes 16–31
                    (block $hd
                      (loop $lh
                        (br_if $hd (i32.gt_u (local.get $t) (i32.const 16)))
                        (local.set $v0 (v128.load (local.get $src)))
                        (local.set $v1 (v128.load (i32.add (local.get $src) (local.get $csb))))
                        (local.set $v2 (v128.load (i32.add (local.get $src) (i32.shl (local.get $csb) (i32.const 1)))))
                        (local.set $v3 (v128.load (i32.add (local.get $src)
                          (i32.add (i32.shl (local.get $csb) (i32.const 1)) (local.get $csb)))))
                        ;; t0 = [v0₀ v1₀ v0₁ v1₁], t1 = [v2₀ v3₀ v2₁ v3₁]: k-rows 0 and 1
                        (local.set $t0 (i8x16.shuffle 0 1 2 3 16 17 18 19 4 5 6 7 20 21 22 23 (local.get $v0) (local.get $v1)))
                        (local.set $t1 (i8x16.shuffle 0 1 2 3 16 17 18 19 4 5 6 7 20 21 22 23 (local.get $v2) (local.get $v3)))
                        (v128.store (i32.add (local.get $dst) (local.get $t))
                          (i8x16.shuffle 0 1 2 3 4 5 6 7 16 17 18 19 20 21 22 23 (local.get $t0) (local.get $t1)))
                        (v128.store offset=32 (i32.add (local.get $dst) (local.get $t))
                          (i8x16.shuffle 8 9 10 11 12 13 14 15 24 25 26 27 28 29 30 31 (local.get $t0) (local.get $t1)))
                        ;; t0 = [v0₂ v1₂ v0₃ v1₃], t1 = [v2₂ v3₂ v2₃ v3₃]: k-rows 2 and 3
                        (local.set $t0 (i8x16.shuffle 8 9 10 11 24 25 26 27 12 13 14 15 28 29 30 31 (local.get $v0) (local.get $v1)))
                        (local.set $t1 (i8x16.shuffle 8 9 10 11 24 25 26 27 12 13 14 15 28 29 30 31 (local.get $v2) (local.get $v3)))
                        (v128.store offset=64 (i32.add (local.get $dst) (local.get $t))
                          (i8x16.shuffle 0 1 2 3 4 5 6 7 16 17 18 19 20 21 22 23 (local.get $t0) (local.get $t1)))
                        (v128.store offset=96 (i32.add (local.get $dst) (local.get $t))
                          (i8x16.shuffle 8 9 10 11 12 13 14 15 24 25 26 27 28 29 30 31 (local.get $t0) (local.get $t1)))
                        (local.set $src (i32.add (local.get $src) (i32.shl (local.get $csb) (i32.const 2))))
                        (local.set $t (i32.add (local.get $t) (i32.const 16)))
                        (br $lh)))
                    (local.set $row (i32.add (local.get $row) (i32.const 16)))
                    (local.set $dst (i32.add (local.get $dst) (i32.const 128)))
                    (local.set $k (i32.add (local.get $k) (i32.const 4)))
                    (br $lk4)))))
            ;; strided columns (Bᵀ) or the last, partial panel: element by element, zeros past N
            (block $kd2
              (loop $lk2
                (br_if $kd2 (i32.ge_u (local.get $k) (local.get $K)))
                (local.set $src (local.get $row))
                (local.set $t (i32.const 0))
                (block $td
                  (loop $lt
                    (br_if $td (i32.ge_u (local.get $t) (i32.const 8)))
                    (f32.store (i32.add (local.get $dst) (i32.shl (local.get $t) (i32.const 2)))
                      (if (result f32) (i32.lt_u (local.get $t) (local.get $w))
                        (then (f32.load (local.get $src)))
                        (else (f32.const 0))))
                    (local.set $src (i32.add (local.get $src) (local.get $csb)))
                    (local.set $t (i32.add (local.get $t) (i32.const 1)))
                    (br $lt)))
                (local.set $row (i32.add (local.get $row) (local.get $rsb)))
                (local.set $dst (i32.add (local.get $dst) (i32.const 32)))
                (local.set $k (i32.add (local.get $k) (i32.const 1)))
                (br $lk2)))))
        (local.set $j (i32.add (local.get $j) (i32.const 8)))
        (br $lj))))

  ;; The microkernel: C[4 rows, ≤8 columns] = Â · P̂ over K, Â one packed strip of A (per k, 4 floats: the strip's
  ;; rows), P̂ one packed panel of B (per k, 8 floats). 8 f32x4 accumulators live across the whole k loop; per k two
  ;; vector loads of B, 4 broadcasts of A (v128.load32_splat), 8 multiply-adds. 4 rows, not 6: V8 (x64) has 15
  ;; allocatable xmm registers and hoists a step's loads above its arithmetic, so 8 accumulators + 2 B + 4
  ;; broadcasts (14) fit, where 6 rows (20) spill every step. Rows past $rows are the strip's padding (copies of
  ;; its last row) and are not stored, nor are columns past $cols (P̂'s zero padding).
  (func $mk (param $ap i32) (param $bp i32) (param $K i32) (param $c i32) (param $ldc i32) (param $rows i32) (param $cols i32)
    (local $k i32) (local $c1 i32) (local $c2 i32) (local $c3 i32)
    (local $x00 v128) (local $x01 v128)
    (local $x10 v128) (local $x11 v128)
    (local $x20 v128) (local $x21 v128)
    (local $x30 v128) (local $x31 v128)
    (local $b0 v128) (local $b1 v128) (local $va v128)
    (local.set $k (local.get $K))
    ;; one step of k per iteration: unrolled by two, V8 keeps both steps' loads live at once and spills
    ;; accumulators to the stack (measured 40% slower)
    (block $done
      (loop $lk
        (br_if $done (i32.eqz (local.get $k)))
        (local.set $b0 (v128.load (local.get $bp)))
        (local.set $b1 (v128.load offset=16 (local.get $bp)))
        (local.set $va (v128.load32_splat (local.get $ap)))
        (local.set $x00 (f32x4.relaxed_madd (local.get $va) (local.get $b0) (local.get $x00)))
        (local.set $x01 (f32x4.relaxed_madd (local.get $va) (local.get $b1) (local.get $x01)))
        (local.set $va (v128.load32_splat offset=4 (local.get $ap)))
        (local.set $x10 (f32x4.relaxed_madd (local.get $va) (local.get $b0) (local.get $x10)))
        (local.set $x11 (f32x4.relaxed_madd (local.get $va) (local.get $b1) (local.get $x11)))
        (local.set $va (v128.load32_splat offset=8 (local.get $ap)))
        (local.set $x20 (f32x4.relaxed_madd (local.get $va) (local.get $b0) (local.get $x20)))
        (local.set $x21 (f32x4.relaxed_madd (local.get $va) (local.get $b1) (local.get $x21)))
        (local.set $va (v128.load32_splat offset=12 (local.get $ap)))
        (local.set $x30 (f32x4.relaxed_madd (local.get $va) (local.get $b0) (local.get $x30)))
        (local.set $x31 (f32x4.relaxed_madd (local.get $va) (local.get $b1) (local.get $x31)))
        (local.set $ap (i32.add (local.get $ap) (i32.const 16)))
        (local.set $bp (i32.add (local.get $bp) (i32.const 32)))
        (local.set $k (i32.sub (local.get $k) (i32.const 1)))
        (br $lk)))
    ;; row pointers; a padding row stores to the row before it (its own values, so the last store is right)
    (local.set $c1 (select (i32.add (local.get $c) (local.get $ldc)) (local.get $c) (i32.gt_u (local.get $rows) (i32.const 1))))
    (local.set $c2 (select (i32.add (local.get $c1) (local.get $ldc)) (local.get $c1) (i32.gt_u (local.get $rows) (i32.const 2))))
    (local.set $c3 (select (i32.add (local.get $c2) (local.get $ldc)) (local.get $c2) (i32.gt_u (local.get $rows) (i32.const 3))))
    (if (i32.ge_u (local.get $cols) (i32.const 8))
      (then
        (v128.store (local.get $c3) (local.get $x30))
        (v128.store offset=16 (local.get $c3) (local.get $x31))
        (v128.store (local.get $c2) (local.get $x20))
        (v128.store offset=16 (local.get $c2) (local.get $x21))
        (v128.store (local.get $c1) (local.get $x10))
        (v128.store offset=16 (local.get $c1) (local.get $x11))
        (v128.store (local.get $c) (local.get $x00))
        (v128.store offset=16 (local.get $c) (local.get $x01))
        (return)))
    (call $store_part (local.get $c3) (local.get $x30) (local.get $x31) (local.get $cols))
    (call $store_part (local.get $c2) (local.get $x20) (local.get $x21) (local.get $cols))
    (call $store_part (local.get $c1) (local.get $x10) (local.get $x11) (local.get $cols))
    (call $store_part (local.get $c) (local.get $x00) (local.get $x01) (local.get $cols))
  )

  ;; C = A · B from A packed by pack_a at pa and B packed by pack_b at pb; C's element [i, j] at c + 4·(i·ldc + j).
  (func (export "gemm") (param $pa i32) (param $pb i32) (param $c i32) (param $ldc i32)
    (param $M i32) (param $K i32) (param $N i32)
    (local $panel i32) (local $strip i32) (local $np i32) (local $jb i32) (local $je i32) (local $i i32)
    (local $j i32) (local $rows i32) (local $ap i32) (local $bp i32) (local $cp i32)
    (local.set $ldc (i32.shl (local.get $ldc) (i32.const 2)))
    ;; bytes of one packed panel of B and one strip of A; columns per block: ≈512 KB of B, at least one panel
    (local.set $panel (i32.shl (local.get $K) (i32.const 5)))
    (local.set $strip (i32.shl (local.get $K) (i32.const 4)))
    (local.set $np (i32.shl (i32.div_u (i32.const 524288) (i32.add (local.get $panel) (i32.const 1))) (i32.const 3)))
    (if (i32.eqz (local.get $np)) (then (local.set $np (i32.const 8))))
    (block $jbdone
      (loop $ljb
        (br_if $jbdone (i32.ge_u (local.get $jb) (local.get $N)))
        (local.set $je (i32.add (local.get $jb) (local.get $np)))
        (if (i32.gt_u (local.get $je) (local.get $N)) (then (local.set $je (local.get $N))))
        (local.set $i (i32.const 0))
        (local.set $ap (local.get $pa))
        (block $idone
          (loop $li
            (br_if $idone (i32.ge_u (local.get $i) (local.get $M)))
            (local.set $rows (i32.sub (local.get $M) (local.get $i)))
            (local.set $cp (i32.add (local.get $c)
              (i32.add (i32.mul (local.get $i) (local.get $ldc)) (i32.shl (local.get $jb) (i32.const 2)))))
            (local.set $bp (i32.add (local.get $pb) (i32.mul (i32.shr_u (local.get $jb) (i32.const 3)) (local.get $panel))))
            (local.set $j (local.get $jb))
            (block $jdone
              (loop $lj
                (br_if $jdone (i32.ge_u (local.get $j) (local.get $je)))
                (call $mk (local.get $ap) (local.get $bp) (local.get $K) (local.get $cp) (local.get $ldc)
                  (local.get $rows) (i32.sub (local.get $N) (local.get $j)))
                (local.set $bp (i32.add (local.get $bp) (local.get $panel)))
                (local.set $cp (i32.add (local.get $cp) (i32.const 32)))
                (local.set $j (i32.add (local.get $j) (i32.const 8)))
                (br $lj)))
            (local.set $ap (i32.add (local.get $ap) (local.get $strip)))
            (local.set $i (i32.add (local.get $i) (i32.const 4)))
            (br $li)))
        (local.set $jb (local.get $je))
        (br $ljb))))

  ;; Horizontal sum of a vector's four lanes: (v0 + v1) + (v2 + v3).
  (func $hsum (param $v v128) (result f32)
    (f32.add
      (f32.add (f32x4.extract_lane 0 (local.get $v)) (f32x4.extract_lane 1 (local.get $v)))
      (f32.add (f32x4.extract_lane 2 (local.get $v)) (f32x4.extract_lane 3 (local.get $v)))))

  ;; C = A · Bᵀ for a few rows of A, both read in place (no packing): A M×K with row stride lda, B N×K with row
  ;; stride ldb (a weight stored [out, in], as nn.Linear and the tied LM head's wte keep it), C's element [i, j] at
  ;; c + 4·(i·ldc + j); K a multiple of 4. Decoding's products (1–16 rows of A against every row of a weight):
  ;; each C element is a dot product of two contiguous rows, so B streams from memory once per pair of A rows in
  ;; the order it is stored, where the packed route would pack Bᵀ on every call and the (B·Aᵀ)ᵀ route leaves
  ;; XNNPACK a kernel of M < 8 columns (most of its 8-wide tile idle). The tile: 4 rows of B × 2 rows of A in 8
  ;; f32x4 accumulators (per step of 4 k: 2 loads of A, 4 of B, 8 multiply-adds); an odd last row of A takes 4
  ;; accumulators, rows of B past the last multiple of 4 one at a time. Each C element is four lane sums over
  ;; k ≡ 0, 1, 2, 3 (mod 4), each in increasing k, then added as (s0 + s1) + (s2 + s3).
  (func (export "gemm_nt") (param $a i32) (param $lda i32) (param $b i32) (param $ldb i32) (param $c i32)
    (param $ldc i32) (param $M i32) (param $K i32) (param $N i32)
    (local $j i32) (local $i i32) (local $k i32) (local $kb i32) (local $cp i32)
    (local $b0 i32) (local $b1 i32) (local $b2 i32) (local $b3 i32) (local $a0 i32) (local $a1 i32)
    (local $x00 v128) (local $x10 v128) (local $x20 v128) (local $x30 v128)
    (local $x01 v128) (local $x11 v128) (local $x21 v128) (local $x31 v128)
    (local $v0 v128) (local $v1 v128) (local $w v128)
    (local.set $lda (i32.shl (local.get $lda) (i32.const 2)))
    (local.set $ldb (i32.shl (local.get $ldb) (i32.const 2)))
    (local.set $ldc (i32.shl (local.get $ldc) (i32.const 2)))
    (local.set $kb (i32.shl (local.get $K) (i32.const 2)))
    ;; four rows of B at a time
    (block $jdone
      (loop $lj
        (br_if $jdone (i32.gt_u (i32.add (local.get $j) (i32.const 4)) (local.get $N)))
        (local.set $b0 (i32.add (local.get $b) (i32.mul (local.get $j) (local.get $ldb))))
        (local.set $b1 (i32.add (local.get $b0) (local.get $ldb)))
        (local.set $b2 (i32.add (local.get $b1) (local.get $ldb)))
        (local.set $b3 (i32.add (local.get $b2) (local.get $ldb)))
        (local.set $i (i32.const 0))
        ;; two rows of A at a time
        (block $idone
          (loop $li
            (br_if $idone (i32.gt_u (i32.add (local.get $i) (i32.const 2)) (local.get $M)))
            (local.set $a0 (i32.add (local.get $a) (i32.mul (local.get $i) (local.get $lda))))
            (local.set $a1 (i32.add (local.get $a0) (local.get $lda)))
            (local.set $x00 (v128.const i32x4 0 0 0 0)) (local.set $x01 (v128.const i32x4 0 0 0 0))
            (local.set $x10 (v128.const i32x4 0 0 0 0)) (local.set $x11 (v128.const i32x4 0 0 0 0))
            (local.set $x20 (v128.const i32x4 0 0 0 0)) (local.set $x21 (v128.const i32x4 0 0 0 0))
            (local.set $x30 (v128.const i32x4 0 0 0 0)) (local.set $x31 (v128.const i32x4 0 0 0 0))
            (local.set $k (i32.const 0))
            (block $kdone
              (loop $lk
                (br_if $kdone (i32.ge_u (local.get $k) (local.get $kb)))
                (local.set $v0 (v128.load (i32.add (local.get $a0) (local.get $k))))
                (local.set $v1 (v128.load (i32.add (local.get $a1) (local.get $k))))
                (local.set $w (v128.load (i32.add (local.get $b0) (local.get $k))))
                (local.set $x00 (f32x4.relaxed_madd (local.get $v0) (local.get $w) (local.get $x00)))
                (local.set $x01 (f32x4.relaxed_madd (local.get $v1) (local.get $w) (local.get $x01)))
                (local.set $w (v128.load (i32.add (local.get $b1) (local.get $k))))
                (local.set $x10 (f32x4.relaxed_madd (local.get $v0) (local.get $w) (local.get $x10)))
                (local.set $x11 (f32x4.relaxed_madd (local.get $v1) (local.get $w) (local.get $x11)))
                (local.set $w (v128.load (i32.add (local.get $b2) (local.get $k))))
                (local.set $x20 (f32x4.relaxed_madd (local.get $v0) (local.get $w) (local.get $x20)))
                (local.set $x21 (f32x4.relaxed_madd (local.get $v1) (local.get $w) (local.get $x21)))
                (local.set $w (v128.load (i32.add (local.get $b3) (local.get $k))))
                (local.set $x30 (f32x4.relaxed_madd (local.get $v0) (local.get $w) (local.get $x30)))
                (local.set $x31 (f32x4.relaxed_madd (local.get $v1) (local.get $w) (local.get $x31)))
                (local.set $k (i32.add (local.get $k) (i32.const 16)))
                (br $lk)))
            (local.set $cp (i32.add (local.get $c)
              (i32.add (i32.mul (local.get $i) (local.get $ldc)) (i32.shl (local.get $j) (i32.const 2)))))
            (f32.store (local.get $cp) (call $hsum (local.get $x00)))
            (f32.store offset=4 (local.get $cp) (call $hsum (local.get $x10)))
            (f32.store offset=8 (local.get $cp) (call $hsum (local.get $x20)))
            (f32.store offset=12 (local.get $cp) (call $hsum (local.get $x30)))
            (local.set $cp (i32.add (local.get $cp) (local.get $ldc)))
            (f32.store (local.get $cp) (call $hsum (local.get $x01)))
            (f32.store offset=4 (local.get $cp) (call $hsum (local.get $x11)))
            (f32.store offset=8 (local.get $cp) (call $hsum (local.get $x21)))
            (f32.store offset=12 (local.get $cp) (call $hsum (local.get $x31)))
            (local.set $i (i32.add (local.get $i) (i32.const 2)))
            (br $li)))
        ;; an odd last row of A
        (if (i32.lt_u (local.get $i) (local.get $M))
          (then
            (local.set $a0 (i32.add (local.get $a) (i32.mul (local.get $i) (local.get $lda))))
            (local.set $x00 (v128.const i32x4 0 0 0 0)) (local.set $x10 (v128.const i32x4 0 0 0 0))
            (local.set $x20 (v128.const i32x4 0 0 0 0)) (local.set $x30 (v128.const i32x4 0 0 0 0))
            (local.set $k (i32.const 0))
            (block $kdone1
              (loop $lk1
                (br_if $kdone1 (i32.ge_u (local.get $k) (local.get $kb)))
                (local.set $v0 (v128.load (i32.add (local.get $a0) (local.get $k))))
                (local.set $w (v128.load (i32.add (local.get $b0) (local.get $k))))
                (local.set $x00 (f32x4.relaxed_madd (local.get $v0) (local.get $w) (local.get $x00)))
                (local.set $w (v128.load (i32.add (local.get $b1) (local.get $k))))
                (local.set $x10 (f32x4.relaxed_madd (local.get $v0) (local.get $w) (local.get $x10)))
                (local.set $w (v128.load (i32.add (local.get $b2) (local.get $k))))
                (local.set $x20 (f32x4.relaxed_madd (local.get $v0) (local.get $w) (local.get $x20)))
                (local.set $w (v128.load (i32.add (local.get $b3) (local.get $k))))
                (local.set $x30 (f32x4.relaxed_madd (local.get $v0) (local.get $w) (local.get $x30)))
                (local.set $k (i32.add (local.get $k) (i32.const 16)))
                (br $lk1)))
            (local.set $cp (i32.add (local.get $c)
              (i32.add (i32.mul (local.get $i) (local.get $ldc)) (i32.shl (local.get $j) (i32.const 2)))))
            (f32.store (local.get $cp) (call $hsum (local.get $x00)))
            (f32.store offset=4 (local.get $cp) (call $hsum (local.get $x10)))
            (f32.store offset=8 (local.get $cp) (call $hsum (local.get $x20)))
            (f32.store offset=12 (local.get $cp) (call $hsum (local.get $x30)))))
        (local.set $j (i32.add (local.get $j) (i32.const 4)))
        (br $lj)))
    ;; rows of B past the last multiple of 4, one at a time
    (block $rdone
      (loop $lr
        (br_if $rdone (i32.ge_u (local.get $j) (local.get $N)))
        (local.set $b0 (i32.add (local.get $b) (i32.mul (local.get $j) (local.get $ldb))))
        (local.set $i (i32.const 0))
        (block $ridone
          (loop $lri
            (br_if $ridone (i32.ge_u (local.get $i) (local.get $M)))
            (local.set $a0 (i32.add (local.get $a) (i32.mul (local.get $i) (local.get $lda))))
            (local.set $x00 (v128.const i32x4 0 0 0 0))
            (local.set $k (i32.const 0))
            (block $kdone2
              (loop $lk2
                (br_if $kdone2 (i32.ge_u (local.get $k) (local.get $kb)))
                (local.set $v0 (v128.load (i32.add (local.get $a0) (local.get $k))))
                (local.set $w (v128.load (i32.add (local.get $b0) (local.get $k))))
                (local.set $x00 (f32x4.relaxed_madd (local.get $v0) (local.get $w) (local.get $x00)))
                (local.set $k (i32.add (local.get $k) (i32.const 16)))
                (br $lk2)))
            (f32.store (i32.add (local.get $c)
              (i32.add (i32.mul (local.get $i) (local.get $ldc)) (i32.shl (local.get $j) (i32.const 2))))
              (call $hsum (local.get $x00)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $lri)))
        (local.set $j (i32.add (local.get $j) (i32.const 1)))
        (br $lr))))
)
