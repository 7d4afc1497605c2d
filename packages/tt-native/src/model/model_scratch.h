// Generated from @keepquant/gguf's SCRATCH_SCHEMA by scripts/gen-model.ts (src/model-slots.ts): do not edit.
// The layer loop's activation scratch per batch row: X(buffer, ModelHparams member holding its width), for the
// trunk and for each registered kind (the TypeScript forward allocates the same buffers).
#pragma once

#define KQ_SCRATCH_TRUNK(X) X(hidden, nEmbd) X(normed, nEmbd) X(branch, nEmbd)
#define KQ_SCRATCH_MIXER_ATTENTION(X) X(qg, qDim) X(q, attnOutDim) X(kRows, kvDim) X(vRows, kvDim) X(attnOut, attnOutDim)
#define KQ_SCRATCH_MIXER_GDN(X) X(mixed, convDim) X(convOut, convDim) X(zRows, ssmInnerSize) X(betaRows, ssmTimeStepRank) X(alphaRows, ssmTimeStepRank) X(gdnOut, ssmInnerSize)
#define KQ_SCRATCH_MIXER_ATTENTION_UNGATED(X)
#define KQ_SCRATCH_FFN_DENSE(X) X(ffnGate, nFf) X(ffnUp, nFf)
#define KQ_SCRATCH_FFN_MOE(X)
#define KQ_SCRATCH_FFN_DENSE_FFN_NORM(X)
