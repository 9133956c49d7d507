/**
 * A shared prompt computed once (docs/engine.md, "A group's prompt, once"). GRPO and RLOO sample each prompt
 * several times (a group), and their forwards over query + response ([n, Tq + R] rows, the query left-padded to Tq)
 * then run the prompt's Tq positions through every block once per sample, though a causal model gives them the same
 * values in every row of the group: a prompt position attends only to earlier prompt positions. Only the response
 * positions differ, and they read the prompt through attention's keys and values.
 *
 * So the trunk can run its position-wise work (norms, every linear with its LoRA term, the MLP, the residuals) over
 * the rows that differ: each distinct prompt's Tq positions once, then every row's R response positions —
 * N' = U·Tq + n·R rows instead of n·T (the "compact" rows). Attention alone needs the [n, T] layout: q, k and v are
 * gathered out to it (`expand`), the attention runs as always (its fused kernels, its mask), and its output is
 * gathered back (`compact`: one full row per compact row; a prompt position from the first row of its group). The
 * gathers' gradient sums the group's contributions into the shared rows, which is the sum the full layout's
 * backward makes across the copies: in a fixed order (a gather of each prompt row's copies, then a sum over them),
 * not tfjs's gradient of a gather (UnsortedSegmentSum, whose WebGPU kernel adds with atomics in whatever order the
 * threads come, so a GPU's sums would change from run to run). Values equal the full layout's up to the order of the matmuls' row blocks
 * (tests/shared-prefix.test.ts); GRPO's Qwen2.5-1.5B row (2 prompts × 8, prompt 56, R 64) runs 1 136 rows a
 * block instead of 1 920.
 *
 * Rows are grouped by what they hold (the query's ids and mask over [0, Tq)), not by where they sit, so any order of
 * rows (a minibatch's permutation, a micro-batch's slice) works; a batch without a repeated query shares nothing.
 */
import * as tf from '@tensorflow/tfjs-core';

let sharedByDefault = true;

/**
 * Whether trainers made from now on share a group's prompt (PpoTrainer.sharedPrefix's initial value; true unless
 * set). The CLI sets it from `PPO_SHARED_PREFIX` (src/cli/backend-node.ts), so that a bench can time both ways.
 */
export function setSharedPrefixDefault(on: boolean): void {
  sharedByDefault = on;
}

/** PpoTrainer.sharedPrefix's initial value (setSharedPrefixDefault). */
export function sharedPrefixDefault(): boolean {
  return sharedByDefault;
}

/** The index maps of a batch whose rows share queries (host arrays; `shareTensors` makes the trunk's). */
export interface PrefixShare {
  /** [n·T]: the compact row of each full row b·T + t. */
  expand: Int32Array;
  /** [N']: the full row each compact row is computed as (a prompt position: its group's first row). */
  compact: Int32Array;
  /** [n·R]: the compact rows at the response-predicting positions Tq − 1 + r (the trainer's hidden states). */
  response: Int32Array;
  /** Distinct queries. */
  groups: number;
  /** The most rows holding one query. */
  groupMax: number;
  /**
   * [U·Tq, groupMax] row-major: the full rows holding each shared prompt row (compact rows c < U·Tq), n·T (a row of
   * zeros) where a group has fewer rows. The gradient of `toFull` sums them.
   */
  members: Int32Array;
  /** [n·T]: the compact row a full row represents (compact[c] = f), N' (a row of zeros) where none. */
  inverse: Int32Array;
  /**
   * [U, groupMax] row-major: the response positions (rows of `response`) that read each group's last prompt row
   * (its rows' first response positions), n·R (a row of zeros) where fewer. The gradient of `responseRows` sums them.
   */
  responseGroups: Int32Array;
  /**
   * [N']: where `responseRows`' gradient takes each compact row's from, in [dy; a row of zeros; the groups' sums]: a
   * group's last prompt row its group's sum (n·R + 1 + u), another row its one reader (a row of dy), or the zeros
   * (n·R) where no response position reads it.
   */
  responseRoute: Int32Array;
}

/** The trunk's side of a PrefixShare (TrunkOptions.share): its int32 index maps as tensors. */
export interface TrunkShare {
  expand: tf.Tensor1D;
  compact: tf.Tensor1D;
  /** [U·Tq, groupMax]. */
  members: tf.Tensor2D;
  inverse: tf.Tensor1D;
}

/** The maps a TrunkShare holds, in this order (the recompute path saves them as a block's context). */
export const TRUNK_SHARE_MAPS = ['expand', 'compact', 'members', 'inverse'] as const;

