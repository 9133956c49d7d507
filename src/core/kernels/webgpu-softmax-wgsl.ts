/**
 * The WGSL the fused attention kernels share: the online softmax of the full-sequence kernels (GPT-2's
 * webgpu-attention.ts and the Llama family's webgpu-gqa.ts) and the softmax of one new token over the cache in the
 * decode kernels (webgpu-decode-attention.ts and webgpu-gqa-decode.ts). Each kernel file says where its q, keys and
 * values come from (GPT-2: the fused projection's columns; Llama: three tensors, rotated as they are read, a KV
 * head per group of query heads); the loops over them are written once, here.
 */

// ---- full-sequence attention: FlashAttention-style tiles, one thread per query row ------------------------------

/**
 * Constants and workgroup memory of the full-sequence kernels: BR rows per workgroup (one thread each), tiles of
 * BC rows × hs columns of the other side (tA, tB) with a value per row (tS, tD), and the batch row's first real
 * token (wgFirst). `extra` adds constants (the Llama kernels' A_HALF).
 */
export function attnTilesWgsl(hs: number, br: number, bc: number, extra = ''): string {
  return `
  const A_HS : i32 = ${hs};${extra}
  const A_BR : i32 = ${br};
  const A_BC : i32 = ${bc};
  const A_NEG : f32 = -3.0e38;
  var<workgroup> tA : array<f32, ${bc * hs}>;
  var<workgroup> tB : array<f32, ${bc * hs}>;
  var<workgroup> tS : array<f32, ${bc}>;
  var<workgroup> tD : array<f32, ${bc}>;
  var<workgroup> wgFirst : atomic<i32>;`;
}

/**
 * `attnFirstReal(b, T)`: the index of batch row b's first real token (T if none); query rows before it have no
 * allowed key. The mask M is read through f32(): a float32 maskF made by tf.cast of an int32 mask keeps the int32
 * buffer on webgpu (the cast is free there), so M may be array<i32>.
 */
export const ATTN_FIRST_REAL_WGSL = `
  fn attnFirstReal(b : i32, T : i32) -> i32 {
    if (localId.x == 0u) { atomicStore(&wgFirst, T); }
    workgroupBarrier();
    for (var j = i32(localId.x); j < T; j = j + A_BR) {
      if (f32(M[b * T + j]) != 0.0) {
        atomicMin(&wgFirst, j);
        break;
      }
    }
    workgroupBarrier();
    return atomicLoad(&wgFirst);
  }`;

/**
 * `attnTileScores(q, s, j0, r, scale)`: the scaled scores q·k/√hs of query row r against the keys of the tile in tA
 * (rows j0 …), A_NEG where a key is after r or padding (tS = 0), into s; returns their max (A_NEG when the tile
 * has no allowed key).
 */
export const ATTN_TILE_SCORES_WGSL = `
  fn attnTileScores(q : ptr<function, array<f32, A_HS>>, s : ptr<function, array<f32, A_BC>>, j0 : i32, r : i32,
                    scale : f32) -> f32 {
    var tmax = A_NEG;
    for (var jj = 0; jj < A_BC; jj++) {
      var sc = A_NEG;
      if (j0 + jj <= r && tS[jj] != 0.0) {
        var acc = 0.0;
        for (var d = 0; d < A_HS; d++) { acc = acc + (*q)[d] * tA[jj * A_HS + d]; }
        sc = acc * scale;
      }
      (*s)[jj] = sc;
      tmax = max(tmax, sc);
    }
    return tmax;
  }`;

/** Where a full-sequence kernel's rows come from (WGSL, in `main` after the common head of locals). */
export interface AttnRows {
  /** Statements before the loop (the row's offsets, its KV head). */
  setup: string;
  /** Element d of the thread's query row (q, as the scores use it). */
  q: string;
  /** Load key tile j0 into tA (and, when `withV`, its values into tB) with its mask into tS: a call. */
  loadKeys(withV: boolean): string;
  /** The offset of the thread's output row and head in `result` (its row r). */
  yOff: string;
}

/**
 * The forward: row r's output, the softmax-weighted sum of the values of its allowed keys, by an online softmax
 * over key tiles (the running max m and sum l rescaled once per tile). `full` (r before the row's first real
 * token, no allowed key) averages all T keys, as float32 rounds the plain path's s − 1e9. A key tile is needed
 * when it starts at or before the workgroup's last row, or when some row of the workgroup is full.
 */
