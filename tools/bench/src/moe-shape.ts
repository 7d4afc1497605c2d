/**
 * A real-width, reduced-depth Qwen3.5-35B-A3B (`qwen35moe`) file for benchmarks: the real per-layer shapes
 * (hidden 2048, 256 experts of width 512 with 8 used, a 512-wide shared expert, vocabulary 248,320, untied
 * head) with 4 trunk layers (3 Gated DeltaNet + 1 attention, as the real model's first four) and no MTP
 * block: synthetic weights written by our own code, quantized by llama.cpp's own quantizer to Q4_K_M. The
 * file lives in <repo>/.cache/moe-shape/ (git-ignored) and is reused while its sha256 equals the one pinned
 * in moe-shape.json; the ~17.5 GB F32 intermediate is deleted once the quantization exists.
 *
 *   pnpm --filter @keepquant/bench bench:moe-shape     # generate / verify, print the path
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { QWEN35_35B_A3B_SHAPE, writeSynthesizedQwen35, type Qwen35Spec } from "@keepquant/gguf";
import { runOracle } from "@keepquant/oracle";
import { REPO_ROOT, sha256 } from "./real-shape.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const CACHE = path.join(REPO_ROOT, ".cache", "moe-shape");
const PINS = path.join(here, "..", "moe-shape.json");

/** The benchmark's shape: the 35B-A3B per-layer shapes, 4 trunk layers, no MTP block. */
export const MOE_BENCH_SHAPE: Qwen35Spec = { ...QWEN35_35B_A3B_SHAPE, layers: 4, mtp: false, name: "synthetic-qwen35moe-35b-a3b-4l" };

/** The Q4_K_M file's path, generated when missing; `log` gets one line per slow step. */
export async function ensureMoeShape(log: (line: string) => void = () => {}): Promise<string> {
  fs.mkdirSync(CACHE, { recursive: true });
  const file = path.join(CACHE, "qwen35moe-35b-a3b-4l-Q4_K_M.gguf");
  const pin = fs.existsSync(PINS) ? (JSON.parse(fs.readFileSync(PINS, "utf8")) as { bytes: number; sha256: string }) : undefined;
  if (fs.existsSync(file) && pin && fs.statSync(file).size === pin.bytes && sha256(file) === pin.sha256) return file;
  const f32 = path.join(CACHE, "qwen35moe-35b-a3b-4l-F32.gguf");
  if (!fs.existsSync(f32)) {
    log(`writing the synthetic 35B-A3B-shape F32 file with 4 layers (${f32}, ~17.5 GB)`);
    const temporary = `${f32}.tmp-${process.pid}`;
    await writeSynthesizedQwen35(temporary, MOE_BENCH_SHAPE);
    fs.renameSync(temporary, f32);
  }
  log("quantizing to Q4_K_M with llama.cpp's quantizer");
  const temporary = `${file}.tmp-${process.pid}`;
  await runOracle({ kind: "quantize", input: f32, output: temporary, ftype: "Q4_K_M", nthread: 2 }, { timeoutMs: 3_600_000 });
  const digest = sha256(temporary);
  if (pin && pin.sha256 !== digest) {
    fs.rmSync(temporary, { force: true });
    throw new Error(
      `the regenerated file's sha256 ${digest} differs from the pinned ${pin.sha256} (moe-shape.json): the recipe or the quantizer changed`,
    );
  }
  fs.renameSync(temporary, file);
  fs.rmSync(f32, { force: true });
  if (!pin) {
    const recipe =
      "writeSynthesizedQwen35({ ...QWEN35_35B_A3B_SHAPE, layers: 4, mtp: false }) -> llama_model_quantize Q4_K_M (@node-llama-cpp/linux-x64@3.22.1)";
    fs.writeFileSync(
      PINS,
      `${JSON.stringify({ recipe, file: path.basename(file), bytes: fs.statSync(file).size, sha256: digest }, null, 2)}\n`,
    );
    log(`pinned its sha256 in ${PINS}`);
  }
  return file;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  console.log(await ensureMoeShape((line) => console.error(line)));
}
