/**
 * What the MaskBench benches share: where the data lives (outside the project, in ../shared/data/maskbench) and
 * how they read a positive whole number from the environment.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(here, "..", "..", "..");
export const MASKBENCH_DATA = path.resolve(REPO_ROOT, "..", "shared", "data", "maskbench", "maskbench.jsonl.gz");

/** The environment variable `name` as a positive integer, `fallback` when unset or empty; anything else throws. */
export function positiveInteger(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined || text === "") return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(text)}`);
  return value;
}
