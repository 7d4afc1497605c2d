/**
 * What a user gets from npm: every published package packed with `pnpm pack` (workspace versions
 * replaced), installed with plain npm into an empty folder outside the workspace, and run: an ESM
 * script against @keepquant/engine, the packed `keepquant` binary, every README example, a type
 * check of the .d.ts files as a user compiles them, and the engine without the default model.
 */
import { type ChildProcess, spawn, spawnSync, type SpawnSyncReturns } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const tsc = path.join(repoRoot, "node_modules", "typescript", "bin", "tsc");

interface PublishedPackage {
  name: string;
  version: string;
  dir: string;
}

/** Every non-private package under packages/. */
function publishedPackages(): PublishedPackage[] {
  const root = path.join(repoRoot, "packages");
  return fs
    .readdirSync(root)
    .map((name) => path.join(root, name))
    .filter((dir) => fs.existsSync(path.join(dir, "package.json")))
    .map((dir) => ({
      dir,
      manifest: JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as { name: string; version: string; private?: boolean },
    }))
    .filter(({ manifest }) => manifest.private !== true)
    .map(({ dir, manifest }) => ({ name: manifest.name, version: manifest.version, dir }));
}

/**
 * npm 11 turns on Node's module compile cache (Node >= 22), in the temp folder by default, which this
 * package's run must leave empty; turbo does not pass a NODE_DISABLE_COMPILE_CACHE set outside on to
 * the tests, so every npm and pnpm this test starts gets it here.
 */
const NO_COMPILE_CACHE = { NODE_DISABLE_COMPILE_CACHE: "1" };

/** The environment of a user's shell: none of the variables pnpm sets for the scripts it runs. */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^(npm_|pnpm_|PNPM_|KEEPQUANT_|VITEST|TURBO_)/i.test(key)) env[key] = value;
  }
  return { ...env, CI: "1", ...NO_COMPILE_CACHE, ...extra };
}

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = userEnv()): SpawnSyncReturns<string> {
  return spawnSync(command, args, { cwd, env, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
}

function ok(result: SpawnSyncReturns<string>, what: string): string {
  if (result.status !== 0) throw new Error(`${what} exited ${result.status}:\n${result.stdout}\n${result.stderr}`);
  return result.stdout;
}

const packages = publishedPackages();
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "kq-pack-"));
const tarballs = path.join(scratch, "tarballs");
const app = path.join(scratch, "app");
const installed = (name: string) => path.join(app, "node_modules", ...name.split("/"));
let installOutput = "";

/**
 * A registry for the @keepquant scope that has nothing (404 for every request), in a child process
 * (the test's spawnSync calls block this one). npm looks up the packument of every `^0.1.0` edge
 * between the tarballs even though a tarball of that name is installed at the root; against the real
 * registry those unpublished names cost a request each, and where TLS to the registry fails (the npm
 * binary of Node 22/24 trusts only its bundled CA list, and turbo does not pass NODE_EXTRA_CA_CERTS
 * on) npm retried each with back-off for more than 10 minutes. A 404 is final: no retry, no network.
 */
let emptyRegistry: ChildProcess | undefined;
async function startEmptyRegistry(): Promise<string> {
  const source = `
    const server = require("node:http").createServer((req, res) => {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "not found" }));
    });
    server.listen(0, "127.0.0.1", () => console.log(server.address().port));
    process.stdin.on("end", () => process.exit(0));
    process.stdin.resume();`;
  const child = spawn(process.execPath, ["-e", source], { stdio: ["pipe", "pipe", "inherit"] });
  emptyRegistry = child;
  const port = await new Promise<string>((resolve, reject) => {
    child.stdout!.once("data", (data: Buffer) => resolve(data.toString().trim()));
    child.once("exit", (code) => reject(new Error(`the empty registry exited (${code}) before listening`)));
  });
  return `http://127.0.0.1:${port}/`;
}

beforeAll(async () => {
  const scopeRegistry = await startEmptyRegistry();
  fs.mkdirSync(tarballs);
  fs.mkdirSync(app);
  for (const pkg of packages)
    ok(run("pnpm", ["pack", "--pack-destination", tarballs], pkg.dir, { ...process.env, ...NO_COMPILE_CACHE }), `pnpm pack in ${pkg.dir}`);
  fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "keepquant-user", private: true, type: "module" }));
  const files = fs.readdirSync(tarballs).map((file) => path.join(tarballs, file));
  const install = run(
    "npm",
    [
      "install",
      "--no-audit",
      "--no-fund",
      "--no-package-lock",
      "--prefer-offline",
      "--foreground-scripts",
      `--@keepquant:registry=${scopeRegistry}`,
      ...files,
    ],
    app,
  );
  installOutput = ok(install, "npm install of the tarballs") + install.stderr;
});

