/**
 * The weight bytes one decoded token reads, from a GGUF file's tensor table: every trunk tensor once,
 * except the routed experts (`*_exps`: a token reads `expert_used_count` of `expert_count` experts'
 * slices), the token embedding when the head is a separate tensor (one row is read) and the MTP block
 * (`blk.{n_layer}`: not read by plain decoding). For a dense file this is the file's weights minus
 * those two; for qwen35moe it is routed experts + shared expert + router + attention/GDN weights + head.
 */
import { readGguf } from "@keepquant/gguf";

export interface ActiveBytes {
  /** Bytes read per decoded token. */
  perToken: number;
  /** Of which: the routed experts' share. */
  routedExperts: number;
  /** Of which: the head (output.weight, or the tied token_embd). */
  head: number;
}

export async function activeBytesPerToken(file: string): Promise<ActiveBytes> {
  const gguf = await readGguf(file);
  const arch = String(gguf.metadata.get("general.architecture")?.value ?? "");
  const number = (key: string): number | undefined => {
    const v = gguf.metadata.get(`${arch}.${key}`)?.value;
    return typeof v === "number" || typeof v === "bigint" ? Number(v) : undefined;
  };
  const blocks = number("block_count") ?? 0;
  const trunk = blocks - (number("nextn_predict_layers") ?? 0);
  const experts = number("expert_count") ?? 0;
  const used = number("expert_used_count") ?? 0;
  const untied = gguf.tensors.some((t) => t.name === "output.weight");
  let perToken = 0;
  let routedExperts = 0;
  let head = 0;
  for (const t of gguf.tensors) {
    const layer = /^blk\.(\d+)\./.exec(t.name);
    if (layer && Number(layer[1]) >= trunk) continue; // the MTP block
    if (t.name === "token_embd.weight") {
      const row = t.byteLength / (t.ne[1] ?? 1);
      if (untied) perToken += row;
      else {
        perToken += t.byteLength;
        head += t.byteLength;
      }
      continue;
    }
    if (t.name === "output.weight") head += t.byteLength;
    if (/_exps(\.weight)?$/.test(t.name) && experts > 0) {
      const share = (t.byteLength * used) / experts;
      routedExperts += share;
      perToken += share;
      continue;
    }
    perToken += t.byteLength;
  }
  return { perToken, routedExperts, head };
}
