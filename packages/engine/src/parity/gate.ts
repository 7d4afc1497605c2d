/**
 * The parity gate: compares our greedy tokens with the oracle's goldens, prompt by prompt.
 *
 * Per prompt:
 * - STRICT: all tokens equal the oracle's.
 * - Otherwise let s be the first differing step (the prefix before s is identical, so the oracle's
 *   step-s logits in the goldens are its teacher-forced logits on OUR prefix). The gap is
 *   oracle_logit[oracle_token] - oracle_logit[our_token] at step s, in nats (logits are log-odds, so
 *   the difference of logits is the difference of log-probabilities).
 *   - NEAR-TIE: gap <= NEAR_TIE_NATS (500 mnats): the oracle itself nearly chose our token.
 *   - FORWARD-DIVERGENT: gap > NEAR_TIE_NATS, or our token is outside the stored top-K (the gap is
 *     then at least top1 - topK, reported with `gapIsLowerBound`).
 *
 * Pass rule (`parityRules`): 0 forward-divergent always; in `llama` numerics F32 fixtures must be
 * all STRICT and quantized fixtures at least 14/16 STRICT; `bf16` (and the diagnostic `exact`)
 * numerics only require 0 forward-divergent (they report their own strict / near-tie counts).
 */
import type { ParityGoldens } from "./goldens.js";

/** Largest gap (nats) that still counts as a near tie: 500 mnats. */
export const NEAR_TIE_NATS = 0.5;

export type ParityNumerics = "llama" | "bf16" | "exact";
export type ParityStatus = "strict" | "near-tie" | "forward-divergent";

/** Our side of the comparison: greedy generation from token ids. */
export interface ParityRunner {
  /**
   * `nTokens` greedy tokens (argmax, ties -> lowest id, no stop tokens) after `promptIds`.
   * `logits[s]`, when given, is our full logit vector at step s (used for the logit-difference diagnostic).
   */
  greedy(promptIds: readonly number[], nTokens: number): Promise<{ tokens: number[]; logits?: Float32Array[] }>;
}

export interface ParityPromptResult {
  index: number;
  status: ParityStatus;
  /** First step where our token differs, or undefined when STRICT. */
  divergedAt?: number;
  oracleToken?: number;
  ourToken?: number;
  /** Oracle's gap in nats at the divergence step. */
  gapNats?: number;
  /** True when our token is outside the stored top-K and gapNats is only a lower bound. */
  gapIsLowerBound?: boolean;
  /** max |ours - oracle| over the stored top-K logits of every step up to the divergence (when we return logits). */
  maxLogitDiff?: number;
  tokens: number[];
}

export interface ParityRules {
  minStrict: number;
  maxForwardDivergent: number;
}

export interface ParityReport {
  fixture: string;
  weightType: string;
  numerics: ParityNumerics;
  total: number;
  strict: number;
  nearTie: number;
  forwardDivergent: number;
  /** Largest gap over the non-strict prompts, nats (0 when all STRICT). */
  maxGapNats: number;
  /** Largest |ours - oracle| over stored top-K logits before divergence, when measured. */
  maxLogitDiff?: number;
  rules: ParityRules;
  passed: boolean;
  prompts: ParityPromptResult[];
}

/** The pass rule for a fixture's weight type and our numerics mode. */
export function parityRules(weightType: string, numerics: ParityNumerics, total: number): ParityRules {
  if (numerics !== "llama") return { minStrict: 0, maxForwardDivergent: 0 };
  if (weightType.toUpperCase() === "F32") return { minStrict: total, maxForwardDivergent: 0 };
  return { minStrict: Math.ceil((total * 14) / 16), maxForwardDivergent: 0 };
}

