/* crc32c.c — table-driven CRC-32C, one byte at a time. TensorBoard logs
 * checksum a few hundred bytes per record, so the byte-wise table (1 KiB,
 * built once) is fast enough and needs no SSE4.2 instruction. */
#include <pthread.h>
#include "util/crc32c.h"

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
}

uint32_t crc32c_extend(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&table_once, make_table);
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}
