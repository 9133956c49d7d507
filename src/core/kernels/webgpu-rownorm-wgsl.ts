/**
 * The WGSL skeleton the row-norm kernels share (webgpu-layernorm.ts for GPT-2's layer norm, webgpu-rmsnorm.ts for
 * the Llama family's RMSNorm): one workgroup per row with a tree sum over its threads, and the weight gradient as
 * one thread per column summing over the rows. Each kernel file gives its statistics and its bodies.
 */

/**
 * The row program: `rowSum(v)`, the sum of one f32 per thread over the workgroup (every thread gets it; call from
 * uniform control flow only), the kernel's own functions (`fns`: its row statistics), and `main` with `row`, `C`
 * (uniforms.cols) and `off` (row·C) in scope for `body`. `rowsOnXY` spreads the rows over x and y of the dispatch
 * (x up to `maxDim`): a workgroup past the last row (the last line of a 2-D dispatch) then computes the last row
 * again with `own` false and must write nothing (tfjs's workgroupId is a private variable, so an early return
 * would break the barriers' uniformity). Without it, row = workgroupId.x.
 */
export function rowProgramWgsl(o: {
  wg: number;
  fns: string;
  body: string;
  rowsOnXY?: { maxDim: number };
}): string {
  const rows = o.rowsOnXY
    ? `let rowIn = i32(workgroupId.y) * ${o.rowsOnXY.maxDim} + i32(workgroupId.x);
        let own = rowIn < uniforms.rows;
        let row = min(rowIn, uniforms.rows - 1);`
    : `let row = i32(workgroupId.x);`;
  return `
  var<workgroup> rowRed : array<f32, ${o.wg}>;
  fn rowSum(v : f32) -> f32 {
    rowRed[localId.x] = v;
    workgroupBarrier();
    for (var s = ${o.wg / 2}u; s > 0u; s = s / 2u) {
      if (localId.x < s) {
        rowRed[localId.x] = rowRed[localId.x] + rowRed[localId.x + s];
      }
      workgroupBarrier();
    }
    let total = rowRed[0];
    workgroupBarrier();
    return total;
  }${o.fns}
      fn main(index : i32) {
        ${rows}
        let C = uniforms.cols;
        let off = row * C;
        ${o.body}
      }`;
}

/**
 * A weight's gradient, Σ_rows `term` per column: one thread per column (`index`), a loop over uniforms.rows with
 * k = r·cols + index in scope for `term`.
 */
export function columnSumWgsl(term: string): string {
  return `
      fn main(index : i32) {
        if (index < uniforms.size) {
          var acc = 0.0;
          for (var r = 0; r < uniforms.rows; r = r + 1) {
            let k = r * uniforms.cols + index;
            acc = acc + ${term};
          }
          result[index] = acc;
        }
      }`;
}
