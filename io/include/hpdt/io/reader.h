// ShardedReader: each rank's share of every global batch, read from one HDF5 dataset file with
// collective MPI-IO, decoded (u8 -> normalised f32) and augmented on a background thread.
//
// Sample order (DistributedSampler semantics, but rank-count independent):
//   - epoch e's order is a permutation of [0, N) from (seed, e) (Fisher-Yates on Philox), or the
//     identity when not shuffling. It does not depend on the number of ranks.
//   - block shuffle (ReaderOptions::shuffle_block = K > 1, opt-in): the permutation shuffles the
//     ceil(N/K) blocks of K consecutive samples (the last one may be shorter) instead of samples,
//     then shuffles the positions inside each window of one global batch B (seeded, independent of
//     the rank count). A step's global batch is then about B/K runs of K adjacent rows of the file,
//     and every rank's share is still a random mix of all of them. K = 1 is the per-sample order.
//   - interleaved windows (ReaderOptions::window_batches = W > 1, block orders): instead of the
//     in-batch shuffle, each window of W*B positions (W global batches) maps position j of its step s
//     to row j*W + pi_j(s) of the window's rows in block order (pi_j: a seeded permutation of the W
//     steps per column j; a window shorter than W*B uses its number of steps, an epoch tail shorter
//     than B the in-window shuffle). Rank r's shares over a window are then the contiguous stretch
//     [r*b*W, (r+1)*b*W) of the window's rows, at any rank count, and reads fetch a window at once.
//   - step s covers positions [s*B, (s+1)*B) of that order (B = global batch); rank r of p takes the
//     contiguous part [s*B + r*b, s*B + (r+1)*b), b = B/p. So the global batch of a step is the same
//     set of samples, in the same order, at any rank count: concatenating the ranks' batches in rank
//     order gives the 1-rank batch.
//   - tail: TailPolicy::drop gives floor(N/B) steps and never repeats a sample; TailPolicy::pad gives
//     ceil(N/B) steps, the last one filled by wrapping around to the start of the order. Batch::valid
//     says how many leading samples of this rank's batch are real (not wrap-around padding).
//   - evaluation mode: no shuffle, no augmentation, pad: every sample appears exactly once among the
//     `valid` samples of all ranks over one epoch; the trainer counts only those.
//   - augmentation (random crop with zero padding, horizontal flip) is a function of (seed, epoch,
//     position in the epoch): reproducible, and the same at any rank count.
//   - next() continues into the next epoch after the last step; set_epoch/resume jump.
//
// Collective reads: every step each rank reads its b samples (sorted, merged into runs of adjacent
// rows) as one hyperslab selection with H5FD_MPIO_COLLECTIVE; H5Pget_mpio_actual_io_mode is checked
// after every read and a fallback to independent I/O is counted and logged once. Two-phase reads
// (ReaderOptions::exchange with a block order, and collective steps whose global batch exceeds the
// dataset, see reader.cpp): rank r reads the r-th equal part of the global batch's distinct rows in
// file order, then one MPI_Alltoallv gives every rank the samples of its share; with windows the same
// is done for W steps at once, so every rank streams long runs. Chunked datasets are
// read one run per H5Dread (HDF5 1.10 is slow on unions spread over many chunks).
//
// Threads: all readers of a process share one I/O thread that runs their HDF5 and MPI work (open,
// reads, exchanges, close) in submission order, one decode thread (u8 -> f32, augmentation) that
// works on batch k while the I/O thread reads batch k+1, and one thread for readahead hints.
// Submission happens only on the calling thread at deterministic points (construction,
// set_epoch/resume, next, destruction), so every rank runs the same collective sequence. Requirements: MPI initialised with MPI_THREAD_MULTIPLE (otherwise the reader works
// synchronously on the calling thread, with a warning), and every rank creates, uses and destroys its
// readers in the same order. Other HDF5 work while a reader is alive must be non-collective (see
// hdf5_lock.h).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpdt/core/tensor.h"
#include "hpdt/io/dataset.h"
#include "hpdt/kernels/image.h"

