// What one CTA's copy rate depends on (issue 12, branch ctarate): NCCL's Simple copy/reduce loop run by
// C CTAs of N threads, against the latency of a dependent load.
// Build and run: nvcc -O3 -arch=sm_90 -o ctarate benchmarks/gpu_cta_rate.cu && ./ctarate
//
// (1) latency: one thread chases a random cycle of 128-byte lines with ld.volatile.global.u64 (each
//     load's address comes from the one before) over a working set of W bytes; ns and SM cycles per load
//     (clock64 over %globaltimer also gives the SM clock while it runs).  As run (2026-12-02) every
//     launch starts the chase at line 0, so the warm-up launch leaves the 20,256 lines a timed launch
//     visits in the L2 (2.6 MB): (1) measured the L2 hit latency at every working set, not HBM's.  The
//     HBM latency comes from (2)'s lightest rows instead (one warp, one load in flight per thread:
//     1 KiB per iteration over the payload rate).  A fixed run would start each launch where the last
//     one stopped.
// (2) copy: the loop of reduceCopyPacks (src/device/common_kernel.h, NCCL v2.28.9-1): per iteration each
//     thread issues Unroll 16-byte ld.volatile.global loads from source 0, then Unroll from each further
//     source (reduced with a 4×u32 add), then Unroll 16-byte st.global stores to each destination; a warp
//     takes a hunk of Unroll×32×16 bytes, warps stride over the buffer (ncclCollUnroll: 8 on sm_80..sm_100,
//     6 on sm_120, 4 before sm_80).  S sources and D destinations make S+D memory operations per payload
//     byte.  "l2": every stream holds 2 MiB and the kernel passes over it 16 times after a warm-up launch
//     (the whole working set stays in the L2, 60 MiB by cudaDeviceProp); "hbm": every stream holds 16 MiB, and the L2 is
//     scrubbed (a 256 MiB memset) before every timed launch.  Reports payload GB/s per CTA (median of 5
//     launches, CUDA events) and the bytes of loads each SM has in flight (N × Unroll × S × 16).  Then the
//     same at Unroll 8 with one CTA on every SM (132; 256 MiB streams, 512 passes for "l2"): the GPU's
//     ceilings, against which one CTA's rate is a small share.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)

__device__ __forceinline__ uint64_t ld_vol_u64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld_vol_v4(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_v4(uint4* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// lines[i*16] holds the index (in uint64 words) of the next line of the cycle.
__global__ void chase(const uint64_t* lines, int hops, uint64_t* out) {
  uint64_t i = 0;
  for (int h = 0; h < 256; ++h) i = ld_vol_u64(lines + i);  // warm the TLB walk a little
  uint64_t c0 = clock64(), t0 = globaltimer();
  for (int h = 0; h < hops; ++h) i = ld_vol_u64(lines + i);
  uint64_t c1 = clock64(), t1 = globaltimer();
  out[0] = c1 - c0; out[1] = t1 - t0; out[2] = i;
}

struct Streams { const uint4* src[3]; uint4* dst[2]; };

// Every CTA copies its own `packs` 16-byte packs of each stream, `passes` times.
template <int Unroll, int S, int D> constexpr int kMaxThreads = Unroll * S > 16 ? 640 : 1024;  // no spills
template <int Unroll, int S, int D>
__global__ void __launch_bounds__(kMaxThreads<Unroll, S, D>, 1) copy(Streams st, size_t packs, int passes) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  const size_t base = blockIdx.x * packs;
  const size_t hunk = (size_t)Unroll * 32;
  uint4 sink = make_uint4(0, 0, 0, 0);
  for (int p = 0; p < passes; ++p) {
    for (size_t h = warp; h * hunk < packs; h += nwarps) {
      const size_t at = base + h * hunk + lane;
      uint4 acc[Unroll];
      if (S > 0) {
#pragma unroll
        for (int u = 0; u < Unroll; ++u) acc[u] = ld_vol_v4(st.src[0] + at + u * 32);
      } else {
#pragma unroll
        for (int u = 0; u < Unroll; ++u) acc[u] = make_uint4(at + u, p, 1, 2);
      }
#pragma unroll
      for (int s = 1; s < S; ++s) {
        uint4 tmp[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u) tmp[u] = ld_vol_v4(st.src[s] + at + u * 32);
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
          acc[u].x += tmp[u].x; acc[u].y += tmp[u].y; acc[u].z += tmp[u].z; acc[u].w += tmp[u].w;
        }
      }
#pragma unroll
      for (int d = 0; d < D; ++d) {
#pragma unroll
        for (int u = 0; u < Unroll; ++u) st_v4(st.dst[d] + at + u * 32, acc[u]);
      }
      if (D == 0) {
#pragma unroll
        for (int u = 0; u < Unroll; ++u) sink.x ^= acc[u].x ^ acc[u].y ^ acc[u].z ^ acc[u].w;
      }
    }
  }
  if (D == 0 && sink.x == 0x9e3779b9u) st.dst[0][0] = sink;  // keeps the loads alive
}

using Kernel = void (*)(Streams, size_t, int);
template <int U> Kernel pick(int s, int d) {
  if (s == 1 && d == 0) return copy<U, 1, 0>;
  if (s == 0 && d == 1) return copy<U, 0, 1>;
  if (s == 1 && d == 1) return copy<U, 1, 1>;
  if (s == 2 && d == 1) return copy<U, 2, 1>;
  if (s == 1 && d == 2) return copy<U, 1, 2>;
  if (s == 2 && d == 2) return copy<U, 2, 2>;
  if (s == 3 && d == 1) return copy<U, 3, 1>;
  std::fprintf(stderr, "no kernel for %d/%d\n", s, d); std::exit(1);
}
Kernel pick(int u, int s, int d) {
  switch (u) { case 1: return pick<1>(s, d); case 2: return pick<2>(s, d); case 4: return pick<4>(s, d); }
  return pick<8>(s, d);
}

