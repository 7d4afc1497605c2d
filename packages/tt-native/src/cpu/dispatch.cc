#include "cpu/dispatch.h"

#include <atomic>
#include <cstring>
#include <mutex>

namespace kq {
namespace {

bool cpuHasAvx2() {
#if defined(KEEPQUANT_X86)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("bmi2");
#else
  return false;
#endif
}

bool cpuHasAvx512() {
#if defined(KEEPQUANT_X86) && defined(KQ_EMULATE_AVX512)
  return cpuHasAvx2();  // the tests' build: the AVX-512 kernels emulated with AVX2 (src/cpu/x86/simde_avx512.h)
#elif defined(KEEPQUANT_X86)
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
  for (KernelSet& k : gSets) k = genericKernels();
#if defined(KEEPQUANT_X86)
  // Only enter an ISA's translation unit on a CPU that runs it: even returning its table may be
  // compiled to AVX2 / AVX-512 instructions.
  if (cpuHasAvx2()) gSets[(int)IsaLevel::Avx2] = avx2Kernels();
  if (cpuHasAvx512()) {
    gSets[(int)IsaLevel::Avx512] = avx512Kernels();
    gSets[(int)IsaLevel::Avx512].sumWords = gSets[(int)IsaLevel::Avx2].sumWords;
  }
#endif
#if defined(KEEPQUANT_ARM64)
  gSets[(int)IsaLevel::Neon] = neonKernels();
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

bool isaAvailable(IsaLevel level) {
  for (IsaLevel l : availableIsaLevels())
    if (l == level) return true;
  return false;
}

const KernelSet& kernelsAt(IsaLevel level) {
  std::call_once(gInit, initSets);
  const int l = (int)level;
  // a level this CPU does not run holds the generic kernels (initSets): never an illegal instruction
  return l >= 0 && l < 4 ? gSets[l] : gSets[gLevel.load()];
}

void quantizeActRow(int actType, const float* x, void* dst, int64_t k) {
  if (typeTraits(actType).blockSize == 0) return;
  const FromFloatFn quantize = kernels().type[actType].from_float;
  if (quantize) quantize(x, dst, k);
}

size_t actRowBytes(int actType, int64_t k) { return rowBytes(actType, k); }

bool dequantSupported(int type) { return typeTraits(type).blockSize != 0 && kernels().type[type].to_float != nullptr; }

}  // namespace kq
