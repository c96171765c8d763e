// placeholder: filled by the CUDA kernels work (issue 7)
