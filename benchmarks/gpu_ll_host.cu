// NCCL's LL receive when the network buffer is in host memory (no GPUDirect RDMA): how fast a GPU's
// threads poll and consume 16-byte LL lines from pinned host memory, against the same from device memory.
// Build and run: nvcc -O3 -arch=sm_90 -o llh benchmarks/gpu_ll_host.cu && ./llh
//
// (1) latency: one thread chases a chain of LL lines with ld.volatile.global.v4.u32 (each load's
//     address comes from the one before), host memory or device memory; ns per load.
// (2) LL pass: C CTAs of N threads each walk a step of 4096 lines the way LLGenericOp does
//     (src/device/prims_ll.h: thread t takes line t, t+N, ...; it spins on the line until both flags
//     are valid, then stores the forwarded line, st.volatile.global.v4.u32, and the data to the output),
//     one line in flight per thread; the flags are valid from the start (the sender is ahead), so this
//     is the receiver's own bound.  recv in host or device memory; send lines to host memory (the LL
//     send buffer of the net transport is always there) or device memory; "reduce" also loads the
//     local input from device memory (recvReduceSend).  Reports ns per pass (N lines per CTA) and GB/s
//     of data (8 B per line) per CTA; medians of 7 timed launches after 2 warm-ups.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)

struct __align__(16) Line { uint32_t data1, flag1, data2, flag2; };
constexpr int kSlots = 8;  // NCCL_STEPS

__device__ __forceinline__ uint4 ld_volatile(const Line* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_volatile(Line* p, uint32_t d1, uint32_t d2, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};"
               :: "l"(p), "r"(d1), "r"(flag), "r"(d2), "r"(flag) : "memory");
}

__global__ void chase(const Line* lines, int hops, uint32_t* out) {
  uint32_t i = 0, acc = 0;
  for (int h = 0; h < hops; ++h) { uint4 v = ld_volatile(lines + i); i = v.x; acc += v.y; }
  out[0] = i + acc;
}

