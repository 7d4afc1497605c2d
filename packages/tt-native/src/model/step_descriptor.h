// Generated from src/step-descriptor.ts (STEP_DESCRIPTOR) by scripts/gen-step-descriptor.ts: do not edit.
// The step descriptor's layout: the header fields, then per entry its fields and its arrays
// (tokens[nTokens], logitRows[nLogitRows], blockTable[blockCount], ropePositions[nRopePositions], embeddingRows[nEmbeddingRows]).
#pragma once

namespace kq::step {

constexpr int kHeaderKind = 0;
constexpr int kHeaderEntryCount = 1;
constexpr int kHeaderLength = 2;
constexpr int kEntryNTokens = 0;
constexpr int kEntryStartPos = 1;
constexpr int kEntryStateSlot = 2;
constexpr int kEntryNLogitRows = 3;
constexpr int kEntryBlockCount = 4;
constexpr int kEntryFlags = 5;
constexpr int kEntrySnapshotRow = 6;
constexpr int kEntryNRopePositions = 7;
constexpr int kEntryNEmbeddingRows = 8;
constexpr int kEntryLength = 9;
constexpr int kKindTrunk = 0;
constexpr int kKindDrafter = 1;
constexpr int kFlagKeepHidden = 1;

}  // namespace kq::step
