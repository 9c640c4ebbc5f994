/* test_pb.c — CRC-32C against the vectors of RFC 3720 (B.4) and the
 * common check value, TFRecord's masking, and the protobuf encoder's
 * varints and fixed fields against bytes worked out by hand. */
#include <string.h>

#include "tests/unit/check.h"
#include "util/crc32c.h"
#include "util/pb.h"

static int same(const Buf *b, const char *want, size_t n)
{
    return b->len == n && !memcmp(b->s, want, n);
}

int main(void)
{
    unsigned char d[32];
    memset(d, 0, 32);
    CHECK(crc32c(d, 32) == 0x8A9136AAu, "32 zeros: %08x", crc32c(d, 32));
    memset(d, 0xff, 32);
    CHECK(crc32c(d, 32) == 0x62A8AB43u, "32 0xff: %08x", crc32c(d, 32));
    for (int i = 0; i < 32; i++) d[i] = (unsigned char)i;
    CHECK(crc32c(d, 32) == 0x46DD794Eu, "0..31: %08x", crc32c(d, 32));
    for (int i = 0; i < 32; i++) d[i] = (unsigned char)(31 - i);
    CHECK(crc32c(d, 32) == 0x113FDB5Cu, "31..0: %08x", crc32c(d, 32));
    CHECK(crc32c("123456789", 9) == 0xE3069283u, "check value: %08x", crc32c("123456789", 9));
    CHECK(crc32c("", 0) == 0, "empty: %08x", crc32c("", 0));
    /* in pieces = at once */
    CHECK(crc32c_extend(crc32c("1234", 4), "56789", 5) == 0xE3069283u, "extend");
    /* TFRecord's mask: rotate right 15, add 0xa282ead8 */
    CHECK(crc32c_mask(0) == 0xa282ead8u, "mask 0: %08x", crc32c_mask(0));
    CHECK(crc32c_mask(0x8000u) == 0xa282ead9u, "mask 0x8000: %08x", crc32c_mask(0x8000u));

    Buf b = {0};
    pb_varint(&b, 0);
    CHECK(same(&b, "\x00", 1), "varint 0");
    b.len = 0;
    pb_varint(&b, 300);
    CHECK(same(&b, "\xac\x02", 2), "varint 300");
    b.len = 0;
    pb_varint(&b, UINT64_MAX); /* an int64 of -1: ten bytes */
    CHECK(same(&b, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10), "varint 2^64-1");
    b.len = 0;
    pb_field_varint(&b, 2, 150);
    CHECK(same(&b, "\x10\x96\x01", 3), "field 2 = 150");
    b.len = 0;
    pb_field_string(&b, 3, "testing");
    CHECK(same(&b, "\x1a\x07testing", 9), "field 3 = \"testing\"");
    b.len = 0;
    pb_field_double(&b, 1, 1.0);
    CHECK(same(&b, "\x09\x00\x00\x00\x00\x00\x00\xf0\x3f", 9), "field 1 = 1.0 (double)");
    b.len = 0;
    pb_field_float(&b, 2, 1.0f);
    CHECK(same(&b, "\x15\x00\x00\x80\x3f", 5), "field 2 = 1.0f (float)");
    b.len = 0;
    double v[2] = {1.0, 2.0};
    pb_field_packed_doubles(&b, 6, v, 2);
    CHECK(same(&b, "\x32\x10\x00\x00\x00\x00\x00\x00\xf0\x3f\x00\x00\x00\x00\x00\x00\x00\x40", 18), "packed doubles");
    b.len = 0;
    pb_field_bytes(&b, 20, NULL, 0); /* a two-byte tag, an empty message */
    CHECK(same(&b, "\xa2\x01\x00", 3), "field 20 = empty");
    free(b.s);
    return check_done("test_pb");
}
