// The hand-off between the engine thread and one HTTP thread: the engine's sink pushes updates,
// the HTTP thread drains them; either side may learn the client is gone.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/request.h"

namespace tf::server {

class ReplyChannel : public std::enable_shared_from_this<ReplyChannel> {
 public:
  static std::shared_ptr<ReplyChannel> create() { return std::shared_ptr<ReplyChannel>(new ReplyChannel); }

  // The engine-side sink: takes a short lock, never waits; returns false once the client is gone
  // so the engine frees the lane. It keeps the channel alive as long as the engine holds it.
  UpdateSink sink();
  // Waits up to `timeout` for updates and returns those queued (possibly none); returns at once
  // when the client is gone.
  std::vector<GenerationUpdate> take(std::chrono::milliseconds timeout);
  void mark_client_gone();
  bool is_client_gone();

 private:
  ReplyChannel() = default;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<GenerationUpdate> updates_;
  bool is_client_gone_ = false;
};

}  // namespace tf::server
