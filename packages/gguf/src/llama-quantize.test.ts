import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gguf as hfGguf } from "@huggingface/gguf";
import { llamaUnavailableReason, loadGgmlOracle, oracleUnavailableReason, runOracle } from "@keepquant/oracle";
import { afterAll, describe, expect, it } from "vitest";
import {
  GgmlType,
  QWEN35_TEST_SHAPE,
  buildLoadPlan,
  getMetadata,
  ggmlTypeName,
  readGguf,
  readTensorBytes,
  synthesizeQwen35,
} from "./index.js";

const skipReason = oracleUnavailableReason() ?? llamaUnavailableReason();

const dir = mkdtempSync(join(tmpdir(), "kq-gguf-llama-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Tensors ORACLE.md says llama.cpp keeps F32 (plus every 1-D norm). */
const KEPT_F32 = /(norm\.weight|ssm_a|ssm_dt\.bias|ssm_conv1d\.weight)$/;
const K_QUANTS = new Set([GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K]);

describe.skipIf(skipReason !== undefined)(
  `a GGUF written by llama.cpp's own quantizer (llama_model_quantize, Q4_K_M)${skipReason ? ` (skipped: ${skipReason})` : ""}`,
  () => {
    it("parses; tensor types follow llama.cpp's rules; bytes equal ggml_quantize_chunk; @huggingface/gguf agrees", async () => {
      const spec = { ...QWEN35_TEST_SHAPE, mtp: true };
      const inPath = join(dir, "f32.gguf");
      const outPath = join(dir, "q4_k_m.gguf");
      const f32Bytes = synthesizeQwen35(spec);
      writeFileSync(inPath, f32Bytes);
      const result = await runOracle({ kind: "quantize", input: inPath, output: outPath, ftype: "Q4_K_M" }, { timeoutMs: 120_000 });
      expect(result.bytes).toBeGreaterThan(0);

      const source = await readGguf(f32Bytes);
      const quantized = await readGguf(outPath);
      expect(quantized.fileSize).toBe(result.bytes);
      expect(getMetadata(quantized, "general.file_type")).toBe(15); // LLAMA_FTYPE_MOSTLY_Q4_K_M
      expect(getMetadata(quantized, "general.architecture")).toBe("qwen35");
      expect(getMetadata(quantized, "tokenizer.ggml.tokens")).toEqual(getMetadata(source, "tokenizer.ggml.tokens"));

      // Same tensors by name (llama.cpp may reorder them) with the same shapes.
      const byName = new Map(quantized.tensors.map((t) => [t.name, t]));
      expect([...byName.keys()].sort()).toEqual(source.tensors.map((t) => t.name).sort());
      const counts: Record<string, number> = {};
      for (const t of source.tensors) {
        const q = byName.get(t.name)!;
        expect(q.ne, t.name).toEqual(t.ne);
        counts[ggmlTypeName(q.type)] = (counts[ggmlTypeName(q.type)] ?? 0) + 1;
        if (KEPT_F32.test(t.name)) {
          expect(q.type, `${t.name} stays F32`).toBe(GgmlType.F32);
        } else if (t.ne[0]! % 256 === 0) {
          expect(K_QUANTS.has(q.type), `${t.name} (row ${t.ne[0]}) is a K-quant, got ${ggmlTypeName(q.type)}`).toBe(true);
        } else {
          expect(
            [GgmlType.Q5_0, GgmlType.Q5_1, GgmlType.Q8_0, GgmlType.Q4_0].includes(q.type),
            `${t.name} (row ${t.ne[0]}) falls back, got ${ggmlTypeName(q.type)}`,
          ).toBe(true);
        }
      }
      expect(counts.Q4_K).toBeGreaterThan(0);
      expect(counts.Q6_K).toBeGreaterThan(0);

      // Every quantized tensor's bytes (at the offset and length our reader computed) equal ggml's
      // own quantizer applied to the F32 source: offsets, lengths and types are all right.
      const ggml = loadGgmlOracle();
      for (const q of quantized.tensors) {
        const src = source.tensors.find((t) => t.name === q.name)!;
        const srcBytes = await readTensorBytes(f32Bytes, src);
        const values = new Float32Array(srcBytes.slice().buffer);
        const got = await readTensorBytes(outPath, q);
        if (q.type === GgmlType.F32) {
          expect(Buffer.from(got).equals(Buffer.from(srcBytes)), q.name).toBe(true);
          continue;
        }
        const rows = src.elements / src.ne[0]!;
        const want = new Uint8Array(q.byteLength);
        const written = ggml.quantizeChunk(q.type, values, want, rows, src.ne[0]!);
        expect(written, q.name).toBe(q.byteLength);
        expect(Buffer.from(got).equals(Buffer.from(want)), `${q.name} bytes`).toBe(true);
      }

      // An independent parser reads the same types and offsets.
      const hf = await hfGguf(outPath, { allowLocalFile: true });
      expect(hf.tensorInfos.length).toBe(quantized.tensors.length);
      for (const info of hf.tensorInfos) {
        const ours = byName.get(info.name)!;
        expect(Number(info.dtype), info.name).toBe(ours.type);
        expect(Number(hf.tensorDataOffset + info.offset), info.name).toBe(ours.offset);
      }

      // The plan accepts llama.cpp's output and still skips the MTP block.
      const plan = buildLoadPlan(quantized);
      expect(plan.ok).toBe(true);
      expect(plan.skipped.length).toBe(15);

      // And llama.cpp itself loads the weights of both files and decodes.
      for (const model of [inPath, outPath]) {
        const run = await runOracle({ kind: "greedy", model, prompts: [[300, 5, 77]], nTokens: 2 }, { timeoutMs: 120_000 });
        expect(run.tokens[0]!.length).toBe(2);
        expect(run.tokens[0]!.every((t) => t >= 0 && t < 512)).toBe(true);
      }
    });
  },
);
