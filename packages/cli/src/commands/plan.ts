import {
  DEVICE_NAMES,
  RESIDENCY_POLICIES,
  formatGiB,
  planResidency,
  resolveDevice,
  type KvType,
  type Numerics,
  type ResidencyPlan,
  type ResidencyPolicy,
} from "@keepquant/engine";
import {
  architectureOf,
  assertProjectorLoadable,
  ggmlTypeName,
  projectorLoadPlan,
  readGgufModel,
  type GgufFile,
  type ProjectorLoadPlan,
} from "@keepquant/gguf";
import { CliUsageError, defineCommand, toJson, write, type CommandIo } from "../command.js";
import { defaultModelInfo, defaultModelPath } from "@keepquant/default-model";
import { readModelHeader } from "../hub-model.js";
import { parseIntegerOption } from "./numeric-option.js";

/** Exit code when the model does not fit (0: fits, 1: bad file or bad arguments). */
export const PLAN_DOES_NOT_FIT_EXIT = 3;

const SIZE_UNITS: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1e3,
  kb: 1e3,
  m: 1e6,
  mb: 1e6,
  g: 1e9,
  gb: 1e9,
  t: 1e12,
  tb: 1e12,
  ki: 2 ** 10,
  kib: 2 ** 10,
  mi: 2 ** 20,
  mib: 2 ** 20,
  gi: 2 ** 30,
  gib: 2 ** 30,
  ti: 2 ** 40,
  tib: 2 ** 40,
};

/** `32GB`, `32G` (decimal, as vendors state memory), `29.8GiB` (binary), `12e9` or plain bytes. */
export function parseByteSize(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = match ? SIZE_UNITS[match[2]!.toLowerCase()] : undefined;
  const bytes = match && unit !== undefined ? Math.floor(Number(match[1]) * unit) : Number.NaN;
  if (!Number.isSafeInteger(bytes) || bytes < 1) {
    throw new CliUsageError(`--memory ${JSON.stringify(text)}: expected a size such as 32GB, 24G, 29.8GiB or 12000000000 (bytes)`);
  }
  return bytes;
}

function choice<T extends string>(name: string, text: string | undefined, allowed: readonly T[]): T | undefined {
  if (text === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(text))
    throw new CliUsageError(`--${name} ${JSON.stringify(text)}: expected ${allowed.join(", ")}`);
  return text as T;
}

/** What `--mmproj` adds: the projector file, its used weight bytes and its output width. */
interface ProjectorSummary {
  file: string;
  bytes: number;
  tensors: number;
  outputWidth: number;
  types: Record<string, number>;
}

function planDocument(file: string, plan: ResidencyPlan, projector?: ProjectorSummary): Record<string, unknown> {
  return {
    file,
    ...(projector ? { projector } : {}),
    model: plan.model,
    device: plan.device,
    settings: plan.settings,
    classes: plan.classes,
    totalBytes: plan.totalBytes,
    capacityBytes: plan.capacityBytes,
    fits: plan.fits,
    headroomBytes: plan.headroomBytes,
    chunkPlane: plan.chunkPlane,
    traceRegion: plan.traceRegion,
    verdict: plan.verdict,
    largest: plan.largest.map((c) => c.id),
    suggestions: plan.suggestions,
    notes: plan.notes,
    warnings: plan.warnings,
  };
}

const gib = (bytes: number): string => (bytes / 1024 ** 3).toFixed(2);

/** The lines above the table: file, model, matrices, device, settings (`policy` unless several are compared). */
function planHeader(file: string, plan: ResidencyPlan, comparing: boolean, projector?: ProjectorSummary): string[] {
  const { model, device, settings } = plan;
  const lines: string[] = [];
  const row = (label: string, value: string) => lines.push(`${label.padEnd(10)}${value}`);
  const types = Object.entries(model.matrixTypes)
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([type, n]) => `${n} ${type}`)
    .join(", ");
  row("file", file);
  row(
    "model",
    `${model.name ?? "qwen35"}: ${model.nLayer} layers (${model.gdnLayers} GDN + ${model.attentionLayers} attention), vocab ${model.vocab}, ` +
      `${model.tiedHead ? "tied" : "untied"} head${model.mtpLayers > 0 ? `, MTP block ${model.mtpUsed ? "kept" : "skipped"}` : ""}`,
  );
  row("matrices", `${types} (${(model.matrixParameters / 1e9).toFixed(2)} B parameters)`);
  if (projector) {
    row(
      "mmproj",
      `${projector.file}: ${projector.tensors} tensors (${typeText(projector.types)}), ${projector.outputWidth}-wide image tokens`,
    );
  }
  row("device", `${device.name}: ${formatGiB(device.capacityBytes)} (${device.source})`);
  const context = settings.kvCacheTokensGiven
    ? `KV ${settings.kvCacheTokens} tokens shared by ${settings.sequences}`
    : `ctx ${settings.contextLength} x ${settings.sequences} sequence${settings.sequences === 1 ? "" : "s"}`;
  row(
    "settings",
    `${context}, KV ${settings.kvType}, ${settings.numerics} numerics${comparing ? "" : `, policy ${settings.policy}`}, batch ${settings.batchTokens} tokens` +
      `${settings.speculative ? `, speculative ${settings.speculative}` : ""}`,
  );
  return lines;
}

