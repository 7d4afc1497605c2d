// The grouped (E = N) matmul of the MoE FFN: the selected experts' matrices of one step, each over the
// rows that chose it, as one task list and one parallel dispatch (ggml's mul_mat_id groups rows by
// expert the same way). Each job is a matmulLlamaRows (cpu/matmul.h) and gives the same bits as one.
#pragma once

#include "cpu/matmul.h"

namespace kq {

// Runs every job (any count) in one parallel dispatch; each job's rows are split into tasks as
// matmulLlamaRowsBatch splits them, so y is bit-identical to running the jobs one by one.
void matmulGrouped(const LlamaRowsJob* jobs, int count);

}  // namespace kq
