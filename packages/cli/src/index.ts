export { runCli } from "./main.js";
export { defineCommand, CliUsageError, toJson, write, type CliCommand, type CommandIo } from "./command.js";
export { COMMANDS, type CommandEntry } from "./commands/index.js";
export { describeError, reportError, type ErrorDocument } from "./errors.js";
