#include "core/threadpool.h"

#include "core/profile.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define KQ_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define KQ_PAUSE() asm volatile("yield")
#else
#define KQ_PAUSE() ((void)0)
#endif

namespace kq {
namespace {

// How long an idle worker spins before it sleeps. Jobs of one forward step follow each other within
// microseconds; between steps the JS thread samples and schedules, and the workers go to sleep.
constexpr auto kSpin = std::chrono::microseconds(100);
// Pause iterations the caller spins on unfinished tasks before it starts yielding its core (on an
// oversubscribed machine the thread it waits for may need that core).
constexpr int kCallerSpins = 2000;
// Polls an idle worker spins on pause alone before each further poll also yields its core: when the
// machine has fewer free cores than threads, the thread that has work (often the caller, on the same
// core) runs instead of a spinning worker.
constexpr int kWorkerPureSpins = 256;
// The contention guard. A job "stalls" when the caller, its own share done, waits for another thread's
// task much longer than a task takes: longer than kStallTasks times the caller's own mean task time,
// and at least kMinStall (that thread was descheduled: the machine is oversubscribed). A long wait on
// its own is not a stall: prefill's tasks last a millisecond or more, and the last one of a job
// routinely finishes a task's length after the caller's (an earlier rule, a fixed spin count, took
// that for contention and ran every prefill single-threaded). Each stall adds kStallWeight to a score
// and each clean job takes 1 off; past kStallLimit the pool runs the next kSoloJobs jobs on the calling
// thread alone (the workers go to sleep and free their cores), then tries again with every thread. A
// quiet machine never stalls, so it never goes solo; results never depend on which threads ran the tasks.
constexpr int kStallTasks = 4;
constexpr auto kMinStall = std::chrono::microseconds(200);
constexpr int kStallWeight = 8;
constexpr int kStallLimit = 64;
constexpr int kSoloJobs = 2048;

thread_local bool tInsideTask = false;

// Tests only (poolStress): called by a worker between seeing a new job and claiming from it (kind 0), and
// by the caller between publishing a job's callable and its claim word (kind 1). Null outside poolStress
// (acquired, so that the settings poolStress wrote before setting it are seen; on x86 a plain load).
std::atomic<void (*)(int kind)> gPauseHook{nullptr};

// Tasks are claimed through one 64-bit word, (job generation << 32) | tasks not yet claimed, counted
// down (task index = the job's task count - that count), so a worker that wakes late for an old job can
// never claim a task of a newer one. What a task needs besides that word (the job's callable and task
// count) is read only after a successful claim: the job cannot end before that task is done, so the
// caller cannot have replaced them.
// (An earlier pool handed workers the callable and the task count with the generation, before the
// claim: a worker descheduled between reading the generation and the claim word could read the next
// job's callable and count against the previous job's exhausted claim word, run a task of the next job
// before its claim word was set, and count it done there, so that job's caller returned while one of
// its tasks was still running. tests: poolStress in pool.test.ts opens that window on purpose.)
// The caller waits for its job's tasks to finish, not for every worker to check in: a worker
// descheduled by the OS does not hold the job up when the other threads have already taken all its
// tasks.
struct Pool {
  std::mutex jobMutex;  // serializes jobs and reconfiguration
  std::mutex sleepMutex;
  std::condition_variable wake;
  std::vector<std::thread> workers;
  std::atomic<uint32_t> generation{0};
  std::atomic<uint64_t> claim{0};
  std::atomic<int> done{0};
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::atomic<int> total{0};  // threads incl. caller; 0 = not started
  // The running job's callable and task count: written by the caller before it publishes the job's claim
  // word and only between jobs; read by a thread only after it claimed a task of that job.
  std::atomic<const TaskRef*> task{nullptr};
  std::atomic<int> tasks{0};
  std::atomic<uint64_t> jobs{0}, inlineJobs{0}, waitNs{0}, stalledJobs{0}, soloJobs{0};
  int stallScore = 0;  // under jobMutex
  int soloLeft = 0;    // jobs still to run solo (under jobMutex)

