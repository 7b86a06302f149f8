// ConnectionThreads, httplib's task queue in flide serve: a job (a connection) gets a thread of
// its own while fewer than max_threads run, waits for one past that, idle threads end, and
// shutdown runs what was queued.
#include "server/http/connection_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace flide::server {
namespace {

using namespace std::chrono_literals;

// Jobs that hold their thread until released, like open connections.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  int started = 0;
  bool open = false;

  std::function<void()> job() {
    return [this] {
      std::unique_lock<std::mutex> lock(mutex);
      ++started;
      changed.notify_all();
      changed.wait(lock, [&] { return open; });
    };
  }
  bool wait_started(int n, std::chrono::milliseconds within) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, within, [&] { return started >= n; });
  }
  int started_now() {
    const std::lock_guard<std::mutex> lock(mutex);
    return started;
  }
  void release() {
    const std::lock_guard<std::mutex> lock(mutex);
    open = true;
    changed.notify_all();
  }
};

TEST(ConnectionThreadsTest, EveryHeldJobGetsAThreadUpToTheCap) {
  Gate gate;
  ConnectionThreads threads(64, 30s);
  for (int i = 0; i < 50; ++i) threads.enqueue(gate.job());
  EXPECT_TRUE(gate.wait_started(50, 10s)) << gate.started_now() << " of 50 started";
  EXPECT_EQ(threads.threads(), 50u);
  gate.release();
  threads.shutdown();
  EXPECT_EQ(threads.threads(), 0u);
}

TEST(ConnectionThreadsTest, PastTheCapJobsWaitForAThread) {
  Gate gate;
  ConnectionThreads threads(4, 30s);
  for (int i = 0; i < 10; ++i) threads.enqueue(gate.job());
  ASSERT_TRUE(gate.wait_started(4, 10s));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(gate.started_now(), 4);
  EXPECT_EQ(threads.threads(), 4u);
  gate.release();
  EXPECT_TRUE(gate.wait_started(10, 10s));
  threads.shutdown();
}

TEST(ConnectionThreadsTest, IdleThreadsEndAndNewJobsStartNewOnes) {
  ConnectionThreads threads(8, 50ms);
  std::atomic<int> ran{0};
  for (int i = 0; i < 8; ++i) threads.enqueue([&] { ++ran; });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((ran < 8 || threads.threads() > 0) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(ran, 8);
  EXPECT_EQ(threads.threads(), 0u);
  threads.enqueue([&] { ++ran; });  // joins the ended threads, starts one
  while (ran < 9 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(ran, 9);
  threads.shutdown();
  EXPECT_EQ(threads.threads(), 0u);
}

TEST(ConnectionThreadsTest, ShutdownRunsTheQueuedJobs) {
  std::atomic<int> ran{0};
  {
    ConnectionThreads threads(1, 30s);
    for (int i = 0; i < 20; ++i)
      threads.enqueue([&] {
        std::this_thread::sleep_for(1ms);
        ++ran;
      });
    threads.shutdown();
    EXPECT_EQ(ran, 20);
  }
  EXPECT_EQ(ran, 20);
}

}  // namespace
}  // namespace flide::server