function verdictLines(plan: ResidencyPlan, prefix = ""): string[] {
  return [`${prefix}${plan.verdict}`, ...plan.suggestions.map((s) => `  would fit with ${s.message}`)];
}

const typeText = (types: Record<string, number>): string =>
  Object.entries(types)
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([type, n]) => `${n} ${type}`)
    .join(", ");

/** The projector's load plan checked against the model's embedding_length; refused tensors are an error. */
function planProjector(path: string, projectorFile: GgufFile, model: GgufFile): { plan: ProjectorLoadPlan; summary: ProjectorSummary } {
  const config = architectureOf(model).parseConfig(model);
  const plan = projectorLoadPlan(projectorFile, { embeddingLength: config.embeddingLength, architecture: config.architecture });
  assertProjectorLoadable(plan);
  const types: Record<string, number> = {};
  for (const t of plan.used) types[ggmlTypeName(t.type)] = (types[ggmlTypeName(t.type)] ?? 0) + 1;
  return { plan, summary: { file: path, bytes: plan.usedBytes, tensors: plan.used.length, outputWidth: plan.outputWidth, types } };
}

function planTable(file: string, plan: ResidencyPlan, projector?: ProjectorSummary): string {
  const lines = [...planHeader(file, plan, false, projector), ""];
  const width = Math.max("total".length, ...plan.classes.map((c) => c.label.length));
  const numbers = Math.max(6, gib(plan.totalBytes).length);
  lines.push(`  ${"class".padEnd(width)}  ${"GiB".padStart(numbers)}  detail`);
  for (const c of plan.classes) lines.push(`  ${c.label.padEnd(width)}  ${gib(c.bytes).padStart(numbers)}  ${c.detail}`);
  lines.push(`  ${"total".padEnd(width)}  ${gib(plan.totalBytes).padStart(numbers)}`, "");
  for (const note of plan.notes) lines.push(`note: ${note}`);
  lines.push(...verdictLines(plan));
  return lines.join("\n");
}

/** The policies side by side: one GiB column each, classes in the first plan's order, then each verdict. */
function comparisonTable(file: string, plans: ResidencyPlan[], projector?: ProjectorSummary): string {
  const first = plans[0]!;
  const lines = [...planHeader(file, first, true, projector), ""];
  const labels = [...first.classes.map((c) => c.label), "total", "headroom"];
  const width = Math.max("class (GiB)".length, ...labels.map((l) => l.length));
  const columns = plans.map((p) => Math.max(p.settings.policy.length, 6));
  const row = (label: string, cells: string[]) =>
    lines.push(`  ${label.padEnd(width)}${cells.map((c, i) => `  ${c.padStart(columns[i]!)}`).join("")}`);
  row(
    "class (GiB)",
    plans.map((p) => p.settings.policy),
  );
  for (const c of first.classes)
    row(
      c.label,
      plans.map((p) => gib(p.classes.find((k) => k.id === c.id)!.bytes)),
    );
  row(
    "total",
    plans.map((p) => gib(p.totalBytes)),
  );
  row(
    "headroom",
    plans.map((p) => gib(p.headroomBytes)),
  );
  lines.push("");
  for (const note of first.notes) lines.push(`note: ${note}`);
  for (const plan of plans) lines.push(...verdictLines(plan, `${plan.settings.policy}: `));
  return lines.join("\n");
}

