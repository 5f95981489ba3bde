// TF_HOST_DEVICE marks a function that both the CPU code and CUDA kernels call, so a computation
// that must agree bit for bit on both sides (a random number, an index) is written once.
#pragma once

#ifdef __CUDACC__
#define TF_HOST_DEVICE __host__ __device__
#else
#define TF_HOST_DEVICE
#endif
