export * from "./ggml-type.js";
export * from "./value-type.js";
export * from "./errors.js";
export * from "./limits.js";
export type * from "./types.js";
export { BufferSource, FileSource, type GgufByteSource } from "./source.js";
export { readGguf, readTensorBytes, GGUF_MAGIC, GGUF_DEFAULT_ALIGNMENT, type ReadGgufOptions } from "./reader.js";
export {
  writeGguf,
  encodeGgufHeader,
  tensorByteLength,
  gguf,
  ggufValueByteSize,
  type GgufTensorHeader,
  type GgufWriteTensor,
  type GgufWriteInput,
  type EncodedGgufHeader,
} from "./writer.js";
export { getMetadata, getMetadataEntry, getArchitecture } from "./metadata.js";
