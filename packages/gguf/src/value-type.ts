/** GGUF metadata value types; ids exactly as the GGUF specification. */
export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** Encoded size of each fixed-size type (STRING and ARRAY are variable: 0). */
export const GGUF_VALUE_TYPE_SIZE: Readonly<Record<GgufValueType, number>> = {
  [GgufValueType.UINT8]: 1,
  [GgufValueType.INT8]: 1,
  [GgufValueType.UINT16]: 2,
  [GgufValueType.INT16]: 2,
  [GgufValueType.UINT32]: 4,
  [GgufValueType.INT32]: 4,
  [GgufValueType.FLOAT32]: 4,
  [GgufValueType.BOOL]: 1,
  [GgufValueType.STRING]: 0,
  [GgufValueType.ARRAY]: 0,
  [GgufValueType.UINT64]: 8,
  [GgufValueType.INT64]: 8,
  [GgufValueType.FLOAT64]: 8,
};

const VALUE_TYPE_NAMES: Readonly<Record<GgufValueType, string>> = {
  [GgufValueType.UINT8]: "u8",
  [GgufValueType.INT8]: "i8",
  [GgufValueType.UINT16]: "u16",
  [GgufValueType.INT16]: "i16",
  [GgufValueType.UINT32]: "u32",
  [GgufValueType.INT32]: "i32",
  [GgufValueType.FLOAT32]: "f32",
  [GgufValueType.BOOL]: "bool",
  [GgufValueType.STRING]: "str",
  [GgufValueType.ARRAY]: "arr",
  [GgufValueType.UINT64]: "u64",
  [GgufValueType.INT64]: "i64",
  [GgufValueType.FLOAT64]: "f64",
};

export function isGgufValueType(id: number): id is GgufValueType {
  return Number.isInteger(id) && id >= 0 && id <= 12;
}

export function ggufValueTypeName(type: GgufValueType): string {
  return VALUE_TYPE_NAMES[type];
}
