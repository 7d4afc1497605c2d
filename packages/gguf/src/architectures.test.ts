import { describe, expect, it } from "vitest";
import {
  ARCHITECTURES,
  architectureOf,
  buildLoadPlan,
  FFN_KINDS,
  FFN_OPS,
  gguf,
  LAYER_KINDS,
  MIXER_OPS,
  MODEL_TENSOR_SCHEMA,
  QWEN35_0_8B_SHAPE,
  QWEN35_35B_A3B_SHAPE,
  Qwen35ConfigError,
  readGguf,
  SCRATCH_SCHEMA,
  synthesizeQwen35HeaderSource,
  TOKEN_MIXERS,
} from "./index.js";

const metadataOf = (architecture: unknown) =>
  new Map(
    architecture === undefined
      ? []
      : [
          [
            "general.architecture",
            typeof architecture === "string" ? gguf.str("general.architecture", architecture) : gguf.u32("general.architecture", 7),
          ],
        ],
  );

describe("the architecture registry", () => {
  it("general.architecture chooses the folder; the load plan reads config and description through it", async () => {
    expect(Object.keys(ARCHITECTURES)).toEqual(["qwen35", "qwen35moe", "qwen3"]);
    for (const shape of [QWEN35_0_8B_SHAPE, QWEN35_35B_A3B_SHAPE]) {
      const file = await readGguf(synthesizeQwen35HeaderSource(shape));
      const architecture = architectureOf(file);
      const config = architecture.parseConfig(file);
      expect(architecture.name).toBe(config.architecture);
      const plan = buildLoadPlan(file);
      expect(plan.description).toEqual(architecture.describe(config, plan.vocab));
      // every layer is of registered kinds
      for (const layer of plan.description.layers) {
        expect(Object.keys(TOKEN_MIXERS)).toContain(layer.mixer);
        expect(Object.keys(FFN_KINDS)).toContain(layer.ffn);
      }
    }
  });

  it("names general.architecture when it is missing, not a string, or not registered", () => {
    const cases: [unknown, string, RegExp][] = [
      [
        undefined,
        "QWEN35_MISSING_KEY",
        /general\.architecture: required key is missing \(expected str "qwen35" or "qwen35moe" or "qwen3"\)/,
      ],
      [7, "QWEN35_BAD_KEY_TYPE", /general\.architecture: expected str, found u32 7/],
      ["llama", "QWEN35_WRONG_ARCHITECTURE", /general\.architecture is "llama", expected "qwen35" or "qwen35moe" or "qwen3"/],
    ];
    for (const [value, code, message] of cases) {
      const error = (() => {
        try {
          architectureOf({ metadata: metadataOf(value) as never });
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(error).toBeInstanceOf(Qwen35ConfigError);
      expect(error).toMatchObject({ code, field: "general.architecture" });
      expect((error as Error).message).toMatch(message);
    }
  });

  it("a folder registers its kinds with itself: the kind tables are the registered folders' kinds, in registry order", () => {
    const mixers = Object.values(ARCHITECTURES).flatMap((a) => Object.entries(a.kinds.mixers));
    const ffns = Object.values(ARCHITECTURES).flatMap((a) => Object.entries(a.kinds.ffns));
    expect(mixers.map(([name]) => name)).toEqual(["attention", "gdn", "attention_ungated"]);
    expect(ffns.map(([name]) => name)).toEqual(["dense", "moe", "dense_ffn_norm"]);
    expect(Object.entries(LAYER_KINDS.mixers)).toEqual(mixers);
    expect(Object.entries(LAYER_KINDS.ffns)).toEqual(ffns);
    for (const [name, spec] of mixers) {
      expect(TOKEN_MIXERS[name as keyof typeof TOKEN_MIXERS]).toBe(spec.tensors);
      expect(MODEL_TENSOR_SCHEMA.mixers[name as keyof typeof TOKEN_MIXERS]).toBe(spec.tensors);
      expect(SCRATCH_SCHEMA.mixers[name as keyof typeof TOKEN_MIXERS]).toBe(spec.scratch);
      expect(MIXER_OPS).toContain(spec.op);
    }
    for (const [name, spec] of ffns) {
      expect(FFN_KINDS[name as keyof typeof FFN_KINDS]).toBe(spec.tensors);
      expect(SCRATCH_SCHEMA.ffns[name as keyof typeof FFN_KINDS]).toBe(spec.scratch);
      expect(FFN_OPS).toContain(spec.op);
    }
    // qwen3's kinds are of existing families: the forwards run them with qwen35's ops
    expect(LAYER_KINDS.mixers.attention_ungated).toMatchObject({ op: "attention", gated: false });
    expect(LAYER_KINDS.mixers.attention).toMatchObject({ op: "attention", gated: true });
    expect(LAYER_KINDS.ffns.dense_ffn_norm.op).toBe("dense");
  });
});
