/* util/half.h — IEEE float16 and bfloat16 to and from float, by hand: C's
 * _Float16 is not in every compiler tfe builds with (clang 14, the fuzz
 * build's, has none on x86). Round to nearest even on the way down. */
#ifndef TFE_UTIL_HALF_H
#define TFE_UTIL_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float half_to_float(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, f = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)f, -24);
    else if (e == 31) v = f ? NAN : INFINITY;
    else v = ldexpf((float)(f + 1024), e - 25);
    return s ? -v : v;
}

static inline uint16_t float_to_half(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffff;
    if (a > 0x7f800000) return (uint16_t)(sign | 0x7e00);            /* NaN */
    if (a >= 0x477ff000) return (uint16_t)(sign | 0x7c00);           /* overflow: inf */
    if (a < 0x38800000) return (uint16_t)(sign | (uint32_t)nearbyintf(fabsf(x) * 16777216.0f)); /* subnormal */
    uint32_t r = a + 0xfff + ((a >> 13) & 1) - 0x38000000;
    return (uint16_t)(sign | (r >> 13));
}

static inline float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