export function attnForwardWgsl(rows: AttnRows): string {
  return `
  ${rows.setup}
  let full = r < first;
  let needAll = first > r0;
  var q : array<f32, A_HS>;
  var o : array<f32, A_HS>;
  for (var d = 0; d < A_HS; d++) {
    q[d] = ${rows.q};
    o[d] = 0.0;
  }
  var m = A_NEG;
  var l = 0.0;
  for (var t = 0; t < nT; t++) {
    let j0 = t * A_BC;
    let tileOn = needAll || j0 <= rLast;
    if (tileOn) { ${rows.loadKeys(true)}; }
    workgroupBarrier();
    if (tileOn && valid) {
      if (full) {
        for (var jj = 0; jj < A_BC; jj++) {
          if (j0 + jj < T) {
            for (var d = 0; d < A_HS; d++) { o[d] = o[d] + tB[jj * A_HS + d]; }
          }
        }
      } else {
        var s : array<f32, A_BC>;
        let tmax = attnTileScores(&q, &s, j0, r, scale);
        if (tmax > A_NEG) {
          let mNew = max(m, tmax);
          let c = exp(m - mNew);
          l = l * c;
          for (var d = 0; d < A_HS; d++) { o[d] = o[d] * c; }
          for (var jj = 0; jj < A_BC; jj++) {
            if (s[jj] > A_NEG) {
              let p = exp(s[jj] - mNew);
              l = l + p;
              for (var d = 0; d < A_HS; d++) { o[d] = o[d] + p * tB[jj * A_HS + d]; }
            }
          }
          m = mNew;
        }
      }
    }
    workgroupBarrier();
  }
  if (valid) {
    let inv = select(1.0 / l, invT, full);
    let yOff = ${rows.yOff};
    for (var d = 0; d < A_HS; d++) { result[yOff + d] = o[d] * inv; }
  }`;
}

/**
 * The backward's statistics, per query row and head: lse = m + log(l) over its allowed keys by the same online
 * softmax (0 for a full row, unused) and D = Σ dy·y (Y and DY at the output's offset), into result [·, 2].
 */
export function attnStatsWgsl(rows: AttnRows): string {
  return `
  ${rows.setup}
  let full = r < first;
  var q : array<f32, A_HS>;
  for (var d = 0; d < A_HS; d++) { q[d] = ${rows.q}; }
  var m = A_NEG;
  var l = 0.0;
  for (var t = 0; t < nT; t++) {
    let j0 = t * A_BC;
    let tileOn = j0 <= rLast;
    if (tileOn) { ${rows.loadKeys(false)}; }
    workgroupBarrier();
    if (tileOn && valid && !full) {
      var s : array<f32, A_BC>;
      let tmax = attnTileScores(&q, &s, j0, r, scale);
      if (tmax > A_NEG) {
        let mNew = max(m, tmax);
        l = l * exp(m - mNew);
        for (var jj = 0; jj < A_BC; jj++) {
          if (s[jj] > A_NEG) { l = l + exp(s[jj] - mNew); }
        }
        m = mNew;
      }
    }
    workgroupBarrier();
  }
  if (valid) {
    let yOff = ${rows.yOff};
    var dsum = 0.0;
    for (var d = 0; d < A_HS; d++) { dsum = dsum + DY[yOff + d] * Y[yOff + d]; }
    let sOff = (bh * T + r) * 2;
    result[sOff] = select(m + log(l), 0.0, full);
    result[sOff + 1] = dsum;
  }`;
}

// ---- decode: one new query per (b, head) over the cache, a workgroup of `wg` threads ---------------------------

/**
 * With the slot writes in the attention (`fresh`; docs/tfjs.md, trap 5, "Since 2026-12-01: 5"): the new
 * token's key and value (dk, dv: the kernel fills them before decodeSoftmaxWgsl) and `decV(kvOff, j, d)`, element d
 * of slot j's value — dv where the slot one-hot OH is non-zero (that row of V is being written by this dispatch and
 * is never read from memory), V's otherwise.
 */
function decodeFreshDeclsWgsl(hs: number): string {
  return `
      var<workgroup> dk : array<f32, ${hs}>;
      var<workgroup> dv : array<f32, ${hs}>;
      fn decV(kvOff : i32, j : i32, d : i32) -> f32 {
        if (f32(OH[j]) != 0.0) { return dv[d]; }
        return V[kvOff + j * ${hs} + d];
      }`;
}

/**
 * Constants and workgroup memory of a decode kernel: the head width, the plain path's additive mask, the query (dq),
 * the scores of up to `cap` slots (dScores) and one value per thread for the reductions (dRed); and
 * `decReduce(v, isMax)`, the max or sum of one f32 per thread over the workgroup (every thread gets it; call from
 * uniform control flow only).
 */
