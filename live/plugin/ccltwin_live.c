/* ccltwin-live: one shared object that NCCL loads as its tuner plugin (NCCL_TUNER_PLUGIN) and its
 * profiler plugin (NCCL_PROFILER_PLUGIN), and that Python drives through the control API in
 * ccltwin_live.h (ctypes, same path, so the same loaded instance).
 *
 * Tuner: every getCollInfo call is one occurrence of its task key (communicator id, collective,
 * nbytes) in its context; the schedule's rule "from occurrence k use config C" with the largest
 * k <= occurrence (then the largest version) decides the call.  The config is applied by editing
 * NCCL's cost table (the chosen entry set to 0.0 if it is >= 0), *nChannels and, on tuner v6,
 * getChunkSize; a config whose entry is -1 (not available on this communicator) leaves NCCL's
 * default.  No call ever returns an error (NCCL fails the collective on one).
 *
 * Profiler: collective events (what NCCL ran: algo, proto, channels, warps, seqNumber) and, unless
 * CCLTWIN_LIVE_EVENTS=coll, their kernel-channel events (GPU globaltimer stamps) are joined into one
 * record per collective and pushed to a ring that Python drains at iteration boundaries.
 *
 * Everything is in fixed-size static tables (sizes below) behind one mutex: no allocation, no I/O
 * and no logging on the collective path.  Layouts of NCCL's structs: abi.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi.h"
#include "ccltwin_live.h"

#define CT_EXPORT __attribute__((visibility("default")))

#define CT_MAX_COMMS 64          /* contexts (one per communicator and rank in this process) */
#define CT_TASKS_PER_COMM 1024   /* distinct (coll, nbytes) per context; power of two */
#define CT_RULE_KEYS 4096        /* distinct (comm, coll, nbytes) with rules; power of two */
#define CT_RULES 16384           /* rules alive at once (dominated rules are freed as they die) */
#define CT_DECISIONS 16384       /* decision ring */
#define CT_EVENTS 8192           /* finished-event ring */
#define CT_EVENT_SLOTS 1024      /* collectives whose events are still open */
#define CT_PENDING_CHUNKS 16     /* getCollInfo results one group's getChunkSize calls can match */
#define CT_MAX_CHANNELS 64       /* NCCL's MAXCHANNELS (64 since 2.25; 32 before) */
#define CT_LOAD_LIMIT(n) ((n) / 8 * 7)
#define CT_UNKNOWN UINT64_MAX
#define CT_NCCL_MAX_TIME 3600000000.0f /* topoGetAlgoInfo's initial minTime */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------ contexts and occurrences */

struct ct_task {
  int used, coll;
  uint64_t nbytes;
  uint64_t calls;   /* getCollInfo calls so far: the next call's occurrence */
  uint64_t events;  /* profiler coll events so far */
};

struct ct_pending {
  int coll, algo, proto;
  uint64_t nbytes, chunk;
};

struct ct_comm {
  int used, tuner_open, profiler_open;
  uint64_t comm, local_ctx_id;
  int nranks, nnodes, rank, tuner_abi, profiler_abi;
  int ntasks;
  struct ct_task tasks[CT_TASKS_PER_COMM];
  int npending, chunk_seen;  /* getCollInfo results since the last group's getChunkSize calls */
  struct ct_pending pending[CT_PENDING_CHUNKS];
};

static struct ct_comm g_comms[CT_MAX_COMMS];
static uint64_t g_next_ctx;
/* A profiler init on this thread that the same communicator's tuner init (NCCL runs both on the
 * thread that initialises the communicator, profiler first) may pair with. */
static __thread struct ct_comm* t_profiled;

static uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static struct ct_comm* comm_of(void* ctx) {
  uintptr_t p = (uintptr_t)ctx, base = (uintptr_t)g_comms;
  if (p < base || p >= base + sizeof(g_comms) || (p - base) % sizeof(struct ct_comm)) return NULL;
  struct ct_comm* c = (struct ct_comm*)ctx;
  return c->used ? c : NULL;
}

static struct ct_comm* comm_new(void) {
  struct ct_comm* pick = NULL;
  for (int i = 0; i < CT_MAX_COMMS && !pick; i++)
    if (!g_comms[i].used) pick = &g_comms[i];
  for (int i = 0; i < CT_MAX_COMMS && !pick; i++) {
    struct ct_comm* c = &g_comms[i];  /* else the oldest context both plugins have finalized */
    if (!c->tuner_open && !c->profiler_open && (!pick || c->local_ctx_id < pick->local_ctx_id)) pick = c;
  }
  if (!pick) return NULL;
  memset(pick, 0, sizeof(*pick));
  pick->used = 1;
  pick->rank = -1;
  pick->local_ctx_id = ++g_next_ctx;
  return pick;
}

