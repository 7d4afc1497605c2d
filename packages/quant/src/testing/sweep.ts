/**
 * The envelope sweep every provider of the keep-quant contract runs (the TS reference here, the
 * native arms in tt-native): E = 1 dense, E = N grouped with repeated and out-of-order ids, Pa = 1
 * broadcast, N not a multiple of any tile, K from one block to 5120, each registered encoding.
 * Weights are deterministic packed bytes (seeded PRNG) with sane f16 scales.
 */
import { GgmlType, GGML_TYPE_TRAITS, mulberry32 } from "@keepquant/gguf";
import { KEEPQUANT_ENCODINGS, type MatmulBTQuantGroupedArgs, type PackedWeight } from "../contract.js";
import type { KeepQuantProvider } from "../provider.js";
import { dequantizeTensor } from "../dequantize.js";
import { fp32ToFp16 } from "../fp.js";
import { envelopeReport, type EnvelopeWorst } from "./envelope.js";

/** Deterministic 32-bit PRNG (mulberry32, from @keepquant/gguf). */
export { mulberry32 };

export interface EnvelopeSweepCase {
  name: string;
  type: GgmlType;
  /** E */
  groups: number;
  /** N */
  n: number;
  /** K */
  k: number;
  m: number;
  p: number;
  /** Pa: 1 or p */
  xGroups: number;
  /** group ids, absent when groups = 1 */
  ids?: readonly number[];
  seed: number;
}

/** Byte offsets of the f16 scale fields a random block must have sane values in. */
const SCALE_FIELDS: Partial<Record<GgmlType, readonly number[]>> = {
  [GgmlType.Q4_K]: [0, 2],
  [GgmlType.Q5_K]: [0, 2],
  [GgmlType.Q6_K]: [208],
  [GgmlType.Q8_0]: [0],
};

/** Random packed bytes for [groups, n, k] of `type`, with every f16 scale drawn from +-[2^-12, 2^-6]. */
export function randomPackedWeight(type: GgmlType, groups: number, n: number, k: number, seed: number): PackedWeight {
  const { blockSize, typeSize, name } = GGML_TYPE_TRAITS[type];
  const fields = SCALE_FIELDS[type];
  if (!fields) throw new Error(`randomPackedWeight: no scale layout for ${name}`);
  if (k % blockSize !== 0) throw new Error(`randomPackedWeight: k=${k} is not whole ${name} blocks`);
  const random = mulberry32(seed);
  const blocks = (groups * n * k) / blockSize;
  const data = new Uint8Array(blocks * typeSize);
  for (let i = 0; i < data.length; i++) data[i] = (random() * 256) | 0;
  for (let b = 0; b < blocks; b++) {
    for (const offset of fields) {
      // K-quant d/dmin positive (as quantizers write them); Q8_0 d of either sign
      const magnitude = 2 ** (-12 + 6 * random());
      const sign = type === GgmlType.Q8_0 && random() < 0.5 ? -1 : 1;
      const h = fp32ToFp16(sign * magnitude);
      data[b * typeSize + offset] = h & 0xff;
      data[b * typeSize + offset + 1] = h >> 8;
    }
  }
  return { type, groups, rows: n, cols: k, data };
}

/** Activations of mixed magnitude (|x| in [2^-6, 2^4]) and random sign. */
export function randomActivations(count: number, seed: number): Float32Array {
  const random = mulberry32(seed);
  const x = new Float32Array(count);
  for (let i = 0; i < count; i++) x[i] = (random() < 0.5 ? -1 : 1) * 2 ** (-6 + 10 * random());
  return x;
}

