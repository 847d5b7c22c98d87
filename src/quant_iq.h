/* The IQ block dequantizers (quant_iq.c), one block each: IQ4_NL 32
 * values, the others 256. quant.c dispatches to them. */
#ifndef DP_QUANT_IQ_H
#define DP_QUANT_IQ_H

#include <stdint.h>

/* IQ4_NL / IQ4_XS codebook: value of each 4-bit code */
extern const int8_t dp_iq4nl_values[16];

void dp_deq_iq4_nl(const uint8_t *b, float *y);
void dp_deq_iq4_xs(const uint8_t *b, float *y);
void dp_deq_iq2_xxs(const uint8_t *b, float *y);
void dp_deq_iq2_xs(const uint8_t *b, float *y);
void dp_deq_iq2_s(const uint8_t *b, float *y);
void dp_deq_iq3_xxs(const uint8_t *b, float *y);
void dp_deq_iq3_s(const uint8_t *b, float *y);
/* Round-to-nearest quantizers of one block (doppler's own scheme) */
void dp_q_iq4_nl(const float *x, uint8_t *b);
void dp_q_iq4_xs(const float *x, uint8_t *b);

#endif
