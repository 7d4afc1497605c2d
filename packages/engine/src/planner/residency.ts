import {
  GGML_TYPE_TRAITS,
  GgmlType,
  assertLoadable,
  buildLoadPlan,
  getMetadata,
  type GgufFile,
  type LoadPlan,
  type PlannedTensor,
  type SpeculativeMethod,
} from "@keepquant/gguf";
import { KEEPQUANT_ENCODINGS, chunkPlan, isKeepQuantEncoding, type EnvSource } from "@keepquant/quant";
import type { KvType } from "../kv/paged-kv.js";
import { isVectorTensor } from "../model/config.js";
import { forwardScratchRowWidth } from "../model/scratch.js";
import type { Numerics } from "../model/matmul.js";
import { TT_DEVICES, ttDevice, type PlanDevice, type TtDeviceName } from "./devices.js";
import { PlanError } from "./errors.js";
import { DECODE_STEP_PROGRAMS, planTraceRegion, type PlanWarning, type TraceRegion } from "./trace-region.js";

/**
 * Residency policies compared side by side: `packed` keeps every matmul weight in its GGUF encoding
 * (only the gather class gets a bf16 twin, where the numerics keep one); `twin-for-all` keeps a
 * decoded bf16 twin of every matrix instead (the old residency); `packed-head-twin` is `packed`
 * plus a bf16 twin of the output head.
 */
export type ResidencyPolicy = "packed" | "twin-for-all" | "packed-head-twin";
export const RESIDENCY_POLICIES: readonly ResidencyPolicy[] = Object.freeze(["packed", "twin-for-all", "packed-head-twin"]);

export const PLAN_DEFAULTS = Object.freeze({
  contextLength: 4096,
  sequences: 1,
  kvType: "f16" as KvType,
  policy: "packed" as ResidencyPolicy,
  /** The engine's default step budget (llama.cpp's n_ubatch). */
  batchTokens: 512,
  /** The engine's KV block size: each sequence's KV is whole blocks. */
  blockSize: 16,
});

export interface ResidencyPlanInput {
  device: PlanDevice;
  /** Tokens per sequence (default 4096). */
  contextLength?: number;
  /** Concurrent sequences: GDN state slots, KV for each (default 1). */
  sequences?: number;
  /**
   * Total KV capacity in tokens shared by the sequences (the engine's `kvCacheTokens`); default
   * `sequences x contextLength`, each sequence rounded up to whole blocks.
   */
  kvCacheTokens?: number;
  kvType?: KvType;
  /** Default: `bf16` on Tenstorrent devices (the keep-quant contract), the engine's `llama` elsewhere. */
  numerics?: Numerics;
  /**
   * `mtp` keeps the MTP drafter block (weights and its KV cache), one rollback copy of the GDN
   * state per sequence, and logits rows for the verified drafts.
   */
  speculative?: SpeculativeMethod;
  /** Drafts per verification step with `speculative` (1 .. 8, default 3): the logits rows of a step. */
  draftTokens?: number;
  policy?: ResidencyPolicy;
  /** Rows of one forward step: the activation scratch (default 512). */
  batchTokens?: number;
  /** KV block size in tokens (default 16). */
  blockSize?: number;
  /** Extra GDN state slots kept as prefix-cache snapshots (the engine's `prefixCacheSnapshots`; default 0). */
  stateSnapshots?: number;
  /** Where `KEEPQUANT_CHUNK_BYTES` and `KEEPQUANT_TT_TRACE_REGION_MB` are read (default process.env). */
  env?: EnvSource;
  /**
   * A vision projector (mmproj) loaded beside the model: its weight bytes are one more class. The caller
   * plans the projector file (`projectorLoadPlan` of @keepquant/gguf) and passes what it uses.
   */
  projector?: PlanProjector;
}

/** The weights of a vision projector, as its load plan counts them. */
export interface PlanProjector {
  /** Bytes of the tensors its load plan uses, as stored. */
  bytes: number;
  tensors: number;
  /** Shown in the class's detail, e.g. the file name and its types. */
  detail: string;
}