int main() {
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  // (1) dependent-load latency
  const size_t pool_bytes = 4ull << 30;
  uint64_t* pool; CK(cudaMalloc(&pool, pool_bytes));
  uint64_t* out; CK(cudaMalloc(&out, 64));
  const size_t working[] = {512ull << 10, 4ull << 20, 16ull << 20, 32ull << 20, 256ull << 20, 2ull << 30};
  std::printf("\n# latency: one thread, dependent ld.volatile.global.u64, random cycle of 128-byte lines\n");
  std::printf("%12s %10s %10s %10s\n", "working_set", "ns/load", "cyc/load", "SM_MHz");
  std::mt19937_64 rng(12);
  for (size_t w : working) {
    const size_t n = w / 128;
    std::vector<uint64_t> order(n); std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin() + 1, order.end(), rng);
    std::vector<uint64_t> host(w / 8, 0);
    for (size_t k = 0; k < n; ++k) host[order[k] * 16] = order[(k + 1) % n] * 16;
    CK(cudaMemcpy(pool, host.data(), w, cudaMemcpyHostToDevice));
    const int hops = 20000;
    chase<<<1, 1>>>(pool, hops, out); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());  // warm
    std::vector<double> ns, cyc;
    for (int r = 0; r < 3; ++r) {
      chase<<<1, 1>>>(pool, hops, out); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
      uint64_t o[3]; CK(cudaMemcpy(o, out, 24, cudaMemcpyDeviceToHost));
      cyc.push_back((double)o[0] / hops); ns.push_back((double)o[1] / hops);
    }
    std::sort(ns.begin(), ns.end()); std::sort(cyc.begin(), cyc.end());
    std::printf("%10zuKiB %10.1f %10.1f %10.0f\n", w >> 10, ns[1], cyc[1], 1e3 * cyc[1] / ns[1]);
  }

  // (2) copy/reduce
  uint8_t* scrub; CK(cudaMalloc(&scrub, 256ull << 20));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  const int threads[] = {64, 128, 256, 512, 640, 1024};
  const int unrolls[] = {1, 2, 4, 8};
  const int sd[][2] = {{1, 0}, {0, 1}, {1, 1}, {2, 1}, {1, 2}, {2, 2}, {3, 1}};
  std::printf("\n# copy: 1 CTA (ctas=1) or one per SM; payload GB/s per CTA; inflight = N*U*S*16 bytes of loads\n");
  std::printf("%4s %5s %5s %2s %2s %4s %9s %10s %10s\n", "mem", "ctas", "N", "U", "S", "D", "inflight", "us", "GBps_cta");
  auto run = [&](bool l2, int ctas, int n, int u, int s, int d) {
    if (u * s > 16 && n > 640) return;  // kMaxThreads
    const size_t stream_bytes = (l2 ? 2ull : ctas > 1 ? 256ull : 16ull) << 20;
    const size_t packs = stream_bytes / 16 / (size_t)ctas;
    const size_t stream_all = packs * 16 * (size_t)ctas;
    const int passes = l2 ? (ctas > 1 ? 512 : 16) : 1;
    Kernel k = pick(u, s, d);
    std::vector<float> ts;
    for (int r = 0; r < 6; ++r) {
      // hbm: each launch takes fresh streams from the pool (rotating); l2: the same ones every time
      const size_t slot = l2 ? 0 : (size_t)r % (ctas > 1 ? 2 : 4);
      Streams st{};
      uint8_t* p = (uint8_t*)pool + slot * 5 * stream_all;
      for (int i = 0; i < 3; ++i) st.src[i] = (const uint4*)(p + i * stream_all);
      for (int i = 0; i < 2; ++i) st.dst[i] = (uint4*)(p + (3 + i) * stream_all);
      if (!l2) CK(cudaMemsetAsync(scrub, r, 256ull << 20));
      CK(cudaEventRecord(e0));
      k<<<ctas, n>>>(st, packs, passes);
      CK(cudaGetLastError());
      CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
      float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) ts.push_back(ms);  // the first launch warms (and, for l2, loads the cache)
    }
    std::sort(ts.begin(), ts.end());
    const double us = ts[ts.size() / 2] * 1e3;
    const double gbps = (double)packs * 16 * passes / (us * 1e3);
    std::printf("%4s %5d %5d %2d %2d %4d %9d %10.1f %10.2f\n", l2 ? "l2" : "hbm", ctas, n, u, s, d,
                n * u * s * 16, us, gbps);
  };
  for (int l2 = 1; l2 >= 0; --l2)
    for (auto& x : sd)
      for (int u : unrolls)
        for (int n : threads) run(l2, 1, n, u, x[0], x[1]);
  // every SM busy: the GPU's ceiling, and whether a CTA's rate holds when all SMs copy at once
  for (int l2 = 1; l2 >= 0; --l2)
    for (auto& x : sd)
      for (int n : {256, 512, 1024}) run(l2, prop.multiProcessorCount, n, 8, x[0], x[1]);
  CK(cudaDeviceSynchronize());
  return 0;
}
