// host-device.h — LI_HOST_DEVICE, for the few core functions that the CUDA kernels must compute
// bit for bit as the CPU does (fp8.h, rng.h): a plain C11 inline function on the host, and under
// nvcc one that compiles for both the host and the device. Nothing else belongs here.
#ifndef LI_HOST_DEVICE_H
#define LI_HOST_DEVICE_H

#ifdef __CUDACC__
#define LI_HOST_DEVICE __host__ __device__
#else
#define LI_HOST_DEVICE
#endif

#endif