export interface ResolvedPlanSettings {
  contextLength: number;
  sequences: number;
  /** KV tokens planned (whole blocks). */
  kvCacheTokens: number;
  /** True when `kvCacheTokens` was given (engine-style) rather than derived from context x sequences. */
  kvCacheTokensGiven: boolean;
  kvType: KvType;
  numerics: Numerics;
  speculative: SpeculativeMethod | null;
  /** drafts per verification (0 without speculative decoding) */
  draftTokens: number;
  policy: ResidencyPolicy;
  batchTokens: number;
  blockSize: number;
  stateSnapshots: number;
}

export type ResidencyClassId =
  | "packed"
  | "twins"
  | "f32"
  | "chunkPlane"
  | "kvCache"
  | "gdnState"
  | "mtp"
  | "scratch"
  | "traceRegion"
  | "projector";

export interface ResidencyClass {
  id: ResidencyClassId;
  label: string;
  bytes: number;
  detail: string;
}

export interface ChunkPlaneInfo {
  tensor: string;
  /** N and K of the matrix. */
  rows: number;
  cols: number;
  /** Rows per chunk (the chunk policy). */
  chunkRows: number;
  chunks: number;
  bytes: number;
}

export interface PlanModelSummary {
  name: string | undefined;
  nLayer: number;
  attentionLayers: number;
  gdnLayers: number;
  vocab: number;
  tiedHead: boolean;
  /** nextn_predict_layers of the file, and whether the plan keeps the block. */
  mtpLayers: number;
  mtpUsed: boolean;
  /** Bytes of tensors the load plan skips (the MTP block when not configured): never resident. */
  skippedBytes: number;
  /** Tensor bytes the load plan uses, as stored. */
  usedBytes: number;
  /** Matrices the plan uses, by ggml type name. */
  matrixTypes: Record<string, number>;
  /** Elements of those matrices. */
  matrixParameters: number;
}

export interface PlanSuggestion {
  kind: "context" | "sequences" | "device" | "policy" | "quantization" | "memory";
  message: string;
  /** The value that fits: tokens, sequences, a device name, a policy, bits per weight, bytes. */
  value: number | string;
}

export interface ResidencyPlan {
  device: PlanDevice;
  settings: ResolvedPlanSettings;
  model: PlanModelSummary;
  /** Every class, largest first. */
  classes: ResidencyClass[];
  totalBytes: number;
  capacityBytes: number;
  fits: boolean;
  /** capacity - total (negative when it does not fit). */
  headroomBytes: number;
  chunkPlane: ChunkPlaneInfo | null;
  traceRegion: TraceRegion;
  /** "fits with X GiB headroom ..." or "does not fit: needs X, device has Y, largest items ...". */
  verdict: string;
  /** The largest consumers (named in the verdict when it does not fit). */
  largest: ResidencyClass[];
  /** What would make it fit (empty when it fits). */
  suggestions: PlanSuggestion[];
  /** How the classes are counted on this device. */
  notes: string[];
  warnings: PlanWarning[];
}

const GiB = 1024 ** 3;

/** Bytes as GiB with two decimals, the planner's unit. */
export function formatGiB(bytes: number): string {
  return `${(bytes / GiB).toFixed(2)} GiB`;
}

function positiveInteger(value: unknown, field: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new PlanError("PLAN_BAD_INPUT", `${field} must be a positive integer, got ${String(value)}`, { field });
  }
  return value;
}

function oneOf<T extends string>(value: unknown, allowed: readonly T[], field: string): T {
  if (typeof value !== "string" || !(allowed as readonly string[]).includes(value)) {
    throw new PlanError("PLAN_BAD_INPUT", `${field} must be one of ${allowed.join(", ")}, got ${JSON.stringify(value)}`, { field });
  }
  return value as T;
}

const roundUp = (n: number, multiple: number): number => Math.ceil(n / multiple) * multiple;

