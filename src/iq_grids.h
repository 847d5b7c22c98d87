/* Codebooks of the IQ2 / IQ3 quant types (iq_grids.c). */
#ifndef DP_IQ_GRIDS_H
#define DP_IQ_GRIDS_H

#include <stdint.h>

extern const uint64_t dp_iq2xxs_grid[256];
extern const uint64_t dp_iq2xs_grid[512];
extern const uint64_t dp_iq2s_grid[1024];
extern const uint32_t dp_iq3xxs_grid[256];
extern const uint32_t dp_iq3s_grid[512];

#endif
