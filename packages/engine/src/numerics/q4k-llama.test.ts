import { GgmlType } from "@keepquant/gguf";
import { loadGgmlCpuOracle, oracleUnavailableReason } from "@keepquant/oracle";
import { quantizeActivationRow, quantizeRow } from "@keepquant/quant";
import { describe, expect, it } from "vitest";
import { seededRandom } from "../testing/synthetic-model.js";
import { matmulQ4KLlama, vecDotQ4KQ8K } from "./q4k-llama.js";

const reason = oracleUnavailableReason();

describe.skipIf(reason !== undefined)(`vecDotQ4KQ8K${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it("equals the oracle's ggml_vec_dot_q4_K_q8_K bit for bit", () => {
    const cpu = loadGgmlCpuOracle();
    const random = seededRandom(4242);
    let compared = 0;
    for (const k of [256, 512, 1024]) {
      for (let trial = 0; trial < 60; trial++) {
        const scale = trial % 3 === 0 ? 0.01 : trial % 3 === 1 ? 1 : 40;
        const w = Float32Array.from({ length: k }, () => (random() * 2 - 1) * scale * (random() < 0.05 ? 8 : 1));
        const x = Float32Array.from({ length: k }, () => (random() * 2 - 1) * (random() < 0.1 ? 20 : 1));
        const wq = quantizeRow(GgmlType.Q4_K, w, new Uint8Array((k / 256) * 144));
        const xq = quantizeActivationRow(GgmlType.Q8_K, x, new Uint8Array((k / 256) * 292));
        const ours = vecDotQ4KQ8K(k, wq, 0, xq, 0, new DataView(xq.buffer, xq.byteOffset, xq.byteLength));
        expect(ours).toBe(cpu.vecDot(GgmlType.Q4_K, k, wq, xq));
        compared++;
      }
    }
    expect(compared).toBe(180);
  });

  it("matmulQ4KLlama lays rows and activations out as [m, rows]", () => {
    const random = seededRandom(7);
    const rows = 3;
    const cols = 256;
    const m = 2;
    const w = Float32Array.from({ length: rows * cols }, () => random() * 2 - 1);
    const data = new Uint8Array(rows * 144);
    for (let r = 0; r < rows; r++) quantizeRow(GgmlType.Q4_K, w.subarray(r * cols, (r + 1) * cols), data.subarray(r * 144, (r + 1) * 144));
    const x = Float32Array.from({ length: m * cols }, () => random() * 2 - 1);
    const y = new Float32Array(m * rows);
    matmulQ4KLlama(data, rows, cols, x, m, y, (row, dst) => void quantizeActivationRow(GgmlType.Q8_K, row, dst));
    const cpu = loadGgmlCpuOracle();
    for (let t = 0; t < m; t++) {
      const xq = quantizeActivationRow(GgmlType.Q8_K, x.subarray(t * cols, (t + 1) * cols), new Uint8Array(292));
      for (let r = 0; r < rows; r++)
        expect(y[t * rows + r]).toBe(cpu.vecDot(GgmlType.Q4_K, cols, data.subarray(r * 144, (r + 1) * 144), xq));
    }
  });
});
