package io.cdcassets.spark;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.util.Arrays;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A row image (a JSON object) as its fields' names and texts, the way {@code from_json(image,
 * 'map<string,string>')} reads them: strings unescaped, numbers and booleans as written, objects
 * and arrays as their JSON text, JSON null as null. Duplicated fields are all listed, in order.
 *
 * <p>{@link #scan} handles what Debezium writes, fast: the image was already read by Jackson as
 * part of the record, so it is well-formed JSON, and a field's text is a slice of the record's
 * bytes. Anything it is not sure of (an escape or a single quote in a string) makes it answer
 * {@link #UNSURE}, and {@link #parse} reads the image with Jackson instead.
 */
final class ImageScanner {
  private ImageScanner() {}

  /** Names and texts of an image's fields, {@code n} of them. */
  static final class Fields {
    UTF8String[] keys;
    UTF8String[] values;
    int n;

    Fields(int capacity) {
      keys = new UTF8String[capacity];
      values = new UTF8String[capacity];
    }

    void add(UTF8String key, UTF8String value) {
      if (n == keys.length) {
        keys = Arrays.copyOf(keys, Math.max(2 * n, 8));
        values = Arrays.copyOf(values, keys.length);
      }
      keys[n] = key;
      values[n] = value;
      n++;
    }
  }

  /** The image is not a JSON object (from_json gives null). */
  static final Fields NOT_OBJECT = new Fields(0);

  /** The answer of {@link #scan} when the image needs the careful path. */
  static final Fields UNSURE = new Fields(0);

  /** The fields of the well-formed JSON value {@code v[start, end)}. */
  static Fields scan(byte[] v, int start, int end) {
    int i = ws(v, start, end);
    if (i >= end || v[i] != '{') {
      return i < end && v[i] == '[' ? NOT_OBJECT : UNSURE;
    }
    Fields fields = new Fields(16);
    i = ws(v, i + 1, end);
    if (i < end && v[i] == '}') {
      return fields;
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
      fields.add(key, text);
      i = ws(v, i, end);
      if (i >= end) {
        return UNSURE;
      }
      if (v[i] == '}') {
        return fields;
      }
      if (v[i] != ',') {
        return UNSURE;
      }
      i = ws(v, i + 1, end);
    }
  }

  /** The image read by Jackson: the text of a JSON string holding an object, or a slice. */
  static Fields parse(String text, byte[] value, int start, int end) {
    boolean sliced = start >= 0;
    try (JsonParser p =
        sliced
            ? EnvelopeReader.FACTORY.createParser(value, start, end - start)
            : EnvelopeReader.FACTORY.createParser(text)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return NOT_OBJECT;
      }
      Fields fields = new Fields(16);
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        UTF8String name = UTF8String.fromString(p.currentName());
        JsonToken t = p.nextToken();
        UTF8String field;
        if (t == JsonToken.VALUE_NULL) {
          field = null;
        } else if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
          // Offsets are relative to the parsed slice (bytes) or string (chars).
          if (sliced) {
            int from = start + (int) p.currentTokenLocation().getByteOffset();
            p.skipChildren();
            int to = start + (int) p.currentLocation().getByteOffset();
            field = EnvelopeReader.slice(value, from, to);
          } else {
            int from = (int) p.currentTokenLocation().getCharOffset();
            p.skipChildren();
            int to = (int) p.currentLocation().getCharOffset();
            field = UTF8String.fromString(text.substring(from, to));
          }
        } else {
          field = UTF8String.fromString(p.getText());
        }
        fields.add(name, field);
      }
      return p.currentToken() == JsonToken.END_OBJECT ? fields : NOT_OBJECT;
    } catch (IOException | RuntimeException e) {
      return NOT_OBJECT;
    }
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
