/**
 * Splits a model's streamed text into reasoning, content and tool calls, in the tool-call format
 * its chat template teaches (`toolCallFormatOf`):
 *
 *   [reasoning ...</think>] content <tool_call> BODY </tool_call> <tool_call> BODY </tool_call> ...
 *
 * - `xml` (Qwen3.5 / Qwen3.6): BODY is `<function=NAME>` then `<parameter=ARG>\nvalue\n</parameter>`
 *   blocks, then `</function>`. Each value is typed by the tool's JSON Schema (tool-arguments.ts);
 *   a value that does not parse as its type stays a string and is reported as a warning.
 * - `json` (Qwen2.5 / Qwen3): BODY is `{"name": ..., "arguments": {...}}`.
 *
 * Reasoning is expected when the prompt opened a `<think>` block (the template's generation
 * prompt); an output that itself starts with `<think>` opens one too. Everything before `</think>`
 * is reasoning, a call-like block included: calls are only read after the reasoning.
 *
 * Streaming: `push` returns what is decided so far and holds back text that may be the start of a
 * tag (and the whitespace before it), so no part ever shows half a tag. An XML call comes out as
 * `tool_call_start` (name known) and `tool_call_arguments` pieces (a string parameter's text as it
 * is generated, any other parameter when it closes) whose concatenation is the arguments' JSON, then
 * `tool_call` with the whole call and its warnings. A JSON call comes out in one go when its block
 * closes. A block that is not a call in the format (no `<function=NAME>` first, or JSON that is not
 * `{"name", "arguments"}`) comes back as content, unchanged.
 */
import {
  coerceArgument,
  isStringOnly,
  type JsonTypeName,
  parameterSchema,
  schemaTypes,
  schemaValues,
  type ToolSchema,
} from "./tool-arguments.js";
import type { ToolCallFormat } from "./tool-format.js";

export type ToolCallWarningCode =
  /** a parameter's text did not parse as the type its schema gives it (it is passed on as a string) */
  | "argument_type"
  /** the call names a function that is not among the request's tools */
  | "unknown_tool"
  /** a parameter the tool's schema does not list */
  | "unknown_parameter"
  /** the same parameter twice in one call (the JSON arguments then hold the key twice; parsers keep the last) */
  | "duplicate_parameter"
  /** the output ended inside the call (e.g. at max_tokens): what was written is returned */
  | "unterminated"
  /** text inside `<function=...>` that is not a `<parameter=...>` block (ignored) */
  | "unexpected_text";

export interface ToolCallWarning {
  /** The call's index in this output (0-based, as the `index` of OpenAI's tool-call deltas). */
  index: number;
  /** The function the call names. */
  name: string;
  parameter?: string;
  code: ToolCallWarningCode;
  message: string;
}

export type ParsedOutput =
  | { kind: "reasoning"; text: string }
  | { kind: "content"; text: string }
  /** A call begins: its function name is known. */
  | { kind: "tool_call_start"; index: number; name: string }
  /** A piece of the call's arguments as JSON text (the pieces of one call add up to `tool_call.arguments`). */
  | { kind: "tool_call_arguments"; index: number; text: string }
  /**
   * A call is complete: its arguments as JSON text and what was wrong with it. `cutOff`: the output ended inside
   * it (its `unterminated` warning says so too): its arguments are not whole, and it must not be answered as a call.
   */
  | { kind: "tool_call"; index: number; name: string; arguments: string; warnings: ToolCallWarning[]; cutOff?: true };

export interface OutputParserOptions {
  /** The prompt opened a `<think>` block: the output starts as reasoning. */
  reasoning: boolean;
  /** Parse tool calls: `true`, or the request's tools (their schemas type XML parameters). */
  tools: boolean | readonly ToolSchema[];
  /** The call format (from `toolCallFormatOf(template)`). Default "json". */
  format?: ToolCallFormat;
}

const THINK_START = "<think>";
const THINK_END = "</think>";
const TOOL_START = "<tool_call>";
const TOOL_END = "</tool_call>";
const FUNCTION_START = "<function=";
const FUNCTION_END = "</function>";
const PARAMETER_START = "<parameter=";
const PARAMETER_END = "</parameter>";
/** Longest function or parameter name read from `<function=NAME>` / `<parameter=NAME>`. */
export const MAX_TOOL_NAME_LENGTH = 256;
/** What ends a parameter's value: its close tag, or (when the model left it out) what comes next. */
const VALUE_ENDS = [PARAMETER_END, PARAMETER_START, FUNCTION_END, TOOL_END] as const;
const BODY_TAGS = [PARAMETER_START, FUNCTION_END, TOOL_END] as const;
const AFTER_FUNCTION_TAGS = [TOOL_END, FUNCTION_START] as const;

