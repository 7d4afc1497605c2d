import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Engine } from "@keepquant/engine";
import { writeParityProjector } from "@keepquant/fixtures/projector";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultModelFile, REPO_ROOT, scriptedToolEngine, startTestServer, type TestServer, TEST_ENGINE_OPTIONS } from "./test-support.js";

/** Debian's chromium (CHROMIUM overrides): nothing is downloaded at run time. */
const chromiumPath = [process.env.CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => p !== undefined && existsSync(p));
const SKIP = chromiumPath ? "" : " (skipped: no Chromium installed; Debian: apt-get install chromium)";
const API_KEY = "webui-key";
/** What the scripted model answers: markup that must stay text. */
const HOSTILE = '<script>window.__xss = 1</script><img src="x" onerror="window.__xss = 2"> **bold** and `code`';

const workDir = mkdtempSync(path.join(tmpdir(), "kq-webui-"));
let browser: Browser;
let engine: Engine;
let serving: TestServer;

beforeAll(async () => {
  if (!chromiumPath) return;
  engine = await Engine.load(await defaultModelFile(path.join(workDir, "cache")), { ...TEST_ENGINE_OPTIONS, prefixCacheSnapshots: 8 });
  serving = await startTestServer(engine, { apiKey: API_KEY, modelName: "tied-4l-f32", synthetic: true, contextTokens: 4096 });
  browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox", "--disable-gpu"] });
});

afterAll(async () => {
  await browser?.close();
  await serving?.close();
  engine?.dispose();
  rmSync(workDir, { recursive: true, force: true });
});

/** Saves a screenshot in the test's folder, and into KEEPQUANT_SCREENSHOT_DIR when set (docs/images). */
async function screenshot(page: Page, name: string): Promise<string> {
  const file = path.join(workDir, name);
  await page.screenshot({ path: file });
  const target = process.env.KEEPQUANT_SCREENSHOT_DIR;
  if (target) {
    mkdirSync(target, { recursive: true });
    copyFileSync(file, path.join(target, name));
  }
  return file;
}

/** Waits until the streaming answer shows some text (thinking or answer). */
async function answerStarted(page: Page): Promise<void> {
  await page.waitForFunction(
    () => {
      const items = document.querySelectorAll('li.message.assistant[data-state="streaming"]');
      const item = items[items.length - 1];
      return (
        item !== undefined &&
        `${item.querySelector(".thinking-text")?.textContent ?? ""}${item.querySelector(".content")?.textContent ?? ""}`.length >= 8
      );
    },
    undefined,
    { timeout: 90_000 },
  );
}

