#include "cpu/dispatch.h"

#include <atomic>
#include <cstring>
#include <mutex>

namespace kq {
namespace {

uint64_t sumWordsGeneric(const uint8_t* p, size_t words) {
  uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= words; i += 8) {
    uint64_t v[8];
    std::memcpy(v, p + 8 * i, 64);
    for (int j = 0; j < 8; ++j) a[j] += v[j];
  }
  for (; i < words; ++i) {
    uint64_t v;
    std::memcpy(&v, p + 8 * i, 8);
    a[0] += v;
  }
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

float dotF32Generic(int n, const float* x, const float* w) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += x[i] * w[i];
  return s;
}

bool cpuHasAvx2() {
#if defined(KEEPQUANT_X86)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("bmi2");
#else
  return false;
#endif
}

bool cpuHasAvx512() {
#if defined(KEEPQUANT_X86)
  return cpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

KernelSet gSets[4];
std::once_flag gInit;
std::atomic<int> gLevel{0};

void initSets() {
  for (int l = 0; l < 4; ++l) {
    for (int t = 0; t < kTypeCount; ++t) {
      gSets[l].vecDot[t] = genericVecDot(t);
      gSets[l].vecDotMulti[t] = nullptr;
      gSets[l].multiRows[t] = kMultiRows;
      gSets[l].vecDotRows[t] = nullptr;
      gSets[l].weightRows[t] = 1;
      gSets[l].vecDotBlock[t] = nullptr;
    }
    gSets[l].dotF32 = dotF32Generic;
    gSets[l].dequant = dequantizeRow;
    gSets[l].sumWords = sumWordsGeneric;
  }
#if defined(KEEPQUANT_X86)
  // Only enter an ISA's translation unit on a CPU that runs it: even its table-filling code may be
  // compiled to AVX2 / AVX-512 instructions.
  if (cpuHasAvx2()) {
    KernelSet& k = gSets[(int)IsaLevel::Avx2];
    fillAvx2VecDot(k.vecDot, k.vecDotMulti);
    k.dotF32 = avx2DotF32();
    k.dequant = avx2Dequant();
    k.sumWords = avx2SumWords();
  }
  if (cpuHasAvx512()) {
    KernelSet& k = gSets[(int)IsaLevel::Avx512];
    fillAvx512VecDot(k.vecDot, k.vecDotMulti, k.multiRows, k.vecDotRows, k.weightRows, k.vecDotBlock);
    k.dotF32 = avx512DotF32();
    k.dequant = avx512Dequant();
    k.sumWords = avx2SumWords();
  }
#endif
#if defined(KEEPQUANT_ARM64)
  fillNeonVecDot(gSets[(int)IsaLevel::Neon].vecDot);
#endif
  gLevel.store((int)bestIsaLevel());
}

}  // namespace

const char* isaName(IsaLevel level) {
  switch (level) {
    case IsaLevel::Generic: return "generic";
    case IsaLevel::Avx2: return "avx2";
    case IsaLevel::Avx512: return "avx512";
    case IsaLevel::Neon: return "neon";
  }
  return "generic";
}

std::vector<IsaLevel> availableIsaLevels() {
  std::vector<IsaLevel> out{IsaLevel::Generic};
  if (cpuHasAvx2()) out.push_back(IsaLevel::Avx2);
  if (cpuHasAvx512()) out.push_back(IsaLevel::Avx512);
  return out;
}

IsaLevel bestIsaLevel() { return availableIsaLevels().back(); }

IsaLevel currentIsaLevel() {
  std::call_once(gInit, initSets);
  return (IsaLevel)gLevel.load();
}

std::string selectIsaLevel(const std::string& name) {
  std::call_once(gInit, initSets);
  IsaLevel wanted;
  if (name == "generic") wanted = IsaLevel::Generic;
  else if (name == "avx2") wanted = IsaLevel::Avx2;
  else if (name == "avx512") wanted = IsaLevel::Avx512;
  else if (name == "neon") wanted = IsaLevel::Neon;
  else if (name == "best" || name.empty()) wanted = bestIsaLevel();
  else return "unknown ISA level '" + name + "' (valid: generic, avx2, avx512, neon, best)";
  for (IsaLevel l : availableIsaLevels()) {
    if (l == wanted) {
      gLevel.store((int)wanted);
      return "";
    }
  }
  if (wanted == IsaLevel::Neon) return "ISA level 'neon' has no kernels in this build (arm64 runs generic)";
  return std::string("ISA level '") + isaName(wanted) + "' is not supported by this CPU";
}

const KernelSet& kernels() {
  std::call_once(gInit, initSets);
  return gSets[gLevel.load()];
}

}  // namespace kq