/** Length of the longest suffix of `text` that is a proper prefix of `tag`. */
function partialTagLength(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}

function leadingSpace(text: string): number {
  let n = 0;
  while (n < text.length && /\s/.test(text[n]!)) n++;
  return n;
}

/** `text` could still grow into something starting with `tag`. */
function couldStart(text: string, tag: string): boolean {
  return text.length < tag.length && tag.startsWith(text);
}

/**
 * `<TAG NAME>` at the start of `text` (TAG = `<function=` or `<parameter=`): the name and the length
 * read, "wait" when more text may complete it, undefined when it is not one.
 */
function readNamedTag(text: string, tag: string): { name: string; length: number } | "wait" | undefined {
  if (!text.startsWith(tag)) return couldStart(text, tag) ? "wait" : undefined;
  const close = text.indexOf(">", tag.length);
  const name = close < 0 ? text.slice(tag.length) : text.slice(tag.length, close);
  if (/[<\n]/.test(name) || name.length > MAX_TOOL_NAME_LENGTH) return undefined;
  if (close < 0) return "wait";
  const trimmed = name.trim();
  return trimmed === "" ? undefined : { name: trimmed, length: close + 1 };
}

/** A JSON-format body: `{"name": ..., "arguments": {...} | "..."}`; arguments as JSON text. */
export function parseToolCallBody(body: string): { name: string; arguments: string } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body.trim());
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const record = value as Record<string, unknown>;
  if (typeof record["name"] !== "string" || record["name"] === "") return undefined;
  const args = record["arguments"] ?? {};
  return { name: record["name"], arguments: typeof args === "string" ? args : JSON.stringify(args) };
}

interface OpenCall {
  index: number;
  name: string;
  tool: ToolSchema | undefined;
  /** The arguments' JSON text emitted so far. */
  arguments: string;
  parameters: Set<string>;
  warnings: ToolCallWarning[];
  strayText: boolean;
}

interface OpenParameter {
  name: string;
  types: JsonTypeName[] | undefined;
  /** the values an enum or const allows (read whole, as the value or its JSON) */
  values: readonly unknown[] | undefined;
  /** string-only: its text goes out as it comes, as the inside of a JSON string */
  streamed: boolean;
  /** whether the newline the template writes after `<parameter=NAME>` has been looked for */
  started: boolean;
  /** the value so far (not streamed parameters) */
  text: string;
}

type State = "reasoning" | "content" | "block" | "json" | "function" | "parameter" | "after_function";

export class OutputParser {
  private state: State;
  private pending = "";
  private toolCalls = 0;
  /** at the start of content after </think> or a tool call: leading whitespace there is dropped */
  private atContentStart: boolean;
  /** nothing decided yet: the output may still open its own <think> block */
  private mayOpenThink: boolean;
  private beforeTool = "";
  /** JSON bodies: how far `pending` has been searched for </tool_call> (so a long body is not rescanned per push) */
  private scanned = 0;
  private call: OpenCall | undefined;
  private parameter: OpenParameter | undefined;
  private readonly format: ToolCallFormat;
  private readonly parseTools: boolean;
  private readonly tools: readonly ToolSchema[] | undefined;

  constructor(options: OutputParserOptions) {
    this.state = options.reasoning ? "reasoning" : "content";
    this.atContentStart = options.reasoning;
    this.mayOpenThink = !options.reasoning;
    this.format = options.format ?? "json";
    this.parseTools = options.tools !== false && (options.tools === true || options.tools.length > 0);
    this.tools = Array.isArray(options.tools) ? options.tools : undefined;
  }

  /** Complete tool calls so far. */
  get toolCallCount(): number {
    return this.toolCalls;
  }

  push(text: string): ParsedOutput[] {
    this.pending += text;
    return this.drain(false);
  }

  /** The end of the output: everything held back comes out (an open call is closed). */
  flush(): ParsedOutput[] {
    return this.drain(true);
  }

  private drain(final: boolean): ParsedOutput[] {
    const out: ParsedOutput[] = [];
    while (this.step(out, final)) {
      // each step consumes text or changes state; it returns false when it needs more text
    }
    return out;
  }

