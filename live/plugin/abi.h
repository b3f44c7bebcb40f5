/* Our own declarations of the NCCL plugin ABIs ccltwin_live.c implements.
 *
 * Written from the layouts of NVIDIA/nccl's plugin headers (read at tags v2.22.3-1 ... v2.30.7-1;
 * see research/nccl-mechanisms.md §1 and §6.2); no NCCL header is included or copied.  Each
 * declaration names the release and header whose layout it matches.  Names are ours (ct_*); only
 * the exported symbol names (ncclTunerPlugin_vN, ncclProfiler_vN, in ccltwin_live.c) are NCCL's.
 *
 * C ABI facts relied on: NCCL's enums (ncclResult_t, ncclFunc_t, ncclDebugLogLevel,
 * ncclProfilerEventState_t) are passed as int; every struct below starts with `const char* name`
 * followed by function pointers in the order NCCL declares them.
 */
#ifndef CCLTWIN_ABI_H
#define CCLTWIN_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- common (src/include/nccl.h.in, src/include/nccl_common.h; unchanged 2.19 .. 2.30) ---- */

typedef int ct_result_t;          /* ncclResult_t: 0 = ncclSuccess, 3 = ncclInternalError */
#define CT_SUCCESS 0

typedef int ct_func_t;            /* ncclFunc_t: Broadcast 0, Reduce 1, AllGather 2, ReduceScatter 3,
                                     AllReduce 4 (only 0..4 reach a tuner) */
#define CT_NUM_FUNCS 5
#define CT_FUNC_ALLGATHER 2
#define CT_FUNC_REDUCESCATTER 3

/* ncclDebugLogger_t: void (*)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
 *                            const char* fmt, ...) */
