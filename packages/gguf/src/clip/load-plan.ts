import { ClipProjectorError } from "../errors.js";
import { GgmlType, ggmlTypeName } from "../ggml-type.js";
import type { ClipLimits } from "../limits.js";
import type { GgufFile, GgufTensorInfo } from "../types.js";
import { CLIP_KEYS, parseProjector, type ProjectorConfig } from "./config.js";
import {
  describeProjector,
  type ProjectorDescription,
  type ProjectorExpectedTensor,
  type ProjectorTensorKind,
  type ProjectorTensorStage,
} from "./tensors.js";

/** What the projector is checked against: the language model's input width (a Qwen35Config fits). */
export interface ProjectorLanguageModel {
  /** The language model's embedding_length: its input embeddings' width. */
  embeddingLength: number;
  /** Named in the mismatch error when given (e.g. "qwen35"). */
  architecture?: string;
}

/** A tensor of the file that the plan uses or skips. */
export interface ProjectorPlannedTensor extends GgufTensorInfo {
  slot: string;
  kind: ProjectorTensorKind;
  stage: ProjectorTensorStage;
  layer?: number;
  /** Why it is skipped (skipped tensors only). */
  reason?: string;
}

/** A tensor the plan refuses: present but wrong, or required and missing (no `tensor`). */
export interface ProjectorRefusedTensor {
  name: string;
  reason: string;
  /** Expected ggml ne, when the name is known. */
  expectedNe?: number[];
  /** The file's tensor, when present. */
  tensor?: GgufTensorInfo;
}

export interface ProjectorDiagnostic {
  level: "info" | "warning" | "error";
  code: "DEEPSTACK" | "FILE_PIXEL_KEYS_IGNORED" | "REFUSED";
  message: string;
  tensors?: string[];
}

export interface ProjectorLoadPlan {
  config: ProjectorConfig;
  /** The projector as data, with the deepstack blocks the file has. */
  description: ProjectorDescription;
  /** projection_dim * (1 + deepstack mergers): one image token's embedding width. */
  outputWidth: number;
  /** The language model it was checked against, when given. */
  language: ProjectorLanguageModel | undefined;
  used: ProjectorPlannedTensor[];
  /** Tensors present and valid but not read. The qwen3vl_merger layout has none; kept for the plan's shape. */
  skipped: ProjectorPlannedTensor[];
  refused: ProjectorRefusedTensor[];
  diagnostics: ProjectorDiagnostic[];
  usedBytes: number;
  skippedBytes: number;
  /** Bytes of refused tensors that are in the file. */
  refusedBytes: number;
  /** Bytes of every tensor in the file: usedBytes + skippedBytes + refusedBytes. */
  totalBytes: number;
  /** True when nothing is refused. */
  ok: boolean;
}

export interface ProjectorLoadPlanOptions {
  limits?: Readonly<ClipLimits>;
}

const fmt = (ne: readonly number[]): string => `[${ne.join(", ")}]`;
const sameNe = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((v, i) => v === b[i]);

/** The types a tensor kind may be stored in (undefined: any ggml type). */
const KIND_TYPES: Record<ProjectorTensorKind, { types: GgmlType[]; why: string } | undefined> = {
  matmul: undefined,
  conv: { types: [GgmlType.F32, GgmlType.F16], why: "the patch convolution reads F32 or F16 kernels" },
  table: { types: [GgmlType.F32, GgmlType.F16], why: "the position table is resized and added, not multiplied" },
  vector: { types: [GgmlType.F32], why: "norms and biases are added to f32 activations" },
};

/**
 * Throws CLIP_LANGUAGE_MISMATCH unless the projector's output width (mm.2's out features times one plus
 * the deepstack mergers) equals the language model's embedding_length; the message names both numbers.
 */
export function checkProjectorLanguage(description: ProjectorDescription, language: ProjectorLanguageModel): void {
  if (description.outputWidth === language.embeddingLength) return;
  const n = description.deepstackLayers.length;
  const width =
    n > 0
      ? `${description.outputWidth} (mm.2 out features ${description.config.projectionDim} x (1 + ${n} deepstack mergers))`
      : `${description.outputWidth} (mm.2 out features, clip.vision.projection_dim)`;
  throw new ClipProjectorError(
    "CLIP_LANGUAGE_MISMATCH",
    `projector output width ${width} does not match the language model's embedding_length ${language.embeddingLength}` +
      `${language.architecture ? ` (${language.architecture})` : ""}: this mmproj belongs to another model`,
    { field: "mm.2.weight" },
  );
}

/**
 * Accounts for every tensor of a projector file: used, skipped (with reason) or refused (with reason),
 * with byte counts. Throws ClipProjectorError when the file is not a supported projector or its
 * hyperparameters are invalid, and (CLIP_LANGUAGE_MISMATCH) when `language` is given and the widths differ.
 */
