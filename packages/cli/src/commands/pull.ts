import { checkCpuLoad, PlanError, type CpuLoadCheck } from "@keepquant/engine";
import { GgufError } from "@keepquant/gguf";
import { downloadHubModel, filesToFetch, HubError, readHubModelHeader, resolveHubModel, type ResolvedHubModel } from "@keepquant/hub";
import { CliUsageError, defineCommand, toJson, write, type CommandIo } from "../command.js";
import { downloadProgress, formatBytes } from "../download-progress.js";
import { reportError } from "../errors.js";
import { abortableBySigint, explainAbort } from "../hub-model.js";
import { PLAN_DOES_NOT_FIT_EXIT } from "./plan.js";
import { parseIntegerOption } from "./numeric-option.js";

/** Ctrl-C: the exit code of a shell's SIGINT. */
const INTERRUPTED_EXIT = 130;

/** The planner's answer from the model's GGUF header, read by Range requests; undefined when it cannot plan it. */
async function planBeforeDownload(resolved: ResolvedHubModel, io: CommandIo, signal: AbortSignal): Promise<CpuLoadCheck | undefined> {
  try {
    // every shard's header (a split model's tensors are spread over them), from the cache or by Range requests
    return await checkCpuLoad(await readHubModelHeader(resolved, { env: io.env, signal }), {}, { env: io.env });
  } catch (error) {
    if (GgufError.isInstance(error)) return undefined;
    throw error;
  }
}

/** The repository's other models that would fit where this one does not (same overheads, their own weights). */
function fittingAlternatives(resolved: ResolvedHubModel, check: CpuLoadCheck): string[] {
  const modelBytes = resolved.model.files.reduce((sum, f) => sum + f.size, 0);
  const overhead = check.plan.totalBytes - modelBytes;
  return resolved.alternatives
    .filter((a) => a.size + overhead <= check.plan.capacityBytes)
    .sort((a, b) => b.size - a.size)
    .map((a) => `${a.quant ?? a.name} (${formatBytes(a.size)})`);
}

export const command = defineCommand({
  name: "pull",
  summary: "download a model from the Hugging Face Hub into the shared Hugging Face cache (hf:<owner>/<repo>[:<quant>][@<revision>])",
  usage: "pull hf:<owner>/<repo>[:<quant or file>][@<revision>] [--mmproj] [--mtp] [--force] [--json]",
  help: [
    "--mmproj          also download the vision projector (mmproj-*.gguf)",
    "--mtp             also download the separate MTP drafter GGUF",
    "--force           download even when the planner says the model does not fit this machine",
    "--connections N   parallel ranges for a large file (default 4)",
    "--json            one JSON document on stdout",
    "the quant defaults to Q4_K_M; HF_TOKEN, HF_ENDPOINT, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE: docs/USAGE.md",
    "exit codes: 0 done, 3 does not fit (without --force), 130 interrupted (run again to resume), 1 other errors",
  ],
  options: {
    mmproj: { type: "boolean", default: false },
    mtp: { type: "boolean", default: false },
    force: { type: "boolean", default: false },
    connections: { type: "string" },
    json: { type: "boolean", default: false },
  },
  async run(values, positionals, io): Promise<number> {
    if (positionals.length !== 1)
      throw new CliUsageError("pull takes one model reference, e.g. keepquant pull hf:unsloth/Qwen3.5-0.8B-GGUF:Q4_K_M");
    const connections = parseIntegerOption("connections", values.connections, { min: 1, max: 16 });
    const json = values.json === true;
    const say = (line: string): void => {
      if (!json) write(io.stderr, line);
    };
    const progress = downloadProgress(json ? { ...io, interactive: false, stderr: nullStream() } : io);
    try {
      return await abortableBySigint(async (signal) => {
        const resolved = await resolveHubModel(positionals[0]!, { env: io.env, signal, preferCache: false });
        const files = filesToFetch(resolved, { mmproj: values.mmproj, mtp: values.mtp });
        const missing = files.filter((f) => !f.cached);
        const total = files.reduce((sum, f) => sum + f.size, 0);
        say(
          `${resolved.name}: ${resolved.reference.repo}@${resolved.commit.slice(0, 12)} ${resolved.model.name} (${resolved.model.quant ?? "unknown quant"}, ${files.length} file(s), ${formatBytes(total)}${missing.length === 0 ? ", all cached" : ""})`,
        );
        let check: CpuLoadCheck | undefined;
        if (missing.length > 0 || !json) check = await planBeforeDownload(resolved, io, signal);
        if (check === undefined) say("note: the planner cannot plan this model from its header; downloading without a fit check");
        else if (check.plan.fits) say(`plan: ${check.plan.verdict}`);
        else {
          const alternatives = fittingAlternatives(resolved, check);
          const hint = alternatives.length > 0 ? `. Quants of ${resolved.reference.repo} that would fit: ${alternatives.join(", ")}` : "";
          if (!values.force && missing.length > 0) {
            throw new PlanError("PLAN_DOES_NOT_FIT", `${check.explanation}${hint}. Pass --force to download anyway`, { field: "model" });
          }
          say(`warning: PLAN_DOES_NOT_FIT: ${check.explanation}${hint}${missing.length > 0 ? ". Downloading anyway (--force)" : ""}`);
        }
        const paths = await downloadHubModel(resolved, {
          env: io.env,
          signal,
          mmproj: values.mmproj,
          mtp: values.mtp,
          onProgress: progress.onProgress,
          ...(connections === undefined ? {} : { connections }),
        });
        progress.finish();
        if (json) {
          write(
            io.stdout,
            toJson({
              reference: resolved.name,
              repo: resolved.reference.repo,
              commit: resolved.commit,
              model: resolved.model.name,
              quant: resolved.model.quant ?? null,
              files: files.map((f, i) => ({ path: f.path, localPath: paths[i], size: f.size })),
              downloadedBytes: missing.reduce((sum, f) => sum + f.size, 0),
              plan: check ? { fits: check.plan.fits, verdict: check.plan.verdict } : null,
            }),
          );
        } else {
          for (const path of paths) write(io.stdout, path);
        }
        return 0;
      });
    } catch (error) {
      progress.abandon();
      const explained = explainAbort(error);
      const fits = PlanError.isInstance(explained) && explained.code === "PLAN_DOES_NOT_FIT";
      const interrupted = HubError.isInstance(explained) && explained.code === "HUB_ABORTED";
      if (!fits && !interrupted) throw explained;
      reportError(explained, io, json);
      return fits ? PLAN_DOES_NOT_FIT_EXIT : INTERRUPTED_EXIT;
    }
  },
});

function nullStream(): NodeJS.WritableStream {
  return { write: () => true } as unknown as NodeJS.WritableStream;
}
