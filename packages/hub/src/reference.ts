import { HubError } from "./errors.js";

/** `hf:<owner>/<repo>[:<quant or file>][@<revision>]`, parsed. */
export interface HubReference {
  /** `owner/repo`. */
  repo: string;
  /** The quant tag (`Q4_K_M`) or file name (`model-Q8_0.gguf`, also a path inside the repository); undefined: Q4_K_M. */
  tag: string | undefined;
  /** A branch, tag or commit; `main` when the reference names none. */
  revision: string;
}

export const HUB_PREFIX = "hf:";
/** The quant picked when the reference names none, as llama.cpp's `-hf` does. */
export const DEFAULT_QUANT = "Q4_K_M";

/** Owner and repository names as the Hub allows them: letters, digits, `-`, `_`, `.`; no `--` or `..`, at most 96. */
const NAME = /^(?!.*(--|\.\.))[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/;
/** A revision: a branch or tag name, or a commit; no spaces or `..`. */
const REVISION = /^(?!.*\.\.)[A-Za-z0-9._/-]{1,255}$/;

/** True for a string that is meant as an `hf:` reference (it may still fail to parse). */
export function isHubReference(text: string): boolean {
  return text.startsWith(HUB_PREFIX);
}

/** Parses `hf:owner/repo[:tag][@revision]`; a HubError HUB_BAD_REFERENCE naming the part that is wrong. */
export function parseHubReference(text: string): HubReference {
  const bad = (why: string): HubError =>
    new HubError("HUB_BAD_REFERENCE", `bad model reference "${text}": ${why} (expected hf:<owner>/<repo>[:<quant or file>][@<revision>])`, {
      field: text,
    });
  if (!isHubReference(text)) throw bad(`it does not start with ${HUB_PREFIX}`);
  let rest = text.slice(HUB_PREFIX.length);
  let revision = "main";
  const at = rest.lastIndexOf("@");
  if (at >= 0) {
    revision = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!REVISION.test(revision)) throw bad(`"${revision}" is not a revision (a branch, tag or commit)`);
  }
  const colon = rest.indexOf(":");
  const repo = colon >= 0 ? rest.slice(0, colon) : rest;
  const tag = colon >= 0 ? rest.slice(colon + 1) : undefined;
  const parts = repo.split("/");
  if (parts.length !== 2) throw bad(`"${repo}" is not <owner>/<repo>`);
  for (const part of parts) if (!NAME.test(part)) throw bad(`"${part}" is not a valid owner or repository name`);
  if (tag !== undefined && (tag.length === 0 || /\.\.|^\/|[\s\\]/.test(tag))) throw bad(`"${tag}" is not a quant tag or file name`);
  return { repo, tag, revision };
}

/** The canonical text of a reference (`hf:owner/repo:tag@revision`; `@main` left out). */
export function formatHubReference(reference: HubReference): string {
  return `${HUB_PREFIX}${reference.repo}${reference.tag === undefined ? "" : `:${reference.tag}`}${
    reference.revision === "main" ? "" : `@${reference.revision}`
  }`;
}
