/* Drives libccltwin-live.so from C the way NCCL does (dlopen RTLD_NOW|RTLD_LOCAL, dlsym of the
 * versioned structs, descriptors filled as NCCL's profiler.cc fills them), for what Python's ctypes
 * cannot do faithfully: profiler events from a "proxy" thread, and many threads at full speed.
 *
 *   plugin_harness LIB events ABI     one communicator, profiler ABI 4/5/6 (+ its tuner): prints
 *                                     "comm ..." and "event key=value ..." lines
 *   plugin_harness LIB stress T N     T threads x N collectives with profiler events, one control
 *                                     thread changing and draining; exit 1 on a wrong selection
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "ccltwin_live.h"

static void* lib;
static int (*set_rule)(uint64_t, int, uint64_t, uint64_t, int, int, int, uint64_t, uint32_t);
static int (*clear_rules)(uint64_t);
static int (*comms)(struct ccltwin_comm*, int);
static int (*drain_events)(struct ccltwin_event*, int);
static int (*drain_decisions)(struct ccltwin_decision*, int);
static uint64_t (*occurrences)(uint64_t, int, uint64_t);
static uint64_t (*dropped)(int);

static void* sym(const char* name) {
  void* p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "missing symbol %s\n", name);
    exit(2);
  }
  return p;
}

static void load(const char* path) {
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);  /* NCCL's flags (src/os/linux.cc) */
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    exit(2);
  }
  *(void**)&set_rule = sym("ccltwin_set_rule");
  *(void**)&clear_rules = sym("ccltwin_clear_rules");
  *(void**)&comms = sym("ccltwin_comms");
  *(void**)&drain_events = sym("ccltwin_drain_events");
  *(void**)&drain_decisions = sym("ccltwin_drain_decisions");
  *(void**)&occurrences = sym("ccltwin_occurrences");
  *(void**)&dropped = sym("ccltwin_dropped");
}

static void print_comms(void) {
  struct ccltwin_comm c[64];
  int n = comms(c, 64);
  for (int i = 0; i < n; i++)
    printf("comm comm=%llu local=%llu nranks=%d nnodes=%d rank=%d tuner=%d profiler=%d alive=%d\n",
           (unsigned long long)c[i].comm, (unsigned long long)c[i].local_ctx_id, c[i].nranks, c[i].nnodes,
           c[i].rank, c[i].tuner_abi, c[i].profiler_abi, c[i].alive);
}

static void print_events(void) {
  struct ccltwin_event e[64];
  int n = drain_events(e, 64);
  for (int i = 0; i < n; i++)
    printf("event comm=%llu coll=%d nbytes=%llu seq=%llu algo=%d proto=%d nchannels=%d nwarps=%d start=%llu "
           "stop=%llu timer=%d occurrence=%llu dtype=%d\n",
           (unsigned long long)e[i].comm, e[i].coll, (unsigned long long)e[i].nbytes,
           (unsigned long long)e[i].seq, e[i].algo, e[i].proto, e[i].nchannels, e[i].nwarps,
           (unsigned long long)e[i].start_ns, (unsigned long long)e[i].stop_ns, e[i].timer,
           (unsigned long long)e[i].occurrence, e[i].dtype);
}

/* ------------------------------------------------------------------------- profiler events */

/* One profiler ABI seen through one interface: v4's descriptor differs (uint8_t type, no
 * parentGroup), v5 and v6 share theirs. */
struct prof {
  int abi;
  ct_result_t (*start)(void* ctx, void** handle, void* descr);
  ct_result_t (*stop)(void* handle);
  ct_result_t (*record)(void* handle, int state, ct_prof_state_args_t* args);
  ct_result_t (*finalize)(void* ctx);
  void* ctx;
};

static struct prof open_profiler(int abi, uint64_t comm, int nranks, int rank, int* mask) {
  struct prof p = {.abi = abi};
  char name[32];
  snprintf(name, sizeof(name), "ncclProfiler_v%d", abi);
  if (abi == 4) {
    ct_profiler_v4_t* v4 = sym(name);
    v4->init(&p.ctx, mask, "harness", comm, 1, nranks, rank, NULL);
    *(void**)&p.start = (void*)v4->startEvent;
    p.stop = v4->stopEvent, p.record = v4->recordEventState, p.finalize = v4->finalize;
  } else {
    ct_profiler_v5_t* v5 = sym(name);
    v5->init(&p.ctx, comm, mask, "harness", 1, nranks, rank, NULL);
    *(void**)&p.start = (void*)v5->startEvent;
    p.stop = v5->stopEvent, p.record = v5->recordEventState, p.finalize = v5->finalize;
  }
  return p;
}

