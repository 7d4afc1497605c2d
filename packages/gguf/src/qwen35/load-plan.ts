import { Qwen35ConfigError } from "../errors.js";
import { GgmlType, ggmlTypeName } from "../ggml-type.js";
import type { GgufFile, GgufTensorInfo } from "../types.js";
import { architectureOf } from "../architectures.js";
import type { Qwen35Config } from "./config.js";
import type { ModelDescription, Qwen35ExpectedTensor, Qwen35TensorRole, Qwen35TensorSlot } from "./tensors.js";

export type SpeculativeMethod = "mtp";

export interface LoadPlanOptions {
  /** Speculative decoding method; "mtp" keeps the MTP drafter block as used. */
  speculative?: SpeculativeMethod;
}

/** A tensor of the file that the plan uses or skips. */
export interface PlannedTensor extends GgufTensorInfo {
  role: Qwen35TensorRole;
  /** What the tensor is, independent of its layer (the engine binds weights by slot). */
  slot: Qwen35TensorSlot;
  layer?: number;
  /** Stored as F32 by rule (the conv kernel): read as an f32 vector, never as a matmul weight. */
  requiresF32?: boolean;
  /** Why it is skipped (skipped tensors only). */
  reason?: string;
}

/** A tensor the plan refuses: present but wrong, or required and missing (no `tensor`). */
export interface RefusedTensor {
  name: string;
  reason: string;
  /** Expected ggml ne, when the name is known. */
  expectedNe?: number[];
  /** The file's tensor, when present. */
  tensor?: GgufTensorInfo;
}

export interface LoadPlanDiagnostic {
  level: "info" | "warning" | "error";
  code: "MTP_SKIPPED" | "MTP_USED" | "MTP_MISSING" | "TIED_HEAD" | "REFUSED";
  message: string;
  tensors?: string[];
  bytes?: number;
}

export interface LoadPlan {
  config: Qwen35Config;
  vocab: number;
  /** The model as data (layers, tensors, named dimensions): what every consumer derives from. */
  description: ModelDescription;
  /** No `output.weight`: the head is `token_embd.weight`. */
  tiedHead: boolean;
  speculative: SpeculativeMethod | undefined;
  used: PlannedTensor[];
  skipped: PlannedTensor[];
  refused: RefusedTensor[];
  diagnostics: LoadPlanDiagnostic[];
  usedBytes: number;
  skippedBytes: number;
  /** True when nothing is refused. */
  ok: boolean;
}

const fmt = (ne: readonly number[]): string => `[${ne.join(", ")}]`;
const sameNe = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((v, i) => v === b[i]);

/**
 * Accounts for every tensor of a qwen35 file: used, skipped (with reason) or refused (with
 * reason). The engine reads exactly the `used` tensors. Throws Qwen35ConfigError when the
 * hyperparameters themselves are invalid.
 */