static struct ct_task* task_find(struct ct_comm* c, int coll, uint64_t nbytes, int create) {
  uint64_t h = mix(nbytes * 8 + (uint64_t)coll);
  for (uint64_t i = 0; i < CT_TASKS_PER_COMM; i++) {
    struct ct_task* t = &c->tasks[(h + i) & (CT_TASKS_PER_COMM - 1)];
    if (t->used && t->coll == coll && t->nbytes == nbytes) return t;
    if (!t->used) {
      if (!create || c->ntasks >= CT_LOAD_LIMIT(CT_TASKS_PER_COMM)) return NULL;
      t->used = 1;
      t->coll = coll;
      t->nbytes = nbytes;
      c->ntasks++;
      return t;
    }
  }
  return NULL;
}

/* ------------------------------------------------------------------------------------ rules */

struct ct_rule {
  uint64_t from, chunk;
  uint32_t version;
  int algo, proto, nchannels;
  int next;  /* chain sorted by (from, version) descending; -1 ends it */
};

struct ct_key {
  int used, coll, head;
  uint64_t comm, nbytes;
};

static struct ct_rule g_rules[CT_RULES];
static int g_free_rule = -1, g_rules_ready;
static struct ct_key g_keys[CT_RULE_KEYS];
static int g_nkeys;

static void rules_ready(void) {
  if (g_rules_ready) return;
  for (int i = 0; i < CT_RULES; i++) g_rules[i].next = i + 1 < CT_RULES ? i + 1 : -1;
  g_free_rule = 0;
  g_rules_ready = 1;
}

static void rule_free_chain(int i) {
  while (i >= 0) {
    int next = g_rules[i].next;
    g_rules[i].next = g_free_rule;
    g_free_rule = i;
    i = next;
  }
}

static struct ct_key* key_find(uint64_t comm, int coll, uint64_t nbytes, int create) {
  uint64_t h = mix(mix(comm) ^ (nbytes * 8 + (uint64_t)coll));
  for (uint64_t i = 0; i < CT_RULE_KEYS; i++) {
    struct ct_key* k = &g_keys[(h + i) & (CT_RULE_KEYS - 1)];
    if (k->used && k->comm == comm && k->coll == coll && k->nbytes == nbytes) return k;
    if (!k->used) {
      if (!create || g_nkeys >= CT_LOAD_LIMIT(CT_RULE_KEYS)) return NULL;
      k->used = 1;
      k->comm = comm;
      k->coll = coll;
      k->nbytes = nbytes;
      k->head = -1;
      g_nkeys++;
      return k;
    }
  }
  return NULL;
}

/* The rule for occurrence k: the first in the chain whose from-occurrence is <= k. */
static const struct ct_rule* rule_for(uint64_t comm, int coll, uint64_t nbytes, uint64_t k) {
  struct ct_key* key = key_find(comm, coll, nbytes, 0);
  for (int i = key ? key->head : -1; i >= 0; i = g_rules[i].next)
    if (g_rules[i].from <= k) return &g_rules[i];
  return NULL;
}

/* The next occurrence every live context of this communicator will decide (0 if none exists yet):
 * rules after the first one whose from-occurrence is <= it can never be chosen again. */
static uint64_t min_next_occurrence(uint64_t comm, int coll, uint64_t nbytes) {
  uint64_t low = CT_UNKNOWN;
  for (int i = 0; i < CT_MAX_COMMS; i++) {
    struct ct_comm* c = &g_comms[i];
    if (!c->used || !c->tuner_open || c->comm != comm) continue;
    struct ct_task* t = task_find(c, coll, nbytes, 0);
    uint64_t next = t ? t->calls : 0;
    if (next < low) low = next;
  }
  return low == CT_UNKNOWN ? 0 : low;
}

static void rule_collect(struct ct_key* key, uint64_t low) {
  for (int i = key->head; i >= 0; i = g_rules[i].next)
    if (g_rules[i].from <= low) {
      rule_free_chain(g_rules[i].next);
      g_rules[i].next = -1;
      return;
    }
}

