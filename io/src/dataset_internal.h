// Private: dataset metadata and validation on an already open file (serial or MPI-IO driver).
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "hpdt/io/dataset.h"

namespace hpdt::io::detail {

// Validates the open file and returns its info; when labels_out is given, all labels are read into
// it (and range-checked when check_labels). The caller holds hdf5_mutex().
DatasetInfo read_dataset_info(hid_t file, const std::string& path, bool check_labels, std::vector<int32_t>* labels_out);

}  // namespace hpdt::io::detail
