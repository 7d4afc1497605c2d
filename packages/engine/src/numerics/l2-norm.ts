const fround = Math.fround;

/**
 * llama.cpp's L2 norm of `n` values of `y` from `offset`, in place, as this llama.cpp build computes the qwen35 GDN's
 * q and k norms: an RMS norm with `eps / n` (a f64 sum of f32 squares, the mean rounded to f32, `1 / sqrtf(mean +
 * eps / n)`), then a scale by `1 / sqrt(n)`, each product rounded to f32. `x / sqrt(sum + eps)` is the same value
 * mathematically but not bit for bit: on the real 0.8B shape (n = 128) it differed in half the elements, and a Q8_0
 * model's greedy tokens left llama.cpp's at the seventh. tt-native's model.cc computes the same.
 */
export function l2NormInPlace(y: Float32Array, offset: number, n: number, eps: number): void {
  let sum = 0;
  for (let i = 0; i < n; i++) sum += fround(y[offset + i]! * y[offset + i]!);
  const scale = fround(1 / fround(Math.sqrt(fround(fround(sum / n) + fround(eps / n)))));
  const invSqrtN = fround(1 / Math.sqrt(n));
  for (let i = 0; i < n; i++) y[offset + i] = fround(y[offset + i]! * scale) * invSqrtN;
}
