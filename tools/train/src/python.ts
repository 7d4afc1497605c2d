/** The Python that runs the PyTorch side: Debian's /usr/bin/python3 with python3-torch (KEEPQUANT_TRAIN_PYTHON overrides). */
import path from "node:path";
import { TRAIN_DIR } from "./recipe.js";

export const PYTHON = process.env.KEEPQUANT_TRAIN_PYTHON ?? "/usr/bin/python3";
export const PYTHON_DIR = path.join(TRAIN_DIR, "python");