namespace hpdt::io {

enum class ReaderMode { train, eval };
enum class TailPolicy { drop, pad };

struct ReaderOptions {
  ReaderMode mode = ReaderMode::train;
  int prefetch = 2;                      // batches kept ready ahead of next(); 0 = read inside next()
  bool shuffle = true;                   // train mode only
  // Block-shuffled order (train mode, with shuffle): shuffle blocks of this many consecutive samples,
  // then the samples inside each global batch (see the top of this file), so that a step reads about
  // B/K long runs of the file instead of B scattered samples. 1 = per-sample shuffle, exactly the
  // order of earlier versions (existing checkpoints resume as before). The order depends on K and B,
  // not on the rank count; resuming with another K or B continues in another order. A global batch
  // mixes only B/K blocks: keep B/K large enough for training (say >= 8).
  int64_t shuffle_block = 1;
  // With shuffle_block > 1 on more than one rank: read the global batch's rows in two phases, every
  // rank an equal contiguous part (a few long runs), then MPI_Alltoallv to the ranks whose shares
  // hold them (true); or every rank reads its own rows, which the window shuffle scatters over the
  // step's blocks, and a collective transfer lets MPI-IO aggregate them (false, default: measured
  // no faster with the exchange on one node, docs/io.md; may pay off on parallel file systems).
  bool exchange = false;
  // Windows of this many global batches (W >= 1). With W > 1:
  //   - a block order interleaves each window of W global batches (see the top of this file): step s
  //     of the window takes position j of its global batch from the j-th stretch of W consecutive
  //     rows of the window's blocks, in a seeded random step order per stretch. So rank r's shares
  //     over the window are one contiguous stretch of its blocks at any rank count, and a global
  //     batch is a stratified sample of the window (one row from each stretch) instead of a random
  //     one. With blocks of ~1000 ImageNet samples a rank reads a few runs of ~150 MB per window,
  //     which this machine's disk serves at near sequential speed (docs/io.md);
  //   - reads from the file go a window at a time: each rank reads the rows of its shares of the
  //     window's steps (when these are disjoint and no more runs than below), or, for other orders,
  //     in two phases: rank q reads the q-th equal part of the window's distinct rows in file order
  //     and one MPI_Alltoallv hands every rank the rows of its shares. Batches are cut from there; the
  //     next window is read while this one is consumed (prefetch > 0 and MPI_THREAD_MULTIPLE).
  // Memory per rank: about 2-3 windows of its shares (W*B/p samples each). The order depends on W
  // (block orders only), never on the rank count; W = 1 is the order and reads of before.
  int64_t window_batches = 1;
  bool augment = false;                  // train mode only: random crop with padding + horizontal flip
  int crop_padding = 4;                  // zero padding (in pixels, raw image) around the random crop
  bool hflip = true;                     // with augment: flip horizontally with probability 1/2
  bool normalize = true;                 // (x/255 - mean[c]) / std[c] with the file's mean/std; else x/255
  // Threads that decode a batch (u8 -> f32, normalisation, augmentation), its samples split among them (OpenMP on
  // the decode thread): the same bits at any count. 1, the default, decodes on the decode thread alone, beside a CPU
  // step's own threads; hpdt-train on a GPU, whose host cores are otherwise idle, gives it more (a 224x224 batch of
  // 256 with crop and flip: ~60 ms on one thread, 27-34 on two, on this project's 2-core machine; docs/train.md).
  int decode_threads = 1;
  // Hand over the u8 pixels instead of decoded images: Batch::pixels (u8 [b, C, H, W], the samples as stored) and
  // Batch::crops (i32 [b, 3], each sample's crop and flip, zeros without augmentation), Batch::images undefined. The
  // consumer decodes them with kernels::decode_images and normalization(), on the GPU say (hpdt-train does): the
  // same values as the decode here, bit for bit, from a quarter of the bytes.
  bool raw_pixels = false;
  // Decoded images channels last: Batch::images f32 [b, H, W, C], the input of a model in NHWC (nn::Model::
  // set_input_layout) without a transpose. The pixels of raw_pixels stay as stored (decode_images takes the layout).
  bool channels_last = false;
  TailPolicy tail = TailPolicy::drop;    // train mode; eval mode always pads
  bool collective = true;                // collective transfer (false: independent, for comparisons)
  // Readahead hints: when a batch is queued, ask the kernel to start reading this rank's rows of it
  // (posix_fadvise WILLNEED on their byte ranges, on a hint thread), so the disk works on the next
  // batches while the current one is read and decoded. Contiguous datasets read from the file;
  // needs prefetch > 0 and MPI_THREAD_MULTIPLE; changes no result.
  bool readahead = true;
  bool pinned = true;                    // page-locked batch memory when a GPU is usable
  // Batch memory from a pool instead of a fresh (pinned) allocation per batch. Then Batch::images and
  // Batch::labels are views (Tensor::wrap) of memory that Batch::memory keeps alive: valid while the
  // Batch or a copy of it lives (the reader may be gone), reused after. Saves the allocation and
  // first-touch page faults of a new f32 buffer every batch (docs/io.md), or cudaHostAlloc when
  // pinned. Off by default: a Tensor copied out of a dropped Batch would dangle.
  bool reuse_batch_memory = false;
  // Datasets whose /images hold at most this many bytes are read whole into memory at open (one
  // read per rank; every rank keeps a copy) and batches are cut from there: Fashion-MNIST (47 MB)
  // then costs no I/O per step. 0 = always read from the file.
  int64_t in_memory_limit_bytes = int64_t(1) << 30;
  // Read only the first max_samples samples of the file (0: all), as if it held no others: the order, the steps per
  // epoch and the shards are those of a file of that many samples (hpdt-train's --train-samples, for short runs).
  int64_t max_samples = 0;
};

struct Batch {
  Tensor images;  // f32 [b, C, H, W] ([b, H, W, C] channels_last), CPU (pinned when asked and a GPU is usable);
                  // undefined with raw_pixels
  Tensor labels;  // i32 [b]
  Tensor pixels;  // raw_pixels: u8 [b, C, H, W], the samples as stored (pinned as images are)
  Tensor crops;   // raw_pixels: i32 [b, 3], each sample's (dy, dx, flip) for kernels::decode_images
  std::shared_ptr<void> memory;  // reuse_batch_memory: owns the tensors above (back to the pool when released)
  int64_t epoch = 0, step = 0;
  int64_t valid = 0;            // leading samples that are real; < b only in a padded last step
  std::vector<int64_t> indices; // dataset index of each sample (row of /images)
  double wait_seconds = 0;      // how long next() blocked for this batch (0 when it was ready)
  double read_seconds = 0;      // the HDF5 read of this rank's share (on the I/O thread)
  double exchange_seconds = 0;  // MPI_Alltoallv of a two-phase (block order) read; part of read_seconds
  double decode_seconds = 0;    // u8 -> f32, normalisation and augmentation (raw_pixels: the gather alone)
  int64_t runs = 0;             // contiguous runs of rows this rank read for the batch
  double read_cpu_seconds = 0;  // CPU time of the I/O thread on this batch (user + kernel, incl. page-cache copies)
  double decode_cpu_seconds = 0;  // CPU time of the decode thread on this batch (incl. page faults of the new tensors)
  bool collective = true;       // H5Pget_mpio_actual_io_mode: collective really happened
};

struct ReaderStats {
  int64_t batches = 0;
  int64_t independent_fallbacks = 0;  // reads where HDF5 fell back from collective to independent
  double wait_seconds = 0, read_seconds = 0, exchange_seconds = 0, decode_seconds = 0;
  int64_t bytes_read = 0;             // image bytes of this rank's batches (its share of the samples)
  int64_t runs = 0;                   // contiguous runs of rows read (a measure of random access)
  double read_cpu_seconds = 0, decode_cpu_seconds = 0;  // thread CPU time (load-independent cost)
};

class ShardedReader {
 public:
  // Opens `path` collectively over `comm` (duplicated internally) and validates it (every rank gets
  // the same error). global_batch must be a positive multiple of the communicator size. Throws
  // hpdt::Error naming the file, dataset or option.
  ShardedReader(MPI_Comm comm, const std::string& path, int64_t global_batch, uint64_t seed, ReaderOptions options = {});
  ~ShardedReader();
  ShardedReader(const ShardedReader&) = delete;
  ShardedReader& operator=(const ShardedReader&) = delete;

  const DatasetInfo& info() const;
  // The per-channel normalisation of the decode (the file's mean and std, or none without
  // ReaderOptions::normalize): what kernels::decode_images takes to decode raw_pixels batches.
  const kernels::PixelNormalization& normalization() const;
  const ReaderOptions& options() const;
  int64_t global_batch() const;
  int64_t local_batch() const;
  int64_t steps_per_epoch() const;
  bool in_memory() const;  // the images were read into memory at open (in_memory_limit_bytes)

  void set_epoch(int64_t epoch);               // the next batch is (epoch, 0)
  void resume(int64_t epoch, int64_t step);    // the next batch is (epoch, step)
  Batch next();                                // collective: every rank calls it the same number of times
  ReaderStats stats() const;

  // The order of epoch `epoch` (a permutation of [0, n) when shuffling) and the dataset indices of
  // rank `rank`'s share of step `step`: the pure functions the reader follows, for tests and tools.
  // block > 1: the block-shuffled order with windows of `window` positions (the global batch B);
  // window_batches > 1: interleaved windows of that many global batches (ReaderOptions::window_batches).
  static std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int64_t block = 1,
                                          int64_t window = 0, int64_t window_batches = 1);
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t step, int rank) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpdt::io
