// Install step of @keepquant/tt-native (npm runs it as the package's `install` script).
//
// 1. the prebuilt binary for this platform (prebuilds/<platform>-<arch>/) when it loads here;
// 2. else a build from source with cmake-js, when cmake and a C++ compiler are on the PATH;
// 3. else one note: keepquant runs on its TypeScript/WASM path.
//
// It never fails the install. KEEPQUANT_NATIVE_INSTALL=prebuilt|source|none forces one path.
// In the workspace checkout it does nothing (`pnpm build` builds the addon).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const say = (line) => console.log(`@keepquant/tt-native: ${line}`);
const fallbackNote = (why) =>
  say(
    `${why}: keepquant will run on its TypeScript/WASM path (correct, slower). Install cmake (3.15+) and a C++17 compiler, then \`npm rebuild @keepquant/tt-native\`.`,
  );

/** Loads a binary in a child process (a bad binary must not take this process down); undefined when it loads. */
function loadProblem(binary) {
  const probe = `const m = require(${JSON.stringify(binary)}); if (typeof m.abiVersion !== "function") throw new Error("not the keepquant addon");`;
  const result = spawnSync(process.execPath, ["-e", probe], { encoding: "utf8" });
  if (result.status === 0) return undefined;
  const message = (result.stderr || "").split("\n").find((line) => /Error/.test(line)) ?? `exit code ${result.status}`;
  return message.trim();
}

function onPath(command) {
  return spawnSync(command, ["--version"], { stdio: "ignore" }).status === 0;
}

function buildFromSource() {
  const cmakeJs = createRequire(path.join(root, "package.json")).resolve("cmake-js/bin/cmake-js");
  say("building the addon from source with cmake-js (about a minute) ...");
  const result = spawnSync(process.execPath, [cmakeJs, "build", "--out", "build", "--config", "Release", "--log-level", "warn"], {
    cwd: root,
    stdio: "inherit",
  });
  return result.status === 0 && fs.existsSync(path.join(root, "build", "Release", "keepquant_native.node"));
}

function main() {
  if (fs.existsSync(path.join(root, "tsconfig.json"))) return; // the workspace checkout: `pnpm build` builds it
  const forced = process.env.KEEPQUANT_NATIVE_INSTALL ?? "";
  if (!["", "prebuilt", "source", "none"].includes(forced)) {
    say(`KEEPQUANT_NATIVE_INSTALL=${JSON.stringify(forced)} is not prebuilt, source or none: ignored`);
  }
  if (forced === "none") return fallbackNote("KEEPQUANT_NATIVE_INSTALL=none");
  const target = `${process.platform}-${process.arch}`;
  let why = `no prebuilt binary for ${target}`;
  if (forced !== "source") {
    const prebuilt = path.join(root, "prebuilds", target, "keepquant_native.node");
    if (fs.existsSync(prebuilt)) {
      const problem = loadProblem(prebuilt);
      if (!problem) return; // the prebuilt binary loads: nothing to do
      why = `the prebuilt binary for ${target} does not load here (${problem})`;
    }
    if (forced === "prebuilt") return fallbackNote(why);
  }
  const compiler = process.env.CXX || ["c++", "g++", "clang++"].find(onPath);
  if (!onPath("cmake") || !compiler) return fallbackNote(`${why}, and no ${onPath("cmake") ? "C++ compiler" : "cmake"} to build one`);
  if (!buildFromSource()) fallbackNote(`${why}, and the build from source failed (its output is above)`);
}

try {
  main();
} catch (error) {
  fallbackNote(`install step failed: ${error instanceof Error ? error.message : String(error)}`);
}
