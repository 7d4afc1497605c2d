#!/usr/bin/env node
// Scale-out end to end, on loopback only: two `keepquant serve` replicas (the embedded model)
// behind nginx configured from deploy/nginx/keepquant.conf. Checks that traffic flows through
// nginx (plain and streamed), that a session header keeps a conversation on one replica, that
// both replicas get sessions, and that when one replica drains and stops its sessions move to the
// other. Bounded: a few dozen small requests, every wait has a limit.
//
//   node scripts/deploy/nginx-e2e.mjs        exit 0 pass, 1 fail, 77 skip (no nginx / no build)
//
// NGINX=/path/to/nginx picks the binary (default: nginx on PATH, then /usr/sbin/nginx).
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../../", import.meta.url));
const bin = path.join(root, "packages", "cli", "dist", "keepquant.js");
const example = path.join(root, "deploy", "nginx", "keepquant.conf");

function findNginx() {
  if (process.env.NGINX) return process.env.NGINX;
  for (const dir of (process.env.PATH ?? "").split(path.delimiter).concat(["/usr/sbin", "/usr/local/sbin"])) {
    const candidate = path.join(dir, "nginx");
    if (fs.existsSync(candidate)) return candidate;
  }
  return undefined;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
  console.log(`ok: ${message}`);
}

/** Starts a replica and resolves when it says ready. */
function startReplica(name, port, cacheDir) {
  const child = spawn(
    process.execPath,
    [bin, "serve", "--port", String(port), "--model-name", name, "--drain-timeout", "5", "--threads", "1"],
    {
      env: { ...process.env, KEEPQUANT_CACHE_DIR: cacheDir, CI: "1" },
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let stderr = "";
  const exit = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} not ready after 120 s: ${stderr}`)), 120_000);
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
      if (stderr.includes("ready:")) {
        clearTimeout(timer);
        resolve();
      }
    });
    void exit.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with ${code}: ${stderr}`));
    });
  });
  return { name, child, ready, exit };
}

async function chat(base, session, stream = false) {
  const response = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...(session ? { "X-Session-Id": session } : {}) },
    body: JSON.stringify({
      messages: [{ role: "user", content: `hello from ${session ?? "nobody"}` }],
      max_tokens: 4,
      temperature: 0,
      stream,
    }),
  });
  if (response.status !== 200) throw new Error(`chat for ${session}: HTTP ${response.status} ${await response.text()}`);
  if (!stream) return { model: (await response.json()).model, events: 1 };
  const text = await response.text();
  const events = text.split("\n\n").filter((e) => e.startsWith("data: "));
  if (events.at(-1) !== "data: [DONE]") throw new Error(`stream for ${session} did not end with [DONE]`);
  return { model: JSON.parse(events[0].slice(6)).model, events: events.length };
}

async function main() {
  const nginx = findNginx();
  if (!nginx) {
    console.log("SKIP: nginx is not installed (Debian: apt-get install nginx-light or nginx)");
    return 77;
  }
  if (!fs.existsSync(bin)) {
    console.log(`SKIP: ${bin} is missing (run pnpm build)`);
    return 77;
  }
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "kq-nginx-"));
  const children = [];
  try {
    const [portA, portB, portLb] = [await freePort(), await freePort(), await freePort()];
    const cacheDir = path.join(work, "cache");
    const a = startReplica("replica-a", portA, cacheDir);
    children.push(a.child);
    await a.ready; // the first replica writes the embedded model into the shared cache
    const b = startReplica("replica-b", portB, cacheDir);
    children.push(b.child);
    await b.ready;

    // the example config with this run's ports, inside a minimal nginx.conf of temp paths
    const site = fs
      .readFileSync(example, "utf8")
      .replace("server 127.0.0.1:8081", `server 127.0.0.1:${portA}`)
      .replace("server 127.0.0.1:8082", `server 127.0.0.1:${portB}`)
      .replace("listen 127.0.0.1:8080", `listen 127.0.0.1:${portLb}`);
    fs.writeFileSync(path.join(work, "keepquant.conf"), site);
    for (const dir of ["body", "proxy", "fastcgi", "uwsgi", "scgi"]) fs.mkdirSync(path.join(work, dir));
    fs.writeFileSync(
      path.join(work, "nginx.conf"),
      [
        "daemon off;",
        "master_process off;",
        `pid ${work}/nginx.pid;`,
        `error_log ${work}/error.log warn;`,
        "events { worker_connections 256; }",
        "http {",
        `  access_log ${work}/access.log;`,
        ...["body", "proxy", "fastcgi", "uwsgi", "scgi"].map((d) => `  ${d === "body" ? "client_body" : d}_temp_path ${work}/${d};`),
        `  include ${work}/keepquant.conf;`,
        "}",
        "",
      ].join("\n"),
    );
    const test = spawnSync(nginx, ["-t", "-p", work, "-c", path.join(work, "nginx.conf")], { encoding: "utf8" });
    check(test.status === 0, `nginx -t accepts the example config (${(test.stderr ?? "").trim().split("\n").at(-1)})`);
    const lb = spawn(nginx, ["-p", work, "-c", path.join(work, "nginx.conf")], { stdio: ["ignore", "ignore", "pipe"] });
    children.push(lb);
    const base = `http://127.0.0.1:${portLb}`;
    let up = false;
    for (let i = 0; i < 100 && !up; i++) {
      up = await fetch(`${base}/health`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (!up) await sleep(100);
    }
    check(up, "GET /health through nginx answers 200");

    // sessions: each keeps to one replica; both replicas get some
    const placement = new Map();
    for (let i = 0; i < 64 && (i < 8 || new Set(placement.values()).size < 2); i++) {
      const session = `session-${i}`;
      const seen = new Set();
      for (let k = 0; k < 3; k++) seen.add((await chat(base, session, k === 2)).model);
      if (seen.size !== 1) throw new Error(`${session} was served by ${[...seen].join(" and ")}`);
      placement.set(session, [...seen][0]);
    }
    check(
      [...placement.values()].every((m) => m === "replica-a" || m === "replica-b"),
      `${placement.size} sessions, 3 requests each, each served by one replica`,
    );
    check(new Set(placement.values()).size === 2, "both replicas serve sessions");
    const streamed = await chat(base, "stream-check", true);
    check(streamed.events > 3, `a streamed answer passes through nginx as ${streamed.events} events ending in [DONE]`);
    check((await chat(base, undefined)).model.startsWith("replica-"), "a request without a session header is served");

    // replica A drains and stops: its sessions move to B
    a.child.kill("SIGTERM");
    check((await a.exit) === 0, "replica A drains and exits 0 on SIGTERM");
    const moved = [...placement.entries()].filter(([, model]) => model === "replica-a").map(([session]) => session);
    for (const session of moved) {
      const { model } = await chat(base, session);
      if (model !== "replica-b") throw new Error(`${session} went to ${model} after replica A stopped`);
    }
    check(moved.length > 0, `${moved.length} sessions of replica A are served by replica B after it stopped`);
    check((await fetch(`${base}/health`)).status === 200, "GET /health through nginx still answers 200");
    return 0;
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill("SIGTERM");
    await sleep(200);
    for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
    fs.rmSync(work, { recursive: true, force: true });
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error) => {
    console.error(`FAIL: ${error.message}`);
    process.exitCode = 1;
  },
);
