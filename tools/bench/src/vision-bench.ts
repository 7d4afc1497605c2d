/**
 * Vision speed, keepquant against llama.cpp's mtmd on the same files and threads: the real 0.8B-shape
 * language model (Q4_K_M, real-shape.ts) with a synthetic projector of the Qwen3.5 vision tower's
 * shape (QWEN35_VISION_SHAPE, projection 1024; matrices Q8_0 or F16 by llama.cpp's quantizer, F16
 * convolution kernels), and two pattern images, 448x448 and 1024x768. Per image: the encode time
 * (image bytes to embeddings) and the time to first token of a one-message chat with the image.
 *
 * The npm build of llama.cpp has no mtmd: pass `--mtmd-cli PATH`, a `llama-mtmd-cli` built from the
 * oracle's release (node-llama-cpp's bundled source, see docs/benchmarks/vision.md). Its own timing lines
 * are read: "mtmd batch encoding done in N ms" (the encode), and its time to first token is taken from
 * the log's timestamp of the encode's start to the end of the process (one token generated: a slight
 * overestimate, the exit included). Without it only keepquant's rows are printed.
 *
 *   pnpm --filter @keepquant/bench bench:vision -- [--mtmd-cli PATH] [--repeat 3] [--threads 2] [--type q8_0|f16]
 */
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Engine } from "@keepquant/engine";
import { QWEN35_VISION_SHAPE } from "@keepquant/gguf";
import { type ProjectorFixtureType, writeParityProjector } from "@keepquant/fixtures/projector";
import sharp from "sharp";
import { ensureRealShape, REPO_ROOT } from "./real-shape.js";

const args = process.argv.slice(2);
const option = (name: string): string | undefined => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const repeat = Number(option("--repeat") ?? 3);
const threads = Number(option("--threads") ?? 2);
const type = (option("--type") ?? "q8_0") as ProjectorFixtureType;
const mtmdCli = option("--mtmd-cli");
const IMAGES = [
  { width: 448, height: 448 },
  { width: 1024, height: 768 },
];
const PROMPT = "Describe the picture.";

const cacheDir = path.join(REPO_ROOT, ".cache", "real-shape");
const log = (line: string) => console.error(line);

function cpuName(): string {
  try {
    return /^Model name:\s*(.*)$/m.exec(execFileSync("lscpu", { encoding: "utf8" }))?.[1]?.trim() ?? os.cpus()[0]?.model ?? "unknown";
  } catch {
    return os.cpus()[0]?.model ?? "unknown";
  }
}

/** A busy RGB pattern (the vision goldens' formula) as PNG bytes. */
async function patternPng(width: number, height: number): Promise<Buffer> {
  const data = Buffer.alloc(width * height * 3);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++)
      for (let c = 0; c < 3; c++) data[(y * width + x) * 3 + c] = (x * 37 + y * 101 + c * 53 + ((x * y) % 17) * 11) & 255;
  return sharp(data, { raw: { width, height, channels: 3 } })
    .png()
    .toBuffer();
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const { Q4_K_M: model } = await ensureRealShape(["Q4_K_M"], log);
const projector = path.join(cacheDir, `mmproj-qwen35-vision-${type}.gguf`);
if (!fs.existsSync(projector)) {
  log(`writing the vision-tower-shape projector (${type}) to ${projector}`);
  const temporary = `${projector}.tmp-${process.pid}`;
  await writeParityProjector(temporary, type, { ...QWEN35_VISION_SHAPE, projectionDim: 1024, seed: 1, name: "bench-qwen35-vision" });
  fs.renameSync(temporary, projector);
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kq-vision-bench-"));
const rows: string[] = [];
try {
  console.log(`${cpuName()}, ${os.cpus().length} logical CPUs, ${threads} threads, projector ${type}, medians of ${repeat}`);
  const engine = await Engine.load(model, { projector, threads, kvType: "f16" });
  try {
    console.log(`keepquant vision provider: ${engine.stats().providers.vision}`);
    for (const { width, height } of IMAGES) {
      const png = await patternPng(width, height);
      const file = path.join(tmp, `pattern-${width}x${height}.png`);
      fs.writeFileSync(file, png);
      const ours = { encode: [] as number[], ttft: [] as number[], tokens: 0 };
      const theirs = { encode: [] as number[], ttft: [] as number[], tokens: 0 };
      await engine.encodeImage(png); // warm: sharp's first load, page cache
      for (let r = 0; r < repeat; r++) {
        const t0 = performance.now();
        const image = await engine.encodeImage(png);
        const t1 = performance.now();
        ours.encode.push(t1 - t0);
        ours.tokens = image.tokens;
        // the synthetic vocabulary has no vision markers: the image sits between the turn's text runs
        const pieces = [engine.tokenize("user\n"), image, engine.tokenize(`${PROMPT}\nassistant\n`)];
        const t2 = performance.now();
        await engine.generateToEnd({ pieces }, { maxTokens: 1, temperature: 0 });
        ours.ttft.push(t1 - t0 + (performance.now() - t2));
        engine.clearPrefixCache();
        if (mtmdCli) {
          const w0 = performance.now();
          const run = spawnSync(
            mtmdCli,
            [
              "-m",
              model,
              "--mmproj",
              projector,
              "--image",
              file,
              "-p",
              PROMPT,
              "-n",
              "1",
              "-t",
              String(threads),
              "--temp",
              "0",
              "-c",
              "4096",
              "--no-warmup",
            ],
            { encoding: "utf8", maxBuffer: 64 * 2 ** 20 },
          );
          const wall = performance.now() - w0;
          const text = `${run.stdout}\n${run.stderr}`;
          // its log lines carry the time since the process started (minutes.seconds.ms.us)
          const start = /(\d+)\.(\d+)\.(\d+)\.\d+ I encoding mtmd batch/.exec(text);
          const encoded = /mtmd batch encoding done in (\d+) ms/.exec(text);
          const tokens = /image_tokens->nx = (\d+)[\s\S]*?image_tokens->ny = (\d+)/.exec(text);
          if (run.status !== 0 || !start || !encoded)
            throw new Error(`llama-mtmd-cli printed no timings (exit ${run.status}):\n${text.slice(-2000)}`);
          theirs.encode.push(Number(encoded[1]));
          // from the start of the image's encode to the process's end (its one token sampled, then exit)
          theirs.ttft.push(wall - (Number(start[1]) * 60_000 + Number(start[2]) * 1000 + Number(start[3])));
          if (tokens) theirs.tokens = Number(tokens[1]) * Number(tokens[2]);
        }
      }
      const e = median(ours.encode);
      const t = median(ours.ttft);
      const line = mtmdCli
        ? `| ${width}x${height} | ${ours.tokens} | ${e.toFixed(0)} | ${median(theirs.encode).toFixed(0)} | ${(median(theirs.encode) / e).toFixed(2)}x | ${t.toFixed(0)} | ${median(theirs.ttft).toFixed(0)} | ${(median(theirs.ttft) / t).toFixed(2)}x |`
        : `| ${width}x${height} | ${ours.tokens} | ${e.toFixed(0)} | - | - | ${t.toFixed(0)} | - | - |`;
      rows.push(line);
      console.log(line);
    }
  } finally {
    engine.dispose();
  }
  console.log("\n| image | tokens | keepquant encode ms | llama.cpp encode ms | ratio | keepquant TTFT ms | llama.cpp TTFT ms | ratio |");
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
  for (const row of rows) console.log(row);
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
