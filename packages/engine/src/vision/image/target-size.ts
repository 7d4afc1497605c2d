/**
 * The size an image is resized to before the vision encoder: llama.cpp's `calc_size_preserved_ratio`
 * (transformers' `smart_resize`) with `longest_edge` unset, as the QWEN3VL preprocessor calls it.
 *
 * The rule (all arithmetic in f32, as llama.cpp does it; `align = patchSize * spatialMerge`):
 * 1. round each side to the nearest multiple of `align` (halves away from zero), at least `align`;
 * 2. if that area exceeds `maxPixels`: `beta = sqrt(h * w / maxPixels)`, each side becomes
 *    `floor(side / beta / align) * align`, at least `align`;
 * 3. else if the area is below `minPixels`: `beta = sqrt(minPixels / (h * w))`, each side becomes
 *    `ceil(side * beta / align) * align`.
 * Step 2 and 3 start from the original sides, not the rounded ones. The result can still miss the budget
 * by the rounding of step 2/3 (llama.cpp does not iterate), and we match it.
 */
const f32 = Math.fround;

export interface ImageSize {
  width: number;
  height: number;
}

export interface TargetSizeOptions {
  /** Side multiple of the result: `patchSize * spatialMerge`. */
  alignSize: number;
  /** 0 disables the lower bound. */
  minPixels: number;
  /** 0 disables the upper bound. */
  maxPixels: number;
}

/** C's `static_cast<int>(std::round(x))` for the positive, in-range f32 values met here. */
function roundHalfAway(x: number): number {
  return x < 0 ? -Math.round(-x) : Math.round(x);
}

export function targetSize(width: number, height: number, options: TargetSizeOptions): ImageSize {
  const align = options.alignSize;
  if (!Number.isInteger(align) || align <= 0) {
    throw new RangeError(`alignSize must be a positive integer (got ${align})`);
  }
  if (width <= 0 || height <= 0) return { width: 0, height: 0 };
  const alignF = f32(align);
  const roundBy = (x: number) => roundHalfAway(f32(f32(x) / alignF)) * align;
  const ceilBy = (x: number) => Math.ceil(f32(f32(x) / alignF)) * align;
  const floorBy = (x: number) => Math.floor(f32(f32(x) / alignF)) * align;

  let wBar = Math.max(align, roundBy(width));
  let hBar = Math.max(align, roundBy(height));
  const area = f32(f32(height) * f32(width));
  if (options.maxPixels > 0 && hBar * wBar > options.maxPixels) {
    const beta = f32(Math.sqrt(f32(area / f32(options.maxPixels))));
    hBar = Math.max(align, floorBy(f32(height / beta)));
    wBar = Math.max(align, floorBy(f32(width / beta)));
  } else if (options.minPixels > 0 && hBar * wBar < options.minPixels) {
    const beta = f32(Math.sqrt(f32(f32(options.minPixels) / area)));
    hBar = ceilBy(f32(height * beta));
    wBar = ceilBy(f32(width * beta));
  }
  return { width: wBar, height: hBar };
}
