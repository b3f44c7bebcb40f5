// The LL send proxy's flag scan over host memory (NCCL src/transport/net.cc, sendProxyProgress,
// v2.8.4-1 and master 5067397): the GPU stores each step's LL lines (8 B data + 4 B flag1 +
// 4 B flag2 in one 16-B volatile store, NCCL's storeLL) into cudaHostAlloc'd mapped memory,
// after writing the step's size into the size FIFO (prims_ll.h waitSend); the proxy thread, once
// the size is there, reads flag1 and flag2 of every line from line 0, breaks at the first stale
// line, and retries on its next pass; when all lines are fresh it "posts" the step (here: frees
// the slot by raising the channel's head, as the network completion would).
// Build and run: nvcc -O3 -arch=sm_90 -o gls benchmarks/gpu_ll_scan.cu && ./gls
// Prints (1) the CPU time to scan a complete step the GPU has just written, cold (lines last
// written by the GPU: LLC through DDIO on Intel), flushed to DRAM (clflush: the AMD-like case
// without DDIO) and warm (a second scan: L1/L2), in ns per 64-B cache line; (2) the rate one
// scanning thread sustains while 1..8 CTAs stream steps into separate rings, against the GPU's
// own rate and against a thread that polls only each step's last line; (3) the latency from
// the GPU's last store of a step to the CPU's ready, against a one-line step; (4) the same for
// steps written at a link's pace (the thread checks them while they are written, from line 0).
#include <cuda_runtime.h>
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)

union LLLine { struct { uint32_t data1, flag1, data2, flag2; }; uint64_t v[2]; int4 i4; };
constexpr int STEPS = 8;             // NCCL_STEPS
constexpr int MAX_STEP_LINES = 4096; // NCCL_LL_LINES_PER_THREAD * NCCL_LL_MAX_NTHREADS: 64 KiB of lines

struct Ctrl {                        // mapped host memory, one per channel
  volatile int size[STEPS];          // the size FIFO: bytes of lines, -1 when empty
  volatile uint64_t head;            // steps the proxy has posted (and freed)
  volatile unsigned long long t_last, t_ack;  // latency mode: GPU globaltimer stamps
  char pad[64];
};

__device__ __forceinline__ void storeLL(LLLine* dst, uint64_t val, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(&dst->i4), "r"((uint32_t)val),
               "r"(flag), "r"((uint32_t)(val >> 32)), "r"(flag));
}
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

// CTA c streams nsteps steps of `lines` lines into ring c (STEPS slots of MAX_STEP_LINES), waiting
// for head credit like NCCL's waitSend (credit=0: no waiting, the GPU's own rate).  latency=1:
// after each step thread 0 stamps its last store (after a system fence) and waits for the CPU's
// post before the next step, stamping that too (one sample per step, step s into slot s%STEPS).
// pass_ns > 0: the CTA writes one pass of blockDim.x lines every pass_ns (an LL step written at the
// pace its data arrive, as a forwarding rank writes it), thread 0 waiting on %globaltimer.
__global__ void ll_stream(LLLine* rings, Ctrl* ctrl, int lines, int nsteps, int credit, int latency,
                          unsigned long long* stamps, int pass_ns = 0) {
  Ctrl* c = ctrl + blockIdx.x;
  LLLine* ring = rings + (size_t)blockIdx.x * STEPS * MAX_STEP_LINES;
  for (int s = 0; s < nsteps; ++s) {
    if (threadIdx.x == 0) {
      if (credit) while (c->head + STEPS <= (uint64_t)s) {}
      c->size[s % STEPS] = lines * (int)sizeof(LLLine);
    }
    __syncthreads();
    LLLine* step = ring + (size_t)(s % STEPS) * MAX_STEP_LINES;
    uint32_t flag = (uint32_t)(s + 1);
    for (int base = 0; base < lines; base += blockDim.x) {
      int i = base + threadIdx.x;
      if (i < lines) storeLL(step + i, ((uint64_t)s << 32) | i, flag);
      if (pass_ns && base + (int)blockDim.x < lines) {
        if (threadIdx.x == 0) { unsigned long long t = gtimer(); while (gtimer() - t < (unsigned long long)pass_ns) {} }
        __syncthreads();
      }
    }
    if (latency) {
      __threadfence_system();
      __syncthreads();
      if (threadIdx.x == 0) {
        unsigned long long t0 = gtimer();
        while (c->head <= (uint64_t)s) {}
        unsigned long long t1 = gtimer();
        size_t k = (size_t)blockIdx.x * nsteps + s;
        stamps[2 * k] = t0; stamps[2 * k + 1] = t1;
      }
      __syncthreads();
    }
  }
}

