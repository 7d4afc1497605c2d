/**
 * The 35B-A3B gate's model: the real Qwen3.5-35B-A3B shape (`qwen35moe`: 40 layers, hidden 2048, 256
 * experts of width 512 with 8 used, a 512-wide shared expert, vocabulary 248,320) written directly in
 * llama.cpp's Q4_K_M type mix by the 27B gate's `writeQuantizedQwen35` (~21.7 GB): every tensor is
 * streamed from pre-quantized super-block pools, so no F32 or bf16 intermediate is ever written (the
 * F32 file would be ~140 GB).
 *
 * Where: $KEEPQUANT_GATE35B_DIR (default <repo>/.cache/gate-35b). The file is named by the recipe's
 * hash; beside it `<file>.sha256` records its sha256. The sha256 of the first generation is pinned in
 * gate35b.json: a later generation that differs is an error, not a silent new baseline. An
 * interrupted run resumes.
 *
 *   pnpm fixtures:35b            # generate (or verify the cached file), print its path
 *   pnpm fixtures:35b --verify   # also re-hash a cached file
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { QWEN35_35B_A3B_SHAPE } from "@keepquant/gguf";
import {
  quantizedQwen35Layout,
  recipeKey,
  sha256File,
  writeQuantizedQwen35,
  type PooledQwen35Spec,
  type WriteProgress,
} from "../../gate27b/src/quantized-qwen35.js";

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(here, "..", "..", "..");
const PINS = path.join(here, "..", "gate35b.json");

/**
 * The gate's model: the 35B-A3B shape, seed 35, no MTP block, and the 27B gate's calm scales (token
 * embedding std 1, residual gain 0.5 on attn_output / ssm_out / the experts' and shared expert's down
 * projections), so 40 layers do not amplify last-bit differences.
 */
export const GATE_35B_SPEC: PooledQwen35Spec = {
  ...QWEN35_35B_A3B_SHAPE,
  mtp: false,
  seed: 35,
  name: "synthetic-qwen35moe-35b-a3b-q4km",
  residualGain: 0.5,
  embeddingStd: 1,
};

/** Cache folder of the 35B file: $KEEPQUANT_GATE35B_DIR, else <repo>/.cache/gate-35b. */
export function gate35bDir(): string {
  const fromEnv = process.env.KEEPQUANT_GATE35B_DIR;
  return fromEnv && fromEnv.trim() !== "" ? path.resolve(fromEnv) : path.join(REPO_ROOT, ".cache", "gate-35b");
}

export function gate35bFile(spec: PooledQwen35Spec = GATE_35B_SPEC): string {
  return path.join(gate35bDir(), `qwen35moe-35b-a3b-Q4_K_M-${recipeKey(spec).slice(0, 12)}.gguf`);
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
export function gate35bFileSize(spec: PooledQwen35Spec = GATE_35B_SPEC): number {
  return quantizedQwen35Layout(spec).fileSize;
}

/** The path of the 35B file, generated when missing (or resumed); `verify` re-hashes a cached file. */
export async function ensureGate35b(options: { log?: (line: string) => void; verify?: boolean } = {}): Promise<string> {
  const log = options.log ?? (() => {});
  const file = gate35bFile();
  const recipe = recipeKey(GATE_35B_SPEC);
  const pins = readPins();
  const pin = pins && pins.recipe === recipe ? pins : undefined;
  const sidecar = `${file}.sha256`;
  if (fs.existsSync(file) && fs.existsSync(sidecar)) {
    const recorded = fs.readFileSync(sidecar, "utf8").trim();
    if (pin && recorded !== pin.sha256)
      throw new Error(`${file}: recorded sha256 ${recorded} differs from the pin ${pin.sha256} (gate35b.json)`);
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
    const what = p.resumed ? `resumed at tensor ${p.tensorsDone}` : `tensor ${p.tensorsDone}/${p.tensorCount} (${p.tensor})`;
    log(`${what}: ${(p.bytesDone / 1e9).toFixed(2)} / ${(p.bytesTotal / 1e9).toFixed(2)} GB, ${((now - started) / 1000).toFixed(0)} s`);
  };
  log(`writing ${file} (${(gate35bFileSize() / 1e9).toFixed(2)} GB, Q4_K_M mix, recipe ${recipe.slice(0, 12)})`);
  const { bytes, sha256 } = await writeQuantizedQwen35(file, GATE_35B_SPEC, { onProgress });
  log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s: ${bytes} bytes, sha256 ${sha256}`);
  if (pin && pin.sha256 !== sha256) {
    fs.rmSync(file, { force: true });
    throw new Error(
      `the regenerated file's sha256 ${sha256} differs from the pinned ${pin.sha256} (gate35b.json): the recipe or the quantizer changed`,
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
  const file = await ensureGate35b({ log: (line) => console.error(`[fixtures:35b] ${line}`), verify: process.argv.includes("--verify") });
  console.log(file);
}