CT_EXPORT int ccltwin_set_rule(uint64_t comm, int coll, uint64_t nbytes, uint64_t from_occurrence, int algo,
                               int proto, int nchannels, uint64_t chunk_bytes, uint32_t version) {
  if (coll < 0 || coll >= CT_NUM_FUNCS || algo < -1 || algo >= CT_NUM_ALGOS || proto < -1 ||
      proto >= CT_NUM_PROTOS || nchannels < 0 || nchannels > CT_MAX_CHANNELS)
    return CCLTWIN_EINVAL;
  int ret = 0;
  pthread_mutex_lock(&g_lock);
  rules_ready();
  struct ct_key* key = key_find(comm, coll, nbytes, 1);
  if (!key) {
    ret = CCLTWIN_EFULL;
    goto out;
  }
  int* link = &key->head;
  while (*link >= 0) {
    struct ct_rule* r = &g_rules[*link];
    if (r->from < from_occurrence || (r->from == from_occurrence && r->version <= version)) break;
    link = &r->next;
  }
  struct ct_rule* r;
  if (*link >= 0 && g_rules[*link].from == from_occurrence && g_rules[*link].version == version) {
    r = &g_rules[*link];  /* the same rule again: its config replaces the old one */
  } else {
    if (g_free_rule < 0) {
      ret = CCLTWIN_EFULL;
      goto out;
    }
    int i = g_free_rule;
    g_free_rule = g_rules[i].next;
    r = &g_rules[i];
    r->next = *link;
    *link = i;
  }
  r->from = from_occurrence;
  r->version = version;
  r->algo = algo;
  r->proto = proto;
  r->nchannels = nchannels;
  r->chunk = chunk_bytes;
  rule_collect(key, min_next_occurrence(comm, coll, nbytes));
out:
  pthread_mutex_unlock(&g_lock);
  return ret;
}

CT_EXPORT int ccltwin_clear_rules(uint64_t comm) {
  static struct ct_key kept[CT_RULE_KEYS];
  int removed = 0, nkept = 0;
  pthread_mutex_lock(&g_lock);
  rules_ready();
  for (int i = 0; i < CT_RULE_KEYS; i++) {
    struct ct_key* k = &g_keys[i];
    if (!k->used) continue;
    if (k->comm != comm) {
      kept[nkept++] = *k;
      continue;
    }
    for (int j = k->head; j >= 0; j = g_rules[j].next) removed++;
    rule_free_chain(k->head);
  }
  memset(g_keys, 0, sizeof(g_keys));  /* re-insert the others: open addressing has no delete */
  g_nkeys = 0;
  for (int i = 0; i < nkept; i++) key_find(kept[i].comm, kept[i].coll, kept[i].nbytes, 1)->head = kept[i].head;
  pthread_mutex_unlock(&g_lock);
  return removed;
}

/* ---------------------------------------------------------------------------------- rings */

static struct ccltwin_decision g_decisions[CT_DECISIONS];
static int g_dec_head, g_dec_count;
static uint64_t g_dec_dropped;
static struct ccltwin_event g_events[CT_EVENTS];
static int g_ev_head, g_ev_count;
static uint64_t g_ev_dropped;

#define RING_PUSH(ring, size, head, count, dropped, item) \
  do {                                                     \
    if ((count) == (size)) {                               \
      (dropped)++;                                         \
    } else {                                               \
      (ring)[((head) + (count)) % (size)] = (item);        \
      (count)++;                                           \
    }                                                      \
  } while (0)

/* Copy up to max of the oldest entries to out and remove them; with no room given, count them. */
#define RING_DRAIN(ring, size, head, count, out, max, ret)                          \
  do {                                                                              \
    if (!(out) || (max) <= 0) {                                                     \
      (ret) = (count);                                                              \
      break;                                                                        \
    }                                                                               \
    (ret) = (max) < (count) ? (max) : (count);                                      \
    for (int i_ = 0; i_ < (ret); i_++) (out)[i_] = (ring)[((head) + i_) % (size)];  \
    (head) = ((head) + (ret)) % (size);                                             \
    (count) -= (ret);                                                               \
  } while (0)

CT_EXPORT int ccltwin_drain_decisions(struct ccltwin_decision* out, int max) {
  int ret;
  pthread_mutex_lock(&g_lock);
  RING_DRAIN(g_decisions, CT_DECISIONS, g_dec_head, g_dec_count, out, max, ret);
  pthread_mutex_unlock(&g_lock);
  return ret;
}

CT_EXPORT int ccltwin_drain_events(struct ccltwin_event* out, int max) {
  int ret;
  pthread_mutex_lock(&g_lock);
  RING_DRAIN(g_events, CT_EVENTS, g_ev_head, g_ev_count, out, max, ret);
  pthread_mutex_unlock(&g_lock);
  return ret;
}

CT_EXPORT uint64_t ccltwin_dropped(int which) {
  pthread_mutex_lock(&g_lock);
  uint64_t n = which == 0 ? g_dec_dropped : which == 1 ? g_ev_dropped : 0;
  pthread_mutex_unlock(&g_lock);
  return n;
}

/* ---------------------------------------------------------------------------------- tuner */

/* NCCL's choice from a cost table (enqueue.cc topoGetAlgoInfo): the lowest entry >= 0, strict <,
 * so ties go to the lower algorithm, then the lower protocol. */
