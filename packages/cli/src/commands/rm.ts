import { removeCachedModel } from "@keepquant/hub";
import { CliUsageError, defineCommand, toJson, write } from "../command.js";
import { formatBytes } from "../download-progress.js";

export const command = defineCommand({
  name: "rm",
  summary: "remove a model from the Hugging Face cache (hf:<owner>/<repo>:<quant> one model, hf:<owner>/<repo> the repository)",
  usage: "rm hf:<owner>/<repo>[:<quant or file>][@<revision>] [--json]",
  help: ["--json   one JSON document on stdout", "a blob that another snapshot of the repository still links to is kept"],
  options: { json: { type: "boolean", default: false } },
  async run(values, positionals, io): Promise<number> {
    if (positionals.length !== 1)
      throw new CliUsageError("rm takes one model reference, e.g. keepquant rm hf:unsloth/Qwen3.5-0.8B-GGUF:Q4_K_M");
    const removed = await removeCachedModel(positionals[0]!, { env: io.env });
    if (values.json) write(io.stdout, toJson(removed));
    else {
      for (const path of removed.removed) write(io.stdout, `removed ${path}`);
      write(io.stderr, `freed ${formatBytes(removed.freedBytes)}`);
    }
    return 0;
  },
});