  /** One move of the state machine; false when it has to wait for more text (or all is done). */
  private step(out: ParsedOutput[], final: boolean): boolean {
    switch (this.state) {
      case "reasoning":
        return this.stepReasoning(out, final);
      case "content":
        return this.stepContent(out, final);
      case "block":
        return this.stepBlock(out, final);
      case "json":
        return this.stepJson(out, final);
      case "function":
        return this.stepFunction(out, final);
      case "parameter":
        return this.stepParameter(out, final);
      case "after_function":
        return this.stepAfterFunction(out, final);
    }
  }

  private stepReasoning(out: ParsedOutput[], final: boolean): boolean {
    const at = this.pending.indexOf(THINK_END);
    if (at >= 0) {
      this.emit(out, "reasoning", this.pending.slice(0, at));
      this.pending = this.pending.slice(at + THINK_END.length);
      this.state = "content";
      this.atContentStart = true;
      return true;
    }
    const keep = final ? 0 : partialTagLength(this.pending, THINK_END);
    this.emit(out, "reasoning", this.pending.slice(0, this.pending.length - keep));
    this.pending = this.pending.slice(this.pending.length - keep);
    return false;
  }

  private stepContent(out: ParsedOutput[], final: boolean): boolean {
    if (this.mayOpenThink) {
      const rest = this.pending.slice(leadingSpace(this.pending));
      if (rest.startsWith(THINK_START)) {
        this.pending = rest.slice(THINK_START.length);
        this.mayOpenThink = false;
        this.state = "reasoning";
        return true;
      }
      if (!final && couldStart(rest, THINK_START)) return false;
      this.mayOpenThink = false;
    }
    const at = this.parseTools ? this.pending.indexOf(TOOL_START) : -1;
    if (at >= 0) {
      const before = this.pending.slice(0, at);
      // the whitespace before a call is dropped, unless the block turns out not to be a call
      this.beforeTool = before.slice(before.trimEnd().length);
      this.emitContent(out, before, true);
      this.pending = this.pending.slice(at + TOOL_START.length);
      this.state = this.format === "xml" ? "block" : "json";
      this.scanned = 0;
      return true;
    }
    let end = this.pending.length;
    if (!final && this.parseTools) {
      // a possible tag start waits, and so does the whitespace before it: it is dropped when a
      // tool call or the end follows
      end -= partialTagLength(this.pending, TOOL_START);
      while (end > 0 && /\s/.test(this.pending[end - 1]!)) end--;
    }
    this.emitContent(out, this.pending.slice(0, end), final);
    this.pending = this.pending.slice(end);
    return false;
  }

  /** Just after `<tool_call>` (XML): a call only when `<function=NAME>` comes first. */
  private stepBlock(out: ParsedOutput[], final: boolean): boolean {
    const space = leadingSpace(this.pending);
    const tag = readNamedTag(this.pending.slice(space), FUNCTION_START);
    if (tag !== undefined && tag !== "wait") {
      this.pending = this.pending.slice(space + tag.length);
      this.openCall(out, tag.name);
      this.state = "function";
      return true;
    }
    if (tag === "wait" && !final) return false;
    // not a call: the block is content, as written
    this.emit(out, "content", this.beforeTool + TOOL_START);
    this.atContentStart = false;
    this.mayOpenThink = false;
    this.state = "content";
    return true;
  }

  /** Inside `<tool_call>` (JSON): the body up to `</tool_call>`. */
  private stepJson(out: ParsedOutput[], final: boolean): boolean {
    const at = this.pending.indexOf(TOOL_END, Math.max(0, this.scanned - TOOL_END.length + 1));
    if (at < 0 && !final) {
      this.scanned = this.pending.length;
      return false;
    }
    const body = at >= 0 ? this.pending.slice(0, at) : this.pending;
    const call = parseToolCallBody(body);
    if (call) {
      this.openCall(out, call.name);
      this.emitArguments(out, call.arguments);
      this.closeCall(out, false);
      this.atContentStart = true;
    } else {
      this.emit(out, "content", this.beforeTool + TOOL_START + body + (at >= 0 ? TOOL_END : ""));
      this.atContentStart = false;
    }
    this.pending = at >= 0 ? this.pending.slice(at + TOOL_END.length) : "";
    this.state = "content";
    return !(final && this.pending === "");
  }

