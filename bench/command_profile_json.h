// The JSON of an Executor's CommandProfile (runtime/executor/executor.h), for
// the benchmarks' --profile: where the profiled runs' time went, per command
// label.
#pragma once

#include <numeric>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/executor/executor.h"

namespace xcc::bench {

// Per command label: ms and calls per run, and for a matmul its weight's read
// rate; "host" is the rest of the runs' `times` (seconds each): inputs,
// outputs, copies, the timing.
inline nlohmann::json ProfileJson(const xrt::CommandProfile& prof,
                                  const std::vector<double>& times) {
  const double runs = static_cast<double>(times.size());
  double total = std::accumulate(times.begin(), times.end(), 0.0), in_commands = 0;
  nlohmann::json out;
  for (const auto& [label, entry] : prof.by_label) {
    out[label] = {{"calls_per_step", entry.calls / runs},
                  {"ms_per_step", entry.seconds / runs * 1e3}};
    if (entry.weight_bytes > 0 && entry.seconds > 0) {  // a matmul: its weight's read rate
      out[label]["weight_gbs"] = static_cast<double>(entry.weight_bytes) / entry.seconds / 1e9;
    }
    in_commands += entry.seconds;
  }
  out["host"] = {{"ms_per_step", (total - in_commands) / runs * 1e3}};
  return out;
}

}  // namespace xcc::bench
