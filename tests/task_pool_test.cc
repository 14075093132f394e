// TaskPool and its strands (engine/streaming/task_pool.h): order within a strand, one task of a
// strand at a time, strands sharing the threads in turns, interactive strands before bulk ones,
// and destruction running everything.
#include "engine/streaming/task_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace jasper {
namespace {

TEST(TaskPoolTest, AStrandRunsInOrderOneAtATimeOffTheCaller) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::set<std::thread::id> threads;
  TaskPool pool(4);  // destroyed first: its threads are joined before the state above goes
  auto strand = pool.NewStrand();
  for (int i = 0; i < 200; ++i) {
    strand->Post([&, i] {
      if (running.fetch_add(1) != 0) overlapped = true;
      std::this_thread::yield();
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
        threads.insert(std::this_thread::get_id());
      }
      running.fetch_sub(1);
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return order.size() == 200; });
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
  EXPECT_FALSE(overlapped.load());
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

// A strand with a long backlog takes turns with the others: a task posted to another strand
// runs long before the backlog is through.
TEST(TaskPoolTest, StrandsTakeTurnsSoABacklogDoesNotBlockOthers) {
  std::atomic<int> busy_done{0};
  std::atomic<int> busy_done_when_other_ran{-1};
  TaskPool pool(1);  // declared after what its tasks touch: joined first
  auto busy = pool.NewStrand();
  auto other = pool.NewStrand();
  for (int i = 0; i < 100; ++i) {
    busy->Post([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++busy_done;
    });
  }
  other->Post([&] { busy_done_when_other_ran = busy_done.load(); });
  while (busy_done_when_other_ran.load() < 0) std::this_thread::yield();
  EXPECT_LE(busy_done_when_other_ran.load(), 2);  // one turn of the busy strand, not 100
}

// A slow task holds up its own strand and one thread only.
TEST(TaskPoolTest, ASlowStrandHoldsUpOnlyItself) {
  std::atomic<bool> release{false};
  std::atomic<int> fast_ran{0};
  TaskPool pool(2);  // declared after what its tasks touch: joined first
  auto slow = pool.NewStrand();
  auto fast = pool.NewStrand();
  slow->Post([&] {
    while (!release.load()) std::this_thread::yield();
  });
  for (int i = 0; i < 20; ++i) fast->Post([&] { ++fast_ran; });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (fast_ran.load() < 20 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(fast_ran.load(), 20);
  release = true;
}

// Interactive strands' turns come before any bulk strand's, even when the bulk work was posted
// first; within a priority, strands still take turns.
TEST(TaskPoolTest, InteractiveStrandsGoBeforeBulkOnes) {
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  std::mutex mu;
  std::vector<std::string> order;  // guarded by mu
  const auto record = [&](std::string name) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(std::move(name));
  };
  TaskPool pool(1);  // declared after what its tasks touch: joined first
  auto gate = pool.NewStrand(Priority::kBulk);
  auto bulk = pool.NewStrand(Priority::kBulk);
  auto live1 = pool.NewStrand(Priority::kInteractive);
  auto live2 = pool.NewStrand();  // interactive by default
  gate->Post([&] {
    started = true;
    while (!release.load()) std::this_thread::yield();
  });
  while (!started.load()) std::this_thread::yield();  // the one thread is busy now
  for (int i = 0; i < 3; ++i) bulk->Post([&, i] { record("b" + std::to_string(i)); });
  for (int i = 0; i < 3; ++i) live1->Post([&, i] { record("x" + std::to_string(i)); });
  for (int i = 0; i < 3; ++i) live2->Post([&, i] { record("y" + std::to_string(i)); });
  release = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (order.size() == 9) break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::yield();
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"x0", "y0", "x1", "y1", "x2", "y2", "b0", "b1", "b2"}));
}

TEST(TaskPoolTest, DestructionRunsEverythingPostedBeforeIt) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(3);
    std::vector<std::shared_ptr<TaskPool::Strand>> strands;
    for (int i = 0; i < 5; ++i) strands.push_back(pool.NewStrand());
    for (int i = 0; i < 50; ++i) {
      auto strand = strands[i % strands.size()];
      // Each task posts one more (as a session's tasks may): those run too.
      strand->Post([&ran, strand] {
        ++ran;
        strand->Post([&ran] { ++ran; });
      });
    }
  }
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace
}  // namespace jasper
