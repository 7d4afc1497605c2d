import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ASSEMBLED_DOCUMENTS, assembleDocument } from "./assemble-docs.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
for (const document of ASSEMBLED_DOCUMENTS) {
  fs.writeFileSync(path.join(repoRoot, document.target), assembleDocument(repoRoot, document));
  process.stdout.write(`wrote ${document.target}\n`);
}
