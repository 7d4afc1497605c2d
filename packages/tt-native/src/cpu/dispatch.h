// Run-time selection of the kernel level (generic, avx2, avx512, neon).
#pragma once

#include <string>
#include <vector>

#include "cpu/kernels.h"

namespace kq {

enum class IsaLevel : int { Generic = 0, Avx2 = 1, Avx512 = 2, Neon = 3 };

const char* isaName(IsaLevel level);
// Levels this CPU (and build) can run, best last.
std::vector<IsaLevel> availableIsaLevels();
IsaLevel bestIsaLevel();
IsaLevel currentIsaLevel();
// Select a level by name; returns an empty string on success, else why it cannot be used.
std::string selectIsaLevel(const std::string& name);

// The current level's kernels (KernelSet in kernels.h): kernels().type[t] is type t's CpuTypeTraits.
const KernelSet& kernels();
// The kernels of `level` when this CPU runs it, else the current level's.
const KernelSet& kernelsAt(IsaLevel level);
bool isaAvailable(IsaLevel level);

}  // namespace kq
