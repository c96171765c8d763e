// Preemption: SIGTERM (what Slurm sends at the time limit or on scancel, and what `sbatch --signal`
// can send early) and SIGUSR1 only set a flag; the training loop checks it once per step on every rank
// (a MAX all-reduce, so all ranks stop at the same step), writes a checkpoint and exits with
// kRequeueExitCode, which the job scripts turn into `scontrol requeue` / a PBS rerun.
#pragma once

namespace hpdt::train {

inline constexpr int kRequeueExitCode = 75;  // EX_TEMPFAIL: "try again later"

void install_preemption_handlers();
bool preemption_requested();   // this process got a signal
int preemption_signal();       // which one (0 if none)

}  // namespace hpdt::train
