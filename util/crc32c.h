/* crc32c.h — CRC-32C (Castagnoli), the checksum of TFRecord framing
 * (TensorBoard event files), and TensorFlow's "masked" form of it. */
#ifndef TFE_CRC32C_H
#define TFE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of n bytes, continuing from crc (0 to start): reflected
 * polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF (RFC 3720, B.4). */
uint32_t crc32c_extend(uint32_t crc, const void *data, size_t n);
static inline uint32_t crc32c(const void *data, size_t n) { return crc32c_extend(0, data, n); }

/* TFRecord stores a CRC rotated right by 15 bits plus a constant, since a
 * CRC of data that itself holds CRCs is weak (tensorflow/core/lib/hash/crc32c.h). */
static inline uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

#endif