/* As ncclProfilerStartTaskEvents fills a coll descriptor. */
static void* coll_start(struct prof* p, uint64_t seq, const char* func, size_t count, const char* type,
                        int nch, int nwarps, const char* algo, const char* proto) {
  void* handle = NULL;
  if (p->abi == 4) {
    ct_prof_descr_v4_t d = {.type = CT_PROFILE_COLL, .rank = 0};
    d.coll = (ct_prof_coll_v4_t){seq, func, NULL, NULL, count, 0, type, (uint8_t)nch, (uint8_t)nwarps, algo, proto};
    p->start(p->ctx, &handle, &d);
  } else {
    ct_prof_descr_v5_t d = {.type = CT_PROFILE_COLL, .rank = 0};
    d.coll = (ct_prof_coll_v5_t){seq,  func, NULL, NULL, count, 0, type, (uint8_t)nch, (uint8_t)nwarps,
                                 algo, proto, NULL};
    p->start(p->ctx, &handle, &d);
  }
  return handle;
}

/* As ncclProfilerStartKernelChEvent / StopKernelChEvent do on the proxy thread. */
static void* channel_start(struct prof* p, void* coll, int channel, uint64_t ptimer) {
  void* handle = NULL;
  if (p->abi == 4) {
    ct_prof_descr_v4_t d = {.type = CT_PROFILE_KERNEL_CH, .parentObj = coll};
    d.kernelCh = (ct_prof_kernel_ch_t){(uint8_t)channel, ptimer};
    p->start(p->ctx, &handle, &d);
  } else {
    ct_prof_descr_v5_t d = {.type = CT_PROFILE_KERNEL_CH, .parentObj = coll};
    d.kernelCh = (ct_prof_kernel_ch_t){(uint8_t)channel, ptimer};
    p->start(p->ctx, &handle, &d);
  }
  return handle;
}

static void channel_stop(struct prof* p, void* handle, uint64_t ptimer) {
  if (!handle) return;
  ct_prof_state_args_t a = {.kernelCh = {ptimer}};
  p->record(handle, CT_PROFILER_KERNEL_CH_STOP, &a);
  p->stop(handle);
}

struct proxy_job {
  struct prof* p;
  void* coll;
  int nch;
  uint64_t t0;
};

static void* proxy(void* arg) {  /* channel c runs [t0 + 100c, t0 + 1000 + 200c] */
  struct proxy_job* j = arg;
  void* h[64];
  for (int c = 0; c < j->nch; c++) h[c] = channel_start(j->p, j->coll, c, j->t0 + 100 * c);
  for (int c = j->nch - 1; c >= 0; c--) channel_stop(j->p, h[c], j->t0 + 1000 + 200 * c);
  return NULL;
}

static void run_proxy(struct prof* p, void* coll, int nch, uint64_t t0) {
  struct proxy_job j = {p, coll, nch, t0};
  pthread_t t;
  pthread_create(&t, NULL, proxy, &j);
  pthread_join(t, NULL);
}

static int events(int abi) {
  int mask = 0;
  struct prof p = open_profiler(abi, 77, 4, 2, &mask);
  void* tuner_ctx = NULL;
  ct_result_t (*tuner_finalize)(void*);
  if (abi == 4) {  /* NCCL 2.27: tuner v4 learns the comm id from this profiler init */
    ct_tuner_v4_t* t = sym("ncclTunerPlugin_v4");
    t->init(4, 1, NULL, &tuner_ctx);
    tuner_finalize = t->destroy;
  } else {
    ct_tuner_v5_t* t = sym(abi == 5 ? "ncclTunerPlugin_v5" : "ncclTunerPlugin_v6");
    t->init(&tuner_ctx, 77, 4, 1, NULL, NULL, NULL);
    tuner_finalize = t->finalize;
  }
  printf("mask %d\n", mask);
  print_comms();

  /* 1: kernel channels finish after NCCL stopped the coll event (the usual order) */
  void* c1 = coll_start(&p, 0, "AllGather", 1024, "ncclBfloat16", 2, 16, "RING", "LL128");
  p.stop(c1);
  run_proxy(&p, c1, 2, 1000);
  /* 2: the channel finishes before the coll event stops */
  void* c2 = coll_start(&p, 0, "AllReduce", 256, "ncclFloat32", 1, 8, "TREE", "SIMPLE");
  run_proxy(&p, c2, 1, 5000);
  p.stop(c2);
  /* 3: the same AllGather again: occurrence 1, seq 1 */
  void* c3 = coll_start(&p, 1, "AllGather", 1024, "ncclBfloat16", 2, 16, "RING", "LL128");
  run_proxy(&p, c3, 2, 9000);
  p.stop(c3);
  /* 4: names NCCL might add later: unknown func/type/algo/proto, no channels */
  void* c4 = coll_start(&p, 7, "AllToAllV", 10, "ncclFloat4", 0, 4, "FOO", "BAR");
  p.stop(c4);
  /* 5: events the plugin does not track get no handle; handles it never gave are ignored */
  void* other = NULL;
  ct_prof_descr_v5_t g = {.type = 1 << 3};
  p.start(p.ctx, &other, &g);
  int junk = 0;
  ct_prof_state_args_t a = {.kernelCh = {1}};
  p.stop(other);
  p.stop(&junk);
  p.record(&junk, CT_PROFILER_KERNEL_CH_STOP, &a);
  p.record(c1, CT_PROFILER_KERNEL_CH_STOP, NULL);
  p.start(p.ctx, NULL, NULL);
  printf("untracked_handle %p\n", other);
  print_events();
  tuner_finalize(tuner_ctx);
  p.finalize(p.ctx);
  print_comms();
  return 0;
}

