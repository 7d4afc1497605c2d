import { describe, expect, it } from "vitest";
import {
  GgmlType,
  QWEN35_35B_A3B_SHAPE,
  Qwen35ConfigError,
  QWEN35_TINY_SHAPE,
  buildLoadPlan,
  describeQwen35,
  gguf,
  parseQwen35Config,
  qwen35SpecLayout,
  readGguf,
  synthesizeQwen35HeaderSource,
  tensorByteLength,
  writeGguf,
  type GgufMetadataEntry,
  type Qwen35Spec,
} from "../index.js";

/** A tiny qwen35moe: the tiny dense shape with 4 experts (top 2) of width 32 and a 48-wide shared expert. */
const TINY_MOE: Qwen35Spec = { ...QWEN35_TINY_SHAPE, moe: { experts: 4, used: 2, ffnExp: 32, ffnShared: 48 }, name: "tiny-moe" };

type Edit = (tensors: { name: string; type: GgmlType; ne: number[] }[]) => void;

/** A zero-filled file of the spec, its tensor list and metadata edited before writing. */
async function file(spec: Qwen35Spec, edit: Edit = () => {}, editMetadata: (m: GgufMetadataEntry[]) => GgufMetadataEntry[] = (m) => m) {
  const { metadata, tensors } = qwen35SpecLayout(spec);
  const list = tensors.map((t) => ({ name: t.name, type: GgmlType.F32, ne: [...t.ne] }));
  edit(list);
  return readGguf(
    writeGguf({ metadata: editMetadata(metadata), tensors: list.map((t) => ({ ...t, data: new Uint8Array(tensorByteLength(t)) })) }),
  );
}

const setKey = (key: string, value: number) => (m: GgufMetadataEntry[]) => [...m.filter((e) => e.key !== key), gguf.u32(key, value)];

