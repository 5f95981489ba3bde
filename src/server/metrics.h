// The engine's counters as Prometheus text exposition for GET /metrics.
#pragma once
#include <string>

#include "engine/engine.h"

namespace tf::server {

std::string prometheus_text(const EngineStats& stats);

}  // namespace tf::server