/* ----------------------------------------------------------------------------------- stress */

static int g_iters, g_done;
static pthread_mutex_t g_done_lock = PTHREAD_MUTEX_INITIALIZER;

struct worker {
  int id;
  long mismatches;
};

static void* work(void* arg) {
  struct worker* w = arg;
  uint64_t comm = 0x1000 + (uint64_t)w->id;
  int mask = 0;
  struct prof p = open_profiler(5, comm, 8, w->id, &mask);
  ct_tuner_v6_t* t = sym("ncclTunerPlugin_v6");
  void* ctx = NULL;
  t->init(&ctx, comm, 8, 1, NULL, NULL, NULL);
  for (int k = 0; k < g_iters; k++) {
    float table[CT_NUM_ALGOS][CT_NUM_PROTOS];
    for (int a = 0; a < CT_NUM_ALGOS; a++)
      for (int q = 0; q < CT_NUM_PROTOS; q++) table[a][q] = 10.0f + (float)(a * 3 + q);
    int nch = 0, second = k >= g_iters / 2;
    t->getCollInfo(ctx, 4, 1 << 20, 1, (float**)table, CT_NUM_ALGOS, CT_NUM_PROTOS, 0, &nch);
    int want_a = second ? 0 : 1, want_p = second ? 0 : 2, best_a = -1, best_p = -1;
    float best = 3600000000.0f;
    for (int a = 0; a < CT_NUM_ALGOS; a++)
      for (int q = 0; q < CT_NUM_PROTOS; q++)
        if (table[a][q] >= 0 && table[a][q] < best) best = table[a][q], best_a = a, best_p = q;
    size_t chunk = 0;
    t->getChunkSize(ctx, 4, 1 << 19, best_a, best_p, 1, &chunk);
    if (best_a != want_a || best_p != want_p || nch != (second ? 3 : 2) || chunk != (second ? 4096u : 0u))
      w->mismatches++;
    void* coll = coll_start(&p, (uint64_t)k, "AllReduce", 1 << 18, "ncclFloat32", 2, 16, "RING", "SIMPLE");
    void* h0 = channel_start(&p, coll, 0, 100);
    void* h1 = channel_start(&p, coll, 1, 110);
    p.stop(coll);
    channel_stop(&p, h1, 300);
    channel_stop(&p, h0, 290);
  }
  t->finalize(ctx);
  p.finalize(p.ctx);
  pthread_mutex_lock(&g_done_lock);
  g_done++;
  pthread_mutex_unlock(&g_done_lock);
  return NULL;
}

static int stress(int nthreads, int iters) {
  g_iters = iters;
  for (int i = 0; i < nthreads; i++) {
    set_rule(0x1000 + (uint64_t)i, 4, 1 << 20, 0, 1, 2, 2, 0, 1);                  /* ring/simple, 2 ch */
    set_rule(0x1000 + (uint64_t)i, 4, 1 << 20, (uint64_t)iters / 2, 0, 0, 3, 4096, 2); /* tree/ll, 3 ch */
  }
  pthread_t th[64];
  struct worker w[64];
  for (int i = 0; i < nthreads; i++) {
    w[i] = (struct worker){i, 0};
    pthread_create(&th[i], NULL, work, &w[i]);
  }
  long decisions = 0, events_seen = 0, rounds = 0;
  for (;;) {  /* the control side, as Python at iteration boundaries, but without pause */
    struct ccltwin_decision d[256];
    struct ccltwin_event e[256];
    struct ccltwin_comm c[64];
    set_rule(0x9999, 2, 4096, (uint64_t)rounds, rounds % 7, rounds % 3, (int)(rounds % 5), 0, (uint32_t)rounds);
    if (rounds % 50 == 0) clear_rules(0x9999);
    decisions += drain_decisions(d, 256);
    events_seen += drain_events(e, 256);
    comms(c, 64);
    occurrences(0x1000, 4, 1 << 20);
    rounds++;
    pthread_mutex_lock(&g_done_lock);
    int done = g_done == nthreads;
    pthread_mutex_unlock(&g_done_lock);
    if (done) break;
  }
  long mismatches = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(th[i], NULL);
    mismatches += w[i].mismatches;
  }
  for (int n; (n = drain_decisions((struct ccltwin_decision[256]){0}, 256));) decisions += n;
  for (int n; (n = drain_events((struct ccltwin_event[256]){0}, 256));) events_seen += n;
  printf("mismatches=%ld decisions=%ld events=%ld dropped_decisions=%llu dropped_events=%llu\n", mismatches,
         decisions, events_seen, (unsigned long long)dropped(0), (unsigned long long)dropped(1));
  return mismatches ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s LIB events ABI | LIB stress THREADS ITERS\n", argv[0]);
    return 2;
  }
  load(argv[1]);
  if (!strcmp(argv[2], "events")) return events(atoi(argv[3]));
  if (!strcmp(argv[2], "stress") && argc == 5) return stress(atoi(argv[3]), atoi(argv[4]));
  fprintf(stderr, "unknown command %s\n", argv[2]);
  return 2;
}
