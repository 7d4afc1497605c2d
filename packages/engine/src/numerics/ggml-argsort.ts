/**
 * ggml_argsort (descending) as llama.cpp's CPU backend computes it: the indices 0..n-1 sorted by
 * `values[a] > values[b]` with C++'s `std::sort`, which ggml-cpu calls (ops.cpp,
 * ggml_compute_forward_argsort_f32). `std::sort` is not stable: equal values come out in the order
 * its algorithm leaves them, so a tie between router scores picks what that algorithm picks, not the
 * lower index. This is libstdc++'s algorithm (the C++ library of llama.cpp's Linux builds and of our
 * addon) step for step: an introsort loop (median of three moved to the front, an unguarded
 * partition, a heap sort below a depth of 2 floor(log2 n)) down to runs of 16, then one insertion
 * sort. For n <= 16 it is a plain insertion sort, which is stable.
 */

const THRESHOLD = 16;

/** `order` (n indices) sorted as `std::sort(order, order + n, [&](a, b) { return values[a] > values[b]; })`. */
export function ggmlArgsortDesc(values: ArrayLike<number>, order: Int32Array, n = order.length): void {
  const less = (a: number, b: number): boolean => values[a]! > values[b]!;
  const swap = (i: number, j: number): void => {
    const t = order[i]!;
    order[i] = order[j]!;
    order[j] = t;
  };

  const pushHeap = (first: number, hole: number, top: number, value: number): void => {
    let parent = Math.trunc((hole - 1) / 2);
    while (hole > top && less(order[first + parent]!, value)) {
      order[first + hole] = order[first + parent]!;
      hole = parent;
      parent = Math.trunc((hole - 1) / 2);
    }
    order[first + hole] = value;
  };
  const adjustHeap = (first: number, holeIndex: number, len: number, value: number): void => {
    const top = holeIndex;
    let hole = holeIndex;
    let child = holeIndex;
    while (child < Math.trunc((len - 1) / 2)) {
      child = 2 * (child + 1);
      if (less(order[first + child]!, order[first + child - 1]!)) child--;
      order[first + hole] = order[first + child]!;
      hole = child;
    }
    if ((len & 1) === 0 && child === Math.trunc((len - 2) / 2)) {
      child = 2 * (child + 1);
      order[first + hole] = order[first + child - 1]!;
      hole = child - 1;
    }
    pushHeap(first, hole, top, value);
  };
  const heapSort = (first: number, last: number): void => {
    const len = last - first;
    if (len >= 2) {
      for (let parent = Math.trunc((len - 2) / 2); ; parent--) {
        adjustHeap(first, parent, len, order[first + parent]!);
        if (parent === 0) break;
      }
    }
    while (last - first > 1) {
      last--;
      const value = order[last]!;
      order[last] = order[first]!;
      adjustHeap(first, 0, last - first, value);
    }
  };
  const medianToFirst = (result: number, a: number, b: number, c: number): void => {
    const A = order[a]!;
    const B = order[b]!;
    const C = order[c]!;
    if (less(A, B)) {
      if (less(B, C)) swap(result, b);
      else if (less(A, C)) swap(result, c);
      else swap(result, a);
    } else if (less(A, C)) swap(result, a);
    else if (less(B, C)) swap(result, c);
    else swap(result, b);
  };
  const unguardedPartition = (first: number, last: number, pivot: number): number => {
    for (;;) {
      while (less(order[first]!, order[pivot]!)) first++;
      last--;
      while (less(order[pivot]!, order[last]!)) last--;
      if (!(first < last)) return first;
      swap(first, last);
      first++;
    }
  };
  const introsortLoop = (first: number, last: number, depth: number): void => {
    while (last - first > THRESHOLD) {
      if (depth === 0) {
        heapSort(first, last);
        return;
      }
      depth--;
      const mid = first + Math.trunc((last - first) / 2);
      medianToFirst(first, first + 1, mid, last - 1);
      const cut = unguardedPartition(first + 1, last, first);
      introsortLoop(cut, last, depth);
      last = cut;
    }
  };
  const unguardedLinearInsert = (at: number): void => {
    const value = order[at]!;
    let next = at - 1;
    while (less(value, order[next]!)) {
      order[at] = order[next]!;
      at = next;
      next--;
    }
    order[at] = value;
  };
  const insertionSort = (first: number, last: number): void => {
    if (first === last) return;
    for (let i = first + 1; i < last; i++) {
      if (less(order[i]!, order[first]!)) {
        const value = order[i]!;
        order.copyWithin(first + 1, first, i);
        order[first] = value;
      } else unguardedLinearInsert(i);
    }
  };

  for (let i = 0; i < n; i++) order[i] = i;
  if (n < 2) return;
  introsortLoop(0, n, 2 * (31 - Math.clz32(n)));
  if (n > THRESHOLD) {
    insertionSort(0, THRESHOLD);
    for (let i = THRESHOLD; i < n; i++) unguardedLinearInsert(i);
  } else insertionSort(0, n);
}
