/* SPDX-License-Identifier: GPL-2.0 */
/*
 * zernel-schedbench: scheduler micro-benchmarks for the VM (bench/vm/run.sh).
 *
 *   pipe N     two processes pass one byte back and forth over two pipes N times (a round trip
 *              is two wakeups, like `perf bench sched pipe`); prints us per round trip and the
 *              p99 of single round trips, then where the pair ran: the share of round trips in
 *              which both ran on one CPU (the child passes its CPU in the byte), and both
 *              processes' migrations and involuntary switches during the round trips
 *              (/proc/self/sched), which tell one scheduler's placement from another's
 *   msg G L    hackbench-like messaging: G groups of 10 senders and 10 receivers over socket
 *              pairs, each sender writes L 100-byte messages to every receiver; prints seconds
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Counters of the calling thread from /proc/thread-self/sched; 0 where unreadable. */
struct sched_counts {
	long migrations, involuntary;
};

static struct sched_counts sched_counts(void)
{
	struct sched_counts sc = {0, 0};
	char line[256];
	FILE *f = fopen("/proc/thread-self/sched", "r");
	long v;

	if (!f)
		return sc;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (!colon || sscanf(colon + 1, "%ld", &v) != 1)
			continue;
		if (!strncmp(line, "se.nr_migrations ", 17))
			sc.migrations = v;
		else if (!strncmp(line, "nr_involuntary_switches ", 24))
			sc.involuntary = v;
	}
	fclose(f);
	return sc;
}

static int do_pipe(long n)
{
	struct sched_counts p0, p1, c0, c1, cd;
	int ping[2], pong[2];
	uint64_t t0, t, *rt;
	long i, same = 0;
	char c = 0;
	pid_t child;

	if (n <= 0 || pipe(ping) || pipe(pong))
		return 2;
	rt = calloc((size_t)n, sizeof(*rt));
	if (!rt)
		return 1;
	child = fork();
	if (child == 0) {
		c0 = sched_counts();
		for (i = 0; i < n; i++) {
			if (read(ping[0], &c, 1) != 1)
				_exit(1);
			c = (char)sched_getcpu();
			if (write(pong[1], &c, 1) != 1)
				_exit(1);
		}
		/* After the timed loop: the child's counters travel over the pipe. */
		c1 = sched_counts();
		cd.migrations = c1.migrations - c0.migrations;
		cd.involuntary = c1.involuntary - c0.involuntary;
		_exit(write(pong[1], &cd, sizeof(cd)) == (ssize_t)sizeof(cd) ? 0 : 1);
	}
	p0 = sched_counts();
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		t = now_ns();
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			return 1;
		rt[i] = now_ns() - t;
		same += c == (char)sched_getcpu();
	}
	t = now_ns() - t0;
	p1 = sched_counts();
	if (read(pong[0], &cd, sizeof(cd)) != (ssize_t)sizeof(cd))
		return 1;
	waitpid(child, NULL, 0);
	qsort(rt, (size_t)n, sizeof(*rt), cmp_u64);
	printf("pipe %ld round trips: %.3f s, %.1f us/op, p99 %.1f us, same-cpu %.1f %%, "
	       "migrations %ld+%ld, involuntary %ld+%ld\n",
	       n, (double)t / 1e9, (double)t / 1e3 / (double)n,
	       (double)rt[(size_t)((double)(n - 1) * 0.99)] / 1e3, 100.0 * (double)same / (double)n,
	       p1.migrations - p0.migrations, cd.migrations, p1.involuntary - p0.involuntary,
	       cd.involuntary);
	free(rt);
	return 0;
}

enum { NFD = 10, MSG = 100 };

static int do_msg(int groups, int loops)
{
	int nproc = 0, bad = 0, st, g, r, s, l;
	uint64_t t0 = now_ns();

	for (g = 0; g < groups; g++) {
		int fds[NFD][2];

		for (r = 0; r < NFD; r++)
			if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds[r]))
				return 1;
		for (r = 0; r < NFD; r++, nproc++) {
			if (fork() == 0) {
				long want = (long)NFD * loops * MSG, got = 0;
				char buf[MSG];

				while (got < want) {
					ssize_t k = read(fds[r][1], buf, MSG);

					if (k <= 0)
						_exit(1);
					got += k;
				}
				_exit(0);
			}
		}
		for (s = 0; s < NFD; s++, nproc++) {
			if (fork() == 0) {
				char buf[MSG];

				memset(buf, 's', MSG);
				for (l = 0; l < loops; l++)
					for (r = 0; r < NFD; r++)
						if (write(fds[r][0], buf, MSG) != MSG)
							_exit(1);
				_exit(0);
			}
		}
		for (r = 0; r < NFD; r++) {
			close(fds[r][0]);
			close(fds[r][1]);
		}
	}
	while (nproc-- > 0)
		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			bad++;
	printf("msg %d groups x %d loops (%d tasks): %.3f s%s\n", groups, loops, groups * NFD * 2,
	       (double)(now_ns() - t0) / 1e9, bad ? " ERRORS" : "");
	return bad != 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "pipe"))
		return do_pipe(atol(argv[2]));
	if (argc >= 4 && !strcmp(argv[1], "msg"))
		return do_msg(atoi(argv[2]), atoi(argv[3]));
	fprintf(stderr, "usage: zernel-schedbench pipe N | msg GROUPS LOOPS\n");
	return 2;
}