  // Claims and runs tasks of job `g` until none is left (or a newer job has replaced it); returns how
  // many this thread ran.
  int work(uint32_t g) {
    int ran = 0;
    for (;;) {
      uint64_t c = claim.load(std::memory_order_acquire);
      if ((uint32_t)(c >> 32) != g || (uint32_t)c == 0) return ran;
      if (!claim.compare_exchange_weak(c, c - 1, std::memory_order_acq_rel)) continue;
      // a task of job g is ours, and job g lasts until it is done: its callable and count are current.
      // Tasks go out in ascending order, as they always did (a thread's next row block tends to follow
      // its last one in memory).
      (*task.load(std::memory_order_relaxed))(tasks.load(std::memory_order_relaxed) - (int)(uint32_t)c);
      ++ran;
      done.fetch_add(1, std::memory_order_release);
    }
  }

  void workerLoop(uint32_t seen) {
    tInsideTask = true;
    for (;;) {
      auto start = std::chrono::steady_clock::now();
      int polls = 0;
      while (generation.load(std::memory_order_acquire) == seen && !stop.load(std::memory_order_acquire)) {
        KQ_PAUSE();
        if (++polls > kWorkerPureSpins) std::this_thread::yield();
        if (polls % 64 == 0 && std::chrono::steady_clock::now() - start > kSpin) {
          std::unique_lock<std::mutex> lock(sleepMutex);
          sleepers.fetch_add(1);
          wake.wait(lock, [&] { return generation.load(std::memory_order_acquire) != seen || stop.load(); });
          sleepers.fetch_sub(1);
          break;
        }
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = generation.load(std::memory_order_acquire);
      if (auto hook = gPauseHook.load(std::memory_order_acquire)) hook(0);
      work(seen);
    }
  }

  void start(int n) {
    total.store(n < 1 ? 1 : n);
    stop.store(false);
    const uint32_t now = generation.load(std::memory_order_acquire);
    for (int i = 0; i < total.load() - 1; ++i) workers.emplace_back([this, now] { workerLoop(now); });
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(sleepMutex);
      stop.store(true);
    }
    wake.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
    total.store(0);
  }

