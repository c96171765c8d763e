// Rendering DOT to PNG with graphviz's `dot` when it is installed.
#pragma once

#include <string>

namespace hpdt::nccl_log {

bool have_graphviz();  // `dot` on PATH
// Writes `png_path` (atomically: a temporary then a rename). False with the reason when `dot` is
// missing or fails; nothing is left behind then.
bool render_png(const std::string& dot_text, const std::string& png_path, std::string* why);

}  // namespace hpdt::nccl_log
