// Host-memory bandwidth from one GPU, the physics of NCCL's SHM transport (a GPU's CTAs store
// into mapped pinned host memory on the send side and load from it on the receive side), each
// direction alone and both at once; and the copy engines (cudaMemcpyAsync) the same three ways.
// Build and run: nvcc -O3 -arch=sm_90 -o ghm benchmarks/gpu_host_memory.cu && ./ghm
// Prints one line per case: what, CTAs, threads, GB/s per direction (median of 7 timed runs).
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)

// Each thread moves 16 B per access, UNROLL accesses in flight (NCCL's Simple protocol keeps
// several 16 B loads per thread in flight the same way).
template <int UNROLL>
__global__ void copy16(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x * UNROLL;
  for (size_t base = ((size_t)blockIdx.x * blockDim.x) * UNROLL + threadIdx.x; base < n; base += stride) {
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) { size_t i = base + (size_t)u * blockDim.x; if (i < n) v[u] = src[i]; }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) { size_t i = base + (size_t)u * blockDim.x; if (i < n) dst[i] = v[u]; }
  }
}

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main() {
  const size_t bytes = 512ull << 20, n = bytes / sizeof(int4);
  int4 *hA, *hB, *dA, *dB, *dC, *dD;
  CK(cudaHostAlloc(&hA, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostAlloc(&hB, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaMalloc(&dA, bytes)); CK(cudaMalloc(&dB, bytes)); CK(cudaMalloc(&dC, bytes)); CK(cudaMalloc(&dD, bytes));
  for (size_t i = 0; i < bytes / 4; ++i) { ((unsigned*)hA)[i] = (unsigned)(i * 2654435761u); ((unsigned*)hB)[i] = (unsigned)i; }
  CK(cudaMemcpy(dA, hA, bytes, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, hB, bytes, cudaMemcpyHostToDevice));
  int4 *hAd, *hBd;
  CK(cudaHostGetDevicePointer((void**)&hAd, hA, 0)); CK(cudaHostGetDevicePointer((void**)&hBd, hB, 0));
  cudaStream_t s1, s2; CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, e2, e3; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1)); CK(cudaEventCreate(&e2)); CK(cudaEventCreate(&e3));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, PCIe gen/width via nvidia-smi; %zu MiB per direction\n", prop.name, bytes >> 20);
  // mode 0: read host (host → GPU), 1: write host (GPU → host), 2: both at once on two streams.
  auto run = [&](int mode, int ctas, int threads, bool ce) {
    std::vector<float> up, down;
    for (int rep = 0; rep < 9; ++rep) {
      CK(cudaDeviceSynchronize());
      CK(cudaEventRecord(e0, s1)); CK(cudaStreamWaitEvent(s2, e0, 0)); CK(cudaEventRecord(e2, s2));
      if (mode != 1) {
        if (ce) CK(cudaMemcpyAsync(dC, hA, bytes, cudaMemcpyHostToDevice, s1));
        else copy16<4><<<ctas, threads, 0, s1>>>(hAd, dC, n);
      }
      if (mode != 0) {
        if (ce) CK(cudaMemcpyAsync(hB, dA, bytes, cudaMemcpyDeviceToHost, s2));
        else copy16<4><<<ctas, threads, 0, s2>>>(dA, hBd, n);
      }
      CK(cudaGetLastError());
      CK(cudaEventRecord(e1, s1)); CK(cudaEventRecord(e3, s2)); CK(cudaDeviceSynchronize());
      float a, b; CK(cudaEventElapsedTime(&a, e0, e1)); CK(cudaEventElapsedTime(&b, e2, e3));
      if (rep < 2) continue;  // warm-up
      if (mode != 1) down.push_back(bytes / (a * 1e6f));
      if (mode != 0) up.push_back(bytes / (b * 1e6f));
    }
    const char* what[] = {"host->gpu", "gpu->host", "both"};
    std::printf("%-3s %-10s ctas=%4d threads=%4d  h2d %6.1f GB/s  d2h %6.1f GB/s\n", ce ? "ce" : "sm", what[mode],
                ce ? 0 : ctas, ce ? 0 : threads, down.empty() ? 0.f : median(down), up.empty() ? 0.f : median(up));
  };
  for (int mode = 0; mode < 3; ++mode) run(mode, 0, 0, true);
  const int ctas[] = {1, 2, 4, 8, 16, 32, 132};
  for (int threads : {256, 512}) for (int c : ctas) for (int mode = 0; mode < 3; ++mode) run(mode, c, threads, false);
  // Check: the last copies moved the right bytes (host A -> device C, device A -> host B).
  std::vector<unsigned> x(1 << 20), z(1 << 20);
  CK(cudaMemcpy(x.data(), dC, 4 << 20, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(z.data(), dA, 4 << 20, cudaMemcpyDeviceToHost));
  bool ok = std::equal(x.begin(), x.end(), (unsigned*)hA) && std::equal(z.begin(), z.end(), (unsigned*)hB);
  std::printf("check %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