// NCCL's ready loop for one step: flag1 and flag2 of every line, break at the first stale one.
static inline bool scan_ready(const LLLine* lines, int n, uint32_t flag) {
  for (int i = 0; i < n; ++i) {
    volatile const uint32_t* f1 = &lines[i].flag1;
    volatile const uint32_t* f2 = &lines[i].flag2;
    if (f1[0] != flag || f2[0] != flag) return false;
  }
  return true;
}
static inline bool last_ready(const LLLine* lines, int n, uint32_t flag) {
  volatile const uint32_t* f1 = &lines[n - 1].flag1;
  volatile const uint32_t* f2 = &lines[n - 1].flag2;
  return f1[0] == flag && f2[0] == flag;
}

static double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static double pct(std::vector<double> v, double p) { std::sort(v.begin(), v.end()); return v[(size_t)(p * (v.size() - 1))]; }

// The proxy thread: round-robin over the channels (progressOps), one check per channel per pass.
// Returns passes made; scans counts line reads.
static long proxy_loop(LLLine* rings, Ctrl* ctrl, int nch, int lines, int nsteps, bool full, long* reads) {
  std::vector<uint64_t> tx(nch, 0);
  int left = nch; long passes = 0, r = 0;
  while (left) {
    ++passes;
    for (int c = 0; c < nch; ++c) {
      uint64_t t = tx[c];
      if (t >= (uint64_t)nsteps) continue;
      int slot = t % STEPS;
      if (ctrl[c].size[slot] == -1) continue;
      const LLLine* step = rings + ((size_t)c * STEPS + slot) * MAX_STEP_LINES;
      bool ok;
      if (full) {
        uint32_t flag = (uint32_t)(t + 1);
        int i = 0;
        for (; i < lines; ++i) {
          volatile const uint32_t* f1 = &step[i].flag1;
          volatile const uint32_t* f2 = &step[i].flag2;
          if (f1[0] != flag || f2[0] != flag) break;
        }
        r += i + 1;
        ok = i == lines;
      } else {
        ok = last_ready(step, lines, (uint32_t)(t + 1)); r += 1;
      }
      if (!ok) continue;
      ctrl[c].size[slot] = -1;
      __sync_synchronize();
      tx[c] = t + 1;
      ctrl[c].head = t + 1;
      if (t + 1 == (uint64_t)nsteps) --left;
    }
  }
  *reads = r;
  return passes;
}

static void reset(Ctrl* ctrl, int nch, LLLine* rings) {
  for (int c = 0; c < nch; ++c) {
    for (int s = 0; s < STEPS; ++s) ctrl[c].size[s] = -1;
    ctrl[c].head = 0;
  }
  if (rings) std::memset(rings, 0, sizeof(LLLine) * (size_t)nch * STEPS * MAX_STEP_LINES);
}

