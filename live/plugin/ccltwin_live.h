/* ccltwin's control API: what Python calls (through ctypes) on the same loaded library NCCL uses as
 * its tuner and profiler plugin.  The contract is /work/wt/LIVE.md's "C control API" (ABI 1);
 * live/plugin/binding.py mirrors these structs and checks their sizes with ccltwin_sizeof. */
#ifndef CCLTWIN_LIVE_H
#define CCLTWIN_LIVE_H

#include <stddef.h>
#include <stdint.h>

#define CCLTWIN_ABI 1

#define CCLTWIN_EINVAL (-1)  /* a field out of range; nothing changed */
#define CCLTWIN_EFULL (-2)   /* a fixed-size table is full; that call keeps NCCL's default */

/* Decision flags. */
#define CCLTWIN_RULE_APPLIED 0x1   /* a rule matched and was applied */
#define CCLTWIN_UNAVAILABLE 0x2    /* a rule matched but its algo/proto is -1 in the cost table: NCCL's
                                      default kept for the whole call (no channels, no chunk either) */
#define CCLTWIN_CHUNK 0x4          /* chunk_bytes is offered to NCCL through getChunkSize (tuner v6) */
#define CCLTWIN_UNTRACKED 0x8      /* the communicator's task table is full: occurrence unknown, default */
#define CCLTWIN_COMM_UNKNOWN 0x10  /* no communicator id yet (tuner v3/v4 without a profiler init to pair
                                      with, before ccltwin_set_comm_id): default */

struct ccltwin_comm {
  uint64_t comm;          /* commHash, identical on every rank; 0 = not known yet */
  uint64_t local_ctx_id;  /* this process's id for the context, from 1, never reused */
  int nranks, nnodes, rank; /* rank -1: unknown (no profiler init) */
  int tuner_abi;          /* 3..6, 0: no tuner init */
  int profiler_abi;       /* 4..6, 0: no profiler init */
  int alive;              /* 1 until both the tuner and the profiler finalized this context */
};

struct ccltwin_decision {
  uint64_t comm;
  int coll;               /* ncclFunc_t */
  uint64_t nbytes, occurrence;
  int algo, proto;        /* the entry NCCL's argmin takes from the table as the plugin leaves it:
                             what NCCL runs; -1 when there was no table or no entry >= 0 */
  int nchannels;          /* what the plugin wrote to *nChannels; 0 = NCCL's */
  uint64_t chunk_bytes;   /* offered through getChunkSize; 0 = NCCL's */
  uint32_t version;       /* the matching rule's schedule version (also when it was unavailable); 0: none */
  int flags;              /* CCLTWIN_RULE_APPLIED ... */
  uint32_t table_mask;    /* bit algo*3+proto: that entry was >= 0 as NCCL passed the table (algo < 7,
                             proto < 3): what this communicator can run for this call */
  int nccl_algo, nccl_proto; /* NCCL's own choice: the argmin of the table before the plugin touched it */
};

struct ccltwin_event {
  uint64_t comm;
  int coll;               /* ncclFunc_t, -1 if NCCL's name was not recognised */
  uint64_t nbytes;        /* as getCollInfo counts it: element size x count (x nranks for AllGather
                             and ReduceScatter) */
  uint64_t seq;           /* NCCL's seqNumber (per communicator and function) */
  int algo, proto, nchannels, nwarps; /* what NCCL really ran */
  uint64_t start_ns, stop_ns;
  int timer;              /* 0: GPU globaltimer, first channel start to last channel stop; 1: host
                             CLOCK_MONOTONIC from NCCL's coll start to stop event (enqueue, not run) */
  uint64_t occurrence;    /* 0-based count of coll events with this (comm, coll, nbytes) in this
                             context (equals the tuner's occurrence when NCCL did not aggregate) */
  int dtype;              /* ncclDataType_t (ncclInt8 0 ... ncclFloat8e5m2 11); -1: a name not known */
};

int ccltwin_abi(void);
int ccltwin_set_rule(uint64_t comm, int coll, uint64_t nbytes, uint64_t from_occurrence, int algo, int proto,
                     int nchannels, uint64_t chunk_bytes, uint32_t version);
int ccltwin_clear_rules(uint64_t comm);  /* number of rules removed */
int ccltwin_comms(struct ccltwin_comm* out, int max);  /* written; with out NULL: how many there are */
int ccltwin_drain_decisions(struct ccltwin_decision* out, int max);  /* oldest first, removed */
int ccltwin_drain_events(struct ccltwin_event* out, int max);        /* oldest first, removed */
uint64_t ccltwin_dropped(int which);   /* 0 decisions, 1 events: entries lost to a full ring or pool */
int ccltwin_set_comm_id(uint64_t local_ctx_id, uint64_t comm);  /* 0, or CCLTWIN_EINVAL: no such context */
uint64_t ccltwin_occurrences(uint64_t comm, int coll, uint64_t nbytes); /* calls so far, most of any live
                                                                           context of that comm */
int ccltwin_rule_capacity(void);       /* rules alive at once (CT_RULES) */
int ccltwin_key_capacity(void);        /* distinct (comm, coll, nbytes) that can hold rules */
size_t ccltwin_sizeof(int which);      /* 0 comm, 1 decision, 2 event: for the binding's layout check */

#endif
