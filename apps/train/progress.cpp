#include "progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace hpdt::train {

Progress::Mode Progress::resolve(const std::string& name, std::FILE* out) {
  if (name == "bar") return Mode::bar;
  if (name == "lines") return Mode::lines;
  if (name == "off") return Mode::off;
  // Launchers hand ranks a pseudo-terminal even when the job's output goes to a file (Open MPI's
  // mpirun does), so inside a batch job plain lines are the safe default.
  if (std::getenv("SLURM_JOB_ID") || std::getenv("PBS_JOBID")) return Mode::lines;
  return isatty(fileno(out)) ? Mode::bar : Mode::lines;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

void Progress::start_epoch(int epoch, int epochs, long steps_in_epoch) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps_in_epoch;
  drawn_ = false;
}

void Progress::update(long step, double loss, double accuracy, double images_per_s, double step_seconds) {
  if (mode_ == Mode::off) return;
  const double eta = double(steps_ - step) * step_seconds;
  if (mode_ == Mode::bar) {
    constexpr int kWidth = 24;
    const int filled = steps_ > 0 ? int(kWidth * step / steps_) : kWidth;
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r\033[Kepoch %d/%d [%s] %ld/%ld loss %.4f acc %5.1f%% %7.1f img/s ETA %s", epoch_ + 1,
                 epochs_, bar.c_str(), step, steps_, loss, 100 * accuracy, images_per_s,
                 format_duration(eta).c_str());
    drawn_ = true;
  } else if (step % log_every_ == 0 || step == steps_) {
    std::fprintf(out_, "epoch %d/%d step %ld/%ld loss %.4f acc %.1f%% %.1f img/s ETA %s\n", epoch_ + 1, epochs_, step,
                 steps_, loss, 100 * accuracy, images_per_s, format_duration(eta).c_str());
  }
  std::fflush(out_);
}

void Progress::finish_epoch(const std::string& summary) {
  if (mode_ == Mode::off) return;
  if (drawn_) std::fputc('\n', out_);
  std::fprintf(out_, "%s\n", summary.c_str());
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace hpdt::train
