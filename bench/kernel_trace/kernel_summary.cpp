// The per-kernel summary of a GPU trace (kernel_trace.h): totals by name, busy time as the union of intervals.
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

#include "hpdt/bench/kernel_trace.h"
#include "hpdt/core/error.h"

namespace hpdt::bench {

std::string demangle(const char* symbol) {
  if (!symbol) return "[unnamed]";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(symbol, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(symbol);
}

KernelSummary summarize(const std::vector<GpuActivity>& activities) {
  KernelSummary s;
  s.activities = int64_t(activities.size());
  if (activities.empty()) return s;
  std::map<std::string, KernelTotal> by_name;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  spans.reserve(activities.size());
  for (const GpuActivity& a : activities) {
    HPDT_CHECK(a.end_ns >= a.start_ns, "kernel trace: '", a.name, "' ends (", a.end_ns, " ns) before it starts (",
               a.start_ns, " ns)");
    const double ms = double(a.end_ns - a.start_ns) * 1e-6;
    KernelTotal& t = by_name[a.name];
    t.name = a.name;
    ++t.count;
    t.total_ms += ms;
    s.sum_ms += ms;
    spans.emplace_back(a.start_ns, a.end_ns);
  }
  // busy: the union of [start, end), walked in start order
  std::sort(spans.begin(), spans.end());
  uint64_t busy = 0, cur_start = spans[0].first, cur_end = spans[0].second, last_end = spans[0].second;
  for (size_t i = 1; i < spans.size(); ++i) {
    const auto [b, e] = spans[i];
    last_end = std::max(last_end, e);
    if (b > cur_end) {
      busy += cur_end - cur_start;
      cur_start = b;
      cur_end = e;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  busy += cur_end - cur_start;
  s.busy_ms = double(busy) * 1e-6;
  s.span_ms = double(last_end - spans[0].first) * 1e-6;
  for (auto& [name, t] : by_name) s.kernels.push_back(std::move(t));
  std::stable_sort(s.kernels.begin(), s.kernels.end(),
                   [](const KernelTotal& a, const KernelTotal& b) { return a.total_ms > b.total_ms; });
  return s;
}

nlohmann::json summary_json(const KernelSummary& summary, int64_t steps) {
  HPDT_CHECK(steps >= 1, "kernel trace: a summary per step needs steps >= 1 (got ", steps, ")");
  const double n = double(steps);
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelTotal& k : summary.kernels)
    kernels.push_back({{"name", k.name}, {"count_per_step", double(k.count) / n}, {"ms_per_step", k.total_ms / n}});
  return {{"steps", steps},
          {"activities", summary.activities},
          {"sum_ms_per_step", summary.sum_ms / n},
          {"busy_ms_per_step", summary.busy_ms / n},
          {"span_ms_per_step", summary.span_ms / n},
          {"kernels", kernels}};
}

}  // namespace hpdt::bench
