/**
 * ggml tensor types. Ids are exactly those of ggml.h in the oracle build
 * (@node-llama-cpp/linux-x64@3.22.1, llama.cpp tag v0.5.0). Retired ids keep their slot and are
 * never reused; they are listed as comments so nobody hands them out again.
 */
export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  // 4: Q4_2 (retired)
  // 5: Q4_3 (retired)
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  // 31: Q4_0_4_4 (retired, repacking moved to run time)
  // 32: Q4_0_4_8 (retired)
  // 33: Q4_0_8_8 (retired)
  TQ1_0 = 34,
  TQ2_0 = 35,
  // 36: IQ4_NL_4_4 (retired)
  // 37: IQ4_NL_4_8 (retired)
  // 38: IQ4_NL_8_8 (retired)
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
}

/**
 * The per-type facts every other list of types derives from (the one table of the TypeScript side;
 * the native addon has its own, checked against this one by tt-native's tests).
 */
export interface GgmlTypeTraits {
  readonly name: string;
  /** Block geometry: `blockSize` elements are stored in `typeSize` bytes. */
  readonly blockSize: number;
  readonly typeSize: number;
  readonly isQuantized: boolean;
  /**
   * ggml-cpu's `vec_dot_type` (type_traits_cpu): the encoding llama.cpp's CPU backend quantizes
   * the activations to for a matmul against weights of this type. Absent where ggml-cpu has no
   * vec_dot for the type (Q8_1 and Q8_K are activation encodings only; integer and f64 types).
   */
  readonly vecDotType?: GgmlType;
  /** The keep-quant contract registers this encoding (DESIGN.md): Q4_K, Q5_K, Q6_K and Q8_0. */
  readonly keepQuantRegistered: boolean;
}

/**
 * One entry per type id; a new GgmlType member without an entry is a compile error.
 * (blockSize, typeSize) as ggml's type_traits table; bits per weight = 8 * typeSize / blockSize;
 * vecDotType as ggml-cpu's type_traits_cpu of the oracle build.
 */
export const GGML_TYPE_TRAITS: Readonly<Record<GgmlType, GgmlTypeTraits>> = {
  [GgmlType.F32]: { name: "F32", blockSize: 1, typeSize: 4, isQuantized: false, vecDotType: GgmlType.F32, keepQuantRegistered: false },
  [GgmlType.F16]: { name: "F16", blockSize: 1, typeSize: 2, isQuantized: false, vecDotType: GgmlType.F16, keepQuantRegistered: false },
  [GgmlType.Q4_0]: { name: "Q4_0", blockSize: 32, typeSize: 18, isQuantized: true, vecDotType: GgmlType.Q8_0, keepQuantRegistered: false },
  [GgmlType.Q4_1]: { name: "Q4_1", blockSize: 32, typeSize: 20, isQuantized: true, vecDotType: GgmlType.Q8_1, keepQuantRegistered: false },
  [GgmlType.Q5_0]: { name: "Q5_0", blockSize: 32, typeSize: 22, isQuantized: true, vecDotType: GgmlType.Q8_0, keepQuantRegistered: false },
  [GgmlType.Q5_1]: { name: "Q5_1", blockSize: 32, typeSize: 24, isQuantized: true, vecDotType: GgmlType.Q8_1, keepQuantRegistered: false },
  [GgmlType.Q8_0]: { name: "Q8_0", blockSize: 32, typeSize: 34, isQuantized: true, vecDotType: GgmlType.Q8_0, keepQuantRegistered: true },
  [GgmlType.Q8_1]: { name: "Q8_1", blockSize: 32, typeSize: 36, isQuantized: true, keepQuantRegistered: false },
  [GgmlType.Q2_K]: { name: "Q2_K", blockSize: 256, typeSize: 84, isQuantized: true, vecDotType: GgmlType.Q8_K, keepQuantRegistered: false },
  [GgmlType.Q3_K]: {
    name: "Q3_K",
    blockSize: 256,
    typeSize: 110,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.Q4_K]: { name: "Q4_K", blockSize: 256, typeSize: 144, isQuantized: true, vecDotType: GgmlType.Q8_K, keepQuantRegistered: true },
  [GgmlType.Q5_K]: { name: "Q5_K", blockSize: 256, typeSize: 176, isQuantized: true, vecDotType: GgmlType.Q8_K, keepQuantRegistered: true },
  [GgmlType.Q6_K]: { name: "Q6_K", blockSize: 256, typeSize: 210, isQuantized: true, vecDotType: GgmlType.Q8_K, keepQuantRegistered: true },
  [GgmlType.Q8_K]: { name: "Q8_K", blockSize: 256, typeSize: 292, isQuantized: true, keepQuantRegistered: false },
  [GgmlType.IQ2_XXS]: {
    name: "IQ2_XXS",
    blockSize: 256,
    typeSize: 66,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.IQ2_XS]: {
    name: "IQ2_XS",
    blockSize: 256,
    typeSize: 74,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.IQ3_XXS]: {
    name: "IQ3_XXS",
    blockSize: 256,
    typeSize: 98,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.IQ1_S]: {
    name: "IQ1_S",
    blockSize: 256,
    typeSize: 50,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.IQ4_NL]: {
    name: "IQ4_NL",
    blockSize: 32,
    typeSize: 18,
    isQuantized: true,
    vecDotType: GgmlType.Q8_0,
    keepQuantRegistered: false,
  },
  [GgmlType.IQ3_S]: {
    name: "IQ3_S",
    blockSize: 256,
    typeSize: 110,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.IQ2_S]: {
    name: "IQ2_S",
    blockSize: 256,
    typeSize: 82,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.IQ4_XS]: {
    name: "IQ4_XS",
    blockSize: 256,
    typeSize: 136,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.I8]: { name: "I8", blockSize: 1, typeSize: 1, isQuantized: false, keepQuantRegistered: false },
  [GgmlType.I16]: { name: "I16", blockSize: 1, typeSize: 2, isQuantized: false, keepQuantRegistered: false },
  [GgmlType.I32]: { name: "I32", blockSize: 1, typeSize: 4, isQuantized: false, keepQuantRegistered: false },
  [GgmlType.I64]: { name: "I64", blockSize: 1, typeSize: 8, isQuantized: false, keepQuantRegistered: false },
  [GgmlType.F64]: { name: "F64", blockSize: 1, typeSize: 8, isQuantized: false, keepQuantRegistered: false },
  [GgmlType.IQ1_M]: {
    name: "IQ1_M",
    blockSize: 256,
    typeSize: 56,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.BF16]: { name: "BF16", blockSize: 1, typeSize: 2, isQuantized: false, vecDotType: GgmlType.BF16, keepQuantRegistered: false },
  [GgmlType.TQ1_0]: {
    name: "TQ1_0",
    blockSize: 256,
    typeSize: 54,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.TQ2_0]: {
    name: "TQ2_0",
    blockSize: 256,
    typeSize: 66,
    isQuantized: true,
    vecDotType: GgmlType.Q8_K,
    keepQuantRegistered: false,
  },
  [GgmlType.MXFP4]: {
    name: "MXFP4",
    blockSize: 32,
    typeSize: 17,
    isQuantized: true,
    vecDotType: GgmlType.Q8_0,
    keepQuantRegistered: false,
  },
  [GgmlType.NVFP4]: {
    name: "NVFP4",
    blockSize: 64,
    typeSize: 36,
    isQuantized: true,
    vecDotType: GgmlType.Q8_0,
    keepQuantRegistered: false,
  },
  [GgmlType.Q1_0]: { name: "Q1_0", blockSize: 128, typeSize: 18, isQuantized: true, vecDotType: GgmlType.Q8_0, keepQuantRegistered: false },
  [GgmlType.Q2_0]: { name: "Q2_0", blockSize: 64, typeSize: 18, isQuantized: true, vecDotType: GgmlType.Q8_0, keepQuantRegistered: false },
};

