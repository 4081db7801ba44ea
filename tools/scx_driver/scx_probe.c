/* SPDX-License-Identifier: GPL-2.0 */
/*
 * zernel-scx-probe: small workloads for the sched_ext VM tests (tests/vm/scx_*.sh).
 *
 *   spin SECONDS                 burn one CPU for SECONDS of wall time
 *   wakelat [-w] PERIOD_US COUNT wake every PERIOD_US (clock_nanosleep, absolute deadlines) COUNT
 *                                times and print the wakeup latency (actual - intended wakeup):
 *                                "wakelat n=.. p50_us=.. p90_us=.. p99_us=.. max_us=.. mean_us=..".
 *                                -w: first wait for SIGUSR1 (so a test can give the process a
 *                                decision before it starts measuring)
 *   duty RUN_MS SLEEP_MS SECONDS [fifo]
 *                                for SECONDS, burn RUN_MS then sleep SLEEP_MS, again and again
 *                                (fifo: as a SCHED_FIFO task of priority 10, a higher class)
 *   churn SECONDS [PROCS] [THREADS]
 *                                for SECONDS, keep PROCS short-lived child processes in flight,
 *                                each starting THREADS short-lived threads that do a little work;
 *                                prints "churn procs=.. threads=.. seconds=.."
 *   nice N COMMAND [ARG...]      run COMMAND at nice N (the guest has no nice(1))
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile uint64_t sink;

static void burn(uint64_t iters)
{
	uint64_t x = sink;

	for (uint64_t i = 0; i < iters; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	sink = x;
}

static int cmd_spin(double seconds)
{
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);

	while (now_ns() < end)
		burn(100000);
	return 0;
}

static int cmd_duty(long run_ms, long sleep_ms, double seconds, int fifo)
{
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);

	if (run_ms < 0 || sleep_ms < 0)
		return 2;
	if (fifo) {
		struct sched_param sp = { .sched_priority = 10 };

		if (sched_setscheduler(0, SCHED_FIFO, &sp)) {
			perror("sched_setscheduler(SCHED_FIFO)");
			return 1;
		}
	}
	while (now_ns() < end) {
		uint64_t stop = now_ns() + (uint64_t)run_ms * 1000000ull;

		while (now_ns() < stop)
			burn(10000);
		if (sleep_ms)
			usleep((useconds_t)(sleep_ms * 1000));
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void on_usr1(int sig)
{
	(void)sig;
}

static int cmd_wakelat(int wait_signal, long period_us, long count)
{
	uint64_t *lat, sum = 0;
	struct timespec next;
	long i;

	if (period_us <= 0 || count <= 0)
		return 2;
	lat = calloc((size_t)count, sizeof(*lat));
	if (!lat)
		return 1;
	if (wait_signal) {
		sigset_t set;
		int sig;

		signal(SIGUSR1, on_usr1);
		sigemptyset(&set);
		sigaddset(&set, SIGUSR1);
		sigprocmask(SIG_BLOCK, &set, NULL);
		printf("ready\n");
		fflush(stdout);
		sigwait(&set, &sig);
	}
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (i = 0; i < count; i++) {
		uint64_t target, woke;

		next.tv_nsec += period_us * 1000;
		while (next.tv_nsec >= 1000000000) {
			next.tv_nsec -= 1000000000;
			next.tv_sec++;
		}
		target = (uint64_t)next.tv_sec * 1000000000ull + (uint64_t)next.tv_nsec;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
		woke = now_ns();
		lat[i] = woke > target ? woke - target : 0;
		sum += lat[i];
		/* a little work per wakeup, as a real latency-sensitive thread does */
		burn(2000);
	}
	qsort(lat, (size_t)count, sizeof(*lat), cmp_u64);
#define PCT(p) (lat[(size_t)((double)(count - 1) * (p))] / 1000)
	printf("wakelat n=%ld period_us=%ld p50_us=%llu p90_us=%llu p99_us=%llu max_us=%llu "
	       "mean_us=%llu\n",
	       count, period_us, (unsigned long long)PCT(0.50), (unsigned long long)PCT(0.90),
	       (unsigned long long)PCT(0.99), (unsigned long long)(lat[count - 1] / 1000),
	       (unsigned long long)(sum / (uint64_t)count / 1000));
#undef PCT
	free(lat);
	return 0;
}

static void *churn_thread(void *arg)
{
	(void)arg;
	burn(20000);
	usleep(100);
	return NULL;
}

/* A child: THREADS threads that each work a little and exit. */
static void churn_child(int threads)
{
	pthread_t t[64];
	int i, n = threads > 64 ? 64 : threads;

	for (i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, churn_thread, NULL))
			_exit(3);
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	_exit(0);
}

static int cmd_churn(double seconds, int procs, int threads)
{
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
	unsigned long nprocs = 0, failed = 0;
	int running = 0, status;
	pid_t pid;

	while (now_ns() < end) {
		while (running < procs) {
			pid = fork();
			if (pid == 0)
				churn_child(threads);
			if (pid < 0) {
				failed++;
				break;
			}
			running++;
			nprocs++;
		}
		pid = wait(&status);
		if (pid > 0) {
			running--;
			if (!WIFEXITED(status) || WEXITSTATUS(status))
				failed++;
		}
	}
	while (running > 0 && wait(&status) > 0) {
		running--;
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			failed++;
	}
	printf("churn procs=%lu threads=%lu seconds=%.0f failed=%lu\n", nprocs,
	       nprocs * (unsigned long)threads, seconds, failed);
	return failed ? 1 : 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: zernel-scx-probe spin SECONDS | wakelat [-w] PERIOD_US COUNT | "
			"duty RUN_MS SLEEP_MS SECONDS [fifo] | churn SECONDS [PROCS] [THREADS] | "
			"nice N COMMAND [ARG...]\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "spin"))
		return cmd_spin(atof(argv[2]));
	if (argc >= 4 && !strcmp(argv[1], "wakelat")) {
		int w = !strcmp(argv[2], "-w");

		if (argc < 4 + w)
			return usage();
		return cmd_wakelat(w, atol(argv[2 + w]), atol(argv[3 + w]));
	}
	if (argc >= 5 && !strcmp(argv[1], "duty"))
		return cmd_duty(atol(argv[2]), atol(argv[3]), atof(argv[4]),
				argc > 5 && !strcmp(argv[5], "fifo"));
	if (argc >= 3 && !strcmp(argv[1], "churn"))
		return cmd_churn(atof(argv[2]), argc > 3 ? atoi(argv[3]) : 8,
				 argc > 4 ? atoi(argv[4]) : 4);
	if (argc >= 4 && !strcmp(argv[1], "nice")) {
		char *end;
		long n = strtol(argv[2], &end, 10);

		if (*end || n < -20 || n > 19)
			return usage();
		if (setpriority(PRIO_PROCESS, 0, (int)n)) {
			perror("zernel-scx-probe: setpriority");
			return 1;
		}
		execvp(argv[3], argv + 3);
		perror("zernel-scx-probe: exec");
		return 127;
	}
	return usage();
}
