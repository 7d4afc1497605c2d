import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import {
  ARCHITECTURES,
  GgufValueType,
  buildLoadPlan,
  CLIP_ARCHITECTURE,
  getArchitecture,
  ggmlTypeName,
  ggufValueTypeName,
  readGgufModel,
  type GgufFile,
  type GgufMetadataEntry,
  type LoadPlan,
  type ProjectorConfig,
  type ProjectorLoadPlan,
  projectorLoadPlan,
  type Qwen35Config,
} from "@keepquant/gguf";
import { CliUsageError, defineCommand, toJson, write, type CommandIo } from "../command.js";
import { describeError } from "../errors.js";
import { localModelFile, readModelHeader } from "../hub-model.js";

/** Arrays longer than this are summarised (length and first items) unless --full. */
const ARRAY_PREVIEW = 16;

interface InspectReport {
  file: string;
  /** Bytes of the file (of every shard together for a split model). */
  fileSize: number;
  /** A split model's shards in order (null for a model in one file); `sha256` with --sha256. */
  shards: { file: string; fileSize: number; tensorCount: number; sha256?: string }[] | null;
  version: number;
  architecture: string | null;
  alignment: number;
  dataOffset: number;
  metadata: Record<string, unknown>;
  hyperparameters: Qwen35Config | null;
  /** qwen35moe: the experts and the bytes of the expert tower (routed expert tensors of the used set) by type. */
  experts: {
    count: number;
    usedPerToken: number;
    expertWidth: number;
    sharedWidth: number;
    towerBytes: number;
    towerBytesByType: Record<string, number>;
  } | null;
  tensorCount: number;
  tensorCountByType: Record<string, number>;
  totalTensorBytes: number;
  /** `offset` is in the file of `shard` (split models only). */
  tensors: { name: string; type: string; ne: number[]; shape: number[]; offset: number; byteLength: number; shard?: number }[];
  plan: {
    speculative: string | null;
    ok: boolean;
    tiedHead: boolean;
    usedBytes: number;
    skippedBytes: number;
    used: { name: string; byteLength: number }[];
    skipped: { name: string; byteLength: number; reason: string }[];
    refused: { name: string; reason: string; expectedNe?: number[] }[];
  } | null;
  /** A vision projector (mmproj, `general.architecture = "clip"`): its hyperparameters, token limits and load plan. */
  projector: {
    config: ProjectorConfig;
    outputWidth: number;
    deepstackLayers: number[];
    plan: {
      ok: boolean;
      usedBytes: number;
      skippedBytes: number;
      refusedBytes: number;
      totalBytes: number;
      used: { name: string; byteLength: number }[];
      skipped: { name: string; byteLength: number; reason: string }[];
      refused: { name: string; reason: string; expectedNe?: number[] }[];
    };
  } | null;
  diagnostics: { level: string; code: string; message: string; tensors?: string[]; bytes?: number }[];
  sha256?: string;
  /** Set when the file cannot be loaded (exit 1): the same code and message as the stderr error line. */
  error?: { code: string; message: string; offset: number | null };
}

function metadataJson(entry: GgufMetadataEntry, full: boolean): unknown {
  if (entry.type !== GgufValueType.ARRAY) return { type: ggufValueTypeName(entry.type), value: entry.value };
  const items = entry.value as ArrayLike<unknown>;
  const list = (n: number) => Array.from({ length: n }, (_, i) => items[i]);
  const itemType = ggufValueTypeName(entry.itemType ?? GgufValueType.ARRAY);
  if (full || items.length <= ARRAY_PREVIEW) return { type: "arr", itemType, length: items.length, value: list(items.length) };
  return { type: "arr", itemType, length: items.length, head: list(ARRAY_PREVIEW), truncated: true };
}

/** Hashes the file; on an interactive terminal shows a percentage on stderr (redrawn in place). */
async function sha256File(path: string, size: number, io: CommandIo): Promise<string> {
  const hash = createHash("sha256");
  let done = 0;
  let shown = -1;
  for await (const chunk of createReadStream(path, { highWaterMark: 4 * 1024 * 1024 })) {
    hash.update(chunk as Buffer);
    done += (chunk as Buffer).length;
    const percent = size > 0 ? Math.floor((100 * done) / size) : 100;
    if (io.interactive && percent !== shown) {
      io.stderr.write(`\rsha256 ${percent}%`);
      shown = percent;
    }
  }
  if (io.interactive) io.stderr.write("\r\x1b[K");
  return hash.digest("hex");
}

