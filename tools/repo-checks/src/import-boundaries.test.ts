import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { importBoundaryViolations } from "./import-boundaries.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const describeViolation = (v: { file: string; line: number; specifier: string; rule: string }): string =>
  `${v.file}:${v.line} imports ${v.specifier}: ${v.rule}`;

describe("import boundaries (the harness out of the product)", () => {
  it("no non-test file under packages/*/src imports the oracle or a testing export, nor any other under packages/* the oracle; tools/ and scripts/ never import packages/*/src", () => {
    expect(importBoundaryViolations(repoRoot).map(describeViolation)).toEqual([]);
  });

  it("the scanner flags each forbidden form and passes the allowed ones", () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), "kq-imports-"));
    const write = (file: string, text: string): void => {
      fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
      fs.writeFileSync(path.join(root, file), text);
    };
    write(
      "packages/engine/src/a.ts",
      [
        'import { runOracle } from "@keepquant/oracle";',
        'import { mulberry32 } from "@keepquant/quant/testing";',
        'const g = await import("@keepquant/goldens");',
        'export { oracleQuantize } from "@keepquant/fixtures/oracle";',
        '// import { x } from "@keepquant/oracle"; (a comment is not an import)',
        'import { Engine } from "./engine.js";',
        'import { readGguf } from "@keepquant/gguf";',
      ].join("\n"),
    );
    write(
      "packages/engine/src/a.test.ts",
      'import { runOracle } from "@keepquant/oracle";\nimport { x } from "@keepquant/quant/testing";\n',
    );
    // outside src: bench/, scripts/ and the like may use a testing export, never the oracle; tests, node_modules and dist are not scanned
    write(
      "packages/quant/bench/dequantize.ts",
      'import { F16_SCALE_FIELDS } from "@keepquant/quant/testing";\nimport { loadGgmlOracle } from "@keepquant/oracle";\n',
    );
    write("packages/tt-native/scripts/gen.mjs", 'const { goldens } = await import("@keepquant/goldens");\n');
    write("packages/quant/bench/dequantize.test.ts", 'import { loadGgmlOracle } from "@keepquant/oracle";\n');
    write("packages/quant/node_modules/@keepquant/oracle/index.js", 'export * from "@keepquant/oracle/llama";\n');
    write("packages/quant/dist/index.js", 'import "@keepquant/oracle";\n');
    write("packages/README.ts", 'import "@keepquant/oracle";\n');
    // "src" spelled in two pieces, so that this file does not itself import a package's src
    const src = ["sr", "c"].join("");
    write(
      "scripts/x/run.ts",
      `import { a } from "../../packages/engine/${src}/parity/gate.js";\nimport { b } from "@keepquant/engine/parity";\nimport { c } from "../common.js";\n`,
    );
    write("tools/t/src/run.ts", `import { d } from "../../../packages/gguf/${src}/index.js";\nimport { e } from "@keepquant/oracle";\n`);
    const found = importBoundaryViolations(root).map((v) => `${v.file}:${v.line} ${v.specifier}`);
    fs.rmSync(root, { recursive: true });
    expect(found.sort()).toEqual(
      [
        "packages/engine/src/a.ts:1 @keepquant/oracle",
        "packages/engine/src/a.ts:2 @keepquant/quant/testing",
        "packages/engine/src/a.ts:3 @keepquant/goldens",
        "packages/engine/src/a.ts:4 @keepquant/fixtures/oracle",
        "packages/quant/bench/dequantize.ts:2 @keepquant/oracle",
        "packages/tt-native/scripts/gen.mjs:1 @keepquant/goldens",
        "scripts/x/run.ts:1 ../../packages/engine/src/parity/gate.js",
        "tools/t/src/run.ts:1 ../../../packages/gguf/src/index.js",
      ].sort(),
    );
  });
});
