// Find's plan for a call of GEMM v3 (gemm_wgmma.cu) or conv v3 (conv_wgmma.cu) under kernels::GemmTuning::find:
// what the two share beyond wgmma.cuh's candidates (V3Plan, v3_find_candidates). Host code, sm90a targets only.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "find.cuh"
#include "wgmma.cuh"
#include "hpdt/core/log.h"
#include "hpdt/kernels/cuda/gemm.h"

namespace hpdt::kernels::cuda::sm90a {

// Find's plan for one call of GEMM v3 or conv v3 (`who`): the one cached for `key` in `found`, else (outside a
// CUDA-graph capture) the fastest of candidates(), each timed by run(plan) on the caller's scratch outputs, reported
// as describe() and cached; inside a capture an untimed call takes `fallback` (the rule's plan) and stays untimed.
// describe and candidates run only for a call not yet timed: a cached call costs one lookup.
template <class Key, class Describe, class Candidates, class Run>
V3Plan find_v3_plan(find::Choices<Key, V3Plan, GemmV3Found>& found, const Key& key, const char* who,
                    Describe describe, Candidates candidates, const V3Plan& fallback, cudaStream_t s, Run run) {
  V3Plan cached{};
  if (found.lookup(key, cached)) return cached;
  const std::string call = describe();
  if (find::capturing(s)) {
    HPDT_LOG(debug) << who << ": " << call << " first seen inside a CUDA-graph capture: not timed, "
                    << v3_plan_name(fallback);
    return fallback;
  }
  const std::vector<V3Plan> plans = candidates();
  GemmV3Found report;
  report.call = call;
  size_t best = 0;
  if (plans.size() > 1) {
    const std::vector<double> ms = find::time_each(int(plans.size()), s, [&](int i) { run(plans[size_t(i)]); });
    for (size_t i = 0; i < plans.size(); ++i) {
      report.ms.emplace_back(v3_plan_name(plans[i]), ms[i]);
      if (ms[i] < ms[best]) best = i;
    }
  }
  report.plan = v3_plan_name(plans[best]);
  HPDT_LOG(debug) << who << ": Find took " << report.plan << " for " << report.call;
  return found.add(key, plans[best], std::move(report));
}

}  // namespace hpdt::kernels::cuda::sm90a