describe("qwen35moe: config, description and load plan", () => {
  it("35B-A3B header: the MoE hyperparameters and every layer's FFN an MoE FFN", async () => {
    const header = await readGguf(synthesizeQwen35HeaderSource(QWEN35_35B_A3B_SHAPE));
    const c = parseQwen35Config(header);
    expect(c.architecture).toBe("qwen35moe");
    expect(c.moe).toEqual({ expertCount: 256, expertUsedCount: 8, expertFeedForwardLength: 512, sharedFeedForwardLength: 512 });
    expect(c.nLayer).toBe(40);
    expect(c.layerKinds.filter((k) => k === "attention")).toHaveLength(10);
    const d = describeQwen35(c, 248_320);
    expect(d.architecture).toBe("qwen35moe");
    expect(d.layers.every((l) => l.ffn === "moe")).toBe(true);
    expect(d.layers.at(-1)!.role).toBe("mtp");
    const down = d.layers[0]!.tensors.find((t) => t.slot === "ffn_down_exps")!;
    expect(down).toMatchObject({ name: "blk.0.ffn_down_exps.weight", dims: ["nFfExp", "nEmbd", "nExpert"], ne: [512, 2048, 256] });
    expect(d.layers[0]!.tensors.map((t) => t.slot)).not.toContain("ffn_gate");
    const plan = buildLoadPlan(header);
    expect(plan.ok).toBe(true);
    expect(plan.config.architecture).toBe("qwen35moe");
    // the MTP block (with its own experts) is skipped loudly unless speculative "mtp"
    expect(plan.skipped.some((t) => t.name === "blk.40.ffn_gate_exps.weight")).toBe(true);
  });

  it("a tiny qwen35moe file loads through the plan: router, split gate/up experts, down experts, shared expert", async () => {
    const plan = buildLoadPlan(await file(TINY_MOE));
    expect(plan.ok).toBe(true);
    const slots = new Set(plan.used.filter((t) => t.layer === 0).map((t) => t.slot));
    for (const s of [
      "ffn_gate_inp",
      "ffn_gate_exps",
      "ffn_up_exps",
      "ffn_down_exps",
      "ffn_gate_inp_shexp",
      "ffn_gate_shexp",
      "ffn_up_shexp",
      "ffn_down_shexp",
    ]) {
      expect(slots.has(s as never), s).toBe(true);
    }
  });

  it("the merged gate-and-up expert tensor replaces the split pair", async () => {
    const merged = await file(TINY_MOE, (tensors) => {
      for (let il = 0; il < TINY_MOE.layers; il++) {
        const gate = tensors.findIndex((t) => t.name === `blk.${il}.ffn_gate_exps.weight`);
        const [g] = tensors.splice(gate, 1);
        tensors.splice(
          tensors.findIndex((t) => t.name === `blk.${il}.ffn_up_exps.weight`),
          1,
          { ...g!, name: `blk.${il}.ffn_gate_up_exps.weight`, ne: [g!.ne[0]!, 2 * g!.ne[1]!, g!.ne[2]!] },
        );
      }
    });
    const plan = buildLoadPlan(merged);
    expect(plan.refused).toEqual([]);
    expect(plan.used.some((t) => t.slot === "ffn_gate_up_exps")).toBe(true);
  });

  it("refuses bad MoE files with typed errors that name the key or tensor", async () => {
    const configError = async (edit: (m: GgufMetadataEntry[]) => GgufMetadataEntry[]) => {
      const f = await file(TINY_MOE, () => {}, edit);
      try {
        parseQwen35Config(f);
      } catch (error) {
        return error as Qwen35ConfigError;
      }
      throw new Error("expected a Qwen35ConfigError");
    };
    const zero = await configError(setKey("qwen35moe.expert_used_count", 0));
    expect(zero).toBeInstanceOf(Qwen35ConfigError);
    expect(zero).toMatchObject({ code: "QWEN35_BAD_VALUE", field: "qwen35moe.expert_used_count" });
    const tooMany = await configError(setKey("qwen35moe.expert_used_count", 5));
    expect(tooMany.message).toMatch(/qwen35moe\.expert_used_count: must be at most expert_count \(4\), found 5/);
    const missing = await configError((m) => m.filter((e) => e.key !== "qwen35moe.expert_count"));
    expect(missing).toMatchObject({ code: "QWEN35_MISSING_KEY", field: "qwen35moe.expert_count" });

    const wrongExperts = buildLoadPlan(
      await file(TINY_MOE, (tensors) => {
        tensors.find((t) => t.name === "blk.1.ffn_down_exps.weight")!.ne[2] = 3;
      }),
    );
    expect(wrongExperts.ok).toBe(false);
    expect(wrongExperts.refused[0]).toMatchObject({ name: "blk.1.ffn_down_exps.weight" });
    expect(wrongExperts.refused[0]!.reason).toMatch(/third dimension must be qwen35moe\.expert_count = 4, found 3/);

    for (const gone of [
      "blk.2.ffn_gate_inp.weight",
      "blk.0.ffn_down_shexp.weight",
      "blk.3.ffn_gate_inp_shexp.weight",
      "blk.1.ffn_up_exps.weight",
    ]) {
      const plan = buildLoadPlan(
        await file(
          TINY_MOE,
          (tensors) =>
            void tensors.splice(
              tensors.findIndex((t) => t.name === gone),
              1,
            ),
        ),
      );
      expect(
        plan.refused.map((r) => r.name),
        gone,
      ).toEqual([gone]);
      expect(plan.refused[0]!.reason).toMatch(/missing required tensor/);
    }
  });

  it("an architecture that is neither is refused by name", async () => {
    const f = await file(
      QWEN35_TINY_SHAPE,
      () => {},
      (m) => [...m.filter((e) => e.key !== "general.architecture"), gguf.str("general.architecture", "llama")],
    );
    expect(() => parseQwen35Config(f)).toThrow(/general.architecture is "llama", expected "qwen35" or "qwen35moe"/);
  });
});
