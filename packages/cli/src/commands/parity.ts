import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import fs from "node:fs";
import path from "node:path";
import { Engine } from "@keepquant/engine";
import {
  PARITY_ENGINE_OPTIONS,
  ParityError,
  engineParityRunner,
  formatParityReport,
  parseGoldens,
  runParityGate,
  type ParityGoldens,
} from "@keepquant/engine/parity";
import { readGgufModel } from "@keepquant/gguf";
import { CliUsageError, defineCommand, toJson, write, type CommandIo } from "../command.js";
import { localModelFile } from "../hub-model.js";
import { isModelNotFound } from "../model-file.js";
import { applyForcedThreads, ENGINE_OPTIONS, ENGINE_OPTIONS_HELP, resolveEngineOptions } from "./engine-options.js";

/** Exit code of a skipped run (the automake convention): the model file is absent. */
export const EXIT_SKIP = 77;

async function sha256File(file: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file, { highWaterMark: 4 * 1024 * 1024 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/**
 * The goldens in `dir` made from this model: matched by the model's sha256; a goldens file named
 * after the model but made from other bytes is an error (the goldens do not apply).
 */
export function findGoldens(dir: string, modelFile: string, sha256: string): ParityGoldens {
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) {
    throw new ParityError("PARITY_GOLDENS_NOT_FOUND", `goldens folder not found: ${dir}`);
  }
  const candidates: ParityGoldens[] = [];
  for (const name of fs.readdirSync(dir).sort()) {
    if (!name.endsWith(".json") || name === "manifest.json") continue;
    const text = fs.readFileSync(path.join(dir, name), "utf8");
    if (!text.includes('"keepquant-parity-goldens/')) continue;
    candidates.push(parseGoldens(text, path.join(dir, name)));
  }
  const bySha = candidates.find((g) => g.modelSha256 === sha256);
  if (bySha) return bySha;
  const stem = path.basename(modelFile).replace(/\.gguf$/i, "");
  const byName = candidates.find((g) => g.fixture === stem);
  if (byName) {
    throw new ParityError(
      "PARITY_FIXTURE_MISMATCH",
      `goldens ${byName.fixture} were made from a file with sha256 ${byName.modelSha256}; ${modelFile} has sha256 ${sha256} (regenerate the fixture: pnpm exec tsx scripts/fixtures/generate.ts)`,
    );
  }
  throw new ParityError(
    "PARITY_GOLDENS_NOT_FOUND",
    `no goldens in ${dir} for ${modelFile} (sha256 ${sha256}; ${candidates.length} goldens files read)`,
  );
}

export const command = defineCommand({
  name: "parity",
  summary: "run the parity gate: our greedy tokens vs llama.cpp's goldens for this model file",
  usage:
    "parity <model.gguf> --goldens <dir> [--numerics llama|bf16] [--threads N [--force]] [--kv-type f16|f32] [--flash-attn on|off] [--logits] [--json]",
  help: [
    "--goldens DIR         folder of goldens files (e.g. goldens/parity); the one made from this file's sha256 is used",
    ...ENGINE_OPTIONS_HELP.filter((line) => !line.startsWith("--kv-type") && !line.startsWith("--flash-attn")),
    "--kv-type TYPE        f16 or f32 (default: the K/V type llama.cpp ran with for the goldens, recorded in them)",
    "--flash-attn on|off   (default: what llama.cpp ran with for the goldens, recorded in them)",
    "--logits              also measure max |our logit - oracle logit| over the stored top-K (slower)",
    "--json                print the report as one JSON document",
    "exit codes: 0 pass, 1 fail or error, 2 usage, 77 model file absent (prints a SKIP line)",
  ],
  options: {
    goldens: { type: "string" },
    ...ENGINE_OPTIONS,
    logits: { type: "boolean" },
    json: { type: "boolean" },
  },
  async run(values, positionals, io: CommandIo): Promise<number> {
    if (positionals.length !== 1) throw new CliUsageError("expected one model file: keepquant parity <model.gguf> --goldens <dir>");
    if (values.goldens === undefined) throw new CliUsageError("--goldens <dir> is required");
    const engineOptions = await resolveEngineOptions(values, io.env);
    const numerics = engineOptions.options.numerics;
    let modelFile = positionals[0]!;
    const json = values.json === true;
    try {
      modelFile = await localModelFile(modelFile, io);
    } catch (error) {
      // only a model that is not there skips; a symlink loop or an unreadable file fails as in every command
      if (!isModelNotFound(error)) throw error;
      write(io.stdout, json ? toJson({ skipped: true, reason: error.message }) : `SKIP: ${error.message}`);
      return EXIT_SKIP;
    }
    await readGgufModel(modelFile); // a non-GGUF file: the same typed error inspect gives
    const goldens = findGoldens(values.goldens, modelFile, await sha256File(modelFile));
    // llama.cpp's knobs default to what it ran with for these goldens
    const recorded = goldens.oracle.settings ?? PARITY_ENGINE_OPTIONS;
    const kvType = values["kv-type"] === undefined ? recorded.kvType : engineOptions.options.kvType;
    const flashAttention = values["flash-attn"] === undefined ? recorded.flashAttention : engineOptions.options.flashAttention;
    await applyForcedThreads(engineOptions);
    const engine = await Engine.load(modelFile, { ...engineOptions.options, kvType, flashAttention });
    try {
      const report = await runParityGate(goldens, engineParityRunner(engine, { withLogits: values.logits === true }), { numerics });
      if (json) {
        write(io.stdout, toJson({ model: modelFile, ...report, providers: engine.stats().providers }));
      } else {
        write(io.stdout, formatParityReport(report));
        for (const p of report.prompts) {
          if (p.status === "strict") continue;
          const gap = `${Math.round((p.gapNats ?? 0) * 1000)}${p.gapIsLowerBound ? "+" : ""} mnats`;
          write(
            io.stdout,
            `  prompt ${p.index}: ${p.status.toUpperCase()} at step ${p.divergedAt}: oracle ${p.oracleToken}, ours ${p.ourToken}, gap ${gap}`,
          );
        }
      }
      return report.passed ? 0 : 1;
    } finally {
      engine.dispose();
    }
  },
});