static void nccl_argmin(const float* t, int na, int np, int* algo, int* proto) {
  float best = CT_NCCL_MAX_TIME;
  *algo = *proto = -1;
  for (int a = 0; t && a < na; a++)
    for (int p = 0; p < np; p++) {
      float v = t[a * np + p];
      if (v == CT_COST_IGNORE) continue;
      if (v >= 0.0f && v < best) {
        best = v;
        *algo = a;
        *proto = p;
      }
    }
}

/* Force (algo, proto) into a table NCCL laid out as float[na][np]: both given: that entry to 0.0;
 * only one given: every other available entry to -1 so NCCL picks among that algorithm's (or that
 * protocol's) entries by its own costs.  Returns 0 (table untouched) if nothing matching is >= 0. */
static int force(float* t, int na, int np, int algo, int proto) {
  if (algo < 0 && proto < 0) return 1;
  if (!t || algo >= na || proto >= np) return 0;
  if (algo >= 0 && proto >= 0) {
    if (!(t[algo * np + proto] >= 0.0f)) return 0;
    t[algo * np + proto] = 0.0f;
    return 1;
  }
  int available = 0;
  for (int a = 0; a < na; a++)
    for (int p = 0; p < np; p++)
      if ((a == algo || p == proto) && t[a * np + p] >= 0.0f) available = 1;
  if (!available) return 0;
  for (int a = 0; a < na; a++)
    for (int p = 0; p < np; p++)
      if (a != algo && p != proto && t[a * np + p] >= 0.0f) t[a * np + p] = CT_COST_IGNORE;
  return 1;
}

static void pending_push(struct ct_comm* c, const struct ccltwin_decision* d) {
  if (c->chunk_seen) c->npending = c->chunk_seen = 0;  /* a new group began */
  if (c->npending == CT_PENDING_CHUNKS) {
    memmove(c->pending, c->pending + 1, sizeof(c->pending[0]) * (CT_PENDING_CHUNKS - 1));
    c->npending--;
  }
  struct ct_pending* p = &c->pending[c->npending++];
  p->coll = d->coll;
  p->algo = d->algo;
  p->proto = d->proto;
  p->nbytes = d->nbytes;
  p->chunk = d->chunk_bytes;
}

static ct_result_t coll_info(void* ctx, ct_func_t coll, size_t nbytes, float** table, int na, int np,
                             int* nChannels) {
  float* t = (na > 0 && np > 0) ? (float*)table : NULL;  /* contiguous float[na][np], not row pointers */
  pthread_mutex_lock(&g_lock);
  struct ct_comm* c = comm_of(ctx);
  if (!c) goto out;
  struct ccltwin_decision d = {.comm = c->comm, .coll = coll, .nbytes = nbytes, .occurrence = CT_UNKNOWN};
  struct ct_task* task = (coll >= 0 && coll < CT_NUM_FUNCS) ? task_find(c, coll, nbytes, 1) : NULL;
  const struct ct_rule* r = NULL;
  for (int a = 0; t && a < na && a < CT_NUM_ALGOS; a++)
    for (int p = 0; p < np && p < CT_NUM_PROTOS; p++)
      if (t[a * np + p] >= 0.0f) d.table_mask |= 1u << (a * CT_NUM_PROTOS + p);
  nccl_argmin(t, na, np, &d.nccl_algo, &d.nccl_proto);
  if (!task) {
    d.flags |= CCLTWIN_UNTRACKED;
  } else {
    d.occurrence = task->calls++;
    if (!c->comm)
      d.flags |= CCLTWIN_COMM_UNKNOWN;
    else
      r = rule_for(c->comm, coll, nbytes, d.occurrence);
  }
  if (r) {
    d.version = r->version;
    if (!force(t, na, np, r->algo, r->proto)) {
      d.flags |= CCLTWIN_UNAVAILABLE;
    } else {
      d.flags |= CCLTWIN_RULE_APPLIED;
      if (r->nchannels > 0 && nChannels) *nChannels = d.nchannels = r->nchannels;
      if (r->chunk && c->tuner_abi >= 6) {
        d.chunk_bytes = r->chunk;
        d.flags |= CCLTWIN_CHUNK;
      }
    }
  }
  nccl_argmin(t, na, np, &d.algo, &d.proto);
  if (c->tuner_abi >= 6) pending_push(c, &d);
  RING_PUSH(g_decisions, CT_DECISIONS, g_dec_head, g_dec_count, g_dec_dropped, d);
out:
  pthread_mutex_unlock(&g_lock);
  return CT_SUCCESS;
}

/* calcCollChunking asks once per channel part (nBytes = the part) after this group's getCollInfo
 * calls; the part belongs to the newest pending call of the same collective, size and algo/proto. */