function buildReport(
  path: string,
  file: GgufFile,
  plan: LoadPlan | null,
  planError: ReturnType<typeof describeError> | null,
  full: boolean,
  projector: ProjectorLoadPlan | null = null,
): InspectReport {
  const byType: Record<string, number> = {};
  for (const t of file.tensors) byType[ggmlTypeName(t.type)] = (byType[ggmlTypeName(t.type)] ?? 0) + 1;
  const architecture = getArchitecture(file) ?? null;
  const diagnostics: InspectReport["diagnostics"] = (plan ?? projector)?.diagnostics.map((d) => ({ ...d })) ?? [];
  if (!plan && !projector && !planError) {
    diagnostics.push({
      level: "info",
      code: "NO_PLAN",
      message: `no load plan: architecture ${JSON.stringify(architecture)} is not qwen35 or qwen35moe`,
    });
  }
  if (planError) diagnostics.push({ level: "error", code: planError.code, message: planError.message });
  return {
    file: path,
    fileSize: file.fileSize,
    shards: file.shards?.map((s) => ({ file: s.source, fileSize: s.fileSize, tensorCount: s.tensorCount })) ?? null,
    version: file.version,
    architecture,
    alignment: file.alignment,
    dataOffset: file.dataOffset,
    metadata: Object.fromEntries([...file.metadata.values()].map((e) => [e.key, metadataJson(e, full)])),
    hyperparameters: plan?.config ?? null,
    experts: plan?.config.moe ? expertsReport(plan) : null,
    tensorCount: file.tensors.length,
    tensorCountByType: byType,
    totalTensorBytes: file.tensors.reduce((a, t) => a + t.byteLength, 0),
    tensors: file.tensors.map((t) => ({
      name: t.name,
      type: ggmlTypeName(t.type),
      ne: t.ne,
      shape: t.shape,
      offset: t.offset,
      byteLength: t.byteLength,
      ...(t.shard === undefined ? {} : { shard: t.shard }),
    })),
    plan: plan
      ? {
          speculative: plan.speculative ?? null,
          ok: plan.ok,
          tiedHead: plan.tiedHead,
          usedBytes: plan.usedBytes,
          skippedBytes: plan.skippedBytes,
          used: plan.used.map((t) => ({ name: t.name, byteLength: t.byteLength })),
          skipped: plan.skipped.map((t) => ({ name: t.name, byteLength: t.byteLength, reason: t.reason ?? "" })),
          refused: plan.refused.map((r) => ({ name: r.name, reason: r.reason, ...(r.expectedNe ? { expectedNe: r.expectedNe } : {}) })),
        }
      : null,
    projector: projector
      ? {
          config: projector.config,
          outputWidth: projector.outputWidth,
          deepstackLayers: projector.description.deepstackLayers,
          plan: {
            ok: projector.ok,
            usedBytes: projector.usedBytes,
            skippedBytes: projector.skippedBytes,
            refusedBytes: projector.refusedBytes,
            totalBytes: projector.totalBytes,
            used: projector.used.map((t) => ({ name: t.name, byteLength: t.byteLength })),
            skipped: projector.skipped.map((t) => ({ name: t.name, byteLength: t.byteLength, reason: t.reason ?? "" })),
            refused: projector.refused.map((r) => ({
              name: r.name,
              reason: r.reason,
              ...(r.expectedNe ? { expectedNe: r.expectedNe } : {}),
            })),
          },
        }
      : null,
    diagnostics,
  };
}

