import { GgmlType } from "@keepquant/gguf";

/**
 * Byte offsets of the f16 scale fields inside one block of each format that has them (Q8_K keeps an
 * f32 d, MXFP4 an E8M0 byte). Tests and benchmarks use it to plant chosen scales in random blocks.
 */
export const F16_SCALE_FIELDS: Readonly<Partial<Record<GgmlType, readonly number[]>>> = {
  [GgmlType.Q4_0]: [0],
  [GgmlType.Q4_1]: [0, 2],
  [GgmlType.Q5_0]: [0],
  [GgmlType.Q5_1]: [0, 2],
  [GgmlType.Q8_0]: [0],
  [GgmlType.Q2_K]: [80, 82],
  [GgmlType.Q3_K]: [108],
  [GgmlType.Q4_K]: [0, 2],
  [GgmlType.Q5_K]: [0, 2],
  [GgmlType.Q6_K]: [208],
  [GgmlType.IQ4_NL]: [0],
  [GgmlType.IQ4_XS]: [0],
};
