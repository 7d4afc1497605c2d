// Writes src/model/model_hparams.h from the native hyperparameters' schema (src/model-hparams.ts).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { renderModelHparamsHeader } from "../src/model-hparams.js";

const target = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../src/model/model_hparams.h");
fs.writeFileSync(target, renderModelHparamsHeader());
