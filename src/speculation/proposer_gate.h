// Whether a lane's proposer drafts this round. Drafting costs real time: the proposer's own work
// (the block drafter runs a forward of its whole block) and a verified row for every node it adds.
// It pays only through the tokens the target accepts, each worth what a plain round (no drafts)
// costs the lane. So a gate keeps two running averages, the tokens accepted per use and the
// seconds a use costs, and lets the proposer draft while accepted x a plain round's seconds >= a use's seconds. Skipped, it still
// drafts now and then (a probe), so a lane whose text turns predictable finds out; each probe that
// does not pay doubles the wait for the next one, and the wait is never shorter than what keeps
// probes within kProbeShare of the lane's time (a use that costs ten plain rounds waits 333
// rounds). Only speed depends on it: which proposals are made never changes a token.
#pragma once
#include <algorithm>
#include <cstdint>

namespace tf {

class ProposerGate {
 public:
  static constexpr int64_t kWarmupUses = 4;           // uses before the averages are trusted
  static constexpr int64_t kFirstProbeInterval = 16;  // skipped rounds before a probe...
  static constexpr int64_t kMaxProbeInterval = 256;   // ...doubling up to this while probes fail
  static constexpr double kSmoothing = 0.25;          // weight of the newest sample in each average
  static constexpr double kProbeShare = 0.03;         // most of a lane's time that failed probes take
  static constexpr int64_t kMostProbeInterval = 4096; // the cost floor's own cap

  bool should_run(double round_seconds) const {
    return n_uses_ < kWarmupUses || n_skipped_ >= probe_interval_ || pays(round_seconds);
  }
  void record_skip() { ++n_skipped_; }
  bool is_warming_up() const { return n_uses_ < kWarmupUses; }
  // Past its warm-up, its uses do not pay, and no probe is due: it would not draft now.
  bool is_closed(double round_seconds) const { return !should_run(round_seconds); }
  // After a round in which the proposer drafted: what the use cost in seconds, how many of its
  // nodes the target accepted, and what a plain round costs the lane now.
  void record_use(double seconds, int64_t n_accepted, double round_seconds) {
    const double weight = n_uses_ == 0 ? 1.0 : kSmoothing;
    seconds_per_use_ += weight * (seconds - seconds_per_use_);
    accepted_per_use_ += weight * (double(n_accepted) - accepted_per_use_);
    ++n_uses_;
    n_skipped_ = 0;
    if (pays(round_seconds)) {
      probe_interval_ = kFirstProbeInterval;
    } else {
      if (n_uses_ > kWarmupUses) probe_interval_ = std::min(2 * probe_interval_, kMaxProbeInterval);
      probe_interval_ = std::max(probe_interval_, rounds_per_probe(round_seconds));
    }
  }
  // A new lane starts from what the engine's other lanes have seen, not from a fresh warm-up: their
  // averages, and the wait between probes their probes have earned (a short request would
  // otherwise probe a proposer every engine-wide figure says does not pay).
  ProposerGate for_new_lane() const {
    ProposerGate gate = *this;
    gate.n_skipped_ = 0;
    return gate;
  }
  // A lane that measures again what the engine found not to pay (Speculation::kProbeLaneEvery):
  // the engine's averages, and a probe at once. A whole warm-up of its own would cost several uses
  // where one tells whether the text pays now (each use moves the averages by kSmoothing).
  ProposerGate for_probe_lane() const {
    ProposerGate gate = *this;
    gate.n_skipped_ = gate.probe_interval_;
    return gate;
  }
  double accepted_per_use() const { return accepted_per_use_; }
  double seconds_per_use() const { return seconds_per_use_; }
  int64_t probe_interval() const { return probe_interval_; }

 private:
  bool pays(double round_seconds) const { return accepted_per_use_ * round_seconds >= seconds_per_use_; }
  // Skipped rounds between probes so that a probe's cost is kProbeShare of the rounds around it.
  int64_t rounds_per_probe(double round_seconds) const {
    if (round_seconds <= 0.0) return kFirstProbeInterval;
    const double rounds = seconds_per_use_ / (kProbeShare * round_seconds);
    return rounds >= double(kMostProbeInterval) ? kMostProbeInterval : int64_t(rounds);
  }

  double accepted_per_use_ = 0.0;
  double seconds_per_use_ = 0.0;
  int64_t n_uses_ = 0;
  int64_t n_skipped_ = 0;
  int64_t probe_interval_ = kFirstProbeInterval;
};

}  // namespace tf
