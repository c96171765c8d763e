// The one exception type of hpdt. Every failure carries what failed, where (a file, dataset, layer,
// flag or peer: whatever the user needs to find it), the process rank and the source location.
#pragma once

#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

namespace hpdt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, const std::string& where = {},
                 std::source_location loc = std::source_location::current());

  const std::string& message() const { return message_; }  // the 'what' alone
  const std::string& where() const { return where_; }
  int rank() const { return rank_; }  // -1 when not known (before MPI, or not under a launcher)
  const char* file() const { return file_; }
  unsigned line() const { return line_; }

 private:
  std::string message_;
  std::string where_;
  int rank_;
  const char* file_;
  unsigned line_;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return {};
  } else {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
  }
}
[[noreturn]] void check_failed(const char* cond, const std::string& msg, std::source_location loc);
}  // namespace detail

}  // namespace hpdt

// HPDT_CHECK(cond, "message parts", value, ...): throws hpdt::Error when cond is false.
#define HPDT_CHECK(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) [[unlikely]]                                                                      \
      ::hpdt::detail::check_failed(#cond, ::hpdt::detail::concat(__VA_ARGS__),                     \
                                   std::source_location::current());                               \
  } while (0)

// HPDT_FAIL("message parts", ...): throws hpdt::Error unconditionally.
#define HPDT_FAIL(...) throw ::hpdt::Error(::hpdt::detail::concat(__VA_ARGS__))
