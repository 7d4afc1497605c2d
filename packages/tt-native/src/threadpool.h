// Persistent worker pool. One job at a time (callers are serialized); the calling thread works too.
// Work is handed out as task indices; a task's result never depends on which thread ran it.
#pragma once

#include <functional>

namespace kq {

// Run fn(task) for task in [0, tasks). Blocks until all tasks finished.
void parallelFor(int tasks, const std::function<void(int)>& fn);
// Total threads used by parallelFor (workers + caller). n <= 0 means hardware concurrency.
void setThreadCount(int n);
int threadCount();
int hardwareThreads();

}  // namespace kq
