/* pb.h — a write-only protobuf encoder into a Buf: varints, fixed 64/32-bit
 * fields and length-delimited fields (strings, bytes, nested messages,
 * packed repeated doubles). Enough for TensorBoard's Event, Summary and
 * HistogramProto (interp/builtins_summary.c); nothing here decodes. Why not
 * a library: the C ones are protobuf-c, which needs code generated from
 * the .proto files by protoc-c at build time, and nanopb, likewise; for
 * three messages written and never read, a hundred lines are smaller than
 * either dependency (docs/visualizing.md). */
#ifndef TFE_PB_H
#define TFE_PB_H

#include <stdint.h>
#include "util/buf.h"

/* Wire types of the tag byte (field << 3 | type). */
enum { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };

void pb_varint(Buf *b, uint64_t v);                 /* a bare varint */
void pb_tag(Buf *b, int field, int wire);
void pb_field_varint(Buf *b, int field, uint64_t v); /* int32/int64/uint64/bool/enum */
void pb_field_double(Buf *b, int field, double v);   /* fixed64, little-endian */
void pb_field_float(Buf *b, int field, float v);     /* fixed32, little-endian */
void pb_field_bytes(Buf *b, int field, const void *p, size_t n); /* string, bytes, message */
void pb_field_string(Buf *b, int field, const char *s);
/* A packed repeated double field: one length-delimited run of fixed64s. */
void pb_field_packed_doubles(Buf *b, int field, const double *v, size_t n);

#endif
