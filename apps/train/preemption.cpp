#include "preemption.h"

#include <csignal>

namespace hpdt::train {

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_preemption_signal(int sig) { g_signal = sig; }
}  // namespace

void install_preemption_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_preemption_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

bool preemption_requested() { return g_signal != 0; }
int preemption_signal() { return int(g_signal); }

}  // namespace hpdt::train
