// Writes the native model's generated headers from the model description's schema: src/model/model_hparams.h
// (src/model-hparams.ts), src/model/model_kinds.h, model_slots.h and model_scratch.h (src/model-slots.ts).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { renderModelHparamsHeader } from "../src/model-hparams.js";
import { renderModelKindsHeader, renderModelScratchHeader, renderModelSlotsHeader } from "../src/model-slots.js";

const dir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../src/model");
fs.writeFileSync(path.join(dir, "model_hparams.h"), renderModelHparamsHeader());
fs.writeFileSync(path.join(dir, "model_kinds.h"), renderModelKindsHeader());
fs.writeFileSync(path.join(dir, "model_slots.h"), renderModelSlotsHeader());
fs.writeFileSync(path.join(dir, "model_scratch.h"), renderModelScratchHeader());