static ct_result_t chunk_size(void* ctx, ct_func_t coll, size_t nbytes, int algo, int proto, int nChannels,
                              size_t* chunkSize) {
  (void)nChannels;
  pthread_mutex_lock(&g_lock);
  struct ct_comm* c = comm_of(ctx);
  if (c) {
    c->chunk_seen = 1;
    for (int i = c->npending - 1; i >= 0; i--) {
      const struct ct_pending* p = &c->pending[i];
      if (p->coll != coll || nbytes > p->nbytes || p->algo != algo || p->proto != proto) continue;
      if (p->chunk && chunkSize) *chunkSize = p->chunk;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return CT_SUCCESS;
}

static void tuner_init(int abi, int has_id, uint64_t comm, size_t nranks, size_t nnodes, ct_logger_t log,
                       void** context) {
  pthread_mutex_lock(&g_lock);
  struct ct_comm* c = t_profiled;
  int paired = c && c->used && c->profiler_open && !c->tuner_abi && c->nranks == (int)nranks &&
               c->nnodes == (int)nnodes && (!has_id || c->comm == comm);
  if (!paired) c = comm_new();
  t_profiled = NULL;
  if (c) {
    if (!paired) {
      c->nranks = (int)nranks;
      c->nnodes = (int)nnodes;
    }
    if (has_id) c->comm = comm;
    c->tuner_abi = abi;
    c->tuner_open = 1;
  }
  uint64_t id = c ? c->comm : 0, local = c ? c->local_ctx_id : 0;
  pthread_mutex_unlock(&g_lock);
  if (context) *context = c;
  if (!log) return;
  if (c)
    log(CT_LOG_INFO, CT_SUBSYS_INIT | CT_SUBSYS_TUNING, __FILE__, __LINE__,
        "ccltwin-live: tuner v%d init: comm 0x%llx nranks %zu nnodes %zu context %llu%s", abi,
        (unsigned long long)id, nranks, nnodes, (unsigned long long)local,
        has_id ? "" : paired ? " (comm id from the profiler init)" : " (comm id unknown until ccltwin_set_comm_id)");
  else
    log(CT_LOG_WARN, CT_SUBSYS_INIT | CT_SUBSYS_TUNING, __FILE__, __LINE__,
        "ccltwin-live: all %d contexts are in use; this communicator keeps NCCL's defaults", CT_MAX_COMMS);
}

static ct_result_t tuner_close(void* ctx) {
  pthread_mutex_lock(&g_lock);
  struct ct_comm* c = comm_of(ctx);
  if (c) c->tuner_open = 0;
  pthread_mutex_unlock(&g_lock);
  return CT_SUCCESS;
}

/* The exported init of each tuner ABI: v3/v4 (no comm id), v5/v6 (comm id; constants left alone). */
#define CT_TUNER_INIT_NO_ID(abi)                                                                \
  static ct_result_t v##abi##_init(size_t nranks, size_t nnodes, ct_logger_t log, void** ctx) { \
    tuner_init(abi, 0, 0, nranks, nnodes, log, ctx);                                            \
    return CT_SUCCESS;                                                                          \
  }
#define CT_TUNER_INIT_ID(abi)                                                                                \
  static ct_result_t v##abi##_init(void** ctx, uint64_t comm, size_t nranks, size_t nnodes, ct_logger_t log, \
                                   ct_nvl_domain_info_v5_t* nvl, ct_tuner_constants_v5_t* constants) {       \
    (void)nvl;                                                                                               \
    (void)constants;                                                                                         \
    tuner_init(abi, 1, comm, nranks, nnodes, log, ctx);                                                      \
    return CT_SUCCESS;                                                                                       \
  }
CT_TUNER_INIT_NO_ID(3)
CT_TUNER_INIT_NO_ID(4)
CT_TUNER_INIT_ID(5)
CT_TUNER_INIT_ID(6)

static ct_result_t v3_coll_info(void* ctx, ct_func_t coll, size_t nbytes, int numPipeOps, float** table, int na,
                                int np, int* nChannels) {
  (void)numPipeOps;
  return coll_info(ctx, coll, nbytes, table, na, np, nChannels);
}
static ct_result_t coll_info_reg(void* ctx, ct_func_t coll, size_t nbytes, int numPipeOps, float** table, int na,
                                 int np, int regBuff, int* nChannels) {
  (void)numPipeOps;
  (void)regBuff;
  return coll_info(ctx, coll, nbytes, table, na, np, nChannels);
}

CT_EXPORT ct_tuner_v3_t ncclTunerPlugin_v3 = {"ccltwin-live", v3_init, v3_coll_info, tuner_close};
CT_EXPORT ct_tuner_v4_t ncclTunerPlugin_v4 = {"ccltwin-live", v4_init, coll_info_reg, tuner_close};
CT_EXPORT ct_tuner_v5_t ncclTunerPlugin_v5 = {"ccltwin-live", v5_init, coll_info_reg, tuner_close};
CT_EXPORT ct_tuner_v6_t ncclTunerPlugin_v6 = {"ccltwin-live", v6_init, coll_info_reg, tuner_close, chunk_size};