/** Compares one prompt's tokens (and optional logits) with its golden. */
export function comparePrompt(
  golden: ParityGoldens["prompts"][number],
  index: number,
  ours: { tokens: number[]; logits?: Float32Array[] },
): ParityPromptResult {
  const steps = golden.tokens.length;
  let divergedAt: number | undefined;
  for (let s = 0; s < steps; s++) {
    if (ours.tokens[s] !== golden.tokens[s]) {
      divergedAt = s;
      break;
    }
  }
  let maxLogitDiff: number | undefined;
  if (ours.logits) {
    const last = divergedAt ?? steps - 1;
    maxLogitDiff = 0;
    for (let s = 0; s <= last && s < ours.logits.length; s++) {
      const mine = ours.logits[s]!;
      const ids = golden.topIds[s]!;
      const values = golden.topLogits[s]!;
      for (let j = 0; j < ids.length; j++) {
        const diff = Math.abs((mine[ids[j]!] ?? Number.NaN) - values[j]!);
        maxLogitDiff = Number.isNaN(diff) ? Number.POSITIVE_INFINITY : Math.max(maxLogitDiff, diff);
      }
    }
  }
  const base = { index, tokens: ours.tokens.slice(0, steps), ...(maxLogitDiff === undefined ? {} : { maxLogitDiff }) };
  if (divergedAt === undefined) return { ...base, status: "strict" };

  const ids = golden.topIds[divergedAt]!;
  const values = golden.topLogits[divergedAt]!;
  const ourToken = ours.tokens[divergedAt];
  const oracleToken = golden.tokens[divergedAt]!;
  const position = ourToken === undefined ? -1 : ids.indexOf(ourToken);
  const top = values[0]!;
  let gapNats: number;
  let gapIsLowerBound = false;
  if (position >= 0) {
    gapNats = top - values[position]!;
  } else {
    gapNats = top - values[values.length - 1]!;
    gapIsLowerBound = true;
  }
  const status: ParityStatus = !gapIsLowerBound && gapNats <= NEAR_TIE_NATS ? "near-tie" : "forward-divergent";
  return {
    ...base,
    status,
    divergedAt,
    oracleToken,
    ...(ourToken === undefined ? {} : { ourToken }),
    gapNats,
    ...(gapIsLowerBound ? { gapIsLowerBound } : {}),
  };
}

/** Runs every golden prompt through `runner` and applies the pass rule. */
export async function runParityGate(
  goldens: ParityGoldens,
  runner: ParityRunner,
  options: { numerics?: ParityNumerics; weightType?: string } = {},
): Promise<ParityReport> {
  const numerics = options.numerics ?? "llama";
  const weightType = options.weightType ?? goldens.weightType;
  const prompts: ParityPromptResult[] = [];
  for (let i = 0; i < goldens.prompts.length; i++) {
    const golden = goldens.prompts[i]!;
    const ours = await runner.greedy(golden.ids, golden.tokens.length);
    prompts.push(comparePrompt(golden, i, ours));
  }
  return summarize(goldens.fixture, weightType, numerics, prompts);
}

export function summarize(fixture: string, weightType: string, numerics: ParityNumerics, prompts: ParityPromptResult[]): ParityReport {
  const count = (status: ParityStatus): number => prompts.filter((p) => p.status === status).length;
  const strict = count("strict");
  const nearTie = count("near-tie");
  const forwardDivergent = count("forward-divergent");
  const maxGapNats = prompts.reduce((m, p) => Math.max(m, p.gapNats ?? 0), 0);
  const diffs = prompts.flatMap((p) => (p.maxLogitDiff === undefined ? [] : [p.maxLogitDiff]));
  const rules = parityRules(weightType, numerics, prompts.length);
  return {
    fixture,
    weightType,
    numerics,
    total: prompts.length,
    strict,
    nearTie,
    forwardDivergent,
    maxGapNats,
    ...(diffs.length > 0 ? { maxLogitDiff: Math.max(...diffs) } : {}),
    rules,
    passed: forwardDivergent <= rules.maxForwardDivergent && strict >= rules.minStrict,
    prompts,
  };
}

/** One line per fixture: `q4km-tied  llama  STRICT 15/16  NEAR-TIE 1  FORWARD-DIVERGENT 0  max gap 132 mnats  PASS`. */
export function formatParityReport(report: ParityReport): string {
  const gap = `${Math.round(report.maxGapNats * 1000)} mnats`;
  const diff = report.maxLogitDiff === undefined ? "" : `  max |dlogit| ${report.maxLogitDiff.toExponential(2)}`;
  return (
    `${report.fixture}  ${report.weightType}  ${report.numerics}  STRICT ${report.strict}/${report.total}` +
    `  NEAR-TIE ${report.nearTie}  FORWARD-DIVERGENT ${report.forwardDivergent}  max gap ${gap}${diff}` +
    `  ${report.passed ? "PASS" : `FAIL (needs STRICT >= ${report.rules.minStrict}, FORWARD-DIVERGENT <= ${report.rules.maxForwardDivergent})`}`
  );
}

/** The report line plus one line per non-STRICT prompt (step, tokens, gap): what a failing test prints. */
export function describeParityFailures(report: ParityReport): string {
  const lines = report.prompts
    .filter((p) => p.status !== "strict")
    .map(
      (p) =>
        `  prompt ${p.index}: ${p.status} at step ${p.divergedAt} (oracle ${p.oracleToken}, ours ${p.ourToken}, gap ${Math.round((p.gapNats ?? 0) * 1000)} mnats)`,
    );
  return [formatParityReport(report), ...lines].join("\n");
}
