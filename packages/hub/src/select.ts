import { HubError } from "./errors.js";
import { DEFAULT_QUANT } from "./reference.js";

/** A file of a repository, as the tree listing gives it. */
export interface RepoFile {
  /** Path inside the repository. */
  path: string;
  size: number;
  /** The LFS sha256 (64 hex digits) for LFS files. */
  sha256?: string | undefined;
  /** The git blob id (sha1) of the file. */
  gitOid?: string | undefined;
}

/** One model of a repository: one GGUF file, or the shards of a split GGUF in order. */
export interface ModelGroup {
  /** The file name without the shard suffix (`Qwen3.5-27B-Q4_K_M.gguf`), with its folder. */
  name: string;
  /** The quant read from the name (`Q4_K_M`, `UD-Q4_K_XL`, `BF16`), when there is one. */
  quant: string | undefined;
  files: string[];
}

/** What a reference picks: the model (all its shards) and the companions that go with it. */
export interface ModelSelection {
  model: ModelGroup;
  /** The vision projector (`mmproj-*.gguf`), when the repository has one. */
  mmproj: string | undefined;
  /** A separate MTP drafter GGUF (`*mtp*.gguf`), when the repository has one. */
  mtp: string | undefined;
}

/** `-00001-of-00003.gguf`: the suffix of a split GGUF's shard (llama.cpp's `gguf-split` naming). */
const SHARD = /-(\d{5})-of-(\d{5})\.gguf$/i;
/** A quant name at the end of a file stem: `Q4_K_M`, `IQ4_XS`, `UD-Q4_K_XL`, `Q8_0`, `BF16`, `F16`, `MXFP4_MOE`. */
const QUANT_AT_END = /(?:^|[-._])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|[BM]?F(?:16|32)|MXFP4(?:_MOE)?|TQ\d_\d))$/i;

const baseName = (file: string): string => file.slice(file.lastIndexOf("/") + 1);
const isGguf = (file: string): boolean => /\.gguf$/i.test(file);
/** Vision projectors and separate MTP drafters are companions, never the model itself. */
const isMmproj = (file: string): boolean => /^mmproj/i.test(baseName(file));
const isMtp = (file: string): boolean => /(^|[-._])mtp([-._]|$)/i.test(baseName(file).replace(/\.gguf$/i, ""));

/** The quant a GGUF file name carries (`Qwen3.5-0.8B-Q4_K_M.gguf` -> `Q4_K_M`), or undefined. */
export function quantOfFileName(file: string): string | undefined {
  const stem = baseName(file)
    .replace(SHARD, ".gguf")
    .replace(/\.gguf$/i, "");
  const match = QUANT_AT_END.exec(stem);
  return match ? match[1]!.toUpperCase() : undefined;
}

/** The models of a repository: its GGUF files less the companions, shards of one split model grouped in order. */
export function modelGroups(files: readonly string[]): ModelGroup[] {
  const groups = new Map<string, string[]>();
  for (const file of files) {
    if (!isGguf(file) || isMmproj(file) || isMtp(file)) continue;
    const name = file.replace(SHARD, ".gguf");
    groups.set(name, [...(groups.get(name) ?? []), file]);
  }
  return [...groups.entries()]
    .map(([name, shards]) => ({ name, quant: quantOfFileName(name), files: shards.sort() }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

/** True when `tag` stands in `name` as a whole word (case-insensitive; `Q4_K` does not match `Q4_K_M`). */
function containsTag(name: string, tag: string): boolean {
  const escaped = tag.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(`(^|[^A-Za-z0-9_])${escaped}([^A-Za-z0-9_]|$)`, "i").test(baseName(name));
}

function describeGroups(groups: readonly ModelGroup[]): string {
  if (groups.length === 0) return "it has no GGUF model files";
  return `it has: ${groups
    .map((g) => `${g.quant ?? baseName(g.name)}${g.files.length > 1 ? ` (${g.files.length} shards)` : ""}`)
    .join(", ")}`;
}

/**
 * Picks the model a quant tag or file name names among `files`, as llama.cpp's `-hf` does: a tag ending in
 * `.gguf` is a file (or the first shard's name, or the group's name); otherwise the tag is matched
 * case-insensitively as a whole word in the file names, Q4_K_M when there is none (and the only model when the
 * repository has one). An exact quant match wins over a mere mention. No match is HUB_NO_MATCHING_FILE, two are
 * HUB_AMBIGUOUS_FILE; both list what the repository has.
 */
export function selectModel(repo: string, files: readonly string[], tag: string | undefined): ModelSelection {
  const groups = modelGroups(files);
  let picked: ModelGroup[];
  if (tag !== undefined && isGguf(tag)) {
    picked = groups.filter(
      (g) => g.name === tag || g.files.includes(tag) || baseName(g.name) === tag || g.files.some((f) => baseName(f) === tag),
    );
  } else {
    const wanted = tag ?? DEFAULT_QUANT;
    picked = groups.filter((g) => containsTag(g.name, wanted));
    const exact = picked.filter((g) => g.quant === wanted.toUpperCase());
    if (exact.length > 0) picked = exact;
    if (picked.length === 0 && tag === undefined && groups.length === 1) picked = groups;
  }
  const named = tag ?? `the default ${DEFAULT_QUANT}`;
  if (picked.length === 0) {
    throw new HubError("HUB_NO_MATCHING_FILE", `${repo} has no model file matching ${named}: ${describeGroups(groups)}`, { field: repo });
  }
  if (picked.length > 1) {
    throw new HubError(
      "HUB_AMBIGUOUS_FILE",
      `${repo}: ${named} matches ${picked.length} models (${picked.map((g) => g.name).join(", ")}); name one file, e.g. hf:${repo}:${baseName(picked[0]!.files[0]!)}`,
      { field: repo },
    );
  }
  const model = picked[0]!;
  const companion = (candidates: string[]): string | undefined => {
    const sorted = [...candidates].sort();
    return (
      sorted.find((f) => model.quant !== undefined && containsTag(f, model.quant)) ??
      sorted.find((f) => containsTag(f, "F16")) ??
      sorted.find((f) => containsTag(f, "BF16")) ??
      sorted[0]
    );
  };
  return {
    model,
    mmproj: companion(files.filter((f) => isGguf(f) && isMmproj(f))),
    mtp: companion(files.filter((f) => isGguf(f) && isMtp(f))),
  };
}
