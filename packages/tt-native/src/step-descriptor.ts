/**
 * The step descriptor: what one native step computes, as one Int32Array. This module is its only
 * definition: the engine encodes with `encodeStepDescriptor`, and the native side reads the offsets
 * of src/model/step_descriptor.h, which is generated from the schema below
 * (`pnpm --filter @keepquant/tt-native gen:step`; a test fails when the header is stale).
 *
 * Layout: the header fields, then per entry its fields followed by its arrays (each as long as the
 * field named beside it).
 */
export const STEP_DESCRIPTOR = {
  header: ["kind", "entryCount"],
  entry: ["nTokens", "startPos", "stateSlot", "nLogitRows", "blockCount", "flags", "snapshotRow", "nRopePositions", "nEmbeddingRows"],
  /** after an entry's fields: [array, the entry field holding its length] */
  arrays: [
    ["tokens", "nTokens"],
    ["logitRows", "nLogitRows"],
    ["blockTable", "blockCount"],
    /** (t, h, w) rotary positions per row: 0 values (row i turns at startPos + i in all three) or 3 * nTokens */
    ["ropePositions", "nRopePositions"],
    /** ascending rows whose input is an embedding row (the step's embeddings argument, entry order) */
    ["embeddingRows", "nEmbeddingRows"],
  ],
  kinds: { trunk: 0, drafter: 1 },
  flags: { keepHidden: 1 },
} as const;

export type StepKind = keyof typeof STEP_DESCRIPTOR.kinds;

/** One sequence's share of a step, as the descriptor carries it. */
export interface StepDescriptorEntry {
  tokens: ArrayLike<number>;
  startPos: number;
  /** GDN state slot (-1 in a drafter step) */
  stateSlot: number;
  /** ascending rows of the chunk whose logits are wanted */
  logitRows: readonly number[];
  blockTable: readonly number[];
  /** keep every row's post-norm hidden state (trunk steps) */
  keepHidden: boolean;
  /** -1, or the row after which the slot's GDN state is copied to the snapshot planes (trunk steps) */
  snapshotRow: number;
  /**
   * (t, h, w) rotary positions of each row, 3 * tokens.length values (multimodal RoPE; trunk steps).
   * Absent: row i turns at startPos + i in all three. The KV position stays startPos + i.
   */
  ropePositions?: ArrayLike<number> | undefined;
  /**
   * Ascending rows of the chunk whose input is an embedding row instead of their token's (trunk
   * steps); the rows' values follow in the step's embeddings argument, in entry order.
   */
  embeddingRows?: readonly number[] | undefined;
}

const HEADER = STEP_DESCRIPTOR.header.length;
const FIELDS = STEP_DESCRIPTOR.entry.length;
const at = (field: (typeof STEP_DESCRIPTOR.entry)[number]): number => STEP_DESCRIPTOR.entry.indexOf(field);
const OFFSET = {
  nTokens: at("nTokens"),
  startPos: at("startPos"),
  stateSlot: at("stateSlot"),
  nLogitRows: at("nLogitRows"),
  blockCount: at("blockCount"),
  flags: at("flags"),
  snapshotRow: at("snapshotRow"),
  nRopePositions: at("nRopePositions"),
  nEmbeddingRows: at("nEmbeddingRows"),
};

/** Int32 values the descriptor of these entries takes. */
export function stepDescriptorLength(entries: readonly StepDescriptorEntry[]): number {
  let length = HEADER;
  for (const e of entries) {
    length += FIELDS + e.tokens.length + e.logitRows.length + e.blockTable.length;
    length += (e.ropePositions?.length ?? 0) + (e.embeddingRows?.length ?? 0);
  }
  return length;
}

/** Writes the descriptor into `out` (at least `stepDescriptorLength` long); returns its length. */
export function encodeStepDescriptor(kind: StepKind, entries: readonly StepDescriptorEntry[], out: Int32Array): number {
  out[STEP_DESCRIPTOR.header.indexOf("kind")] = STEP_DESCRIPTOR.kinds[kind];
  out[STEP_DESCRIPTOR.header.indexOf("entryCount")] = entries.length;
  let p = HEADER;
  for (const e of entries) {
    out[p + OFFSET.nTokens] = e.tokens.length;
    out[p + OFFSET.startPos] = e.startPos;
    out[p + OFFSET.stateSlot] = e.stateSlot;
    out[p + OFFSET.nLogitRows] = e.logitRows.length;
    out[p + OFFSET.blockCount] = e.blockTable.length;
    out[p + OFFSET.flags] = e.keepHidden ? STEP_DESCRIPTOR.flags.keepHidden : 0;
    out[p + OFFSET.snapshotRow] = e.snapshotRow;
    const rope = e.ropePositions;
    const embeddingRows = e.embeddingRows ?? [];
    out[p + OFFSET.nRopePositions] = rope?.length ?? 0;
    out[p + OFFSET.nEmbeddingRows] = embeddingRows.length;
    p += FIELDS;
    // the arrays, in the schema's order
    for (let i = 0; i < e.tokens.length; i++) out[p++] = e.tokens[i]!;
    for (const r of e.logitRows) out[p++] = r;
    for (const b of e.blockTable) out[p++] = b;
    if (rope) for (let i = 0; i < rope.length; i++) out[p++] = rope[i]!;
    for (const r of embeddingRows) out[p++] = r;
  }
  return p;
}

const constant = (prefix: string, name: string): string => `k${prefix}${name[0]!.toUpperCase()}${name.slice(1)}`;

/** The C++ header the native step reads the descriptor with (src/model/step_descriptor.h). */
export function renderStepDescriptorHeader(): string {
  const d = STEP_DESCRIPTOR;
  const lines = [
    "// Generated from src/step-descriptor.ts (STEP_DESCRIPTOR) by scripts/gen-step-descriptor.ts: do not edit.",
    "// The step descriptor's layout: the header fields, then per entry its fields and its arrays",
    `// (${d.arrays.map(([a, n]) => `${a}[${n}]`).join(", ")}).`,
    "#pragma once",
    "",
    "namespace kq::step {",
    "",
    ...d.header.map((f, i) => `constexpr int ${constant("Header", f)} = ${i};`),
    `constexpr int kHeaderLength = ${d.header.length};`,
    ...d.entry.map((f, i) => `constexpr int ${constant("Entry", f)} = ${i};`),
    `constexpr int kEntryLength = ${d.entry.length};`,
    ...Object.entries(d.kinds).map(([k, v]) => `constexpr int ${constant("Kind", k)} = ${v};`),
    ...Object.entries(d.flags).map(([k, v]) => `constexpr int ${constant("Flag", k)} = ${v};`),
    "",
    "}  // namespace kq::step",
    "",
  ];
  return lines.join("\n");
}
