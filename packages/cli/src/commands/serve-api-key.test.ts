/**
 * `serve --api-key` (or KEEPQUANT_API_KEY) that no request could ever match is refused before anything
 * loads: a header value is latin-1 text without control characters, and the server trims the key a
 * request sends. The refusal names the option (or the variable) and what is wrong, never the key.
 * A model path where nothing is shows that the check comes first: a key that passes ends at MODEL_NOT_FOUND.
 */
import { spawnSync } from "node:child_process";
import { beforeAll, describe, expect, it } from "vitest";
import { apiKeyProblem, KEEPQUANT_API_KEY, resolveApiKey } from "./serve.js";
import { runCliCollecting, expectBuiltCli, CLI_BIN } from "./test-support.js";

const bin = CLI_BIN;
const NO_MODEL = "/nonexistent/keepquant-api-key-test.gguf";

beforeAll(() => {
  expectBuiltCli();
});

async function serve(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stderr: string }> {
  const { code, stderr } = await runCliCollecting(["serve", NO_MODEL, ...args], env);
  return { code, stderr };
}

const TRIMMED = "the key starts or ends with whitespace, and the server trims the key a request sends, so it could never match";
const HEADER = "an HTTP header carries only latin-1 text without control characters, so no request could send this key";

describe("apiKeyProblem", () => {
  it("keys a request can send: ASCII, latin-1, inner spaces and tabs", () => {
    for (const key of ["sekrit", "s3cr3t-with_punctuation!~", "clé à molette", "a\tb", "ÿ"])
      expect(apiKeyProblem(key), key).toBeUndefined();
  });

  it("whitespace at either end (as String.prototype.trim sees it: the server trims with it)", () => {
    for (const key of [" sekrit", "sekrit ", "\tsekrit", "sekrit\n", "\u00a0sekrit", "sekrit\r\n"]) {
      expect(apiKeyProblem(key), JSON.stringify(key)).toBe(TRIMMED);
    }
  });

  it("a character beyond latin-1 or a control character: its position and code point, not the key", () => {
    expect(apiKeyProblem("key-密钥")).toBe(`character 5 of the key (U+5BC6) is not latin-1: ${HEADER}`);
    expect(apiKeyProblem("k😀y")).toBe(`character 2 of the key (U+1F600) is not latin-1: ${HEADER}`);
    expect(apiKeyProblem("a\u0001b")).toBe(`character 2 of the key (U+0001) is a control character: ${HEADER}`);
    expect(apiKeyProblem("a\u007fb")).toBe(`character 2 of the key (U+007F) is a control character: ${HEADER}`);
  });

  it("empty: refused (it would turn authentication off)", () => {
    expect(apiKeyProblem("")).toBe("empty (to serve without a key, leave the option out)");
  });
});

describe("resolveApiKey", () => {
  it("the flag wins over the variable; an empty variable is unset; the source is named", () => {
    expect(resolveApiKey(undefined, {})).toBeUndefined();
    expect(resolveApiKey(undefined, { [KEEPQUANT_API_KEY]: "" })).toBeUndefined();
    expect(resolveApiKey(undefined, { [KEEPQUANT_API_KEY]: "from-env" })).toBe("from-env");
    expect(resolveApiKey("from-flag", { [KEEPQUANT_API_KEY]: " bad " })).toBe("from-flag");
    expect(() => resolveApiKey(" bad", {})).toThrow(`--api-key: ${TRIMMED}`);
    expect(() => resolveApiKey(undefined, { [KEEPQUANT_API_KEY]: "bad\n" })).toThrow(`${KEEPQUANT_API_KEY}: ${TRIMMED}`);
    // an empty flag does not fall back to the variable: it is refused
    expect(() => resolveApiKey("", { [KEEPQUANT_API_KEY]: "from-env" })).toThrow("--api-key: empty");
  });
});

describe("keepquant serve with a key no request could send", () => {
  for (const [label, args, env, line] of [
    ["--api-key with a trailing space", ["--api-key", "sekrit "], {}, `--api-key: ${TRIMMED}`],
    ["--api-key beyond latin-1", ["--api-key", "密钥"], {}, `--api-key: character 1 of the key (U+5BC6) is not latin-1: ${HEADER}`],
    ["an empty --api-key", ["--api-key="], {}, "--api-key: empty (to serve without a key, leave the option out)"],
    ["KEEPQUANT_API_KEY with a newline", [], { [KEEPQUANT_API_KEY]: "sekrit\n" }, `${KEEPQUANT_API_KEY}: ${TRIMMED}`],
    [
      "KEEPQUANT_API_KEY beyond latin-1",
      [],
      { [KEEPQUANT_API_KEY]: "€uro" },
      `${KEEPQUANT_API_KEY}: character 1 of the key (U+20AC) is not latin-1: ${HEADER}`,
    ],
  ] as const) {
    it(`${label}: a usage error before the model is looked at, exit 2`, async () => {
      const r = await serve([...args], env);
      expect(r.stderr).toBe(`error: USAGE: ${line}\n`);
      expect(r.code).toBe(2);
    });
  }

  it("a key a request can send gets through to the model path", async () => {
    const r = await serve(["--api-key", "clé"]);
    expect(r.stderr).toMatch(/^error: MODEL_NOT_FOUND: /);
    expect(r.code).toBe(1);
  });

  it("the bin: the key as the shell passes it (UTF-8 argv), refused with its code point, the key not printed", () => {
    const result = spawnSync(process.execPath, [bin, "serve", NO_MODEL, "--api-key", "tôp-密"], {
      encoding: "utf8",
      env: { ...process.env, KEEPQUANT_DEBUG: "", KEEPQUANT_API_KEY: "", CI: "1" },
      stdio: ["ignore", "pipe", "pipe"],
      timeout: 60_000,
    });
    expect(result.stderr).toBe(`error: USAGE: --api-key: character 5 of the key (U+5BC6) is not latin-1: ${HEADER}\n`);
    expect(result.stderr).not.toContain("tôp");
    expect(result.status).toBe(2);
  });
});