export function decodeSoftmaxDeclsWgsl(
  hs: number,
  cap: number,
  wg: number,
  masked: number,
  fresh = false,
): string {
  return `${fresh ? decodeFreshDeclsWgsl(hs) : ''}
      const D_HS : i32 = ${hs};
      const D_MASKED : f32 = ${masked.toExponential()};
      var<workgroup> dq : array<f32, ${hs}>;
      var<workgroup> dScores : array<f32, ${cap}>;
      var<workgroup> dRed : array<f32, ${wg}>;

      fn decReduce(v : f32, isMax : bool) -> f32 {
        dRed[localId.x] = v;
        workgroupBarrier();
        for (var s = ${wg / 2}u; s > 0u; s = s / 2u) {
          if (localId.x < s) {
            let a = dRed[localId.x];
            let b = dRed[localId.x + s];
            dRed[localId.x] = select(a + b, max(a, b), isMax);
          }
          workgroupBarrier();
        }
        let r = dRed[0];
        workgroupBarrier();
        return r;
      }`;
}

/**
 * The decode softmax, once dq holds the query: the scores as the plain path makes them, x_j = (q·k_j)·scale +
 * (1 − M[b, j])·MASKED for slots j = lid, lid + wg, … (K at kvOff + j·hs), into dScores; their max m, then
 * p_j = exp(x_j − m) in dScores and their sum l (both through decReduce, which ends on a barrier: every p is in
 * dScores after it); then y = Σ_j p_j·V[j] / l written at result[yOff + d]. With hs ≤ wg, thread (g, d) sums the
 * slots j ≡ g (mod wg / hs) (consecutive threads read consecutive d of a row: coalesced) and the partial sums are
 * added; wider heads loop over d. Needs S, lid, b, kvOff, yOff and scale in scope. With `fresh` (the declarations'
 * too), a slot j where OH is non-zero takes the new key dk and value dv instead of reading K and V, and the
 * workgroups where `fresh.writer` holds write dk and dv into that row of K and V (bound read_write): the slot's
 * rows are written by this dispatch, never read from memory by it.
 */
export function decodeSoftmaxWgsl(hs: number, wg: number, fresh: { writer: string } | null = null): string {
  const vAt = (j: string, d: string) => (fresh ? `decV(kvOff, ${j}, ${d})` : `V[kvOff + ${j} * D_HS + ${d}]`);
  const weighted =
    hs <= wg
      ? `let G = ${Math.floor(wg / hs)};
        let g = lid / D_HS;
        let d = lid - g * D_HS;
        var acc = 0.0;
        if (g < G) {
          for (var j = g; j < S; j = j + G) { acc = acc + dScores[j] * ${vAt('j', 'd')}; }
        }
        dRed[lid] = acc;
        workgroupBarrier();
        if (lid < D_HS) {
          var t = 0.0;
          for (var gg = 0; gg < G; gg++) { t = t + dRed[gg * D_HS + lid]; }
          result[yOff + lid] = t / l;
        }`
      : `for (var d = lid; d < D_HS; d = d + ${wg}) {
          var acc = 0.0;
          for (var j = 0; j < S; j++) { acc = acc + dScores[j] * ${vAt('j', 'd')}; }
          result[yOff + d] = acc / l;
        }`;
  return `
        var mx = -3.0e38;
        for (var j = lid; j < S; j = j + ${wg}) {
          let off = kvOff + j * D_HS;
          var acc = 0.0;
          ${
            fresh
              ? `if (f32(OH[j]) != 0.0) {
            // The new token's slot: its key from dk, and (by one workgroup of the KV head) both rows written.
            for (var d = 0; d < D_HS; d++) { acc = acc + dq[d] * dk[d]; }
            if (${fresh.writer}) {
              for (var d = 0; d < D_HS; d++) {
                K[off + d] = dk[d];
                V[off + d] = dv[d];
              }
            }
          } else {
            for (var d = 0; d < D_HS; d++) { acc = acc + dq[d] * K[off + d]; }
          }`
              : 'for (var d = 0; d < D_HS; d++) { acc = acc + dq[d] * K[off + d]; }'
          }
          let x = acc * scale + (1.0 - f32(M[b * S + j])) * D_MASKED;
          dScores[j] = x;
          mx = max(mx, x);
        }
        let m = decReduce(mx, true);
        var sum = 0.0;
        for (var j = lid; j < S; j = j + ${wg}) {
          let p = exp(dScores[j] - m);
          dScores[j] = p;
          sum = sum + p;
        }
        let l = decReduce(sum, false);
        ${weighted}`;
}
