// What rank 0 shows while training: a one-line progress bar per epoch (step, loss, accuracy, img/s,
// ETA) redrawn in place on a terminal, or plain lines every N steps when stdout is a file or pipe
// (job logs must stay readable).
#pragma once

#include <cstdio>
#include <string>

namespace hpdt::train {

class Progress {
 public:
  enum class Mode { bar, lines, off };
  static Mode resolve(const std::string& name, std::FILE* out);  // "auto" -> bar on a TTY, else lines

  Progress(Mode mode, std::FILE* out, int log_every) : mode_(mode), out_(out), log_every_(log_every) {}
  void start_epoch(int epoch, int epochs, long steps_in_epoch);
  // Called after every optimizer step with running averages over the epoch so far.
  void update(long step_in_epoch, double loss, double accuracy, double images_per_s, double step_seconds);
  void finish_epoch(const std::string& summary);  // ends the bar and prints the summary line

 private:
  Mode mode_;
  std::FILE* out_;
  int log_every_;
  int epoch_ = 0, epochs_ = 0;
  long steps_ = 0;
  bool drawn_ = false;
};

std::string format_duration(double seconds);  // "1:02:03", "02:03"

}  // namespace hpdt::train