typedef void (*ct_logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
#define CT_LOG_WARN 2             /* NCCL_LOG_WARN */
#define CT_LOG_INFO 3             /* NCCL_LOG_INFO */
#define CT_SUBSYS_INIT 0x1        /* NCCL_INIT */
#define CT_SUBSYS_TUNING 0x40     /* NCCL_TUNING */
#define CT_SUBSYS_PROFILE 0x4000  /* NCCL_PROFILE */

/* Cost-table indices (src/include/plugin/nccl_tuner.h): NCCL_ALGO_TREE 0, RING 1, COLLNET_DIRECT 2,
 * COLLNET_CHAIN 3, NVLS 4, NVLS_TREE 5, PAT 6 (7 algorithms since 2.23); NCCL_PROTO_LL 0, LL128 1,
 * SIMPLE 2.  The table NCCL passes as `float**` is a contiguous float[numAlgo][numProto] on its stack
 * (enqueue.cc ncclGetAlgoInfo: `float collCostTable[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS]`,
 * passed as `(float**)collCostTable`); -1.0 (NCCL_ALGO_PROTO_IGNORE) marks an unavailable entry. */
#define CT_NUM_ALGOS 7
#define CT_NUM_PROTOS 3
#define CT_COST_IGNORE (-1.0f)

/* ---- tuner v3: NCCL 2.22.3 .. 2.23.4 (src/include/nccl_tuner.h at v2.22.3-1;
 *      src/include/plugin/tuner/tuner_v3.h from v2.26) -------------------------------------- */
typedef struct {
  const char* name;
  ct_result_t (*init)(size_t nRanks, size_t nNodes, ct_logger_t logFunction, void** context);
  ct_result_t (*getCollInfo)(void* context, ct_func_t collType, size_t nBytes, int numPipeOps,
                             float** collCostTable, int numAlgo, int numProto, int* nChannels);
  ct_result_t (*destroy)(void* context);
} ct_tuner_v3_t;

/* ---- tuner v4: NCCL 2.24.3 .. 2.27.7 (src/include/plugin/tuner/tuner_v4.h at v2.27.5-1):
 *      getCollInfo gains `int regBuff` before nChannels --------------------------------------- */
typedef struct {
  const char* name;
  ct_result_t (*init)(size_t nRanks, size_t nNodes, ct_logger_t logFunction, void** context);
  ct_result_t (*getCollInfo)(void* context, ct_func_t collType, size_t nBytes, int numPipeOps,
                             float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ct_result_t (*destroy)(void* context);
} ct_tuner_v4_t;

/* ---- tuner v5: NCCL 2.28.3 .. 2.29.7 (src/include/plugin/tuner/tuner_v5.h at v2.28.9-1):
 *      init receives the communicator id (comm->commHash) and NCCL's model constants;
 *      destroy is renamed finalize ---------------------------------------------------------- */
typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ct_nvl_domain_info_v5_t;

/* ncclTunerConstants_v5_t: doubles, [NUM_ALGORITHMS 7][NUM_PROTOCOLS 3], hw links 3, compcaps 4,
 * tuning scales 3.  We never read or write it; declared so that the pointer type is honest. */
typedef struct {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
} ct_tuner_constants_v5_t;

#define CT_TUNER_V5_MEMBERS                                                                              \
  const char* name;                                                                                      \
  ct_result_t (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ct_logger_t logFunction, \
                      ct_nvl_domain_info_v5_t* nvlDomainInfo, ct_tuner_constants_v5_t* constants);        \
  ct_result_t (*getCollInfo)(void* context, ct_func_t collType, size_t nBytes, int numPipeOps,            \
                             float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels); \
  ct_result_t (*finalize)(void* context);

typedef struct {
  CT_TUNER_V5_MEMBERS
} ct_tuner_v5_t;

/* ---- tuner v6: NCCL 2.30.3 .. (src/include/plugin/tuner/tuner_v6.h at v2.30.7-1): v5 plus an
 *      optional getChunkSize, called from calcCollChunking per channel part (nChannels = 1, nBytes =
 *      the part) after NCCL computed its chunk; NCCL clamps the result to its buffer ceiling and
 *      aligns it down to the protocol grain.  Constants and NVL domain info are v5's. ---------- */
typedef struct {
  CT_TUNER_V5_MEMBERS
  ct_result_t (*getChunkSize)(void* context, ct_func_t collType, size_t nBytes, int algo, int proto,
                              int nChannels, size_t* chunkSize);
} ct_tuner_v6_t;

/* ---- profiler plugin (src/include/plugin/nccl_profiler.h, profiler/profiler_v4.h .. v6.h) ----
 * Symbols NCCL probes, newest first: 2.27.x ncclProfiler_v4..v1; 2.28.x v5..v1; 2.29.x, 2.30.x
 * v6..v1 (src/plugin/profiler.cc).  Event type bits (enum in nccl_profiler.h, same values since
 * v1): ncclProfileColl 1<<1, ncclProfileKernelCh 1<<6.  State ncclProfilerKernelChStop = 22 (v4+). */
#define CT_PROFILE_COLL (1 << 1)
#define CT_PROFILE_KERNEL_CH (1 << 6)
#define CT_PROFILER_KERNEL_CH_STOP 22

/* Event descriptors.  Only the union members the plugin reads (coll, kernelCh) are declared; the
 * omitted members (groupApi, collApi, p2pApi, kernelLaunch, p2p, proxyOp, proxyStep, netPlugin, and
 * v6's ceColl/ceCollSync/ceCollBatch) do not move them: a union's members all start at its offset,
 * which is 24 in every version (8-byte aligned union after type, parentObj, rank). */

/* v4: NCCL 2.27.x (profiler_v4.h at v2.27.5-1, unchanged at v2.28.9-1): `uint8_t type`. */
#define CT_PROF_COLL_V4_MEMBERS                                                \
  uint64_t seqNumber;   /* per communicator and function, counted by NCCL */   \
  const char* func;     /* ncclFuncToString: "AllReduce", "AllGather", ... */  \
  void const* sendBuff;                                                        \
  void* recvBuff;                                                              \
  size_t count;         /* elements (per rank for AllGather/ReduceScatter) */  \
  int root;                                                                    \
  const char* datatype; /* ncclDatatypeToString: "ncclFloat32", ... */         \
  uint8_t nChannels;    /* channels the task really uses */                    \
  uint8_t nWarps;                                                              \
  const char* algo;     /* ncclAlgoToString: "TREE", "RING", ..., "PAT" */     \
  const char* proto;    /* ncclProtoToString: "LL", "LL128", "SIMPLE" */

typedef struct {
  CT_PROF_COLL_V4_MEMBERS
} ct_prof_coll_v4_t;

typedef struct {
  uint8_t channelId;
  uint64_t pTimer;          /* GPU globaltimer (ns) at the channel's start */
} ct_prof_kernel_ch_t;      /* same in v4, v5, v6 */

typedef struct {
  uint8_t type;
  void* parentObj;          /* kernelCh: the coll event's handle */
  int rank;
  union {
    ct_prof_coll_v4_t coll;
    ct_prof_kernel_ch_t kernelCh;
  };
} ct_prof_descr_v4_t;

/* v5: NCCL 2.28.x (profiler_v5.h at v2.28.9-1): `uint64_t type`; coll gains a trailing parentGroup. */
typedef struct {
  CT_PROF_COLL_V4_MEMBERS
  void* parentGroup;
} ct_prof_coll_v5_t;        /* also v6's coll (profiler_v6.h at v2.29.7-1 and v2.30.7-1) */

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    ct_prof_coll_v5_t coll;
    ct_prof_kernel_ch_t kernelCh;
  };
} ct_prof_descr_v5_t;       /* v6's descriptor has the same head and the same coll/kernelCh members */
typedef ct_prof_descr_v5_t ct_prof_descr_v6_t;

/* State arguments (v4 .. v6: a union whose kernelCh member is `uint64_t pTimer`, at offset 0). */
typedef union {
  struct {
    uint64_t pTimer;        /* GPU globaltimer (ns) at the channel's stop */
  } kernelCh;               /* the other members (proxyStep, proxyCtrl, netPlugin) are never read */
} ct_prof_state_args_t;

/* v4 init: (context, eActivationMask, commName, commHash, nNodes, nranks, rank, logfn). */
typedef struct {
  const char* name;
  ct_result_t (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                      int nranks, int rank, ct_logger_t logfn);
  ct_result_t (*startEvent)(void* context, void** eHandle, ct_prof_descr_v4_t* eDescr);
  ct_result_t (*stopEvent)(void* eHandle);
  ct_result_t (*recordEventState)(void* eHandle, int eState, ct_prof_state_args_t* eStateArgs);
  ct_result_t (*finalize)(void* context);
} ct_profiler_v4_t;

/* v5 and v6 init: (context, commId, eActivationMask, commName, nNodes, nranks, rank, logfn). */
typedef struct {
  const char* name;
  ct_result_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                      int nranks, int rank, ct_logger_t logfn);
  ct_result_t (*startEvent)(void* context, void** eHandle, ct_prof_descr_v5_t* eDescr);
  ct_result_t (*stopEvent)(void* eHandle);
  ct_result_t (*recordEventState)(void* eHandle, int eState, ct_prof_state_args_t* eStateArgs);
  ct_result_t (*finalize)(void* context);
} ct_profiler_v5_t;
typedef ct_profiler_v5_t ct_profiler_v6_t;

#endif
