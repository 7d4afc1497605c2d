/**
 * The reference provider of the keep-quant contract, in plain TypeScript: for each selected group,
 * in chunks of rows, decode the slice -> round once to bf16 (RNE) -> multiply in f32 and accumulate
 * in f32, k = 0..K-1 in order. Slow and obvious on purpose: it is the oracle the native arms are
 * checked against. At most one [chunk, K] f32 plane is live.
 */
import { checkMatmulBTQuantGroupedArgs, isKeepQuantEncoding, type EnvSource, type MatmulBTQuantGroupedArgs } from "./contract.js";
import { roundToBf16InPlace } from "./fp.js";
import { planGroupedMatmul } from "./grouped-matmul.js";
import type { KeepQuantProvider } from "./provider.js";

export const REFERENCE_PROVIDER_NAME = "ts-reference";

export interface ReferenceProviderOptions {
  /** where KEEPQUANT_CHUNK_BYTES is read from at each call (default process.env) */
  env?: EnvSource;
  /** called with every chunk's [rowStart, rowEnd) (tests observe the chunking through it) */
  onChunk?: (group: number, rowStart: number, rowEnd: number) => void;
}

export function createReferenceProvider(options: ReferenceProviderOptions = {}): KeepQuantProvider {
  return {
    name: REFERENCE_PROVIDER_NAME,
    priority: 0,
    numerics: "bf16",
    supports: isKeepQuantEncoding,
    matmulBTQuantGrouped(args: MatmulBTQuantGroupedArgs): Float32Array {
      const shape = checkMatmulBTQuantGroupedArgs(args);
      const { n, k, m, pa, rowBytes } = shape;
      const { weight, x } = args;
      const { out, kernel, blocksPerRow, chunk, users } = planGroupedMatmul(args, shape, options.env ?? process.env);
      const plane = new Float32Array(chunk * k);

      const fround = Math.fround;
      for (const [g, outputs] of users) {
        for (let r0 = 0; r0 < n; r0 += chunk) {
          const r1 = Math.min(n, r0 + chunk);
          options.onChunk?.(g, r0, r1);
          kernel(weight.data, (g * n + r0) * rowBytes, plane, 0, (r1 - r0) * blocksPerRow);
          roundToBf16InPlace(plane, 0, (r1 - r0) * k);
          for (const pi of outputs) {
            const xGroup = pa === 1 ? 0 : pi;
            for (let mi = 0; mi < m; mi++) {
              const xBase = (xGroup * m + mi) * k;
              const yBase = (pi * m + mi) * n;
              for (let r = r0; r < r1; r++) {
                const wBase = (r - r0) * k;
                let acc = 0;
                for (let kk = 0; kk < k; kk++) acc = fround(acc + fround(x[xBase + kk]! * plane[wBase + kk]!));
                out[yBase + r] = acc;
              }
            }
          }
        }
      }
      return out;
    },
  };
}

/** The reference provider reading process.env at each call. */
export const referenceProvider: KeepQuantProvider = createReferenceProvider();
