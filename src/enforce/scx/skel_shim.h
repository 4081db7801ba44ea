#ifndef ZERNEL_ENFORCE_SCX_SKEL_SHIM_H
#define ZERNEL_ENFORCE_SCX_SKEL_SHIM_H
/*
 * C interface to the zernel BPF skeleton (build/bpf/zernel.skel.h), for scx_backend.cpp.
 *
 * Why C: the scx compat layer (scx/compat.h: SCX_OPS_OPEN/LOAD/ATTACH, SCX_ENUM_INIT, UEI_*) is
 * GNU C macros that do not compile as C++ under the project's warnings, and they exit() on any
 * failure. This file does the same steps (hotplug_seq, enum values from the running kernel's
 * BTF, dropping ops the kernel lacks with a warning, UEI dump sizing, disabling the map's
 * auto-attach, attaching the struct_ops link) but returns errors. The C++ side never includes
 * the skeleton.
 *
 * Every function that can fail returns 0 or a negative errno and writes a message to err.
 */
#include <linux/types.h>
#include <stddef.h>

#include "intf.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zernel_scx;

struct zernel_scx_open_opts {
	__u32 nr_cpus;		/* possible CPU ids; at most ZERNEL_MAX_CPUS are handled */
	__u32 nr_nodes;		/* NUMA node ids; at most ZERNEL_MAX_NODES */
	const __u8 *cpu_node;	/* nr_cpus entries: the node of each CPU (NULL: all node 0) */
	__u32 nr_llcs;		/* queues, one per LLC; at most ZERNEL_MAX_LLCS (0: one) */
	const __u8 *cpu_llc;	/* nr_cpus entries: the LLC of each CPU (NULL: all LLC 0) */
	__u64 starve_ns;	/* starvation bound, ns; 0 = ZERNEL_STARVE_DFL_US */
	__u32 switch_partial;	/* 1: SCX_OPS_SWITCH_PARTIAL (only SCHED_EXT tasks move) */
	__u32 max_tasks;	/* entries of zernel_decisions (max_tracked_tasks); 0 = ZERNEL_MAX_TASKS */
	__u64 tick_ns;		/* ns between scheduler ticks (1 s / CONFIG_HZ); 0 = assume HZ=100 */
	__u64 inject_error_after_ns; /* tests only: scx_bpf_error() this long after init; 0 = never */
	/* Phases of threads (zernel.bpf.c): the probes' zernel_phase_threads map and the policy of
	 * each phase (ZERNEL_PHASE_NR + 1 entries); -1 / NULL: threads follow their decision. */
	int phase_map_fd;
	const struct zernel_phase_policy *phase_policy;
	/* 1: the probes kick for a GPU sync's phase changes (their SYNC KICKS): no polling. */
	__u32 phase_sync_kicks;
	/* The probes' maps, by name (nr_shared of each), for the maps of bpf/probes/rules.bpf.h
	 * that this object has too: each of this object's maps of such a name takes the probes'
	 * map (one state for both objects). Those not given are left out where they are large. */
	const char *const *shared_names;
	const int *shared_fds;
	__u32 nr_shared;
	/* 1: carry the probes' context-switch rules in ops.stopping / ops.running (needs the shared
	 * maps and phases, and a full switch); zernel_scx_switch_rules says whether it does. */
	__u32 switch_rules;
	/* Receives warnings (level 1) and notes (level 0) about the kernel's features. */
	void (*log)(int level, const char *msg);
};

enum zernel_scx_map {
	ZERNEL_SCX_MAP_DECISIONS,
	ZERNEL_SCX_MAP_TENANTS,
	ZERNEL_SCX_MAP_TENANT_LOAD,
	ZERNEL_SCX_MAP_STATS,
	ZERNEL_SCX_MAP_TASK_CTX,
};

/* The scheduler's exit, from the UEI record written in ops.exit. */
struct zernel_scx_exit {
	__s32 kind;		/* enum zernel_exit_kind; 0 = still running */
	__s32 exit_cpu;		/* CPU that triggered the exit; -1 = unknown */
	__s64 exit_code;	/* ZERNEL_ECODE_* bits and the user code */
	char reason[ZERNEL_UEI_REASON_LEN];
	char msg[ZERNEL_UEI_MSG_LEN];
};

/* What the running kernel lets the scheduler see (zernel_scx_caps, after open). */
enum zernel_scx_cap {
	ZERNEL_SCX_CAP_CGROUP = 1u << 0,	/* ops.cgroup_init/move/set_weight: cpu.weight */
	ZERNEL_SCX_CAP_BANDWIDTH = 1u << 1,	/* ops.cgroup_set_bandwidth: cpu.max */
	ZERNEL_SCX_CAP_CPU_RELEASE = 1u << 2,	/* ops.cpu_release: CPUs taken by higher classes */
};

/* Opens the skeleton and prepares it for this kernel (nothing is loaded yet). */
int zernel_scx_open(const struct zernel_scx_open_opts *opts, struct zernel_scx **out, char *err,
		    size_t errlen);
/* Loads (verifies) the programs and creates the maps. */
int zernel_scx_load(struct zernel_scx *s, char *err, size_t errlen);
/* Attaches: from here on the kernel schedules with it, until the link is closed. */
int zernel_scx_attach(struct zernel_scx *s, char *err, size_t errlen);
/* Closes the struct_ops link (the kernel unloads the scheduler and records UNREG). Idempotent. */
void zernel_scx_detach(struct zernel_scx *s);
/* Detaches and frees everything. NULL is fine. */
void zernel_scx_destroy(struct zernel_scx *s);

int zernel_scx_map_fd(const struct zernel_scx *s, enum zernel_scx_map m);
/* Tells the BPF side that the decisions of these n processes changed (intf.h,
 * zernel_decision_slot_gen): call after every update or delete of their entries, also after a
 * failed batch (part may be written). */
void zernel_scx_decisions_changed(struct zernel_scx *s, const __u32 *tgids, size_t n);
/* 1 when the scheduler has exited (out filled), 0 while it runs (or before attach). */
int zernel_scx_exited(const struct zernel_scx *s, struct zernel_scx_exit *out);
/* The debug dump the kernel wrote at an error exit ("" if none). */
const char *zernel_scx_exit_dump(const struct zernel_scx *s);
/* enum zernel_scx_cap bits: the ops this kernel's sched_ext_ops has (kept after open). Whether
 * the kernel calls the cgroup ops also depends on CONFIG_EXT_GROUP_SCHED. */
unsigned zernel_scx_caps(const struct zernel_scx *s);
/* 1 when the loaded scheduler carries the probes' context-switch rules (opts.switch_rules). */
int zernel_scx_switch_rules(const struct zernel_scx *s);

#ifdef __cplusplus
}
#endif

#endif /* ZERNEL_ENFORCE_SCX_SKEL_SHIM_H */
