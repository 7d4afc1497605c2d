/**
 * Build step of @keepquant/default-model: puts the default model file in place and checks it
 * against default-model.json. A `parity-fixture` source is generated deterministically by our own
 * code (the parity fixture recipe and vocabulary); a `file` source must already be there.
 *
 *   pnpm --filter @keepquant/default-model build      (runs this, then tsup)
 *
 * The fixture recipe comes from the private @keepquant/fixtures (tools/fixtures, a devDependency:
 * it needs only the gguf package, so it is there before the engine is built).
 *
 * Nothing is half-written: the file is generated under a temporary name and renamed when its
 * sha256 matches. Exit 1 with one line on a mismatch.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ensureFixture, fixtureTokenizerFromJson, parityFixture } from "@keepquant/fixtures";
import { defaultModelInfo, sha256OfFile, verifyDefaultModel } from "../src/index.js";

/** The fixture vocabulary, `goldens/tokenizer/vocab.json`. */
const TOKENIZER_FILE = fileURLToPath(new URL("../../../goldens/tokenizer/vocab.json", import.meta.url));

async function main(): Promise<void> {
  const info = defaultModelInfo();
  if (fs.existsSync(info.file) && (await sha256OfFile(info.file)) === info.sha256) return;
  if (info.source.kind !== "parity-fixture") {
    await verifyDefaultModel(info); // throws DEFAULT_MODEL_MISSING / DEFAULT_MODEL_CORRUPT with the reason
    return;
  }
  fs.mkdirSync(path.dirname(info.file), { recursive: true });
  const work = fs.mkdtempSync(path.join(path.dirname(info.file), ".generate-"));
  try {
    const fixture = parityFixture(info.source.fixture);
    const generated = await ensureFixture(fixture, {
      cacheDir: work,
      tokenizer: fixtureTokenizerFromJson(JSON.parse(fs.readFileSync(TOKENIZER_FILE, "utf8"))),
      expectedSha256: { [fixture.name]: info.sha256 },
    });
    fs.renameSync(generated, info.file);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  await verifyDefaultModel(info);
}

main().catch((error: unknown) => {
  console.error(`default model: ${(error as Error).message}`);
  process.exit(1);
});