export function projectorLoadPlan(
  file: Pick<GgufFile, "metadata" | "tensors">,
  language?: ProjectorLanguageModel,
  options: ProjectorLoadPlanOptions = {},
): ProjectorLoadPlan {
  const config = parseProjector(file, options.limits);
  const refused: ProjectorRefusedTensor[] = [];

  // deepstack blocks: the key's flags, else (as llama.cpp) every block with a v.deepstack.N.fc1.weight
  let deepstack = config.deepstackLayers;
  if (deepstack === undefined) {
    deepstack = [];
    for (const t of file.tensors) {
      const match = /^v\.deepstack\.(\d+)\.fc1\.weight$/.exec(t.name);
      const il = match ? Number(match[1]) : -1;
      if (il >= 0 && il < config.blockCount && !deepstack.includes(il)) deepstack.push(il);
    }
  }
  const description = describeProjector(config, deepstack);
  const expected = new Map<string, ProjectorExpectedTensor>(description.tensors.map((e) => [e.name, e]));
  const seen = new Set<string>();
  const used: ProjectorPlannedTensor[] = [];
  const skipped: ProjectorPlannedTensor[] = [];

  for (const tensor of file.tensors) {
    if (seen.has(tensor.name)) {
      refused.push({ name: tensor.name, reason: "duplicated tensor name (the first one is planned)", tensor });
      continue;
    }
    seen.add(tensor.name);
    const want = expected.get(tensor.name);
    if (!want) {
      refused.push({ name: tensor.name, reason: unknownReason(tensor.name, config), tensor });
      continue;
    }
    if (!sameNe(tensor.ne, want.ne)) {
      refused.push({
        name: tensor.name,
        reason: `wrong shape: ne ${fmt(tensor.ne)}, expected ne ${fmt(want.ne)}`,
        expectedNe: want.ne,
        tensor,
      });
      continue;
    }
    const allowed = KIND_TYPES[want.kind];
    if (allowed && !allowed.types.includes(tensor.type)) {
      refused.push({
        name: tensor.name,
        reason: `must be ${allowed.types.map(ggmlTypeName).join(" or ")} (${allowed.why}), found ${ggmlTypeName(tensor.type)}`,
        expectedNe: want.ne,
        tensor,
      });
      continue;
    }
    used.push({
      ...tensor,
      slot: want.slot,
      kind: want.kind,
      stage: want.stage,
      ...(want.layer !== undefined ? { layer: want.layer } : {}),
    });
  }
  for (const want of description.tensors) {
    if (want.optional || seen.has(want.name)) continue;
    refused.push({ name: want.name, reason: `missing required tensor (expected ne ${fmt(want.ne)})`, expectedNe: want.ne });
  }

  const diagnostics: ProjectorDiagnostic[] = [];
  if (description.deepstackLayers.length > 0) {
    diagnostics.push({
      level: "info",
      code: "DEEPSTACK",
      message:
        `deepstack mergers after blocks ${description.deepstackLayers.join(", ")}: each image token is ${description.outputWidth} wide ` +
        `(projection_dim ${config.projectionDim} x ${1 + description.deepstackLayers.length})`,
    });
  }
  if (config.fileImageMinPixels !== undefined || config.fileImageMaxPixels !== undefined) {
    diagnostics.push({
      level: "info",
      code: "FILE_PIXEL_KEYS_IGNORED",
      message:
        `${CLIP_KEYS.imageMinPixels} / ${CLIP_KEYS.imageMaxPixels} are in the file but llama.cpp's qwen3vl_merger path does not read them: ` +
        `images get ${config.tokenLimits.minTokens} to ${config.tokenLimits.maxTokens} tokens (${config.tokenLimits.minPixels} to ${config.tokenLimits.maxPixels} pixels)`,
    });
  }
  if (refused.length > 0) {
    diagnostics.push({
      level: "error",
      code: "REFUSED",
      message: `${refused.length} projector tensor(s) refused: ${refused
        .slice(0, 8)
        .map((r) => `${r.name}: ${r.reason}`)
        .join("; ")}${refused.length > 8 ? "; ..." : ""}`,
      tensors: refused.map((r) => r.name),
    });
  }

  if (language) checkProjectorLanguage(description, language);
  const usedBytes = used.reduce((a, t) => a + t.byteLength, 0);
  const skippedBytes = skipped.reduce((a, t) => a + t.byteLength, 0);
  const refusedBytes = refused.reduce((a, r) => a + (r.tensor?.byteLength ?? 0), 0);
  return {
    config,
    description,
    outputWidth: description.outputWidth,
    language,
    used,
    skipped,
    refused,
    diagnostics,
    usedBytes,
    skippedBytes,
    refusedBytes,
    totalBytes: file.tensors.reduce((a, t) => a + t.byteLength, 0),
    ok: refused.length === 0,
  };
}

/** Why a tensor name is not part of the layout (said specifically for the near misses). */
function unknownReason(name: string, config: ProjectorConfig): string {
  const block = /^v\.(blk|deepstack)\.(\d+)\./.exec(name);
  if (block && Number(block[2]) >= config.blockCount) {
    return `block ${block[2]} is beyond clip.vision.block_count (${config.blockCount})`;
  }
  if (block?.[1] === "deepstack" && config.deepstackLayers !== undefined) {
    return `block ${block[2]} is not flagged in ${CLIP_KEYS.isDeepstackLayers} (deepstack blocks: ${config.deepstackLayers.join(", ") || "none"})`;
  }
  if (/^v\.blk\.\d+\.ffn_gate\./.test(name)) {
    return "qwen3vl_merger's ViT MLP has no gate (ffn_up -> gelu -> ffn_down): a gated MLP is another projector";
  }
  return `unknown tensor name for ${config.projectorType} (${config.blockCount} blocks, deepstack ${config.deepstackLayers?.join(", ") || "none"})`;
}

/** Throws a ClipProjectorError (code CLIP_PLAN_REFUSED) naming every refused tensor. */
export function assertProjectorLoadable(plan: ProjectorLoadPlan): void {
  if (plan.ok) return;
  const first = plan.refused[0]!;
  throw new ClipProjectorError(
    "CLIP_PLAN_REFUSED",
    `${plan.refused.length} projector tensor(s) refused: ${plan.refused.map((r) => `${r.name}: ${r.reason}`).join("; ")}`,
    { field: first.name, offset: first.tensor?.infoOffset },
  );
}
