import type { CliCommand } from "../command.js";

/** A registered command: loaded on demand so `keepquant inspect` never loads the engine. */
export interface CommandEntry {
  name: string;
  summary: string;
  load: () => Promise<CliCommand>;
}

// One line per command.
export const COMMANDS: readonly CommandEntry[] = [
  {
    name: "inspect",
    summary: "show a GGUF file: architecture, hyperparameters, tensors, load plan",
    load: async () => (await import("./inspect.js")).command as CliCommand,
  },
  {
    name: "plan",
    summary: "plan a qwen35 model's memory on a device from its GGUF header alone (exit 0 fits, 3 does not)",
    load: async () => (await import("./plan.js")).command as CliCommand,
  },
  {
    name: "run",
    summary: "generate text with a qwen35 GGUF model (default: the embedded default model)",
    load: async () => (await import("./run.js")).command as CliCommand,
  },
  {
    name: "chat",
    summary: "chat with a qwen35 GGUF model through its chat template (default: the embedded default model)",
    load: async () => (await import("./chat.js")).command as CliCommand,
  },
  {
    name: "bench",
    summary: "measure prefill, decode, time to first token, load time, peak RSS and decode efficiency (like llama-bench)",
    load: async () => (await import("./bench.js")).command as CliCommand,
  },
  {
    name: "serve",
    summary: "serve a model over an OpenAI-compatible HTTP API with metrics and a web chat page",
    load: async () => (await import("./serve.js")).command as CliCommand,
  },
  {
    name: "parity",
    summary: "run the parity gate against llama.cpp goldens (exit 0 pass, 1 fail, 77 skip)",
    load: async () => (await import("./parity.js")).command as CliCommand,
  },
];
