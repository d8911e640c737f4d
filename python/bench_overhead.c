/* The C side of bench_overhead.py: time of one flash_attention call from C on a tiny
 * problem (what the Python binding's overhead is measured against).
 * Usage: bench_overhead [calls] [wall|thread] -> prints the best and the median
 * nanoseconds per call over 9 rounds, by the wall clock or the calling thread's CPU
 * time (the default: on a shared machine it leaves out the time the thread waits). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "flash/flash.h"

#include <string.h>

static clockid_t clock_id = CLOCK_THREAD_CPUTIME_ID;

static double now_ns(void) {
  struct timespec t;
  clock_gettime(clock_id, &t);
  return 1e9 * (double)t.tv_sec + (double)t.tv_nsec;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? atoi(argv[1]) : 20000, rounds = 9;
  if (argc > 2 && strcmp(argv[2], "wall") == 0) clock_id = CLOCK_MONOTONIC;
  /* The problem bench_overhead.py times: batch 1, one query, one key, one head, dim 8. */
  float q[8], k[8], v[8], o[8];
  for (int i = 0; i < 8; ++i) q[i] = k[i] = v[i] = 0.1f * (float)(i + 1);
  flash_attention_desc d;
  flash_desc_init(&d);
  d.seqlen_q = d.seqlen_kv = 1;
  d.head_dim = 8;
  double per_round[9];
  for (int r = 0; r < rounds; ++r) {
    const double t0 = now_ns();
    for (int i = 0; i < calls; ++i)
      if (flash_attention(&d, q, k, v, o) != FLASH_STATUS_OK) {
        fprintf(stderr, "%s\n", flash_last_error());
        return 1;
      }
    per_round[r] = (now_ns() - t0) / calls;
  }
  qsort(per_round, rounds, sizeof(double), cmp);
  printf("%.1f %.1f\n", per_round[0], per_round[rounds / 2]);
  return 0;
}
