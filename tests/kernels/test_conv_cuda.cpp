// placeholder: filled by the CUDA kernels work (issue 7)
#include <gtest/gtest.h>
