// libFuzzer target: the whole pipeline (lexer, model, diagnoses, writers) on arbitrary bytes, fed in
// chunks whose size the input chooses, as one or two sources. Built with clang -fsanitize=fuzzer,
// address,undefined when the compiler supports it (tests/nccl_log/CMakeLists.txt); ctest runs it
// briefly (nccl_log.fuzz). Run longer by hand: build/<preset>/tests/nccl_log/fuzz_nccl_log_parser -max_total_time=600 DIR
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hpdt/nccl_log/diagnose.h"
#include "hpdt/nccl_log/parser.h"
#include "hpdt/nccl_log/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpdt::nccl_log;
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 64;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t split = (data[0] & 0x80) ? text.size() / 2 : text.size();
  LogParser p;
  p.add_source("a");
  for (size_t i = 0; i < split; i += chunk) p.add_text(text.substr(i, std::min(chunk, split - i)));
  if (split < text.size()) {
    p.add_source("b");
    p.add_text(text.substr(split));
  }
  Log log = p.finish();
  auto d = diagnose(log);
  if ((data[0] & 0x60) == 0x60) {  // the writers on a quarter of the inputs: most time goes to the parser
    volatile size_t n = text_report(log, d).size() + json_text(json_report(log, d)).size() + dot_report(log, 3).size();
    (void)n;
  }
  return 0;
}