  /** Inside `<function=NAME>`, between parameters. */
  private stepFunction(out: ParsedOutput[], final: boolean): boolean {
    const space = leadingSpace(this.pending);
    const rest = this.pending.slice(space);
    if (rest === "") {
      this.pending = "";
      if (final) this.closeCall(out, true);
      return false;
    }
    const parameter = readNamedTag(rest, PARAMETER_START);
    if (parameter !== undefined && parameter !== "wait") {
      this.pending = rest.slice(parameter.length);
      this.openParameter(out, parameter.name);
      this.state = "parameter";
      return true;
    }
    if (rest.startsWith(FUNCTION_END)) {
      this.pending = rest.slice(FUNCTION_END.length);
      this.closeCall(out, false);
      this.state = "after_function";
      return true;
    }
    if (rest.startsWith(TOOL_END)) {
      // </function> left out
      this.pending = rest.slice(TOOL_END.length);
      this.closeCall(out, false);
      this.endBlock();
      return true;
    }
    if (!final && (parameter === "wait" || BODY_TAGS.some((t) => couldStart(rest, t)))) {
      this.pending = rest;
      return false;
    }
    if (final && (parameter === "wait" || BODY_TAGS.some((t) => couldStart(rest, t)))) {
      this.pending = "";
      this.closeCall(out, true);
      return false;
    }
    // stray text: skipped up to the next tag
    const next = rest.indexOf("<", 1);
    const call = this.call!;
    if (!call.strayText) {
      call.strayText = true;
      this.warn("unexpected_text", `text inside <function=${call.name}> that is not a <parameter=...> block was ignored`);
    }
    this.pending = next < 0 ? "" : rest.slice(next);
    return true;
  }

  /** A parameter's value, up to `</parameter>` (or what comes next when it was left out). */
  private stepParameter(out: ParsedOutput[], final: boolean): boolean {
    const parameter = this.parameter!;
    if (!parameter.started) {
      if (this.pending === "" && !final) return false;
      // the template writes a newline after <parameter=NAME>
      if (this.pending.startsWith("\n")) this.pending = this.pending.slice(1);
      parameter.started = true;
    }
    let at = -1;
    let endTag = "";
    for (const tag of VALUE_ENDS) {
      const found = this.pending.indexOf(tag);
      if (found >= 0 && (at < 0 || found < at)) {
        at = found;
        endTag = tag;
      }
    }
    if (at >= 0 || final) {
      let value = at >= 0 ? this.pending.slice(0, at) : this.pending;
      // and a newline before </parameter>
      if (value.endsWith("\n")) value = value.slice(0, -1);
      this.addValue(out, value);
      this.closeParameter(out);
      this.pending = at < 0 ? "" : this.pending.slice(at + (endTag === PARAMETER_END ? PARAMETER_END.length : 0));
      this.state = "function";
      if (at < 0) {
        this.closeCall(out, true);
        return false;
      }
      return true;
    }
    // hold back a possible end tag, the newline before it, and half a surrogate pair
    let end = this.pending.length - Math.max(...VALUE_ENDS.map((tag) => partialTagLength(this.pending, tag)));
    if (end > 0 && this.pending[end - 1] === "\n") end--;
    if (end > 0 && isHighSurrogate(this.pending.charCodeAt(end - 1))) end--;
    this.addValue(out, this.pending.slice(0, end));
    this.pending = this.pending.slice(end);
    return false;
  }

  /** After `</function>`: `</tool_call>` ends the block; another `<function=` is another call. */
  private stepAfterFunction(out: ParsedOutput[], final: boolean): boolean {
    const space = leadingSpace(this.pending);
    const rest = this.pending.slice(space);
    if (rest.startsWith(TOOL_END)) {
      this.pending = rest.slice(TOOL_END.length);
      this.endBlock();
      return true;
    }
    const tag = readNamedTag(rest, FUNCTION_START);
    if (tag !== undefined && tag !== "wait") {
      this.pending = rest.slice(tag.length);
      this.openCall(out, tag.name);
      this.state = "function";
      return true;
    }
    if (!final && (rest === "" || tag === "wait" || AFTER_FUNCTION_TAGS.some((t) => couldStart(rest, t)))) return false;
    // </tool_call> left out: what follows is content
    this.pending = rest;
    this.endBlock();
    return !(final && rest === "");
  }

  private endBlock(): void {
    this.state = "content";
    this.atContentStart = true;
    this.mayOpenThink = false;
  }

  private openCall(out: ParsedOutput[], name: string): void {
    const index = this.toolCalls;
    const tool = this.tools?.find((t) => t.function.name === name);
    this.call = { index, name, tool, arguments: "", parameters: new Set(), warnings: [], strayText: false };
    this.mayOpenThink = false;
    out.push({ kind: "tool_call_start", index, name });
    if (this.tools && !tool) {
      this.warn("unknown_tool", `the model called ${JSON.stringify(name)}, which is not among the request's tools`);
    }
  }

