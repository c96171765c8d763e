// The hpdt dataset file: one HDF5 file per split.
//
//   /images   u8  [N, C, H, W]   contiguous, or chunked along N (optionally deflate-compressed)
//   /labels   i32 [N]            class index in [0, num_classes)
//   attributes on the root group:
//     hpdt_format "hpdt-dataset"   format_version 1          num_classes (i64)
//     class_names (K fixed-length strings)                    mean, std (f32 [C], of pixel/255)
//     source (text)   source_checksum (text: "<file> crc32=<hex> bytes=<n>; ...")   created_by (text)
//
// Every rank reads the same file; see reader.h. docs/io.md has the full schema and the reasons.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hpdt::io {

inline constexpr int64_t kDatasetFormatVersion = 1;
inline constexpr const char* kDatasetFormatName = "hpdt-dataset";

enum class Layout { contiguous, chunked };
Layout parse_layout(const std::string& name);  // "contiguous" | "chunked"; throws naming the text
const char* layout_name(Layout layout);

// What a dataset file holds, read from its metadata (validated, see inspect_dataset).
struct DatasetInfo {
  std::string path;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t num_classes = 0;
  std::vector<std::string> class_names;
  std::vector<float> mean, std;  // per channel, of pixel/255
  std::string source, source_checksum, created_by;
  int64_t format_version = 0;
  Layout layout = Layout::contiguous;
  int64_t chunk_samples = 0;  // samples per chunk (chunked layout), 0 when contiguous
  bool compressed = false;    // deflate filter on /images
  int64_t sample_bytes() const { return c * h * w; }
  int64_t file_payload_bytes() const { return n * sample_bytes() + n * 4; }
};

// Opens `path` (serial driver, on the calling rank only) and validates it: the file exists and is
// HDF5; /images is u8 of rank 4 and /labels i32 of rank 1 with the same N > 0; the format name and
// version match this build; num_classes, class_names, mean and std agree with the shapes; and, when
// check_labels, every label is in [0, num_classes). Throws hpdt::Error naming the file and dataset.
DatasetInfo inspect_dataset(const std::string& path, bool check_labels = true);

// Reads samples [first, first+count) of a dataset (serial driver): images u8 [count, C, H, W] and
// labels. For tests and tools; training reads go through ShardedReader.
void read_samples(const std::string& path, int64_t first, int64_t count, std::vector<uint8_t>& images,
                  std::vector<int32_t>& labels);

// ---- writing --------------------------------------------------------------------------------

struct DatasetSpec {
  int64_t n = 0, c = 1, h = 0, w = 0;
  std::vector<std::string> class_names;  // num_classes = class_names.size()
  std::string source;                    // where the samples came from (free text)
  std::string source_checksum;           // checksum of the source files (free text)
};

struct WriteOptions {
  Layout layout = Layout::contiguous;  // fastest for shuffled reads here (docs/io.md)
  int64_t chunk_samples = 0;  // chunked: samples per chunk; 0 = about 1 MiB per chunk
  int deflate_level = 0;      // 0 = no compression; 1-9 = deflate (chunked only; slower to read in parallel)
  int64_t block_bytes = 64 << 20;  // each rank writes its slice in collective blocks of about this size
};

// Produces samples [first, first+count): images u8 [count, C, H, W] and labels, into the given buffers.
// Must be deterministic and must not throw for in-range requests (ranks write collectively).
using SampleFill = std::function<void(int64_t first, int64_t count, uint8_t* images, int32_t* labels)>;

// Writes a dataset file collectively over `comm` (MPI_COMM_SELF for one process): each rank fills
// and writes a contiguous slice of whole chunks; mean/std are reduced over all ranks. The file is
// written under a temporary name in the same directory and renamed when complete, so `path` either
// keeps its old content or gets the whole new file. Labels outside [0, K) fail the write (on every
// rank, with the temporary file removed). Returns the written file's info.
DatasetInfo write_dataset(MPI_Comm comm, const std::string& path, const DatasetSpec& spec, const SampleFill& fill,
                          const WriteOptions& options = {});

}  // namespace hpdt::io