/** The text lines of a projector: hyperparameters, image-token limits, load plan summary. */
function projectorLines(p: NonNullable<InspectReport["projector"]>): string[] {
  const c = p.config;
  const lines = ["", `vision projector (${c.projectorType})`];
  const hp: [string, string | number][] = [
    [
      "image",
      `${c.imageSize} px, patch ${c.patchSize} (a ${c.positionGrid} x ${c.positionGrid} position grid), merge ${c.spatialMerge} x ${c.spatialMerge}`,
    ],
    ["vit", `${c.blockCount} blocks, width ${c.hiddenSize}, ffn ${c.feedForwardLength} (${c.ffnOp}), ${c.headCount} heads of ${c.headDim}`],
    ["norm eps", f32Text(c.layerNormEps)],
    ["image mean", `[${c.imageMean.map(f32Text).join(", ")}]`],
    ["image std", `[${c.imageStd.map(f32Text).join(", ")}]`],
    ["deepstack", p.deepstackLayers.length > 0 ? `after blocks ${p.deepstackLayers.join(", ")}` : "none"],
    [
      "output",
      `${p.outputWidth} per image token (projection_dim ${c.projectionDim}${p.deepstackLayers.length > 0 ? ` x ${1 + p.deepstackLayers.length}` : ""}): must equal the language model's embedding_length`,
    ],
    [
      "image tokens",
      `${c.tokenLimits.minTokens} .. ${c.tokenLimits.maxTokens} (${c.tokenLimits.pixelsPerToken} pixels per token: ${c.tokenLimits.minPixels} .. ${c.tokenLimits.maxPixels} pixels)`,
    ],
  ];
  if (c.fileImageMinPixels !== undefined || c.fileImageMaxPixels !== undefined)
    hp.push([
      "file pixels",
      `min ${c.fileImageMinPixels ?? "-"}, max ${c.fileImageMaxPixels ?? "-"} (not applied by llama.cpp's qwen3vl path)`,
    ]);
  for (const [k, v] of hp) lines.push(`  ${k.padEnd(14)}${v}`);
  lines.push("", "projector load plan");
  lines.push(`  used        ${p.plan.used.length} tensors, ${bytesText(p.plan.usedBytes)}`);
  lines.push(`  skipped     ${p.plan.skipped.length} tensors, ${bytesText(p.plan.skippedBytes)}`);
  for (const s of p.plan.skipped) lines.push(`    ${s.name}  ${s.byteLength} B: ${s.reason}`);
  lines.push(`  refused     ${p.plan.refused.length} tensors, ${bytesText(p.plan.refusedBytes)}`);
  for (const r of p.plan.refused) lines.push(`    ${r.name}: ${r.reason}`);
  return lines;
}

/** The experts of a qwen35moe plan: counts, widths, and the routed expert tensors' bytes by type. */
function expertsReport(plan: LoadPlan): NonNullable<InspectReport["experts"]> {
  const moe = plan.config.moe!;
  const byType: Record<string, number> = {};
  let towerBytes = 0;
  for (const t of plan.used) {
    if (!t.slot.endsWith("_exps")) continue;
    const type = ggmlTypeName(t.type);
    byType[type] = (byType[type] ?? 0) + t.byteLength;
    towerBytes += t.byteLength;
  }
  return {
    count: moe.expertCount,
    usedPerToken: moe.expertUsedCount,
    expertWidth: moe.expertFeedForwardLength,
    sharedWidth: moe.sharedFeedForwardLength,
    towerBytes,
    towerBytesByType: byType,
  };
}

/** Shortest decimal that reads back as the same f32 (1e-6, not 9.999999974752427e-7). */
const f32Text = (v: number): string => {
  for (let digits = 1; digits <= 9; digits++) {
    const text = v.toPrecision(digits);
    if (Math.fround(Number(text)) === v) return String(Number(text));
  }
  return String(v);
};

