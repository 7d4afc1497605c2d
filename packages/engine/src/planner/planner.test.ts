import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import {
  GgmlType,
  QWEN35_0_8B_SHAPE,
  QWEN35_27B_SHAPE,
  QWEN35_TEST_SHAPE,
  qwen35Q4KMClassMix,
  qwen35SpecLayout,
  readGguf,
  synthesizeQwen35,
  tensorByteLength,
  writeGguf,
  writeQwen35HeaderOnly,
  type GgufFile,
} from "@keepquant/gguf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../engine.js";
import {
  DECODE_STEP_PROGRAMS,
  ENGINE_MEMORY_DEFAULTS,
  PlanError,
  RESIDENCY_POLICIES,
  TRACE_BYTES_PER_PROGRAM,
  assertCpuFits,
  checkCpuLoad,
  cpuAvailableMemory,
  cpuDevice,
  customDevice,
  planEngineResidency,
  planResidency,
  resolveDevice,
  ttDevice,
  type ResidencyClassId,
  type ResidencyPlan,
  type ResidencyPlanInput,
} from "./index.js";

const MiB = 1024 * 1024;
const dir = mkdtempSync(path.join(tmpdir(), "kq-planner-"));
const paths = {
  big: path.join(dir, "qwen35-27b-q4_k_m-class.gguf"),
  bigMtp: path.join(dir, "qwen35-27b-mtp-q4_k_m-class.gguf"),
  small: path.join(dir, "qwen35-0.8b-q4_k_m-class.gguf"),
  test: path.join(dir, "qwen35-test-f32.gguf"),
};
let big: GgufFile;
let bigMtp: GgufFile;
let small: GgufFile;

