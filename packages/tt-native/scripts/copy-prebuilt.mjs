// Build step: the addon just built becomes the prebuilt binary this platform's package ships
// (prebuilds/<platform>-<arch>/keepquant_native.node).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const built = path.join(root, "build", "Release", "keepquant_native.node");
const dir = path.join(root, "prebuilds", `${process.platform}-${process.arch}`);
fs.mkdirSync(dir, { recursive: true });
const temporary = path.join(dir, `.keepquant_native.node.tmp-${process.pid}`);
fs.copyFileSync(built, temporary);
fs.renameSync(temporary, path.join(dir, "keepquant_native.node"));
