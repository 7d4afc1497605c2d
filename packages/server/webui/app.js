// keepquant's web chat: streams answers from /v1/chat/completions (stream: true) on the same origin.
// No dependencies, no build step. Answers render through markdown.js (DOM nodes only, never HTML).
import { renderMarkdown } from "./markdown.js";

const KEY_STORAGE = "keepquant-api-key";
const $ = (id) => document.getElementById(id);
const ui = {
  model: $("model"),
  newChat: $("new-chat"),
  system: $("system"),
  temperature: $("temperature"),
  temperatureValue: $("temperature-value"),
  maxTokens: $("max-tokens"),
  log: $("log"),
  empty: $("empty"),
  messages: $("messages"),
  composer: $("composer"),
  input: $("input"),
  send: $("send"),
  stop: $("stop"),
  attach: $("attach"),
  imageFile: $("image-file"),
  attachments: $("attachments"),
  keyDialog: $("key-dialog"),
  keyForm: $("key-form"),
  key: $("key"),
  keyError: $("key-error"),
};

/** The conversation sent with each request: { role, content } (content: text, or text and image_url parts). */
let history = [];
/** Images attached to the next message: data URLs. */
let attached = [];
/** The media types the server decodes (what the file picker offers). */
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/webp", "image/gif"];
/** The request in flight: { controller, view }. */
let current;

class Unauthorized extends Error {}

