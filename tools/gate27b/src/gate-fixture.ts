/**
 * A gate's model file, shared by the 27B and 35B-A3B gates: a pooled Qwen3.5 spec written directly in
 * llama.cpp's Q4_K_M type mix by `writeQuantizedQwen35`, cached in a folder named by an environment
 * variable, named by the recipe's hash, with `<file>.sha256` beside it and the first generation's
 * sha256 pinned in the gate's JSON file (a later generation that differs is an error, not a silent new
 * baseline). An interrupted run resumes.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import {
  quantizedQwen35Layout,
  recipeKey,
  sha256File,
  writeQuantizedQwen35,
  type PooledQwen35Spec,
  type WriteProgress,
} from "./quantized-qwen35.js";

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** What names one gate: its file and its run (gate-run.ts). */
export interface GateRecipe {
  /** `27b`: the tool folder (tools/gate27b, its pins gate27b.json), the cache folder (`$KEEPQUANT_GATE27B_DIR`,
   *  else <repo>/.cache/gate-27b), the log prefix (`[gate:27b]`) and the result file (`gate-27b-result.json`). */
  readonly name: string;
  /** `27B`: the SKIP line's name of the gate. */
  readonly title: string;
  readonly spec: PooledQwen35Spec;
  /** The file name before the recipe hash (`qwen35-27b-Q4_K_M`). */
  readonly fileStem: string;
  /** The goldens' fixture name (`qwen35-27b-synthetic`). */
  readonly fixtureName: string;
  /** Free disk asked for before generating the file: the file plus slack. */
  readonly minFreeDiskBytes: number;
  /** Ask the planner on a header-only (sparse) file of the same layout before the file is written. */
  readonly planFromHeaderFirst: boolean;
}

export interface EnsureGateFileOptions {
  readonly log?: (line: string) => void;
  /** Re-hash a cached file against its pin. */
  readonly verify?: boolean;
}

export interface GateFixture {
  readonly recipe: GateRecipe;
  /** The environment variable naming the cache folder (`KEEPQUANT_GATE27B_DIR`). */
  readonly dirVariable: string;
  /** Cache folder: $KEEPQUANT_GATE<NAME>_DIR, else <repo>/.cache/gate-<name>. */
  dir(): string;
  file(spec?: PooledQwen35Spec): string;
  /** Bytes the finished file will have (from its layout; nothing is written). */
  fileSize(spec?: PooledQwen35Spec): number;
  /** The path of the file, generated when missing (or resumed when a partial file exists). */
  ensure(options?: EnsureGateFileOptions): Promise<string>;
}

interface Pins {
  recipe: string;
  file: string;
  bytes: number;
  sha256: string;
}

function readPins(file: string): Pins | undefined {
  return fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, "utf8")) as Pins) : undefined;
}

export function gateFixture(recipe: GateRecipe): GateFixture {
  const pinsName = `gate${recipe.name}.json`;
  const pinsFile = path.join(REPO_ROOT, "tools", `gate${recipe.name}`, pinsName);
  const dirVariable = `KEEPQUANT_GATE${recipe.name.toUpperCase()}_DIR`;
  const dir = (): string => {
    const fromEnv = process.env[dirVariable];
    return fromEnv && fromEnv.trim() !== "" ? path.resolve(fromEnv) : path.join(REPO_ROOT, ".cache", `gate-${recipe.name}`);
  };
  const file = (spec: PooledQwen35Spec = recipe.spec): string =>
    path.join(dir(), `${recipe.fileStem}-${recipeKey(spec).slice(0, 12)}.gguf`);
  const fileSize = (spec: PooledQwen35Spec = recipe.spec): number => quantizedQwen35Layout(spec).fileSize;

  async function ensure(options: EnsureGateFileOptions = {}): Promise<string> {
    const log = options.log ?? (() => {});
    const target = file();
    const key = recipeKey(recipe.spec);
    const pins = readPins(pinsFile);
    const pin = pins && pins.recipe === key ? pins : undefined;
    const sidecar = `${target}.sha256`;
    if (fs.existsSync(target) && fs.existsSync(sidecar)) {
      const recorded = fs.readFileSync(sidecar, "utf8").trim();
      if (pin && recorded !== pin.sha256)
        throw new Error(`${target}: recorded sha256 ${recorded} differs from the pin ${pin.sha256} (${pinsName})`);
      if (options.verify) {
        log(`verifying the sha256 of ${target}`);
        const actual = sha256File(target);
        if (actual !== recorded)
          throw new Error(`${target}: sha256 ${actual} differs from the recorded ${recorded}; delete it to regenerate`);
      }
      return target;
    }
    fs.mkdirSync(path.dirname(target), { recursive: true });
    const started = Date.now();
    let lastLine = 0;
    const onProgress = (p: WriteProgress): void => {
      const now = Date.now();
      if (!p.resumed && now - lastLine < 10_000 && p.tensorsDone < p.tensorCount) return;
      lastLine = now;
      const what = p.resumed ? `resumed at tensor ${p.tensorsDone}` : `tensor ${p.tensorsDone}/${p.tensorCount} (${p.tensor})`;
      log(`${what}: ${(p.bytesDone / 1e9).toFixed(2)} / ${(p.bytesTotal / 1e9).toFixed(2)} GB, ${((now - started) / 1000).toFixed(0)} s`);
    };
    log(`writing ${target} (${(fileSize() / 1e9).toFixed(2)} GB, Q4_K_M mix, recipe ${key.slice(0, 12)})`);
    const { bytes, sha256 } = await writeQuantizedQwen35(target, recipe.spec, { onProgress });
    log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s: ${bytes} bytes, sha256 ${sha256}`);
    if (pin && pin.sha256 !== sha256) {
      fs.rmSync(target, { force: true });
      throw new Error(
        `the regenerated file's sha256 ${sha256} differs from the pinned ${pin.sha256} (${pinsName}): the recipe or the quantizer changed`,
      );
    }
    const temporary = `${sidecar}.tmp`;
    fs.writeFileSync(temporary, `${sha256}\n`);
    fs.renameSync(temporary, sidecar);
    if (!pin) {
      fs.writeFileSync(
        pinsFile,
        `${JSON.stringify({ recipe: key, file: path.basename(target), bytes, sha256 } satisfies Pins, null, 2)}\n`,
      );
      log(`pinned the sha256 in ${pinsFile}`);
    }
    return target;
  }

  return { recipe, dirVariable, dir, file, fileSize, ensure };
}

/** The `fixtures:<name>` command: generate (or verify with `--verify`) the file and print its path. */
export async function runGateFixtureCommand(fixture: GateFixture): Promise<void> {
  const file = await fixture.ensure({
    log: (line) => console.error(`[fixtures:${fixture.recipe.name}] ${line}`),
    verify: process.argv.includes("--verify"),
  });
  console.log(file);
}

/** Whether the module at `url` is the script node was started with. */
export function isMainModule(url: string): boolean {
  return process.argv[1] !== undefined && fileURLToPath(url) === path.resolve(process.argv[1]);
}