export function envelopeSweepCases(): EnvelopeSweepCase[] {
  const cases: EnvelopeSweepCase[] = [];
  let seed = 1000;
  for (const type of KEEPQUANT_ENCODINGS) {
    const name = GGML_TYPE_TRAITS[type].name;
    const block = GGML_TYPE_TRAITS[type].blockSize;
    const add = (label: string, c: Omit<EnvelopeSweepCase, "name" | "type" | "seed">) =>
      cases.push({ name: `${name} ${label}`, type, seed: seed++, ...c });
    add(`dense E=1 one block K=${block}`, { groups: 1, n: 37, k: block, m: 3, p: 1, xGroups: 1 });
    add("dense E=1 single row N=1", { groups: 1, n: 1, k: 256, m: 2, p: 1, xGroups: 1 });
    add("dense E=1 K=5120", { groups: 1, n: 129, k: 5120, m: 2, p: 1, xGroups: 1 });
    add("dense E=1 K=2816 (odd block count)", { groups: 1, n: 19, k: 2816, m: 1, p: 1, xGroups: 1 });
    add("dense E=1 P=3 Pa=3 (ids never read)", { groups: 1, n: 33, k: 1024, m: 2, p: 3, xGroups: 3 });
    add("grouped E=8 repeated out-of-order ids", {
      groups: 8,
      n: 67,
      k: 768,
      m: 2,
      p: 6,
      xGroups: 6,
      ids: [5, 2, 5, 7, 0, 2],
    });
    add("grouped E=4 Pa=1 broadcast", { groups: 4, n: 45, k: 512, m: 3, p: 5, xGroups: 1, ids: [3, 3, 1, 0, 2] });
    add("grouped E=N=6 every group once, reversed", {
      groups: 6,
      n: 6,
      k: 256,
      m: 1,
      p: 6,
      xGroups: 6,
      ids: [5, 4, 3, 2, 1, 0],
    });
  }
  return cases;
}

export interface MaterializedCase {
  args: MatmulBTQuantGroupedArgs;
  /** decoded f32 weights [E, N, K] (bit-exact dequantization, no bf16 rounding) */
  decoded: Float32Array;
}

export function materializeSweepCase(c: EnvelopeSweepCase): MaterializedCase {
  const weight = randomPackedWeight(c.type, c.groups, c.n, c.k, c.seed);
  const x = randomActivations(c.xGroups * c.m * c.k, c.seed ^ 0x5bd1e995);
  const decoded = dequantizeTensor(c.type, weight.data, c.groups * c.n * c.k);
  const args: MatmulBTQuantGroupedArgs = { x, xGroups: c.xGroups, m: c.m, weight, p: c.p };
  if (c.ids) args.ids = Int32Array.from(c.ids);
  return { args, decoded };
}

export interface EnvelopeSweepResult {
  name: string;
  type: GgmlType;
  worstRatio: number;
  worst: EnvelopeWorst;
  outputs: number;
}

/** Runs `provider` on every sweep case and reports each case's worst envelope ratio (must be < 1). */
export function runEnvelopeSweep(
  provider: KeepQuantProvider,
  cases: readonly EnvelopeSweepCase[] = envelopeSweepCases(),
): EnvelopeSweepResult[] {
  return cases.map((c) => {
    const { args, decoded } = materializeSweepCase(c);
    const y = provider.matmulBTQuantGrouped(args);
    const report = envelopeReport({
      x: args.x,
      xGroups: c.xGroups,
      m: c.m,
      decoded,
      groups: c.groups,
      n: c.n,
      k: c.k,
      ...(c.ids ? { ids: c.ids } : {}),
      p: c.p,
      y,
    });
    return { name: c.name, type: c.type, worstRatio: report.worstRatio, worst: report.worst, outputs: y.length };
  });
}

/** One line per case, for test output: `name: worst ratio 0.0123 (p,m,n)`. */
export function formatSweepResults(results: readonly EnvelopeSweepResult[]): string {
  return results
    .map((r) => `${r.name}: worst ratio ${r.worstRatio.toFixed(4)} at (p=${r.worst.p}, m=${r.worst.m}, n=${r.worst.n})`)
    .join("\n");
}
