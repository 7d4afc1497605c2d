import type { CliCommand } from "../command.js";

/** A registered command: loaded on demand so `keepquant inspect` never loads the engine. */
export interface CommandEntry {
  name: string;
  summary: string;
  load: () => Promise<CliCommand>;
}

/** What each command does, in the order `keepquant --help` lists them. */
const SUMMARIES = {
  inspect: "show a GGUF file: architecture, hyperparameters, tensors, load plan",
  plan: "plan a qwen35 model's memory on a device from its GGUF header alone (exit 0 fits, 3 does not)",
  run: "generate text with a qwen35 GGUF model (default: the embedded default model)",
  chat: "chat with a qwen35 GGUF model through its chat template (default: the embedded default model)",
  bench: "measure prefill, decode, time to first token, load time, peak RSS and decode efficiency (like llama-bench)",
  serve: "serve a model over HTTP (OpenAI chat completions and Responses, Anthropic Messages), with metrics and a web chat page",
  parity: "run the parity gate against llama.cpp goldens (exit 0 pass, 1 fail, 77 skip)",
  schema: "check JSON Schemas (and instances) against the constraint engine, no model run",
  pull: "download a model from the Hugging Face Hub into the shared Hugging Face cache (hf:<owner>/<repo>[:<quant>])",
  ls: "list the GGUF models in the Hugging Face cache: quant, size, architecture, whether each fits this machine",
  rm: "remove a model (or a whole repository) from the Hugging Face cache",
};

/** Each command's module, imported by a literal path so the bundler splits it out and loads it on demand. */
const MODULES: Record<keyof typeof SUMMARIES, () => Promise<{ command: unknown }>> = {
  inspect: () => import("./inspect.js"),
  plan: () => import("./plan.js"),
  run: () => import("./run.js"),
  chat: () => import("./chat.js"),
  bench: () => import("./bench.js"),
  serve: () => import("./serve.js"),
  parity: () => import("./parity.js"),
  schema: () => import("./schema.js"),
  pull: () => import("./pull.js"),
  ls: () => import("./ls.js"),
  rm: () => import("./rm.js"),
};

export const COMMANDS: readonly CommandEntry[] = (Object.keys(SUMMARIES) as Array<keyof typeof SUMMARIES>).map((name) => ({
  name,
  summary: SUMMARIES[name],
  load: async () => (await MODULES[name]()).command as CliCommand,
}));
