#include "hpdt/core/error.h"

#include "hpdt/core/log.h"

namespace hpdt {

namespace {
std::string format_error(const std::string& what, const std::string& where, int rank, const std::source_location& loc) {
  std::string s;
  if (rank >= 0) s += "[rank " + std::to_string(rank) + "] ";
  s += what;
  if (!where.empty()) s += " (" + where + ")";
  // Only the path below the repository root: "core/src/tensor.cpp:42". Ninja compiles with paths relative to the
  // build folder (build/<preset>: "../../core/src/tensor.cpp"), other generators with absolute ones.
  std::string_view file = loc.file_name();
  constexpr std::string_view root = HPDT_SOURCE_DIR "/";
  if (file.substr(0, root.size()) == root) file.remove_prefix(root.size());
  while (file.substr(0, 3) == "../") file.remove_prefix(3);
  s += " [" + std::string(file) + ":" + std::to_string(loc.line()) + "]";
  return s;
}
}  // namespace

Error::Error(const std::string& what, const std::string& where, std::source_location loc)
    : std::runtime_error(format_error(what, where, process_rank(), loc)),
      message_(what),
      where_(where),
      rank_(process_rank()),
      file_(loc.file_name()),
      line_(loc.line()) {}

namespace detail {
void check_failed(const char* cond, const std::string& msg, std::source_location loc) {
  throw Error(msg.empty() ? std::string("check failed: ") + cond : msg, {}, loc);
}
}  // namespace detail

}  // namespace hpdt
