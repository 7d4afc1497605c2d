// Generated from src/model-hparams.ts (NATIVE_HPARAMS, from @keepquant/gguf's MODEL_DIM_SCHEMA) by
// scripts/gen-model.ts: do not edit.
// The native model's hyperparameters, in the order they cross N-API (one Float64Array).
#pragma once

#include <cstdint>

namespace kq {

struct ModelHparams {
  int nEmbd = 0;  // hparams.nEmbd
  int nVocab = 0;  // hparams.nVocab
  int nFf = 0;  // hparams.nFf
  int nHead = 0;  // hparams.nHead
  int nHeadKv = 0;  // hparams.nHeadKv
  int headDim = 0;  // hparams.headDim
  int nRot = 0;  // hparams.nRot
  int qDim = 0;  // hparams.qDim
  int kvDim = 0;  // hparams.kvDim
  int attnOutDim = 0;  // hparams.attnOutDim
  int convKernel = 0;  // hparams.convKernel
  int ssmStateSize = 0;  // hparams.ssmStateSize
  int ssmGroupCount = 0;  // hparams.ssmGroupCount
  int ssmTimeStepRank = 0;  // hparams.nHeadV
  int keyDim = 0;  // hparams.keyDim
  int ssmInnerSize = 0;  // hparams.valueDim
  int convDim = 0;  // hparams.convDim
  int headVDim = 0;  // hparams.headVDim
  int ehProjIn = 0;  // hparams.ehProjIn
  int64_t convStateElements = 0;  // hparams.convStateElements
  int64_t ssmStateElements = 0;  // hparams.ssmStateElements
  int nExpert = 0;  // hparams.nExpert
  int nExpertUsed = 0;  // hparams.nExpertUsed
  int nFfExp = 0;  // hparams.nFfExp
  int nFfExpGateUp = 0;  // hparams.nFfExpGateUp
  int nFfShexp = 0;  // hparams.nFfShexp
  int one = 0;  // hparams.one
  int drafterVocab = 0;  // hparams.drafterVocab
  float eps = 0;  // hparams.eps
  float ropeThetaScale = 0;  // hparams.ropeThetaScale
};

namespace hparams {

constexpr int kNEmbd = 0;
constexpr int kNVocab = 1;
constexpr int kNFf = 2;
constexpr int kNHead = 3;
constexpr int kNHeadKv = 4;
constexpr int kHeadDim = 5;
constexpr int kNRot = 6;
constexpr int kQDim = 7;
constexpr int kKvDim = 8;
constexpr int kAttnOutDim = 9;
constexpr int kConvKernel = 10;
constexpr int kSsmStateSize = 11;
constexpr int kSsmGroupCount = 12;
constexpr int kNHeadV = 13;
constexpr int kKeyDim = 14;
constexpr int kValueDim = 15;
constexpr int kConvDim = 16;
constexpr int kHeadVDim = 17;
constexpr int kEhProjIn = 18;
constexpr int kConvStateElements = 19;
constexpr int kSsmStateElements = 20;
constexpr int kNExpert = 21;
constexpr int kNExpertUsed = 22;
constexpr int kNFfExp = 23;
constexpr int kNFfExpGateUp = 24;
constexpr int kNFfShexp = 25;
constexpr int kOne = 26;
constexpr int kDrafterVocab = 27;
constexpr int kEps = 28;
constexpr int kRopeThetaScale = 29;
constexpr int kCount = 30;

enum class Kind { Int, Int64, Float };
// One value of the array: its name (hparams.<name> in errors), how it is stored, its least value.
struct Field {
  const char* name;
  Kind kind;
  int min;
  int ModelHparams::*integer;
  int64_t ModelHparams::*wide;
  float ModelHparams::*real;
};
inline constexpr Field kFields[kCount] = {
    {"nEmbd", Kind::Int, 1, &ModelHparams::nEmbd, nullptr, nullptr},
    {"nVocab", Kind::Int, 1, &ModelHparams::nVocab, nullptr, nullptr},
    {"nFf", Kind::Int, 1, &ModelHparams::nFf, nullptr, nullptr},
    {"nHead", Kind::Int, 1, &ModelHparams::nHead, nullptr, nullptr},
    {"nHeadKv", Kind::Int, 1, &ModelHparams::nHeadKv, nullptr, nullptr},
    {"headDim", Kind::Int, 1, &ModelHparams::headDim, nullptr, nullptr},
    {"nRot", Kind::Int, 0, &ModelHparams::nRot, nullptr, nullptr},
    {"qDim", Kind::Int, 1, &ModelHparams::qDim, nullptr, nullptr},
    {"kvDim", Kind::Int, 1, &ModelHparams::kvDim, nullptr, nullptr},
    {"attnOutDim", Kind::Int, 1, &ModelHparams::attnOutDim, nullptr, nullptr},
    {"convKernel", Kind::Int, 0, &ModelHparams::convKernel, nullptr, nullptr},
    {"ssmStateSize", Kind::Int, 0, &ModelHparams::ssmStateSize, nullptr, nullptr},
    {"ssmGroupCount", Kind::Int, 0, &ModelHparams::ssmGroupCount, nullptr, nullptr},
    {"nHeadV", Kind::Int, 0, &ModelHparams::ssmTimeStepRank, nullptr, nullptr},
    {"keyDim", Kind::Int, 0, &ModelHparams::keyDim, nullptr, nullptr},
    {"valueDim", Kind::Int, 0, &ModelHparams::ssmInnerSize, nullptr, nullptr},
    {"convDim", Kind::Int, 0, &ModelHparams::convDim, nullptr, nullptr},
    {"headVDim", Kind::Int, 0, &ModelHparams::headVDim, nullptr, nullptr},
    {"ehProjIn", Kind::Int, 0, &ModelHparams::ehProjIn, nullptr, nullptr},
    {"convStateElements", Kind::Int64, 0, nullptr, &ModelHparams::convStateElements, nullptr},
    {"ssmStateElements", Kind::Int64, 0, nullptr, &ModelHparams::ssmStateElements, nullptr},
    {"nExpert", Kind::Int, 0, &ModelHparams::nExpert, nullptr, nullptr},
    {"nExpertUsed", Kind::Int, 0, &ModelHparams::nExpertUsed, nullptr, nullptr},
    {"nFfExp", Kind::Int, 0, &ModelHparams::nFfExp, nullptr, nullptr},
    {"nFfExpGateUp", Kind::Int, 0, &ModelHparams::nFfExpGateUp, nullptr, nullptr},
    {"nFfShexp", Kind::Int, 0, &ModelHparams::nFfShexp, nullptr, nullptr},
    {"one", Kind::Int, 1, &ModelHparams::one, nullptr, nullptr},
    {"drafterVocab", Kind::Int, 1, &ModelHparams::drafterVocab, nullptr, nullptr},
    {"eps", Kind::Float, 0, nullptr, nullptr, &ModelHparams::eps},
    {"ropeThetaScale", Kind::Float, 0, nullptr, nullptr, &ModelHparams::ropeThetaScale},
};

}  // namespace hparams
}  // namespace kq