function resolveSettings(input: ResidencyPlanInput): ResolvedPlanSettings {
  const device = input.device;
  if (typeof device !== "object" || device === null || !Number.isSafeInteger(device.capacityBytes) || device.capacityBytes < 0) {
    throw new PlanError("PLAN_BAD_INPUT", "device must be a PlanDevice with a capacity in bytes", { field: "device" });
  }
  const contextLength = positiveInteger(input.contextLength ?? PLAN_DEFAULTS.contextLength, "contextLength");
  const sequences = positiveInteger(input.sequences ?? PLAN_DEFAULTS.sequences, "sequences");
  const blockSize = positiveInteger(input.blockSize ?? PLAN_DEFAULTS.blockSize, "blockSize");
  const batchTokens = positiveInteger(input.batchTokens ?? PLAN_DEFAULTS.batchTokens, "batchTokens");
  const kvType = oneOf(input.kvType ?? PLAN_DEFAULTS.kvType, ["f16", "f32"] as const, "kvType");
  const numerics = oneOf(input.numerics ?? (device.kind === "tt" ? "bf16" : "llama"), ["llama", "bf16", "exact"] as const, "numerics");
  if (device.kind === "tt" && numerics !== "bf16") {
    throw new PlanError(
      "PLAN_BAD_INPUT",
      `numerics ${JSON.stringify(numerics)} has no Tenstorrent arm: ${device.name} computes the keep-quant contract (bf16 numerics)`,
      { field: "numerics" },
    );
  }
  const policy = oneOf(input.policy ?? PLAN_DEFAULTS.policy, RESIDENCY_POLICIES, "policy");
  const speculative = input.speculative === undefined ? null : oneOf(input.speculative, ["mtp"] as const, "speculative");
  const draftTokens = speculative === null ? 0 : positiveInteger(input.draftTokens ?? 3, "draftTokens");
  if (draftTokens > 8) throw new PlanError("PLAN_BAD_INPUT", `draftTokens must be in [1, 8], got ${draftTokens}`, { field: "draftTokens" });
  const stateSnapshots =
    input.stateSnapshots === undefined || input.stateSnapshots === 0 ? 0 : positiveInteger(input.stateSnapshots, "stateSnapshots");
  const kvCacheTokensGiven = input.kvCacheTokens !== undefined;
  const kvCacheTokens = kvCacheTokensGiven
    ? roundUp(positiveInteger(input.kvCacheTokens, "kvCacheTokens"), blockSize)
    : sequences * roundUp(contextLength, blockSize);
  if (!Number.isSafeInteger(kvCacheTokens))
    throw new PlanError("PLAN_BAD_INPUT", `context x sequences = ${kvCacheTokens} tokens is too large`, { field: "contextLength" });
  return {
    contextLength,
    sequences,
    kvCacheTokens,
    kvCacheTokensGiven,
    kvType,
    numerics,
    speculative,
    draftTokens,
    policy,
    batchTokens,
    blockSize,
    stateSnapshots,
  };
}

type Role = "gather" | "head" | "matmul";

/** One tensor the load plan uses, with what reads it. */
interface TensorUse {
  tensor: PlannedTensor;
  mtp: boolean;
  /** 1-D tensors and ssm_conv1d: decoded to f32 at load. */
  small: boolean;
  roles: Role[];
}

/** The header facts the arithmetic needs, derived once per load plan. */
interface ModelFacts {
  plan: LoadPlan;
  projector: PlanProjector | null;
  uses: TensorUse[];
  summary: PlanModelSummary;
}

function modelFacts(
  file: Pick<GgufFile, "metadata" | "tensors">,
  speculative: SpeculativeMethod | null,
  projector: PlanProjector | null,
): ModelFacts {
  const plan = buildLoadPlan(file, speculative ? { speculative } : {});
  assertLoadable(plan);
  // what reads each tensor, from the plan's slots; vectors by the loader's rule (the plan marks the conv kernel)
  const uses: TensorUse[] = plan.used.map((tensor) => {
    let roles: Role[] = ["matmul"];
    if (tensor.slot === "token_embd") roles = plan.tiedHead ? ["gather", "head"] : ["gather"];
    else if (tensor.slot === "output" || tensor.slot === "nextn.shared_head_head") roles = ["head"];
    else if (tensor.slot === "nextn.embed_tokens") roles = ["gather"];
    return { tensor, mtp: tensor.role === "mtp", small: isVectorTensor(tensor), roles };
  });
  const matrixTypes: Record<string, number> = {};
  let matrixParameters = 0;
  for (const use of uses) {
    if (use.small) continue;
    const name = GGML_TYPE_TRAITS[use.tensor.type].name;
    matrixTypes[name] = (matrixTypes[name] ?? 0) + 1;
    matrixParameters += use.tensor.elements;
  }
  const { attentionLayers, gdnLayers } = plan.description;
  const name = getMetadata(file, "general.name");
  return {
    plan,
    projector,
    uses,
    summary: {
      name: typeof name === "string" ? name : undefined,
      nLayer: plan.config.nLayer,
      attentionLayers,
      gdnLayers,
      vocab: plan.vocab,
      tiedHead: plan.tiedHead,
      mtpLayers: plan.config.nextnPredictLayers,
      mtpUsed: speculative === "mtp" && plan.config.nextnPredictLayers > 0,
      skippedBytes: plan.skippedBytes,
      usedBytes: plan.usedBytes,
      matrixTypes,
      matrixParameters,
    },
  };
}

