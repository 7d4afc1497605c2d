import type { CliCommand } from "../command.js";

/** A registered command: loaded on demand so `keepquant inspect` never loads the engine. */
export interface CommandEntry {
  name: string;
  summary: string;
  load: () => Promise<CliCommand>;
}

// One line per command.
export const COMMANDS: readonly CommandEntry[] = [
  { name: "inspect", summary: "show a GGUF file: architecture, hyperparameters, tensors, load plan", load: async () => (await import("./inspect.js")).command as CliCommand },
];
