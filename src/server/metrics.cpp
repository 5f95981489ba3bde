// The engine's counters as Prometheus text exposition (version 0.0.4).
#include "server/metrics.h"

#include <cstdio>

namespace tf::server {
namespace {

void append_metric(std::string& out, const char* name, const char* type, const char* help,
                   double value) {
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", value);
  out += std::string("# HELP tensorfold_") + name + " " + help + "\n";
  out += std::string("# TYPE tensorfold_") + name + " " + type + "\n";
  out += std::string("tensorfold_") + name + " " + number + "\n";
}

}  // namespace

std::string prometheus_text(const EngineStats& stats) {
  const double rows_per_round = stats.rounds ? double(stats.rows) / double(stats.rounds) : 0.0;
  std::string out;
  append_metric(out, "requests_total", "counter", "Requests accepted by the engine.",
                double(stats.requests));
  append_metric(out, "prompt_tokens_total", "counter", "Prompt tokens processed.",
                double(stats.prompt_tokens));
  append_metric(out, "generated_tokens_total", "counter", "Completion tokens generated.",
                double(stats.generated_tokens));
  append_metric(out, "rounds_total", "counter", "Target forward passes (rounds) run.",
                double(stats.rounds));
  append_metric(out, "rows_total", "counter", "Rows carried by all rounds.", double(stats.rows));
  append_metric(out, "rows_per_round", "gauge", "Mean rows per round since start.",
                rows_per_round);
  append_metric(out, "rounds_with_several_lanes_total", "counter",
                "Rounds whose forward carried rows of two or more lanes.", double(stats.rounds_with_several_lanes));
  append_metric(out, "most_lanes_in_a_round", "gauge", "The most lanes one forward has carried.",
                double(stats.most_lanes_in_a_round));
  append_metric(out, "sibling_accepts_total", "counter",
                "Accepted draft rows off their tree's main chain (K/V moved from scratch slots).",
                double(stats.sibling_accepts));
  append_metric(out, "prompt_cache_hit_tokens_total", "counter",
                "Prompt tokens whose K/V came from the prefix cache.", double(stats.prompt_cache_hit_tokens));
  append_metric(out, "prompt_cache_miss_tokens_total", "counter", "Prompt tokens computed (not in the prefix cache).",
                double(stats.prompt_cache_miss_tokens));
  append_metric(out, "kv_block_size", "gauge", "Positions per KV block.", double(stats.kv_block_size));
  append_metric(out, "kv_blocks", "gauge", "KV blocks in the pool lanes share.", double(stats.kv_blocks_total));
  append_metric(out, "kv_blocks_in_use", "gauge", "KV blocks held by live lanes.", double(stats.kv_blocks_in_use));
  append_metric(out, "kv_blocks_cached", "gauge", "KV blocks in the prefix cache that no lane holds (reusable).",
                double(stats.kv_blocks_cached));
  append_metric(out, "kv_blocks_free", "gauge", "KV blocks holding nothing.", double(stats.kv_blocks_free));
  append_metric(out, "kv_evictions_total", "counter", "Cached KV blocks evicted to make room.",
                double(stats.kv_evictions));
  append_metric(out, "recurrent_checkpoints", "gauge",
                "Recurrent-state checkpoints a hybrid model's cached prefixes resume from.",
                double(stats.recurrent_checkpoints));
  append_metric(out, "recurrent_checkpoint_bytes", "gauge", "Bytes those checkpoints hold.",
                double(stats.recurrent_checkpoint_bytes));
  append_metric(out, "recurrent_checkpoint_evictions_total", "counter",
                "Recurrent-state checkpoints dropped to stay within --recurrent-cache-mib.",
                double(stats.recurrent_checkpoint_evictions));
  append_metric(out, "queue_depth", "gauge", "Requests waiting for a lane.",
                double(stats.queue_depth));
  append_metric(out, "lanes_live", "gauge", "Lanes generating now.", double(stats.lanes_live));
  append_metric(out, "drafted_tokens_total", "counter", "Drafted tokens verified.",
                double(stats.drafted_tokens));
  append_metric(out, "accepted_tokens_total", "counter", "Drafted tokens accepted.",
                double(stats.accepted_tokens));
  // Acceptance per depth: of the rounds whose tree reached depth d, how many accepted it.
  out += "# HELP tensorfold_draft_depth_reached_total Rounds whose draft tree reached this depth.\n"
         "# TYPE tensorfold_draft_depth_reached_total counter\n";
  std::string accepted_lines =
      "# HELP tensorfold_draft_depth_accepted_total Rounds that accepted a draft at this depth.\n"
      "# TYPE tensorfold_draft_depth_accepted_total counter\n";
  for (int d = 0; d < kMaxTrackedDepth && stats.drafted_at_depth[d] > 0; ++d) {
    std::string label = "{depth=\"" + std::to_string(d + 1) + "\"} ";
    out += "tensorfold_draft_depth_reached_total" + label + std::to_string(stats.drafted_at_depth[d]) + "\n";
    accepted_lines += "tensorfold_draft_depth_accepted_total" + label +
                      std::to_string(stats.accepted_at_depth[d]) + "\n";
  }
  out += accepted_lines;
  out += "# HELP tensorfold_drafted_by_proposer_total Drafted tokens by the proposer that drafted them.\n"
         "# TYPE tensorfold_drafted_by_proposer_total counter\n";
  std::string accepted_by = "# HELP tensorfold_accepted_by_proposer_total Accepted tokens by proposer.\n"
                            "# TYPE tensorfold_accepted_by_proposer_total counter\n";
  for (int k = 0; k < kProposerKinds; ++k) {
    std::string label = std::string("{proposer=\"") + proposer_kind_name(ProposerKind(k)) + "\"} ";
    out += "tensorfold_drafted_by_proposer_total" + label + std::to_string(stats.drafted_by_proposer[k]) + "\n";
    accepted_by += "tensorfold_accepted_by_proposer_total" + label + std::to_string(stats.accepted_by_proposer[k]) + "\n";
  }
  out += accepted_by;
  return out;
}

}  // namespace tf::server