/** A TrunkShare's maps as a list, in TRUNK_SHARE_MAPS' order. */
export function shareMaps(s: TrunkShare): tf.Tensor[] {
  return TRUNK_SHARE_MAPS.map((k) => s[k]);
}

/** The TrunkShare of maps listed by shareMaps. */
export function shareOfMaps(maps: tf.Tensor[]): TrunkShare {
  const [expand, compact, members, inverse] = maps;
  return {
    expand: expand as tf.Tensor1D,
    compact: compact as tf.Tensor1D,
    members: members as tf.Tensor2D,
    inverse: inverse as tf.Tensor1D,
  };
}

/**
 * Rows grouped by the query they hold: ids and attn [n, T] row-major, the query in [0, Tq). `owner[b]`: row b's
 * group (numbered in order of first appearance); `first[u]`: group u's first row.
 */
export function queryGroups(
  ids: Int32Array,
  attn: Int32Array,
  n: number,
  T: number,
  Tq: number,
): { owner: Int32Array; first: number[] } {
  const owner = new Int32Array(n);
  const first: number[] = [];
  const seen = new Map<string, number>();
  for (let b = 0; b < n; b++) {
    const at = b * T;
    const key = `${ids.subarray(at, at + Tq).join(',')}|${attn.subarray(at, at + Tq).join('')}`;
    let u = seen.get(key);
    if (u === undefined) {
      u = first.length;
      seen.set(key, u);
      first.push(b);
    }
    owner[b] = u;
  }
  return { owner, first };
}

/**
 * The share of a batch: ids and attn [n, T] row-major (the query in [0, Tq), left-padded), R = T − Tq response
 * positions. null when no two rows hold the same query (nothing to share) and no `pad` is given.
 * `pad`: the maps' sizes fixed for a step whose batches are recorded once and replayed (src/core/ppo/update-replay.ts
 * keys a recording by its inputs' shapes): `groups` prompt groups (at least this batch's distinct queries; the
 * extra ones repeat the first group's rows and feed nothing) and `groupMax` copies a group (at least this batch's
 * largest group); a share is then returned even where no query repeats.
 */
export function prefixShare(
  ids: Int32Array,
  attn: Int32Array,
  n: number,
  T: number,
  Tq: number,
  pad?: { groups: number; groupMax: number },
): PrefixShare | null {
  if (Tq < 1 || Tq > T || ids.length !== n * T || attn.length !== n * T) {
    throw new Error(
      `prefixShare: ids/attn of ${ids.length}/${attn.length} values for [${n}, ${T}], Tq ${Tq}.`,
    );
  }
  const R = T - Tq;
  const { owner, first } = queryGroups(ids, attn, n, T, Tq);
  const real = first.length;
  if (real === n && !pad) return null;
  const rowsOf: number[][] = first.map(() => []);
  for (let b = 0; b < n; b++) rowsOf[owner[b]].push(b);
  const largest = Math.max(...rowsOf.map((r) => r.length));
  if (pad && (pad.groups < real || pad.groupMax < largest)) {
    throw new Error(
      `prefixShare: ${real} groups of up to ${largest} rows do not fit a pad of ${pad.groups} × ${pad.groupMax}.`,
    );
  }
  const U = pad ? pad.groups : real;
  const G = pad ? pad.groupMax : largest;
  const compact = new Int32Array(U * Tq + n * R);
  // A padding group computes the first group's prompt again; nothing reads it.
  for (let u = 0; u < U; u++)
    for (let t = 0; t < Tq; t++) compact[u * Tq + t] = first[u < real ? u : 0] * T + t;
  for (let b = 0; b < n; b++) for (let r = 0; r < R; r++) compact[U * Tq + b * R + r] = b * T + Tq + r;
  const expand = new Int32Array(n * T);
  for (let b = 0; b < n; b++) {
    for (let t = 0; t < Tq; t++) expand[b * T + t] = owner[b] * Tq + t;
    for (let r = 0; r < R; r++) expand[b * T + Tq + r] = U * Tq + b * R + r;
  }
  const response = new Int32Array(n * R);
  for (let b = 0; b < n; b++) for (let r = 0; r < R; r++) response[b * R + r] = expand[b * T + Tq - 1 + r];
  const members = new Int32Array(U * Tq * G).fill(n * T);
  for (let u = 0; u < real; u++)
    for (let t = 0; t < Tq; t++) rowsOf[u].forEach((b, g) => (members[(u * Tq + t) * G + g] = b * T + t));
  const inverse = new Int32Array(n * T).fill(compact.length);
  compact.forEach((f, c) => {
    if (c >= real * Tq && c < U * Tq) return; // a padding group's rows represent no full row
    inverse[f] = c;
  });
  // The response positions reading each compact row: a group's copies read its last prompt row, every other row
  // is read by one response position or none.
  const responseGroups = new Int32Array(U * G).fill(n * R);
  for (let u = 0; u < real; u++) rowsOf[u].forEach((b, g) => (responseGroups[u * G + g] = b * R));
  const responseRoute = new Int32Array(compact.length).fill(n * R);
  response.forEach((c, i) => {
    if (c >= U * Tq) responseRoute[c] = i;
  });
  for (let u = 0; u < U; u++) responseRoute[u * Tq + Tq - 1] = n * R + 1 + u;
  return {
    expand,
    compact,
    response,
    groups: U,
    groupMax: G,
    members,
    inverse,
    responseGroups,
    responseRoute,
  };
}

