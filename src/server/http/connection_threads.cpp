// flide serve's HTTP threads (see connection_threads.h).
#include "server/http/connection_threads.h"

#include <algorithm>
#include <system_error>

namespace flide::server {

ConnectionThreads::ConnectionThreads(size_t max_threads, std::chrono::milliseconds idle_exit)
    : max_threads_(std::max<size_t>(1, max_threads)), idle_exit_(idle_exit) {}

ConnectionThreads::~ConnectionThreads() {
  shutdown();
}

void ConnectionThreads::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  join_ended();
  jobs_.push_back(std::move(fn));
  if (jobs_.size() > idle_ && live_.size() < max_threads_) {
    try {
      std::thread thread([this] { work(); });
      const std::thread::id id = thread.get_id();
      live_.emplace(id, std::move(thread));
    } catch (const std::system_error&) {
      // Out of threads: the connection waits for a running one, as in a fixed pool.
    }
  }
  ready_.notify_one();
}

void ConnectionThreads::shutdown() {
  std::map<std::thread::id, std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
    join_ended();
  }
  ready_.notify_all();
  // Threads leave live_ only here or by ending idle (into ended_), so join them as they go.
  for (;;) {
    std::thread thread;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      join_ended();
      if (live_.empty()) return;
      thread = std::move(live_.begin()->second);
      live_.erase(live_.begin());
    }
    thread.join();
  }
}

size_t ConnectionThreads::threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.size() - ended_.size();
}

void ConnectionThreads::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    const bool woken =
        ready_.wait_for(lock, idle_exit_, [&] { return !jobs_.empty() || shutdown_; });
    --idle_;
    if (jobs_.empty()) {
      // Idle too long, or shutting down with nothing left to run. On shutdown, the joining
      // thread has taken this thread out of live_ (or will find it in ended_).
      if (!woken && !shutdown_) ended_.push_back(std::this_thread::get_id());
      return;
    }
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
  }
}

void ConnectionThreads::join_ended() {
  for (const std::thread::id id : ended_) {
    const auto it = live_.find(id);
    if (it == live_.end()) continue;  // shutdown() took it out and joins it
    it->second.join();
    live_.erase(it);
  }
  ended_.clear();
}

}  // namespace flide::server