async function metric(url: string, name: string, labels: string[] = []): Promise<number> {
  const text = await (await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${API_KEY}` } })).text();
  let sum = 0;
  for (const line of text.split("\n")) {
    if ((line.startsWith(`${name}{`) || line.startsWith(`${name} `)) && labels.every((l) => line.includes(l)))
      sum += Number(line.split(" ").pop());
  }
  return sum;
}

describe("the web chat page in headless Chromium", () => {
  it.skipIf(!chromiumPath)(
    `asks for the key, streams an answer, stops a long one, and reads well at phone width${SKIP}`,
    async () => {
      const context = await browser.newContext({ viewport: { width: 1100, height: 760 } });
      // generous waits: CI runs the package suites side by side on two cores
      context.setDefaultTimeout(90_000);
      const page = await context.newPage();
      const requested = new Set<string>();
      page.on("request", (request) => requested.add(new URL(request.url()).origin));
      const errors: string[] = [];
      page.on("pageerror", (error) => errors.push(error.message));

      await page.goto(serving.url, { waitUntil: "load" });
      const loadMs = await page.evaluate(() => (performance.getEntriesByType("navigation")[0] as PerformanceNavigationTiming).loadEventEnd);
      console.log(`measured: the page loaded in ${loadMs.toFixed(0)} ms on loopback`);
      // the server asks for a key: the page shows its dialog, keeps the key for the tab
      await page.locator("#key-dialog[open]").waitFor();
      await page.fill("#key", API_KEY);
      await page.keyboard.press("Enter");
      await page.locator('#model[data-ready="true"]').waitFor();
      expect(await page.textContent("#model")).toContain("tied-4l-f32");
      expect(await page.textContent("#model .badge")).toBe("synthetic");
      expect(await page.evaluate(() => sessionStorage.getItem("keepquant-api-key"))).toBe(API_KEY);

      // keyboard: Shift+Enter is a new line, Enter sends
      await page.click("#settings summary");
      await page.fill("#max-tokens", "40");
      // greedy: the answers (and so their lengths) are the same on every run
      await page.$eval("#temperature", (input) => {
        (input as HTMLInputElement).value = "0";
        input.dispatchEvent(new Event("input"));
      });
      expect(await page.textContent("#temperature-value")).toBe("0.00");
      await page.focus("#input");
      await page.keyboard.type("Hello there");
      await page.keyboard.press("Shift+Enter");
      await page.keyboard.type("second line");
      expect(await page.inputValue("#input")).toBe("Hello there\nsecond line");
      // count how often the answer grows while it streams
      await page.evaluate(() => {
        (window as unknown as { __growth: number }).__growth = 0;
        new MutationObserver(() => (window as unknown as { __growth: number }).__growth++).observe(document.getElementById("messages")!, {
          subtree: true,
          childList: true,
          characterData: true,
        });
      });
      await page.keyboard.press("Enter");
      const answer = page.locator('li.message.assistant[data-state="done"]');
      await answer.waitFor({ timeout: 90_000 });
      expect(await page.textContent("li.message.user .content")).toBe("Hello there\nsecond line");
      const growth = await page.evaluate(() => (window as unknown as { __growth: number }).__growth);
      expect(growth).toBeGreaterThan(3);
      const stats = (await answer.locator(".stats").textContent()) ?? "";
      expect(stats).toMatch(/^\d+ tokens · TTFT \d+ ms · [\d.]+ tok\/s/);
      const tokens = Number(/^(\d+) tokens/.exec(stats)![1]);
      expect(tokens).toBeGreaterThan(0);
      expect(tokens).toBeLessThanOrEqual(40);
      const shown =
        ((await answer.locator(".thinking-text").textContent()) ?? "") + ((await answer.locator(".content").textContent()) ?? "");
      expect(shown.length).toBeGreaterThan(0);
      await screenshot(page, "webui-chat.png");

      // a long answer, stopped with Esc: the server's request ends (aborted) and frees its blocks.
      // Each long request starts a new chat, so its prompt (and its greedy answer) is the same every run.
      await page.click("#new-chat");
      const abortsBefore = await metric(serving.url, "keepquant_requests_total", ['finish_reason="abort"']);
      await page.fill("#max-tokens", "3000");
      await page.fill("#input", "Tell me a very long story");
      await page.click("#send");
      const composerBefore = await page.locator("#composer").boundingBox();
      await answerStarted(page);
      expect(await page.isEnabled("#stop")).toBe(true);
      // no layout jump: the composer stays put, and the stats line has its height before its numbers arrive
      const streamingStats = await page.locator('li.message.assistant[data-state="streaming"] .stats').boundingBox();
      expect(streamingStats!.height).toBeGreaterThan(0);
      expect(await page.locator("#composer").boundingBox()).toEqual(composerBefore);
      await page.keyboard.press("Escape");
      await page.locator('li.message.assistant[data-state="stopped"]').waitFor();
      expect((await page.locator('li.message.assistant[data-state="stopped"] .stats').boundingBox())!.height).toBe(streamingStats!.height);
      while (serving.server.inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(await metric(serving.url, "keepquant_requests_total", ['finish_reason="abort"'])).toBe(abortsBefore + 1);
      expect(await metric(serving.url, "keepquant_requests_running")).toBe(0);
      expect(await metric(serving.url, "keepquant_gdn_state_slots_used")).toBe(0);
      expect(await page.isEnabled("#send")).toBe(true);

      // the stop button does the same
      await page.click("#new-chat");
      await page.fill("#input", "Another long one");
      await page.click("#send");
      await answerStarted(page);
      await page.click("#stop");
      await page.locator('li.message.assistant[data-state="stopped"]').waitFor();
      while (serving.server.inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(await metric(serving.url, "keepquant_requests_total", ['finish_reason="abort"'])).toBe(abortsBefore + 2);

      // new chat clears the conversation
      await page.click("#new-chat");
      expect(await page.locator("li.message").count()).toBe(0);
      expect(await page.isVisible("#empty")).toBe(true);

      // phone width: nothing wider than the screen
      await page.setViewportSize({ width: 375, height: 740 });
      await page.fill("#max-tokens", "24");
      await page.fill("#input", "Short one");
      await page.keyboard.press("Enter");
      await page.locator('li.message.assistant[data-state="done"]').waitFor({ timeout: 90_000 });
      expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
      await screenshot(page, "webui-phone.png");

      // everything came from the server itself (no CDN), and the page is small
      expect([...requested]).toEqual([serving.url]);
      const bytes = await Promise.all(
        ["/", "/app.js", "/markdown.js", "/style.css"].map(async (p) => (await (await fetch(serving.url + p)).arrayBuffer()).byteLength),
      );
      expect(bytes.reduce((s, b) => s + b, 0)).toBeLessThan(64 * 1024);
      expect(errors).toEqual([]);
      await context.close();
    },
    300_000,
  );

  it.skipIf(!chromiumPath)(`shows a model answer with <script> and <img onerror> as text${SKIP}`, async () => {
    const hostile = await startTestServer(await scriptedToolEngine(TEST_ENGINE_OPTIONS, { answer: HOSTILE }), { modelName: "scripted" });
    try {
      const page = await browser.newPage();
      await page.goto(hostile.url);
      await page.locator('#model[data-ready="true"]').waitFor();
      // the scripted model answers with its scripted text once a <tool_response> token is in the context
      await page.fill("#input", "<tool_response>");
      await page.keyboard.press("Enter");
      const answer = page.locator('li.message.assistant[data-state="done"]');
      await answer.waitFor({ timeout: 90_000 });
      const content = answer.locator(".content");
      expect(await content.textContent()).toContain('<script>window.__xss = 1</script><img src="x" onerror="window.__xss = 2">');
      expect(await content.locator("script, img").count()).toBe(0);
      expect(await page.locator("li.message img, li.message script").count()).toBe(0);
      // the Markdown around it still renders
      expect(await content.locator("strong").textContent()).toBe("bold");
      expect(await content.locator("code").textContent()).toBe("code");
      expect(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss)).toBeUndefined();
      // the page's Markdown module on its own: structure renders, unsafe links and markup do not
      const markdown =
        "## Title\n\n- one\n- **two**\n\n1. first\n\n> quoted <b>x</b>\n\n[bad](javascript:alert(1)) [good](https://example.com/a)\n\n```html\n<img src=x onerror=alert(1)>\n```";
      const rendered = (await page.evaluate(`(async () => {
        const { renderMarkdown } = await import("/markdown.js");
        const box = document.createElement("div");
        box.append(renderMarkdown(${JSON.stringify(markdown)}));
        return {
          tags: [...box.querySelectorAll("*")].map((e) => e.tagName.toLowerCase()),
          links: [...box.querySelectorAll("a")].map((a) => a.getAttribute("href")),
          code: box.querySelector("pre code").textContent,
          text: box.textContent,
        };
      })()`)) as { tags: string[]; links: string[]; code: string; text: string };
      expect(rendered.tags).toEqual(["h4", "ul", "li", "li", "strong", "ol", "li", "blockquote", "p", "p", "a", "pre", "code"]);
      expect(rendered.links).toEqual(["https://example.com/a"]);
      expect(rendered.code).toBe("<img src=x onerror=alert(1)>");
      expect(rendered.text).toContain("[bad](javascript:alert(1))");
      expect(rendered.text).toContain("quoted <b>x</b>");
      await page.close();
    } finally {
      await hostile.close();
      hostile.engine.dispose();
    }
  });

  it.skipIf(!chromiumPath)(
    `attaches an image from the file picker and one pasted from the clipboard, shows them and sends them as image_url parts${SKIP}`,
    async () => {
      const projector = path.join(workDir, "mmproj-parity-f32.gguf");
      await writeParityProjector(projector, "f32");
      // the TypeScript provider: the native step takes no image rows yet
      const vision = await Engine.load(await defaultModelFile(path.join(workDir, "cache")), {
        ...TEST_ENGINE_OPTIONS,
        provider: "ts",
        projector,
      });
      const served = await startTestServer(vision, { modelName: "vision" });
      const png = path.join(REPO_ROOT, "goldens", "vision", "inputs", "pattern-96x96.png");
      const other = readFileSync(path.join(REPO_ROOT, "goldens", "vision", "inputs", "pattern-100x70.png")).toString("base64");
      try {
        const page = await browser.newPage();
        page.setDefaultTimeout(90_000);
        const errors: string[] = [];
        page.on("pageerror", (error) => errors.push(error.message));
        await page.goto(served.url);
        await page.locator('#model[data-ready="true"]').waitFor();
        expect(await page.getAttribute("#model", "data-vision")).toBe("true");
        expect(await page.isVisible("#attach")).toBe(true);

        // the file picker
        await page.setInputFiles("#image-file", png);
        await page.locator("#attachments li").first().waitFor();
        // the clipboard: a paste event carrying an image file
        await page.evaluate((base64) => {
          const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
          const data = new DataTransfer();
          data.items.add(new File([bytes], "pasted.png", { type: "image/png" }));
          document
            .getElementById("input")!
            .dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }, other);
        await page.waitForFunction(() => document.querySelectorAll("#attachments li").length === 2);
        expect(await page.locator("#attachments img.thumbnail").count()).toBe(2);
        await screenshot(page, "webui-attachments.png");

        await page.fill("#input", "What is in these pictures?");
        const sent = page.waitForRequest((request) => request.url().endsWith("/v1/chat/completions"));
        await page.keyboard.press("Enter");
        const body = (await sent).postDataJSON() as { messages: { role: string; content: unknown }[] };
        const user = body.messages.at(-1)!;
        expect(user.role).toBe("user");
        const parts = user.content as { type: string; text?: string; image_url?: { url: string } }[];
        expect(parts.map((p) => p.type)).toEqual(["text", "image_url", "image_url"]);
        expect(parts[0]!.text).toBe("What is in these pictures?");
        expect(parts[1]!.image_url!.url).toBe(`data:image/png;base64,${readFileSync(png).toString("base64")}`);
        expect(parts[2]!.image_url!.url).toBe(`data:image/png;base64,${other}`);

        const answer = page.locator('li.message.assistant[data-state="done"]');
        await answer.waitFor({ timeout: 90_000 });
        // the images are shown in the user's message; the composer is empty again
        expect(await page.locator("li.message.user img.thumbnail").count()).toBe(2);
        expect(await page.isVisible("#attachments")).toBe(false);
        expect(await answer.locator(".stats").textContent()).toMatch(/^\d+ tokens/);
        await screenshot(page, "webui-image.png");
        expect(errors).toEqual([]);
        await page.close();
      } finally {
        await served.close();
        vision.dispose();
      }

      // a text-only model: no attach button
      const page = await browser.newPage();
      await page.goto(serving.url);
      await page.locator("#key-dialog[open]").waitFor();
      await page.fill("#key", API_KEY);
      await page.keyboard.press("Enter");
      await page.locator('#model[data-ready="true"]').waitFor();
      expect(await page.getAttribute("#model", "data-vision")).toBe("false");
      expect(await page.isVisible("#attach")).toBe(false);
      await page.close();
    },
    300_000,
  );
});