/** Every map a forward with the share reads (the trunk's four, then the response rows' three). */
export const SHARE_MAPS = [...TRUNK_SHARE_MAPS, 'response', 'responseGroups', 'responseRoute'] as const;
export type ShareMapName = (typeof SHARE_MAPS)[number];

/** A map's values and shape: [U·Tq, groupMax] and [U, groupMax] for the two grouped ones, flat for the others. */
export function shareMapShape(s: PrefixShare, name: ShareMapName): number[] {
  const values = s[name];
  if (name === 'members') return [values.length / s.groupMax, s.groupMax];
  if (name === 'responseGroups') return [s.groups, s.groupMax];
  return [values.length];
}

/** A share's maps as the trainer's forwards read them: the trunk's, and the response rows' (responseRows). */
export interface ForwardShare {
  trunk: TrunkShare;
  response: tf.Tensor1D;
  responseGroups: tf.Tensor2D;
  responseRoute: tf.Tensor1D;
}

/** The ForwardShare of the maps as tensors, by name (made with shareMapShape's shapes). */
export function forwardShare(t: Readonly<Record<ShareMapName, tf.Tensor>>): ForwardShare {
  return {
    trunk: shareOfMaps(TRUNK_SHARE_MAPS.map((k) => t[k])),
    response: t.response as tf.Tensor1D,
    responseGroups: t.responseGroups as tf.Tensor2D,
    responseRoute: t.responseRoute as tf.Tensor1D,
  };
}

/** The maps of `names` as int32 tensors (the caller disposes them, or makes them inside a tidy). */
function mapTensors<K extends ShareMapName>(s: PrefixShare, names: readonly K[]): Record<K, tf.Tensor> {
  return Object.fromEntries(names.map((k) => [k, tf.tensor(s[k], shareMapShape(s, k), 'int32')])) as Record<
    K,
    tf.Tensor
  >;
}

/** The ForwardShare of a batch's host maps (the caller disposes its tensors, or makes them inside a tidy). */
export function forwardShareOf(s: PrefixShare): ForwardShare {
  return forwardShare(mapTensors(s, SHARE_MAPS));
}

/** The trunk's maps alone as tensors (TrunkOptions.share). */
export function shareTensors(s: PrefixShare): TrunkShare {
  return shareOfMaps(Object.values(mapTensors(s, TRUNK_SHARE_MAPS)));
}

/**
 * The attention of a block's rows under a share: `xs` (its inputs, compact rows) gathered out to the full layout,
 * `run` there (the fused kernels, the mask), its output gathered back. Without a share, `run` on `xs` as they are.
 */
export function attendFull(
  share: TrunkShare | undefined,
  xs: tf.Tensor2D[],
  run: (...full: tf.Tensor2D[]) => tf.Tensor2D,
): tf.Tensor2D {
  return share ? toCompact(run(...xs.map((x) => toFull(x, share))), share) : run(...xs);
}

/** x [rows, W] with a row of zeros after its last (what the maps' padding entries point at). */
function withZeroRow(x: tf.Tensor2D): tf.Tensor2D {
  return tf.concat([x, tf.zeros([1, x.shape[1]])], 0) as tf.Tensor2D;
}

/**
 * Rows of x [N', W] out to the full layout [n·T, W] (attention's input). Its gradient: each shared prompt row gets
 * the sum of its copies' (gathered by `members`, summed in order), each response row its own.
 */