function headers() {
  const key = sessionStorage.getItem(KEY_STORAGE);
  return { "Content-Type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}) };
}

/** Asks for the API key (once per tab); resolves when one is entered. */
function askForKey(message) {
  ui.keyError.textContent = message ?? "";
  if (!ui.keyDialog.open) ui.keyDialog.showModal();
  ui.key.focus();
  return new Promise((resolve) => {
    ui.keyForm.addEventListener(
      "submit",
      () => {
        sessionStorage.setItem(KEY_STORAGE, ui.key.value.trim());
        ui.key.value = "";
        resolve();
      },
      { once: true },
    );
  });
}

async function api(path, init = {}) {
  const response = await fetch(path, { ...init, headers: headers() });
  if (response.status === 401) throw new Unauthorized();
  return response;
}

async function errorText(response) {
  try {
    const body = await response.json();
    return body?.error?.message ?? `HTTP ${response.status}`;
  } catch {
    return `HTTP ${response.status}`;
  }
}

async function showModel() {
  for (let attempt = 0; ; attempt++) {
    try {
      const response = await api("/v1/models");
      if (response.status === 503) {
        ui.model.textContent = "model loading…";
        await new Promise((resolve) => setTimeout(resolve, 1000));
        continue;
      }
      if (!response.ok) throw new Error(await errorText(response));
      const model = (await response.json()).data[0];
      ui.model.textContent = "";
      const name = document.createElement("span");
      name.className = "model-name";
      name.textContent = model.id;
      ui.model.append(name);
      if (model.meta?.synthetic) {
        const badge = document.createElement("span");
        badge.className = "badge";
        badge.textContent = "synthetic";
        badge.title =
          "The embedded demo model: random weights, so its answers are gibberish. Run `keepquant serve model.gguf` for a real model.";
        ui.model.append(badge);
      }
      // the model reads images (a vision projector is loaded): attach and paste are offered
      ui.attach.hidden = !model.meta?.vision;
      ui.model.dataset.vision = model.meta?.vision ? "true" : "false";
      ui.model.dataset.ready = "true";
      return;
    } catch (error) {
      if (error instanceof Unauthorized) {
        await askForKey(attempt > 0 ? "That key was refused." : "");
        continue;
      }
      ui.model.textContent = `server unreachable: ${error.message}`;
      return;
    }
  }
}

function nearBottom() {
  return ui.log.scrollHeight - ui.log.scrollTop - ui.log.clientHeight < 48;
}

function scrollToEnd() {
  ui.log.scrollTop = ui.log.scrollHeight;
}

/** One message in the log. Assistant messages have a thinking block, the answer and a stats line; user messages their images. */
function addMessage(role, text = "", images = []) {
  ui.empty.hidden = true;
  const item = document.createElement("li");
  item.className = `message ${role}`;
  item.dataset.role = role;
  const label = document.createElement("span");
  label.className = "role";
  label.textContent = role === "user" ? "You" : "Model";
  item.append(label);
  const view = { item, reasoning: "", content: text, frame: 0 };
  if (role === "assistant") {
    view.thinking = document.createElement("details");
    view.thinking.className = "thinking";
    view.thinking.hidden = true;
    const summary = document.createElement("summary");
    summary.textContent = "Thinking";
    view.thinkingText = document.createElement("div");
    view.thinkingText.className = "thinking-text";
    view.thinking.append(summary, view.thinkingText);
    item.append(view.thinking);
  }
  view.body = document.createElement("div");
  view.body.className = "content";
  if (role === "user") view.body.textContent = text;
  item.append(view.body);
  if (images.length > 0) {
    const strip = document.createElement("div");
    strip.className = "images";
    for (const url of images) strip.append(thumbnail(url));
    item.append(strip);
  }
  if (role === "assistant") {
    // reserved from the start so the layout does not jump when the numbers arrive
    view.stats = document.createElement("p");
    view.stats.className = "stats";
    view.stats.textContent = " ";
    item.append(view.stats);
    item.dataset.state = "streaming";
    // screen readers announce the answer once, when it is complete
    item.setAttribute("aria-busy", "true");
  }
  ui.messages.append(item);
  scrollToEnd();
  return view;
}

function paint(view) {
  if (view.frame) return;
  view.frame = requestAnimationFrame(() => {
    view.frame = 0;
    const stick = nearBottom();
    if (view.reasoning) {
      if (view.thinking.hidden) {
        // open while the model thinks; folded once the answer starts (unless the reader touched it)
        view.thinking.hidden = false;
        view.thinking.open = true;
        view.thinking.querySelector("summary").addEventListener("click", () => (view.touched = true), { once: true });
      }
      if (view.content && view.thinking.open && !view.touched && !view.folded) {
        view.folded = true;
        view.thinking.open = false;
      }
      view.thinkingText.textContent = view.reasoning;
    }
    view.body.replaceChildren(renderMarkdown(view.content));
    if (stick) scrollToEnd();
  });
}

function setBusy(busy) {
  ui.send.disabled = busy;
  ui.stop.disabled = !busy;
}

function describeStats(usage, timings, stopped) {
  const parts = [];
  const tokens = usage?.completion_tokens ?? timings?.predicted_n;
  if (tokens !== undefined) parts.push(`${tokens} tokens`);
  if (timings) {
    parts.push(`TTFT ${Math.round(timings.prompt_ms)} ms`);
    parts.push(`${timings.predicted_per_second.toFixed(1)} tok/s`);
  }
  if (usage?.prompt_tokens_details?.cached_tokens) parts.push(`${usage.prompt_tokens_details.cached_tokens} prompt tokens cached`);
  if (stopped) parts.push("stopped");
  return parts.join(" · ");
}

/** Reads the server-sent events of a streamed answer into the view. */
async function readStream(response, view) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const result = { usage: undefined, timings: undefined, finish: undefined };
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith("data: ")) continue;
      const data = event.slice(6);
      if (data === "[DONE]") return result;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) result.usage = chunk.usage;
      if (chunk.timings) result.timings = chunk.timings;
      for (const choice of chunk.choices ?? []) {
        const delta = choice.delta ?? {};
        if (delta.reasoning_content) view.reasoning += delta.reasoning_content;
        if (delta.content) view.content += delta.content;
        if (choice.finish_reason) result.finish = choice.finish_reason;
      }
      paint(view);
    }
  }
  return result;
}

/** An image thumbnail (a data URL: the page's CSP allows img-src data:). */
function thumbnail(url) {
  const image = document.createElement("img");
  image.className = "thumbnail";
  image.alt = "attached image";
  image.src = url;
  return image;
}

