/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Open/load/attach of the zernel sched_ext scheduler: what scx/compat.h's SCX_OPS_OPEN,
 * SCX_OPS_LOAD and SCX_OPS_ATTACH do, step by step, with errors returned instead of exit().
 * See skel_shim.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <scx/common.h>

/* intf.h first: the skeleton names its types (struct zernel_phase_policy in rodata). */
#include "intf.h"
#include "zernel.skel.h"

#include "skel_shim.h"

/* The loader's side of the contract's ABI checks (zernel.bpf.c checks the same against
 * vmlinux.h): the exit record's lengths and the exit code bits of scx/user_exit_info.h. */
_Static_assert((int)ZERNEL_UEI_REASON_LEN == (int)UEI_REASON_LEN, "UEI reason length");
_Static_assert((int)ZERNEL_UEI_MSG_LEN == (int)UEI_MSG_LEN, "UEI message length");
_Static_assert(sizeof(((struct zernel_scx_exit *)0)->reason) ==
		       sizeof(((struct user_exit_info *)0)->reason), "reason");
_Static_assert(sizeof(((struct zernel_scx_exit *)0)->msg) ==
		       sizeof(((struct user_exit_info *)0)->msg), "msg");
_Static_assert(ZERNEL_ECODE_RSN_HOTPLUG == SCX_ECODE_RSN_HOTPLUG, "exit code bit");
_Static_assert(ZERNEL_ECODE_ACT_RESTART == SCX_ECODE_ACT_RESTART, "exit code bit");
_Static_assert(ZERNEL_ECODE_USER_MASK == UEI_ECODE_USER_MASK, "exit code mask");
_Static_assert(ZERNEL_ECODE_RSN_MASK == UEI_ECODE_SYS_RSN_MASK, "exit code mask");
_Static_assert(ZERNEL_ECODE_ACT_MASK == UEI_ECODE_SYS_ACT_MASK, "exit code mask");

struct zernel_scx {
	struct zernel_bpf *skel;
	unsigned caps;
	int switch_rules; /* zernel_switch_rules is set */
	struct bpf_link *link;
	void (*log)(int level, const char *msg);
};

static int fail(char *err, size_t errlen, int ret, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int ret, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return ret < 0 ? ret : -EINVAL;
}

