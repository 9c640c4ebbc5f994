/* pb.c — the protobuf wire format, write side only (pb.h says why by hand). */
#include <string.h>
#include "util/pb.h"

void pb_varint(Buf *b, uint64_t v)
{
    char tmp[10];
    size_t n = 0;
    do {
        unsigned char c = v & 0x7f;
        v >>= 7;
        tmp[n++] = (char)(v ? c | 0x80 : c);
    } while (v);
    buf_add(b, tmp, n);
}

void pb_tag(Buf *b, int field, int wire) { pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire); }

void pb_field_varint(Buf *b, int field, uint64_t v)
{
    pb_tag(b, field, PB_VARINT);
    pb_varint(b, v);
}

static void put_le(Buf *b, uint64_t bits, int nbytes)
{
    char tmp[8];
    for (int i = 0; i < nbytes; i++) tmp[i] = (char)(bits >> (8 * i));
    buf_add(b, tmp, (size_t)nbytes);
}

static void put_double(Buf *b, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put_le(b, bits, 8);
}

void pb_field_double(Buf *b, int field, double v)
{
    pb_tag(b, field, PB_FIXED64);
    put_double(b, v);
}

void pb_field_float(Buf *b, int field, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    pb_tag(b, field, PB_FIXED32);
    put_le(b, bits, 4);
}

void pb_field_bytes(Buf *b, int field, const void *p, size_t n)
{
    pb_tag(b, field, PB_LEN);
    pb_varint(b, n);
    if (n) buf_add(b, p, n); /* (p may be NULL when n is 0) */
}

void pb_field_string(Buf *b, int field, const char *s) { pb_field_bytes(b, field, s, strlen(s)); }

void pb_field_packed_doubles(Buf *b, int field, const double *v, size_t n)
{
    pb_tag(b, field, PB_LEN);
    pb_varint(b, 8 * (uint64_t)n);
    for (size_t i = 0; i < n; i++) put_double(b, v[i]);
}