int main() {
  const int MAXCH = 8;
  const size_t ring_bytes = sizeof(LLLine) * (size_t)MAXCH * STEPS * MAX_STEP_LINES;  // 4 MiB
  LLLine* rings; Ctrl* ctrl; unsigned long long* stamps;
  CK(cudaHostAlloc(&rings, ring_bytes, cudaHostAllocMapped));
  CK(cudaHostAlloc(&ctrl, sizeof(Ctrl) * MAXCH, cudaHostAllocMapped));
  CK(cudaMalloc(&stamps, sizeof(unsigned long long) * 2 * 100000));
  LLLine* drings; Ctrl* dctrl;
  CK(cudaHostGetDevicePointer((void**)&drings, rings, 0));
  CK(cudaHostGetDevicePointer((void**)&dctrl, ctrl, 0));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s; LL line 16 B, 4 lines per 64-B cache line; NCCL_STEPS=%d, full LL step %d lines (64 KiB)\n",
              prop.name, STEPS, MAX_STEP_LINES);
  bool ok_all = true;

  // (1) Scan time of a complete step just written by the GPU.
  std::printf("\n# (1) scan of a complete step after the GPU wrote it (one CTA of 256 threads), ns per 64-B cache line;\n");
  std::printf("#     medians of 200 (p10 p90 of cold in brackets); cold: as the GPU left it; dram: clflush'd first; warm: re-scan\n");
  for (int kib : {4, 16, 64}) {
    int lines = kib * 1024 / (int)sizeof(LLLine), cls = lines / 4;
    std::vector<double> cold, dram, warm;
    for (int rep = 0; rep < 400; ++rep) {
      int ch = rep % MAXCH, slot = (rep / MAXCH) % STEPS;
      bool flush = rep % 2;
      reset(ctrl, 1, nullptr);
      // ll_stream writes step 0 of its ring (flag 1) at its base: point it at this step's slot.
      LLLine* base = drings + ((size_t)ch * STEPS + slot) * MAX_STEP_LINES;
      ll_stream<<<1, 256, 0, st>>>(base, dctrl, lines, 1, 0, 0, stamps);
      CK(cudaGetLastError()); CK(cudaStreamSynchronize(st));
      const LLLine* h = rings + ((size_t)ch * STEPS + slot) * MAX_STEP_LINES;
      if (flush) { for (int i = 0; i < lines; i += 4) _mm_clflush(&h[i]); _mm_mfence(); }
      double t0 = now_ns();
      bool ok = scan_ready(h, lines, 1);
      double t1 = now_ns();
      bool ok2 = scan_ready(h, lines, 1);
      double t2 = now_ns();
      if (!ok || !ok2) { ok_all = false; std::printf("scan FAILED kib=%d rep=%d\n", kib, rep); break; }
      if (rep < 16) continue;
      (flush ? dram : cold).push_back((t1 - t0) / cls);
      warm.push_back((t2 - t1) / cls);
    }
    std::printf("scan step=%2d KiB lines=%5d cachelines=%4d  cold %6.2f ns/CL [%6.2f %6.2f]  dram %6.2f  warm %5.2f  "
                "cold step %7.2f us  -> %5.2f GB/s of lines\n", kib, lines, cls, median(cold), pct(cold, .1), pct(cold, .9),
                median(dram), median(warm), median(cold) * cls / 1e3, 64.0 / median(cold));
  }
  double tover0 = now_ns(); for (int i = 0; i < 1000; ++i) now_ns(); double tover = (now_ns() - tover0) / 1000;
  std::printf("# clock read overhead %.1f ns (inside each cold/dram figure once)\n", tover);

  // (2) Streaming: nch CTAs, one ring each, one proxy thread.
  std::printf("\n# (2) one proxy thread, nch CTAs streaming steps (credit-controlled, NCCL_STEPS deep), 2000 steps each;\n");
  std::printf("#     GB/s of LL lines (data = half); gpu-only: no credit wait, no scan; last-line: thread polls each step's last line only\n");
  for (int threads : {128, 512}) for (int kib : {16, 64}) for (int nch : {1, 2, 4, 8}) {
    int lines = kib * 1024 / (int)sizeof(LLLine), nsteps = 2000;
    double bytes = (double)nch * nsteps * lines * sizeof(LLLine);
    double rate[3]; long passes[3] = {0, 0, 0}, reads[3] = {0, 0, 0};
    for (int mode = 0; mode < 3; ++mode) {  // 0 gpu-only, 1 full scan, 2 last line
      std::vector<double> v;
      for (int rep = 0; rep < 3; ++rep) {
        reset(ctrl, nch, rings);
        CK(cudaStreamSynchronize(st));
        double t0 = now_ns();
        ll_stream<<<nch, threads, 0, st>>>(drings, dctrl, lines, nsteps, mode != 0, 0, stamps);
        CK(cudaGetLastError());
        if (mode) passes[mode] = proxy_loop(rings, ctrl, nch, lines, nsteps, mode == 1, &reads[mode]);
        CK(cudaStreamSynchronize(st));
        double t1 = now_ns();
        v.push_back(bytes / (t1 - t0));
      }
      rate[mode] = median(v);
    }
    // Check: the last step of every ring holds its flags and data.
    for (int c = 0; c < nch; ++c) {
      const LLLine* h = rings + ((size_t)c * STEPS + (nsteps - 1) % STEPS) * MAX_STEP_LINES;
      for (int i = 0; i < lines; ++i)
        if (h[i].flag1 != (uint32_t)nsteps || h[i].flag2 != (uint32_t)nsteps || h[i].data1 != (uint32_t)i ||
            h[i].data2 != (uint32_t)(nsteps - 1)) { ok_all = false; break; }
    }
    std::printf("stream threads=%3d step=%2d KiB nch=%d  gpu-only %6.2f GB/s  scan %6.2f GB/s  last-line %6.2f GB/s  "
                "scan: %5.2f us per step on the thread, %.2f line reads per line, %.1f passes per step\n",
                threads, kib, nch, rate[0], rate[1], rate[2], lines * 16.0 / rate[1] / 1e3,
                reads[1] / ((double)nch * nsteps * lines), passes[1] / ((double)nch * nsteps));
  }

  // (3) Latency from the GPU's last store (after a system fence) to the CPU's post seen by the GPU.
  std::printf("\n# (3) latency, one CTA of 512 threads, step after step with the CPU's post awaited: GPU globaltimer from the\n");
  std::printf("#     fence after its last store to seeing the post; medians of 500 (p10 p90); extra = minus the one-line step\n");
  double base = 0;
  for (int lines : {1, 256, 1024, 4096}) {
    int nsteps = 520;
    reset(ctrl, 1, rings);
    ll_stream<<<1, 512, 0, st>>>(drings, dctrl, lines, nsteps, 1, 1, stamps);
    CK(cudaGetLastError());
    long reads; long passes = proxy_loop(rings, ctrl, 1, lines, nsteps, true, &reads);
    CK(cudaStreamSynchronize(st));
    std::vector<unsigned long long> h(2 * nsteps);
    CK(cudaMemcpy(h.data(), stamps, sizeof(unsigned long long) * 2 * nsteps, cudaMemcpyDeviceToHost));
    std::vector<double> lat;
    for (int s = 20; s < nsteps; ++s) lat.push_back((h[2 * s + 1] - h[2 * s]) / 1e3);
    double m = median(lat);
    if (lines == 1) base = m;
    std::printf("latency step=%6d B lines=%4d  fence->post seen %6.2f us [%6.2f %6.2f]  extra %6.2f us  "
                "(%.2f line reads per line, %.1f passes per step)\n", lines * 16, lines, m, pct(lat, .1), pct(lat, .9),
                m - base, reads / ((double)nsteps * lines), passes / (double)nsteps);
  }
  // (4) Steps written at a link's pace: the thread checks them while they are written, from line 0
  // each pass (NCCL's loop), so it reads lines again; latency after the last store, and the rate.
  std::printf("\n# (4) 64 KiB steps of lines written one CTA pass (512 lines, 8 KiB) every pass_ns, nch CTAs, one thread;\n");
  std::printf("#     latency from each CTA's last store to its post seen (median over CTAs and steps [p10 p90]), GB/s of lines\n");
  for (int nch : {1, 4}) for (int pass_ns : {0, 1000, 2000, 4000}) {
    int lines = MAX_STEP_LINES, nsteps = 300;
    reset(ctrl, nch, rings);
    double t0 = now_ns();
    ll_stream<<<nch, 512, 0, st>>>(drings, dctrl, lines, nsteps, 1, 1, stamps, pass_ns);
    CK(cudaGetLastError());
    long reads; long passes = proxy_loop(rings, ctrl, nch, lines, nsteps, true, &reads);
    CK(cudaStreamSynchronize(st));
    double t1 = now_ns();
    std::vector<unsigned long long> h(2 * (size_t)nch * nsteps);
    CK(cudaMemcpy(h.data(), stamps, sizeof(unsigned long long) * h.size(), cudaMemcpyDeviceToHost));
    std::vector<double> lat;
    for (int c = 0; c < nch; ++c) for (int s = 20; s < nsteps; ++s) {
      size_t k = (size_t)c * nsteps + s; lat.push_back((h[2 * k + 1] - h[2 * k]) / 1e3);
    }
    double write_gbps = pass_ns ? 512 * 16.0 / pass_ns : 0;
    std::printf("paced nch=%d pass_ns=%5d (writer %5.1f GB/s per CTA)  last store->post seen %6.2f us [%6.2f %6.2f]  "
                "%6.2f GB/s of lines  %.2f line reads per line, %.0f passes per step\n", nch, pass_ns, write_gbps,
                median(lat), pct(lat, .1), pct(lat, .9), (double)nch * nsteps * lines * 16 / (t1 - t0),
                reads / ((double)nch * nsteps * lines), passes / ((double)nch * nsteps));
  }
  std::printf("check %s\n", ok_all ? "ok" : "FAILED");
  return ok_all ? 0 : 1;
}