static void note(const struct zernel_scx *s, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void note(const struct zernel_scx *s, int level, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (s->log)
		s->log(level, buf);
	else
		fprintf(stderr, "%s\n", buf);
}

unsigned zernel_scx_caps(const struct zernel_scx *s)
{
	return s ? s->caps : 0;
}

int zernel_scx_switch_rules(const struct zernel_scx *s)
{
	return s ? s->switch_rules : 0;
}

/* The probes' map of this name in opts, or -1. */
static int shared_fd(const struct zernel_scx_open_opts *opts, const char *name)
{
	for (__u32 i = 0; i < opts->nr_shared; i++)
		if (opts->shared_names[i] && !strcmp(opts->shared_names[i], name))
			return opts->shared_fds[i];
	return -1;
}

/*
 * The maps of bpf/probes/rules.bpf.h: the probes' own where given; else the large ones are not
 * created (only the rules use them, and their code is dead then: zernel_switch_rules is 0), the
 * small ones are this object's own, unused. Returns 0 or a negative errno with err filled.
 */
static int share_probe_maps(struct zernel_scx *s, const struct zernel_scx_open_opts *opts,
			    char *err, size_t errlen)
{
	static const char *const large[] = {"zernel_probe_procs", "zernel_phase_events",
					    "zernel_phase_unsent"};
	struct bpf_map *map;
	int fd, ret;

	for (size_t i = 0; i < sizeof(large) / sizeof(large[0]); i++) {
		map = bpf_object__find_map_by_name(s->skel->obj, large[i]);
		if (map && shared_fd(opts, large[i]) < 0)
			(void)bpf_map__set_autocreate(map, false);
	}
	for (map = bpf_object__next_map(s->skel->obj, NULL); map;
	     map = bpf_object__next_map(s->skel->obj, map)) {
		fd = shared_fd(opts, bpf_map__name(map));
		if (fd < 0)
			continue;
		ret = bpf_map__reuse_fd(map, fd);
		if (ret)
			return fail(err, errlen, ret, "sharing the probes' map %s: %s",
				    bpf_map__name(map), strerror(-ret));
	}
	return 0;
}

/* /sys/kernel/sched_ext/hotplug_seq, or -1 (compat.h's scx_hotplug_seq() exits on errors). */
static long read_hotplug_seq(void)
{
	char buf[32];
	ssize_t len;
	int fd;

	fd = open("/sys/kernel/sched_ext/hotplug_seq", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return -1;
	buf[len] = 0;
	return strtol(buf, NULL, 10);
}

/*
 * An op that the running kernel's sched_ext_ops lacks is dropped with a warning (the skeleton is
 * built against 7.3's struct; every op we use exists since 6.12, so this is a safety net for
 * ops added later, as SCX_OPS_OPEN does for cgroup_set_bandwidth and friends).
 */
#define ZERNEL_DROP_MISSING_OP(s, ops, field)                                                  \
	do {                                                                                   \
		if ((ops)->field && !__COMPAT_struct_has_field("sched_ext_ops", #field)) {     \
			note(s, 1, "kernel lacks sched_ext_ops." #field "(): dropped");        \
			bpf_program__set_autoload((ops)->field, false);                        \
			(ops)->field = NULL;                                                   \
		}                                                                              \
	} while (0)

/* compat.h loads the BTF lazily and exits on failure: load it here first, and check that the
 * kernel's sched_ext is one we can run on. */
static int check_kernel_sched_ext(char *err, size_t errlen)
{
	if (!__COMPAT_vmlinux_btf) {
		__COMPAT_vmlinux_btf = btf__load_vmlinux_btf();
		if (!__COMPAT_vmlinux_btf)
			return fail(err, errlen, -errno,
				    "loading the kernel's BTF (/sys/kernel/btf/vmlinux): %s",
				    strerror(errno));
	}
	if (!__COMPAT_struct_has_field("sched_ext_ops", "dump"))
		return fail(err, errlen, -EOPNOTSUPP,
			    "the kernel's sched_ext is too old (sched_ext_ops has no dump(); "
			    "6.12 or later is needed)");
	return 0;
}

/* Drops the ops the running kernel lacks and records in s->caps which optional ones remain. */
static void drop_missing_ops_set_caps(struct zernel_scx *s,
				      struct zernel_bpf__zernel_ops__sched_ext_ops *ops)
{
	ZERNEL_DROP_MISSING_OP(s, ops, select_cpu);
	ZERNEL_DROP_MISSING_OP(s, ops, enqueue);
	ZERNEL_DROP_MISSING_OP(s, ops, dispatch);
	ZERNEL_DROP_MISSING_OP(s, ops, tick);
	ZERNEL_DROP_MISSING_OP(s, ops, runnable);
	ZERNEL_DROP_MISSING_OP(s, ops, running);
	ZERNEL_DROP_MISSING_OP(s, ops, stopping);
	ZERNEL_DROP_MISSING_OP(s, ops, quiescent);
	ZERNEL_DROP_MISSING_OP(s, ops, enable);
	ZERNEL_DROP_MISSING_OP(s, ops, disable);
	ZERNEL_DROP_MISSING_OP(s, ops, init_task);
	ZERNEL_DROP_MISSING_OP(s, ops, dump_task);
	ZERNEL_DROP_MISSING_OP(s, ops, init);
	ZERNEL_DROP_MISSING_OP(s, ops, exit);
	/* 6.12 has the cgroup ops and cpu_release; cgroup_set_bandwidth came in 6.17. */
	ZERNEL_DROP_MISSING_OP(s, ops, cgroup_init);
	ZERNEL_DROP_MISSING_OP(s, ops, cgroup_exit);
	ZERNEL_DROP_MISSING_OP(s, ops, cgroup_move);
	ZERNEL_DROP_MISSING_OP(s, ops, cgroup_set_weight);
	ZERNEL_DROP_MISSING_OP(s, ops, cgroup_set_bandwidth);
	ZERNEL_DROP_MISSING_OP(s, ops, cpu_release);
	if (ops->cgroup_init && ops->cgroup_move && ops->cgroup_set_weight)
		s->caps |= ZERNEL_SCX_CAP_CGROUP;
	if (ops->cgroup_set_bandwidth)
		s->caps |= ZERNEL_SCX_CAP_BANDWIDTH;
	if (ops->cpu_release)
		s->caps |= ZERNEL_SCX_CAP_CPU_RELEASE;
}

/* CPUs, NUMA nodes, LLCs and each CPU's node and LLC into rodata, clamped to the contract's
 * limits. */
static void set_topology_rodata(struct zernel_scx *s, const struct zernel_scx_open_opts *opts)
{
	__u32 nr_cpus, nr_nodes, nr_llcs, cpu;

	nr_cpus = opts->nr_cpus ? opts->nr_cpus : 1;
	if (nr_cpus > ZERNEL_MAX_CPUS) {
		note(s, 1, "%u CPUs: preferences and preemption cover CPUs 0..%d only", nr_cpus,
		     ZERNEL_MAX_CPUS - 1);
		nr_cpus = ZERNEL_MAX_CPUS;
	}
	nr_nodes = opts->nr_nodes ? opts->nr_nodes : 1;
	if (nr_nodes > ZERNEL_MAX_NODES)
		nr_nodes = ZERNEL_MAX_NODES;
	nr_llcs = opts->nr_llcs && opts->cpu_llc ? opts->nr_llcs : 1;
	if (nr_llcs > ZERNEL_MAX_LLCS)
		nr_llcs = ZERNEL_MAX_LLCS;
	s->skel->rodata->nr_cpus = nr_cpus;
	s->skel->rodata->nr_nodes = nr_nodes;
	s->skel->rodata->nr_llcs = nr_llcs;
	for (cpu = 0; cpu < nr_cpus; cpu++) {
		__u8 node = opts->cpu_node ? opts->cpu_node[cpu] : 0;
		__u8 llc = opts->cpu_llc ? opts->cpu_llc[cpu] : 0;

		s->skel->rodata->cpu_node[cpu] = node < nr_nodes ? node : 0;
		s->skel->rodata->cpu_llc[cpu] = llc < nr_llcs ? llc : 0;
	}
}

/* The load-time knobs of opts (switch_partial, starvation, map size, tick, the shared phase
 * map) into the opened skeleton. Returns 0 or a negative errno with err filled. */
static int apply_scx_open_opts(struct zernel_scx *s, const struct zernel_scx_open_opts *opts,
			       char *err, size_t errlen)
{
	int ret;

	if (opts->switch_partial) {
		__u64 flag = SCX_OPS_SWITCH_PARTIAL;

		if (!flag)
			return fail(err, errlen, -EOPNOTSUPP,
				    "the kernel has no SCX_OPS_SWITCH_PARTIAL");
		s->skel->struct_ops.zernel_ops->flags |= flag;
		s->skel->rodata->switch_partial = 1;
	}
	set_topology_rodata(s, opts);
	if (opts->starve_ns)
		s->skel->rodata->starve_ns = opts->starve_ns;
	/* Sized from max_tracked_tasks; entries are allocated as they are written (no prealloc). */
	if (opts->max_tasks) {
		ret = bpf_map__set_max_entries(s->skel->maps.zernel_decisions, opts->max_tasks);
		if (ret)
			return fail(err, errlen, ret, "sizing the decision map to %u entries: %s",
				    opts->max_tasks, strerror(-ret));
	}
	if (opts->tick_ns)
		s->skel->rodata->tick_ns = opts->tick_ns;
	s->skel->rodata->inject_error_after_ns = opts->inject_error_after_ns;
	/* Phases of threads: the probes' own map, so both objects see one phase per thread. */
	if (opts->phase_map_fd >= 0 && opts->phase_policy) {
		ret = bpf_map__reuse_fd(s->skel->maps.zernel_phase_threads, opts->phase_map_fd);
		if (ret)
			return fail(err, errlen, ret, "sharing the probes' phase map: %s",
				    strerror(-ret));
		for (unsigned int i = 0; i <= ZERNEL_PHASE_NR; i++)
			s->skel->rodata->zernel_phase_policy[i] = opts->phase_policy[i];
		s->skel->rodata->zernel_follow_phases = 1;
		s->skel->rodata->zernel_sync_kicks = opts->phase_sync_kicks ? 1 : 0;
		/* The rules need the probes' state: their follow bitmap, knobs, ring and maps. */
		if (opts->switch_rules && !opts->switch_partial && opts->nr_shared) {
			s->skel->rodata->zernel_switch_rules = 1;
			s->switch_rules = 1;
		}
	}
	return share_probe_maps(s, opts, err, errlen);
}

int zernel_scx_open(const struct zernel_scx_open_opts *opts, struct zernel_scx **out, char *err,
		    size_t errlen)
{
	struct zernel_bpf__zernel_ops__sched_ext_ops *ops;
	struct zernel_scx *s;
	long seq;
	int ret;

	*out = NULL;
	ret = check_kernel_sched_ext(err, errlen);
	if (ret)
		return ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		return fail(err, errlen, -ENOMEM, "out of memory");
	s->log = opts->log;
	s->skel = zernel_bpf__open();
	if (!s->skel) {
		ret = -errno;
		free(s);
		return fail(err, errlen, ret, "opening the BPF skeleton: %s", strerror(-ret));
	}
	ops = s->skel->struct_ops.zernel_ops;

	seq = read_hotplug_seq();
	if (seq >= 0)
		ops->hotplug_seq = (__u64)seq;
	/* SCX_* enum values of the running kernel into rodata (0 for those it lacks). */
	SCX_ENUM_INIT(s->skel);
	drop_missing_ops_set_caps(s, ops);

	ret = apply_scx_open_opts(s, opts, err, errlen);
	if (ret) {
		zernel_scx_destroy(s);
		return ret;
	}
	*out = s;
	return 0;
}

int zernel_scx_load(struct zernel_scx *s, char *err, size_t errlen)
{
	struct bpf_program *prog;
	int ret;

	UEI_SET_SIZE(s->skel, zernel_ops, uei);
	ret = zernel_bpf__load(s->skel);
	if (ret)
		return fail(err, errlen, ret, "loading the BPF scheduler (see the verifier log): %s",
			    strerror(-ret));
	/* As SCX_OPS_LOAD: tie the non-struct_ops programs to the scheduler (libbpf >= 1.7). */
#if LIBBPF_MAJOR_VERSION > 1 || (LIBBPF_MAJOR_VERSION == 1 && LIBBPF_MINOR_VERSION >= 7)
	bpf_object__for_each_program(prog, s->skel->obj) {
		if (bpf_program__type(prog) == BPF_PROG_TYPE_STRUCT_OPS)
			continue;
		if (!bpf_program__autoload(prog))
			continue;
		/* Kernels before the association command say EINVAL: nothing to tie there. */
		ret = bpf_program__assoc_struct_ops(prog, s->skel->maps.zernel_ops, NULL);
		if (ret)
			note(s, ret == -EINVAL ? 0 : 1, "associating %s with zernel_ops: %s%s",
			     bpf_program__name(prog), strerror(-ret),
			     ret == -EINVAL ? " (this kernel has no association; harmless)" : "");
	}
#else
	(void)prog;
#endif
	return 0;
}

int zernel_scx_attach(struct zernel_scx *s, char *err, size_t errlen)
{
	int ret;

	if (s->link)
		return 0;
	/* The struct_ops map is attached below, once (newer libbpf would also auto-attach it). */
	__SCX_OPS_DISABLE_AUTOATTACH(s->skel, zernel_ops);
	ret = zernel_bpf__attach(s->skel);
	if (ret)
		return fail(err, errlen, ret, "attaching the BPF programs: %s", strerror(-ret));
	s->link = bpf_map__attach_struct_ops(s->skel->maps.zernel_ops);
	if (!s->link) {
		ret = -errno;
		return fail(err, errlen, ret, "attaching the sched_ext scheduler: %s%s",
			    strerror(-ret),
			    ret == -EBUSY || ret == -EEXIST ? " (another one is loaded)" : "");
	}
	return 0;
}

void zernel_scx_detach(struct zernel_scx *s)
{
	if (!s || !s->link)
		return;
	bpf_link__destroy(s->link);
	s->link = NULL;
}

void zernel_scx_destroy(struct zernel_scx *s)
{
	if (!s)
		return;
	zernel_scx_detach(s);
	zernel_bpf__destroy(s->skel);
	free(s);
}

int zernel_scx_map_fd(const struct zernel_scx *s, enum zernel_scx_map m)
{
	switch (m) {
	case ZERNEL_SCX_MAP_DECISIONS:
		return bpf_map__fd(s->skel->maps.zernel_decisions);
	case ZERNEL_SCX_MAP_TENANTS:
		return bpf_map__fd(s->skel->maps.zernel_tenants);
	case ZERNEL_SCX_MAP_TENANT_LOAD:
		return bpf_map__fd(s->skel->maps.zernel_tenant_load);
	case ZERNEL_SCX_MAP_STATS:
		return bpf_map__fd(s->skel->maps.zernel_stats);
	case ZERNEL_SCX_MAP_TASK_CTX:
		return bpf_map__fd(s->skel->maps.zernel_task_ctx);
	}
	return -EINVAL;
}

void zernel_scx_decisions_changed(struct zernel_scx *s, const __u32 *tgids, size_t n)
{
	size_t i;

	if (!s || !s->skel || !s->skel->bss || !tgids)
		return;
	/* After the map update or delete (a system call: ordered before these stores). */
	for (i = 0; i < n; i++)
		__atomic_fetch_add(
			&s->skel->bss
				 ->zernel_decision_slot_gen[tgids[i] & (ZERNEL_DECISION_SLOTS - 1)],
			1, __ATOMIC_RELEASE);
}

int zernel_scx_exited(const struct zernel_scx *s, struct zernel_scx_exit *out)
{
	struct user_exit_info *uei;
	int kind;

	if (!s || !s->skel || !s->skel->data)
		return 0;
	uei = &s->skel->data->uei;
	/* As UEI_EXITED: __sync for the memory barrier. */
	kind = __sync_val_compare_and_swap(&uei->kind, -1, -1);
	if (!kind)
		return 0;
	if (out) {
		memset(out, 0, sizeof(*out));
		out->kind = kind;
		out->exit_cpu = uei->exit_cpu;
		out->exit_code = uei->exit_code;
		snprintf(out->reason, sizeof(out->reason), "%s", uei->reason);
		snprintf(out->msg, sizeof(out->msg), "%s", uei->msg);
	}
	return 1;
}

const char *zernel_scx_exit_dump(const struct zernel_scx *s)
{
	if (!s || !s->skel || !s->skel->data_uei_dump)
		return "";
	return s->skel->data_uei_dump->uei_dump;
}
