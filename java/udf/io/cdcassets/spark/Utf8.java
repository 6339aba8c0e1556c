package io.cdcassets.spark;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/**
 * Whether bytes are well-formed UTF-8 (Unicode 15, table 3-7: no overlong forms, no surrogates,
 * nothing above U+10FFFF), the same rule as Spark's is_valid_utf8. Runs of ASCII are checked eight
 * bytes at a time, which is most of a Debezium record.
 */
final class Utf8 {
  private static final VarHandle LONGS =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final long HIGH_BITS = 0x8080808080808080L;

  private Utf8() {}

  static boolean isValid(byte[] b) {
    int i = 0;
    int n = b.length;
    while (i < n) {
      if (i + 8 <= n && (((long) LONGS.get(b, i)) & HIGH_BITS) == 0) {
        i += 8;
        continue;
      }
      int c = b[i] & 0xFF;
      if (c < 0x80) {
        i++;
        continue;
      }
      if (c >= 0xC2 && c <= 0xDF) {
        if (i + 1 >= n || !cont(b[i + 1])) return false;
        i += 2;
      } else if (c >= 0xE0 && c <= 0xEF) {
        if (i + 2 >= n) return false;
        int c1 = b[i + 1] & 0xFF;
        int lo = c == 0xE0 ? 0xA0 : 0x80;
        int hi = c == 0xED ? 0x9F : 0xBF;
        if (c1 < lo || c1 > hi || !cont(b[i + 2])) return false;
        i += 3;
      } else if (c >= 0xF0 && c <= 0xF4) {
        if (i + 3 >= n) return false;
        int c1 = b[i + 1] & 0xFF;
        int lo = c == 0xF0 ? 0x90 : 0x80;
        int hi = c == 0xF4 ? 0x8F : 0xBF;
        if (c1 < lo || c1 > hi || !cont(b[i + 2]) || !cont(b[i + 3])) return false;
        i += 4;
      } else {
        return false;
      }
    }
    return true;
  }

  private static boolean cont(byte x) {
    return (x & 0xC0) == 0x80;
  }
}