  private closeCall(out: ParsedOutput[], unterminated: boolean): void {
    const call = this.call;
    if (!call) return;
    if (this.parameter) {
      this.addValue(out, "");
      this.closeParameter(out);
    }
    if (unterminated) this.warn("unterminated", `the output ended inside the call to ${call.name}`);
    if (this.format === "xml") this.emitArguments(out, call.arguments === "" ? "{}" : "}");
    this.toolCalls++;
    out.push({
      kind: "tool_call",
      index: call.index,
      name: call.name,
      arguments: call.arguments,
      warnings: call.warnings,
      ...(unterminated ? { cutOff: true as const } : {}),
    });
    this.call = undefined;
  }

  private openParameter(out: ParsedOutput[], name: string): void {
    const call = this.call!;
    const { schema, listed, known } = parameterSchema(call.tool, name);
    const types = schemaTypes(schema);
    if (call.parameters.has(name)) {
      this.warn("duplicate_parameter", `${call.name} got parameter ${name} twice`, name);
    } else if (listed && !known) {
      this.warn("unknown_parameter", `${call.name} has no parameter ${name} in its schema`, name);
    }
    call.parameters.add(name);
    const values = schemaValues(schema);
    // an enum's value is read whole (its text may be the value's JSON), any other string as it comes
    const streamed = isStringOnly(types) && values === undefined;
    this.parameter = { name, types, values, streamed, started: false, text: "" };
    this.emitArguments(out, `${call.arguments === "" ? "{" : ","}${JSON.stringify(name)}:${streamed ? '"' : ""}`);
  }

  private addValue(out: ParsedOutput[], text: string): void {
    const parameter = this.parameter!;
    if (parameter.streamed) {
      if (text !== "") this.emitArguments(out, JSON.stringify(text).slice(1, -1));
    } else {
      parameter.text += text;
    }
  }

  private closeParameter(out: ParsedOutput[]): void {
    const parameter = this.parameter!;
    this.parameter = undefined;
    if (parameter.streamed) {
      this.emitArguments(out, '"');
      return;
    }
    const coerced = coerceArgument(parameter.text, parameter.types, parameter.values);
    if (coerced.expected !== undefined) {
      this.warn(
        "argument_type",
        `parameter ${parameter.name} of ${this.call!.name} should be ${coerced.expected}, got ${JSON.stringify(parameter.text)}: passed on as a string`,
        parameter.name,
      );
    }
    this.emitArguments(out, JSON.stringify(coerced.value));
  }

  private warn(code: ToolCallWarningCode, message: string, parameter?: string): void {
    const call = this.call!;
    call.warnings.push({ index: call.index, name: call.name, ...(parameter === undefined ? {} : { parameter }), code, message });
  }

  private emitArguments(out: ParsedOutput[], text: string): void {
    const call = this.call!;
    call.arguments += text;
    const last = out[out.length - 1];
    if (last && last.kind === "tool_call_arguments" && last.index === call.index) last.text += text;
    else out.push({ kind: "tool_call_arguments", index: call.index, text });
  }

  private emitContent(out: ParsedOutput[], text: string, beforeBoundary: boolean): void {
    let value = text;
    if (this.atContentStart) value = value.trimStart();
    if (beforeBoundary && this.parseTools) value = value.trimEnd();
    if (value === "") return;
    this.atContentStart = false;
    this.emit(out, "content", value);
  }

  private emit(out: ParsedOutput[], kind: "reasoning" | "content", text: string): void {
    if (text === "") return;
    this.mayOpenThink = false;
    const last = out[out.length - 1];
    if (last && last.kind === kind) last.text += text;
    else out.push({ kind, text });
  }
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/** A whole output, parsed. */
export interface ParsedCompletion {
  reasoning: string;
  content: string;
  toolCalls: { name: string; arguments: string; warnings: ToolCallWarning[] }[];
}

/** Parses a complete output (what an OutputParser's parts add up to). */
export function parseOutput(text: string, options: OutputParserOptions): ParsedCompletion {
  const parser = new OutputParser(options);
  const result: ParsedCompletion = { reasoning: "", content: "", toolCalls: [] };
  for (const part of [...parser.push(text), ...parser.flush()]) {
    if (part.kind === "reasoning") result.reasoning += part.text;
    else if (part.kind === "content") result.content += part.text;
    else if (part.kind === "tool_call") result.toolCalls.push({ name: part.name, arguments: part.arguments, warnings: part.warnings });
  }
  return result;
}
