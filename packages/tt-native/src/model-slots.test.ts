import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { MODEL_DIM_SCHEMA, MODEL_TENSOR_SCHEMA, SCRATCH_SCHEMA } from "@keepquant/gguf";
import { describe, expect, it } from "vitest";
import { FFN_KINDS, MIXER_KINDS, renderModelKindsHeader, renderModelScratchHeader, renderModelSlotsHeader } from "./model-slots.js";

const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), "model");

describe("the native layer kinds and slots: generated from the description's tensor schema", () => {
  it("the committed headers are what the schema generates (run `pnpm --filter @keepquant/tt-native gen:model`)", () => {
    expect(fs.readFileSync(path.join(dir, "model_kinds.h"), "utf8")).toBe(renderModelKindsHeader());
    expect(fs.readFileSync(path.join(dir, "model_slots.h"), "utf8")).toBe(renderModelSlotsHeader());
    expect(fs.readFileSync(path.join(dir, "model_scratch.h"), "utf8")).toBe(renderModelScratchHeader());
  });

  it("every kind of the description is an enum value, in the schema's order", () => {
    expect(MIXER_KINDS).toEqual(Object.keys(MODEL_TENSOR_SCHEMA.mixers));
    expect(FFN_KINDS).toEqual(Object.keys(MODEL_TENSOR_SCHEMA.ffns));
    const kinds = renderModelKindsHeader();
    expect(kinds).toContain("enum class Mixer { Attention = 0, Gdn = 1, AttentionUngated = 2 };");
    expect(kinds).toContain("enum class Ffn { Dense = 0, Moe = 1, DenseFfnNorm = 2 };");
    expect(kinds).toContain('inline constexpr const char* kMixerNames[kMixerCount] = {"attention", "gdn", "attention_ungated"};');
  });

  it("each kind lists its slots: matrices packed, vectors f32, a fallback required, the split/merged experts either way", () => {
    const text = renderModelSlotsHeader();
    const lines = text.split("\n");
    const arrayOf = (name: string) => {
      const start = lines.findIndex((l) => l.includes(` ${name}[] = {`));
      return lines.slice(start + 1, lines.indexOf("};", start));
    };
    for (const kind of MIXER_KINDS) {
      const name = `kMixer${kind.replace(/(^|_)([a-z])/g, (_, __, c: string) => c.toUpperCase())}`;
      expect(
        arrayOf(name).map((l) => /"([^"]+)"/.exec(l)![1]),
        kind,
      ).toEqual(MODEL_TENSOR_SCHEMA.mixers[kind].map((t) => t.slot));
    }
    expect(text).toContain('{"attn_q", Need::Required, nullptr, &LayerWeights::q, nullptr},');
    expect(text).toContain('{"ssm_conv1d", Need::Required, nullptr, nullptr, &LayerWeights::conv},');
    expect(text).toContain('{"ffn_gate_inp", Need::Required, nullptr, &LayerWeights::router, nullptr},');
    expect(text).toContain('{"ffn_gate_exps", Need::Unless, "ffn_gate_up_exps", &LayerWeights::gateExps, nullptr},');
    expect(text).toContain('{"ffn_gate_up_exps", Need::Optional, nullptr, &LayerWeights::gateUpExps, nullptr},');
    expect(text).toContain('{"output", Need::Required, nullptr, &ModelSpec::output, nullptr},');
    expect(text).toContain('{"nextn.embed_tokens", Need::Optional, nullptr, &DrafterWeights::embedTokens, nullptr},');
  });

  it("the scratch of the trunk and of each kind: every buffer with its width's C++ name", () => {
    const text = renderModelScratchHeader();
    expect(text).toContain("#define KQ_SCRATCH_TRUNK(X) X(hidden, nEmbd) X(normed, nEmbd) X(branch, nEmbd)");
    for (const kind of MIXER_KINDS) {
      const line = text.split("\n").find((l) => l.startsWith(`#define KQ_SCRATCH_MIXER_${kind.toUpperCase()}(X)`));
      const expected = Object.entries(SCRATCH_SCHEMA.mixers[kind]).map(([buffer, dim]) => `X(${buffer}, ${MODEL_DIM_SCHEMA[dim].native})`);
      expect(line, kind).toBe(`#define KQ_SCRATCH_MIXER_${kind.toUpperCase()}(X) ${expected.join(" ")}`.trimEnd());
    }
    // the description's value_dim is the native model's ssmInnerSize
    expect(text).toContain("X(zRows, ssmInnerSize)");
    expect(text).toContain("#define KQ_SCRATCH_FFN_MOE(X)\n");
  });
});
