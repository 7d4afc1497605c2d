import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { HubError } from "./errors.js";

/** Where the Hub is, who we are to it, and where its files are kept: resolved once from the environment. */
export interface HubConfig {
  /** The Hub's base URL without a trailing slash (HF_ENDPOINT; default https://huggingface.co). */
  endpoint: string;
  /** A user access token (HF_TOKEN, else the file `huggingface-cli login` writes); never printed. */
  token: string | undefined;
  /** HF_HUB_OFFLINE=1: use the cache only, never the network. */
  offline: boolean;
  /** The hub cache folder holding `models--owner--repo/` (HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub). */
  cacheDir: string;
}

export const DEFAULT_ENDPOINT = "https://huggingface.co";

/** The environment variables read (a plain record: tests pass their own). */
export type HubEnvironment = Readonly<Record<string, string | undefined>>;

const TRUE_VALUES = new Set(["1", "true", "yes", "on"]);
const FALSE_VALUES = new Set(["", "0", "false", "no", "off"]);

/** Reads HF_ENDPOINT, HF_TOKEN, HF_TOKEN_PATH, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE (and XDG_CACHE_HOME) once. */
export function hubConfig(env: HubEnvironment = process.env): HubConfig {
  const endpointText = env.HF_ENDPOINT?.trim() || DEFAULT_ENDPOINT;
  let endpoint: URL;
  try {
    endpoint = new URL(endpointText);
  } catch (error) {
    throw new HubError("HUB_BAD_CONFIG", `HF_ENDPOINT="${endpointText}" is not a URL (e.g. ${DEFAULT_ENDPOINT})`, {
      field: "HF_ENDPOINT",
      cause: error,
    });
  }
  if (endpoint.protocol !== "https:" && endpoint.protocol !== "http:") {
    throw new HubError("HUB_BAD_CONFIG", `HF_ENDPOINT="${endpointText}" is not an http(s) URL`, { field: "HF_ENDPOINT" });
  }
  const offlineText = (env.HF_HUB_OFFLINE ?? "").trim().toLowerCase();
  if (!TRUE_VALUES.has(offlineText) && !FALSE_VALUES.has(offlineText)) {
    throw new HubError("HUB_BAD_CONFIG", `HF_HUB_OFFLINE="${env.HF_HUB_OFFLINE}" is neither 1 nor 0`, { field: "HF_HUB_OFFLINE" });
  }
  const home = env.HF_HOME?.trim() || path.join(env.XDG_CACHE_HOME?.trim() || path.join(os.homedir(), ".cache"), "huggingface");
  const cacheDir = env.HF_HUB_CACHE?.trim() || path.join(home, "hub");
  return {
    endpoint: endpoint.href.replace(/\/+$/, ""),
    token: env.HF_TOKEN?.trim() || readTokenFile(env.HF_TOKEN_PATH?.trim() || path.join(home, "token")),
    offline: TRUE_VALUES.has(offlineText),
    cacheDir,
  };
}

/** The token `huggingface-cli login` saved, or undefined when there is none. */
function readTokenFile(file: string): string | undefined {
  try {
    return fs.readFileSync(file, "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}