const bytesText = (n: number): string => {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${n} B (${v.toFixed(2)} ${units[u]})`;
};

function printText(report: InspectReport, showTensors: boolean, io: CommandIo): void {
  const lines: string[] = [];
  const row = (label: string, value: string | number) => lines.push(`${label.padEnd(14)}${value}`);
  row("file", report.file);
  row("size", bytesText(report.fileSize));
  for (const [i, shard] of (report.shards ?? []).entries()) {
    row(
      i === 0 ? "shards" : "",
      `${i + 1}/${report.shards!.length} ${shard.file} (${bytesText(shard.fileSize)}, ${shard.tensorCount} tensors)`,
    );
  }
  row("version", `GGUF v${report.version}`);
  row("architecture", report.architecture ?? "(none)");
  const name = report.metadata["general.name"] as { value?: unknown } | undefined;
  if (name?.value !== undefined) row("name", String(name.value));
  row("alignment", report.alignment);
  row("data offset", report.dataOffset);
  row("metadata", `${Object.keys(report.metadata).length} keys`);
  const c = report.hyperparameters;
  if (c) {
    lines.push("", `hyperparameters (${c.architecture})`);
    const attention = c.layerKinds.flatMap((k, i) => (k === "attention" ? [i] : []));
    const hp: [string, string | number][] = [
      ["block_count", `${c.blockCount} (trunk ${c.nLayer} + MTP ${c.nextnPredictLayers})`],
      ["layers", `${c.nLayer - attention.length} GDN + ${attention.length} attention (attention at ${attention.join(", ")})`],
      ["embedding", c.embeddingLength],
      ...(c.moe ? [] : ([["ffn", c.feedForwardLength]] as [string, number][])),
      ["heads", `${c.headCount} q / ${c.headCountKv} kv, head_dim ${c.headDim}`],
      ...((c.layerKinds.includes("gdn")
        ? [
            [
              "gdn",
              `Hk ${c.ssmGroupCount}, Hv ${c.ssmTimeStepRank}, state ${c.ssmStateSize}, conv ${c.ssmConvKernel}, conv_dim ${c.convDim}`,
            ],
          ]
        : []) as [string, string][]),
      ["rope", `dims ${c.ropeDimensionCount}, base ${f32Text(c.ropeFreqBase)}, sections [${c.ropeSections.join(", ")}]`],
      ["rms eps", f32Text(c.rmsEps)],
      ["context", c.contextLength],
      ["vocab", c.vocabSize ?? "(no tokenizer)"],
    ];
    for (const [k, v] of hp) lines.push(`  ${k.padEnd(12)}${v}`);
  }
  if (report.projector) lines.push(...projectorLines(report.projector));
  const e = report.experts;
  if (e) {
    lines.push("", "experts");
    lines.push(`  ${"routed".padEnd(12)}${e.count} experts, ${e.usedPerToken} used per token, width ${e.expertWidth}`);
    lines.push(`  ${"shared".padEnd(12)}1 expert, width ${e.sharedWidth}, sigmoid-gated`);
    const types = Object.entries(e.towerBytesByType)
      .map(([t, b]) => `${t} ${bytesText(b)}`)
      .join(", ");
    lines.push(`  ${"tower".padEnd(12)}${bytesText(e.towerBytes)}${types ? ` (${types})` : ""}`);
  }
  lines.push(
    "",
    `tensors       ${report.tensorCount} (${Object.entries(report.tensorCountByType)
      .map(([t, n]) => `${n} ${t}`)
      .join(", ")})`,
  );
  row("tensor bytes", bytesText(report.totalTensorBytes));
  if (showTensors) {
    const width = Math.max(4, ...report.tensors.map((t) => t.name.length));
    lines.push(`  ${"name".padEnd(width)}  ${"type".padEnd(7)}  ${"shape".padEnd(16)}  ${"offset".padStart(12)}  ${"bytes".padStart(12)}`);
    for (const t of report.tensors) {
      lines.push(
        `  ${t.name.padEnd(width)}  ${t.type.padEnd(7)}  ${`[${t.shape.join(", ")}]`.padEnd(16)}  ${String(t.offset).padStart(12)}  ${String(t.byteLength).padStart(12)}`,
      );
    }
  }
  const p = report.plan;
  if (p) {
    lines.push("", `load plan${p.speculative ? ` (speculative ${p.speculative})` : ""}${p.tiedHead ? ", tied head" : ""}`);
    lines.push(`  used        ${p.used.length} tensors, ${bytesText(p.usedBytes)}`);
    lines.push(`  skipped     ${p.skipped.length} tensors, ${bytesText(p.skippedBytes)}`);
    for (const s of p.skipped) lines.push(`    ${s.name}  ${s.byteLength} B`);
    lines.push(`  refused     ${p.refused.length} tensors`);
    for (const r of p.refused) lines.push(`    ${r.name}: ${r.reason}`);
  }
  if (report.diagnostics.length > 0) {
    lines.push("", "diagnostics");
    for (const d of report.diagnostics) lines.push(`  ${d.level}: ${d.code}: ${d.message}`);
  }
  if (report.sha256) lines.push("", `sha256        ${report.sha256}`);
  const hashed = (report.shards ?? []).filter((s) => s.sha256 !== undefined);
  if (hashed.length > 0) lines.push("", ...hashed.map((s, i) => `${(i === 0 ? "sha256" : "").padEnd(14)}${s.sha256}  ${s.file}`));
  write(io.stdout, lines.join("\n"));
}

export const command = defineCommand({
  name: "inspect",
  summary: "show a GGUF file (a model or a vision projector): architecture, hyperparameters, tensor counts and bytes, and the load plan",
  usage: "inspect <file.gguf> [--json] [--tensors] [--sha256] [--mtp] [--full]",
  help: [
    "--json       print one JSON document on stdout",
    "--tensors    list every tensor (name, type, shape, offset, bytes)",
    "--sha256     hash the whole file (each shard of a split model)",
    "--mtp        plan with speculative method mtp (keeps the MTP block)",
    "--full       (--json) print long metadata arrays whole instead of their first 16 items",
  ],
  options: {
    json: { type: "boolean", default: false },
    tensors: { type: "boolean", default: false },
    sha256: { type: "boolean", default: false },
    mtp: { type: "boolean", default: false },
    full: { type: "boolean", default: false },
  },
  async run(values, positionals, io): Promise<number> {
    const [path, ...extra] = positionals;
    if (path === undefined || extra.length > 0) {
      throw new CliUsageError(`inspect takes exactly one file (usage: keepquant inspect <file.gguf> [--json] [--tensors] [--sha256])`);
    }
    // an hf: model that is not cached is read by Range requests; --sha256 needs its bytes, so it is fetched
    const local = values.sha256 ? await localModelFile(path, io) : undefined;
    const file = local === undefined ? await readModelHeader(path, io) : await readGgufModel(local);
    let plan: LoadPlan | null = null;
    let planError: ReturnType<typeof describeError> | null = null;
    let projector: ProjectorLoadPlan | null = null;
    const architecture = getArchitecture(file);
    if (architecture === CLIP_ARCHITECTURE) {
      try {
        projector = projectorLoadPlan(file);
      } catch (error) {
        planError = describeError(error);
      }
    } else if (architecture !== undefined && Object.hasOwn(ARCHITECTURES, architecture)) {
      try {
        plan = buildLoadPlan(file, values.mtp ? { speculative: "mtp" } : {});
      } catch (error) {
        planError = describeError(error);
      }
    }
    const report = buildReport(path, file, plan, planError, values.full === true, projector);
    if (local !== undefined && report.shards) {
      for (const shard of report.shards) shard.sha256 = await sha256File(shard.file, shard.fileSize, io);
    } else if (local !== undefined) report.sha256 = await sha256File(local, file.fileSize, io);
    // A qwen35 file the engine cannot load is a failure: the report is printed (with an `error`
    // object in JSON, so a program reading only stdout sees it), then one error line, exit 1.
    if (planError) {
      report.error = { code: planError.code, message: planError.message, offset: planError.offset };
    } else if (plan && !plan.ok) {
      const message = `${plan.refused.length} tensor(s) refused: ${plan.refused.map((r) => `${r.name}: ${r.reason}`).join("; ")}`;
      report.error = { code: "QWEN35_PLAN_REFUSED", message, offset: null };
    } else if (projector && !projector.ok) {
      const message = `${projector.refused.length} projector tensor(s) refused: ${projector.refused.map((r) => `${r.name}: ${r.reason}`).join("; ")}`;
      report.error = { code: "CLIP_PLAN_REFUSED", message, offset: null };
    }
    if (values.json) write(io.stdout, toJson(report));
    else printText(report, values.tensors === true, io);
    if (report.error) {
      write(io.stderr, `error: ${report.error.code}: ${report.error.message}`);
      return 1;
    }
    return 0;
  },
});
