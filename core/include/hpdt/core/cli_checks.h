// Number checks for CLI11 options whose messages a user can act on. Header-only, for the programs that link CLI11
// (as check_mpi.h is for those that link MPI).
//
// CLI11's own CLI::PositiveNumber, CLI::NonNegativeNumber and CLI::Range (2.1) print a rejected value as
// "--batch: Value 0 not in range 0.000000 to 17976931348623157081452742373170435679807056752584...(309 digits).000000":
// PositiveNumber's lower bound is the smallest positive double, printed as 0, so 0 reads as inside the range, and its
// upper bound is DBL_MAX written out in full. A word gets the same message. These say instead
// "--batch: must be > 0, got 0" and "--batch: 'many' is not a number". The help keeps CLI11's tags (INT:POSITIVE).
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace hpdt::cli {

namespace detail {

// The option's text as a finite number: false for anything else, trailing characters included ("3x", "inf", "").
inline bool parse_number(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out);
}

// A bound as a user would write it: 0, 1, 0.5, 1e-06.
inline std::string shown(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

template <class Ok>
CLI::Validator number_check(std::string tag, std::string requirement, Ok ok) {
  return CLI::Validator(
      [requirement = std::move(requirement), ok](std::string& s) -> std::string {
        double v = 0;
        if (!parse_number(s, v)) return "'" + s + "' is not a number";
        if (!ok(v)) return "must be " + requirement + ", got " + s;
        return {};
      },
      std::move(tag));
}

}  // namespace detail

// > 0.
inline CLI::Validator positive() {
  return detail::number_check("POSITIVE", "> 0", [](double v) { return v > 0; });
}

// >= 0.
inline CLI::Validator non_negative() {
  return detail::number_check("NONNEGATIVE", ">= 0", [](double v) { return v >= 0; });
}

// lo <= v <= hi.
inline CLI::Validator in_range(double lo, double hi) {
  const std::string range = "[" + detail::shown(lo) + ", " + detail::shown(hi) + "]";
  return detail::number_check("in " + range, "in " + range, [lo, hi](double v) { return v >= lo && v <= hi; });
}

// CLI11_PARSE for an MPI program, called after MPI_Init with the process's rank: the help, or the error, printed by
// rank 0 alone (parsed before MPI_Init, every rank printed it). nullopt: go on; else the status to exit with (after
// MPI_Finalize: every rank parsed the same command line and stops here too, so no rank is left in a collective).
inline std::optional<int> parse_on_rank(CLI::App& app, int argc, const char* const* argv, int rank) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : e.get_exit_code();
  }
}

}  // namespace hpdt::cli
