/**
 * The real Qwen3.5-0.8B shape (qwen35.md 13.1) as GGUF files for benchmarks: synthetic weights
 * written by our own code (deterministic), quantized by llama.cpp's own quantizer to Q4_K_M and
 * Q8_0. Files live in <repo>/.cache/real-shape/ (git-ignored) and are reused while their sha256
 * equals the one pinned in real-shape.json (a changed recipe or quantizer is an error, not a silent
 * new baseline). The 3 GB F32 intermediate is deleted once both quantizations exist.
 *
 *   pnpm --filter @keepquant/bench exec tsx src/real-shape.ts        # generate / verify, print paths
 *   pnpm --filter @keepquant/bench exec tsx src/real-shape.ts --mtp  # the Q4_K_M file with the MTP drafter block
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { QWEN35_0_8B_SHAPE, writeSynthesizedQwen35 } from "@keepquant/gguf";
import { runOracle } from "@keepquant/oracle";

export type RealShapeType = "Q4_K_M" | "Q8_0" | "Q4_K_M-mtp";
/** The files the engine benchmark uses (the `-mtp` variant, with the MTP drafter block, serves the speculative curve). */
export const REAL_SHAPE_TYPES: readonly RealShapeType[] = ["Q4_K_M", "Q8_0"];

/** llama.cpp's ftype of a real-shape file and whether its F32 source carries the MTP block. */
function variantOf(type: RealShapeType): { ftype: "Q4_K_M" | "Q8_0"; mtp: boolean } {
  return type === "Q4_K_M-mtp" ? { ftype: "Q4_K_M", mtp: true } : { ftype: type, mtp: false };
}

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(here, "..", "..", "..");
const CACHE = path.join(REPO_ROOT, ".cache", "real-shape");
const PINS = path.join(here, "..", "real-shape.json");

interface Pins {
  recipe: string;
  files: Partial<Record<RealShapeType, { file: string; bytes: number; sha256: string }>>;
}

/** sha256 of a file, read in 16 MiB pieces. */
export function sha256(file: string): string {
  const hash = createHash("sha256");
  const fd = fs.openSync(file, "r");
  const buffer = Buffer.allocUnsafe(16 * 2 ** 20);
  try {
    for (;;) {
      const n = fs.readSync(fd, buffer, 0, buffer.length, null);
      if (n === 0) break;
      hash.update(buffer.subarray(0, n));
    }
  } finally {
    fs.closeSync(fd);
  }
  return hash.digest("hex");
}

function readPins(): Pins {
  return fs.existsSync(PINS) ? (JSON.parse(fs.readFileSync(PINS, "utf8")) as Pins) : { recipe: "", files: {} };
}

/** Paths of the real-shape files, generated when missing; `log` gets one line per slow step. */
export async function ensureRealShape(
  types: readonly RealShapeType[],
  log: (line: string) => void = () => {},
): Promise<Record<RealShapeType, string>> {
  fs.mkdirSync(CACHE, { recursive: true });
  const pins = readPins();
  const recipe = `writeSynthesizedQwen35(QWEN35_0_8B_SHAPE; "-mtp": { ...QWEN35_0_8B_SHAPE, mtp: true }) -> llama_model_quantize (@node-llama-cpp/linux-x64@3.22.1)`;
  const out = {} as Record<RealShapeType, string>;
  let pinsChanged = false;
  for (const type of types) {
    const { ftype, mtp } = variantOf(type);
    const f32 = path.join(CACHE, mtp ? "qwen35-0.8b-mtp-F32.gguf" : "qwen35-0.8b-F32.gguf");
    const file = path.join(CACHE, `qwen35-0.8b-${type}.gguf`);
    const pin = pins.files[type];
    if (fs.existsSync(file) && pin && fs.statSync(file).size === pin.bytes && sha256(file) === pin.sha256) {
      out[type] = file;
      continue;
    }
    if (!fs.existsSync(f32)) {
      log(`writing the synthetic 0.8B-shape F32 file (${f32}, ~3 GB)`);
      const temporary = `${f32}.tmp-${process.pid}`;
      await writeSynthesizedQwen35(temporary, mtp ? { ...QWEN35_0_8B_SHAPE, mtp: true } : QWEN35_0_8B_SHAPE);
      fs.renameSync(temporary, f32);
    }
    log(`quantizing to ${type} with llama.cpp's quantizer`);
    const temporary = `${file}.tmp-${process.pid}`;
    await runOracle({ kind: "quantize", input: f32, output: temporary, ftype, nthread: 2 }, { timeoutMs: 1_800_000 });
    // the MTP variant's F32 source serves only it
    if (mtp) fs.rmSync(f32, { force: true });
    const digest = sha256(temporary);
    if (pin && pin.sha256 !== digest) {
      fs.rmSync(temporary, { force: true });
      throw new Error(
        `${type}: the regenerated file's sha256 ${digest} differs from the pinned ${pin.sha256} (real-shape.json): the recipe or the quantizer changed`,
      );
    }
    fs.renameSync(temporary, file);
    if (!pin) {
      pins.files[type] = { file: path.basename(file), bytes: fs.statSync(file).size, sha256: digest };
      pinsChanged = true;
    }
    out[type] = file;
  }
  const f32 = path.join(CACHE, "qwen35-0.8b-F32.gguf");
  if (REAL_SHAPE_TYPES.every((t) => fs.existsSync(path.join(CACHE, `qwen35-0.8b-${t}.gguf`))) && fs.existsSync(f32)) fs.rmSync(f32);
  if (pinsChanged) {
    pins.recipe = recipe;
    fs.writeFileSync(PINS, `${JSON.stringify(pins, null, 2)}\n`);
    log(`pinned new sha256 values in ${PINS}`);
  }
  return out;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const types = process.argv.includes("--mtp") ? (["Q4_K_M-mtp"] as const) : REAL_SHAPE_TYPES;
  const files = await ensureRealShape(types, (line) => console.error(line));
  for (const [type, file] of Object.entries(files)) console.log(`${type}\t${file}`);
}
