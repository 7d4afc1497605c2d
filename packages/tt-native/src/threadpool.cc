#include "threadpool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
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
constexpr auto kSpin = std::chrono::microseconds(200);

thread_local bool tInsideTask = false;

struct Pool {
  std::mutex jobMutex;  // serializes jobs and reconfiguration
  std::mutex sleepMutex;
  std::condition_variable wake;
  std::vector<std::thread> workers;
  std::atomic<unsigned long> generation{0};
  std::atomic<int> next{0};
  std::atomic<int> busyWorkers{0};
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::atomic<int> total{0};  // threads incl. caller; 0 = not started
  const TaskRef* task = nullptr;
  int tasks = 0;

  void drain(const TaskRef& fn, int n) {
    for (int t = next.fetch_add(1, std::memory_order_relaxed); t < n; t = next.fetch_add(1, std::memory_order_relaxed)) fn(t);
  }

  void workerLoop() {
    tInsideTask = true;
    unsigned long seen = generation.load(std::memory_order_acquire);
    for (;;) {
      // spin, then sleep, until a new job (or stop) is published
      auto start = std::chrono::steady_clock::now();
      int polls = 0;
      while (generation.load(std::memory_order_acquire) == seen && !stop.load(std::memory_order_acquire)) {
        KQ_PAUSE();
        if (++polls % 64 == 0 && std::chrono::steady_clock::now() - start > kSpin) {
          std::unique_lock<std::mutex> lock(sleepMutex);
          sleepers.fetch_add(1);
          wake.wait(lock, [&] { return generation.load(std::memory_order_acquire) != seen || stop.load(); });
          sleepers.fetch_sub(1);
          break;
        }
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = generation.load(std::memory_order_acquire);
      drain(*task, tasks);
      busyWorkers.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void start(int n) {
    total.store(n < 1 ? 1 : n);
    stop.store(false);
    for (int i = 0; i < total.load() - 1; ++i) workers.emplace_back([this] { workerLoop(); });
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
    if (workers.empty() || n <= 1) {
      tInsideTask = true;
      for (int t = 0; t < n; ++t) fn(t);
      tInsideTask = false;
      return;
    }
    task = &fn;
    tasks = n;
    next.store(0, std::memory_order_relaxed);
    busyWorkers.store((int)workers.size(), std::memory_order_relaxed);
    generation.fetch_add(1, std::memory_order_acq_rel);
    if (sleepers.load() > 0) {
      std::lock_guard<std::mutex> lock(sleepMutex);
      wake.notify_all();
    }
    tInsideTask = true;
    drain(fn, n);
    tInsideTask = false;
    while (busyWorkers.load(std::memory_order_acquire) != 0) KQ_PAUSE();
    task = nullptr;
  }

  ~Pool() { shutdown(); }
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: workers must not be joined during static teardown
  return *p;
}

}  // namespace

int hardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : (int)n;
}

void runParallel(int tasks, TaskRef task) { pool().run(tasks, task); }

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