const TYPE_BY_NAME: ReadonlyMap<string, GgmlType> = new Map(
  (Object.keys(GGML_TYPE_TRAITS) as unknown as string[]).map((id) => {
    const type = Number(id) as GgmlType;
    return [GGML_TYPE_TRAITS[type].name, type] as const;
  }),
);

/** True when `id` is a live ggml type id (retired and unknown ids are false). */
export function isGgmlType(id: number): id is GgmlType {
  return Number.isInteger(id) && Object.hasOwn(GGML_TYPE_TRAITS, id);
}

export function ggmlTypeName(type: GgmlType): string {
  return GGML_TYPE_TRAITS[type].name;
}

/** ggml's name of a type id from outside (a caller's argument): `Q4_K`, or `<unknown ggml type id 4>`. */
export function ggmlTypeLabel(id: number): string {
  return isGgmlType(id) ? GGML_TYPE_TRAITS[id].name : `<unknown ggml type id ${id}>`;
}

export function ggmlTypeFromName(name: string): GgmlType | undefined {
  return TYPE_BY_NAME.get(name);
}

export function ggmlTypeTraits(type: GgmlType): GgmlTypeTraits {
  return GGML_TYPE_TRAITS[type];
}

/** Bytes of one row of `elements` values; undefined when the row is not a whole number of blocks. */
export function ggmlRowBytes(type: GgmlType, elements: number): number | undefined {
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
  if (elements % blockSize !== 0) return undefined;
  return (elements / blockSize) * typeSize;
}

/** Every live type id, ascending. */
export const GGML_TYPES: readonly GgmlType[] = Object.freeze(
  (Object.keys(GGML_TYPE_TRAITS) as string[]).map((id) => Number(id) as GgmlType).sort((a, b) => a - b),
);

/** ggml-cpu's vec_dot_type of a weight type (see GgmlTypeTraits.vecDotType), or undefined. */
export function ggmlVecDotType(type: GgmlType): GgmlType | undefined {
  return GGML_TYPE_TRAITS[type].vecDotType;
}