// One CTA per channel; each walks `steps` steps of `lines` LL lines from its own recv region.
__global__ void ll_pass(const Line* recv, Line* send, uint64_t* dst, const uint64_t* src, int lines, int steps,
                        uint32_t flag, int reduce) {
  const size_t ring = (size_t)kSlots * lines;  // a channel's LL buffer: NCCL_STEPS slots of one step each
  for (int step = 0; step < steps; ++step) {
    const size_t at = blockIdx.x * ring + (size_t)(step % kSlots) * lines;
    const Line* r = recv + at;
    Line* s = send + at;
    uint64_t* d = dst + at;
    const uint64_t* in = src + at;
    for (int o = threadIdx.x; o < lines; o += blockDim.x) {
      uint64_t x = reduce ? in[o] : 0;
      uint4 v;
      do { v = ld_volatile(r + o); } while (v.y != flag || v.w != flag);
      uint64_t val = ((uint64_t)v.z << 32 | v.x) + x;
      st_volatile(s + o, (uint32_t)val, (uint32_t)(val >> 32), flag + 1);
      d[o] = val;
    }
    __syncthreads();  // NCCL's barrier between steps (postRecv / incRecv)
  }
}

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main() {
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, sm_%d%d, %d SMs, pciBusID %02x\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.pciBusID);
  const int kLines = 4096, kMaxCtas = 16;  // a full LL step: 4096 lines, 64 KiB (NCCL_STEPS = 8 of 512 KiB)
  const size_t nl = (size_t)kSlots * kLines * kMaxCtas;
  Line *hRecv, *hSend, *dRecv, *dSend;
  CK(cudaHostAlloc(&hRecv, nl * sizeof(Line), cudaHostAllocMapped));
  CK(cudaHostAlloc(&hSend, nl * sizeof(Line), cudaHostAllocMapped));
  CK(cudaMalloc(&dRecv, nl * sizeof(Line))); CK(cudaMalloc(&dSend, nl * sizeof(Line)));
  uint64_t *dDst, *dSrc; CK(cudaMalloc(&dDst, nl * 8)); CK(cudaMalloc(&dSrc, nl * 8));
  const uint32_t flag = 7;
  std::vector<Line> init(nl);
  for (size_t i = 0; i < nl; ++i) init[i] = {(uint32_t)(i * 2654435761u), flag, (uint32_t)(i ^ 0x5bd1e995u), flag};
  std::copy(init.begin(), init.end(), hRecv);
  CK(cudaMemcpy(dRecv, init.data(), nl * sizeof(Line), cudaMemcpyHostToDevice));
  std::vector<uint64_t> srcv(nl);
  for (size_t i = 0; i < nl; ++i) srcv[i] = i * 0x9E3779B97F4A7C15ull;
  CK(cudaMemcpy(dSrc, srcv.data(), nl * 8, cudaMemcpyHostToDevice));
  Line *hRecvD, *hSendD;
  CK(cudaHostGetDevicePointer((void**)&hRecvD, hRecv, 0)); CK(cudaHostGetDevicePointer((void**)&hSendD, hSend, 0));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));

  // (1) latency chains: a 256 MiB chain of lines (over the L2), stride 4099 lines (64 KiB + 48 B: a new page and line each hop).
  {
    const size_t cl = (256ull << 20) / sizeof(Line);
    std::vector<Line> chain(cl);
    for (size_t i = 0; i < cl; ++i) chain[i] = {(uint32_t)((i + 4099) % cl), 1, 0, 1};
    Line *hc, *dc, *hcd; uint32_t* out;
    CK(cudaHostAlloc(&hc, cl * sizeof(Line), cudaHostAllocMapped)); CK(cudaMalloc(&dc, cl * sizeof(Line)));
    CK(cudaMalloc(&out, 4));
    std::copy(chain.begin(), chain.end(), hc);
    CK(cudaMemcpy(dc, chain.data(), cl * sizeof(Line), cudaMemcpyHostToDevice));
    CK(cudaHostGetDevicePointer((void**)&hcd, hc, 0));
    const int hops = 20000;
    Line* hsmall; CK(cudaHostAlloc(&hsmall, 64 * sizeof(Line), cudaHostAllocMapped));
    for (int i = 0; i < 64; ++i) hsmall[i] = {(uint32_t)((i + 1) % 64), 1, 0, 1};
    Line* hsmalld; CK(cudaHostGetDevicePointer((void**)&hsmalld, hsmall, 0));
    const char* names[] = {"host 256 MiB", "device 256 MiB", "host 1 KiB"};
    Line* chains[] = {hcd, dc, hsmalld};
    for (int where = 0; where < 3; ++where) {
      std::vector<float> t;
      for (int rep = 0; rep < 7; ++rep) {
        CK(cudaEventRecord(e0)); chase<<<1, 1>>>(chains[where], hops, out); CK(cudaGetLastError());
        CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (rep >= 2) t.push_back(ms);
      }
      std::printf("latency %-13s one thread, dependent ld.volatile.v4: %7.1f ns per load\n", names[where],
                  median(t) * 1e6f / hops);
    }
  }

  // (2) LL passes.
  struct Case { const char* name; Line* recv; Line* send; };
  const Case cases[] = {{"recv=host send=host", hRecvD, hSendD}, {"recv=dev  send=host", dRecv, hSendD},
                        {"recv=dev  send=dev ", dRecv, dSend}, {"recv=host send=dev ", hRecvD, dSend}};
  const int steps = 64;
  for (int reduce = 0; reduce < 2; ++reduce)
    for (const Case& c : cases)
      for (int threads : {128, 256, 512})
        for (int ctas : {1, 2, 4, 8, 16}) {
          std::vector<float> t;
          for (int rep = 0; rep < 9; ++rep) {
            CK(cudaEventRecord(e0));
            ll_pass<<<ctas, threads>>>(c.recv, c.send, dDst, dSrc, kLines, steps, flag, reduce);
            CK(cudaGetLastError()); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (rep >= 2) t.push_back(ms);
          }
          const float us = median(t) * 1e3f;
          const double passes = (double)steps * kLines / threads;  // per CTA
          std::printf("pass %s %-6s threads=%3d ctas=%2d  %7.1f ns/pass  %6.2f GB/s data per CTA  %6.2f GB/s all\n",
                      c.name, reduce ? "reduce" : "copy", threads, ctas, us * 1e3 / passes,
                      (double)steps * kLines * 8 / (us * 1e3), (double)ctas * steps * kLines * 8 / (us * 1e3));
        }
  // Check: the last run (recv=host send=dev, reduce) forwarded every line with its data plus the input.
  std::vector<Line> sent(nl); std::vector<uint64_t> got(nl);
  CK(cudaMemcpy(sent.data(), dSend, nl * sizeof(Line), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(got.data(), dDst, nl * 8, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < nl && ok; ++i) {
    uint64_t want = ((uint64_t)init[i].data2 << 32 | init[i].data1) + srcv[i];
    ok = got[i] == want && sent[i].flag1 == flag + 1 && sent[i].flag2 == flag + 1 &&
         (((uint64_t)sent[i].data2 << 32) | sent[i].data1) == want;
  }
  std::printf("check %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
