/* doppler verify's per-op checks of the CUDA kernels (tools/verify/): a
 * tool target on both backends, outside the library. */
#ifndef DP_VERIFY_OPS_H
#define DP_VERIFY_OPS_H

#include <stdint.h>
#include <stdio.h>

enum { VERIFY_SPEED = 1, VERIFY_NO_CHECKS = 2 };

/* Checks every kernel against the CPU on random inputs drawn from seed and
 * prints one line per check to out; VERIFY_SPEED also measures copy, matvec
 * and attention bandwidth, VERIFY_NO_CHECKS leaves the checks out (with
 * VERIFY_SPEED: the measurements alone). Returns the number of failed
 * checks, or a negative dp_status (no GPU, no CUDA build, a bad setting)
 * with dp_last_error set. */
int verify_ops(FILE *out, uint64_t seed, int flags);

#endif
