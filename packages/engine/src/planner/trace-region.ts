import type { EnvSource } from "@keepquant/quant";
import type { PlanDevice } from "./devices.js";

/** Opts into a fixed trace region on Tenstorrent devices: MiB per chip (a number >= 0). */
export const KEEPQUANT_TT_TRACE_REGION_MB = "KEEPQUANT_TT_TRACE_REGION_MB";

const MiB = 1024 * 1024;

/**
 * Estimated command bytes one program dispatch adds to a captured trace: launch message, kernel
 * config and runtime arguments of the cores it runs on. Calibrated on tt-metal's LLM demos, which
 * reserve 20-30 MB trace regions for decode graphs of about a thousand programs.
 */
export const TRACE_BYTES_PER_PROGRAM = 24 * 1024;

/**
 * The non-matmul programs of one decode step of the captured graph, in model order (qwen35.md);
 * matmuls are counted apart, one program per chunk of the chunk policy.
 */
export const DECODE_STEP_PROGRAMS: Readonly<Record<"step" | "attention" | "gdn" | "moe", readonly string[]>> = Object.freeze({
  step: ["embedding_gather", "output_norm", "argmax"],
  // added per layer of a qwen35moe file (its FFN), besides one SwiGLU per selected expert
  moe: ["router_softmax", "top_k", "weights_normalize", "shared_gate_sigmoid", "expert_weighted_sum"],
  attention: [
    "attn_norm",
    "q_gate_split",
    "q_norm",
    "k_norm",
    "rope_q",
    "rope_k",
    "kv_cache_write",
    "sdpa_decode",
    "sigmoid_gate_mul",
    "residual_add",
    "ffn_norm",
    "swiglu",
    "residual_add",
  ],
  gdn: [
    "attn_norm",
    "conv1d_state_update",
    "silu",
    "l2norm_q",
    "l2norm_k",
    "beta_sigmoid",
    "decay_softplus_exp",
    "delta_rule_step",
    "gated_rms_norm",
    "residual_add",
    "ffn_norm",
    "swiglu",
    "residual_add",
  ],
});

export interface TraceRegion {
  /** `dynamic`: sized from the decode graph; `fixed`: KEEPQUANT_TT_TRACE_REGION_MB; `none`: not a TT device. */
  policy: "dynamic" | "fixed" | "none";
  /** Programs in one captured decode step (the estimate's input). */
  programs: number;
  bytesPerChip: number;
  /** bytesPerChip x chips: what the plan counts. */
  bytes: number;
  detail: string;
}

export interface PlanWarning {
  code: "TRACE_REGION_FALLBACK" | "TRACE_REGION_IGNORED" | "CONTEXT_BEYOND_TRAINING" | "OUTSIDE_CONTRACT";
  message: string;
  /** The environment variable, when one is concerned. */
  variable?: string;
  value?: string;
}

/** A decimal number, optionally signed, with an optional exponent: what "a number" means here. */
const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/**
 * The trace region policy. TT devices: dynamic by default (programs x TRACE_BYTES_PER_PROGRAM,
 * rounded up to a whole MiB, per chip); `KEEPQUANT_TT_TRACE_REGION_MB` opts into a fixed region of
 * that many MiB per chip; a value that is not a number, is negative, or is larger than the device
 * falls back to the dynamic policy with a warning naming the variable and the value. Other devices
 * have no trace region.
 */
export function planTraceRegion(device: PlanDevice, programs: number, env: EnvSource): { region: TraceRegion; warning?: PlanWarning } {
  const raw = env.KEEPQUANT_TT_TRACE_REGION_MB;
  const set = raw !== undefined && raw.trim() !== "";
  if (device.kind !== "tt") {
    const region: TraceRegion = { policy: "none", programs, bytesPerChip: 0, bytes: 0, detail: `no trace region on ${device.name}` };
    if (!set) return { region };
    return {
      region,
      warning: {
        code: "TRACE_REGION_IGNORED",
        message: `${KEEPQUANT_TT_TRACE_REGION_MB}=${JSON.stringify(raw)} is ignored: ${device.name} is not a Tenstorrent device`,
        variable: KEEPQUANT_TT_TRACE_REGION_MB,
        value: raw,
      },
    };
  }
  const dynamicPerChip = Math.ceil((programs * TRACE_BYTES_PER_PROGRAM) / MiB) * MiB;
  const dynamic: TraceRegion = {
    policy: "dynamic",
    programs,
    bytesPerChip: dynamicPerChip,
    bytes: dynamicPerChip * device.chips,
    detail: `dynamic: ${programs} programs per decode step x ${TRACE_BYTES_PER_PROGRAM / 1024} KiB, ${device.chips > 1 ? `${device.chips} chips x ` : ""}${dynamicPerChip / MiB} MiB`,
  };
  if (!set) return { region: dynamic };
  const text = raw.trim();
  const value = NUMBER.test(text) ? Number(text) : Number.NaN;
  let problem: string | undefined;
  if (!Number.isFinite(value)) problem = "it is not a number";
  else if (value < 0) problem = "it is negative";
  else if (Math.ceil(value * MiB) * device.chips > device.capacityBytes) {
    problem = `${device.chips > 1 ? `${device.chips} chips x ` : ""}${text} MiB is larger than the device (${device.name}: ${device.capacityBytes} bytes)`;
  }
  if (problem !== undefined) {
    return {
      region: dynamic,
      warning: {
        code: "TRACE_REGION_FALLBACK",
        message: `${KEEPQUANT_TT_TRACE_REGION_MB}=${JSON.stringify(raw)} is unusable (${problem}); using the dynamic trace region (${dynamicPerChip / MiB} MiB per chip)`,
        variable: KEEPQUANT_TT_TRACE_REGION_MB,
        value: raw,
      },
    };
  }
  const perChip = Math.ceil(value * MiB);
  return {
    region: {
      policy: "fixed",
      programs,
      bytesPerChip: perChip,
      bytes: perChip * device.chips,
      detail: `fixed: ${KEEPQUANT_TT_TRACE_REGION_MB}=${text}${device.chips > 1 ? `, ${device.chips} chips` : ""} (dynamic would be ${dynamicPerChip / MiB} MiB per chip)`,
    },
  };
}
