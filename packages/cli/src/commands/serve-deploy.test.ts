import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../../../../", import.meta.url));
const script = path.join(root, "scripts", "deploy", "nginx-e2e.mjs");
const nginx = [
  process.env.NGINX,
  ...(process.env.PATH ?? "").split(path.delimiter).map((dir) => path.join(dir, "nginx")),
  "/usr/sbin/nginx",
].find((candidate) => candidate !== undefined && existsSync(candidate));

describe("scale-out: keepquant serve replicas behind nginx", () => {
  it.skipIf(!nginx)(
    `two replicas behind nginx from deploy/nginx/keepquant.conf: affinity by X-Session-Id, streaming, failover on drain${nginx ? "" : " (skipped: nginx is not installed)"}`,
    () => {
      const result = spawnSync(process.execPath, [script], {
        encoding: "utf8",
        timeout: 300_000,
        env: { ...process.env, ...(nginx ? { NGINX: nginx } : {}) },
      });
      expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
      expect(result.stdout).toMatch(/ok: both replicas serve sessions/);
      expect(result.stdout).toMatch(/served by replica B after it stopped/);
    },
    320_000,
  );
});
