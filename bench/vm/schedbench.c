/* SPDX-License-Identifier: GPL-2.0 */
/*
 * zernel-schedbench: scheduler micro-benchmarks for the VM (bench/vm/run.sh).
 *
 *   pipe N     two processes pass one byte back and forth over two pipes N times (a round trip
 *              is two wakeups, like `perf bench sched pipe`); prints us per round trip and the
 *              p99 of single round trips
 *   msg G L    hackbench-like messaging: G groups of 10 senders and 10 receivers over socket
 *              pairs, each sender writes L 100-byte messages to every receiver; prints seconds
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int do_pipe(long n)
{
	int ping[2], pong[2];
	uint64_t t0, t, *rt;
	char c = 0;
	pid_t child;
	long i;

	if (n <= 0 || pipe(ping) || pipe(pong))
		return 2;
	rt = calloc((size_t)n, sizeof(*rt));
	if (!rt)
		return 1;
	child = fork();
	if (child == 0) {
		for (i = 0; i < n; i++)
			if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		t = now_ns();
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			return 1;
		rt[i] = now_ns() - t;
	}
	t = now_ns() - t0;
	waitpid(child, NULL, 0);
	qsort(rt, (size_t)n, sizeof(*rt), cmp_u64);
	printf("pipe %ld round trips: %.3f s, %.1f us/op, p99 %.1f us\n", n, (double)t / 1e9,
	       (double)t / 1e3 / (double)n, (double)rt[(size_t)((double)(n - 1) * 0.99)] / 1e3);
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
