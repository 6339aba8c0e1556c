package io.cdcassets.spark;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A row image (a JSON object) as {@code map<string,string>} of its fields' texts, the way
 * {@code from_json(image, 'map<string,string>')} reads it: strings unescaped, numbers and
 * booleans as written, objects and arrays as their JSON text, JSON null as null, the last of
 * duplicate fields kept.
 *
 * <p>{@link #scan} handles what Debezium writes, fast: the image was already read by Jackson as
 * part of the record, so it is well-formed JSON, and a field's text is a slice of the record's
 * bytes. Anything it is not sure of (an escape or a single quote in a string) makes it answer
 * {@link #UNSURE}, and {@link #parse} reads the image with Jackson instead.
 */
final class ImageScanner {
  private ImageScanner() {}

  /** The answer of {@link #scan} when the image needs the careful path. */
  static final Object UNSURE = new Object();

  // Above this many fields, duplicates are found through a hash map instead of a linear search.
  private static final int LINEAR_DEDUPE_MAX = 16;

  /** The fields of the well-formed JSON value {@code v[start, end)}, null if it is not an object. */
  static Object scan(byte[] v, int start, int end) {
    int i = ws(v, start, end);
    if (i >= end || v[i] != '{') {
      return i < end && v[i] == '[' ? null : UNSURE;
    }
    UTF8String[] keys = new UTF8String[16];
    UTF8String[] values = new UTF8String[16];
    int n = 0;
    i = ws(v, i + 1, end);
    if (i < end && v[i] == '}') {
      return map(keys, values, 0);
    }
    while (true) {
      if (i >= end || v[i] != '"') {
        return UNSURE;
      }
      int keyEnd = plainStringEnd(v, i + 1, end);
      if (keyEnd < 0) {
        return UNSURE;
      }
      UTF8String key = EnvelopeReader.slice(v, i + 1, keyEnd);
      i = ws(v, keyEnd + 1, end);
      if (i >= end || v[i] != ':') {
        return UNSURE;
      }
      i = ws(v, i + 1, end);
      if (i >= end) {
        return UNSURE;
      }
      UTF8String text;
      byte c = v[i];
      if (c == '"') {
        int stringEnd = plainStringEnd(v, i + 1, end);
        if (stringEnd < 0) {
          return UNSURE;
        }
        text = EnvelopeReader.slice(v, i + 1, stringEnd);
        i = stringEnd + 1;
      } else if (c == '{' || c == '[') {
        int nestedEnd = nestedEnd(v, i, end);
        if (nestedEnd < 0) {
          return UNSURE;
        }
        text = EnvelopeReader.slice(v, i, nestedEnd);
        i = nestedEnd;
      } else if (c == '\'') {
        return UNSURE;
      } else {
        int tokenEnd = i;
        while (tokenEnd < end && !delimiter(v[tokenEnd])) {
          tokenEnd++;
        }
        boolean isNull =
            tokenEnd - i == 4 && c == 'n' && v[i + 1] == 'u' && v[i + 2] == 'l' && v[i + 3] == 'l';
        text = isNull ? null : EnvelopeReader.slice(v, i, tokenEnd);
        i = tokenEnd;
      }
      if (n == keys.length) {
        keys = java.util.Arrays.copyOf(keys, n * 2);
        values = java.util.Arrays.copyOf(values, n * 2);
      }
      keys[n] = key;
      values[n] = text;
      n++;
      i = ws(v, i, end);
      if (i >= end) {
        return UNSURE;
      }
      if (v[i] == '}') {
        return map(keys, values, dedupe(keys, values, n));
      }
      if (v[i] != ',') {
        return UNSURE;
      }
      i = ws(v, i + 1, end);
    }
  }

  /** The image read by Jackson: the text of a JSON string holding an object, or a slice. */
  static Object parse(String text, byte[] value, int start, int end) {
    boolean sliced = start >= 0;
    try (JsonParser p =
        sliced
            ? EnvelopeReader.FACTORY.createParser(value, start, end - start)
            : EnvelopeReader.FACTORY.createParser(text)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      Map<String, UTF8String> out = new LinkedHashMap<>();
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String name = p.currentName();
        JsonToken t = p.nextToken();
        UTF8String field;
        if (t == JsonToken.VALUE_NULL) {
          field = null;
        } else if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
          // Offsets are relative to the parsed slice (bytes) or string (chars).
          if (sliced) {
            int from = start + (int) p.currentTokenLocation().getByteOffset();
            p.skipChildren();
            field = EnvelopeReader.slice(value, from, start + (int) p.currentLocation().getByteOffset());
          } else {
            int from = (int) p.currentTokenLocation().getCharOffset();
            p.skipChildren();
            field = UTF8String.fromString(text.substring(from, (int) p.currentLocation().getCharOffset()));
          }
        } else {
          field = UTF8String.fromString(p.getText());
        }
        out.put(name, field);
      }
      if (p.currentToken() != JsonToken.END_OBJECT) {
        return null;
      }
      UTF8String[] keys = new UTF8String[out.size()];
      UTF8String[] values = new UTF8String[out.size()];
      int i = 0;
      for (Map.Entry<String, UTF8String> e : out.entrySet()) {
        keys[i] = UTF8String.fromString(e.getKey());
        values[i] = e.getValue();
        i++;
      }
      return map(keys, values, i);
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }

  private static ArrayBasedMapData map(UTF8String[] keys, UTF8String[] values, int n) {
    Object[] k = new Object[n];
    Object[] v = new Object[n];
    System.arraycopy(keys, 0, k, 0, n);
    System.arraycopy(values, 0, v, 0, n);
    return new ArrayBasedMapData(new GenericArrayData(k), new GenericArrayData(v));
  }

  /** Keep the first position and the last value of each key; the number of keys left. */
  private static int dedupe(UTF8String[] keys, UTF8String[] values, int n) {
    int kept = 0;
    if (n <= LINEAR_DEDUPE_MAX) {
      outer:
      for (int i = 0; i < n; i++) {
        for (int j = 0; j < kept; j++) {
          if (keys[j].equals(keys[i])) {
            values[j] = values[i];
            continue outer;
          }
        }
        keys[kept] = keys[i];
        values[kept] = values[i];
        kept++;
      }
      return kept;
    }
    Map<UTF8String, Integer> seen = new HashMap<>(n * 2);
    for (int i = 0; i < n; i++) {
      Integer at = seen.putIfAbsent(keys[i], kept);
      if (at != null) {
        values[at] = values[i];
        continue;
      }
      keys[kept] = keys[i];
      values[kept] = values[i];
      kept++;
    }
    return kept;
  }

  private static boolean delimiter(byte c) {
    return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
  }

  private static int ws(byte[] v, int i, int end) {
    while (i < end && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r')) {
      i++;
    }
    return i;
  }

  /** The closing quote of a double-quoted string without escapes, or -1. */
  private static int plainStringEnd(byte[] v, int i, int end) {
    while (i < end) {
      byte c = v[i];
      if (c == '"') {
        return i;
      }
      if (c == '\\') {
        return -1;
      }
      i++;
    }
    return -1;
  }

  /** Just past the bracket closing the object or array at {@code i}, or -1 if unsure. */
  private static int nestedEnd(byte[] v, int i, int end) {
    int depth = 0;
    while (i < end) {
      byte c = v[i];
      if (c == '"') {
        i++;
        while (i < end && v[i] != '"') {
          i += v[i] == '\\' ? 2 : 1;
        }
      } else if (c == '\'') {
        return -1;
      } else if (c == '{' || c == '[') {
        depth++;
      } else if (c == '}' || c == ']') {
        depth--;
        if (depth == 0) {
          return i + 1;
        }
      }
      i++;
    }
    return -1;
  }
}