  void run(int n, const TaskRef& fn) {
    if (tInsideTask) {  // nested: inline
      for (int t = 0; t < n; ++t) fn(t);
      return;
    }
    std::lock_guard<std::mutex> jobLock(jobMutex);
    if (total.load() == 0) start(hardwareThreads());
    tInsideTask = true;
    if (workers.empty() || n <= 1) {
      inlineJobs.fetch_add(1, std::memory_order_relaxed);
      for (int t = 0; t < n; ++t) fn(t);
      tInsideTask = false;
      return;
    }
    if (soloLeft > 0) {  // the contention guard: the calling thread alone for a while
      --soloLeft;
      soloJobs.fetch_add(1, std::memory_order_relaxed);
      for (int t = 0; t < n; ++t) fn(t);
      tInsideTask = false;
      return;
    }
    const uint32_t g = generation.load(std::memory_order_relaxed) + 1;
    task.store(&fn, std::memory_order_relaxed);
    tasks.store(n, std::memory_order_relaxed);
    done.store(0, std::memory_order_relaxed);
    if (auto hook = gPauseHook.load(std::memory_order_acquire)) hook(1);
    claim.store(((uint64_t)g << 32) | (uint32_t)n, std::memory_order_release);
    generation.store(g, std::memory_order_release);
    if (sleepers.load() > 0) {
      std::lock_guard<std::mutex> lock(sleepMutex);
      wake.notify_all();
    }
    jobs.fetch_add(1, std::memory_order_relaxed);
    const auto workStart = std::chrono::steady_clock::now();
    const int ran = work(g);
    const auto waitStart = std::chrono::steady_clock::now();
    bool stalled = false;
    bool yielded = false;
    for (int spins = 0; done.load(std::memory_order_acquire) < n; ++spins) {
      if (spins < kCallerSpins) {
        KQ_PAUSE();
      } else {
        yielded = true;
        std::this_thread::yield();
      }
    }
    const auto waitEnd = std::chrono::steady_clock::now();
    if (yielded) {
      const auto ns = [](std::chrono::steady_clock::duration d) { return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
      stalled = isContentionStall(ns(waitEnd - waitStart), ns(waitStart - workStart), ran);
    }
    if (stalled) {
      stalledJobs.fetch_add(1, std::memory_order_relaxed);
      stallScore += kStallWeight;
      if (stallScore > kStallLimit) {
        stallScore = 0;
        soloLeft = kSoloJobs;
      }
    } else if (stallScore > 0) {
      --stallScore;
    }
    if (profileCounters().on.load(std::memory_order_relaxed))
      waitNs.fetch_add((uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(waitEnd - waitStart).count(), std::memory_order_relaxed);
    tInsideTask = false;
  }

  ~Pool() { shutdown(); }
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: workers must not be joined during static teardown
  return *p;
}

}  // namespace

bool isContentionStall(double waitedNs, double callerWorkNs, int callerTasks) {
  const double minStallNs = (double)std::chrono::duration_cast<std::chrono::nanoseconds>(kMinStall).count();
  const double meanTaskNs = callerWorkNs / (callerTasks > 0 ? callerTasks : 1);
  return waitedNs > minStallNs && waitedNs > meanTaskNs * kStallTasks;
}

int hardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : (int)n;
}

void runParallel(int tasks, TaskRef task) { pool().run(tasks, task); }

namespace {
std::atomic<int64_t> gPauses{0};
std::atomic<int64_t> gPauseCalls{0};
int gPauseEvery = 0;
int gPauseUs = 0;
void stressPause(int kind) {
  if (gPauseCalls.fetch_add(1, std::memory_order_relaxed) % gPauseEvery != 0) return;
  gPauses.fetch_add(1, std::memory_order_relaxed);
  std::this_thread::sleep_for(std::chrono::microseconds(kind == 0 ? gPauseUs : gPauseUs / 2));
}
}  // namespace

PoolStressResult poolStress(int jobs, int pauseEvery, int pauseUs) {
  constexpr int kMaxTasks = 64;
  std::atomic<int> runs[kMaxTasks];
  std::atomic<int64_t> executions{0};
  PoolStressResult r{0, 0, 0, 0, 0};
  gPauseEvery = pauseEvery > 0 ? pauseEvery : 1;
  gPauseUs = pauseUs > 0 ? pauseUs : 0;
  gPauses.store(0);
  gPauseCalls.store(0);
  if (pauseEvery > 0) gPauseHook.store(stressPause);
  for (int j = 0; j < jobs; ++j) {
    // task counts that rise and fall (a job with more tasks than the one before is what a stale worker
    // could mistake for unclaimed work)
    const int n = 1 + (int)(((uint32_t)j * 2654435761u) >> 26);
    for (int t = 0; t < n; ++t) runs[t].store(0, std::memory_order_relaxed);
    parallelFor(n, [&](int t) {
      for (int spin = 0; spin < 64; ++spin) KQ_PAUSE();  // a task lasts a little while
      runs[t].fetch_add(1, std::memory_order_relaxed);
      executions.fetch_add(1, std::memory_order_relaxed);
    });
    for (int t = 0; t < n; ++t)
      if (runs[t].load(std::memory_order_relaxed) != 1) ++r.wrongTasks;
    r.tasks += n;
    ++r.jobs;
  }
  gPauseHook.store(nullptr);
  r.executions = executions.load();
  r.pauses = gPauses.load();
  return r;
}

PoolStats poolStats() {
  Pool& p = pool();
  return PoolStats{p.jobs.load(), p.inlineJobs.load(), p.waitNs.load(), p.stalledJobs.load(), p.soloJobs.load()};
}

void resetPoolStats() {
  Pool& p = pool();
  p.jobs.store(0);
  p.inlineJobs.store(0);
  p.waitNs.store(0);
  p.stalledJobs.store(0);
  p.soloJobs.store(0);
}

void setThreadCount(int n) {
  Pool& p = pool();
  std::lock_guard<std::mutex> jobLock(p.jobMutex);
  p.shutdown();
  p.start(n <= 0 ? hardwareThreads() : n);
}

int threadCount() {
  Pool& p = pool();
  int n = p.total.load();
  if (n != 0) return n;
  std::lock_guard<std::mutex> jobLock(p.jobMutex);
  if (p.total.load() == 0) p.start(hardwareThreads());
  return p.total.load();
}

}  // namespace kq