beforeAll(async () => {
  // Header-only (sparse) files with the real shapes, written by the gguf package: no tensor bytes.
  await writeQwen35HeaderOnly(paths.big, QWEN35_27B_SHAPE, { types: qwen35Q4KMClassMix(64, false) });
  await writeQwen35HeaderOnly(paths.bigMtp, { ...QWEN35_27B_SHAPE, mtp: true }, { types: qwen35Q4KMClassMix(65, false) });
  await writeQwen35HeaderOnly(paths.small, QWEN35_0_8B_SHAPE, { types: qwen35Q4KMClassMix(24, true) });
  writeFileSync(paths.test, synthesizeQwen35(QWEN35_TEST_SHAPE));
  [big, bigMtp, small] = await Promise.all([readGguf(paths.big), readGguf(paths.bigMtp), readGguf(paths.small)]);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** planResidency without the process environment (KEEPQUANT_CHUNK_BYTES and the trace variable), unless given. */
const planWith = (file: GgufFile, input: ResidencyPlanInput): ResidencyPlan => planResidency(file, { env: {}, ...input });

const bytesOf = (plan: ResidencyPlan, id: ResidencyClassId): number => {
  const found = plan.classes.find((c) => c.id === id);
  if (!found) throw new Error(`plan has no class ${id}`);
  return found.bytes;
};

describe("the seed's 27B arithmetic (header-only Q4_K_M-class file)", () => {
  it("is planned from a sparse header: the 15.8 GB layout takes only its header on disk", () => {
    expect(big.fileSize).toBeGreaterThan(15e9);
    expect(statSync(paths.big).blocks * 512).toBeLessThan(big.dataOffset + MiB);
  });

  it("the bf16 twin of token_embd [248320, 5120] is 2,542,796,800 B and the head's chunk plane is 635,699,200 B", () => {
    const plan = planWith(big, { device: ttDevice("tt-p150"), contextLength: 4096 });
    expect(plan.settings.policy).toBe("packed");
    expect(plan.settings.numerics).toBe("bf16");
    expect(bytesOf(plan, "twins")).toBe(2_542_796_800);
    expect(plan.chunkPlane).toEqual({
      tensor: "output.weight",
      rows: 248_320,
      cols: 5120,
      chunkRows: 31_040,
      chunks: 8,
      bytes: 635_699_200,
    });
    expect(bytesOf(plan, "chunkPlane")).toBe(635_699_200);
  });

  it("counts every class from the header: packed words as stored, KV of the 16 attention layers, GDN state of the 48 others", () => {
    const plan = planWith(big, { device: ttDevice("tt-p150"), contextLength: 4096 });
    // Every matrix as stored except token_embd, whose gathers read the twin (the head is untied).
    const matrices = big.tensors.filter((t) => t.ne.length === 2 && !t.name.endsWith("ssm_conv1d.weight"));
    expect(matrices).toHaveLength(16 * 7 + 48 * 8 + 2);
    const packed = matrices.filter((t) => t.name !== "token_embd.weight").reduce((sum, t) => sum + t.byteLength, 0);
    expect(bytesOf(plan, "packed")).toBe(packed);
    // 353 F32 tensors (norms and ssm_{a,dt,conv1d,norm}), decoded to f32: 4 bytes per element.
    const small32 = big.tensors.filter((t) => t.type === GgmlType.F32);
    expect(small32).toHaveLength(353);
    expect(bytesOf(plan, "f32")).toBe(small32.reduce((sum, t) => sum + t.elements * 4, 0));
    // qwen35.md 13.2: 64 KiB of f16 KV per token; 120 KiB conv + 3 MiB recurrent per GDN layer.
    expect(bytesOf(plan, "kvCache")).toBe(4096 * 64 * 1024);
    expect(bytesOf(plan, "gdnState")).toBe(48 * (120 * 1024 + 3 * MiB));
    expect(plan.totalBytes).toBe(plan.classes.reduce((sum, c) => sum + c.bytes, 0));
    expect(plan.headroomBytes).toBe(32e9 - plan.totalBytes);
    // Largest first.
    for (let i = 1; i < plan.classes.length; i++) expect(plan.classes[i - 1]!.bytes).toBeGreaterThanOrEqual(plan.classes[i]!.bytes);
  });

  it("packed fits a tt-p150 at context 4096; twin-for-all does not, and the plan says packed would", () => {
    const packed = planWith(big, { device: ttDevice("tt-p150"), contextLength: 4096, policy: "packed" });
    expect(packed.fits).toBe(true);
    expect(packed.verdict).toMatch(/^fits with \d+\.\d\d GiB headroom \(needs \d+\.\d\d GiB, tt-p150 has 29\.80 GiB\)$/);
    expect(packed.suggestions).toEqual([]);
    const twins = planWith(big, { device: ttDevice("tt-p150"), contextLength: 4096, policy: "twin-for-all" });
    expect(twins.fits).toBe(false);
    // A bf16 twin of every matrix: 2 bytes per parameter, no packed words left.
    const parameters = big.tensors
      .filter((t) => t.ne.length === 2 && !t.name.endsWith("ssm_conv1d.weight"))
      .reduce((s, t) => s + t.elements, 0);
    expect(bytesOf(twins, "twins")).toBe(2 * parameters);
    expect(bytesOf(twins, "packed")).toBe(0);
    expect(bytesOf(twins, "chunkPlane")).toBe(0);
    expect(twins.verdict).toMatch(/^does not fit: needs \d+\.\d\d GiB, tt-p150 has 29\.80 GiB; largest items: bf16 twins \d+\.\d\d GiB/);
    expect(twins.suggestions.find((s) => s.kind === "policy")).toMatchObject({ value: "packed" });
  });

  it("does not fit a tt-n150 in any policy, naming the largest items and what would make it fit", () => {
    for (const policy of RESIDENCY_POLICIES) {
      const plan = planWith(big, { device: ttDevice("tt-n150"), contextLength: 4096, policy });
      expect(plan.fits, policy).toBe(false);
      expect(plan.headroomBytes).toBeLessThan(0);
      expect(plan.largest.length).toBe(3);
      expect(plan.verdict).toContain(`largest items: ${plan.largest[0]!.label}`);
    }
    const plan = planWith(big, { device: ttDevice("tt-n150"), contextLength: 4096 });
    // No context or sequence count helps: the packed weights alone exceed 12 GB.
    expect(plan.suggestions.map((s) => s.kind)).toEqual(["device", "quantization"]);
    expect(plan.suggestions[0]).toMatchObject({ value: "tt-n300" });
    expect(planWith(big, { device: ttDevice("tt-n300"), contextLength: 4096 }).fits).toBe(true);
    const bits = plan.suggestions[1]!.value as number;
    expect(bits).toBeGreaterThan(2);
    expect(bits).toBeLessThan(4.5);
  });

  it("suggests the longest context and the most sequences that fit, and they do fit", () => {
    const device = ttDevice("tt-p150");
    const plan = planWith(big, { device, contextLength: 65_536, sequences: 4 });
    expect(plan.fits).toBe(false);
    const context = plan.suggestions.find((s) => s.kind === "context")!.value as number;
    expect(context % 16).toBe(0);
    expect(planWith(big, { device, contextLength: context, sequences: 4 }).fits).toBe(true);
    expect(planWith(big, { device, contextLength: context + 16, sequences: 4 }).fits).toBe(false);
    const sequences = plan.suggestions.find((s) => s.kind === "sequences")!.value as number;
    expect(planWith(big, { device, contextLength: 65_536, sequences }).fits).toBe(true);
    expect(planWith(big, { device, contextLength: 65_536, sequences: sequences + 1 }).fits).toBe(false);
  });

  it("the MTP block is resident only with speculative mtp: its weights and its attention layer's KV", () => {
    const without = planWith(bigMtp, { device: ttDevice("tt-p150") });
    expect(bytesOf(without, "mtp")).toBe(0);
    expect(without.model.skippedBytes).toBeGreaterThan(0);
    const withMtp = planWith(bigMtp, { device: ttDevice("tt-p150"), speculative: "mtp" });
    const mtpTensors = bigMtp.tensors.filter((t) => t.name.startsWith("blk.64."));
    const weights = mtpTensors.reduce((sum, t) => sum + (t.ne.length === 1 ? t.elements * 4 : t.byteLength), 0);
    expect(bytesOf(withMtp, "mtp")).toBe(weights + 4096 * 4 * 1024); // one attention layer: 4 KiB of f16 KV per token
    expect(bytesOf(withMtp, "packed")).toBe(bytesOf(without, "packed"));
    expect(withMtp.traceRegion.programs).toBeGreaterThan(without.traceRegion.programs);
    // one rollback copy of the sequence's GDN state, and logits rows for 3 drafts + the target's token
    expect(bytesOf(withMtp, "gdnState")).toBe(2 * bytesOf(without, "gdnState"));
    const scratchPerRow = bytesOf(withMtp, "scratch") - bytesOf(without, "scratch");
    const k8 = planWith(bigMtp, { device: ttDevice("tt-p150"), speculative: "mtp", draftTokens: 8 });
    expect(bytesOf(k8, "scratch") - bytesOf(without, "scratch")).toBe((scratchPerRow / 3) * 8);
    expect(() => planWith(bigMtp, { device: ttDevice("tt-p150"), speculative: "mtp", draftTokens: 9 })).toThrow(/draftTokens/);
  });
});

describe("the 0.8B shape", () => {
  it("its tied head [248320, 1024] decodes in 4 chunks of 65,536 rows", () => {
    const plan = planWith(small, { device: ttDevice("tt-n150") });
    expect(plan.chunkPlane).toEqual({
      tensor: "token_embd.weight",
      rows: 248_320,
      cols: 1024,
      chunkRows: 65_536,
      chunks: 4,
      bytes: 65_536 * 1024 * 4,
    });
  });

  it("fits a tt-n150, with its numbers", () => {
    const plan = planWith(small, { device: ttDevice("tt-n150"), contextLength: 4096 });
    expect(plan.fits).toBe(true);
    expect(plan.capacityBytes).toBe(12e9);
    // Tied head: token_embd is read packed by the head matmul and through its twin by the gathers.
    const matrices = small.tensors.filter((t) => t.ne.length === 2 && !t.name.endsWith("ssm_conv1d.weight"));
    expect(bytesOf(plan, "packed")).toBe(matrices.reduce((sum, t) => sum + t.byteLength, 0));
    expect(bytesOf(plan, "twins")).toBe(248_320 * 1024 * 2);
    // qwen35.md 13.1: 12 KiB of KV per token, 72 KiB conv + 1 MiB recurrent per GDN layer.
    expect(bytesOf(plan, "kvCache")).toBe(4096 * 12 * 1024);
    expect(bytesOf(plan, "gdnState")).toBe(18 * (72 * 1024 + MiB));
    expect(plan.headroomBytes).toBe(12e9 - plan.totalBytes);
    expect(plan.verdict).toBe(
      `fits with ${((12e9 - plan.totalBytes) / 1024 ** 3).toFixed(2)} GiB headroom (needs ${(plan.totalBytes / 1024 ** 3).toFixed(2)} GiB, tt-n150 has 11.18 GiB)`,
    );
  });

  it("a vision projector beside the model is one more class, counted in the total and in what would fit", () => {
    const base = planWith(small, { device: ttDevice("tt-n150"), contextLength: 4096 });
    const projector = { bytes: 900 * MiB, tensors: 334, detail: "mmproj-F16.gguf: 334 tensors" };
    const plan = planWith(small, { device: ttDevice("tt-n150"), contextLength: 4096, projector });
    expect(plan.classes.find((c) => c.id === "projector")).toEqual({
      id: "projector",
      label: "vision projector (mmproj)",
      bytes: 900 * MiB,
      detail: "mmproj-F16.gguf: 334 tensors",
    });
    expect(plan.totalBytes).toBe(base.totalBytes + 900 * MiB);
    expect(base.classes.some((c) => c.id === "projector")).toBe(false);
    // the suggestions recompute with the projector: the largest fitting context leaves room for it
    const tight = planWith(small, { device: customDevice(base.totalBytes + 1), contextLength: 4096, projector });
    expect(tight.fits).toBe(false);
    const context = tight.suggestions.find((s) => s.kind === "context")?.value as number | undefined;
    if (context !== undefined) expect(planWith(small, { device: tight.device, contextLength: context, projector }).fits).toBe(true);
    expect(() => planWith(small, { device: ttDevice("tt-n150"), projector: { ...projector, bytes: -1 } })).toThrow(PlanError);
  });

  it("packed-head-twin reuses the gather twin for a tied head: no packed token_embd and no head plane", () => {
    const packed = planWith(small, { device: ttDevice("tt-n150") });
    const headTwin = planWith(small, { device: ttDevice("tt-n150"), policy: "packed-head-twin" });
    const embd = small.tensors.find((t) => t.name === "token_embd.weight")!;
    expect(bytesOf(headTwin, "packed")).toBe(bytesOf(packed, "packed") - embd.byteLength);
    expect(bytesOf(headTwin, "twins")).toBe(bytesOf(packed, "twins"));
    expect(headTwin.chunkPlane!.tensor).not.toBe("token_embd.weight");
  });
});

describe("chunk policy and trace region", () => {
  it("honours KEEPQUANT_CHUNK_BYTES through the quant package's chunk policy, and rejects a bad value by name", () => {
    const plan = planWith(big, { device: ttDevice("tt-p150"), env: { KEEPQUANT_CHUNK_BYTES: String(100 * MiB) } });
    // floor(100 MiB / (4 x 5120)) = 5120 rows of the head, 49 chunks
    expect(plan.chunkPlane).toMatchObject({ tensor: "output.weight", chunkRows: 5120, chunks: 49, bytes: 5120 * 5120 * 4 });
    expect(() => planWith(big, { device: ttDevice("tt-p150"), env: { KEEPQUANT_CHUNK_BYTES: "lots" } })).toThrow(/KEEPQUANT_CHUNK_BYTES/);
  });

  it("llama numerics (the cpu default) decode no plane: matmuls dot packed rows", () => {
    const plan = planWith(big, { device: customDevice(64e9) });
    expect(plan.settings.numerics).toBe("llama");
    expect(plan.chunkPlane).toBeNull();
    expect(bytesOf(plan, "twins")).toBe(0);
    expect(bytesOf(plan, "traceRegion")).toBe(0);
  });

  it("dynamic by default: programs of the captured decode step x TRACE_BYTES_PER_PROGRAM, whole MiB per chip", () => {
    const plan = planWith(big, { device: ttDevice("tt-p150") });
    const region = plan.traceRegion;
    expect(region.policy).toBe("dynamic");
    // 16 attention + 48 GDN layers of non-matmul programs, plus one program per matmul chunk.
    const fixed = DECODE_STEP_PROGRAMS.step.length + 16 * DECODE_STEP_PROGRAMS.attention.length + 48 * DECODE_STEP_PROGRAMS.gdn.length;
    expect(region.programs).toBeGreaterThan(fixed + 16 * 7 + 48 * 8);
    expect(region.bytes).toBe(Math.ceil((region.programs * TRACE_BYTES_PER_PROGRAM) / MiB) * MiB);
    expect(bytesOf(plan, "traceRegion")).toBe(region.bytes);
    // tt-n300: one region per chip.
    const n300 = planWith(big, { device: ttDevice("tt-n300") }).traceRegion;
    expect(n300.bytes).toBe(2 * n300.bytesPerChip);
  });

  it("KEEPQUANT_TT_TRACE_REGION_MB opts into a fixed region counted against the device", () => {
    const dynamic = planWith(small, { device: ttDevice("tt-n150") });
    const fixed = planWith(small, { device: ttDevice("tt-n150"), env: { KEEPQUANT_TT_TRACE_REGION_MB: "64" } });
    expect(fixed.traceRegion).toMatchObject({ policy: "fixed", bytes: 64 * MiB });
    expect(fixed.totalBytes - dynamic.totalBytes).toBe(64 * MiB - dynamic.traceRegion.bytes);
    expect(fixed.warnings).toEqual([]);
    expect(planWith(small, { device: ttDevice("tt-n150"), env: { KEEPQUANT_TT_TRACE_REGION_MB: "0.5" } }).traceRegion.bytes).toBe(MiB / 2);
  });

  it.each([
    ["abc", "it is not a number"],
    ["-8", "it is negative"],
    ["20000", "larger than the device"],
  ])("an unusable KEEPQUANT_TT_TRACE_REGION_MB=%s falls back to dynamic with a warning naming it", (value, problem) => {
    const plan = planWith(small, { device: ttDevice("tt-n150"), env: { KEEPQUANT_TT_TRACE_REGION_MB: value } });
    expect(plan.traceRegion.policy).toBe("dynamic");
    expect(plan.warnings).toHaveLength(1);
    expect(plan.warnings[0]).toMatchObject({ code: "TRACE_REGION_FALLBACK", variable: "KEEPQUANT_TT_TRACE_REGION_MB", value });
    expect(plan.warnings[0]!.message).toContain(`KEEPQUANT_TT_TRACE_REGION_MB="${value}"`);
    expect(plan.warnings[0]!.message).toContain(problem);
  });
});

describe("input and devices", () => {
  it("refuses bad input with a typed error naming the field", () => {
    const bad = (input: Record<string, unknown>, field: string) => {
      let error: unknown;
      try {
        planWith(small, { device: ttDevice("tt-n150"), ...input });
      } catch (e) {
        error = e;
      }
      expect(PlanError.isInstance(error), field).toBe(true);
      expect(error).toMatchObject({ code: "PLAN_BAD_INPUT", field });
    };
    bad({ contextLength: 0 }, "contextLength");
    bad({ sequences: 1.5 }, "sequences");
    bad({ kvType: "q8_0" }, "kvType");
    bad({ policy: "twins" }, "policy");
    bad({ numerics: "llama" }, "numerics"); // no TT arm computes llama numerics
    bad({ speculative: "eagle" }, "speculative");
    expect(() => resolveDevice("tt-x9")).toThrow(/unknown device "tt-x9" \(devices: cpu, tt-n150, tt-n300, tt-p100a, tt-p150\)/);
  });

  it("a file the load plan refuses is refused with the tensor named", async () => {
    const { metadata, tensors } = qwen35SpecLayout(QWEN35_TEST_SHAPE);
    const list = tensors.filter((t) => t.name !== "blk.0.ssm_a").map((t) => ({ name: t.name, type: GgmlType.F32, ne: [...t.ne] }));
    const file = await readGguf(writeGguf({ metadata, tensors: list.map((t) => ({ ...t, data: new Uint8Array(tensorByteLength(t)) })) }));
    expect(() => planWith(file, { device: customDevice(1e9) })).toThrow(/blk\.0\.ssm_a: missing required tensor/);
  });

  it("devices: vendor decimal GB, --memory replaces the capacity", () => {
    expect(ttDevice("tt-n150").capacityBytes).toBe(12e9);
    expect(ttDevice("tt-n300")).toMatchObject({ capacityBytes: 24e9, chips: 2 });
    expect(ttDevice("tt-p100a").capacityBytes).toBe(28e9);
    expect(ttDevice("tt-p150").capacityBytes).toBe(32e9);
    expect(resolveDevice(undefined, { memoryBytes: 5e9 })).toMatchObject({ name: "custom", kind: "custom", capacityBytes: 5e9 });
    expect(resolveDevice("tt-p150", { memoryBytes: 30e9 })).toMatchObject({ kind: "tt", capacityBytes: 30e9 });
    expect(resolveDevice("cpu", { cpuMemory: () => ({ bytes: 7e9, source: "test" }) })).toMatchObject({
      kind: "cpu",
      capacityBytes: 7e9,
      source: "test",
    });
  });

  it("cpu memory: MemAvailable, capped by a cgroup limit (v2, then v1); os.freemem() without /proc/meminfo", () => {
    const files = (entries: Record<string, string>) => (p: string) => entries[p];
    const meminfo = "MemTotal:       24683584 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
    expect(cpuAvailableMemory(files({ "/proc/meminfo": meminfo }))).toMatchObject({
      bytes: 20_000_000 * 1024,
      source: expect.stringMatching(/^\/proc\/meminfo MemAvailable/),
    });
    const v2 = cpuAvailableMemory(
      files({
        "/proc/meminfo": meminfo,
        "/sys/fs/cgroup/memory.max": "8000000000\n",
        "/sys/fs/cgroup/memory.current": "3000000000\n",
        "/sys/fs/cgroup/memory.stat": "anon 1\nfile 1000000000\n",
      }),
    );
    expect(v2).toMatchObject({ bytes: 8e9 - (3e9 - 1e9), source: expect.stringMatching(/^cgroup v2/) });
    const v1 = cpuAvailableMemory(
      files({
        "/proc/meminfo": meminfo,
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": "4000000000\n",
        "/sys/fs/cgroup/memory/memory.usage_in_bytes": "2500000000\n",
        "/sys/fs/cgroup/memory/memory.stat": "cache 5\ntotal_inactive_file 300000000\ntotal_active_file 200000000\n",
      }),
    );
    expect(v1).toMatchObject({ bytes: 4e9 - (2.5e9 - 5e8), source: expect.stringMatching(/^cgroup v1/) });
    // cgroup v1 "no limit" is 2^63 - 4096: MemAvailable stands.
    const unlimited = cpuAvailableMemory(
      files({
        "/proc/meminfo": meminfo,
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712",
        "/sys/fs/cgroup/memory/memory.usage_in_bytes": "1",
      }),
    );
    expect(unlimited.bytes).toBe(20_000_000 * 1024);
    expect(cpuAvailableMemory(files({})).source).toMatch(/^os\.freemem\(\)/);
  });
});

describe("cpu: what Engine.load keeps resident", () => {
  for (const numerics of ["llama", "bf16"] as const) {
    it(`${numerics} numerics: the plan of the engine's options matches a loaded Engine's resident bytes`, async () => {
      const options = { numerics, provider: "ts" as const, kvCacheTokens: 1000, maxSequences: 3, maxBatchTokens: 64 };
      const file = await readGguf(paths.test);
      const plan = planEngineResidency(file, options, customDevice(1e12));
      const engine = await Engine.load(paths.test, options);
      try {
        const resident = engine.stats().residentBytes;
        expect(bytesOf(plan, "packed")).toBe(resident.packed);
        expect(bytesOf(plan, "twins")).toBe(resident.twin);
        expect(bytesOf(plan, "f32")).toBe(resident.f32);
        expect(bytesOf(plan, "kvCache")).toBe(resident.kvCache);
        expect(bytesOf(plan, "gdnState")).toBe(resident.gdnState);
        // Before the first step the engine holds only the per-row scratch; the plan adds logits rows.
        const logitRows = 3;
        expect(bytesOf(plan, "scratch") - logitRows * (QWEN35_TEST_SHAPE.vocab + QWEN35_TEST_SHAPE.hidden) * 4).toBe(resident.scratch);
      } finally {
        engine.dispose();
      }
    });
  }

  it("ENGINE_MEMORY_DEFAULTS are the Engine's defaults", async () => {
    const engine = await Engine.load(paths.test, { provider: "ts" });
    try {
      const stats = engine.stats();
      expect(stats.kv.blocksTotal * stats.kv.blockSize).toBe(ENGINE_MEMORY_DEFAULTS.kvCacheTokens);
      expect(stats.kv.blockSize).toBe(ENGINE_MEMORY_DEFAULTS.blockSize);
      expect(stats.states.slotsTotal).toBe(ENGINE_MEMORY_DEFAULTS.maxSequences);
      const plan = planEngineResidency(await readGguf(paths.test), {}, customDevice(1e12));
      expect(bytesOf(plan, "kvCache")).toBe(stats.residentBytes.kvCache);
      expect(bytesOf(plan, "gdnState")).toBe(stats.residentBytes.gdnState);
      expect(plan.settings.batchTokens).toBe(ENGINE_MEMORY_DEFAULTS.maxBatchTokens);
    } finally {
      engine.dispose();
    }
  });

  it("checkCpuLoad / assertCpuFits: counted against available memory, refused with the planner's explanation", async () => {
    const roomy = await assertCpuFits(paths.small, {}, { memory: { bytes: 64e9, source: "test memory" } });
    expect(roomy.plan.fits).toBe(true);
    expect(roomy.plan.device).toMatchObject({ kind: "cpu", capacityBytes: 64e9 });
    expect(roomy.plan.classes[0]!.label).toBe("packed matmul weights (memory-mapped)");
    expect(roomy.plan.notes[0]).toMatch(/memory-mapped views of the GGUF file/);
    const tight = await checkCpuLoad(paths.big, {}, { memory: { bytes: 8e9, source: "test memory" } });
    expect(tight.plan.fits).toBe(false);
    expect(tight.explanation).toContain(`${paths.big} on this machine: does not fit: needs `);
    expect(tight.explanation).toContain("Available memory from test memory");
    expect(tight.explanation).toContain("more available memory");
    const error = await assertCpuFits(paths.big, {}, { memory: { bytes: 8e9, source: "test memory" } }).catch((e: unknown) => e);
    expect(PlanError.isInstance(error)).toBe(true);
    expect(error).toMatchObject({ code: "PLAN_DOES_NOT_FIT" });
    expect((error as Error).message).toBe(tight.explanation);
    expect(cpuDevice({ bytes: 0, source: "none" }).capacityBytes).toBe(0);
  });
});
