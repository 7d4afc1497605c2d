// Safe Markdown for model answers: builds DOM nodes with createElement and textContent only, so no
// HTML from the model ever reaches the page (a "<script>" or "<img onerror>" in an answer is text).
// Covers what chat answers use: paragraphs, headings, lists, block quotes, fenced code, rules,
// inline code, bold, italic, strike-through and links (http, https and mailto only).

const SAFE_URL = /^(https?:|mailto:)/i;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// Inline spans: `code`, **bold**, *italic* / _italic_, ~~strike~~, [text](url); everything else is text.
const INLINE =
  /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([\s\S]+?)\*\*|(?<![\w])__([\s\S]+?)__(?![\w])|~~([\s\S]+?)~~|\*([^*\s][^*]*?)\*|(?<![\w])_([^_\s][^_]*?)_(?![\w])|\[([^\]]+)\]\(([^)\s]+)\)/g;

function appendInline(parent, text) {
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    if (match.index > last) parent.append(document.createTextNode(text.slice(last, match.index)));
    const [whole, , code, bold1, bold2, strike, italic1, italic2, linkText, url] = match;
    if (code !== undefined) parent.append(el("code", "", code));
    else if (bold1 !== undefined || bold2 !== undefined) appendInline(parent.appendChild(el("strong")), bold1 ?? bold2);
    else if (strike !== undefined) appendInline(parent.appendChild(el("del")), strike);
    else if (italic1 !== undefined || italic2 !== undefined) appendInline(parent.appendChild(el("em")), italic1 ?? italic2);
    else if (linkText !== undefined && SAFE_URL.test(url)) {
      const a = el("a");
      a.href = url;
      a.rel = "noopener noreferrer nofollow";
      a.target = "_blank";
      appendInline(a, linkText);
      parent.append(a);
    } else parent.append(document.createTextNode(whole));
    last = match.index + whole.length;
  }
  if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
}

function appendLines(parent, lines) {
  lines.forEach((line, i) => {
    if (i > 0) parent.append(el("br"));
    appendInline(parent, line);
  });
}

/** Markdown text -> DocumentFragment. Unclosed constructs (mid-stream) render as far as they go. */
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s*(```|~~~)\s*([\w+-]*)\s*$/.exec(line);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++;
      const pre = el("pre");
      const code = el("code", "", body.join("\n"));
      if (fence[2]) code.dataset.lang = fence[2];
      pre.append(code);
      fragment.append(pre);
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      const h = el(`h${Math.min(6, heading[1].length + 2)}`);
      appendInline(h, heading[2]);
      fragment.append(h);
      i++;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      fragment.append(el("hr"));
      i++;
      continue;
    }
    const bullet = /^\s*([-*+]|\d{1,9}[.)])\s+/;
    if (bullet.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? "ol" : "ul");
      if (ordered) list.start = Number.parseInt(line, 10) || 1;
      while (i < lines.length && bullet.test(lines[i])) {
        const item = el("li");
        const itemLines = [lines[i].replace(bullet, "")];
        i++;
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !bullet.test(lines[i])) itemLines.push(lines[i++].trim());
        appendLines(item, itemLines);
        list.append(item);
      }
      fragment.append(list);
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      const quote = el("blockquote");
      quote.append(renderMarkdown(quoted.join("\n")));
      fragment.append(quote);
      continue;
    }
    if (line.trim() === "") {
      i++;
      continue;
    }
    const paragraph = [];
    while (i < lines.length && lines[i].trim() !== "" && !/^\s*(```|~~~|#{1,6}\s|>|[-*+]\s|\d{1,9}[.)]\s)/.test(lines[i]))
      paragraph.push(lines[i++]);
    if (paragraph.length === 0) paragraph.push(lines[i++]);
    const p = el("p");
    appendLines(p, paragraph);
    fragment.append(p);
  }
  return fragment;
}
