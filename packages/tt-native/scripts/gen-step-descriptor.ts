// Writes src/model/step_descriptor.h from the step descriptor's schema (src/step-descriptor.ts).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { renderStepDescriptorHeader } from "../src/step-descriptor.js";

const target = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../src/model/step_descriptor.h");
fs.writeFileSync(target, renderStepDescriptorHeader());
