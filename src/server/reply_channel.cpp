// The hand-off between the engine thread and one HTTP thread.
#include "server/reply_channel.h"

namespace tf::server {

UpdateSink ReplyChannel::sink() {
  return [channel = shared_from_this()](const GenerationUpdate& update) {
    {
      std::lock_guard<std::mutex> lock(channel->mutex_);
      if (channel->is_client_gone_) return false;
      channel->updates_.push_back(update);
    }
    channel->ready_.notify_one();
    return true;
  };
}

std::vector<GenerationUpdate> ReplyChannel::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [this] { return !updates_.empty() || is_client_gone_; });
  std::vector<GenerationUpdate> taken(std::make_move_iterator(updates_.begin()),
                                      std::make_move_iterator(updates_.end()));
  updates_.clear();
  return taken;
}

void ReplyChannel::mark_client_gone() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    is_client_gone_ = true;
  }
  ready_.notify_all();
}

bool ReplyChannel::is_client_gone() {
  std::lock_guard<std::mutex> lock(mutex_);
  return is_client_gone_;
}

}  // namespace tf::server
