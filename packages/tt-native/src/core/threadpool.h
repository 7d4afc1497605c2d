// Persistent worker pool. One job at a time (callers are serialized); the calling thread works too.
// Work is handed out as task indices; a task's result never depends on which thread ran it.
// Workers spin briefly between jobs (a forward step issues hundreds of short jobs back to back),
// yielding their core after a few polls, then sleep; a job costs no allocation. On an oversubscribed
// machine a contention guard runs jobs on the calling thread alone for a while (threadpool.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

namespace kq {

// A non-owning reference to a callable `void(int task)`, valid for the duration of one job.
class TaskRef {
 public:
  template <typename F>
  TaskRef(F& fn) : object_(&fn), call_([](void* o, int task) { (*static_cast<F*>(o))(task); }) {}
  void operator()(int task) const { call_(object_, task); }

 private:
  void* object_;
  void (*call_)(void*, int);
};

// Run task(t) for t in [0, tasks). Blocks until all tasks finished. Called from inside a task it
// runs the tasks inline (no nested parallelism).
void runParallel(int tasks, TaskRef task);

template <typename F>
inline void parallelFor(int tasks, F&& fn) {
  runParallel(tasks, TaskRef(fn));
}

// Jobs dispatched to the workers since the last reset, and the nanoseconds the calling thread waited
// for other threads after finishing its own share (counted while profiling is on: core/profile.h).
struct PoolStats {
  uint64_t jobs;
  uint64_t inlineJobs;  // run on the calling thread alone (one task, or no workers)
  uint64_t waitNs;
  uint64_t stalledJobs;  // the caller waited for a descheduled thread (the contention guard counts them)
  uint64_t soloJobs;     // run on the calling thread alone by the contention guard
};
PoolStats poolStats();

// The contention guard's rule (threadpool.cc): the caller, its own `callerTasks` tasks done in
// `callerWorkNs`, then waited `waitedNs` for the other threads. A stall (a descheduled thread) is a
// wait far longer than one of its tasks took and at least the guard's minimum; an uneven split of long
// tasks (prefill) is not.
bool isContentionStall(double waitedNs, double callerWorkNs, int callerTasks);
void resetPoolStats();

// Tests only: `jobs` jobs of 1 to 64 tasks each (the counts rising and falling), every task counting its
// runs, through the pool as it is configured. With `pauseEvery` > 0, every pauseEvery-th time a worker
// picks up a job or a caller publishes one, it sleeps first (`pauseUs`, the caller half of it): the windows
// an OS that deschedules a thread opens. A correct pool has every task of every job run exactly once
// before its job returns (wrongTasks 0, executions == tasks).
struct PoolStressResult {
  int64_t jobs;
  int64_t tasks;
  int64_t wrongTasks;  // a task that had not run, or had run twice, when its job returned
  int64_t executions;  // task runs in all, counted after the last job
  int64_t pauses;
};
PoolStressResult poolStress(int jobs, int pauseEvery, int pauseUs);

// Total threads used by parallelFor (workers + caller). n <= 0 means hardware concurrency.
void setThreadCount(int n);
int threadCount();
int hardwareThreads();

// fn(i) for i in [0, items), split into about 4 contiguous tasks per thread of at least `minPerTask`
// items each (inline when that is one task). Each item runs once, so results do not depend on the split.
template <typename F>
inline void parallelRange(int items, int minPerTask, F&& fn) {
  const int byThreads = threadCount() * 4;
  const int bySize = std::max(1, items / std::max(1, minPerTask));
  const int tasks = std::max(1, std::min({items, byThreads, bySize}));
  if (tasks <= 1) {
    for (int i = 0; i < items; ++i) fn(i);
    return;
  }
  parallelFor(tasks, [&](int t) {
    const int i0 = (int)((int64_t)items * t / tasks);
    const int i1 = (int)((int64_t)items * (t + 1) / tasks);
    for (int i = i0; i < i1; ++i) fn(i);
  });
}

}  // namespace kq
