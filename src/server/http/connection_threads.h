// httplib's task queue for flide serve: a connection holds its thread for as long as it stays
// open (keep-alive, or a request waiting for its round), so a fixed pool of N threads leaves
// connection N + 1, and even a /health probe, waiting unanswered until one closes. This queue
// starts a thread for a connection when none is idle, up to max_threads, and lets a thread that
// has been idle for idle_exit end, so a burst of clients does not keep its threads. Past
// max_threads, connections wait for a thread as in httplib's own pool.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace flide::server {

class ConnectionThreads final : public httplib::TaskQueue {
 public:
  ConnectionThreads(size_t max_threads, std::chrono::milliseconds idle_exit);
  ~ConnectionThreads() override;
  ConnectionThreads(const ConnectionThreads&) = delete;
  ConnectionThreads& operator=(const ConnectionThreads&) = delete;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;  // runs the queued connections, then joins every thread

  size_t threads() const;  // started and not yet ended

 private:
  void work();
  void join_ended();  // caller holds mutex_; joins the threads that ended on their own

  const size_t max_threads_;
  const std::chrono::milliseconds idle_exit_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::map<std::thread::id, std::thread> live_;
  std::vector<std::thread::id> ended_;  // idle threads that left; joined by the next caller
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace flide::server
