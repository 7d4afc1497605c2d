/**
 * The 27B gate's model: the real Qwen3.5-27B shape (qwen35.md 13.2) written directly in llama.cpp's
 * Q4_K_M type mix by `writeQuantizedQwen35` (~16.5 GB, no F32 intermediate).
 *
 * Where: $KEEPQUANT_GATE27B_DIR (default <repo>/.cache/gate-27b). The file is named by the recipe's
 * hash (shape, seed, pool size, recipe version); beside it `<file>.sha256` records its sha256. The
 * sha256 of the first generation is pinned in gate27b.json: a later generation that differs is an
 * error (a changed recipe or quantizer), not a silent new baseline. An interrupted run resumes.
 *
 *   pnpm fixtures:27b            # generate (or verify the cached file), print its path
 *   pnpm fixtures:27b --verify   # also re-hash a cached file (about a minute)
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { QWEN35_27B_SHAPE } from "@keepquant/gguf";
import {
  quantizedQwen35Layout,
  recipeKey,
  sha256File,
  writeQuantizedQwen35,
  type PooledQwen35Spec,
  type WriteProgress,
} from "./quantized-qwen35.js";

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(here, "..", "..", "..");
const PINS = path.join(here, "..", "gate27b.json");

/**
 * The gate's model: the 27B shape, seed 27, no MTP block, and calm scales: token embedding std 1
 * and residual gain 0.5, so the residual stream is dominated by the embedding and 64 layers do not
 * amplify last-bit differences (with the synthesizer's default scales, embedding std 3/sqrt(D) and
 * gain 4, a 64-layer model's logits move by up to 0.57 between two implementations that differ in
 * the last bits; with these, 0.05: measured on the 64-layer test shape).
 */
export const GATE_27B_SPEC: PooledQwen35Spec = {
  ...QWEN35_27B_SHAPE,
  seed: 27,
  name: "synthetic-qwen35-27b-q4km",
  residualGain: 0.5,
  embeddingStd: 1,
};

/** Cache folder of the 27B file: $KEEPQUANT_GATE27B_DIR, else <repo>/.cache/gate-27b. */
export function gate27bDir(): string {
  const fromEnv = process.env.KEEPQUANT_GATE27B_DIR;
  return fromEnv && fromEnv.trim() !== "" ? path.resolve(fromEnv) : path.join(REPO_ROOT, ".cache", "gate-27b");
}

export function gate27bFile(spec: PooledQwen35Spec = GATE_27B_SPEC): string {
  return path.join(gate27bDir(), `qwen35-27b-Q4_K_M-${recipeKey(spec).slice(0, 12)}.gguf`);
}

interface Pins {
  recipe: string;
  file: string;
  bytes: number;
  sha256: string;
}

function readPins(): Pins | undefined {
  return fs.existsSync(PINS) ? (JSON.parse(fs.readFileSync(PINS, "utf8")) as Pins) : undefined;
}

/** Bytes the finished file will have (from its layout; nothing is written). */
export function gate27bFileSize(spec: PooledQwen35Spec = GATE_27B_SPEC): number {
  return quantizedQwen35Layout(spec).fileSize;
}

/**
 * The path of the 27B file, generated when missing (or resumed when a partial file exists).
 * `log` gets progress lines; `verify` re-hashes a cached file against its pin.
 */
export async function ensureGate27b(options: { log?: (line: string) => void; verify?: boolean } = {}): Promise<string> {
  const log = options.log ?? (() => {});
  const file = gate27bFile();
  const recipe = recipeKey(GATE_27B_SPEC);
  const pins = readPins();
  const pin = pins && pins.recipe === recipe ? pins : undefined;
  const sidecar = `${file}.sha256`;
  if (fs.existsSync(file) && fs.existsSync(sidecar)) {
    const recorded = fs.readFileSync(sidecar, "utf8").trim();
    if (pin && recorded !== pin.sha256)
      throw new Error(`${file}: recorded sha256 ${recorded} differs from the pin ${pin.sha256} (gate27b.json)`);
    if (options.verify) {
      log(`verifying the sha256 of ${file}`);
      const actual = sha256File(file);
      if (actual !== recorded) throw new Error(`${file}: sha256 ${actual} differs from the recorded ${recorded}; delete it to regenerate`);
    }
    return file;
  }
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const started = Date.now();
  let lastLine = 0;
  const onProgress = (p: WriteProgress): void => {
    const now = Date.now();
    if (!p.resumed && now - lastLine < 10_000 && p.tensorsDone < p.tensorCount) return;
    lastLine = now;
    const seconds = (now - started) / 1000;
    const gb = p.bytesDone / 1e9;
    const what = p.resumed ? `resumed at tensor ${p.tensorsDone}` : `tensor ${p.tensorsDone}/${p.tensorCount} (${p.tensor})`;
    log(`${what}: ${gb.toFixed(2)} / ${(p.bytesTotal / 1e9).toFixed(2)} GB, ${seconds.toFixed(0)} s`);
  };
  log(`writing ${file} (${(gate27bFileSize() / 1e9).toFixed(2)} GB, Q4_K_M mix, recipe ${recipe.slice(0, 12)})`);
  const { bytes, sha256 } = await writeQuantizedQwen35(file, GATE_27B_SPEC, { onProgress });
  log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s: ${bytes} bytes, sha256 ${sha256}`);
  if (pin && pin.sha256 !== sha256) {
    fs.rmSync(file, { force: true });
    throw new Error(
      `the regenerated file's sha256 ${sha256} differs from the pinned ${pin.sha256} (gate27b.json): the recipe or the quantizer changed`,
    );
  }
  const temporary = `${sidecar}.tmp`;
  fs.writeFileSync(temporary, `${sha256}\n`);
  fs.renameSync(temporary, sidecar);
  if (!pin) {
    fs.writeFileSync(PINS, `${JSON.stringify({ recipe, file: path.basename(file), bytes, sha256 } satisfies Pins, null, 2)}\n`);
    log(`pinned the sha256 in ${PINS}`);
  }
  return file;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const file = await ensureGate27b({ log: (line) => console.error(`[fixtures:27b] ${line}`), verify: process.argv.includes("--verify") });
  console.log(file);
}
