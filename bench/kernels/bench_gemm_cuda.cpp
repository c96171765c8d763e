// placeholder: filled by the CUDA kernels work (issue 7)
#include <benchmark/benchmark.h>
BENCHMARK_MAIN();
