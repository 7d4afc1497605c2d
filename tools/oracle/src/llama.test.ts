import { describe, expect, it } from "vitest";
import koffi from "koffi";
import fs from "node:fs";
import path from "node:path";
import { oracleLibDir } from "./ggml.js";
import {
  GGML_TYPE_F16,
  LLAMA_FTYPE,
  LLAMA_LIBRARY,
  LLAMA_STRUCT_SIZES,
  ORACLE_CPU_VARIANT,
  llamaUnavailableReason,
  loadLlamaOracle,
  runOracle,
  argmax,
} from "./llama.js";

const reason = llamaUnavailableReason();

/** Bytes a `T f(void)` returning a struct in memory writes through its hidden result pointer. */
function writtenBytes(name: string): number {
  const lib = koffi.load(path.join(oracleLibDir(), LLAMA_LIBRARY));
  const call = lib.func(`void *${name}(_Out_ uint8_t *result)`) as (out: Buffer) => unknown;
  const probe = (fill: number): number => {
    const out = Buffer.alloc(512, fill);
    call(out);
    let last = -1;
    for (let i = 0; i < out.length; i++) if (out[i] !== fill) last = i;
    return last + 1;
  };
  // Two fills so a field that happens to equal the fill byte cannot hide the end.
  return Math.max(probe(0xaa), probe(0x55));
}

describe.skipIf(reason)(`llama oracle binding${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it("declares structs as large as this build writes them (rounded to 8)", () => {
    expect(Math.ceil(writtenBytes("llama_model_default_params") / 8) * 8).toBe(LLAMA_STRUCT_SIZES.llama_model_params);
    expect(Math.ceil(writtenBytes("llama_context_default_params") / 8) * 8).toBe(LLAMA_STRUCT_SIZES.llama_context_params);
    expect(Math.ceil(writtenBytes("llama_model_quantize_default_params") / 8) * 8).toBe(LLAMA_STRUCT_SIZES.llama_model_quantize_params);
    expect(LLAMA_STRUCT_SIZES.llama_batch).toBe(56);
  });

  it("decodes the default params into the documented defaults", () => {
    const { model, context, quantize } = loadLlamaOracle().defaults();
    expect(model).toMatchObject({ n_gpu_layers: -1, load_mode: -1, vocab_only: false, use_extra_bufts: true, load_mtp: false });
    expect(context).toMatchObject({
      n_ctx: 512,
      n_batch: 2048,
      n_ubatch: 512,
      n_seq_max: 1,
      type_k: GGML_TYPE_F16,
      type_v: GGML_TYPE_F16,
      offload_kqv: true,
    });
    expect(quantize).toMatchObject({ nthread: 0, ftype: LLAMA_FTYPE.Q8_0, quantize_output_tensor: true, pure: false });
    expect(loadLlamaOracle().version()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("reports a missing model as a typed error, in process and through the child runner", async () => {
    expect(() => loadLlamaOracle().loadModel("/nonexistent/model.gguf")).toThrow(/model file not found/);
    await expect(runOracle({ kind: "info", model: "/nonexistent/model.gguf" })).rejects.toMatchObject({ code: "MODEL_NOT_FOUND" });
  });

  it("pins the ggml CPU variant when the CPU has AVX2, FMA and F16C", () => {
    const flags = /^flags\s*:\s*(.*)$/m.exec(fs.readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.split(/\s+/) ?? [];
    const variant = loadLlamaOracle().cpuVariant();
    if (["avx2", "fma", "f16c"].every((f) => flags.includes(f))) expect(variant).toBe(ORACLE_CPU_VARIANT);
    else expect(variant).not.toBe("none");
  });

  it("argmax breaks ties toward the lowest id", () => {
    expect(argmax(Float32Array.from([1, 3, 3, 2]))).toBe(1);
    expect(argmax(Float32Array.from([-1, -1]))).toBe(0);
  });
});