export const command = defineCommand({
  name: "plan",
  summary: "plan a qwen35 model's memory on a device from its GGUF header alone (exit 0 fits, 3 does not)",
  usage:
    "plan [model.gguf] [--device cpu|tt-n150|tt-n300|tt-p100a|tt-p150] [--memory SIZE] [--ctx N] [--seqs N] [--kv-type f16|f32] " +
    "[--policy packed|twin-for-all|packed-head-twin|all] [--speculative mtp [--draft-tokens K]] [--mmproj FILE] [--numerics llama|bf16|exact] [--batch-tokens N] [--json]",
  help: [
    "--device NAME       cpu (default: this machine's available memory), tt-n150 (12 GB), tt-n300 (24 GB), tt-p100a (28 GB), tt-p150 (32 GB)",
    "--memory SIZE       plan against SIZE instead (32GB, 24G, 29.8GiB, bytes); without --device: any memory",
    "--ctx N             tokens per sequence (default 4096)",
    "--seqs N            concurrent sequences (default 1)",
    "--kv-type T         f16 (default) or f32 KV cache",
    "--policy P          packed (default), twin-for-all (a bf16 twin of every matrix), packed-head-twin; all: the three side by side",
    "--speculative mtp   keep the MTP drafter block (its weights and KV, a rollback copy of each sequence's GDN state)",
    "--draft-tokens K    drafts per step with --speculative (1 .. 8, default 3): logits rows of a verification step",
    "--numerics MODE     default: bf16 on Tenstorrent devices (the keep-quant contract), llama elsewhere",
    "--batch-tokens N    rows of one forward step, for the activation scratch (default 512)",
    "--mmproj FILE       a vision projector loaded beside the model: its weights are one more class (checked against the model's width)",
    "--json              one JSON document, every class in bytes",
    "exit codes: 0 fits, 3 does not fit, 1 bad file or bad arguments",
  ],
  usageExitCode: 1,
  options: {
    device: { type: "string" },
    memory: { type: "string" },
    ctx: { type: "string" },
    seqs: { type: "string" },
    "kv-type": { type: "string" },
    policy: { type: "string" },
    speculative: { type: "string" },
    "draft-tokens": { type: "string" },
    numerics: { type: "string" },
    "batch-tokens": { type: "string" },
    mmproj: { type: "string" },
    json: { type: "boolean" },
  },
  async run(values, positionals, io: CommandIo): Promise<number> {
    if (positionals.length > 1) throw new CliUsageError(`expected at most one model file, got ${positionals.length}`);
    const device = choice("device", values.device, DEVICE_NAMES);
    const memoryBytes = values.memory === undefined ? undefined : parseByteSize(values.memory);
    const integer = (name: string, text: string | undefined) => parseIntegerOption(name, text, { min: 1 });
    const contextLength = integer("ctx", values.ctx);
    const sequences = integer("seqs", values.seqs);
    const batchTokens = integer("batch-tokens", values["batch-tokens"]);
    const kvType = choice<KvType>("kv-type", values["kv-type"], ["f16", "f32"]);
    const policy = choice<ResidencyPolicy | "all">("policy", values.policy, [...RESIDENCY_POLICIES, "all"]);
    const speculative = choice("speculative", values.speculative, ["mtp"] as const);
    const draftTokens = parseIntegerOption("draft-tokens", values["draft-tokens"], { min: 1, max: 8 });
    if (draftTokens !== undefined && speculative === undefined) throw new CliUsageError("--draft-tokens needs --speculative mtp");
    const numerics = choice<Numerics>("numerics", values.numerics, ["llama", "bf16", "exact"]);

    let modelPath: string;
    let header: GgufFile;
    if (positionals.length === 0) {
      if (!values.json)
        write(
          io.stderr,
          `keepquant: no model given, planning the embedded ${defaultModelInfo().synthetic ? "SYNTHETIC " : ""}qwen35 model (${defaultModelInfo().name})`,
        );
      modelPath = await defaultModelPath();
      header = await readGgufModel(modelPath);
    } else {
      modelPath = positionals[0]!;
      // an hf: model: its cached files, or its header read from the Hub by Range requests (nothing downloaded)
      header = await readModelHeader(modelPath, io);
    }
    let projector: ProjectorSummary | undefined;
    if (values.mmproj !== undefined) {
      const mmprojPath = values.mmproj;
      projector = planProjector(mmprojPath, await readModelHeader(mmprojPath, io), header).summary;
    }
    const target = resolveDevice(device, memoryBytes === undefined ? {} : { memoryBytes });
    const plans = (policy === "all" ? RESIDENCY_POLICIES : [policy ?? "packed"]).map((each) =>
      planResidency(header, {
        device: target,
        env: io.env,
        policy: each,
        ...(contextLength === undefined ? {} : { contextLength }),
        ...(sequences === undefined ? {} : { sequences }),
        ...(batchTokens === undefined ? {} : { batchTokens }),
        ...(kvType === undefined ? {} : { kvType }),
        ...(speculative === undefined ? {} : { speculative }),
        ...(draftTokens === undefined ? {} : { draftTokens }),
        ...(numerics === undefined ? {} : { numerics }),
        ...(projector === undefined
          ? {}
          : {
              projector: {
                bytes: projector.bytes,
                tensors: projector.tensors,
                detail: `${projector.file}: ${projector.tensors} tensors (${typeText(projector.types)})`,
              },
            }),
      }),
    );
    const warnings = new Set(plans.flatMap((p) => p.warnings.map((w) => `warning: ${w.code}: ${w.message}`)));
    for (const warning of warnings) write(io.stderr, warning);
    if (policy === "all") {
      write(
        io.stdout,
        values.json
          ? toJson({ file: modelPath, ...(projector ? { projector } : {}), plans: plans.map((p) => planDocument(modelPath, p, projector)) })
          : comparisonTable(modelPath, plans, projector),
      );
    } else {
      write(io.stdout, values.json ? toJson(planDocument(modelPath, plans[0]!, projector)) : planTable(modelPath, plans[0]!, projector));
    }
    // With several policies: 0 when any of them fits.
    return plans.some((p) => p.fits) ? 0 : PLAN_DOES_NOT_FIT_EXIT;
  },
});
