// Shim <cudaTypedefs.h> of the CPU emulator of CUDA: the driver entry points hpdt looks up.
#pragma once

#include <cuda.h>

typedef CUresult(CUDAAPI* PFN_cuTensorMapEncodeTiled_v12000)(
    CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void* globalAddress,
    const cuuint64_t* globalDim, const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
    const cuuint32_t* elementStrides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill);

typedef CUresult(CUDAAPI* PFN_cuTensorMapEncodeIm2col_v12000)(
    CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void* globalAddress,
    const cuuint64_t* globalDim, const cuuint64_t* globalStrides, const int* pixelBoxLowerCorner,
    const int* pixelBoxUpperCorner, cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
    const cuuint32_t* elementStrides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill);