/** Shows the images attached to the next message, each with a button that removes it. */
function showAttachments() {
  ui.attachments.replaceChildren();
  attached.forEach((url, i) => {
    const item = document.createElement("li");
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "remove";
    remove.title = "Remove this image";
    remove.textContent = "×";
    remove.addEventListener("click", () => {
      attached.splice(i, 1);
      showAttachments();
    });
    item.append(thumbnail(url), remove);
    ui.attachments.append(item);
  });
  ui.attachments.hidden = attached.length === 0;
  // an image alone is a message
  ui.input.required = attached.length === 0;
}

/** Reads image files (picked or pasted) as data URLs and attaches them. */
async function attachFiles(files) {
  for (const file of files) {
    if (!IMAGE_TYPES.includes(file.type)) continue;
    const url = await new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
    attached.push(url);
  }
  showAttachments();
}

async function send(text, images = []) {
  const content =
    images.length === 0
      ? text
      : [...(text ? [{ type: "text", text }] : []), ...images.map((url) => ({ type: "image_url", image_url: { url } }))];
  history.push({ role: "user", content });
  addMessage("user", text, images);
  const view = addMessage("assistant");
  const controller = new AbortController();
  current = { controller, view };
  setBusy(true);
  const system = ui.system.value.trim();
  const body = {
    messages: [...(system ? [{ role: "system", content: system }] : []), ...history],
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number(ui.temperature.value),
    max_tokens: Math.max(1, Math.floor(Number(ui.maxTokens.value) || 512)),
  };
  try {
    let response;
    for (;;) {
      try {
        response = await api("/v1/chat/completions", { method: "POST", body: JSON.stringify(body), signal: controller.signal });
        break;
      } catch (error) {
        if (!(error instanceof Unauthorized)) throw error;
        await askForKey("The server asked for an API key.");
      }
    }
    if (!response.ok) throw new Error(await errorText(response));
    const result = await readStream(response, view);
    view.stats.textContent = describeStats(result.usage, result.timings, false);
    view.item.dataset.state = "done";
    view.item.dataset.finish = result.finish ?? "";
    history.push({ role: "assistant", content: view.content });
  } catch (error) {
    if (controller.signal.aborted) {
      view.stats.textContent = describeStats(undefined, undefined, true) || "stopped";
      view.item.dataset.state = "stopped";
      if (view.content) history.push({ role: "assistant", content: view.content });
      else history.pop();
    } else {
      view.stats.textContent = `error: ${error.message}`;
      view.item.dataset.state = "error";
      history.pop();
    }
  } finally {
    view.item.setAttribute("aria-busy", "false");
    paint(view);
    if (current?.view === view) current = undefined;
    setBusy(false);
  }
}

function stop() {
  current?.controller.abort();
}

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = ui.input.value.trim();
  if ((!text && attached.length === 0) || current) return;
  ui.input.value = "";
  const images = attached;
  attached = [];
  showAttachments();
  void send(text, images);
});

ui.attach.addEventListener("click", () => ui.imageFile.click());

ui.imageFile.addEventListener("change", () => {
  void attachFiles([...ui.imageFile.files]);
  ui.imageFile.value = "";
});

// a pasted image (a screenshot, a copied picture) is attached when the model reads images
ui.input.addEventListener("paste", (event) => {
  if (ui.attach.hidden) return;
  const files = [...(event.clipboardData?.files ?? [])].filter((file) => IMAGE_TYPES.includes(file.type));
  if (files.length === 0) return;
  event.preventDefault();
  void attachFiles(files);
});

ui.input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    ui.composer.requestSubmit();
  }
});

document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && current) {
    event.preventDefault();
    stop();
  }
});

ui.stop.addEventListener("click", stop);

ui.newChat.addEventListener("click", () => {
  stop();
  history = [];
  attached = [];
  showAttachments();
  ui.messages.replaceChildren();
  ui.empty.hidden = false;
  ui.input.focus();
});

ui.temperature.addEventListener("input", () => {
  ui.temperatureValue.textContent = Number(ui.temperature.value).toFixed(2);
});

ui.input.focus();
void showModel();