export function toFull(x: tf.Tensor2D, share: TrunkShare): tf.Tensor2D {
  const prefixRows = share.members.shape[0];
  // The maps the gradient reads are saved with the op (the forward's own tensors may be gone by the backward).
  const op = tf.customGrad((...args: unknown[]) => {
    const xs = args[0] as tf.Tensor;
    (args[1] as tf.GradSaveFunc)([share.members, share.compact]);
    return {
      value: tf.gather(xs, share.expand),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [members, compact] = saved;
        const d = withZeroRow(dy as tf.Tensor2D);
        const prefix = tf.sum(tf.gather(d, members), 1); // [U·Tq, G, W] → [U·Tq, W]
        const rest = tf.gather(d, tf.slice(compact, [prefixRows], [-1]));
        return tf.concat([prefix, rest], 0);
      },
    };
  });
  return op(x) as tf.Tensor2D;
}

/**
 * The compact rows at the response-predicting positions, hidden [N', C] → [n·R, C] (`response`). A group's copies
 * all read its last prompt row: the gradient sums them in order (`groups`: PrefixShare.responseGroups as [U,
 * groupMax]) and routes each compact row's from there, from its one reader or from zeros (`route`), holding no more
 * than dy and the groups' rows.
 */
export function responseRows(
  hidden: tf.Tensor2D,
  response: tf.Tensor1D,
  groups: tf.Tensor2D,
  route: tf.Tensor1D,
): tf.Tensor2D {
  const op = tf.customGrad((...args: unknown[]) => {
    const xs = args[0] as tf.Tensor;
    (args[1] as tf.GradSaveFunc)([groups, route]);
    return {
      value: tf.gather(xs, response),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [g, r] = saved;
        const d = withZeroRow(dy as tf.Tensor2D);
        const sums = tf.sum(tf.gather(d, g), 1); // [U, G, C] → [U, C]
        return tf.gather(tf.concat([d, sums], 0), r);
      },
    };
  });
  return op(hidden) as tf.Tensor2D;
}

/** Rows of an input x [n·T] (ids, positions) at the compact rows, [N']. */
export function compactInput(x: tf.Tensor1D, share: TrunkShare): tf.Tensor1D {
  return tf.gather(x, share.compact);
}

/**
 * Rows of x [n·T, W] back to the compact rows [N', W] (attention's output). Its gradient: each full row gets its
 * compact row's (gathered by `inverse`), zero where it represents none.
 */
export function toCompact(x: tf.Tensor2D, share: TrunkShare): tf.Tensor2D {
  const op = tf.customGrad((...args: unknown[]) => {
    const xs = args[0] as tf.Tensor;
    (args[1] as tf.GradSaveFunc)([share.inverse]);
    return {
      value: tf.gather(xs, share.compact),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => tf.gather(withZeroRow(dy as tf.Tensor2D), saved[0]),
    };
  });
  return op(x) as tf.Tensor2D;
}

/** What responseHidden needs of a model (a CausalLM; structural, so this file imports no model). */
interface TrunkRunner {
  readonly config: { n_embd: number };
  trunk(
    ids: tf.Tensor2D,
    mask: tf.Tensor2D,
    collectKV?: undefined,
    opts?: { recompute?: boolean; share?: TrunkShare },
  ): tf.Tensor2D;
}

/**
 * Final hidden states (after the last norm) at the response-predicting positions Tq − 1 + r of rows [n, Tq + R]:
 * [n·R, C]. With `share`, the trunk runs the shared queries' positions once and these rows are gathered from its
 * compact rows (responseRows); else sliced from the full layout. The PPO trainer's log-prob forwards and DPO's.
 */
export function responseHidden(
  model: TrunkRunner,
  ids: tf.Tensor2D,
  attn: tf.Tensor2D,
  Tq: number,
  R: number,
  o: { recompute?: boolean; share?: ForwardShare | null } = {},
): tf.Tensor2D {
  const [n, T] = ids.shape;
  const C = model.config.n_embd;
  const recompute = !!o.recompute;
  if (o.share) {
    const compact = model.trunk(ids, attn, undefined, { recompute, share: o.share.trunk });
    return responseRows(compact, o.share.response, o.share.responseGroups, o.share.responseRoute);
  }
  const hidden = tf.reshape(model.trunk(ids, attn, undefined, { recompute }), [n, T, C]);
  return tf.reshape(tf.slice(hidden, [0, Tq - 1, 0], [n, R, C]), [n * R, C]) as tf.Tensor2D;
}
