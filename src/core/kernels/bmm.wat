;; Batched matrix product for the tfjs WASM backend, with WebAssembly SIMD.
;;
;;   C[b] = A[b] · B[b]   A[b]: M×K, B[b]: K×N, C[b]: M×N, float32, row-major, contiguous
;;
;; Pointers are byte offsets into the tfjs WASM heap (the imported memory); sa and sb are the batch strides of
;; A and B in elements (0 broadcasts one matrix over the batch). Four rows of C at a time, four columns per
;; SIMD lane group: four f32x4 accumulators held across the whole k loop, so each B vector loaded feeds four
;; rows. Every C element is the sum over k in increasing order (the order of a plain loop). Columns past the
;; last multiple of 4 and rows past the last multiple of 4 take the scalar and one-row paths.
;; Built into src/core/kernels/bmm-wasm.ts by scripts/build-wasm-kernels.ts, twice: as written, and importing a
;; shared memory (tfjs's threaded build) — the same code.
(module
  (import "env" "memory" (memory 1))

  ;; Σ_k A[ap + 4k] · B[bp + k·rowB]
  (func $dot (param $ap i32) (param $bp i32) (param $K i32) (param $rowB i32) (result f32)
    (local $s f32) (local $k i32)
    (block $done
      (loop $lk
        (br_if $done (i32.ge_u (local.get $k) (local.get $K)))
        (local.set $s (f32.add (local.get $s)
          (f32.mul (f32.load (local.get $ap)) (f32.load (local.get $bp)))))
        (local.set $ap (i32.add (local.get $ap) (i32.const 4)))
        (local.set $bp (i32.add (local.get $bp) (local.get $rowB)))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $lk)))
    (local.get $s))

  (func (export "bmm")
    (param $a i32) (param $b i32) (param $c i32) (param $nb i32)
    (param $M i32) (param $K i32) (param $N i32) (param $sa i32) (param $sb i32)
    (local $bi i32) (local $i i32) (local $j i32) (local $k i32) (local $r i32)
    (local $pa i32) (local $pb i32) (local $pc i32)
    (local $a0 i32) (local $a1 i32) (local $a2 i32) (local $a3 i32)
    (local $ak i32) (local $bp i32) (local $cp i32)
    (local $rowA i32) (local $rowB i32) (local $N4 i32)
    (local $c0 v128) (local $c1 v128) (local $c2 v128) (local $c3 v128) (local $bv v128)
    (local.set $rowA (i32.shl (local.get $K) (i32.const 2)))
    (local.set $rowB (i32.shl (local.get $N) (i32.const 2)))
    (local.set $N4 (i32.and (local.get $N) (i32.const -4)))
    (block $bdone
      (loop $lb
        (br_if $bdone (i32.ge_u (local.get $bi) (local.get $nb)))
        (local.set $pa (i32.add (local.get $a) (i32.shl (i32.mul (local.get $bi) (local.get $sa)) (i32.const 2))))
        (local.set $pb (i32.add (local.get $b) (i32.shl (i32.mul (local.get $bi) (local.get $sb)) (i32.const 2))))
        (local.set $pc (i32.add (local.get $c) (i32.shl (i32.mul (local.get $bi) (i32.mul (local.get $M) (local.get $N))) (i32.const 2))))
        (local.set $i (i32.const 0))
        ;; four rows at a time
        (block $idone4
          (loop $li4
            (br_if $idone4 (i32.gt_u (i32.add (local.get $i) (i32.const 4)) (local.get $M)))
            (local.set $a0 (i32.add (local.get $pa) (i32.mul (local.get $i) (local.get $rowA))))
            (local.set $a1 (i32.add (local.get $a0) (local.get $rowA)))
            (local.set $a2 (i32.add (local.get $a1) (local.get $rowA)))
            (local.set $a3 (i32.add (local.get $a2) (local.get $rowA)))
            (local.set $j (i32.const 0))
            (block $jdone
              (loop $lj
                (br_if $jdone (i32.ge_u (local.get $j) (local.get $N4)))
                (local.set $c0 (v128.const i32x4 0 0 0 0))
                (local.set $c1 (v128.const i32x4 0 0 0 0))
                (local.set $c2 (v128.const i32x4 0 0 0 0))
                (local.set $c3 (v128.const i32x4 0 0 0 0))
                (local.set $bp (i32.add (local.get $pb) (i32.shl (local.get $j) (i32.const 2))))
                (local.set $ak (i32.const 0))
                (local.set $k (i32.const 0))
                (block $kdone
                  (loop $lk
                    (br_if $kdone (i32.ge_u (local.get $k) (local.get $K)))
                    (local.set $bv (v128.load (local.get $bp)))
                    (local.set $c0 (f32x4.add (local.get $c0) (f32x4.mul (f32x4.splat (f32.load (i32.add (local.get $a0) (local.get $ak)))) (local.get $bv))))
                    (local.set $c1 (f32x4.add (local.get $c1) (f32x4.mul (f32x4.splat (f32.load (i32.add (local.get $a1) (local.get $ak)))) (local.get $bv))))
                    (local.set $c2 (f32x4.add (local.get $c2) (f32x4.mul (f32x4.splat (f32.load (i32.add (local.get $a2) (local.get $ak)))) (local.get $bv))))
                    (local.set $c3 (f32x4.add (local.get $c3) (f32x4.mul (f32x4.splat (f32.load (i32.add (local.get $a3) (local.get $ak)))) (local.get $bv))))
                    (local.set $bp (i32.add (local.get $bp) (local.get $rowB)))
                    (local.set $ak (i32.add (local.get $ak) (i32.const 4)))
                    (local.set $k (i32.add (local.get $k) (i32.const 1)))
                    (br $lk)))
                (local.set $cp (i32.add (local.get $pc) (i32.shl (i32.add (i32.mul (local.get $i) (local.get $N)) (local.get $j)) (i32.const 2))))
                (v128.store (local.get $cp) (local.get $c0))
                (local.set $cp (i32.add (local.get $cp) (local.get $rowB)))
                (v128.store (local.get $cp) (local.get $c1))
                (local.set $cp (i32.add (local.get $cp) (local.get $rowB)))
                (v128.store (local.get $cp) (local.get $c2))
                (local.set $cp (i32.add (local.get $cp) (local.get $rowB)))
                (v128.store (local.get $cp) (local.get $c3))
                (local.set $j (i32.add (local.get $j) (i32.const 4)))
                (br $lj)))
            ;; leftover columns of these four rows
            (block $tdone
              (loop $lt
                (br_if $tdone (i32.ge_u (local.get $j) (local.get $N)))
                (local.set $r (i32.const 0))
                (block $rdone
                  (loop $lr
                    (br_if $rdone (i32.ge_u (local.get $r) (i32.const 4)))
                    (f32.store
                      (i32.add (local.get $pc) (i32.shl (i32.add (i32.mul (i32.add (local.get $i) (local.get $r)) (local.get $N)) (local.get $j)) (i32.const 2)))
                      (call $dot
                        (i32.add (local.get $a0) (i32.mul (local.get $r) (local.get $rowA)))
                        (i32.add (local.get $pb) (i32.shl (local.get $j) (i32.const 2)))
                        (local.get $K) (local.get $rowB)))
                    (local.set $r (i32.add (local.get $r) (i32.const 1)))
                    (br $lr)))
                (local.set $j (i32.add (local.get $j) (i32.const 1)))
                (br $lt)))
            (local.set $i (i32.add (local.get $i) (i32.const 4)))
            (br $li4)))
        ;; leftover rows, one at a time
        (block $idone
          (loop $li
            (br_if $idone (i32.ge_u (local.get $i) (local.get $M)))
            (local.set $a0 (i32.add (local.get $pa) (i32.mul (local.get $i) (local.get $rowA))))
            (local.set $j (i32.const 0))
            (block $jdone1
              (loop $lj1
                (br_if $jdone1 (i32.ge_u (local.get $j) (local.get $N4)))
                (local.set $c0 (v128.const i32x4 0 0 0 0))
                (local.set $bp (i32.add (local.get $pb) (i32.shl (local.get $j) (i32.const 2))))
                (local.set $ak (i32.const 0))
                (local.set $k (i32.const 0))
                (block $kdone1
                  (loop $lk1
                    (br_if $kdone1 (i32.ge_u (local.get $k) (local.get $K)))
                    (local.set $c0 (f32x4.add (local.get $c0) (f32x4.mul (f32x4.splat (f32.load (i32.add (local.get $a0) (local.get $ak)))) (v128.load (local.get $bp)))))
                    (local.set $bp (i32.add (local.get $bp) (local.get $rowB)))
                    (local.set $ak (i32.add (local.get $ak) (i32.const 4)))
                    (local.set $k (i32.add (local.get $k) (i32.const 1)))
                    (br $lk1)))
                (v128.store
                  (i32.add (local.get $pc) (i32.shl (i32.add (i32.mul (local.get $i) (local.get $N)) (local.get $j)) (i32.const 2)))
                  (local.get $c0))
                (local.set $j (i32.add (local.get $j) (i32.const 4)))
                (br $lj1)))
            (block $tdone1
              (loop $lt1
                (br_if $tdone1 (i32.ge_u (local.get $j) (local.get $N)))
                (f32.store
                  (i32.add (local.get $pc) (i32.shl (i32.add (i32.mul (local.get $i) (local.get $N)) (local.get $j)) (i32.const 2)))
                  (call $dot (local.get $a0) (i32.add (local.get $pb) (i32.shl (local.get $j) (i32.const 2))) (local.get $K) (local.get $rowB)))
                (local.set $j (i32.add (local.get $j) (i32.const 1)))
                (br $lt1)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $li)))
        (local.set $bi (i32.add (local.get $bi) (i32.const 1)))
        (br $lb)))))
