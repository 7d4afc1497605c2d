import { checkCpuLoad } from "@keepquant/engine";
import { getArchitecture, readGgufModel } from "@keepquant/gguf";
import { listCachedModels, type CachedModel } from "@keepquant/hub";
import { CliUsageError, defineCommand, toJson, write } from "../command.js";
import { formatBytes } from "../download-progress.js";

interface Row {
  reference: string;
  repo: string;
  file: string;
  quant: string | null;
  size: number;
  shards: number;
  architecture: string | null;
  /** The planner's verdict for this machine (default engine options); null when it cannot plan the file. */
  fits: boolean | null;
  commit: string;
  refs: string[];
  path: string;
}

async function describe(model: CachedModel, env: NodeJS.ProcessEnv): Promise<Row> {
  const first = model.files[0]!;
  let architecture: string | null = null;
  let fits: boolean | null = null;
  try {
    const header = await readGgufModel(first);
    architecture = getArchitecture(header) ?? null;
    fits = (await checkCpuLoad(header, {}, { env })).plan.fits;
  } catch {
    // a file the reader or the planner refuses is listed without them
  }
  const tag = model.quant ?? model.name.slice(model.name.lastIndexOf("/") + 1);
  // the reference that names this snapshot: main needs no @, another branch or tag does, else the commit
  const revision = model.refs.includes("main") ? "" : `@${model.refs[0] ?? model.commit}`;
  return {
    reference: `hf:${model.repo}:${tag}${revision}`,
    repo: model.repo,
    file: model.name,
    quant: model.quant ?? null,
    size: model.size,
    shards: model.files.length,
    architecture,
    fits,
    commit: model.commit,
    refs: model.refs,
    path: first,
  };
}

export const command = defineCommand({
  name: "ls",
  summary: "list the GGUF models in the Hugging Face cache: repository, file, quant, size, architecture, fits this machine",
  usage: "ls [--json]",
  help: ["--json   one JSON document on stdout", "the cache: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub"],
  options: { json: { type: "boolean", default: false } },
  async run(values, positionals, io): Promise<number> {
    if (positionals.length > 0) throw new CliUsageError("ls takes no arguments");
    const listing = await listCachedModels({ env: io.env });
    const rows = await Promise.all(listing.models.map((m) => describe(m, io.env)));
    if (values.json) {
      write(io.stdout, toJson({ cacheDir: listing.cacheDir, models: rows, warnings: listing.warnings }));
      return 0;
    }
    for (const warning of listing.warnings) write(io.stderr, `warning: ${warning}`);
    if (rows.length === 0) {
      write(io.stderr, `no GGUF models in ${listing.cacheDir} (keepquant pull hf:<owner>/<repo>[:<quant>] fetches one)`);
      return 0;
    }
    const table = [
      ["MODEL", "FILE", "QUANT", "SIZE", "ARCH", "FITS"],
      ...rows.map((r) => [
        r.reference,
        r.shards > 1 ? `${r.file} (${r.shards} shards)` : r.file,
        r.quant ?? "-",
        formatBytes(r.size),
        r.architecture ?? "-",
        r.fits === null ? "-" : r.fits ? "yes" : "no",
      ]),
    ];
    const widths = table[0]!.map((_, column) => Math.max(...table.map((row) => row[column]!.length)));
    for (const row of table)
      write(
        io.stdout,
        row
          .map((cell, column) => cell.padEnd(widths[column]!))
          .join("  ")
          .trimEnd(),
      );
    return 0;
  },
});