/* ------------------------------------------------------------------------------- profiler */

struct ct_slot {
  int used, stopped, expected, started, finished;  /* expected kernel channels; started/finished */
  uint64_t order, host_start, gpu_start, gpu_stop;
  struct ccltwin_event ev;
  uint8_t ch[CT_MAX_CHANNELS];  /* kernel-channel handles point here: 1 started, 2 stopped */
};

static struct ct_slot g_slots[CT_EVENT_SLOTS];
static uint64_t g_slot_order;
static int g_event_mask = -1;

static int index_of(const char* s, const char* const* names, int n) {
  for (int i = 0; s && i < n; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

static const char* const FUNC_NAMES[CT_NUM_FUNCS] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                                     "AllReduce"};
static const char* const ALGO_NAMES[CT_NUM_ALGOS] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN",
                                                     "NVLS", "NVLS_TREE", "PAT"};
static const char* const PROTO_NAMES[CT_NUM_PROTOS] = {"LL", "LL128", "SIMPLE"};

/* ncclDatatypeToString's names, in ncclDataType_t order (nccl.h: ncclInt8 0 ... ncclFloat8e5m2 11). */
#define CT_NUM_TYPES 12
static const char* const TYPE_NAMES[CT_NUM_TYPES] = {
    "ncclInt8",   "ncclUint8",   "ncclInt32",    "ncclUint32",     "ncclInt64",     "ncclUint64",
    "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
static const uint64_t TYPE_SIZES[CT_NUM_TYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

/* A handle NCCL gives back: a slot (channel -1) or one of its kernel-channel marks. */
static struct ct_slot* slot_of(void* handle, int* channel) {
  uintptr_t p = (uintptr_t)handle, base = (uintptr_t)g_slots;
  if (p < base || p >= base + sizeof(g_slots)) return NULL;
  struct ct_slot* s = &g_slots[(p - base) / sizeof(struct ct_slot)];
  size_t off = (p - base) % sizeof(struct ct_slot), marks = offsetof(struct ct_slot, ch);
  if (!s->used) return NULL;
  if (off == 0) *channel = -1;
  else if (off >= marks && off < marks + CT_MAX_CHANNELS) *channel = (int)(off - marks);
  else return NULL;
  return s;
}

static void slot_finish(struct ct_slot* s) {
  if (s->started && s->gpu_stop >= s->gpu_start && s->gpu_stop) {
    s->ev.start_ns = s->gpu_start;
    s->ev.stop_ns = s->gpu_stop;
    s->ev.timer = 0;
  } else {
    s->ev.timer = 1;  /* ev.start_ns/stop_ns hold the host times */
  }
  RING_PUSH(g_events, CT_EVENTS, g_ev_head, g_ev_count, g_ev_dropped, s->ev);
  s->used = 0;
}

static void slot_check(struct ct_slot* s) {
  if (s->stopped && s->finished >= s->expected) slot_finish(s);
}

static struct ct_slot* slot_new(void) {
  struct ct_slot* oldest = NULL;
  for (int i = 0; i < CT_EVENT_SLOTS; i++) {
    struct ct_slot* s = &g_slots[i];
    if (!s->used) return s;
    if (s->stopped && (!oldest || s->order < oldest->order)) oldest = s;
  }
  if (oldest) slot_finish(oldest);  /* its kernel events never all came: keep what it has */
  return oldest;
}

static void coll_start(struct ct_comm* c, void** handle, uint64_t seq, const char* func, size_t count,
                       const char* datatype, int nchannels, int nwarps, const char* algo, const char* proto) {
  struct ct_slot* s = slot_new();
  if (!s) {
    g_ev_dropped++;
    return;
  }
  memset(s, 0, sizeof(*s));
  s->used = 1;
  s->order = ++g_slot_order;
  s->expected = (g_event_mask & CT_PROFILE_KERNEL_CH) ? nchannels : 0;
  struct ccltwin_event* e = &s->ev;
  e->comm = c->comm;
  e->coll = index_of(func, FUNC_NAMES, CT_NUM_FUNCS);
  e->dtype = index_of(datatype, TYPE_NAMES, CT_NUM_TYPES);
  e->nbytes = (uint64_t)count * (e->dtype < 0 ? 0 : TYPE_SIZES[e->dtype]) *
              ((e->coll == CT_FUNC_ALLGATHER || e->coll == CT_FUNC_REDUCESCATTER) && c->nranks > 0 ? c->nranks : 1);
  e->seq = seq;
  e->algo = index_of(algo, ALGO_NAMES, CT_NUM_ALGOS);
  e->proto = index_of(proto, PROTO_NAMES, CT_NUM_PROTOS);
  e->nchannels = nchannels;
  e->nwarps = nwarps;
  struct ct_task* t = e->coll >= 0 ? task_find(c, e->coll, e->nbytes, 1) : NULL;
  e->occurrence = t ? t->events++ : CT_UNKNOWN;
  e->start_ns = now_ns();
  *handle = s;
}

static void channel_start(void** handle, void* parent, int channel, uint64_t ptimer) {
  int which = 0;
  struct ct_slot* s = (g_event_mask & CT_PROFILE_KERNEL_CH) ? slot_of(parent, &which) : NULL;
  if (!s || which != -1 || channel < 0 || channel >= CT_MAX_CHANNELS || s->ch[channel]) return;
  s->ch[channel] = 1;
  if (!s->started++ || ptimer < s->gpu_start) s->gpu_start = ptimer;
  *handle = &s->ch[channel];
}

static ct_result_t start_event(void* ctx, void** handle, uint64_t type, const ct_prof_coll_v4_t* coll_v4,
                               const ct_prof_coll_v5_t* coll_v5, void* parent, const ct_prof_kernel_ch_t* kch) {
  if (!handle) return CT_SUCCESS;
  *handle = NULL;
  pthread_mutex_lock(&g_lock);
  struct ct_comm* c = comm_of(ctx);
  if (c && type == CT_PROFILE_COLL && coll_v4)
    coll_start(c, handle, coll_v4->seqNumber, coll_v4->func, coll_v4->count, coll_v4->datatype, coll_v4->nChannels,
               coll_v4->nWarps, coll_v4->algo, coll_v4->proto);
  else if (c && type == CT_PROFILE_COLL && coll_v5)
    coll_start(c, handle, coll_v5->seqNumber, coll_v5->func, coll_v5->count, coll_v5->datatype, coll_v5->nChannels,
               coll_v5->nWarps, coll_v5->algo, coll_v5->proto);
  else if (type == CT_PROFILE_KERNEL_CH)
    channel_start(handle, parent, kch->channelId, kch->pTimer);
  pthread_mutex_unlock(&g_lock);
  return CT_SUCCESS;
}

static ct_result_t start_v4(void* ctx, void** handle, ct_prof_descr_v4_t* d) {
  if (!d) return CT_SUCCESS;
  return start_event(ctx, handle, d->type, &d->coll, NULL, d->parentObj, &d->kernelCh);
}
static ct_result_t start_v5(void* ctx, void** handle, ct_prof_descr_v5_t* d) {
  if (!d) return CT_SUCCESS;
  return start_event(ctx, handle, d->type, NULL, &d->coll, d->parentObj, &d->kernelCh);
}

static ct_result_t stop_event(void* handle) {
  int channel = -1;
  pthread_mutex_lock(&g_lock);
  struct ct_slot* s = slot_of(handle, &channel);
  if (s && channel < 0 && !s->stopped) {
    s->stopped = 1;
    s->ev.stop_ns = now_ns();
    slot_check(s);
  } else if (s && channel >= 0 && s->ch[channel] == 1) {
    s->ch[channel] = 2;
    s->finished++;
    slot_check(s);
  }
  pthread_mutex_unlock(&g_lock);
  return CT_SUCCESS;
}

static ct_result_t record_state(void* handle, int state, ct_prof_state_args_t* args) {
  int channel = -1;
  if (state != CT_PROFILER_KERNEL_CH_STOP || !args) return CT_SUCCESS;
  pthread_mutex_lock(&g_lock);
  struct ct_slot* s = slot_of(handle, &channel);
  if (s && channel >= 0 && s->ch[channel] == 1 && args->kernelCh.pTimer > s->gpu_stop)
    s->gpu_stop = args->kernelCh.pTimer;
  pthread_mutex_unlock(&g_lock);
  return CT_SUCCESS;
}

static int event_mask(void) {  /* CCLTWIN_LIVE_EVENTS: kernel (default), coll, off */
  const char* v = getenv("CCLTWIN_LIVE_EVENTS");
  if (v && !strcmp(v, "off")) return 0;
  if (v && !strcmp(v, "coll")) return CT_PROFILE_COLL;
  return CT_PROFILE_COLL | CT_PROFILE_KERNEL_CH;
}

static void profiler_init(int abi, void** context, uint64_t comm, int* mask, int nnodes, int nranks, int rank,
                          ct_logger_t log) {
  pthread_mutex_lock(&g_lock);
  if (g_event_mask < 0) g_event_mask = event_mask();
  struct ct_comm* c = comm_new();
  if (c) {
    c->comm = comm;
    c->nnodes = nnodes;
    c->nranks = nranks;
    c->rank = rank;
    c->profiler_abi = abi;
    c->profiler_open = 1;
  }
  t_profiled = c;
  int events = g_event_mask;
  uint64_t local = c ? c->local_ctx_id : 0;
  pthread_mutex_unlock(&g_lock);
  if (context) *context = c;
  if (mask) *mask = c ? events : 0;
  if (log && c)
    log(CT_LOG_INFO, CT_SUBSYS_INIT | CT_SUBSYS_PROFILE, __FILE__, __LINE__,
        "ccltwin-live: profiler v%d init: comm 0x%llx rank %d/%d nnodes %d context %llu events 0x%x", abi,
        (unsigned long long)comm, rank, nranks, nnodes, (unsigned long long)local, events);
}

static ct_result_t profiler_close(void* ctx) {
  pthread_mutex_lock(&g_lock);
  struct ct_comm* c = comm_of(ctx);
  if (c) c->profiler_open = 0;
  pthread_mutex_unlock(&g_lock);
  return CT_SUCCESS;
}

static ct_result_t p4_init(void** ctx, int* mask, const char* name, uint64_t comm, int nnodes, int nranks, int rank,
                           ct_logger_t log) {
  (void)name;
  profiler_init(4, ctx, comm, mask, nnodes, nranks, rank, log);
  return CT_SUCCESS;
}
#define CT_PROFILER_INIT_ID(abi)                                                                             \
  static ct_result_t p##abi##_init(void** ctx, uint64_t comm, int* mask, const char* name, int nnodes, int nranks, \
                                   int rank, ct_logger_t log) {                                                  \
    (void)name;                                                                                                  \
    profiler_init(abi, ctx, comm, mask, nnodes, nranks, rank, log);                                              \
    return CT_SUCCESS;                                                                                           \
  }
CT_PROFILER_INIT_ID(5)
CT_PROFILER_INIT_ID(6)

CT_EXPORT ct_profiler_v4_t ncclProfiler_v4 = {"ccltwin-live", p4_init, start_v4, stop_event, record_state,
                                              profiler_close};
CT_EXPORT ct_profiler_v5_t ncclProfiler_v5 = {"ccltwin-live", p5_init, start_v5, stop_event, record_state,
                                              profiler_close};
CT_EXPORT ct_profiler_v6_t ncclProfiler_v6 = {"ccltwin-live", p6_init, start_v5, stop_event, record_state,
                                              profiler_close};

/* ----------------------------------------------------------------------- control API rest */

CT_EXPORT int ccltwin_abi(void) { return CCLTWIN_ABI; }

CT_EXPORT int ccltwin_comms(struct ccltwin_comm* out, int max) {
  int n = 0;
  uint64_t after = 0;
  pthread_mutex_lock(&g_lock);
  for (;;) {  /* in creation order: the next-larger local id each round (at most CT_MAX_COMMS) */
    struct ct_comm* next = NULL;
    for (int i = 0; i < CT_MAX_COMMS; i++) {
      struct ct_comm* c = &g_comms[i];
      if (c->used && c->local_ctx_id > after && (!next || c->local_ctx_id < next->local_ctx_id)) next = c;
    }
    if (!next) break;
    after = next->local_ctx_id;
    if (out && n < max)
      out[n] = (struct ccltwin_comm){next->comm,   next->local_ctx_id, next->nranks,
                                     next->nnodes, next->rank,         next->tuner_abi,
                                     next->profiler_abi, next->tuner_open || next->profiler_open};
    if (!out || n < max) n++;
  }
  pthread_mutex_unlock(&g_lock);
  return n;
}

CT_EXPORT int ccltwin_set_comm_id(uint64_t local_ctx_id, uint64_t comm) {
  int ret = CCLTWIN_EINVAL;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < CT_MAX_COMMS; i++)
    if (g_comms[i].used && g_comms[i].local_ctx_id == local_ctx_id) {
      g_comms[i].comm = comm;
      ret = 0;
    }
  pthread_mutex_unlock(&g_lock);
  return ret;
}

CT_EXPORT uint64_t ccltwin_occurrences(uint64_t comm, int coll, uint64_t nbytes) {
  uint64_t most = 0;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < CT_MAX_COMMS; i++) {
    struct ct_comm* c = &g_comms[i];
    struct ct_task* t = c->used && c->tuner_open && c->comm == comm ? task_find(c, coll, nbytes, 0) : NULL;
    if (t && t->calls > most) most = t->calls;
  }
  pthread_mutex_unlock(&g_lock);
  return most;
}

CT_EXPORT int ccltwin_rule_capacity(void) { return CT_RULES; }
CT_EXPORT int ccltwin_key_capacity(void) { return CT_LOAD_LIMIT(CT_RULE_KEYS); }

CT_EXPORT size_t ccltwin_sizeof(int which) {
  switch (which) {
    case 0: return sizeof(struct ccltwin_comm);
    case 1: return sizeof(struct ccltwin_decision);
    case 2: return sizeof(struct ccltwin_event);
    default: return 0;
  }
}
