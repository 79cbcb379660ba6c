/* The backend and communicator a job runs on: the CPU with MPI, or one GPU per rank with
   NCCL or MPI on device buffers. */
#pragma once

#include "mgt/backend.h"
#include "mgt/comm.h"
#include "mgt/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_device {
  mgt_backend *be;
  mgt_comm *comm;
  int cuda;       /* the comm is the CUDA one */
  int gpu;        /* the GPU of this rank (cuda only) */
  char desc[256]; /* for the layout line: "cpu (BLAS: Haswell)", "cuda: H200 ..., NCCL" */
} mgt_device;

/* Opens the backend `device` (MGT_DEVICE_*) with GEMM inputs at `precision`; the GPU is the
   node-local rank modulo the visible GPUs. dist_backend (MGT_DIST_BACKEND_*, -1: NCCL when it
   is built and every rank has its own GPU, else MPI) chooses the device collectives; cpu_gemm
   (MGT_CPU_GEMM_*, -1: native where every rank's CPU has bf16 units) the CPU's bf16 GEMMs.
   Collective over the grid's world; failures are agreed. */
MGT_NODISCARD mgt_status mgt_device_open(mgt_device *d, int device, int dist_backend, int cpu_gemm,
                                         mgt_precision precision, const mgt_grid *grid,
                                         mgt_comm_stats *stats);
/* --cpu-gemm-fp32 (MGT_FP32_GEMM_*) on a CPU device: the library of fp32 GEMMs; auto times
   OpenBLAS and oneDNN on world rank 0 over a layer's GEMMs (rows tokens, widths C, qkv, f per
   rank) and takes oneDNN where it is at least 10% faster, every rank the same; under a 16-bit
   precision, or where a layer's GEMMs are too small to time, the BLAS stays. Says which in the
   layout description. Collective over the grid's world. */
MGT_NODISCARD mgt_status mgt_device_fp32_gemm(mgt_device *d, int choice, int rows, int C, int qkv,
                                              int f, mgt_precision precision, const mgt_grid *grid);
void mgt_device_close(mgt_device *d);
/* Free and total memory of the device in bytes (0, 0 for the CPU: see available_memory). */
void mgt_device_memory(const mgt_device *d, size_t *free_bytes, size_t *total_bytes);
/* The device of a run that names none (Megatron-LM's scripts run on GPUs without saying so):
   cuda when this mgt has CUDA and every rank sees a GPU, else cpu; why says which. Collective. */
int mgt_device_auto(MPI_Comm world, char *why, size_t why_size);
/* The free memory of the GPU this rank would take, before anything is opened (0 when unknown,
   e.g. no GPU on a login node); `what` says which. Collective over world (the node-local
   rank). */
void mgt_device_probe_gpu(MPI_Comm world, size_t *free_bytes, char *what, size_t what_size);

#ifdef __cplusplus
}
#endif