/** The classes for one device and one set of settings (no verdict). */
interface Computed {
  classes: ResidencyClass[];
  totalBytes: number;
  chunkPlane: ChunkPlaneInfo | null;
  traceRegion: TraceRegion;
  warnings: PlanWarning[];
  /** Bytes and elements of the packed class (for the quantization suggestion). */
  packedBytes: number;
  packedParameters: number;
}

const KiB = 1024;
const MiB = 1024 * 1024;

function sizeText(bytes: number): string {
  if (bytes >= GiB) return formatGiB(bytes);
  if (bytes >= MiB) return `${(bytes / MiB).toFixed(2)} MiB`;
  if (bytes >= KiB) return `${(bytes / KiB).toFixed(2)} KiB`;
  return `${bytes} B`;
}

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? "" : "s"}`;

function typeMix(counts: Map<string, number>): string {
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([type, n]) => `${n} ${type}`)
    .join(", ");
}

function compute(facts: ModelFacts, settings: ResolvedPlanSettings, device: PlanDevice, env: EnvSource): Computed {
  const { config } = facts.plan;
  const { policy, numerics } = settings;
  const gatherTwin = numerics === "bf16" || policy === "twin-for-all";
  const readsTwin = (role: Role): boolean =>
    role === "gather" ? gatherTwin : role === "head" ? policy !== "packed" : policy === "twin-for-all";
  const warnings: PlanWarning[] = [];

  const trunk = { packed: 0, twins: 0, f32: 0 };
  const mtp = { packed: 0, twins: 0, f32: 0, tensors: 0 };
  let packedParameters = 0;
  let chunkPlane: ChunkPlaneInfo | null = null;
  let matmulPrograms = 0;
  let mtpMatmulPrograms = 0;
  const packedTypes = new Map<string, number>();
  const twins: PlannedTensor[] = [];
  const outsideContract = new Map<string, number>();
  let smallTensors = 0;

  for (const use of facts.uses) {
    const t = use.tensor;
    const bucket = use.mtp ? mtp : trunk;
    if (use.mtp) mtp.tensors++;
    if (use.small) {
      bucket.f32 += t.elements * 4;
      if (!use.mtp) smallTensors++;
      continue;
    }
    const twin = use.roles.some(readsTwin);
    const packed = use.roles.some((role) => !readsTwin(role));
    if (twin) {
      bucket.twins += t.elements * 2;
      if (!use.mtp) twins.push(t);
    }
    const typeName = GGML_TYPE_TRAITS[t.type].name;
    if (packed) {
      bucket.packed += t.byteLength;
      if (!use.mtp) {
        packedParameters += t.elements;
        packedTypes.set(typeName, (packedTypes.get(typeName) ?? 0) + 1);
      }
    }
    // Matmuls of the step: a head or projection reading packed words through the keep-quant
    // contract (bf16 numerics, a registered encoding) decodes chunk by chunk; anything else is one program.
    const computesPacked = use.roles.some((role) => role !== "gather" && !readsTwin(role));
    if (!use.roles.some((role) => role !== "gather")) continue;
    let programs = 1;
    if (computesPacked && numerics === "bf16" && isKeepQuantEncoding(t.type)) {
      const n = t.ne[1]!;
      const k = t.ne[0]!;
      const chunks = chunkPlan(n, k, env);
      programs = chunks.chunks;
      if (chunkPlane === null || chunks.planeBytes > chunkPlane.bytes) {
        chunkPlane = { tensor: t.name, rows: n, cols: k, chunkRows: chunks.rows, chunks: chunks.chunks, bytes: chunks.planeBytes };
      }
    }
    // An F32 matrix (qwen35moe's router, ffn_gate_inp) is not packed words: nothing is decoded, the TT arm
    // runs it as a plain f32 matmul (kept f32, so the routing is the specification's), so it is not outside
    // the contract; only packed encodings the contract does not register are.
    if (computesPacked && device.kind === "tt" && t.type !== GgmlType.F32 && !isKeepQuantEncoding(t.type))
      outsideContract.set(typeName, (outsideContract.get(typeName) ?? 0) + 1);
    // A stacked expert tensor (qwen35moe's *_exps) runs through the contract's E = N arm once per selected
    // expert: a decode step issues expert_used_count of its matmuls (each chunked as one expert's matrix).
    if (config.moe && t.ne.length === 3 && t.name.endsWith("_exps.weight")) programs *= config.moe.expertUsedCount;
    if (use.mtp) mtpMatmulPrograms += programs;
    else matmulPrograms += programs;
  }
  if (outsideContract.size > 0) {
    warnings.push({
      code: "OUTSIDE_CONTRACT",
      message:
        `${typeMix(outsideContract)} matrices are read as packed words, but ${device.name} computes only the registered encodings ` +
        `(${KEEPQUANT_ENCODINGS.map((e) => GGML_TYPE_TRAITS[e].name).join(", ")}): the TT arm refuses them; a twin policy or another quantization would be needed`,
    });
  }

  // KV cache: full-attention layers only, K and V rows of Hkv x Dh per token.
  const kvElementBytes = settings.kvType === "f16" ? 2 : 4;
  const dims = facts.plan.description.dims;
  const kvBytesPerTokenPerLayer = 2 * dims.kvDim * kvElementBytes;
  const attentionLayers = facts.summary.attentionLayers;
  const kvBytes = attentionLayers * kvBytesPerTokenPerLayer * settings.kvCacheTokens;
  const mtpUsed = facts.summary.mtpUsed;
  const mtpKvBytes = mtpUsed ? config.nextnPredictLayers * kvBytesPerTokenPerLayer * settings.kvCacheTokens : 0;

  // GDN state per slot: conv [conv_dim, K - 1] and recurrent [Hv, Dv, Dk], f32.
  const convBytes = dims.convStateElements * 4;
  const recurrentBytes = dims.ssmStateElements * 4;
  // speculative decoding keeps one copy of each sequence's state from before its verification step
  const rollbackSlots = settings.speculative === null ? 0 : settings.sequences;
  const slots = settings.sequences + settings.stateSnapshots + rollbackSlots;
  const gdnBytes = facts.summary.gdnLayers * slots * (convBytes + recurrentBytes);

  // Activation scratch of the forward: its named buffers (model/scratch.ts), f32, per batch row.
  const D = config.embeddingLength;
  const rowWidth = forwardScratchRowWidth(dims);
  const activationBytes = settings.batchTokens * rowWidth * 4;
  // Rows needing logits in one step: one per sequence at most (decode, or the last prefill row);
  // with speculative decoding the verified drafts and the target's own token per sequence.
  const logitRows = Math.min(settings.batchTokens, settings.sequences * (settings.draftTokens + 1));
  const logitsBytes = logitRows * (facts.plan.vocab + D) * 4;

  const stepPrograms =
    DECODE_STEP_PROGRAMS.step.length +
    attentionLayers * DECODE_STEP_PROGRAMS.attention.length +
    facts.summary.gdnLayers * DECODE_STEP_PROGRAMS.gdn.length +
    matmulPrograms +
    // qwen35moe: per MoE FFN the router's softmax, top-k, weight normalization, the selected experts' SwiGLUs
    // beyond the layer's one, the shared expert's gate sigmoid and the weighted sum
    (config.moe
      ? (facts.summary.attentionLayers + facts.summary.gdnLayers) * (DECODE_STEP_PROGRAMS.moe.length + config.moe.expertUsedCount)
      : 0) +
    // the drafter: its attention block, enorm + hnorm + concat + shared head norm, its matmuls, argmax
    (mtpUsed ? DECODE_STEP_PROGRAMS.attention.length + 5 + mtpMatmulPrograms : 0);
  const trace = planTraceRegion(device, stepPrograms, env);
  if (trace.warning) warnings.push(trace.warning);

  const onCpu = device.kind === "cpu";
  const layersText = `${attentionLayers} attention layers`;
  const seqText = settings.kvCacheTokensGiven
    ? `${settings.kvCacheTokens} tokens shared by ${plural(settings.sequences, "sequence")}`
    : `${settings.contextLength} ctx x ${plural(settings.sequences, "sequence")}`;
  const twinDetail =
    twins.length === 0
      ? numerics === "bf16"
        ? "none"
        : `none: ${numerics} numerics gather rows from the packed words`
      : policy === "twin-for-all"
        ? `every matrix decoded to bf16 (${twins.length} tensors)`
        : twins
            .map(
              (t) =>
                `${t.slot} ${t.slot === "token_embd" ? (facts.plan.tiedHead && policy !== "packed" ? "(gathers + head)" : "(gathers)") : "(head)"}`,
            )
            .join(" + ");
  let planeDetail: string;
  const plane: ChunkPlaneInfo | null = chunkPlane;
  if (plane) {
    planeDetail = `${plane.tensor}: ${plane.chunkRows} of ${plane.rows} rows x ${plane.cols} f32, ${plural(plane.chunks, "chunk")}`;
  } else if (numerics !== "bf16") {
    planeDetail = `none: ${numerics} numerics dot the packed rows directly (no decoded plane)`;
  } else if (policy === "twin-for-all") {
    planeDetail = "none: every matmul reads its bf16 twin";
  } else {
    planeDetail = "none: no matrix in a registered encoding is read packed";
  }
  const classes: ResidencyClass[] = [
    {
      id: "packed",
      label: onCpu ? "packed matmul weights (memory-mapped)" : "packed matmul weights",
      bytes: trunk.packed,
      detail: packedTypes.size === 0 ? "none: every matrix is a bf16 twin" : `${typeMix(packedTypes)} as stored`,
    },
    { id: "twins", label: "bf16 twins", bytes: trunk.twins, detail: twinDetail },
    {
      id: "f32",
      label: "f32 small tensors",
      bytes: trunk.f32,
      detail: `${smallTensors} norms and ssm_a/ssm_dt/ssm_conv1d/ssm_norm, as f32`,
    },
    { id: "chunkPlane", label: "largest chunk plane", bytes: plane?.bytes ?? 0, detail: planeDetail },
    {
      id: "kvCache",
      label: `KV cache (${settings.kvType})`,
      bytes: kvBytes,
      detail: `${layersText} x ${settings.kvCacheTokens} tokens (${seqText}), ${sizeText(attentionLayers * kvBytesPerTokenPerLayer)} per token`,
    },
    {
      id: "gdnState",
      label: "GDN state",
      bytes: gdnBytes,
      detail:
        `${facts.summary.gdnLayers} layers x ${plural(slots, "slot")}${
          settings.stateSnapshots > 0 || rollbackSlots > 0
            ? ` (${settings.sequences} sequences${settings.stateSnapshots > 0 ? ` + ${settings.stateSnapshots} snapshots` : ""}${rollbackSlots > 0 ? ` + ${rollbackSlots} speculative rollback copies` : ""})`
            : ""
        }: ` + `conv ${sizeText(convBytes)} + recurrent ${sizeText(recurrentBytes)} per layer and slot`,
    },
    {
      id: "scratch",
      label: "activation scratch",
      bytes: activationBytes + logitsBytes,
      detail: `${settings.batchTokens} batch rows x ${sizeText(rowWidth * 4)} + ${plural(logitRows, "logits row")} x ${facts.plan.vocab} vocab`,
    },
    { id: "traceRegion", label: "trace region", bytes: trace.region.bytes, detail: trace.region.detail },
  ];
  if (facts.summary.mtpLayers > 0) {
    classes.push(
      mtpUsed
        ? {
            id: "mtp",
            label: "MTP block",
            bytes: mtp.packed + mtp.twins + mtp.f32 + mtpKvBytes,
            detail: `blk.${config.nLayer}: ${mtp.tensors} tensors (${sizeText(mtp.packed)} packed${mtp.twins > 0 ? ` + ${sizeText(mtp.twins)} twins` : ""} + ${sizeText(mtp.f32)} f32) + KV ${sizeText(mtpKvBytes)}`,
          }
        : {
            id: "mtp",
            label: "MTP block",
            bytes: 0,
            detail: `not configured: blk.${config.nLayer} (${sizeText(facts.summary.skippedBytes)}) is skipped; --speculative mtp keeps it`,
          },
    );
  }
  if (facts.projector) {
    classes.push({ id: "projector", label: "vision projector (mmproj)", bytes: facts.projector.bytes, detail: facts.projector.detail });
  }
  const order: ResidencyClassId[] = [
    "packed",
    "twins",
    "f32",
    "chunkPlane",
    "kvCache",
    "gdnState",
    "mtp",
    "scratch",
    "traceRegion",
    "projector",
  ];
  classes.sort((a, b) => b.bytes - a.bytes || order.indexOf(a.id) - order.indexOf(b.id));
  const totalBytes = classes.reduce((sum, c) => sum + c.bytes, 0);
  return { classes, totalBytes, chunkPlane: plane, traceRegion: trace.region, warnings, packedBytes: trunk.packed, packedParameters };
}

/** Largest value in [low, high] for which `fits` holds, assuming it is monotone (undefined if none). */
function largestFitting(low: number, high: number, fits: (value: number) => boolean): number | undefined {
  if (high < low || !fits(low)) return undefined;
  let lo = low;
  let hi = high;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** K-quant and Q8_0 types from largest to smallest bits per weight, for the quantization hint. */
const QUANTIZATION_LADDER: readonly GgmlType[] = [GgmlType.Q8_0, GgmlType.Q6_K, GgmlType.Q5_K, GgmlType.Q4_K, GgmlType.Q3_K, GgmlType.Q2_K];
const bitsPerWeight = (type: GgmlType): number => (GGML_TYPE_TRAITS[type].typeSize * 8) / GGML_TYPE_TRAITS[type].blockSize;

function suggestions(
  facts: ModelFacts,
  settings: ResolvedPlanSettings,
  device: PlanDevice,
  env: EnvSource,
  computed: Computed,
): PlanSuggestion[] {
  const out: PlanSuggestion[] = [];
  const capacity = device.capacityBytes;
  const fitsWith = (changes: Partial<ResolvedPlanSettings>, on: PlanDevice = device): boolean =>
    compute(facts, { ...settings, ...changes }, on, env).totalBytes <= on.capacityBytes;
  const block = settings.blockSize;

  if (settings.kvCacheTokensGiven) {
    const blocks = largestFitting(1, settings.kvCacheTokens / block - 1, (b) => fitsWith({ kvCacheTokens: b * block }));
    if (blocks !== undefined) {
      out.push({
        kind: "context",
        value: blocks * block,
        message: `a KV cache of at most ${blocks * block} tokens (kvCacheTokens, now ${settings.kvCacheTokens})`,
      });
    }
  } else {
    const perSequenceBlocks = Math.ceil(settings.contextLength / block);
    const blocks = largestFitting(1, perSequenceBlocks - 1, (b) =>
      fitsWith({ contextLength: b * block, kvCacheTokens: settings.sequences * b * block }),
    );
    if (blocks !== undefined) {
      out.push({
        kind: "context",
        value: blocks * block,
        message: `a context of at most ${blocks * block} tokens (--ctx ${blocks * block})`,
      });
    }
  }
  if (settings.sequences > 1) {
    const sequences = largestFitting(1, settings.sequences - 1, (s) =>
      fitsWith(
        settings.kvCacheTokensGiven ? { sequences: s } : { sequences: s, kvCacheTokens: s * roundUp(settings.contextLength, block) },
      ),
    );
    if (sequences !== undefined) {
      const how = settings.kvCacheTokensGiven ? "maxSequences" : `--seqs ${sequences}`;
      out.push({ kind: "sequences", value: sequences, message: `at most ${plural(sequences, "sequence")} (${how})` });
    }
  }
  if (settings.policy !== "packed" && fitsWith({ policy: "packed" })) {
    out.push({ kind: "policy", value: "packed", message: "the packed policy (--policy packed)" });
  }
  if (device.kind === "tt") {
    const larger = (Object.keys(TT_DEVICES) as TtDeviceName[])
      .filter((name) => name !== device.name)
      .sort((a, b) => TT_DEVICES[a].bytes - TT_DEVICES[b].bytes)
      .find((name) => fitsWith({}, ttDevice(name)));
    if (larger)
      out.push({
        kind: "device",
        value: larger,
        message: `another device: ${larger}, ${TT_DEVICES[larger].bytes / 1e9} GB (--device ${larger})`,
      });
  } else {
    const missing = computed.totalBytes - capacity;
    out.push({
      kind: "memory",
      value: missing,
      message: `${formatGiB(missing)} more ${device.kind === "cpu" ? "available memory (close other programs, or use a machine with more)" : "memory"}`,
    });
  }
  if (computed.packedParameters > 0) {
    const budget = capacity - (computed.totalBytes - computed.packedBytes);
    const now = (computed.packedBytes * 8) / computed.packedParameters;
    if (budget > 0) {
      const bits = (budget * 8) / computed.packedParameters;
      const ladder =
        device.kind === "tt" || settings.numerics === "bf16"
          ? QUANTIZATION_LADDER.filter((t) => isKeepQuantEncoding(t))
          : QUANTIZATION_LADDER;
      const type = ladder.find((t) => bitsPerWeight(t) <= bits && bitsPerWeight(t) < now);
      out.push({
        kind: "quantization",
        value: Math.floor(bits * 100) / 100,
        message:
          `a smaller quantization: matrices at <= ${(Math.floor(bits * 100) / 100).toFixed(2)} bits per weight (now ${now.toFixed(2)})` +
          (type !== undefined
            ? `, e.g. ${GGML_TYPE_TRAITS[type].name} (${bitsPerWeight(type).toFixed(2)})`
            : ", below every registered encoding"),
      });
    }
  }
  return out;
}

function deviceLabel(device: PlanDevice): string {
  return device.name === "custom" ? "the given memory" : device.name;
}

/**
 * Plans the residency of a qwen35 model on a device from its GGUF header alone (never tensor
 * bytes): resident bytes by class, the verdict, and what would make it fit. Throws the gguf
 * package's Qwen35ConfigError when the header is not a loadable qwen35 file, PlanError for bad input.
 */
export function planResidency(file: Pick<GgufFile, "metadata" | "tensors">, input: ResidencyPlanInput): ResidencyPlan {
  const settings = resolveSettings(input);
  const device = input.device;
  const env = input.env ?? process.env;
  const projector = input.projector ?? null;
  if (projector && (!Number.isSafeInteger(projector.bytes) || projector.bytes < 0)) {
    throw new PlanError("PLAN_BAD_INPUT", `projector.bytes must be a non-negative integer, got ${String(projector.bytes)}`, {
      field: "projector",
    });
  }
  const facts = modelFacts(file, settings.speculative, projector);
  const computed = compute(facts, settings, device, env);
  const capacity = device.capacityBytes;
  const fits = computed.totalBytes <= capacity;
  const largest = computed.classes.filter((c) => c.bytes > 0).slice(0, 3);
  const verdict = fits
    ? `fits with ${formatGiB(capacity - computed.totalBytes)} headroom (needs ${formatGiB(computed.totalBytes)}, ${deviceLabel(device)} has ${formatGiB(capacity)})`
    : `does not fit: needs ${formatGiB(computed.totalBytes)}, ${deviceLabel(device)} has ${formatGiB(capacity)}; largest items: ` +
      largest.map((c) => `${c.label} ${formatGiB(c.bytes)}`).join(", ");
  const notes: string[] = [];
  if (device.kind === "cpu") {
    notes.push(
      "packed weights are memory-mapped views of the GGUF file (file-backed pages shared with the page cache, not anonymous memory): " +
        "they need available memory including reclaimable page cache; twins, KV cache, GDN state and scratch are anonymous memory",
    );
  }
  if (device.kind === "tt" && device.chips > 1)
    notes.push(`${device.name} has ${device.chips} chips: the plan counts their DRAM together, and one trace region per chip`);
  const warnings = [...computed.warnings];
  const trained = facts.plan.config.contextLength;
  if (settings.contextLength > trained) {
    warnings.push({
      code: "CONTEXT_BEYOND_TRAINING",
      message: `context ${settings.contextLength} exceeds the model's context_length ${trained}`,
    });
  }
  return {
    device,
    settings,
    model: facts.summary,
    classes: computed.classes,
    totalBytes: computed.totalBytes,
    capacityBytes: capacity,
    fits,
    headroomBytes: capacity - computed.totalBytes,
    chunkPlane: computed.chunkPlane,
    traceRegion: computed.traceRegion,
    verdict,
    largest,
    suggestions: fits ? [] : suggestions(facts, settings, device, env, computed),
    notes,
    warnings,
  };
}
