// The receive side of NCCL's SHM transport on one GPU: CTAs that load from mapped pinned host
// memory (what a receiving rank's CTA does), alone and while other CTAs of the same GPU store
// into host memory at the same pace (a tree rank that receives and sends through host memory
// at once), with NCCL's Simple unroll on sm_80+ (ncclCollUnroll = 8 loads of 16 B per thread).
// Reader CTA i and writer CTA i are coupled: neither runs more than one chunk ahead of the
// other, as a pipeline's two directions are.  Prints per case: pairs, threads, mode, GB/s of
// each direction, and the read latency that Little's law gives (bytes in flight / rate).
// Build and run: nvcc -O3 -arch=sm_90 -o sd benchmarks/gpu_shm_duplex.cu && ./sd
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)
constexpr int UNROLL = 8;

// Blocks [0, pairs) read host -> device; blocks [pairs, 2 pairs) write device -> host (when
// coupled, else absent).  progress[2 * pair + role] counts the chunks each has finished.
__global__ void shm(const int4* __restrict__ hsrc, int4* __restrict__ ddst, const int4* __restrict__ dsrc,
                    int4* __restrict__ hdst, size_t per_block, int pairs, volatile unsigned* progress) {
  const bool writer = blockIdx.x >= pairs;
  const int pair = blockIdx.x % pairs;
  const int4* src = writer ? dsrc : hsrc;
  int4* dst = writer ? hdst : ddst;
  const size_t chunk = (size_t)blockDim.x * UNROLL, base0 = pair * per_block;
  const bool coupled = gridDim.x == 2 * pairs;
  unsigned it = 0;
  for (size_t base = 0; base < per_block; base += chunk, ++it) {
    if (coupled) {
      if (threadIdx.x == 0) while (progress[2 * pair + !writer] + 1 < it) {}
      __syncthreads();
    }
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = src[base0 + base + u * blockDim.x + threadIdx.x];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) dst[base0 + base + u * blockDim.x + threadIdx.x] = v[u];
    __syncthreads();
    if (coupled && threadIdx.x == 0) { __threadfence_system(); progress[2 * pair + writer] = it + 1; }
  }
}

int main() {
  const size_t bytes = 256ull << 20, n = bytes / sizeof(int4);
  int4 *hA, *hB, *dA, *dC, *hAd, *hBd;
  unsigned* prog;
  CK(cudaHostAlloc(&hA, bytes, cudaHostAllocMapped)); CK(cudaHostAlloc(&hB, bytes, cudaHostAllocMapped));
  CK(cudaMalloc(&dA, bytes)); CK(cudaMalloc(&dC, bytes)); CK(cudaMalloc(&prog, 64 * sizeof(unsigned)));
  for (size_t i = 0; i < bytes / 4; ++i) ((unsigned*)hA)[i] = (unsigned)(i * 2654435761u);
  CK(cudaMemcpy(dA, hA, bytes, cudaMemcpyHostToDevice));
  CK(cudaHostGetDevicePointer((void**)&hAd, hA, 0)); CK(cudaHostGetDevicePointer((void**)&hBd, hB, 0));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::printf("# pairs threads mode      read GB/s  write GB/s  read latency us (Little: threads*%d*16 B in flight)\n", UNROLL);
  for (int threads : {256, 384, 512}) for (int pairs : {1, 2, 4}) for (int coupled = 0; coupled < 2; ++coupled) {
    const size_t chunk = (size_t)threads * UNROLL;
    const size_t per_block = (n / pairs) / chunk * chunk;
    std::vector<float> ms;
    for (int rep = 0; rep < 7; ++rep) {
      CK(cudaMemset(prog, 0, 64 * sizeof(unsigned)));
      CK(cudaEventRecord(e0));
      shm<<<pairs * (1 + coupled), threads>>>(hAd, dC, dA, hBd, per_block, pairs, prog);
      CK(cudaGetLastError()); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
      float t; CK(cudaEventElapsedTime(&t, e0, e1)); if (rep >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double gbps = per_block * pairs * 16.0 / (ms[ms.size() / 2] * 1e6);
    const double latency_us = pairs * threads * UNROLL * 16.0 / (gbps * 1e3);
    std::printf("%5d %7d %-9s %9.1f %11.1f %9.2f\n", pairs, threads, coupled ? "coupled" : "read-only", gbps,
                coupled ? gbps : 0.0, latency_us);
  }
  // Check the last run's bytes: host A -> device C and device A -> host B.
  std::vector<unsigned> x(1 << 20); CK(cudaMemcpy(x.data(), dC, 4 << 20, cudaMemcpyDeviceToHost));
  bool ok = std::equal(x.begin(), x.end(), (unsigned*)hA) && std::equal((unsigned*)hB, (unsigned*)hB + (1 << 20), (unsigned*)hA);
  std::printf("check %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
