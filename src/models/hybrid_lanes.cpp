// Lane passes of a hybrid's forward, planned on the host alike for every backend.
#include "models/hybrid_lanes.h"

#include "core/error.h"

namespace tf {

LaneProgress& HybridLaneTags::lane(int32_t lane) {
  if (lane >= int32_t(lanes_.size())) lanes_.resize(size_t(lane) + 1);
  return lanes_[size_t(lane)];
}

std::vector<int32_t> committed_rows(const KvCache& kv, HybridLaneTags& tags, int32_t lane, int64_t to) {
  const LaneProgress& progress = tags.lane(lane);
  std::vector<int32_t> rows;
  for (int64_t p = progress.position; p < to; ++p) {
    const SlotOrigin& origin = tags.origin(kv.slot(lane, p));
    if (origin.pass == 0 || origin.pass != progress.pass || origin.lane != lane)
      fail_internal("position " + std::to_string(p) + " of lane " + std::to_string(lane) +
                    " holds no recurrent inputs from the lane's last pass (its state can only resume from a "
                    "checkpoint at a block boundary)");
    rows.push_back(origin.row);
  }
  return rows;
}

void plan_hybrid_pass(const Batch& batch, const KvCache& kv, HybridLaneTags& tags, int64_t conv_history,
                      uint64_t pass_id, const std::function<void(int32_t)>& reset_lane, HybridPassPlan* plan) {
  const auto& rows = batch.rows;
  const int64_t n_rows = int64_t(rows.size());
  plan->lanes.clear();
  plan->pass_of_row.assign(size_t(n_rows), -1);
  plan->last_child.assign(size_t(n_rows), -1);
  plan->pass_id = pass_id;
  for (int64_t r = 0; r < n_rows; ++r) {
    const BatchRow& row = rows[size_t(r)];
    int32_t index = -1;
    for (size_t i = 0; i < plan->lanes.size(); ++i)
      if (plan->lanes[i].lane == row.lane) index = int32_t(i);
    if (index < 0) {
      index = int32_t(plan->lanes.size());
      plan->lanes.push_back({row.lane, -1, {}, {}});
    }
    HybridLanePass& pass = plan->lanes[size_t(index)];
    if (row.parent < 0) {
      if (pass.root_row >= 0 || !pass.rows.empty())
        fail_internal("lane " + std::to_string(row.lane) + " has more than one row without an in-batch parent, or "
                      "one that is not its first row (a hybrid's lane state has one starting point per pass)");
      pass.root_row = int32_t(r);
    } else {
      plan->last_child[size_t(row.parent)] = int32_t(r);
    }
    plan->pass_of_row[size_t(r)] = index;
    pass.rows.push_back(int32_t(r));
  }

  for (HybridLanePass& pass : plan->lanes) {
    const int32_t root_pos = rows[size_t(pass.root_row)].pos;
    LaneProgress& progress = tags.lane(pass.lane);
    if (root_pos == 0) {  // a new sequence on this lane
      progress = {};
      reset_lane(pass.lane);
    }
    if (progress.position > root_pos)
      fail_internal("lane " + std::to_string(pass.lane) + "'s recurrent state is at position " +
                    std::to_string(progress.position) + ", past its row at " + std::to_string(root_pos) +
                    " (a hybrid's recurrent state does not roll back)");
    pass.replay = committed_rows(kv, tags, pass.lane, root_pos);
  }
  // Tags for this pass, after every lookup above: a row's slot now names the row.
  for (const HybridLanePass& pass : plan->lanes)
    for (size_t i = 0; i < pass.rows.size(); ++i)
      tags.origin(rows[size_t(pass.rows[i])].kv_slot) = {pass_id, pass.lane, int32_t(i)};
  for (const HybridLanePass& pass : plan->lanes) tags.lane(pass.lane).pass = pass_id;

  // The convolution window of each row: its in-batch ancestors, then the lane's conv history.
  plan->conv_sources.assign(size_t(n_rows * conv_history), 0);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t back = 1; back <= conv_history; ++back) {
      int32_t at = int32_t(r);
      int64_t steps = 0;
      while (steps < back && rows[size_t(at)].parent >= 0) {
        at = rows[size_t(at)].parent;
        ++steps;
      }
      plan->conv_sources[size_t(r * conv_history + back - 1)] =
          steps == back ? at : int32_t(-1 - (conv_history - (back - steps)));
    }
  }
}

void finish_hybrid_pass(const Batch& batch, const HybridPassPlan& plan, HybridLaneTags& tags) {
  for (const HybridLanePass& pass : plan.lanes) tags.lane(pass.lane).position = batch.rows[size_t(pass.root_row)].pos;
}

int64_t hybrid_state_floats(const ModelConfig& c) {
  const HybridConfig& h = c.hybrid;
  return h.n_layers_of(LayerKind::linear_attention) * h.linear_n_value_heads * h.linear_key_head_dim *
         h.linear_value_head_dim;
}

int64_t hybrid_conv_floats(const ModelConfig& c) {
  const HybridConfig& h = c.hybrid;
  return h.n_layers_of(LayerKind::linear_attention) * (h.conv_kernel - 1) * h.conv_dim();
}

int64_t hybrid_lane_bytes(const ModelConfig& config) {
  return int64_t(sizeof(float)) * (hybrid_state_floats(config) + hybrid_conv_floats(config));
}

std::string hybrid_lane_format(const ModelConfig& config) {
  const HybridConfig& h = config.hybrid;
  const auto n = std::to_string(h.n_layers_of(LayerKind::linear_attention));
  return "f32 state " + n + "x" + std::to_string(h.linear_n_value_heads) + "x" + std::to_string(h.linear_key_head_dim) +
         "x" + std::to_string(h.linear_value_head_dim) + ", conv " + n + "x" + std::to_string(h.conv_kernel - 1) + "x" +
         std::to_string(h.conv_dim());
}

}  // namespace tf