export function buildLoadPlan(file: Pick<GgufFile, "metadata" | "tensors">, options: LoadPlanOptions = {}): LoadPlan {
  const architecture = architectureOf(file);
  const config = architecture.parseConfig(file);
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const refused: RefusedTensor[] = [];

  // The tokenizer's vocabulary size is authoritative; a token_embd of another height is refused below.
  const embd = byName.get("token_embd.weight");
  const vocab = config.vocabSize ?? (embd?.ne.length === 2 ? embd.ne[1]! : 0);

  const description = architecture.describe(config, vocab);
  const expected: Qwen35ExpectedTensor[] = [...description.global, ...description.layers.flatMap((l) => l.tensors)];
  const expectedByName = new Map<string, Qwen35ExpectedTensor>(expected.map((e) => [e.name, e]));
  const useMtp = options.speculative === "mtp";
  const used: PlannedTensor[] = [];
  const skipped: PlannedTensor[] = [];
  const mtpSkipReason = `MTP drafter block (qwen35.nextn_predict_layers = ${config.nextnPredictLayers}) is not read unless speculative method "mtp" is configured`;

  for (const tensor of file.tensors) {
    const want = expectedByName.get(tensor.name);
    if (!want) {
      refused.push({
        name: tensor.name,
        reason: `unknown tensor name for ${config.architecture} (${config.nLayer} trunk layers, nextn_predict_layers ${config.nextnPredictLayers})`,
        tensor,
      });
      continue;
    }
    if (!sameNe(tensor.ne, want.ne)) {
      // an expert tensor stacks expert_count matrices along its third dimension: say so by name
      const experts = want.dims[2] === "nExpert" && tensor.ne.length === 3 && tensor.ne[2] !== want.ne[2];
      refused.push({
        name: tensor.name,
        reason: `wrong shape: ne ${fmt(tensor.ne)}, expected ne ${fmt(want.ne)}${experts ? ` (its third dimension must be ${config.architecture}.expert_count = ${want.ne[2]}, found ${tensor.ne[2]})` : ""}`,
        expectedNe: want.ne,
        tensor,
      });
      continue;
    }
    if (want.requiresF32 && tensor.type !== GgmlType.F32) {
      refused.push({
        name: tensor.name,
        reason: `must be F32 (llama.cpp's ssm_conv needs 4-byte elements), found ${ggmlTypeName(tensor.type)}`,
        expectedNe: want.ne,
        tensor,
      });
      continue;
    }
    const planned: PlannedTensor = {
      ...tensor,
      role: want.role,
      slot: want.slot,
      ...(want.layer !== undefined ? { layer: want.layer } : {}),
      ...(want.requiresF32 ? { requiresF32: true } : {}),
    };
    if (want.role === "mtp" && !useMtp) skipped.push({ ...planned, reason: mtpSkipReason });
    else used.push(planned);
  }

  const missingMtp: Qwen35ExpectedTensor[] = [];
  for (const want of expected) {
    if (want.optional || byName.has(want.name)) continue;
    // split expert gate/up tensors, or the merged one instead
    if (want.requiredUnless && byName.has(want.name.replace(want.slot, want.requiredUnless))) continue;
    if (want.role === "mtp" && !useMtp) {
      missingMtp.push(want);
      continue;
    }
    refused.push({ name: want.name, reason: `missing required tensor (expected ne ${fmt(want.ne)})`, expectedNe: want.ne });
  }

  const diagnostics: LoadPlanDiagnostic[] = [];
  const tiedHead = !byName.has("output.weight");
  if (tiedHead) {
    diagnostics.push({ level: "info", code: "TIED_HEAD", message: "output.weight is absent: the head is tied to token_embd.weight" });
  }
  const skippedBytes = skipped.reduce((a, t) => a + t.byteLength, 0);
  if (skipped.length > 0) {
    diagnostics.push({
      level: "warning",
      code: "MTP_SKIPPED",
      message:
        `skipping the MTP drafter block blk.${config.nLayer}: ${skipped.length} tensors, ${skippedBytes} bytes not read ` +
        `(set speculative method "mtp" to use them): ${skipped.map((t) => t.name).join(", ")}`,
      tensors: skipped.map((t) => t.name),
      bytes: skippedBytes,
    });
  }
  if (useMtp && config.nextnPredictLayers > 0) {
    const mtp = used.filter((t) => t.role === "mtp");
    diagnostics.push({
      level: "info",
      code: "MTP_USED",
      message: `speculative method "mtp": the MTP drafter block blk.${config.nLayer} is used (${mtp.length} tensors, ${mtp.reduce((a, t) => a + t.byteLength, 0)} bytes)`,
      tensors: mtp.map((t) => t.name),
    });
  }
  if (useMtp && config.nextnPredictLayers === 0) {
    refused.push({
      name: "qwen35.nextn_predict_layers",
      reason: 'speculative method "mtp" needs an MTP block, but the file has nextn_predict_layers = 0',
    });
  }
  if (missingMtp.length > 0) {
    diagnostics.push({
      level: "warning",
      code: "MTP_MISSING",
      message: `the MTP block blk.${config.nLayer} announced by nextn_predict_layers is incomplete; missing: ${missingMtp.map((t) => t.name).join(", ")}`,
      tensors: missingMtp.map((t) => t.name),
    });
  }
  if (refused.length > 0) {
    diagnostics.push({
      level: "error",
      code: "REFUSED",
      message: `${refused.length} tensor(s) refused: ${refused
        .slice(0, 8)
        .map((r) => `${r.name}: ${r.reason}`)
        .join("; ")}${refused.length > 8 ? "; ..." : ""}`,
      tensors: refused.map((r) => r.name),
    });
  }

  return {
    config,
    vocab,
    description,
    tiedHead,
    speculative: options.speculative,
    used,
    skipped,
    refused,
    diagnostics,
    usedBytes: used.reduce((a, t) => a + t.byteLength, 0),
    skippedBytes,
    ok: refused.length === 0,
  };
}

/** Throws a Qwen35ConfigError (code QWEN35_PLAN_REFUSED) naming every refused tensor. */
export function assertLoadable(plan: LoadPlan): void {
  if (plan.ok) return;
  const first = plan.refused[0]!;
  throw new Qwen35ConfigError(
    "QWEN35_PLAN_REFUSED",
    `${plan.refused.length} tensor(s) refused: ${plan.refused.map((r) => `${r.name}: ${r.reason}`).join("; ")}`,
    { field: first.name, offset: first.tensor?.infoOffset },
  );
}
