// The process-wide lock around HDF5 calls.
//
// Debian's parallel HDF5 (like most parallel builds) is not thread-safe, and ShardedReader calls HDF5
// from its I/O thread while the training thread may write a checkpoint. Every HDF5 call in hpdt takes
// this lock. Code outside io/ that calls HDF5 directly while a ShardedReader is alive must take it too.
//
// Rule that keeps this deadlock-free: while a ShardedReader exists, HDF5 work on other threads must be
// non-collective (checkpoints are: one rank writes with the serial driver). Collective HDF5 work of the
// readers themselves (open, reads, close) all runs on the one I/O thread, in the same order on every rank.
#pragma once

#include <mutex>

namespace hpdt::io {

std::recursive_mutex& hdf5_mutex();

}  // namespace hpdt::io
