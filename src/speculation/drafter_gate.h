// Whether a lane's block drafter runs this round. A drafter run costs real time (a forward of its
// whole block), and it pays only through the tokens it gets accepted, each worth about one target
// round. So the gate keeps two running averages, the drafter tokens accepted per run and the
// seconds a run takes, and runs the drafter while accepted x round seconds >= run seconds.
// Skipped, it still runs now and then (a probe), so a lane whose text turns predictable finds
// out; each probe that does not pay doubles the wait for the next one. Only speed depends on it:
// which proposals are made never changes a token.
#pragma once
#include <algorithm>
#include <cstdint>

namespace tf {

class DrafterGate {
 public:
  static constexpr int64_t kWarmupRuns = 4;          // runs before the averages are trusted
  static constexpr int64_t kFirstProbeInterval = 16;  // skipped rounds before a probe...
  static constexpr int64_t kMaxProbeInterval = 256;   // ...doubling up to this while probes fail
  static constexpr double kSmoothing = 0.25;          // weight of the newest sample in each average

  bool should_run(double round_seconds) const {
    return n_runs_ < kWarmupRuns || n_skipped_ >= probe_interval_ || pays(round_seconds);
  }
  void record_skip() { ++n_skipped_; }
  // After a round in which the drafter ran: its run's seconds, how many of its nodes the target
  // accepted, and what a round costs now.
  void record_run(double seconds, int64_t n_accepted, double round_seconds) {
    const double weight = n_runs_ == 0 ? 1.0 : kSmoothing;
    seconds_per_run_ += weight * (seconds - seconds_per_run_);
    accepted_per_run_ += weight * (double(n_accepted) - accepted_per_run_);
    ++n_runs_;
    n_skipped_ = 0;
    if (pays(round_seconds)) {
      probe_interval_ = kFirstProbeInterval;
    } else if (n_runs_ > kWarmupRuns) {
      probe_interval_ = std::min(2 * probe_interval_, kMaxProbeInterval);
    }
  }
  // A new lane starts from what the engine's other lanes have seen, not from a fresh warm-up.
  DrafterGate for_new_lane() const {
    DrafterGate gate = *this;
    gate.n_skipped_ = 0;
    gate.probe_interval_ = kFirstProbeInterval;
    return gate;
  }
  double accepted_per_run() const { return accepted_per_run_; }
  double seconds_per_run() const { return seconds_per_run_; }
  int64_t probe_interval() const { return probe_interval_; }

 private:
  bool pays(double round_seconds) const { return accepted_per_run_ * round_seconds >= seconds_per_run_; }

  double accepted_per_run_ = 0.0;
  double seconds_per_run_ = 0.0;
  int64_t n_runs_ = 0;
  int64_t n_skipped_ = 0;
  int64_t probe_interval_ = kFirstProbeInterval;
};

}  // namespace tf
