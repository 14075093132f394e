// CpuThreadPool: a small fixed set of persistent threads that run one parallel step at a time,
// for the CPU backend's intra-op threading (BackendOptions::cpu_threads). The caller is part 0
// of every step; the pool's num_threads - 1 workers are parts 1..num_threads-1. Run() returns
// when every part has finished: one barrier per step.
//
// Synchronization uses std::mutex / std::condition_variable only (not Abseil: TSan runs over
// this code with an uninstrumented Abseil). A worker spins briefly on an atomic before blocking,
// since steps follow each other within microseconds during a forward pass; everything the step
// needs is published and read under the mutex, the atomic is only a hint.
//
// Ownership: owns its threads (created in the constructor, joined in the destructor); borrows
// the step function for the duration of Run(). No allocation or thread creation in Run().
// Thread-safety: Run() is called by one thread at a time (the backend's worker); the step
// function runs concurrently on num_threads threads and must be safe for that.
#ifndef JASPER_ENGINE_RUNTIME_CPU_THREAD_POOL_H_
#define JASPER_ENGINE_RUNTIME_CPU_THREAD_POOL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace jasper {

class CpuThreadPool {
 public:
  // num_threads >= 1 (values below 1 are treated as 1); 1 starts no thread.
  explicit CpuThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
    workers_.reserve(num_threads_ - 1);
    for (int part = 1; part < num_threads_; ++part) {
      workers_.emplace_back([this, part] { WorkerLoop(part); });
    }
  }
  ~CpuThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      generation_hint_.fetch_add(1, std::memory_order_release);
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  CpuThreadPool(const CpuThreadPool&) = delete;
  CpuThreadPool& operator=(const CpuThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs step(part) for every part in [0, num_threads): part 0 on the calling thread, the others
  // on the workers; returns when all have returned. `step` is borrowed for the call.
  template <typename F>
  void Run(F& step) {
    if (num_threads_ == 1) {
      step(0);
      return;
    }
    RunImpl([](void* ctx, int part) { (*static_cast<F*>(ctx))(part); }, &step);
  }

 private:
  using StepFn = void (*)(void* ctx, int part);
  // How long a waiting thread spins (CPU pauses, the clock read every 32) before it blocks on a
  // condition variable. Time, not a count: a pause takes 24 ns on AMD Zen 5 and about 140 on
  // Intel since Skylake. It must outlast a blocked thread's wake-up (futex, and in a VM the
  // halted vCPU's interrupt: tens of microseconds), or the two sides fall into a cascade: the
  // caller waits past its spin for a worker that is still waking, blocks, and the worker's spin
  // for the next step runs out while the caller wakes. On a 2-vCPU Zen 5 guest a 48 us spin gave
  // 2 threads 1.2-1.7x one thread on 3.2 s windows (INT8), 200 us 1.97x (docs/PERFORMANCE.md).
  // Idle cost: at most this long of one core per step after the last forward pass.
  static constexpr auto kSpin = std::chrono::microseconds(200);

  // Spins until done() or kSpin has passed; returns done()'s last value.
  template <typename Done>
  static bool SpinUntil(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      for (int i = 0; i < 32; ++i) {
        if (done()) return true;
        Pause();
      }
      if (std::chrono::steady_clock::now() >= deadline) return done();
    }
  }

  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void RunImpl(StepFn fn, void* ctx) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = fn;
      ctx_ = ctx;
      pending_ = num_threads_ - 1;
      pending_hint_.store(pending_, std::memory_order_relaxed);
      ++generation_;
      generation_hint_.store(generation_, std::memory_order_release);
    }
    work_cv_.notify_all();
    fn(ctx, 0);
    SpinUntil([this] { return pending_hint_.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
  }

  void WorkerLoop(int part) {
    std::uint64_t seen = 0;
    for (;;) {
      SpinUntil([&] { return generation_hint_.load(std::memory_order_acquire) != seen; });
      StepFn fn;
      void* ctx;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        fn = fn_;
        ctx = ctx_;
      }
      fn(ctx, part);
      bool last;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last = --pending_ == 0;
        pending_hint_.fetch_sub(1, std::memory_order_release);
      }
      if (last) done_cv_.notify_one();
    }
  }

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // a new step (or stop)
  std::condition_variable done_cv_;  // pending_ reached 0
  // Guarded by mu_.
  std::uint64_t generation_ = 0;  // steps started
  int pending_ = 0;               // workers still running the current step
  bool stop_ = false;
  StepFn fn_ = nullptr;
  void* ctx_ = nullptr;
  // Spin hints only (decisions are re-checked under mu_).
  std::atomic<std::uint64_t> generation_hint_{0};
  std::atomic<int> pending_hint_{0};
};

}  // namespace jasper

#endif  // JASPER_ENGINE_RUNTIME_CPU_THREAD_POOL_H_
