/**
 * Child-process entry of `runOracle`: reads a job JSON file, runs it against libllama, writes
 * `{ ok, result | error }` to the result file. Usage: node --import tsx llama-worker.ts job.json result.json
 */
import fs from "node:fs";
import { executeJob, LlamaOracleError, type OracleJob } from "./llama.js";

const [jobFile, resultFile] = process.argv.slice(2);
if (!jobFile || !resultFile) {
  process.stderr.write("usage: llama-worker.ts <job.json> <result.json>\n");
  process.exit(2);
}
const job = JSON.parse(fs.readFileSync(jobFile, "utf8")) as OracleJob;
try {
  const result = executeJob(job);
  fs.writeFileSync(resultFile, JSON.stringify({ ok: true, result }));
} catch (error) {
  const code = error instanceof LlamaOracleError ? error.code : "ORACLE_FAILED";
  fs.writeFileSync(resultFile, JSON.stringify({ ok: false, error: { code, message: (error as Error).message } }));
}
