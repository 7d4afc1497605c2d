#include "threadpool.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace kq {
namespace {

struct Pool {
  std::mutex jobMutex;  // serializes jobs and reconfiguration
  std::mutex m;
  std::condition_variable wake, done;
  std::vector<std::thread> workers;
  const std::function<void(int)>* fn = nullptr;
  int tasks = 0;
  std::atomic<int> next{0};
  int finishedWorkers = 0;
  unsigned long generation = 0;
  bool stop = false;
  int total = 0;  // threads incl. caller

  void workerLoop() {
    unsigned long seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      int n;
      {
        std::unique_lock<std::mutex> lock(m);
        wake.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        job = fn;
        n = tasks;
      }
      for (int t = next.fetch_add(1); t < n; t = next.fetch_add(1)) (*job)(t);
      {
        std::lock_guard<std::mutex> lock(m);
        ++finishedWorkers;
      }
      done.notify_one();
    }
  }

  void start(int n) {
    total = n < 1 ? 1 : n;
    stop = false;
    for (int i = 0; i < total - 1; ++i) workers.emplace_back([this] { workerLoop(); });
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    wake.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
  }

  void run(int n, const std::function<void(int)>& f) {
    std::lock_guard<std::mutex> jobLock(jobMutex);
    if (total == 0) start(hardwareThreads());
    if (workers.empty() || n <= 1) {
      for (int t = 0; t < n; ++t) f(t);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(m);
      fn = &f;
      tasks = n;
      next.store(0);
      finishedWorkers = 0;
      ++generation;
    }
    wake.notify_all();
    for (int t = next.fetch_add(1); t < n; t = next.fetch_add(1)) f(t);
    std::unique_lock<std::mutex> lock(m);
    done.wait(lock, [&] { return finishedWorkers == (int)workers.size(); });
    fn = nullptr;
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

void parallelFor(int tasks, const std::function<void(int)>& fn) { pool().run(tasks, fn); }

void setThreadCount(int n) {
  Pool& p = pool();
  std::lock_guard<std::mutex> jobLock(p.jobMutex);
  p.shutdown();
  p.start(n <= 0 ? hardwareThreads() : n);
}

int threadCount() {
  Pool& p = pool();
  std::lock_guard<std::mutex> jobLock(p.jobMutex);
  if (p.total == 0) p.start(hardwareThreads());
  return p.total;
}

}  // namespace kq