afterAll(() => {
  emptyRegistry?.stdin?.end();
  fs.rmSync(scratch, { recursive: true, force: true });
});

/** A PATH with no cmake and no compiler on it. */
function emptyBin(): string {
  const dir = path.join(scratch, "empty-bin");
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

/** Runs an ESM module (as a file in the app folder, so it resolves the installed packages). */
function node(source: string, env?: NodeJS.ProcessEnv): SpawnSyncReturns<string> {
  const file = path.join(app, `script-${Math.random().toString(36).slice(2)}.mjs`);
  fs.writeFileSync(file, source);
  try {
    return run(process.execPath, [file], app, env);
  } finally {
    fs.rmSync(file);
  }
}

/** Whether `version` (e.g. "v22.23.5") satisfies a range of caret terms joined by "||" ("^20.19.0 || ^22.12.0"). */
function satisfiesCarets(version: string, range: string): boolean {
  const [major, minor, patch] = version.replace(/^v/, "").split(".").map(Number) as [number, number, number];
  return range.split("||").some((term) => {
    const match = /^\^(\d+)\.(\d+)\.(\d+)$/.exec(term.trim());
    if (!match) throw new Error(`engines range term "${term.trim()}" is not ^MAJOR.MINOR.PATCH`);
    const [want, wantMinor, wantPatch] = [Number(match[1]), Number(match[2]), Number(match[3])];
    return major === want && (minor > wantMinor || (minor === wantMinor && patch >= wantPatch));
  });
}

describe("the packed packages, installed with npm outside the workspace", () => {
  it("every package says which Node versions are supported (the ones CI tests), and this Node is one", () => {
    const root = JSON.parse(fs.readFileSync(path.join(repoRoot, "package.json"), "utf8")) as { engines: { node: string } };
    // .ci/run's loop: the suite under each of these majors (20 is the default Node of the first run)
    const ci = fs.readFileSync(path.join(repoRoot, ".ci", "run"), "utf8");
    const rerun = /^for v in ([\d ]+); do$/m.exec(ci)?.[1]?.trim().split(/\s+/) ?? [];
    const majors = root.engines.node.split("||").map((term) => /\^(\d+)\./.exec(term)?.[1]);
    expect(majors).toEqual(["20", ...rerun]);
    for (const pkg of packages) {
      const manifest = JSON.parse(fs.readFileSync(path.join(installed(pkg.name), "package.json"), "utf8")) as {
        engines?: { node?: string };
      };
      expect(manifest.engines?.node, pkg.name).toBe(root.engines.node);
    }
    expect(satisfiesCarets(process.version, root.engines.node), `${process.version} in ${root.engines.node}`).toBe(true);
  });

  it("every tarball carries README.md, LICENSE, its entry points and no workspace: ranges", () => {
    expect(packages.map((p) => p.name).sort()).toEqual([
      "@keepquant/ai-sdk",
      "@keepquant/cli",
      "@keepquant/default-model",
      "@keepquant/engine",
      "@keepquant/gguf",
      "@keepquant/hub",
      "@keepquant/quant",
      "@keepquant/server",
      "@keepquant/tt-native",
    ]);
    for (const pkg of packages) {
      const dir = installed(pkg.name);
      for (const file of ["README.md", "LICENSE", "package.json"])
        expect(fs.existsSync(path.join(dir, file)), `${pkg.name} ${file}`).toBe(true);
      const manifest = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as Record<
        string,
        Record<string, string> | string
      >;
      expect(JSON.stringify(manifest), pkg.name).not.toContain("workspace:");
      for (const entry of [manifest.main, manifest.types] as string[])
        expect(fs.existsSync(path.join(dir, entry)), `${pkg.name} ${entry}`).toBe(true);
    }
    expect(
      fs.existsSync(
        path.join(installed("@keepquant/tt-native"), "prebuilds", `${process.platform}-${process.arch}`, "keepquant_native.node"),
      ),
    ).toBe(true);
    expect(fs.existsSync(path.join(installed("@keepquant/tt-native"), "build"))).toBe(false); // the prebuilt binary loaded: nothing was built
    expect(installOutput).not.toContain("TypeScript/WASM path");
  });

  it("an ESM script runs the engine on the embedded default model with the prebuilt native arm", () => {
    const result = node(`
      import { Engine } from "@keepquant/engine";
      import { nativeStatus } from "@keepquant/tt-native";
      const engine = await Engine.loadDefault();
      const out = await engine.generate([1, 2, 3], { maxTokens: 8, ignoreEog: true }).result;
      console.log(JSON.stringify({ tokens: out.tokens, providers: engine.stats().providers, binary: nativeStatus().cpu.binary }));
      engine.dispose();
    `);
    const doc = JSON.parse(ok(result, "engine script")) as { tokens: number[]; providers: Record<string, string>; binary: string };
    expect(doc.tokens).toHaveLength(8);
    expect(Object.values(doc.providers).join(" ")).toMatch(/cpu-native/);
    expect(doc.binary).toBe(
      path.join(
        fs.realpathSync(installed("@keepquant/tt-native")),
        "prebuilds",
        `${process.platform}-${process.arch}`,
        "keepquant_native.node",
      ),
    );

    // the packed CLI binary gives the same greedy tokens on the same default model
    const bin = path.join(app, "node_modules", ".bin", "keepquant");
    expect(ok(run(bin, ["--version"], app), "keepquant --version").trim()).toBe(packages.find((p) => p.name === "@keepquant/cli")!.version);
    const cli = JSON.parse(
      ok(run(bin, ["run", "--prompt-ids", "1,2,3", "--max-tokens", "8", "--ignore-eog", "--json"], app), "keepquant run"),
    ) as {
      tokens: number[];
      synthetic: boolean;
    };
    // the default model's own metadata says whether it is synthetic (the trained one is not)
    const metadata = JSON.parse(fs.readFileSync(path.join(installed("@keepquant/default-model"), "default-model.json"), "utf8")) as {
      synthetic: boolean;
    };
    expect(cli.synthetic).toBe(metadata.synthetic);
    expect(cli.tokens).toEqual(doc.tokens);
  });

  it("every README's JavaScript example runs", () => {
    for (const pkg of packages) {
      const readme = fs.readFileSync(path.join(installed(pkg.name), "README.md"), "utf8");
      const examples = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]!);
      expect(examples.length, `${pkg.name} has a js example`).toBeGreaterThan(0);
      for (const example of examples) {
        expect(example.split("\n").filter((line) => line.trim() !== "").length, `${pkg.name}: the example is short`).toBeLessThanOrEqual(
          12,
        );
        const result = node(example);
        expect(result.status, `${pkg.name} README example:\n${result.stdout}\n${result.stderr}`).toBe(0);
      }
    }
  });

  it("the .d.ts files type-check for a user: strict, without skipLibCheck; only the CLI, the server, the AI SDK provider and the hub need Node's types (their peer dependency)", () => {
    const imports = packages.map((p, i) => `import * as p${i} from "${p.name}";`).join("\n");
    fs.writeFileSync(path.join(app, "all.ts"), `${imports}\nexport const all = [${packages.map((_, i) => `p${i}`).join(", ")}];\n`);
    // the CLI and the HTTP server expose Node's types (streams, http), the AI SDK provider the SDK's (AbortSignal,
    // ReadableStream), the hub fetch's (Request, Response, AbortSignal): they declare @types/node as a peer
    const needsNode = new Set(["@keepquant/cli", "@keepquant/server", "@keepquant/ai-sdk", "@keepquant/hub"]);
    const noNode = packages.filter((p) => !needsNode.has(p.name));
    fs.writeFileSync(
      path.join(app, "no-node.ts"),
      `${noNode.map((p, i) => `import * as q${i} from "${p.name}";`).join("\n")}\nexport const some = [${noNode.map((_, i) => `q${i}`).join(", ")}];\n`,
    );
    const compilerOptions = {
      noEmit: true,
      strict: true,
      skipLibCheck: false,
      module: "nodenext",
      moduleResolution: "nodenext",
      target: "es2022",
    };
    fs.writeFileSync(path.join(app, "tsconfig.all.json"), JSON.stringify({ compilerOptions, files: ["all.ts"] }));
    fs.writeFileSync(
      path.join(app, "tsconfig.no-node.json"),
      JSON.stringify({ compilerOptions: { ...compilerOptions, types: [], lib: ["es2022"] }, files: ["no-node.ts"] }),
    );
    ok(run(process.execPath, [tsc, "-p", "tsconfig.all.json"], app), "tsc all.ts");
    ok(run(process.execPath, [tsc, "-p", "tsconfig.no-node.json"], app), "tsc no-node.ts without @types/node");
  });

  it("the engine works without @keepquant/default-model: loadDefault says what to install, load(path) runs", () => {
    const moved = path.join(scratch, "default-model-moved");
    fs.renameSync(installed("@keepquant/default-model"), moved);
    try {
      const result = node(`
        import { Engine, EngineError } from "@keepquant/engine";
        import { QWEN35_TEST_SHAPE, synthesizeQwen35 } from "@keepquant/gguf";
        import fs from "node:fs";
        let code;
        try { await Engine.loadDefault(); } catch (error) { code = EngineError.isInstance(error) ? error.code + ": " + error.message : String(error); }
        fs.writeFileSync("small.gguf", synthesizeQwen35(QWEN35_TEST_SHAPE));
        const engine = await Engine.load("small.gguf");
        const out = await engine.generate([1, 2], { maxTokens: 2, ignoreEog: true }).result;
        engine.dispose();
        fs.rmSync("small.gguf");
        console.log(JSON.stringify({ code, tokens: out.tokens.length }));
      `);
      const doc = JSON.parse(ok(result, "engine without the default model")) as { code: string; tokens: number };
      expect(doc.code).toMatch(
        /^ENGINE_NO_DEFAULT_MODEL: the default model needs the package @keepquant\/default-model \(it is not installed\): npm install @keepquant\/default-model/,
      );
      expect(doc.tokens).toBe(2);
    } finally {
      fs.renameSync(moved, installed("@keepquant/default-model"));
    }
  });

  it("the install step: one note and the TypeScript/WASM path when there is no usable binary and nothing to build with", () => {
    const script = path.join(installed("@keepquant/tt-native"), "scripts", "install.mjs");
    const none = ok(run(process.execPath, [script], app, userEnv({ KEEPQUANT_NATIVE_INSTALL: "none" })), "install.mjs none");
    expect(none.trim().split("\n")).toEqual([
      expect.stringMatching(/^@keepquant\/tt-native: KEEPQUANT_NATIVE_INSTALL=none: keepquant will run on its TypeScript\/WASM path/),
    ]);
    // no prebuilt wanted and no cmake on the PATH: the same single note, naming what is missing
    const bare = ok(
      run(process.execPath, [script], app, userEnv({ KEEPQUANT_NATIVE_INSTALL: "source", PATH: emptyBin() })),
      "install.mjs source",
    );
    expect(bare.trim().split("\n")).toEqual([
      expect.stringMatching(/no prebuilt binary for linux-x64, and no cmake to build one: keepquant will run on its TypeScript\/WASM path/),
    ]);
    // and the engine without a binary runs the TypeScript reference, saying so once
    const result = node(
      `import { Engine } from "@keepquant/engine";
       const engine = await Engine.loadDefault();
       const out = await engine.generate([1, 2, 3], { maxTokens: 2, ignoreEog: true }).result;
       console.log(JSON.stringify({ n: out.tokens.length, diagnostics: engine.stats().diagnostics, providers: engine.stats().providers }));
       engine.dispose();`,
      userEnv({ KEEPQUANT_NATIVE_BINARY: path.join(scratch, "absent.node") }),
    );
    const doc = JSON.parse(ok(result, "engine without a native binary")) as {
      n: number;
      diagnostics: string[];
      providers: Record<string, string>;
    };
    expect(doc.n).toBe(2);
    expect(doc.diagnostics.filter((d) => d.startsWith("native CPU provider unavailable"))).toHaveLength(1);
    expect(Object.values(doc.providers).join(" ")).not.toMatch(/cpu-native/);
  });
});

describe("publishing", () => {
  it("pnpm publish -r --dry-run publishes every package", () => {
    const result = run("pnpm", ["publish", "-r", "--dry-run", "--no-git-checks"], repoRoot, { ...process.env, ...NO_COMPILE_CACHE });
    const output = ok(result, "pnpm publish -r --dry-run") + result.stderr;
    for (const pkg of packages) expect(output, pkg.name).toContain(`${pkg.name}@${pkg.version}`);
  });
});
