package io.cdcassets.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * One pass over a Kafka record value: UTF-8 check, the Debezium envelope (with or without an
 * embedded schema) and the row image the event applies, as Spark SQL function
 * {@code cdc_debezium_envelope(value BINARY)}.
 *
 * <p>It gives what {@code is_valid_utf8}, {@code from_json} of the envelope with the images as
 * strings, and {@code from_json} of the image as {@code map<string,string>} give together, but
 * reads the bytes once: the images are cut out of the value as the source wrote them instead of
 * being written back out as JSON by the parser (which cost a fifth of the ingest's CPU), and the
 * image's values are taken as text (strings unescaped, numbers, booleans, objects and arrays as
 * their JSON text). The Python side lists the result's fields in {@code cdc_assets.sql.decode}.
 *
 * <p>A value that is not a JSON object, or whose envelope fields have the wrong JSON type (a
 * string for ts_ms, say), gives {@code json_ok = false}, as a corrupt record of from_json would.
 */
public final class DebeziumEnvelope implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;

  // The JSON dialect of Spark's from_json defaults: single quotes and NaN/Infinity accepted.
  static final JsonFactory FACTORY =
      JsonFactory.builder()
          .enable(JsonReadFeature.ALLOW_SINGLE_QUOTES)
          .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
          .streamReadConstraints(
              StreamReadConstraints.builder()
                  .maxStringLength(Integer.MAX_VALUE)
                  .maxNumberLength(Integer.MAX_VALUE)
                  .build())
          .build();

  private static final int FIELDS = 13;
  private static final int SOURCE_FIELDS = 11;

  /** Input from_json would call a corrupt record; thrown without a stack trace. */
  private static final class Corrupt extends Exception {
    private static final long serialVersionUID = 1L;

    Corrupt() {
      super(null, null, false, false);
    }
  }

  private static final Corrupt CORRUPT = new Corrupt();

  /** A before/after value: a slice of the record (objects, arrays) or the scalar's text. */
  private static final class Image {
    String text;
    int start = -1;
    int end = -1;
  }

  private static final class Envelope {
    Image before;
    Image after;
    String op;
    String ddl;
    String tableChanges;
    String status;
    String id;
    String databaseName;
    Long tsMs;
    Row source;
  }

  @Override
  public Row call(byte[] value) {
    if (value == null) {
      return null;
    }
    if (!Utf8.isValid(value)) {
      return failed(false);
    }
    Envelope top = new Envelope();
    Envelope payload = null;
    try (JsonParser p = FACTORY.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        throw CORRUPT;
      }
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String name = p.currentName();
        JsonToken t = p.nextToken();
        if (!name.equals("payload")) {
          envelopeField(p, top, name, t, value);
        } else if (t == JsonToken.START_OBJECT) {
          payload = new Envelope();
          while (p.nextToken() == JsonToken.FIELD_NAME) {
            String inner = p.currentName();
            envelopeField(p, payload, inner, p.nextToken(), value);
          }
        } else if (t == JsonToken.VALUE_NULL) {
          payload = null;
        } else {
          throw CORRUPT;
        }
      }
    } catch (Corrupt | IOException | RuntimeException e) {
      return failed(true);
    }
    // With an embedded schema the envelope is the "payload" object.
    Envelope e = payload != null ? payload : top;
    Image applied = "d".equals(e.op) ? e.before : e.after;
    return RowFactory.create(
        true,
        true,
        e.op,
        e.tsMs,
        e.source,
        e.ddl,
        e.tableChanges,
        e.status,
        e.id,
        e.databaseName,
        text(e.before, value),
        text(e.after, value),
        applied == null ? null : imageMap(applied, value));
  }

  private static Row failed(boolean utf8) {
    Object[] fields = new Object[FIELDS];
    fields[0] = utf8;
    fields[1] = false;
    return RowFactory.create(fields);
  }

  private static String text(Image image, byte[] value) {
    if (image == null) {
      return null;
    }
    if (image.text == null) {
      image.text = utf8(value, image.start, image.end);
    }
    return image.text;
  }

  private static String utf8(byte[] value, int start, int end) {
    return new String(value, start, end - start, StandardCharsets.UTF_8);
  }

  private static void envelopeField(
      JsonParser p, Envelope env, String name, JsonToken t, byte[] value)
      throws IOException, Corrupt {
    switch (name) {
      case "before" -> env.before = image(p, t);
      case "after" -> env.after = image(p, t);
      case "op" -> env.op = string(p, t, value);
      case "ts_ms" -> env.tsMs = bigint(p, t);
      case "source" -> env.source = source(p, t, value);
      case "ddl" -> env.ddl = string(p, t, value);
      case "tableChanges" -> env.tableChanges = string(p, t, value);
      case "status" -> env.status = string(p, t, value);
      case "id" -> env.id = string(p, t, value);
      case "databaseName" -> env.databaseName = string(p, t, value);
      default -> p.skipChildren(); // "schema", "transaction" and the like are not read
    }
  }

  private static Image image(JsonParser p, JsonToken t) throws IOException {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    Image image = new Image();
    if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
      image.start = (int) p.currentTokenLocation().getByteOffset();
      p.skipChildren();
      image.end = (int) p.currentLocation().getByteOffset();
    } else {
      image.text = p.getText();
    }
    return image;
  }

  /** A string field: a JSON string unescaped, any other value as its JSON text. */
  private static String string(JsonParser p, JsonToken t, byte[] value) throws IOException {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
      int start = (int) p.currentTokenLocation().getByteOffset();
      p.skipChildren();
      return utf8(value, start, (int) p.currentLocation().getByteOffset());
    }
    return p.getText();
  }

  /** A bigint field: an integral JSON number within 64 bits, or null; anything else corrupt. */
  private static Long bigint(JsonParser p, JsonToken t) throws IOException, Corrupt {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    if (t == JsonToken.VALUE_NUMBER_INT) {
      JsonParser.NumberType type = p.getNumberType();
      if (type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG) {
        return p.getLongValue();
      }
    }
    throw CORRUPT;
  }

  /** The fields of decode.SOURCE_STRUCT, in its order. */
  private static Row source(JsonParser p, JsonToken t, byte[] value) throws IOException, Corrupt {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    if (t != JsonToken.START_OBJECT) {
      throw CORRUPT;
    }
    Object[] f = new Object[SOURCE_FIELDS];
    while (p.nextToken() == JsonToken.FIELD_NAME) {
      String name = p.currentName();
      JsonToken v = p.nextToken();
      switch (name) {
        case "ts_ms" -> f[0] = bigint(p, v);
        case "snapshot" -> f[1] = string(p, v, value);
        case "db" -> f[2] = string(p, v, value);
        case "schema" -> f[3] = string(p, v, value);
        case "table" -> f[4] = string(p, v, value);
        case "file" -> f[5] = string(p, v, value);
        case "pos" -> f[6] = bigint(p, v);
        case "row" -> f[7] = bigint(p, v);
        case "gtid" -> f[8] = string(p, v, value);
        case "lsn" -> f[9] = bigint(p, v);
        case "txId" -> f[10] = bigint(p, v);
        default -> p.skipChildren();
      }
    }
    return RowFactory.create(f);
  }

  /**
   * The image's fields as text (as from_json into map<string,string>); null when the image is
   * not a JSON object. A JSON string holding an object is parsed, as from_json would.
   */
  private static Map<String, String> imageMap(Image image, byte[] value) {
    boolean sliced = image.start >= 0;
    try (JsonParser p =
        sliced
            ? FACTORY.createParser(value, image.start, image.end - image.start)
            : FACTORY.createParser(image.text)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      Map<String, String> out = new HashMap<>();
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String name = p.currentName();
        JsonToken t = p.nextToken();
        String text;
        if (t == JsonToken.VALUE_NULL) {
          text = null;
        } else if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
          // Offsets are relative to the parsed slice (bytes) or string (chars).
          if (sliced) {
            int start = image.start + (int) p.currentTokenLocation().getByteOffset();
            p.skipChildren();
            text = utf8(value, start, image.start + (int) p.currentLocation().getByteOffset());
          } else {
            int start = (int) p.currentTokenLocation().getCharOffset();
            p.skipChildren();
            text = image.text.substring(start, (int) p.currentLocation().getCharOffset());
          }
        } else {
          text = p.getText();
        }
        out.put(name, text);
      }
      if (p.currentToken() != JsonToken.END_OBJECT) {
        return null;
      }
      return out;
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }
}
